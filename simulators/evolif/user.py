"""The EvolIF user: a three-layer tracker (topic, instruction state, one change per turn) and a renderer.

Topic layer: the dialogue stays on a topic; once it has had more than `switch_after` turns, it
switches with probability `p_switch`, to a new topic (weight `p_new`) or back to an earlier one
(weight `p_return`). Instruction layer: each topic keeps its own instruction state, at most one
constraint per group; a new topic starts with `initial_constraints` of them, a returned-to
topic gets its state back as it was. Change layer: every turn that is not a new topic applies
exactly one change, add : remove : modify = 5 : 1 : 4 by default, re-weighted over the changes
that are possible. Parameters are sampled per constraint id from the topic's keywords and
sensible ranges, never producing a pair that `conflicts` rejects.

The tracker never sees the model's replies: like EvolIF's script, the sequence of specs depends
only on the rng. Each step is O(live constraints), independent of the dialogue's length.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ifgym.core import TurnSpec, UserTurn, Verdict
from ifgym.core.catalog import LENGTH_UNITS
from ifgym.core.constraints import GROUPS, Constraint
from ifgym.core.sampling import (
    RANGE_FIELDS,
    Change,
    Ranges,
    SampleContext,
    change_one,
    forbidden_tokens,
    required_tokens,
    sample_compatible,
    title_tokens,
)
from ifgym.errors import ConfigError, IfgymError, UnknownNameError
from ifgym.llm.conversation import Steps, steps_of, twin
from ifgym.simulators.assets_io import Style, Topic, load_styles, load_topics, styles_from_json, topics_from_json
from ifgym.simulators.base import UserSimulator
from ifgym.simulators.evolif.render import (
    CHECKS,
    RESTATE,
    LLMRenderer,
    Renderer,
    RenderRequest,
    RenderResult,
    TemplateRenderer,
)

__all__ = [
    "CHANGES",
    "MOVES",
    "EvolIFTracker",
    "EvolIFUser",
    "TrackerConfig",
    "TrackerStep",
]

MOVES = ("new_topic", "continue", "return")
CHANGES = ("add", "remove", "modify")


def _pair(value: Any, name: str) -> tuple[int, int]:
    # the common case first, a tuple of two plain ints in order (every env checks eight pairs); the rest below
    if type(value) is tuple and len(value) == 2 and type(value[0]) is int and type(value[1]) is int:
        if 1 <= value[0] <= value[1]:
            return value
    elif isinstance(value, Sequence) and not isinstance(value, str):
        value = tuple(value)
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not 1 <= value[0] <= value[1]
    ):
        raise ConfigError(
            f"TrackerConfig.{name} must be a pair (low, high) of ints with 1 <= low <= high, got {value!r}"
        )
    return value


@dataclass
class TrackerConfig:
    """How the EvolIF tracker moves between topics and edits the instruction state.

    The defaults are ifgym's: neither EvolIF's paper nor its release states the switch and edit
    probabilities (the env's protocol says so). `groups=None` means all twelve groups (the env passes RULE_GROUPS
    when there is no LLM judge). Ranges are inclusive (low, high).
    """

    switch_after: int = field(default=3, metadata={"help": "a switch is possible after MORE than this many turns"})
    p_switch: float = field(default=0.8, metadata={"help": "probability of switching topic once possible"})
    p_new: float = field(default=0.4, metadata={"help": "weight of a new topic when switching"})
    p_return: float = field(default=0.6, metadata={"help": "weight of returning to an earlier topic"})
    change_weights: dict[str, float] = field(
        default_factory=lambda: {"add": 5.0, "remove": 1.0, "modify": 4.0},
        metadata={"help": "relative weights of add/remove/modify"},
    )
    initial_constraints: int = field(default=1, metadata={"help": "constraints on a new topic's first turn"})
    groups: tuple[str, ...] | None = field(default=None, metadata={"help": "constraint groups in play"})
    max_live: int | None = field(default=None, metadata={"help": "cap on live constraints per topic"})
    # The ranges params are drawn from (`ifgym.core.sampling.Ranges`, whose defaults these are).
    keywords_per_constraint: tuple[int, int] = field(
        default=Ranges.keywords_per_constraint,
        metadata={"help": "keywords in one keywords.exact_count / forbidden.words"},
    )
    keyword_count: tuple[int, int] = field(
        default=Ranges.keyword_count, metadata={"help": "times each required keyword occurs"}
    )
    disjoint_keywords: bool = field(
        default=Ranges.disjoint_keywords, metadata={"help": "forbidden and required keywords share no word"}
    )
    words: tuple[int, int] = Ranges.words
    sentences: tuple[int, int] = Ranges.sentences
    paragraphs: tuple[int, int] = Ranges.paragraphs
    characters: tuple[int, int] = Ranges.characters
    bullets: tuple[int, int] = Ranges.bullets
    upper_ratio: tuple[int, int] = Ranges.upper_ratio
    upper_ratio_step: int = Ranges.upper_ratio_step
    exact_length_units: tuple[str, ...] = field(
        default=Ranges.exact_length_units,
        metadata={"help": "length units that may use relation 'exactly' (exactly 137 words is not a fair ask)"},
    )
    sample_tries: int = field(default=8, metadata={"help": "attempts per group/constraint before giving up"})

    def __post_init__(self) -> None:
        for name in ("switch_after", "initial_constraints", "sample_tries", "upper_ratio_step"):
            value = getattr(self, name)
            low = 0 if name == "switch_after" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"TrackerConfig.{name} must be an int >= {low}, got {value!r}")
        for name in ("p_switch", "p_new", "p_return"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"TrackerConfig.{name} must be a probability in [0, 1], got {value!r}")
        if self.p_new + self.p_return <= 0:
            raise ConfigError("TrackerConfig.p_new + p_return must be > 0 (they are weights of the two switches)")
        weights = dict(self.change_weights)
        for name, w in weights.items():
            if name not in CHANGES:
                raise UnknownNameError("change", name, CHANGES)
            if not isinstance(w, int | float) or isinstance(w, bool) or w < 0 or not math.isfinite(w):
                raise ConfigError(f"TrackerConfig.change_weights[{name!r}] must be a number >= 0, got {w!r}")
        if sum(weights.values()) <= 0:
            raise ConfigError(f"TrackerConfig.change_weights must have a positive weight, got {weights!r}")
        self.change_weights = {c: float(weights.get(c, 0.0)) for c in CHANGES}
        if self.groups is not None:
            groups = tuple(self.groups)
            if not groups:
                raise ConfigError("TrackerConfig.groups must name at least one group (or be None for all)")
            for g in groups:
                if g not in GROUPS:
                    raise UnknownNameError("constraint group", g, GROUPS)
            if len(set(groups)) != len(groups):
                raise ConfigError(f"TrackerConfig.groups lists a group twice: {groups!r}")
            self.groups = groups
        if self.max_live is not None and (
            not isinstance(self.max_live, int) or isinstance(self.max_live, bool) or self.max_live < 1
        ):
            raise ConfigError(f"TrackerConfig.max_live must be None or an int >= 1, got {self.max_live!r}")
        if self.max_live is not None and self.max_live < self.initial_constraints:
            raise ConfigError(
                f"TrackerConfig.max_live ({self.max_live}) is below initial_constraints ({self.initial_constraints})"
            )
        for name in ("keywords_per_constraint", "keyword_count", "words", "sentences", "paragraphs", "characters"):
            setattr(self, name, _pair(getattr(self, name), name))
        self.bullets = _pair(self.bullets, "bullets")
        low, high = _pair(self.upper_ratio, "upper_ratio")
        if high > 100:
            raise ConfigError(f"TrackerConfig.upper_ratio must lie within 1..100, got {self.upper_ratio!r}")
        self.upper_ratio = (low, high)
        units = tuple(self.exact_length_units)
        for u in units:
            if u not in LENGTH_UNITS:
                raise UnknownNameError("length unit", u, LENGTH_UNITS)
        self.exact_length_units = units

    @property
    def ranges(self) -> Ranges:
        """The ranges params are drawn from."""
        return Ranges(**{name: getattr(self, name) for name in RANGE_FIELDS})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrackerConfig:
        """Build from a plain mapping (e.g. a Hydra node); unknown keys get a did-you-mean error."""
        names = _field_names(cls)
        for key in data:
            if key not in names:
                raise UnknownNameError("TrackerConfig field", key, names)
        return cls(**dict(data))


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    """The field names of a config dataclass (every env builds its TrackerConfig from a mapping)."""
    return frozenset(f.name for f in fields(cls))


# ---------------------------------------------------------------------------------------------
# Tracker
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrackerStep:
    """One tracker decision: where the dialogue is and the full live instruction state.

    `old`/`new` are the constraints touched by `change` (add: new; remove: old; modify: both).
    """

    turn: int
    topic: Topic
    move: str
    change: str | None
    constraints: tuple[Constraint, ...]
    old: Constraint | None
    new: Constraint | None
    turn_on_topic: int

    @property
    def changed_group(self) -> str | None:
        """The group the change touched, or None."""
        touched = self.new or self.old
        return touched.group if touched is not None else None


T = TypeVar("T")
_BANK_TABLES: dict[tuple[int, Callable[..., Any]], tuple[Any, Any]] = {}


def bank_table(bank: tuple[Any, ...], build: Callable[[tuple[Any, ...]], T]) -> T:
    """`build(bank)`, made once per bank object: every env of a run shares the loaded bank (`load_topics` caches it).

    Each episode's env built these lookups anew (about 1 ms of its reset in a run of 4-turn episodes); the
    tables are read only. Keyed by the bank's identity, the bank kept with its table so the id is not reused.
    """
    key = (id(bank), build)
    hit = _BANK_TABLES.get(key)
    if hit is None or hit[0] is not bank:
        if len(_BANK_TABLES) >= 64:  # banks built from arguments, one per env: keep a few
            _BANK_TABLES.clear()
        hit = _BANK_TABLES[key] = (bank, build(bank))
    return hit[1]


def _topic_index(topics: tuple[Topic, ...]) -> dict[str, int]:
    return {t.id: i for i, t in enumerate(topics)}


def _topic_title_tokens(topics: tuple[Topic, ...]) -> dict[str, frozenset[str]]:
    return {t.id: title_tokens(t.title) for t in topics}


def _style_index(styles: tuple[Style, ...]) -> dict[str, int]:
    return {s.id: i for i, s in enumerate(styles)}


class EvolIFTracker:
    """Topic moves, per-topic instruction states and one change per turn, all drawn from one rng."""

    def __init__(self, topics: Sequence[Topic], config: TrackerConfig | None = None):
        self.config = config if config is not None else TrackerConfig()
        self.topics = tuple(topics)
        if not self.topics:
            raise ConfigError("EvolIFTracker needs at least one topic")
        self._index = bank_table(self.topics, _topic_index)
        self._title_tokens = bank_table(self.topics, _topic_title_tokens)
        self.groups: tuple[str, ...] = self.config.groups or tuple(GROUPS)
        self._ranges = self.config.ranges
        cap = len(self.groups) if self.config.max_live is None else min(self.config.max_live, len(self.groups))
        self._cap = cap
        self._rng: np.random.Generator | None = None

    # -- episode ------------------------------------------------------------------------------
    def reset(self, rng: np.random.Generator, topic_id: str | None = None) -> TrackerStep:
        """Start an episode on `topic_id` (or a random topic) and return the first step."""
        self._rng = rng
        self._order = rng.permutation(len(self.topics))
        self._cursor = 0
        self._used: set[int] = set()
        self._visited: list[int] = []
        self._visited_pos: dict[int, int] = {}
        self._states: dict[int, tuple[Constraint, ...]] = {}
        self._turn = 0
        self._over = False
        if topic_id is not None:
            if topic_id not in self._index:
                raise UnknownNameError("topic id", topic_id, self._index)
            first = self._index[topic_id]
            self._used.add(first)
        else:
            first = self._take_new()
            assert first is not None  # the bank is non-empty (checked in __init__)
        self._current = first
        return self._arrive(first, "new_topic")

    def step(self) -> TrackerStep | None:
        """The next turn's step, or None once a switch is due and no topic is left to go to."""
        if self._rng is None:
            raise IfgymError("EvolIFTracker.step() called before reset()")
        if self._over:
            return None
        cfg, rng = self.config, self._rng
        if self._on_topic > cfg.switch_after and rng.random() < cfg.p_switch:
            can_new, can_return = self._has_new(), len(self._visited) > 1
            if can_new and can_return:
                go_new = rng.random() < cfg.p_new / (cfg.p_new + cfg.p_return)
            elif can_new or can_return:
                go_new = can_new
            else:
                self._over = True  # a single-topic bank is exhausted
                return None
            if go_new:
                index = self._take_new()
                assert index is not None  # _has_new() said so
                return self._arrive(index, "new_topic")
            return self._arrive(self._pick_return(), "return")
        self._turn += 1
        self._on_topic += 1
        topic = self.topics[self._current]
        live, change, old, new = self._change(self._live, topic)
        return self._commit(topic, "continue", live, change, old, new)

    def move(self, move: str, topic_id: str | None = None, change: str | None = None) -> TrackerStep | None:
        """One step whose topic move the caller decides (a StructFlow flow drives the composite user).

        `move`: "continue" (one change on the current topic), "new_topic" (the next unused topic,
        with its initial constraints; None when the bank is exhausted) or "return" (back to the
        earlier topic `topic_id`, its instruction state restored, then one change). `change`
        ("add" | "remove" | "modify") is tried first; when it is not possible the configured weights
        choose, as in `step`. The rng is the episode's, so the same calls give the same steps.
        """
        if self._rng is None:
            raise IfgymError("EvolIFTracker.move() called before reset()")
        if move not in MOVES:
            raise UnknownNameError("tracker move", move, MOVES)
        if change is not None and change not in CHANGES:
            raise UnknownNameError("change", change, CHANGES)
        if move == "new_topic":
            index = self._take_new()
            return None if index is None else self._arrive(index, "new_topic", change)
        if move == "return":
            index = self._index.get(topic_id) if topic_id is not None else None
            if index is None or index not in self._visited_pos or index == self._current:
                raise ConfigError(
                    f"tracker return to {topic_id!r}: give an earlier topic other than the current one "
                    f"({self.topics[self._current].id!r})"
                )
            return self._arrive(index, "return", change)
        self._turn += 1
        self._on_topic += 1
        topic = self.topics[self._current]
        live, done, old, new = self._change(self._live, topic, change)
        return self._commit(topic, "continue", live, done, old, new)

    @property
    def live(self) -> tuple[Constraint, ...]:
        """The current topic's live constraints."""
        return self._live

    @property
    def current_topic(self) -> Topic:
        """The topic the dialogue is on."""
        return self.topics[self._current]

    # -- topic layer --------------------------------------------------------------------------
    def _has_new(self) -> bool:
        while self._cursor < len(self._order) and int(self._order[self._cursor]) in self._used:
            self._cursor += 1
        return self._cursor < len(self._order)

    def _take_new(self) -> int | None:
        if not self._has_new():
            return None
        index = int(self._order[self._cursor])
        self._cursor += 1
        self._used.add(index)
        return index

    def _pick_return(self) -> int:
        # uniform over earlier topics other than the current one, in O(1)
        j = int(self._rng.integers(len(self._visited) - 1))
        if j >= self._visited_pos[self._current]:
            j += 1
        return self._visited[j]

    def _arrive(self, index: int, move: str, prefer: str | None = None) -> TrackerStep:
        self._turn += 1
        self._on_topic = 1
        self._current = index
        topic = self.topics[index]
        if index not in self._visited_pos:
            self._visited_pos[index] = len(self._visited)
            self._visited.append(index)
        if move == "new_topic":
            live: tuple[Constraint, ...] = ()
            for _ in range(self.config.initial_constraints):
                added = self._add(live, topic)
                if added is None:
                    break
                live = (*live, added)
            if not live:
                raise ConfigError(
                    f"cannot sample any constraint for topic {topic.id!r} with groups {self.groups}; "
                    "widen TrackerConfig.groups or give the topic more keywords"
                )
            return self._commit(topic, move, live, None, None, None)
        live, change, old, new = self._change(self._states[index], topic, prefer)
        return self._commit(topic, move, live, change, old, new)

    def _commit(
        self,
        topic: Topic,
        move: str,
        live: tuple[Constraint, ...],
        change: str | None,
        old: Constraint | None,
        new: Constraint | None,
    ) -> TrackerStep:
        self._live = live
        self._states[self._current] = live
        return TrackerStep(self._turn, topic, move, change, live, old, new, self._on_topic)

    # -- change layer -------------------------------------------------------------------------
    def _change(self, live: tuple[Constraint, ...], topic: Topic, prefer: str | None = None) -> Change:
        """Apply one change (`prefer` first, if given), choosing among the possible ones with re-normalised weights."""
        for weights in ({prefer: 1.0}, self.config.change_weights) if prefer else (self.config.change_weights,):
            result = change_one(
                self._rng,
                live,
                weights,
                self.groups,
                lambda others: self._context(topic, others),
                self._cap,
                self.config.sample_tries,
            )
            if result[1] is not None:
                break
        return result

    def _context(self, topic: Topic, others: Sequence[Constraint]) -> SampleContext:
        return SampleContext(
            self._ranges,
            topic.keywords,
            required_tokens(others),
            forbidden_tokens(others),
            self._title_tokens[topic.id],
        )

    def _add(self, live: tuple[Constraint, ...], topic: Topic) -> Constraint | None:
        ctx = self._context(topic, live)
        return sample_compatible(self._rng, self.groups, live, ctx, self.config.sample_tries)


# ---------------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------------

_OPTIONS = ("topic_id", "style_id")
RENDERERS = ("template", "llm")


def _topics(topics: Sequence[Topic] | Sequence[Mapping[str, Any]] | str | Path | None) -> tuple[Topic, ...]:
    if topics is None or isinstance(topics, str | Path):
        return load_topics(topics)
    items = list(topics)
    if items and all(isinstance(t, Topic) for t in items):
        return tuple(items)
    return topics_from_json(items, "topics argument")


def _styles(styles: Sequence[Style] | Sequence[Mapping[str, Any]] | str | Path | None) -> tuple[Style, ...]:
    if styles is None or isinstance(styles, str | Path):
        return load_styles(styles)
    items = list(styles)
    if items and all(isinstance(s, Style) for s in items):
        return tuple(items)
    return styles_from_json(items, "styles argument")


def _streams(rng: np.random.Generator) -> tuple[int, int, int]:
    """An episode's tracker seed, renderer seed and style draw (the script never depends on the renderer's draws)."""
    # three scalar draws: the same values and rng state as one draw of size 3, without numpy's size handling
    # (np.prod on the size: a third of the call)
    return int(rng.integers(0, 2**63 - 1)), int(rng.integers(0, 2**63 - 1)), int(rng.integers(0, 2**63 - 1))


class EvolIFUser(UserSimulator):
    """The EvolIF user: tracker decides the spec, a renderer words it.

    `renderer` is "template" (deterministic, no model), "llm" (needs `client`; `regenerations` redrafts
    before the template fallback) or any Renderer. `restate` ("change": only what is new on the
    turn, as EvolIF; "all": every live constraint on every turn) and `checks` ("rules" or "model",
    LLM renderer only) configure the named renderers (see ifgym.simulators.evolif.render). `adaptive=False`
    (default, as EvolIF, whose queries are synthesised before any model answers): the renderer sees
    the tracker's change, the topic and the user style, never the replies; `adaptive=True` also
    gives it the recent dialogue and the constraints the last reply missed, so an LLM user can
    react to them. `topics`/`styles` default to the packaged banks; a path or a list of entries may
    be given instead. `reset(rng, options)` accepts options `topic_id` and `style_id`. The user
    never ends the dialogue by itself (the env truncates at max_turns) unless the topic bank is
    exhausted, when `next` returns None.
    """

    def __init__(
        self,
        renderer: str | Renderer = "template",
        tracker_config: TrackerConfig | Mapping[str, Any] | None = None,
        client: Any = None,
        topics: Sequence[Topic] | Sequence[Mapping[str, Any]] | str | Path | None = None,
        styles: Sequence[Style] | Sequence[Mapping[str, Any]] | str | Path | None = None,
        regenerations: int = 3,
        restate: str = "change",
        adaptive: bool = False,
        checks: str = "rules",
    ):
        if restate not in RESTATE:
            raise UnknownNameError("restate", restate, RESTATE)
        if checks not in CHECKS:
            raise UnknownNameError("checks", checks, CHECKS)
        if not isinstance(adaptive, bool):
            raise ConfigError(f"adaptive must be True or False, got {adaptive!r}")
        self.restate, self.adaptive, self.checks = restate, adaptive, checks
        if isinstance(tracker_config, Mapping):
            tracker_config = TrackerConfig.from_mapping(tracker_config)
        self.topics = _topics(topics)
        self.styles = _styles(styles)
        self._style_index = bank_table(self.styles, _style_index)
        self.tracker = EvolIFTracker(self.topics, tracker_config)
        if isinstance(renderer, Renderer):
            self.renderer = renderer
            self.renderer_name = type(renderer).__name__
        elif renderer == "template":
            self.renderer, self.renderer_name = TemplateRenderer(restate), "template"
        elif renderer == "llm":
            if client is None:
                raise ConfigError("renderer='llm' needs a client for the user model (e.g. ifgym.llm.make_client)")
            self.renderer = LLMRenderer(client, regenerations=regenerations, restate=restate, checks=checks)
            self.renderer_name = "llm"
        else:
            raise UnknownNameError("renderer", renderer, RENDERERS)
        self._style: Style | None = None
        self._render_rng: np.random.Generator | None = None
        self._last: TurnSpec | None = None

    # -- the protocol, written once: `reset`/`next` make the renderer's calls blocking, `areset`/`anext` await them
    @twin
    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Pick a style and a first topic; return the first user turn."""
        step = self._start(rng, options)
        return self._finish(step, (yield from self._render(self._request(step, [], []))))

    @twin
    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """One tracker step, rendered; None when the topic bank is exhausted."""
        step = self._advance()
        if step is None:
            return None
        return self._finish(step, (yield from self._render(self._request(step, history, verdicts))))

    def _render(self, request: RenderRequest) -> Steps[RenderResult]:
        return steps_of(self.renderer, "render", request, self._render_rng)

    def constraint_counts(self, rng: np.random.Generator, turns: int) -> list[int]:
        """The live constraints on each of the script's first `turns` turns, for the episode `reset(rng)` would start.

        The tracker's script depends on the rng alone, so this plays it without the renderer (no
        model call, no text) and leaves this user's episode untouched. Fewer counts than `turns` when
        the topic bank runs out first. `rng` is consumed as `reset` consumes it.
        """
        tracker_seed, _, _ = _streams(rng)
        tracker = EvolIFTracker(self.topics, self.tracker.config)
        counts: list[int] = []
        step: TrackerStep | None = tracker.reset(np.random.default_rng(int(tracker_seed)))
        while step is not None and len(counts) < turns:
            counts.append(len(step.constraints))
            step = tracker.step() if len(counts) < turns else None
        return counts

    @property
    def stats(self) -> dict[str, int | float]:
        """The renderer's counters for the current episode (renders, llm_fallbacks, regenerations …)."""
        return dict(self.renderer.stats)

    # -- shared -------------------------------------------------------------------------------
    def _start(self, rng: np.random.Generator, options: Mapping | None) -> TrackerStep:
        options = dict(options or {})
        for key in options:
            if key not in _OPTIONS:
                raise UnknownNameError("EvolIFUser reset option", key, _OPTIONS)
        style_id = options.get("style_id")
        if style_id is not None and style_id not in self._style_index:
            raise UnknownNameError("style id", style_id, self._style_index)
        tracker_seed, render_seed, style_draw = _streams(rng)
        self._render_rng = np.random.default_rng(int(render_seed))
        index = self._style_index[style_id] if style_id is not None else int(style_draw) % len(self.styles)
        self._style = self.styles[index]
        self.renderer.reset_stats()
        return self.tracker.reset(np.random.default_rng(int(tracker_seed)), options.get("topic_id"))

    def _advance(self) -> TrackerStep | None:
        if self._last is None:
            raise IfgymError("EvolIFUser.next() called before reset()")
        return self.tracker.step()

    def _request(
        self, step: TrackerStep, history: Sequence[dict[str, str]], verdicts: Sequence[Verdict]
    ) -> RenderRequest:
        missed: tuple[str, ...] = ()
        previous = self._last.constraints if self._last is not None else ()
        if not self.adaptive:
            history = ()  # the words depend on the tracker's script alone, never on the replies
        # verdicts line up with the previous turn's constraints; anything else carries no mapping
        elif verdicts and len(verdicts) == len(previous):
            missed = tuple(c.describe() for c, v in zip(previous, verdicts, strict=True) if v.label == "no")
        return RenderRequest(
            topic=step.topic,
            move=step.move,
            change=step.change,
            constraints=step.constraints,
            old=step.old,
            new=step.new,
            turn=step.turn,
            style=self._style,
            history=history,
            missed=missed,
            forbidden_tokens=forbidden_tokens(step.constraints),
        )

    def _finish(self, step: TrackerStep, result: RenderResult) -> UserTurn:
        meta = {
            "topic_title": step.topic.title,
            "topic_domain": step.topic.domain,
            "style_id": self._style.id if self._style else None,
            "changed_group": step.changed_group,
            "turn": step.turn,
            "turn_on_topic": step.turn_on_topic,
            "old": step.old.to_json() if step.old is not None else None,
            "new": step.new.to_json() if step.new is not None else None,
            "renderer": self.renderer_name,
            "fallback": result.fallback,
            "attempts": result.attempts,
        }
        spec = TurnSpec(step.constraints, step.topic.id, step.move, step.change, meta)
        self._last = spec
        return UserTurn(result.text, spec)
