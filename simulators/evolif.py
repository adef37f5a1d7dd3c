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

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import TurnSpec, UserTurn, Verdict
from ifgym.core.catalog import EMOTIONS, EXCLUDE_MARKS, LENGTH_RELATIONS, READER_AGES, STYLES
from ifgym.core.constraints import GROUPS, Constraint, conflicts, ids_in_group
from ifgym.errors import ConfigError, IfgymError, UnknownNameError
from ifgym.simulators.assets_io import Style, Topic, load_styles, load_topics, styles_from_json, topics_from_json
from ifgym.simulators.base import UserSimulator
from ifgym.simulators.render import (
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
    "EMOJIS",
    "MOVES",
    "QUOTATION_PAIRS",
    "SAMPLERS",
    "EvolIFTracker",
    "EvolIFUser",
    "TrackerConfig",
    "TrackerStep",
]

MOVES = ("new_topic", "continue", "return")
CHANGES = ("add", "remove", "modify")

# Value pools for the samplers (facts about what reads naturally, not tuned numbers).
START_LETTERS = "ABCDEFGHILMNOPRSTW"  # letters many English words start with
END_LETTERS = "adehklmnorsty"  # letters many English words end with
EMOJIS = ("😀", "🚀", "🌟", "✅", "🔥", "🎉", "💡", "📌", "🌈", "🤔", "👍", "🍀")
# Subsets of the catalog's pools that read naturally in an English request.
QUOTATION_PAIRS = (("“", "”"), ("《", "》"), ("「", "」"), ("[", "]"), ("«", "»"), ("『", "』"), ("〈", "〉"))
INCLUDE_MARKS = ("!", "?", ";", "…", "—", "~", "@", "&", "%")


def _pair(value: Any, name: str) -> tuple[int, int]:
    if isinstance(value, Sequence) and not isinstance(value, str):
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

    Defaults follow EvolIF. `groups=None` means all twelve groups (the env passes RULE_GROUPS
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
    keywords_per_constraint: tuple[int, int] = field(
        default=(1, 3), metadata={"help": "keywords in one keywords.exact_count / forbidden.words"}
    )
    keyword_count: tuple[int, int] = field(default=(1, 3), metadata={"help": "times each required keyword occurs"})
    disjoint_keywords: bool = field(default=True, metadata={"help": "forbidden and required keywords share no word"})
    words: tuple[int, int] = (30, 300)
    sentences: tuple[int, int] = (2, 12)
    paragraphs: tuple[int, int] = (1, 5)
    characters: tuple[int, int] = (200, 1500)
    bullets: tuple[int, int] = (2, 7)
    upper_ratio: tuple[int, int] = (20, 80)
    upper_ratio_step: int = 5
    exact_length_units: tuple[str, ...] = field(
        default=("sentences", "paragraphs"),
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
            if u not in _LENGTH_UNITS.values():
                raise UnknownNameError("length unit", u, _LENGTH_UNITS.values())
        self.exact_length_units = units

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrackerConfig:
        """Build from a plain mapping (e.g. a Hydra node); unknown keys get a did-you-mean error."""
        names = {f.name for f in fields(cls)}
        for key in data:
            if key not in names:
                raise UnknownNameError("TrackerConfig field", key, names)
        return cls(**dict(data))


# ---------------------------------------------------------------------------------------------
# Parameter samplers: one per constraint id. Each returns params valid for Constraint(id, params),
# or None when the context leaves nothing to choose (e.g. every keyword is forbidden).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    config: TrackerConfig
    keywords: tuple[str, ...]
    required_tokens: frozenset[str]  # words inside required keywords of the other live constraints
    forbidden_tokens: frozenset[str]  # words inside forbidden keywords of the other live constraints
    title_tokens: frozenset[str]  # words of the topic title (a user would not forbid those)


_LENGTH_UNITS = {
    "length.words": "words",
    "length.sentences": "sentences",
    "length.paragraphs": "paragraphs",
    "length.characters": "characters",
}


_WORD = re.compile(r"\w+")


def _tokens(keyword: str) -> frozenset[str]:
    return frozenset(keyword.lower().split())


def _randint(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


def _choice(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _pick_keywords(rng: np.random.Generator, pool: Sequence[str], k: int) -> list[str]:
    """Up to k keywords from pool, no two sharing a word (so exact counts cannot contradict)."""
    chosen: list[str] = []
    used: set[str] = set()
    for i in rng.permutation(len(pool)):
        kw = pool[int(i)]
        if not (_tokens(kw) & used):
            chosen.append(kw)
            used |= _tokens(kw)
            if len(chosen) == k:
                break
    return chosen


def _required_pool(ctx: _Context) -> list[str]:
    avoid = ctx.forbidden_tokens if ctx.config.disjoint_keywords else frozenset()
    return [k for k in ctx.keywords if not (_tokens(k) & avoid)]


def _edge_keyword(rng: np.random.Generator, ctx: _Context) -> dict[str, Any] | None:
    pool = _required_pool(ctx)
    single = [k for k in pool if " " not in k]  # a single word reads better as a first/last word
    pool = single or pool
    return {"keyword": _choice(rng, pool)} if pool else None


def _exact_counts(rng: np.random.Generator, ctx: _Context) -> dict[str, Any] | None:
    chosen = _pick_keywords(rng, _required_pool(ctx), _randint(rng, ctx.config.keywords_per_constraint))
    if not chosen:
        return None
    return {"counts": {k: _randint(rng, ctx.config.keyword_count) for k in chosen}}


def _forbidden_pool(ctx: _Context) -> list[str]:
    avoid = ctx.title_tokens | (ctx.required_tokens if ctx.config.disjoint_keywords else frozenset())
    return [k for k in ctx.keywords if not (_tokens(k) & avoid)]


def _forbidden_words(rng: np.random.Generator, ctx: _Context) -> dict[str, Any] | None:
    chosen = _pick_keywords(rng, _forbidden_pool(ctx), _randint(rng, ctx.config.keywords_per_constraint))
    return {"words": chosen} if chosen else None


def _length_sampler(unit: str) -> Callable[[np.random.Generator, _Context], dict[str, Any]]:
    def sample(rng: np.random.Generator, ctx: _Context) -> dict[str, Any]:
        relations = LENGTH_RELATIONS if unit in ctx.config.exact_length_units else LENGTH_RELATIONS[:2]
        return {"relation": _choice(rng, relations), "n": _randint(rng, getattr(ctx.config, unit))}

    return sample


def _upper_ratio(rng: np.random.Generator, ctx: _Context) -> dict[str, Any]:
    low, high = ctx.config.upper_ratio
    step = ctx.config.upper_ratio_step
    values = list(range(low, high + 1, step))
    return {"percent": _choice(rng, values)}


def _fixed(params: dict[str, Any]) -> Callable[[np.random.Generator, _Context], dict[str, Any]]:
    return lambda rng, ctx: dict(params)


def _one_of(name: str, values: Sequence[Any]) -> Callable[[np.random.Generator, _Context], dict[str, Any]]:
    return lambda rng, ctx: {name: _choice(rng, values)}


def _quotation(rng: np.random.Generator, ctx: _Context) -> dict[str, Any]:
    left, right = _choice(rng, QUOTATION_PAIRS)
    return {"left": left, "right": right}


Sampler = Callable[[np.random.Generator, _Context], "dict[str, Any] | None"]

SAMPLERS: dict[str, Sampler] = {
    "start_with.letter": _one_of("letter", START_LETTERS),
    "start_with.emoji": _one_of("emoji", EMOJIS),
    "start_with.keyword": _edge_keyword,
    "start_with.quotation": _quotation,
    "end_with.letter": _one_of("letter", END_LETTERS),
    "end_with.emoji": _one_of("emoji", EMOJIS),
    "end_with.keyword": _edge_keyword,
    "end_with.quotation": _quotation,
    "format.json": _fixed({}),
    "format.html": _fixed({}),
    "format.xml": _fixed({}),
    "format.csv": _fixed({}),
    "format.markdown": _fixed({}),
    "case.upper": _fixed({}),
    "case.lower": _fixed({}),
    "case.upper_ratio": _upper_ratio,
    "punctuation.include": _one_of("mark", INCLUDE_MARKS),
    "punctuation.exclude": _one_of("mark", EXCLUDE_MARKS),
    "bullets.count": lambda rng, ctx: {"n": _randint(rng, ctx.config.bullets)},
    **{cid: _length_sampler(unit) for cid, unit in _LENGTH_UNITS.items()},
    "keywords.exact_count": _exact_counts,
    "forbidden.words": _forbidden_words,
    "emotion.tone": _one_of("emotion", EMOTIONS),
    "style.register": _one_of("style", STYLES),
    "reader_age.audience": _one_of("age", READER_AGES),
}


# "Moves" for a modify that keeps the id: change one parameter the way a user would.
def _move_length(rng: np.random.Generator, old: Constraint, ctx: _Context) -> dict[str, Any] | None:
    unit = _LENGTH_UNITS[old.id]
    params = dict(old.params)
    if rng.random() < 0.5:
        relations = LENGTH_RELATIONS if unit in ctx.config.exact_length_units else LENGTH_RELATIONS[:2]
        others = [r for r in relations if r != params["relation"]]
        params["relation"] = _choice(rng, others)
    else:
        params["n"] = _randint(rng, getattr(ctx.config, unit))
    return params


def _move_counts(rng: np.random.Generator, old: Constraint, ctx: _Context) -> dict[str, Any] | None:
    counts = dict(old.params["counts"])
    keys = list(counts)
    if rng.random() < 0.5:  # change how often one keyword must occur
        key = _choice(rng, keys)
        counts[key] = _randint(rng, ctx.config.keyword_count)
        return {"counts": counts}
    # swap one keyword for another from the topic
    key = _choice(rng, keys)
    used = frozenset().union(*(_tokens(k) for k in keys if k != key))
    pool = [k for k in _required_pool(ctx) if k not in counts and not (_tokens(k) & used)]
    if not pool:
        return None
    new_counts = {(_choice(rng, pool) if k == key else k): v for k, v in counts.items()}
    return {"counts": new_counts}


def _move_forbidden(rng: np.random.Generator, old: Constraint, ctx: _Context) -> dict[str, Any] | None:
    words = list(old.params["words"])
    high = ctx.config.keywords_per_constraint[1]
    pool = [k for k in _forbidden_pool(ctx) if k not in words]
    roll = rng.random()
    if roll < 1 / 3 and len(words) > 1:  # drop one word
        del words[int(rng.integers(len(words)))]
        return {"words": words}
    used = frozenset().union(*(_tokens(w) for w in words))
    fresh = [k for k in pool if not (_tokens(k) & used)]
    if roll < 2 / 3 and len(words) < high and fresh:  # forbid one more word
        return {"words": [*words, _choice(rng, fresh)]}
    i = int(rng.integers(len(words)))  # replace one word
    used = frozenset().union(*(_tokens(w) for j, w in enumerate(words) if j != i))
    fresh = [k for k in pool if not (_tokens(k) & used)]
    if not fresh:
        return None
    words[i] = _choice(rng, fresh)
    return {"words": words}


_MOVERS: dict[str, Callable[[np.random.Generator, Constraint, _Context], dict[str, Any] | None]] = {
    **dict.fromkeys(_LENGTH_UNITS, _move_length),
    "keywords.exact_count": _move_counts,
    "forbidden.words": _move_forbidden,
}


def _required_words(c: Constraint) -> tuple[str, ...]:
    if c.id in ("start_with.keyword", "end_with.keyword"):
        return (c.params["keyword"],)
    if c.id == "keywords.exact_count":
        return tuple(c.params["counts"])
    return ()


def forbidden_tokens(constraints: Sequence[Constraint]) -> frozenset[str]:
    """Lower-cased words inside the forbidden keywords of `constraints`."""
    out: set[str] = set()
    for c in constraints:
        if c.id == "forbidden.words":
            for w in c.params["words"]:
                out |= _tokens(w)
    return frozenset(out)


def required_tokens(constraints: Sequence[Constraint]) -> frozenset[str]:
    """Lower-cased words inside the keywords `constraints` require."""
    out: set[str] = set()
    for c in constraints:
        for w in _required_words(c):
            out |= _tokens(w)
    return frozenset(out)


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


_Change = tuple[tuple[Constraint, ...], str | None, Constraint | None, Constraint | None]


class EvolIFTracker:
    """Topic moves, per-topic instruction states and one change per turn, all drawn from one rng."""

    def __init__(self, topics: Sequence[Topic], config: TrackerConfig | None = None):
        self.config = config if config is not None else TrackerConfig()
        self.topics = tuple(topics)
        if not self.topics:
            raise ConfigError("EvolIFTracker needs at least one topic")
        self._index = {t.id: i for i, t in enumerate(self.topics)}
        self._title_tokens = {t.id: frozenset(_WORD.findall(t.title.lower())) for t in self.topics}
        self.groups: tuple[str, ...] = self.config.groups or tuple(GROUPS)
        self._ids = {g: tuple(ids_in_group(g)) for g in self.groups}
        missing = [cid for ids in self._ids.values() for cid in ids if cid not in SAMPLERS]
        if missing:
            raise ConfigError(f"no parameter sampler for constraint id(s) {missing}; add them to SAMPLERS")
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

    @property
    def live(self) -> tuple[Constraint, ...]:
        """The current topic's live constraints."""
        return self._live

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

    def _arrive(self, index: int, move: str) -> TrackerStep:
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
                live = added[0]
            if not live:
                raise ConfigError(
                    f"cannot sample any constraint for topic {topic.id!r} with groups {self.groups}; "
                    "widen TrackerConfig.groups or give the topic more keywords"
                )
            return self._commit(topic, move, live, None, None, None)
        live, change, old, new = self._change(self._states[index], topic)
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
    def _change(self, live: tuple[Constraint, ...], topic: Topic) -> _Change:
        """Apply one change, choosing among the possible ones with re-normalised weights."""
        weights = {c: w for c, w in self.config.change_weights.items() if w > 0}
        if len(live) < 2:
            weights.pop("remove", None)  # never leave the state empty
        if len(live) >= self._cap:
            weights.pop("add", None)
        if not live:
            weights.pop("modify", None)
        rng = self._rng
        while weights:
            names = list(weights)
            roll = rng.random() * sum(weights.values())
            name = names[-1]
            for candidate in names:
                roll -= weights[candidate]
                if roll < 0:
                    name = candidate
                    break
            result = {"add": self._add, "remove": self._remove, "modify": self._modify}[name](live, topic)
            if result is not None:
                return result
            del weights[name]
        return live, None, None, None

    def _context(self, topic: Topic, others: Sequence[Constraint]) -> _Context:
        return _Context(
            self.config, topic.keywords, required_tokens(others), forbidden_tokens(others), self._title_tokens[topic.id]
        )

    def _sample(self, cid: str, ctx: _Context) -> Constraint | None:
        params = SAMPLERS[cid](self._rng, ctx)
        return None if params is None else Constraint(cid, params)

    @staticmethod
    def _compatible(candidate: Constraint, others: Sequence[Constraint]) -> bool:
        return all(conflicts(candidate, other) is None for other in others)

    def _add(self, live: tuple[Constraint, ...], topic: Topic) -> _Change | None:
        rng = self._rng
        taken = {c.group for c in live}
        free = [g for g in self.groups if g not in taken]
        ctx = self._context(topic, live)
        for gi in rng.permutation(len(free)):
            ids = self._ids[free[int(gi)]]
            for _ in range(self.config.sample_tries):
                candidate = self._sample(_choice(rng, ids), ctx)
                if candidate is not None and self._compatible(candidate, live):
                    return (*live, candidate), "add", None, candidate
        return None

    def _remove(self, live: tuple[Constraint, ...], topic: Topic) -> _Change | None:
        i = int(self._rng.integers(len(live)))
        return live[:i] + live[i + 1 :], "remove", live[i], None

    def _modify(self, live: tuple[Constraint, ...], topic: Topic) -> _Change | None:
        rng = self._rng
        for li in rng.permutation(len(live)):
            i = int(li)
            old, others = live[i], live[:i] + live[i + 1 :]
            ctx = self._context(topic, others)
            siblings = [cid for cid in self._ids[old.group] if cid != old.id]
            for _ in range(self.config.sample_tries):
                # same id with a parameter moved, or another id of the same group
                if old.params and (not siblings or rng.random() < 0.5):
                    mover = _MOVERS.get(old.id)
                    params = mover(rng, old, ctx) if mover else SAMPLERS[old.id](rng, ctx)
                    new = None if params is None else Constraint(old.id, params)
                elif siblings:
                    new = self._sample(_choice(rng, siblings), ctx)
                else:
                    break  # a lone parameterless id cannot change
                if new is not None and new != old and self._compatible(new, others):
                    return live[:i] + (new,) + live[i + 1 :], "modify", old, new
        return None


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


class EvolIFUser(UserSimulator):
    """The EvolIF user: tracker decides the spec, a renderer words it.

    `renderer` is "template" (deterministic, no model), "llm" (needs `client`; `k` regenerations
    before the template fallback) or any Renderer. `restate` ("change": only what is new on the
    turn, as EvolIF; "all": every live constraint on every turn) and `checks` ("rules" or "model",
    LLM renderer only) configure the named renderers (see ifgym.simulators.render). `adaptive=False`
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
        k: int = 3,
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
        self._style_index = {s.id: i for i, s in enumerate(self.styles)}
        self.tracker = EvolIFTracker(self.topics, tracker_config)
        if isinstance(renderer, Renderer):
            self.renderer = renderer
            self.renderer_name = type(renderer).__name__
        elif renderer == "template":
            self.renderer, self.renderer_name = TemplateRenderer(restate), "template"
        elif renderer == "llm":
            if client is None:
                raise ConfigError("renderer='llm' needs a client for the user model (e.g. ifgym.llm.make_client)")
            self.renderer = LLMRenderer(client, k=k, restate=restate, checks=checks)
            self.renderer_name = "llm"
        else:
            raise UnknownNameError("renderer", renderer, RENDERERS)
        self._style: Style | None = None
        self._render_rng: np.random.Generator | None = None
        self._last: TurnSpec | None = None

    # -- sync ---------------------------------------------------------------------------------
    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Pick a style and a first topic; return the first user turn."""
        step = self._start(rng, options)
        return self._finish(step, self.renderer.render(self._request(step, [], []), self._render_rng))

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """One tracker step, rendered; None when the topic bank is exhausted."""
        step = self._advance()
        if step is None:
            return None
        request = self._request(step, history, verdicts)
        return self._finish(step, self.renderer.render(request, self._render_rng))

    # -- async --------------------------------------------------------------------------------
    async def areset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Async twin of reset (the LLM renderer awaits its calls)."""
        step = self._start(rng, options)
        return self._finish(step, await self.renderer.arender(self._request(step, [], []), self._render_rng))

    async def anext(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """Async twin of next."""
        step = self._advance()
        if step is None:
            return None
        request = self._request(step, history, verdicts)
        return self._finish(step, await self.renderer.arender(request, self._render_rng))

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
        # separate streams, so the script does not depend on how much the renderer draws
        tracker_seed, render_seed, style_draw = rng.integers(0, 2**63 - 1, size=3)
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
