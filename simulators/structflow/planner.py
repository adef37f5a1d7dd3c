"""What each generated turn is about and which rule constraints it carries; the generators' shared base."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core.constraints import RULE_GROUPS, Constraint
from ifgym.core.sampling import (
    Ranges,
    SampleContext,
    change_one,
    choice,
    forbidden_tokens,
    required_tokens,
    sample_compatible,
    title_tokens,
)
from ifgym.core.structflow import (
    USER_TYPES,
    Flow,
    user_type_name,
)
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.simulators.assets_io import Topic, load_topics
from ifgym.simulators.structflow.flows import load_templates
from ifgym.simulators.structflow.format import TASKS, TaskType

# ---------------------------------------------------------------------------------------------
# Shared by both generators: what each turn is about and which rule constraints it carries
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnPlan:
    """One turn of a generated dialogue before it is worded."""

    topic: Topic
    focus: str  # a keyword of the topic the turn is about ("" = the whole topic)
    constraints: tuple[Constraint, ...]
    changed: tuple[Constraint | None, Constraint | None] = (None, None)  # (old, new) for a refinement


def child_rng(rng: np.random.Generator) -> np.random.Generator:
    """A generator seeded by one draw of `rng`, so that what it draws does not shift the rest."""
    return np.random.default_rng(int(rng.integers(0, 2**63 - 1)))


class _Planner:
    """Topics, focus keywords and rule constraints for every turn of a flow, all from one rng.

    A turn's constraints are drawn with `sample_compatible` (a new topic or focus) or changed once
    with `change_one` (a refinement: modify one of the source turn's constraints, add one only when
    none can be modified), as the EvolIF tracker draws and changes its own.
    """

    # modify; add only when nothing can be modified (a tiny weight, so the draw is one roll as the tracker's)
    REFINE = {"modify": 1.0, "add": 1e-6}

    def __init__(self, topics: Sequence[Topic], constraints_per_turn: tuple[int, int], groups: Sequence[str]):
        self.topics = tuple(topics)
        self.per_turn = constraints_per_turn
        self.groups = tuple(groups)

    def _context(self, topic: Topic, focus: str) -> Callable[[Sequence[Constraint]], SampleContext]:
        # The focus word counts as part of the title, so it is never drawn as a forbidden word.
        title = title_tokens(f"{topic.title} {focus}")

        def context(others: Sequence[Constraint]) -> SampleContext:
            return SampleContext(Ranges(), topic.keywords, required_tokens(others), forbidden_tokens(others), title)

        return context

    def _draw_constraints(self, topic: Topic, focus: str, k: int, rng: np.random.Generator) -> tuple[Constraint, ...]:
        context, live = self._context(topic, focus), ()
        for _ in range(k):
            new = sample_compatible(rng, self.groups, live, context(live))
            if new is None:
                break
            live = (*live, new)
        if not live:
            raise ConfigError(
                f"cannot sample any constraint for topic {topic.id!r} with groups {self.groups}; "
                "widen the groups or give the topic more keywords"
            )
        return live

    def plan(self, flow: Flow, first: Topic, rng: np.random.Generator) -> list[TurnPlan]:
        rng = child_rng(rng)
        unused = [t for t in self.topics if t.id != first.id]
        order = [unused[int(i)] for i in rng.permutation(len(unused))]
        focus_pool: dict[str, list[str]] = {}

        def next_focus(topic: Topic) -> str:
            pool = focus_pool.setdefault(
                topic.id, [topic.keywords[int(i)] for i in rng.permutation(len(topic.keywords))]
            )
            return pool.pop() if pool else choice(rng, topic.keywords)

        plans: list[TurnPlan] = []
        draws: list[np.random.Generator] = []  # the rng each turn's constraints were drawn from; a refinement goes on
        for k in range(flow.n_turns):
            relation, sources = flow.relation_of(k), flow.sources_of(k)
            if relation is None:
                topic, focus = first, ""
            elif relation == "unrelatedness":
                topic = order.pop() if order else first
                focus = ""
            elif relation in ("follow-up", "recall", "expansion"):
                topic = plans[sources[0]].topic
                focus = next_focus(topic)
            elif relation == "refinement":
                topic, focus = plans[sources[0]].topic, plans[sources[0]].focus
            else:  # summary: about the sources, on the last source's topic
                topic, focus = plans[sources[-1]].topic, ""
            if relation == "refinement":
                source, draw = plans[sources[0]], draws[sources[0]]  # the source's state, changed once
                constraints, change, old, new = change_one(
                    draw, source.constraints, self.REFINE, self.groups, self._context(topic, focus), len(self.groups)
                )
                changed = (old, new) if change is not None else (None, None)
            else:
                n = int(rng.integers(self.per_turn[0], self.per_turn[1] + 1))
                draw = child_rng(rng)
                constraints, changed = self._draw_constraints(topic, focus, n, draw), (None, None)
            draws.append(draw)
            plans.append(TurnPlan(topic, focus, tuple(constraints), changed))
        return plans


def _pick_parameters(
    rng: np.random.Generator,
    templates: Sequence[Flow],
    topics: Sequence[Topic],
    tasks: Sequence[str],
    user_types: Sequence[str],
    options: Mapping[str, Any],
) -> tuple[Flow, Topic, TaskType, str]:
    """The dialogue's template, topic, task and user type: pinned by `options`, else drawn from `rng`."""
    by_id = {t.id: t for t in templates}
    topic_by_id = {t.id: t for t in topics}
    draws = [int(x) for x in rng.integers(0, 2**31 - 1, size=4)]  # always drawn, so pins do not shift the rest
    template = options.get("template")
    if template is not None and template not in by_id:
        raise UnknownNameError("structure template", template, by_id)
    topic = options.get("topic_id")
    if topic is not None and topic not in topic_by_id:
        raise UnknownNameError("topic id", topic, topic_by_id)
    task = options.get("task")
    if task is not None and task not in TASKS:
        raise UnknownNameError("task type", task, TASKS)
    user = options.get("user_type")
    if user is not None:
        user = user_type_name(user)
    return (
        by_id[template] if template is not None else templates[draws[0] % len(templates)],
        topic_by_id[topic] if topic is not None else topics[draws[1] % len(topics)],
        TASKS[task] if task is not None else TASKS[tasks[draws[2] % len(tasks)]],
        user if user is not None else user_types[draws[3] % len(user_types)],
    )


GENERATION_OPTIONS = ("template", "topic_id", "task", "user_type")


def _check_range(value: Any, name: str) -> tuple[int, int]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not 1 <= value[0] <= value[1]
    ):
        raise ConfigError(f"{name} must be a pair (low, high) of ints with 1 <= low <= high, got {value!r}")
    return int(value[0]), int(value[1])


class GeneratorBase:
    """Parameters shared by the generators: which templates, topics, tasks and user types may be drawn."""

    def __init__(
        self,
        templates: Sequence[Flow] | str | Path | None = None,
        topics: Sequence[Topic] | str | Path | None = None,
        tasks: Sequence[str] | None = None,
        user_types: Sequence[str] | None = None,
        constraints_per_turn: tuple[int, int] = (1, 2),
        groups: Sequence[str] = RULE_GROUPS,
    ):
        self.templates = (
            tuple(templates)
            if isinstance(templates, Sequence) and not isinstance(templates, str)
            else (load_templates(templates))
        )
        if not self.templates or not all(isinstance(t, Flow) for t in self.templates):
            raise ConfigError("templates must be a path, None (the packaged set) or a non-empty list of Flow objects")
        self.topics = (
            tuple(topics) if isinstance(topics, Sequence) and not isinstance(topics, str) else load_topics(topics)
        )
        if len(self.topics) < 2:
            raise ConfigError("a StructFlow generator needs at least two topics (unrelated turns change topic)")
        self.tasks = tuple(tasks) if tasks is not None else tuple(TASKS)
        for t in self.tasks:
            if t not in TASKS:
                raise UnknownNameError("task type", t, TASKS)
        if not self.tasks:
            raise ConfigError("tasks must name at least one task type (or be None for all)")
        self.user_types = tuple(user_type_name(u) for u in (user_types if user_types is not None else USER_TYPES))
        if not self.user_types:
            raise ConfigError("user_types must name at least one user type (or be None for both)")
        for g in groups:
            if g not in RULE_GROUPS:
                raise ConfigError(
                    f"generated dialogues use rule-checkable groups only; {g!r} is not one of {', '.join(RULE_GROUPS)}"
                )
        self.planner = _Planner(self.topics, _check_range(constraints_per_turn, "constraints_per_turn"), groups)

    def parameters(
        self, rng: np.random.Generator, options: Mapping[str, Any] | None = None
    ) -> tuple[Flow, Topic, TaskType, str]:
        """Draw (template, topic, task, user type), honouring pins in `options`."""
        options = dict(options or {})
        for key in options:
            if key not in GENERATION_OPTIONS:
                raise UnknownNameError("generation option", key, GENERATION_OPTIONS)
        return _pick_parameters(rng, self.templates, self.topics, self.tasks, self.user_types, options)
