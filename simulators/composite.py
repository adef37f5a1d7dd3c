"""The composite user: StructFlow's structure × EvolIF's evolving constraints × a persona, in one episode.

Three axes, each switchable:

- **structure** (a StructFlow flow drives the turns): every turn relates to earlier turns as a
  follow-up, refinement, recall, expansion, summary or unrelated turn, and a structural relation
  adds its checklist item (judged). The flow is a structure template (ifgym's, StructFlowBench's, a
  file, or given), several of them chained by unrelated turns when `min_turns` asks for more turns.
- **constraints** (EvolIF's three-layer tracker keeps a live instruction state per topic): the
  flow moves the tracker. The mapping, turn by turn:

  | flow relation | tracker move | change |
  |---|---|---|
  | first turn, unrelatedness | new topic, its initial constraints stated | none |
  | recall, follow-up, expansion, summary | `return` to the source's topic, if elsewhere; else `continue` | one, drawn |
  | refinement | `continue` (a refinement's source is the turn before) | `modify` first, else as drawn |

  (summary takes the topic of its last source.) A return restores the topic's instruction state
  as it was left, and, as in EvolIF, the user states only the change, never the restored rules.
- **persona** (how the user talks): a cooperativeness level, FlexBench's poor / general / good, and
  three traits that need no SOP: verbosity (terse / plain / verbose), hedging (none / some /
  heavy) and clarity of changes (explicit / plain / buried: the change stated first with a marker,
  as is, or last after small talk). The persona shapes the wording only: every rule keeps its
  exact values (a hedge never makes a rule optional), and the persona never sees the replies, the
  verdicts or the checklist (it gets the turn's words and its own profile, nothing else).

Each axis off reduces to its single-axis user on the same seed: structure off plays EvolIF's
script (the tracker moves by itself; `ifgym/EvolIF-v1`'s turns word for word with persona off);
constraints off plays StructFlow's offline dialogue (`ifgym/StructFlow-v0`'s generated turns, its
per-turn rule requirements included, with `min_turns` unset); persona off keeps the neutral words.
Structure and constraints both off is refused (nothing would be scored but the wording).

With `renderer="llm"` a user model writes each turn in the persona's voice, told the relation to
earlier turns and the change; its draft is checked as EvolIF's LLM user's is (the stated rule's key
values must appear; a topic change must point to the topic), regenerated up to `k` times, and
otherwise replaced by the template text (counted in `stats["llm_fallbacks"]`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import ChecklistItem, TurnSpec, UserTurn, Verdict
from ifgym.core.constraints import RULE_GROUPS
from ifgym.core.sampling import choice, forbidden_tokens
from ifgym.core.structflow import USER_TYPES, Flow, constraint_item, turn_name
from ifgym.core.wording import lower_first, sentences
from ifgym.errors import ConfigError, IfgymError, UnknownNameError
from ifgym.llm.conversation import steps_of, twin
from ifgym.simulators.assets_io import Style, Topic
from ifgym.simulators.base import UserSimulator
from ifgym.simulators.evolif import EvolIFTracker, TrackerConfig, TrackerStep
from ifgym.simulators.evolif.render import (
    CHECKS,
    LLMRenderer,
    Renderer,
    RenderRequest,
    RenderResult,
    TemplateRenderer,
)
from ifgym.simulators.flexbench import LEVELS
from ifgym.simulators.structflow import TASKS, Dialogue, TaskType, TemplateDialogueGenerator, word_turn
from ifgym.simulators.structflow.flows import chain_flows, templates_from_json

__all__ = [
    "AXES",
    "CLARITY",
    "HEDGING",
    "VERBOSITY",
    "CompositeRenderer",
    "CompositeRequest",
    "CompositeUser",
    "TalkStyle",
    "TalkStyleMix",
    "persona_words",
]

AXES = ("structure", "constraints", "persona")
VERBOSITY = ("terse", "plain", "verbose")
HEDGING = ("none", "some", "heavy")
CLARITY = ("explicit", "plain", "buried")
_TRAITS = {"levels": LEVELS, "verbosity": VERBOSITY, "hedging": HEDGING, "clarity": CLARITY}
RENDERERS = ("template", "llm")


# ---------------------------------------------------------------------------------------------
# TalkStyle: the persona axis, how one user talks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TalkStyle:
    """How one user talks (the persona axis): a cooperativeness `level` (poor / general / good) and three traits.

    The levels are FlexBench's; FlexBench's own `Persona` (a caller's profile and SOP delta) is another thing.
    """

    level: str
    verbosity: str = "plain"
    hedging: str = "none"
    clarity: str = "plain"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("level", self.level, LEVELS),
            ("verbosity", self.verbosity, VERBOSITY),
            ("hedging", self.hedging, HEDGING),
            ("clarity", self.clarity, CLARITY),
        ):
            if value not in allowed:
                raise UnknownNameError(f"persona {name}", value, allowed)

    def to_json(self) -> dict[str, str]:
        """The talk style as a plain mapping (episode meta `persona`, W&B)."""
        return {"level": self.level, "verbosity": self.verbosity, "hedging": self.hedging, "clarity": self.clarity}

    def style(self) -> Style:
        """The talk style as the LLM user's `Style` (who it is, its voice, its traits)."""
        return Style(
            id=f"composite-{self.level}-{self.verbosity}-{self.hedging}-{self.clarity}",
            persona=_LLM_PERSONA[self.level],
            traits=tuple(
                words[v] for words, v in zip(_TRAIT_WORDS, (self.verbosity, self.hedging, self.clarity), strict=True)
            ),
            voice=" ".join(
                (
                    _LLM_VOICE[self.level],
                    _LLM_VERBOSITY[self.verbosity],
                    _LLM_HEDGING[self.hedging],
                    _LLM_CLARITY[self.clarity],
                )
            ),
        )


def _weights(value: Any, allowed: Sequence[str], name: str) -> dict[str, float]:
    """A weight per option from a mapping, a list of options (equal weights) or one option."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Sequence):
        value = dict.fromkeys(value, 1.0)
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"persona_mix.{name} must be an option, a list of options or a mapping option -> weight")
    out = {}
    for key, w in value.items():
        if key not in allowed:
            raise UnknownNameError(f"persona_mix.{name} option", key, allowed)
        if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
            raise ConfigError(f"persona_mix.{name}[{key!r}] must be a weight >= 0, got {w!r}")
        out[key] = float(w)
    if sum(out.values()) <= 0:
        raise ConfigError(f"persona_mix.{name} needs a positive weight")
    return out


@dataclass(frozen=True)
class TalkStyleMix:
    """Which talk styles a task draws, one per episode: a weight per level and per trait value (default: uniform)."""

    levels: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(LEVELS, 1.0))
    verbosity: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(VERBOSITY, 1.0))
    hedging: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(HEDGING, 1.0))
    clarity: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(CLARITY, 1.0))

    def __post_init__(self) -> None:
        for name, allowed in _TRAITS.items():
            object.__setattr__(self, name, _weights(getattr(self, name), allowed, name))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> TalkStyleMix:
        """From a plain mapping (a config file's `persona_mix`); unknown keys get a did-you-mean error."""
        data = dict(data or {})
        for key in data:
            if key not in _TRAITS:
                raise UnknownNameError("persona_mix field", key, _TRAITS)
        return cls(**data)

    def draw(self, rng: np.random.Generator) -> TalkStyle:
        """One talk style; four draws from `rng` whatever the weights."""
        picks = []
        for name in _TRAITS:
            options = getattr(self, name)
            names, w = list(options), np.array(list(options.values()))
            picks.append(names[int(rng.choice(len(names), p=w / w.sum()))])
        return TalkStyle(*picks)

    def to_json(self) -> dict[str, dict[str, float]]:
        """The mix as plain mappings."""
        return {name: dict(getattr(self, name)) for name in _TRAITS}


# Wording by level. None of it names a format, a length or a word a rule could be about, and none of it
# depends on the replies: the persona speaks the same way whatever the model did.
_GREETING = {
    "good": ("Hi there, thanks for helping!", "Hello! I hope you're having a good day."),
    "general": ("Hi.", "Hello."),
    "poor": ("Right, listen.", "Okay, here's the thing."),
}
_LEAD = {
    "good": ("Thanks so much!", "Thank you, that's helpful.", "Great, thanks!"),
    "general": ("Alright.", "Okay.", "Sure."),
    "poor": ("Look,", "Right.", "Okay, whatever."),
}
_CLOSE = {
    "good": ("Thanks in advance!", "I really appreciate it."),
    "general": ("",),
    "poor": ("I don't have all day.", "Is this going to take long?", "Let's get on with it."),
}
_CONTEXT = (
    "Some background: I need this for something I'm working on this week.",
    "I'm asking because a couple of colleagues will read this too.",
    "For context, I've been thinking about this for a while and want to get it right.",
)
_HEDGE = ("I'm not sure I'm putting this well, but", "If it's not too much trouble,", "I think")
_HEDGE_TAIL = ("Does that make sense?", "I hope that isn't confusing.")
_EXPLICIT = ("Important change: {c}", "Please note what changes: {c}", "To be precise about the change: {c}")
_BURIED = ("Oh, and by the way, {c}", "Also, one small thing: {c}", "And, before I forget, {c}")

_TRAIT_WORDS = (
    {"terse": "terse", "plain": "ordinary length", "verbose": "verbose"},
    {"none": "direct", "some": "hedges a little", "heavy": "hedges a lot"},
    {"explicit": "announces changes", "plain": "states changes plainly", "buried": "buries changes at the end"},
)
_LLM_PERSONA = {
    "good": "a friendly, cooperative user",
    "general": "a plain, matter-of-fact user",
    "poor": "an impatient, uncooperative user",
}
_LLM_VOICE = {
    "good": "Polite and appreciative; thanks the assistant.",
    "general": "Polite enough and to the point.",
    "poor": "Curt and a little irritated; no pleasantries.",
}
_LLM_VERBOSITY = {
    "terse": "Writes as few words as possible.",
    "plain": "Writes ordinary-length messages.",
    "verbose": "Adds background and context to every request.",
}
_LLM_HEDGING = {
    "none": "Says what they want directly.",
    "some": "Softens requests a little (but every requirement still stands).",
    "heavy": "Hedges a lot and is unsure how to phrase things (but every requirement still stands).",
}
_LLM_CLARITY = {
    "explicit": "Announces every change of requirements clearly, first.",
    "plain": "States changes of requirements in passing, plainly.",
    "buried": "Mentions changes of requirements only at the end, as an afterthought.",
}


def persona_words(
    persona: TalkStyle | None, request: str, change: str | None, rng: np.random.Generator, *, first: bool = False
) -> str:
    """The user's message: the turn's `request` and its `change` statement, worded in the persona's way.

    `persona=None` (the persona axis off) joins them neutrally and draws nothing from `rng`. The
    persona sees only these words and its own profile: not the replies, the verdicts or the
    checklist. Every draw comes from `rng`, so the same persona stream gives the same words.
    """
    if persona is None:
        return sentences([request, change or ""])
    level = persona.level
    opener = choice(rng, _GREETING[level] if first else _LEAD[level])
    close = choice(rng, _CLOSE[level])
    context = choice(rng, _CONTEXT)
    hedge, tail = choice(rng, _HEDGE), choice(rng, _HEDGE_TAIL)
    marker = choice(rng, _EXPLICIT if persona.clarity == "explicit" else _BURIED)
    if persona.verbosity == "terse":
        opener = close = ""  # a terse user skips the pleasantries (and the grumbles)
    if persona.hedging != "none" and request:
        request = f"{hedge} {lower_first(request)}"
    parts = [opener]
    if persona.verbosity == "verbose":
        parts.append(context)
    parts.append(request)
    late = ""
    if change:
        if persona.clarity == "explicit":
            parts.append(marker.format(c=lower_first(change)))
        elif persona.clarity == "buried":
            late = marker.format(c=lower_first(change))
        else:
            parts.append(change)
    parts += [close, late]
    if persona.hedging == "heavy":
        parts.append(tail)
    return sentences(parts)


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompositeRequest(RenderRequest):
    """A composite turn to word: the EvolIF request, plus the turn's relation, its topic focus and the persona.

    `relation` is None without the structure axis (EvolIF's own wording then); "start" opens the
    dialogue. `voice` is the StructFlow user type's (0 professional, 1 casual).
    """

    relation: str | None = None
    sources: tuple[int, ...] = ()
    focus: str = ""
    task: TaskType | None = None
    voice: int = 0
    persona: TalkStyle | None = None


_STRUCTURE_TEXT = {
    "start": "",
    "unrelatedness": "This is a fresh request, unrelated to what came before.",
    "follow-up": "Build on the assistant's last answer: ask for more about {focus}.",
    "refinement": "Ask the assistant to redo its last answer with the change below.",
    "recall": "Refer back explicitly to {src} and ask about {focus}.",
    "expansion": "Ask the assistant to explore one part of {src} in detail: {focus}.",
    "summary": "Ask the assistant to bring together what it wrote in {srcs} into one overview.",
}


def structure_instruction(request: CompositeRequest) -> str:
    """The relation to earlier turns, as the LLM user is told it ("" without the structure axis)."""
    if request.relation is None:
        return ""
    src = f"its answer to message {request.sources[0] + 1}" if request.sources else ""
    srcs = ", ".join(f"message {s + 1}" for s in request.sources)
    return _STRUCTURE_TEXT[request.relation].format(focus=request.focus or "another aspect", src=src, srcs=srcs)


class CompositeRenderer(Renderer):
    """Template wording of a composite turn: StructFlow's opening for the relation, EvolIF's change, the persona.

    Without a relation (structure off) the words are EvolIF's change-only template text. The
    structural words draw from the render rng, the persona's from its own rng (`persona_rng`), so
    switching the persona off leaves every other word as it was.
    """

    def __init__(self) -> None:
        self.evolif = TemplateRenderer("change")
        self.persona_rng: np.random.Generator = np.random.default_rng(0)
        self._renders = 0

    def render(self, request: RenderRequest, rng: np.random.Generator) -> RenderResult:
        """Word one turn (see the class docstring)."""
        self._renders += 1
        req = request if isinstance(request, CompositeRequest) else CompositeRequest(**request.__dict__)
        if req.relation is None:
            base, change = self.evolif.render(req, rng).text, None
        else:
            base, change = self._structured(req, rng)
        return RenderResult(persona_words(req.persona, base, change, self.persona_rng, first=req.turn <= 1))

    @staticmethod
    def _structured(req: CompositeRequest, rng: np.random.Generator) -> tuple[str, str | None]:
        """(the StructFlow words of the turn, the sentence stating the instruction change or None)."""
        fresh = req.move == "new_topic"
        note = None if fresh else TemplateRenderer.change_note(req, rng)
        refine = ""
        if req.relation == "refinement":
            if req.change == "modify" and req.old is not None and req.new is not None:
                old = lower_first(choice(rng, req.old.phrasings()))
                refine, note = f"{choice(rng, req.new.phrasings())} rather than {old}", None  # the opening states it
            else:
                refine = "take the following change into account" if note else "write it more carefully"
        text = word_turn(
            req.relation or "start",
            req.voice,
            rng,
            topic=req.topic,
            focus=req.focus,
            sources=req.sources,
            change=refine,
            rules=req.constraints if fresh else (),
            task=req.task if fresh else None,
        )
        return text, note

    @property
    def stats(self) -> dict[str, int]:
        """{"renders": n}."""
        return {"renders": self._renders}

    def reset_stats(self) -> None:
        """Zero the counters."""
        self._renders = 0


# ---------------------------------------------------------------------------------------------
# The user
# ---------------------------------------------------------------------------------------------

_OPTIONS = ("template", "topic_id", "task", "user_type", "persona")


def _templates(templates: Any) -> Any:
    """A list of template mappings (a config file's inline flows) parsed; paths, names and Flows as given."""
    if isinstance(templates, Sequence) and not isinstance(templates, str) and templates:
        if all(isinstance(t, Mapping) for t in templates):
            return templates_from_json(list(templates), "templates argument")
    return templates


@dataclass
class _Plan:
    flow: Flow | None
    topic_of: list[str]  # topic id of each turn played
    task: TaskType
    user_type: str
    dialogue: str


class CompositeUser(UserSimulator):
    """The composite user (see the module docstring): a flow, a tracker, a persona and a renderer.

    `structure`, `constraints`, `persona` switch the axes. `templates`/`topics`/`tasks`/`user_types`/
    `constraints_per_turn` are StructFlow's generator settings (the last only matters with constraints
    off); `tracker_config` EvolIF's tracker's; `persona_mix` which talk styles are drawn; `min_turns`
    chains templates (joined by unrelated turns) until the flow has at least that many turns.
    `reset(rng, options)` accepts `template`, `topic_id`, `task`, `user_type` and `persona` (a mapping
    of TalkStyle fields) to pin the draw.
    """

    def __init__(
        self,
        *,
        structure: bool = True,
        constraints: bool = True,
        persona: bool = True,
        renderer: str = "template",
        client: Any = None,
        regenerations: int = 3,
        checks: str = "rules",
        templates: Any = None,
        topics: Sequence[Topic] | str | Path | None = None,
        tasks: Sequence[str] | None = None,
        user_types: Sequence[str] | None = None,
        constraints_per_turn: tuple[int, int] = (1, 2),
        tracker_config: TrackerConfig | Mapping[str, Any] | None = None,
        persona_mix: TalkStyleMix | Mapping[str, Any] | None = None,
        min_turns: int | None = None,
    ):
        for name, value in (("structure", structure), ("constraints", constraints), ("persona", persona)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False (an axis on or off), got {value!r}")
        if not (structure or constraints):
            raise ConfigError(
                "structure=false and constraints=false leave nothing to score but the wording: switch one of them on "
                "(FlexBench-v0 is the persona-only setting, with an SOP)"
            )
        if renderer not in RENDERERS:
            raise UnknownNameError("renderer", renderer, RENDERERS)
        if checks not in CHECKS:
            raise UnknownNameError("checks", checks, CHECKS)
        if renderer == "llm" and not constraints:
            raise ConfigError(
                "renderer='llm' words the tracker's instruction changes, so it needs constraints=true; with "
                "constraints off use env=structflow_llm (StructFlow's own LLM dialogue generator)"
            )
        if min_turns is not None and (isinstance(min_turns, bool) or not isinstance(min_turns, int) or min_turns < 1):
            raise ConfigError(f"min_turns must be None or an int >= 1, got {min_turns!r}")
        self.axes = {"structure": structure, "constraints": constraints, "persona": persona}
        if isinstance(tracker_config, Mapping):
            tracker_config = TrackerConfig.from_mapping(tracker_config)
        self.tracker_config = tracker_config or TrackerConfig(groups=tuple(RULE_GROUPS))
        self.persona_mix = (
            persona_mix if isinstance(persona_mix, TalkStyleMix) else TalkStyleMix.from_mapping(persona_mix)
        )
        self.min_turns = min_turns
        self.generator = TemplateDialogueGenerator(
            templates=_templates(templates),
            topics=topics,
            tasks=tasks,
            user_types=user_types,
            constraints_per_turn=tuple(constraints_per_turn),
            groups=tuple(g for g in (self.tracker_config.groups or RULE_GROUPS) if g in RULE_GROUPS),
        )
        self.tracker = EvolIFTracker(self.generator.topics, self.tracker_config)
        self.template = CompositeRenderer()
        if renderer == "llm":
            if client is None:
                raise ConfigError("renderer='llm' needs a client for the user model (e.g. ifgym.llm.make_client)")
            self.renderer: Renderer = LLMRenderer(
                client, regenerations=regenerations, fallback=self.template, restate="change", checks=checks
            )
        else:
            self.renderer = self.template
        self.renderer_name = renderer
        self._plan: _Plan | None = None
        self._dialogue: Dialogue | None = None
        self._persona: TalkStyle | None = None
        self._render_rng: np.random.Generator | None = None
        self._k = 0

    # -- the protocol, written once: `reset`/`next` make the renderer's calls blocking, `areset`/`anext` await them
    @twin
    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Draw the episode (flow, topic, task, user type, persona) and return its first turn."""
        first = self._start(rng, options)
        if isinstance(first, UserTurn):
            return first
        return self._finish(first, (yield from steps_of(self.renderer, "render", *self._request(first))))

    @twin
    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The next turn, or None when the flow is over. `history` and `verdicts` are never read."""
        step = self._advance()
        if step is None or isinstance(step, UserTurn):
            return step
        return self._finish(step, (yield from steps_of(self.renderer, "render", *self._request(step))))

    @property
    def stats(self) -> dict[str, int | float]:
        """The renderer's counters for this episode (renders; with the LLM user: calls, regenerations, fallbacks …)."""
        return dict(self.renderer.stats)

    def episode_meta(self) -> dict[str, Any]:
        """The episode's persona and structure (template and flow); None for an axis that is off."""
        persona, flow = self.persona, self.flow
        return {
            "persona": persona.to_json() if persona else None,
            "structure": {"template": flow.id, "flow": flow.to_json()} if flow else None,
        }

    @property
    def persona(self) -> TalkStyle | None:
        """The episode's persona (None with the persona axis off)."""
        return self._persona

    @property
    def flow(self) -> Flow | None:
        """The episode's flow (None with the structure axis off)."""
        return self._plan.flow if self._plan else None

    # -- episode set-up ---------------------------------------------------------------------------
    def _start(self, rng: np.random.Generator, options: Mapping | None) -> TrackerStep | UserTurn:
        options = dict(options or {})
        for key in options:
            if key not in _OPTIONS:
                raise UnknownNameError("composite reset option", key, _OPTIONS)
        pinned_persona = options.pop("persona", None)
        self.renderer.reset_stats()
        self._k = 0
        if not self.axes["constraints"]:  # StructFlow's offline dialogue, drawn as StructFlowUser draws it
            dialogue = self._structflow_dialogue(rng, options)
            persona_seed = int(rng.integers(0, 2**63 - 1))
        else:
            # EvolIF's streams first, drawn as EvolIFUser draws them, so structure off replays its script
            tracker_seed, render_seed, _style_draw = rng.integers(0, 2**63 - 1, size=3)
            persona_seed, plan_seed = (int(x) for x in rng.integers(0, 2**63 - 1, size=2))
            self._render_rng = np.random.default_rng(int(render_seed))
        self._persona = self._draw_persona(np.random.default_rng(persona_seed), pinned_persona)
        self.template.persona_rng = np.random.default_rng(persona_seed + 1)
        if not self.axes["constraints"]:
            self._dialogue = dialogue
            self._plan = _Plan(dialogue.flow, [], TASKS[dialogue.task_name], dialogue.user_type, dialogue.id)
            return self._structflow_turn(0)
        tracker_rng = np.random.default_rng(int(tracker_seed))
        if not self.axes["structure"]:
            for key in ("template", "task", "user_type"):
                if key in options:
                    raise ConfigError(f"reset option {key!r} needs the structure axis on")
            self._plan = _Plan(
                None, [], TASKS[self.generator.tasks[0]], USER_TYPES[1], f"evolif/{int(tracker_seed) % 10**6:06d}"
            )
            return self.tracker.reset(tracker_rng, options.get("topic_id"))
        flow, topic, task, user = self.generator.parameters(np.random.default_rng(plan_seed), options)
        flow = self._lengthen(flow, np.random.default_rng(plan_seed + 1))
        did = f"{flow.id or 'flow'}/{topic.id}/{task.name}/{user}/{plan_seed % 10**6:06d}"
        self._plan = _Plan(flow, [], task, user, did)
        return self.tracker.reset(tracker_rng, topic.id)

    def _draw_persona(self, rng: np.random.Generator, pinned: Mapping | None) -> TalkStyle | None:
        drawn = self.persona_mix.draw(rng)  # always drawn, so a pin or the axis leaves the other streams alone
        if not self.axes["persona"]:
            if pinned is not None:
                raise ConfigError("reset option 'persona' needs the persona axis on (persona=true)")
            return None
        if pinned is not None:
            if not isinstance(pinned, Mapping):
                raise ConfigError(
                    f"reset option 'persona' must map level, verbosity, hedging, clarity to values, got {pinned!r}"
                )
            return TalkStyle(**{**drawn.to_json(), **dict(pinned)})
        return drawn

    def _lengthen(self, flow: Flow, rng: np.random.Generator) -> Flow:
        flows = [flow]
        templates = self.generator.templates
        while self.min_turns is not None and sum(f.n_turns for f in flows) < self.min_turns:
            flows.append(templates[int(rng.integers(len(templates)))])
        return chain_flows(flows)

    def _structflow_dialogue(self, rng: np.random.Generator, options: Mapping) -> Dialogue:
        if self.min_turns is None:
            return self.generator.generate(rng, options)
        flow, topic, task, user = self.generator.parameters(rng, options)
        return self.generator.build(self._lengthen(flow, _draw(rng)), topic, task, user, rng)

    # -- turns ----------------------------------------------------------------------------------
    def _advance(self) -> TrackerStep | UserTurn | None:
        if self._plan is None:
            raise IfgymError("CompositeUser.next() called before reset()")
        self._k += 1
        if self._dialogue is not None and not self.axes["constraints"]:
            return self._structflow_turn(self._k) if self._k < len(self._dialogue.turns) else None
        flow = self._plan.flow
        if flow is None:
            return self.tracker.step()
        if self._k >= flow.n_turns:
            return None
        relation, sources = flow.relation_of(self._k), flow.sources_of(self._k)
        if relation == "unrelatedness":
            return self.tracker.move("new_topic")
        target = self._plan.topic_of[sources[-1] if relation == "summary" else sources[0]]
        change = "modify" if relation == "refinement" else None
        if target != self.tracker.current_topic.id:
            return self.tracker.move("return", target, change)
        return self.tracker.move("continue", change=change)

    def _structflow_turn(self, k: int) -> UserTurn:
        dialogue = self._dialogue
        spec = dialogue.spec(k)
        rules = tuple(i.constraint for i in spec.checklist if i.constraint is not None)
        meta = {**spec.meta, "persona": self._persona.to_json() if self._persona else None, "axes": dict(self.axes)}
        spec = replace(spec, constraints=rules, meta=meta)  # its own rules, first in its checklist, are its constraints
        text = dialogue.turns[k].prompt
        if self._persona is not None:
            text = persona_words(self._persona, text, None, self.template.persona_rng, first=k == 0)
        self._plan.topic_of.append(dialogue.topic)
        return UserTurn(text, spec)

    def _request(self, step: TrackerStep) -> tuple[CompositeRequest, np.random.Generator]:
        flow, k = self._plan.flow, self._k
        relation = None if flow is None else (flow.relation_of(k) or "start")
        sources = () if flow is None else flow.sources_of(k)
        focus = ""
        if relation not in (None, "start", "unrelatedness", "summary", "refinement"):
            keywords = [
                kw for kw in step.topic.keywords if not (set(kw.lower().split()) & forbidden_tokens(step.constraints))
            ]
            focus = keywords[int(self._render_rng.integers(len(keywords)))] if keywords else "the details"
        request = CompositeRequest(
            topic=step.topic,
            move=step.move,
            change=step.change,
            constraints=step.constraints,
            old=step.old,
            new=step.new,
            turn=step.turn,
            style=self._persona.style() if self._persona else None,
            forbidden_tokens=forbidden_tokens(step.constraints),
            relation=relation,
            sources=sources,
            focus=focus,
            task=self._plan.task,
            voice=USER_TYPES.index(self._plan.user_type) ^ 1 if flow is not None else 0,
            persona=self._persona,
        )
        return replace(request, structure=structure_instruction(request)), self._render_rng

    def _finish(self, step: TrackerStep, result: RenderResult) -> UserTurn:
        flow, k = self._plan.flow, self._k
        self._plan.topic_of.append(step.topic.id)
        relation = flow.relation_of(k) if flow is not None else None
        items: tuple[ChecklistItem, ...] = tuple(
            constraint_item(c, f"{self._plan.dialogue}/{turn_name(k)}/{j + 1}") for j, c in enumerate(step.constraints)
        )
        if flow is not None:
            items += flow.structural_items(k, id_prefix=f"{self._plan.dialogue}/")
        meta = {
            "topic_title": step.topic.title,
            "topic_domain": step.topic.domain,
            "tracker_move": step.move,
            "changed_group": step.changed_group,
            "turn": step.turn,
            "turn_on_topic": step.turn_on_topic,
            "old": step.old.to_json() if step.old is not None else None,
            "new": step.new.to_json() if step.new is not None else None,
            "renderer": self.renderer_name,
            "fallback": result.fallback,
            "attempts": result.attempts,
            "persona": self._persona.to_json() if self._persona else None,
            "axes": dict(self.axes),
        }
        if flow is not None:
            meta.update(
                dialogue=self._plan.dialogue,
                turn_name=turn_name(k),
                turn_index=k,
                relation=relation,
                sources=[turn_name(s) for s in flow.sources_of(k)],
                task=self._plan.task.name,
                user_type=self._plan.user_type,
                template=flow.id,
            )
        move = step.move if flow is None else (relation or "new_topic")
        spec = TurnSpec(step.constraints, step.topic.id, move, step.change, meta, checklist=items)
        return UserTurn(result.text, spec)


def _draw(rng: np.random.Generator) -> np.random.Generator:
    return np.random.default_rng(int(rng.integers(0, 2**63 - 1)))
