"""StructFlow's vocabulary: relations and flows, checklist item types and weights, tasks, user types.

Both sides use it: the simulators build dialogues from it, the rewards score them with it (the
per-type weights of WCSR, the per-task, per-user-type and per-relation breakdowns).

**Flows.** How the turns of a dialogue relate to earlier turns (StructFlowBench's six relations).

A `Flow` is a number of turns (named c1, c2, … as StructFlowBench names them) and `Edge`s, each
linking source turn(s) to target turn(s) by one `Relation`. A flow validates itself on
construction and names the edge and turn at fault:

- every edge points backwards (all its sources come before all its targets);
- follow-up and refinement come from the turn right before the target, recall from at least two
  turns back; summary (fan-in) has at least two sources; expansion (fan-out) has one source and at
  least two targets; the others link one turn to one turn;
- every turn after the first has exactly one incoming edge (its relation), the first has none.

Structure templates are flows with an id and a description (`ifgym.simulators.structflow.flows` loads them).
Each structural relation adds one checklist item per target turn (`Flow.structural_items`), weighted
2 as in the benchmark's WCSR; unrelatedness adds none.

**Items.** The checklist item types are the benchmark's: eight intra-turn constraint types and the
five structural relations that carry an item (`INTRA_TYPES`, `STRUCTURAL_TYPES`, `TYPE_WEIGHTS`).
A catalog constraint becomes an intra-turn item of the type its group counts as (`GROUP_TYPES`,
`constraint_item`).

**Tasks and users.** StructFlowBench's task types (`TASK_NAMES`; a record's `conv_task` names one
before its ':', `task_name`) and user types (`USER_TYPES`: its `user_type` 0 and 1, `user_type_name`).
What each task means and how a user words it is the simulator's (`ifgym.simulators.structflow.TASKS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ifgym.core.constraints import Constraint
from ifgym.core.turns import ChecklistItem
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError, did_you_mean

__all__ = [
    "FLOW_RELATIONS",
    "GROUP_TYPES",
    "INTRA_TYPES",
    "ITEM_TYPES",
    "STRUCTURAL_TYPES",
    "STRUCTURAL_WEIGHT",
    "TASK_NAMES",
    "TYPE_WEIGHTS",
    "USER_TYPES",
    "Edge",
    "Flow",
    "Relation",
    "constraint_item",
    "flow_from_json",
    "parse_turn_name",
    "relation",
    "task_name",
    "turn_name",
    "user_type_name",
]

# StructFlowBench's checklist item types (names as its files spell them) and their WCSR weights.
INTRA_TYPES: tuple[str, ...] = (
    "Inverse Constraint",
    "Keyword/Element Constraint",
    "Style Constraint",
    "Situation Constraint",
    "Basic Format Constraint",
    "Quantity Format Constraint",
    "Template Format Constraint",
    "Content Constraint",
)
STRUCTURAL_TYPES: tuple[str, ...] = ("follow-up", "refinement", "expansion", "summary", "recall")
ITEM_TYPES: tuple[str, ...] = INTRA_TYPES + STRUCTURAL_TYPES
STRUCTURAL_WEIGHT = 2.0
TYPE_WEIGHTS: dict[str, float] = {t: 1.0 for t in INTRA_TYPES} | {t: STRUCTURAL_WEIGHT for t in STRUCTURAL_TYPES}


@dataclass(frozen=True)
class Relation:
    """One kind of link from earlier turn(s) to a later turn.

    `sources`/`targets` bound how many turns an edge of this kind links (max None = no limit);
    `gap` bounds how far back a single source lies: "previous" (the turn right before the target),
    "earlier" (two or more turns back) or "any". `structural` relations add a checklist item to the
    target turn; `question` words it (placeholders {target} and {sources}).
    """

    name: str
    definition: str
    sources: tuple[int, int | None] = (1, 1)
    targets: tuple[int, int | None] = (1, 1)
    gap: str = "any"
    structural: bool = True
    question: str = ""

    def item_question(self, target: int, sources: Sequence[int]) -> str:
        """The yes/no question the checklist asks about `target` (0-based indexes)."""
        return self.question.format(target=turn_name(target), sources=_names(sources))


FLOW_RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation(
            "follow-up",
            "The turn builds on the answer to the turn right before it: it asks for more about what was "
            "just said, usually with new requirements of its own.",
            gap="previous",
            question="Does the reply to {target} build on the answer given in {sources}, treating the new "
            "request as a continuation of it?",
        ),
        Relation(
            "refinement",
            "The user is not satisfied with the previous answer and asks for it again with some of the "
            "previous turn's requirements changed or reworded; the topic stays the same.",
            gap="previous",
            question="Does the reply to {target} redo the answer of {sources} with the changed requirements "
            "while keeping its topic?",
        ),
        Relation(
            "recall",
            "The turn reaches back to a turn at least two turns earlier and uses what was said there as the "
            "basis or reference of a new request.",
            gap="earlier",
            question="Does the reply to {target} correctly take up what was discussed in {sources}?",
        ),
        Relation(
            "expansion",
            "One turn sets out a main theme and each of several later turns explores one subtopic of it (fan-out).",
            targets=(2, None),
            question="Does the reply to {target} treat its subject as a subtopic of the main theme set out "
            "in {sources}?",
        ),
        Relation(
            "summary",
            "The turn asks to bring the content of two or more earlier turns together into one overview (fan-in).",
            sources=(2, None),
            question="Does the reply to {target} bring together what was discussed in {sources} in one overview?",
        ),
        Relation(
            "unrelatedness",
            "The turn starts something unrelated to the earlier turns; its answer should not depend on them.",
            structural=False,
        ),
    )
}


def relation(name: str) -> Relation:
    """The relation called `name`; an unknown name gets a did-you-mean error."""
    try:
        return FLOW_RELATIONS[name]
    except (KeyError, TypeError):
        raise UnknownNameError("relation", name, FLOW_RELATIONS) from None


_TURN_NAME = re.compile(r"c([1-9]\d*)")


def turn_name(index: int) -> str:
    """StructFlowBench's name of the turn at 0-based `index`: 0 -> 'c1'."""
    return f"c{index + 1}"


def _names(indexes: Sequence[int]) -> str:
    names = [turn_name(i) for i in indexes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def parse_turn_name(name: Any) -> int:
    """The 0-based index of a turn name such as 'c3' (-> 2); anything else is a ConfigError."""
    if isinstance(name, str):
        m = _TURN_NAME.fullmatch(name.strip())
        if m:
            return int(m.group(1)) - 1
    raise ConfigError(f"turn name {name!r} is not of the form 'c1', 'c2', … (c followed by a turn number from 1)")


@dataclass(frozen=True)
class Edge:
    """Source turn(s) -> target turn(s) by one relation; turns are 0-based indexes, in the order given."""

    relation: str
    sources: tuple[int, ...]
    targets: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """StructFlowBench's edge form: {"source": [names], "target": [names], "relation": name}."""
        return {
            "source": [turn_name(i) for i in self.sources],
            "target": [turn_name(i) for i in self.targets],
            "relation": self.relation,
        }


def _span(bounds: tuple[int, int | None]) -> str:
    low, high = bounds
    if high == low:
        return f"exactly {low}"
    return f"at least {low}" if high is None else f"{low} to {high}"


@dataclass(frozen=True)
class Flow:
    """The structure of a dialogue: `n_turns` turns and the edges between them (validated on construction).

    `id` and `description` name a structure template; they play no part in validation.
    """

    n_turns: int
    edges: tuple[Edge, ...] = ()
    id: str = ""
    description: str = ""
    _incoming: dict[int, Edge] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.n_turns, bool) or not isinstance(self.n_turns, int) or self.n_turns < 1:
            raise ConfigError(f"a flow needs n_turns >= 1 (an int), got {self.n_turns!r}")
        object.__setattr__(self, "edges", tuple(self.edges))
        incoming: dict[int, Edge] = {}
        for e, edge in enumerate(self.edges):
            if not isinstance(edge, Edge):
                raise ConfigError(f"edge {e} must be an Edge, got {type(edge).__name__}")
            where = f"edge {e} ({edge.relation!r})"
            if edge.relation not in FLOW_RELATIONS:
                raise ConfigError(
                    f"edge {e}: unknown relation {edge.relation!r}.{did_you_mean(edge.relation, FLOW_RELATIONS)} "
                    f"Allowed: {', '.join(FLOW_RELATIONS)}"
                )
            rel = FLOW_RELATIONS[edge.relation]
            for role, turns, bounds in (("source", edge.sources, rel.sources), ("target", edge.targets, rel.targets)):
                low, high = bounds
                if len(turns) < low or (high is not None and len(turns) > high):
                    raise ConfigError(
                        f"{where}: a {edge.relation} edge has {_span(bounds)} {role} turn(s), got {len(turns)} "
                        f"({', '.join(turn_name(t) for t in turns) or 'none'})"
                    )
                if len(set(turns)) != len(turns):
                    raise ConfigError(f"{where}: {role} lists a turn twice: {[turn_name(t) for t in turns]}")
                for t in turns:
                    if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.n_turns:
                        raise ConfigError(f"{where}: {role} turn {t!r} is outside c1..c{self.n_turns}")
            if max(edge.sources) >= min(edge.targets):
                raise ConfigError(
                    f"{where}: edges must point backwards (every source before every target), but "
                    f"{turn_name(max(edge.sources))} is not before {turn_name(min(edge.targets))}"
                )
            for target in edge.targets:
                gap = target - edge.sources[0]
                if rel.gap == "previous" and gap != 1:
                    raise ConfigError(
                        f"{where}: a {edge.relation} links a turn to the one right before it, so "
                        f"{turn_name(target)} needs source {turn_name(target - 1)}, not {turn_name(edge.sources[0])}"
                    )
                if rel.gap == "earlier" and gap < 2:
                    raise ConfigError(
                        f"{where}: a recall reaches back at least two turns; {turn_name(edge.sources[0])} -> "
                        f"{turn_name(target)} is a follow-up or refinement"
                    )
                if target in incoming:
                    raise ConfigError(
                        f"{where}: turn {turn_name(target)} already has an incoming edge "
                        f"({incoming[target].relation!r}); a turn has exactly one relation to earlier turns"
                    )
                incoming[target] = edge
        missing = [turn_name(t) for t in range(1, self.n_turns) if t not in incoming]
        if missing:
            raise ConfigError(
                f"turn(s) {', '.join(missing)} have no incoming edge; give each turn after c1 a relation "
                "('unrelatedness' for a turn unrelated to the earlier ones)"
            )
        object.__setattr__(self, "_incoming", incoming)

    @property
    def turns(self) -> tuple[str, ...]:
        """Turn names c1..cN."""
        return tuple(turn_name(i) for i in range(self.n_turns))

    def incoming(self, turn: int) -> Edge | None:
        """The edge into `turn` (0-based), or None for the first turn."""
        self._check_turn(turn)
        return self._incoming.get(turn)

    def relation_of(self, turn: int) -> str | None:
        """The relation of `turn` to earlier turns (None for the first turn)."""
        edge = self.incoming(turn)
        return edge.relation if edge is not None else None

    def sources_of(self, turn: int) -> tuple[int, ...]:
        """The earlier turns `turn` relates to (empty for the first turn)."""
        edge = self.incoming(turn)
        return edge.sources if edge is not None else ()

    def structural_items(self, turn: int, id_prefix: str = "") -> tuple[ChecklistItem, ...]:
        """Checklist items the flow adds to `turn`: one for a structural relation, none otherwise."""
        edge = self.incoming(turn)
        if edge is None or not FLOW_RELATIONS[edge.relation].structural:
            return ()
        rel = FLOW_RELATIONS[edge.relation]
        item = ChecklistItem(
            id=f"{id_prefix}{turn_name(turn)}/{edge.relation}",
            question=rel.item_question(turn, edge.sources),
            type=edge.relation,
            kind="structural",
            weight=STRUCTURAL_WEIGHT,
            meta={"sources": [turn_name(s) for s in edge.sources], "target": turn_name(turn)},
        )
        return (item,)

    def to_json(self) -> list[dict[str, Any]]:
        """The edges in StructFlowBench's structure format."""
        return [e.to_json() for e in self.edges]

    def _check_turn(self, turn: int) -> None:
        if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < self.n_turns:
            raise ConfigError(f"turn {turn!r} is outside 0..{self.n_turns - 1} (this flow has {self.n_turns} turns)")


def _turn_list(value: Any, what: str) -> tuple[int, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{what} must be a turn name like 'c1' or a non-empty list of them, got {value!r}")
    return tuple(parse_turn_name(v) for v in items)


def flow_from_json(
    structure: Any, n_turns: int | None = None, *, where: str = "structure", id: str = "", description: str = ""
) -> Flow:
    """Build a Flow from StructFlowBench's structure list (`source`/`target` a name or a list of names).

    `n_turns` defaults to the highest turn named (1 for an empty structure). Any problem is a
    DataFormatError that starts with `where` and names the edge.
    """
    if not isinstance(structure, list):
        raise DataFormatError(f"{where}: expected a list of edges, got {type(structure).__name__}")
    edges = []
    for e, raw in enumerate(structure):
        if not isinstance(raw, Mapping):
            raise DataFormatError(f"{where}: edge {e} must be an object, got {raw!r}")
        missing = [k for k in ("source", "target", "relation") if k not in raw]
        if missing:
            raise DataFormatError(f"{where}: edge {e} is missing field(s) {missing} (needs source, target, relation)")
        if not isinstance(raw["relation"], str):
            raise DataFormatError(f"{where}: edge {e} field 'relation' must be a string, got {raw['relation']!r}")
        try:
            sources = _turn_list(raw["source"], f"edge {e} field 'source'")
            targets = _turn_list(raw["target"], f"edge {e} field 'target'")
        except ConfigError as exc:
            raise DataFormatError(f"{where}: {exc}") from None
        edges.append(Edge(raw["relation"].strip(), sources, targets))
    if n_turns is None:
        n_turns = 1 + max((t for e in edges for t in (*e.sources, *e.targets)), default=0)
    try:
        return Flow(n_turns, tuple(edges), id=id, description=description)
    except ConfigError as exc:
        raise DataFormatError(f"{where}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Tasks and user types (the benchmark's names)
# ---------------------------------------------------------------------------------------------

TASK_NAMES: tuple[str, ...] = (
    "Fact-based Q&A",
    "Open-ended Questions",
    "Professional Writing",
    "Practical Writing",
    "Creative Writing",
    "Casual Chat",
    "Task-oriented Role-playing",
)
# StructFlowBench's `user_type`: 0 = non-professional, 1 = professional.
USER_TYPES: tuple[str, ...] = ("non-professional", "professional")


def task_name(conv_task: str) -> str:
    """The task name of a `conv_task` string: the part before the first ':' ("mix" stays "mix")."""
    return conv_task.split(":", 1)[0].strip()


def user_type_name(value: Any) -> str:
    """'professional' / 'non-professional' for StructFlowBench's 1 / 0 (or either name); 'unknown' for None."""
    if value is None:
        return "unknown"
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return USER_TYPES[value]
    if isinstance(value, str) and value in USER_TYPES:
        return value
    raise ConfigError(f"user type must be 0, 1, {' or '.join(repr(u) for u in USER_TYPES)}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Catalog constraints as checklist items
# ---------------------------------------------------------------------------------------------

# Which StructFlowBench intra-turn type each EvolIF constraint group counts as.
GROUP_TYPES: dict[str, str] = {
    "start_with": "Template Format Constraint",
    "end_with": "Template Format Constraint",
    "format": "Basic Format Constraint",
    "case": "Style Constraint",
    "punctuation": "Keyword/Element Constraint",
    "bullets": "Quantity Format Constraint",
    "length": "Quantity Format Constraint",
    "keywords": "Keyword/Element Constraint",
    "forbidden": "Inverse Constraint",
    "emotion": "Style Constraint",
    "style": "Style Constraint",
    "reader_age": "Situation Constraint",
}


def _constraint_type(c: Constraint) -> str:
    if c.id == "punctuation.exclude":
        return "Inverse Constraint"
    return GROUP_TYPES[c.group]


def constraint_item(c: Constraint, item_id: str) -> ChecklistItem:
    """The checklist item for a catalog constraint: its question, its StructFlowBench type, the rule attached."""
    text = c.describe().strip().rstrip(".")
    return ChecklistItem(
        id=item_id,
        question=f"Does the reply meet this requirement: {text[:1].lower() + text[1:]}?",
        type=_constraint_type(c),
        kind="intra",
        weight=TYPE_WEIGHTS[_constraint_type(c)],
        constraint=c,
    )
