"""StructFlow dialogues: StructFlowBench's dataset format, replay with golden context, and two generators.

A `Dialogue` is a flow (see `ifgym.core.structflow`) plus one `DialogueTurn` per turn: the user's
prompt, the dataset's golden answer (if any) and the turn's checklist (`ChecklistItem`s: intra-turn
constraint items, and one structural item for a follow-up / refinement / recall / expansion /
summary turn). `Dialogue.to_json()` writes StructFlowBench's record format, so generated dialogues
can also be scored by the benchmark's own scripts; rule-checkable items carry an extra
`"constraint"` field (ignored by those scripts, read back by `parse_dataset`).

Sources of dialogues:
- `load_dataset(path)`: StructFlowBench's JSON (a list of records with `whole_conv`, `structure`,
  `conv_task`, `conv_topic`, `user_type`, …). Every record is validated up front; a bad one is a
  DataFormatError naming the record index and the field. Turns are identified by position (the
  benchmark's own scripts do the same; one record of the released file repeats turn names).
  The same function reads GraphIF's long-dialogue evaluation sets (JSON Lines of `{"id", "conv"}`,
  see `parse_graphif_record`); the format is detected from the file's content.
- `TemplateDialogueGenerator`: offline and seeded. Structure template × topic (the EvolIF topic
  bank) × task type × user type; the user's words come from phrase tables, and every intra-turn
  requirement is a rule-checkable constraint of the EvolIF catalog, so only the structural items
  need a judge. Refinement turns change one requirement of the turn before (`change_one`'s "modify",
  as the EvolIF tracker's), unrelated turns move to another topic, recall turns go back to the source's topic.
- `LLMDialogueGenerator`: the same parameters, through a model: a plan of summarized prompts per
  turn (stage "plan"), the full user prompts with their requirements in the user's voice plus
  reference answers (stage "prompts"), then one checklist-extraction call per turn (stage
  "checklist"); the structural items come from the flow. Rule-checkable requirements are sampled
  as in the offline generator and stated to the model, so they stay rule-checked; a user prompt
  that does not state them (`unstated`, a cheap lexical check) is re-asked like any invalid
  answer and counted. Each stage's answer is parsed with `json_repair` and validated; an unusable
  answer is re-asked with the reason, at most `max_retries` times, then the generation fails
  with GenerationError.

`StructFlowUser` plays dialogues turn by turn (a fixed list, or one generated per episode; a failed
LLM generation falls back to the offline generator for the same parameters and is counted).
"""

from __future__ import annotations

import ast
import functools
import json
import numbers
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.answers import json_object
from ifgym.core import ChecklistItem, TurnSpec, UserTurn, Verdict
from ifgym.core.constraints import RULE_GROUPS, Constraint
from ifgym.core.sampling import (
    Ranges,
    SampleContext,
    change_one,
    forbidden_tokens,
    required_tokens,
    sample_compatible,
    title_tokens,
)
from ifgym.core.structflow import (
    FLOW_RELATIONS,
    INTRA_TYPES,
    ITEM_TYPES,
    STRUCTURAL_TYPES,
    STRUCTURAL_WEIGHT,
    TYPE_WEIGHTS,
    USER_TYPES,
    Flow,
    constraint_item,
    flow_from_json,
    task_name,
    turn_name,
    user_type_name,
)
from ifgym.errors import ConfigError, DataFormatError, GenerationError, IfgymError, UnknownNameError, did_you_mean
from ifgym.llm import Conversation, aconverse, converse
from ifgym.simulators.assets_io import STRUCTFLOWBENCH_DIR, Topic, load_topics, packaged_or_path
from ifgym.simulators.base import UserSimulator
from ifgym.simulators.flows import load_templates

__all__ = [
    "DATASETS",
    "TASKS",
    "Dialogue",
    "DialogueTurn",
    "GenerationError",
    "LLMDialogueGenerator",
    "StructFlowUser",
    "TaskType",
    "TemplateDialogueGenerator",
    "load_dataset",
    "parse_dataset",
    "parse_graphif_record",
    "unstated",
    "word_turn",
]

Message = dict[str, str]


# ---------------------------------------------------------------------------------------------
# Task types and user types (the benchmark's names; the definitions are ours)
# ---------------------------------------------------------------------------------------------

# Datasets that ship with ifgym, by the name `load_dataset` / `dataset=` accepts in place of a path.
DATASETS = {"structflowbench": STRUCTFLOWBENCH_DIR / "StructFlowBench.json"}


@dataclass(frozen=True)
class TaskType:
    """A kind of conversation: its name as StructFlowBench spells it, a definition, and how a user frames it."""

    name: str
    definition: str
    framing: tuple[str, str]  # (professional, non-professional) sentence added to a fresh request


TASKS: dict[str, TaskType] = {
    t.name: t
    for t in (
        TaskType(
            "Fact-based Q&A",
            "The user asks questions that have definite answers and expects them short and correct.",
            ("Keep to accurate facts that can be checked.", "just the facts pls"),
        ),
        TaskType(
            "Open-ended Questions",
            "The user wants opinions, ideas or advice, where no single answer is right.",
            ("I am interested in your own view and suggestions.", "tell me what u think"),
        ),
        TaskType(
            "Professional Writing",
            "The user needs text that takes expert knowledge of a field or a formal register.",
            ("Write it as a formal piece for a professional audience.", "make it sound pro"),
        ),
        TaskType(
            "Practical Writing",
            "The user needs everyday or workplace text that is clear and brief.",
            ("Write it as a short practical text I can use directly.", "something i can actually use"),
        ),
        TaskType(
            "Creative Writing",
            "The user wants expressive, imaginative text such as a story, a poem or a scene.",
            ("Present it as a short creative piece, for example a story or a poem.", "make it creative, like a story"),
        ),
        TaskType(
            "Casual Chat",
            "The user chats freely or shares feelings, without a fixed task in mind.",
            ("Keep the tone conversational.", "just chatting"),
        ),
        TaskType(
            "Task-oriented Role-playing",
            "The user asks the assistant to act in a role (a doctor, a clerk, a teacher …) to get a task done.",
            ("Answer in the role of an experienced specialist in {domain}.", "pretend ur a {domain} expert"),
        ),
    )
}

USER_VOICES: dict[str, str] = {
    "non-professional": "writes short, casual messages, often in lowercase, with loose grammar and little "
    "politeness, and states what they want bluntly",
    "professional": "writes clear, well-formed requests in standard language with precise wording, now and "
    "then a little informal",
}


# What each intra-turn type asks of a reply (our wording; used by the checklist-extraction stage).
INTRA_DEFINITIONS: dict[str, str] = {
    "Inverse Constraint": "the reply must avoid something (a word, an element, a language, a subject)",
    "Keyword/Element Constraint": "the reply must contain a given word, phrase or element",
    "Style Constraint": "the reply must be written in a given style, tone or register",
    "Situation Constraint": "the reply must answer from a given role, identity or scenario",
    "Basic Format Constraint": "the reply must use a basic format: JSON, XML, CSV, a table, Markdown or code",
    "Quantity Format Constraint": "the reply must have a set number of words, sentences, paragraphs, characters "
    "or items",
    "Template Format Constraint": "the reply must start or end in a given way, or follow a given template",
    "Content Constraint": "the reply must cover, or stay within, given content",
}

# ---------------------------------------------------------------------------------------------
# Dialogues
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DialogueTurn:
    """One user turn: the prompt, the golden answer (None when there is none), the checklist, the plan line.

    `relation` labels the turn's relation to earlier turns when the dialogue has no structure of its
    own (GraphIF's sets); None takes it from the dialogue's flow.
    """

    prompt: str
    answer: str | None
    checklist: tuple[ChecklistItem, ...]
    plan: str = ""
    relation: str | None = None


@dataclass(frozen=True)
class Dialogue:
    """A structured dialogue: its flow, its turns, and what it is about (task, topic, user type).

    `flow` is None for a dialogue whose file states no structure (GraphIF's sets): each turn's
    `relation` label then stands in for it.
    """

    id: str
    flow: Flow | None
    turns: tuple[DialogueTurn, ...]
    task: str  # the full conv_task string
    topic: str
    user_type: str = "unknown"
    purpose: str = ""
    source: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.flow is not None and len(self.turns) != self.flow.n_turns:
            raise ConfigError(f"dialogue {self.id!r}: {len(self.turns)} turns but its flow has {self.flow.n_turns}")

    @property
    def task_name(self) -> str:
        """The task's short name (before ':')."""
        return task_name(self.task)

    @property
    def has_answers(self) -> bool:
        """True when every turn has a golden answer (needed for golden context)."""
        return all(t.answer is not None for t in self.turns)

    def spec(self, index: int) -> TurnSpec:
        """The ground truth of turn `index` (0-based): its checklist, relation, and golden answer in meta."""
        turn = self.turns[index]
        relation = turn.relation if turn.relation is not None or self.flow is None else self.flow.relation_of(index)
        meta = {
            "dialogue": self.id,
            "turn_name": turn_name(index),
            "turn_index": index,
            "relation": relation,
            "sources": [turn_name(s) for s in self.flow.sources_of(index)] if self.flow else [],
            "task": self.task_name,
            "user_type": self.user_type,
            "golden_answer": turn.answer,
            "plan": turn.plan,
        }
        return TurnSpec(
            constraints=(),
            topic=self.topic,
            # GraphIF's turns carry several relations at once ("follow-up+recall"): they are in meta["relation"]
            move="new_topic" if relation is None else relation if relation in FLOW_RELATIONS else "replay",
            change=None,
            meta=meta,
            checklist=turn.checklist,
        )

    def to_json(self) -> dict[str, Any]:
        """The dialogue as a StructFlowBench record (rule-checkable items add a "constraint" field)."""

        def item(i: ChecklistItem) -> dict[str, Any]:
            out: dict[str, Any] = {"type": i.type, "content": i.question, "explanation": i.meta.get("explanation", "")}
            if i.constraint is not None:
                out["constraint"] = i.constraint.to_json()
            return out

        record: dict[str, Any] = {
            "conv_purpose": self.purpose,
            "summarized prompts": [
                {"name": turn_name(k), "description": t.plan, "explanation": ""} for k, t in enumerate(self.turns)
            ],
            "structure": self.flow.to_json() if self.flow else [],
            "conv_topic": self.topic,
            "conv_task": self.task,
            "whole_conv": [
                {
                    "name": turn_name(k),
                    "user prompt": t.prompt,
                    "assistant answer": t.answer if t.answer is not None else "",
                    "constraints": [item(i) for i in t.checklist],
                }
                for k, t in enumerate(self.turns)
            ],
        }
        if self.user_type in USER_TYPES:
            record["user_type"] = USER_TYPES.index(self.user_type)
        return record


# ---------------------------------------------------------------------------------------------
# StructFlowBench's dataset format
# ---------------------------------------------------------------------------------------------


def _str(record: Mapping[str, Any], key: str, where: str, *, required: bool = True, empty: bool = False) -> str:
    if key not in record:
        if required:
            raise DataFormatError(f"{where}: missing field {key!r}")
        return ""
    value = record[key]
    if not isinstance(value, str) or (not empty and not value.strip()):
        kind = "a string" if empty else "a non-empty string"
        raise DataFormatError(f"{where}: field {key!r} must be {kind}, got {value!r:.80}")
    return value


def _item_type(value: Any, where: str) -> str:
    if isinstance(value, str) and value in ITEM_TYPES:
        return value
    hint = did_you_mean(value, ITEM_TYPES) if isinstance(value, str) else ""
    raise DataFormatError(
        f"{where}: {value!r} is not a StructFlowBench item type.{hint} Allowed: {', '.join(ITEM_TYPES)}"
    )


def _parse_items(raw: Any, where: str, id_prefix: str) -> tuple[ChecklistItem, ...]:
    if not isinstance(raw, list):
        raise DataFormatError(f"{where}: expected a list of checklist items, got {raw!r:.80}")
    items = []
    for j, entry in enumerate(raw):
        at = f"{where}[{j}]"
        if not isinstance(entry, Mapping):
            raise DataFormatError(f"{at}: expected an object with 'type' and 'content', got {entry!r:.80}")
        if "type" not in entry:
            raise DataFormatError(f"{at}: missing field 'type'")
        kind = _item_type(entry["type"], f"{at}['type']")
        question = _str(entry, "content", at)
        explanation = entry.get("explanation", "")
        constraint = None
        if entry.get("constraint") is not None:
            try:
                constraint = Constraint.from_json(entry["constraint"])
            except (IfgymError, ValueError, TypeError) as exc:
                raise DataFormatError(f"{at}['constraint']: {exc}") from None
        structural = kind in STRUCTURAL_TYPES
        items.append(
            ChecklistItem(
                id=f"{id_prefix}/{j + 1}",
                question=question,
                type=kind,
                kind="structural" if structural else "intra",
                weight=TYPE_WEIGHTS[kind],
                constraint=constraint,
                meta={"explanation": explanation} if isinstance(explanation, str) and explanation else {},
            )
        )
    return tuple(items)


def parse_record(record: Any, index: int, source: str = "dataset") -> Dialogue:
    """One StructFlowBench record as a Dialogue (id `sfb-<index>`); errors name the record and field."""
    where = f"{source}: record {index}"
    if not isinstance(record, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    conv = record.get("whole_conv")
    if not isinstance(conv, list) or not conv:
        raise DataFormatError(f"{where}: field 'whole_conv' must be a non-empty list of turns, got {conv!r:.80}")
    did = f"sfb-{index:03d}"
    plans: list[str] = [""] * len(conv)
    summarized = record.get("summarized prompts")
    if summarized is not None:
        if not isinstance(summarized, list):
            raise DataFormatError(f"{where}: field 'summarized prompts' must be a list, got {summarized!r:.80}")
        for k, entry in enumerate(summarized[: len(conv)]):
            if isinstance(entry, Mapping) and isinstance(entry.get("description"), str):
                plans[k] = entry["description"]
    flow = flow_from_json(record.get("structure", []), len(conv), where=f"{where} field 'structure'")
    turns = []
    for k, raw in enumerate(conv):
        at = f"{where} whole_conv[{k}]"
        if not isinstance(raw, Mapping):
            raise DataFormatError(f"{at}: expected an object, got {type(raw).__name__}")
        prompt = _str(raw, "user prompt", at)
        answer = raw.get("assistant answer")
        if answer is not None and not isinstance(answer, str):
            raise DataFormatError(f"{at}: field 'assistant answer' must be a string, got {answer!r:.80}")
        if "constraints" not in raw:
            raise DataFormatError(f"{at}: missing field 'constraints'")
        items = _parse_items(raw["constraints"], f"{at}['constraints']", f"{did}/{turn_name(k)}")
        relation = flow.relation_of(k)
        for j, item in enumerate(items):
            if item.kind == "structural" and item.type != relation:
                given = f"the relation {relation!r}" if relation else "no relation (it is the first turn)"
                raise DataFormatError(
                    f"{at}['constraints'][{j}]: a {item.type!r} item, but the structure gives {turn_name(k)} {given}"
                )
        turns.append(DialogueTurn(prompt, answer, items, plans[k]))
    user_type = record.get("user_type")
    try:
        user = user_type_name(user_type)
    except ConfigError:
        raise DataFormatError(f"{where}: field 'user_type' must be 0 or 1, got {user_type!r}") from None
    return Dialogue(
        id=did,
        flow=flow,
        turns=tuple(turns),
        task=_str(record, "conv_task", where),
        topic=_str(record, "conv_topic", where, required=False, empty=True),
        user_type=user,
        purpose=_str(record, "conv_purpose", where, required=False, empty=True),
        source=source,
        meta={"index": index},
    )


def parse_dataset(data: Any, source: str = "dataset") -> tuple[Dialogue, ...]:
    """Validate parsed StructFlowBench JSON (a list of records) and build the dialogues."""
    if not isinstance(data, list) or not data:
        raise DataFormatError(
            f"{source}: expected a non-empty JSON list of dialogue records, got {type(data).__name__}"
        )
    return tuple(parse_record(r, i, source) for i, r in enumerate(data))


# ---------------------------------------------------------------------------------------------
# GraphIF's long-dialogue evaluation sets (format: ../shared/data/graphif/FORMAT.md; no data ships)
# ---------------------------------------------------------------------------------------------

# GraphIF's checklist types. Structural ones relate a turn to earlier turns and weigh 2, as in
# StructFlowBench's WCSR; the others are about the turn itself ("Global": a constraint from an
# earlier turn that holds to the end, repeated on every later checklist) and weigh 1.
GRAPHIF_STRUCTURAL_TYPES: tuple[str, ...] = (
    "follow-up",
    "expansion",
    "refine",
    "recall",
    "summary",
    "modify",
    "anchored",
)
GRAPHIF_INTRA_TYPES: tuple[str, ...] = ("Instruction", "instruction", "Global")
GRAPHIF_TYPES: tuple[str, ...] = GRAPHIF_INTRA_TYPES + GRAPHIF_STRUCTURAL_TYPES


def _graphif_strings(value: Any, where: str) -> list[str]:
    """A checklist field: a JSON list of strings, or a string holding a Python list literal of strings."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            problem = f"a string that is not a Python list literal ({exc})"
            raise DataFormatError(f"{where}: {problem}: {value!r:.80}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataFormatError(f"{where}: expected a list of strings (or a string holding one), got {value!r:.80}")
    return value


def _graphif_relation(index: int, types: Sequence[str]) -> str | None:
    """The turn's relation label: its structural types joined by '+', "none" without one, None for turn 0."""
    structural = [t for t in dict.fromkeys(types) if t in GRAPHIF_STRUCTURAL_TYPES]
    if structural:
        return "+".join(structural)
    return None if index == 0 else "none"


def parse_graphif_record(record: Any, index: int, source: str = "dataset", task: str = "graphif") -> Dialogue:
    """One line of a GraphIF evaluation set as a Dialogue (id `graphif-<id>`); errors name the line and field.

    Each turn keeps `user` as the prompt, `sys` as the golden answer, and every checklist question
    with its own type (`check_list` and `constraint_type`, each a JSON list or a string holding a
    Python list literal, of equal length). Structural types (GRAPHIF_STRUCTURAL_TYPES) are
    structural items of weight 2, the others intra-turn items of weight 1. The dialogue has no flow
    structure (GraphIF's files state none: `flow` is None); each turn's relation is labelled by
    its structural types.
    `task` names the set in the per-task breakdown (by default the file's name).

    The weights follow StructFlowBench's convention (structural 2, the rest 1). GraphIF's own
    released scorer (evaluate/evaluate.py) weighs only lower-case `instruction` 1 and every other
    type 2, `Instruction` and `Global` included, so its WCSR on structflowbench_graphif equals
    its CSR; compare WCSR with GraphIF's published numbers with that in mind.
    """
    where = f"{source}: line {index + 1}"
    if not isinstance(record, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    conv = record.get("conv")
    if not isinstance(conv, list) or not conv:
        raise DataFormatError(f"{where}: field 'conv' must be a non-empty list of turns, got {conv!r:.80}")
    record_id = record.get("id", index)
    if isinstance(record_id, bool) or not isinstance(record_id, int | str):
        raise DataFormatError(f"{where}: field 'id' must be an int or a string, got {record_id!r:.80}")
    did = f"graphif-{record_id}"
    turns, turn_ids = [], []
    for k, raw in enumerate(conv):
        at = f"{where} conv[{k}]"
        if not isinstance(raw, Mapping):
            raise DataFormatError(f"{at}: expected an object, got {type(raw).__name__}")
        prompt = _str(raw, "user", at)
        answer = _str(raw, "sys", at, empty=True)
        turn_id = raw.get("id", k)
        digits = isinstance(turn_id, str) and turn_id.isdigit()
        if isinstance(turn_id, bool) or not (isinstance(turn_id, int) or digits):
            raise DataFormatError(f"{at}: field 'id' must be the turn index (an int or digits), got {turn_id!r}")
        turn_ids.append(int(turn_id))
        for key in ("check_list", "constraint_type"):
            if key not in raw:
                raise DataFormatError(f"{at}: missing field {key!r}")
        questions = _graphif_strings(raw["check_list"], f"{at} field 'check_list'")
        types = _graphif_strings(raw["constraint_type"], f"{at} field 'constraint_type'")
        if len(questions) != len(types):
            raise DataFormatError(
                f"{at}: {len(questions)} check_list questions but {len(types)} constraint_type entries; "
                "they must pair up one to one"
            )
        items = []
        for j, (question, kind) in enumerate(zip(questions, types, strict=True)):
            if kind not in GRAPHIF_TYPES:
                raise DataFormatError(
                    f"{at} constraint_type[{j}]: {kind!r} is not a GraphIF type.{did_you_mean(kind, GRAPHIF_TYPES)} "
                    f"Allowed: {', '.join(GRAPHIF_TYPES)}"
                )
            if not question.strip():
                raise DataFormatError(f"{at} check_list[{j}]: an empty question")
            structural = kind in GRAPHIF_STRUCTURAL_TYPES
            items.append(
                ChecklistItem(
                    id=f"{did}/{turn_name(k)}/{j + 1}",
                    question=question,
                    type=kind,
                    kind="structural" if structural else "intra",
                    weight=STRUCTURAL_WEIGHT if structural else 1.0,
                )
            )
        turns.append(DialogueTurn(prompt, answer, tuple(items), relation=_graphif_relation(k, types)))
    return Dialogue(
        id=did,
        flow=None,
        turns=tuple(turns),
        task=task,
        topic="",
        source=source,
        meta={"index": index, "format": "graphif", "record_id": record_id, "turn_ids": turn_ids},
    )


def _parse_graphif(text: str, path: str) -> tuple[Dialogue, ...]:
    task = Path(path).stem
    dialogues = []
    for lineno, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            problem = f"invalid JSON ({exc.msg} at column {exc.colno})"
            raise DataFormatError(f"{path}: line {lineno + 1}: {problem}") from None
        dialogues.append(parse_graphif_record(record, lineno, path, task))
    if not dialogues:
        raise DataFormatError(f"{path}: no dialogues")
    ids = [d.id for d in dialogues]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise DataFormatError(f"{path}: dialogue ids repeat ({', '.join(repeated)}); each line needs its own 'id'")
    return tuple(dialogues)


def _looks_like_graphif(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(record, Mapping) and "conv" in record


@functools.lru_cache(maxsize=4)
def _load_dataset(path: str, mtime_ns: int, size: int) -> tuple[Dialogue, ...]:
    text = Path(path).read_text(encoding="utf-8")
    if _looks_like_graphif(text):
        return _parse_graphif(text, path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(
            f"{path}: neither StructFlowBench's JSON (a list of records with 'whole_conv') nor GraphIF's JSON Lines "
            f"(one {{'id', 'conv'}} object per line): invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    return parse_dataset(data, path)


def load_dataset(path: str | Path) -> tuple[Dialogue, ...]:
    """A dataset as dialogues: a packaged one by name (`DATASETS`), or a file in StructFlowBench's or GraphIF's format.

    The format is detected: a JSON list of StructFlowBench records, or JSON Lines of GraphIF
    dialogues (`{"id", "conv"}` per line, see `parse_graphif_record`). Cached while the file is unchanged.
    """
    p = packaged_or_path(path, DATASETS, "dataset")
    try:
        stat = p.stat()
    except FileNotFoundError:
        raise DataFormatError(f"{p}: no such file (pass a path, or a packaged name: {', '.join(DATASETS)})") from None
    return _load_dataset(str(p), stat.st_mtime_ns, stat.st_size)


# ---------------------------------------------------------------------------------------------
# Shared by both generators: what each turn is about and which rule constraints it carries
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TurnPlan:
    """One turn of a generated dialogue before it is worded."""

    topic: Topic
    focus: str  # a keyword of the topic the turn is about ("" = the whole topic)
    constraints: tuple[Constraint, ...]
    changed: tuple[Constraint | None, Constraint | None] = (None, None)  # (old, new) for a refinement


def _draw(rng: np.random.Generator) -> np.random.Generator:
    return np.random.default_rng(int(rng.integers(0, 2**63 - 1)))


def _choice(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


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

    def plan(self, flow: Flow, first: Topic, rng: np.random.Generator) -> list[_TurnPlan]:
        rng = _draw(rng)
        unused = [t for t in self.topics if t.id != first.id]
        order = [unused[int(i)] for i in rng.permutation(len(unused))]
        focus_pool: dict[str, list[str]] = {}

        def next_focus(topic: Topic) -> str:
            pool = focus_pool.setdefault(
                topic.id, [topic.keywords[int(i)] for i in rng.permutation(len(topic.keywords))]
            )
            return pool.pop() if pool else _choice(rng, topic.keywords)

        plans: list[_TurnPlan] = []
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
                draw = _draw(rng)
                constraints, changed = self._draw_constraints(topic, focus, n, draw), (None, None)
            draws.append(draw)
            plans.append(_TurnPlan(topic, focus, tuple(constraints), changed))
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


class _GeneratorBase:
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


# ---------------------------------------------------------------------------------------------
# The offline generator
# ---------------------------------------------------------------------------------------------

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _answer_ref(turn: int) -> str:
    return f"your {_ORDINALS[turn]} answer" if turn < len(_ORDINALS) else f"your answer to message {turn + 1}"


def _answers_ref(turns: Sequence[int]) -> str:
    names = [_ORDINALS[t] if t < len(_ORDINALS) else f"#{t + 1}" for t in turns]
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"your {joined} answers"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# Openings per relation, (professional, non-professional). Placeholders: {title} {focus} {src} {srcs} {change}.
_OPENINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "start": (
        ("{title}.", "I would like your help with the following: {title_lc}.", "Here is my request: {title_lc}."),
        ("{title_lc} pls", "hey can u help. {title_lc}", "need this: {title_lc}"),
    ),
    "follow-up": (
        (
            "Building on your last answer, tell me more about {focus}.",
            "Following on from that, please go deeper into {focus}.",
            "Thank you. Continuing from your answer, what can you tell me about {focus}?",
        ),
        ("ok and what about {focus}?", "cool. more on {focus} pls", "hmm go on, {focus}?"),
    ),
    "refinement": (
        (
            "That is not quite what I needed. Please rewrite your previous answer with one change: {change}.",
            "Please redo your last answer, but this time {change}.",
        ),
        ("nah not like that. redo it but {change}", "try again and {change}"),
    ),
    "recall": (
        (
            "Going back to {src}, I have a further question about {focus}.",
            "Returning to what you said in {src}, please connect it with {focus}.",
        ),
        ("wait back to {src}, what about {focus}", "going back to {src}. {focus}?"),
    ),
    "expansion": (
        (
            "Now let us look at one part of this in detail: {focus}.",
            "Next, please explore {focus} as one aspect of this topic.",
        ),
        ("now just the {focus} part", "ok zoom in on {focus}"),
    ),
    "summary": (
        (
            "Please bring together what you wrote in {srcs} into one overview.",
            "Summarize our discussion from {srcs} in a single coherent answer.",
        ),
        ("sum up {srcs} for me", "give me a recap of {srcs}"),
    ),
    "unrelatedness": (
        ("On a different subject: {title_lc}.", "Something unrelated now: {title_lc}."),
        ("different thing. {title_lc}", "new question, {title_lc}"),
    ),
}
_RULES = (
    ("Please {clauses}.", "For this answer, {clauses}.", "Make sure you {clauses}."),
    ("also {clauses}", "and {clauses} ok", "{clauses} pls"),
)
_NO_CHANGE = ("write it more carefully", "do it better")


def _join(clauses: Sequence[str]) -> str:
    clauses = list(clauses)
    return clauses[0] if len(clauses) == 1 else ", ".join(clauses[:-1]) + " and " + clauses[-1]


class TemplateDialogueGenerator(_GeneratorBase):
    """Offline StructFlow dialogues: template × topic × task × user type, rule-checkable intra-turn items.

    `templates` is a list of flows, a path (ifgym's or StructFlowBench's template format) or None
    (the packaged set); `topics` a list of Topic or a path (None = the packaged bank); `tasks` and
    `user_types` restrict what is drawn; `constraints_per_turn` bounds the rule constraints a fresh
    turn gets (a refinement keeps its source's, one of them changed); `groups` are the EvolIF rule
    groups sampled. The dialogues have no golden answers (replay them with the model's own context).
    """

    def generate(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Dialogue:
        """A dialogue drawn from `rng` (options may pin template, topic_id, task, user_type)."""
        flow, topic, task, user = self.parameters(rng, options)
        return self.build(flow, topic, task, user, rng)

    def build(self, flow: Flow, topic: Topic, task: TaskType, user: str, rng: np.random.Generator) -> Dialogue:
        """Word a dialogue for fixed parameters."""
        plans = self.planner.plan(flow, topic, rng)
        words = _draw(rng)
        voice = USER_TYPES.index(user) ^ 1  # 0 = professional tables, 1 = casual ones
        did = f"{flow.id or 'flow'}/{topic.id}/{task.name}/{user}/{int(rng.integers(10**6)):06d}"
        turns = []
        for k, plan in enumerate(plans):
            text = self._word(flow, k, plans, task, voice, words)
            items = tuple(constraint_item(c, f"{did}/{turn_name(k)}/{j + 1}") for j, c in enumerate(plan.constraints))
            items += flow.structural_items(k, id_prefix=f"{did}/")
            turns.append(DialogueTurn(text, None, items, plan=_plan_line(flow, k, plan)))
        return Dialogue(
            id=did,
            flow=flow,
            turns=tuple(turns),
            task=f"{task.name}: {task.definition}",
            topic=topic.domain,
            user_type=user,
            purpose=f"The user works through '{topic.title}' ({task.name.lower()}).",
            source="template-generator",
            meta={"template": flow.id, "topic_id": topic.id, "topic_title": topic.title, "generator": "template"},
        )

    @staticmethod
    def _word(
        flow: Flow, k: int, plans: Sequence[_TurnPlan], task: TaskType, voice: int, rng: np.random.Generator
    ) -> str:
        plan = plans[k]
        relation = flow.relation_of(k) or "start"
        sources = flow.sources_of(k)
        old, new = plan.changed
        keep = [c for c in plan.constraints if c != new]
        change = ""
        if relation == "refinement":
            if new is not None and old is not None:
                # phrasings are bare infinitives ("stay below 8 sentences"), which "rather than" takes as they are
                change = f"{_choice(rng, new.phrasings())} rather than {_lower_first(_choice(rng, old.phrasings()))}"
            elif new is not None:
                change = _choice(rng, new.phrasings())
            else:
                change = _NO_CHANGE[voice]
        return word_turn(
            relation,
            voice,
            rng,
            topic=plan.topic,
            focus=plan.focus,
            sources=sources,
            change=change,
            rules=keep,
            task=task,
        )


def word_turn(
    relation: str,
    voice: int,
    rng: np.random.Generator,
    *,
    topic: Topic,
    focus: str,
    sources: Sequence[int],
    change: str = "",
    rules: Sequence[Constraint] = (),
    task: TaskType | None = None,
) -> str:
    """A StructFlow user's words for one turn: the relation's opening, the task's framing on a fresh topic, the rules.

    `relation` is a flow relation or "start"; `voice` 0 words it as a professional user, 1 as a casual
    one; `change` fills a refinement's opening ("… but this time {change}"); `rules` are stated in
    one sentence after the opening. Every choice among phrasings comes from `rng`.
    """
    title = topic.title.strip().rstrip(".?!")
    fields = {
        "title": title,
        "title_lc": _lower_first(title),
        "focus": focus,
        "src": _answer_ref(sources[0]) if sources else "",
        "srcs": _answers_ref(sources) if sources else "",
        "change": change,
    }
    parts = [_choice(rng, _OPENINGS[relation][voice]).format(**fields)]
    if relation in ("start", "unrelatedness") and task is not None:
        parts.append(task.framing[voice].format(domain=topic.domain))
    clauses = [_choice(rng, c.phrasings()) for c in rules]
    if clauses:
        parts.append(_choice(rng, _RULES[voice]).format(clauses=_join(clauses)))
    if voice == 0:
        text = " ".join(parts)
        return text[:1].upper() + text[1:]
    # a casual user still ends each thought; the phrase tables leave that to the join
    return " ".join(p if p.endswith(("?", ".", "!")) else p + "." for p in parts[:-1]) + " " + parts[-1]


def _plan_line(flow: Flow, k: int, plan: _TurnPlan) -> str:
    relation = flow.relation_of(k)
    about = f"'{plan.topic.title}'" + (f", focusing on {plan.focus}" if plan.focus else "")
    if relation is None:
        return f"The user opens the conversation about {about}."
    sources = ", ".join(turn_name(s) for s in flow.sources_of(k))
    return f"A {relation} of {sources}: the user asks about {about}."


# ---------------------------------------------------------------------------------------------
# The LLM generation pipeline
# ---------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A stage's answer is unusable; the message says why (sent back to the model)."""


# Does a user message state a requirement? A cheap lexical check of the "prompts" stage: the message
# must contain the constraint's specifics (numbers as digits or words, words, marks, emoji) and, for
# a constraint that is a kind rather than a value (a format, a case, a length unit), a word naming
# the kind. It catches a requirement left out or stated with another value, not one turned around.
_NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
).split()
_TIMES_WORDS = {1: "once", 2: "twice", 3: "thrice"}
_PROSE_MARKS = ".,:;!?'\"-()"  # so common in prose that only a quoted copy or the name counts
_MARK_NAMES = {
    ".": r"period|full stop|dot",
    ",": r"comma",
    ":": r"colon",
    ";": r"semicolon",
    "!": r"exclamation",
    "?": r"question mark",
    "'": r"apostrophe",
    '"': r"quotation mark|double quote",
    "-": r"hyphen|dash",
    "(": r"parenthes[ie]s|bracket",
    ")": r"parenthes[ie]s|bracket",
    "~": r"tilde",
    "&": r"ampersand",
    "\u2026": r"ellipsis",
    "\u2014": r"em dash|dash",
    "\u2013": r"en dash|dash",
}
_KIND_CUES: dict[str, tuple[str, str]] = {  # constraint id -> (what is missing, pattern)
    "case.lower": ("lowercase", r"lower\s*-?\s*case|small letters"),
    "case.upper": ("capital letters", r"capital|upper\s*-?\s*case|\bcaps\b"),
    "case.upper_ratio": ("a percentage", r"%|percent"),
    "bullets.count": ("bullet points", r"bullet|point|item"),
    "length.words": ("words", r"\bwords?\b"),
    "length.sentences": ("sentences", r"\bsentences?\b"),
    "length.characters": ("characters", r"\bchar(?:acter)?s?\b"),
    "length.paragraphs": ("paragraphs", r"\bparagraphs?\b"),
    "format.json": ("JSON", r"\bjson\b"),
    "format.csv": ("CSV", r"\bcsv\b|comma[- ]separated"),
    "format.html": ("HTML", r"\bhtml\b"),
    "format.xml": ("XML", r"\bxml\b"),
    "format.markdown": ("Markdown", r"markdown"),
}
_SKIP_PARAMS = ("relation",)  # less_than / more_than / exactly: said in too many ways to check by words


def _number_cue(n: int) -> str:
    forms = [rf"(?<![\d.,]){n}(?![\d])"] + ([rf"(?<![\d.,]){n:,}(?![\d])"] if n >= 1000 else [])
    words = [w for w in (_NUMBER_WORDS[n] if 0 <= n < len(_NUMBER_WORDS) else None, _TIMES_WORDS.get(n)) if w]
    return "|".join(forms + [rf"\b{w}\b" for w in words])


def _text_cue(value: str) -> str:
    text = value.replace("\ufe0f", "").strip()
    if len(text) == 1 and text.isalpha():  # a letter: quoted, or named as one ("the letter T", "letter is W")
        letter = re.escape(text)
        quoted = rf"[\"'\u201c\u2018]{letter}[\"'\u201d\u2019]"
        return rf"{quoted}|\bletter\b(?:\s+\w+){{0,3}}?\s+[\"'\u201c\u2018]?{letter}(?![^\W\d_])"
    body = r"[\s\-]+".join(re.escape(part) for part in text.split())  # "hand drawn" = "hand-drawn"
    before = r"(?<!\w)" if text[:1].isalnum() else ""
    after = r"(?!\w)" if text[-1:].isalnum() else ""
    return before + body + after


def _mark_cue(mark: str) -> str:
    quoted = rf"[\"'\u201c\u2018\u00ab(\[]\s*{re.escape(mark)}\s*[\"'\u201d\u2019\u00bb)\]]"
    names = _MARK_NAMES.get(mark)
    bare = re.escape(mark) if mark not in _PROSE_MARKS else None
    return "|".join(p for p in (quoted, names, bare) if p)


def _param_cues(key: str, value: Any) -> list[tuple[str, str]]:
    if key in _SKIP_PARAMS or isinstance(value, bool) or value is None:
        return []
    if key == "mark" and isinstance(value, str):
        return [(repr(value), _mark_cue(value))]
    if isinstance(value, int):
        return [(str(value), _number_cue(value))]
    if isinstance(value, float):
        return [(f"{value:g}", _number_cue(int(value)) if value.is_integer() else re.escape(f"{value:g}"))]
    if isinstance(value, str):
        return [(repr(value), _text_cue(value))] if value.strip() else []
    if isinstance(value, Mapping):
        return [cue for k, v in value.items() for cue in (*_param_cues(key, str(k)), *_param_cues(key, v))]
    if isinstance(value, (list, tuple)):
        return [cue for v in value for cue in _param_cues(key, v)]
    return []


def unstated(constraint: Constraint, text: str) -> list[str]:
    """What a user message leaves out of `constraint` (empty when it states it), by a cheap lexical check.

    The message must mention each of the constraint's values (numbers as digits or words, keywords,
    letters, punctuation marks quoted or by name, emoji) and, for a format, a case or a length, a
    word naming it. It cannot tell a requirement stated the wrong way round ("under" for "over").
    """
    cues = [cue for key, value in constraint.params.items() for cue in _param_cues(key, value)]
    if constraint.id in _KIND_CUES:
        cues.append(_KIND_CUES[constraint.id])
    if not cues:  # a kind we have no cue for and no values: its name's last part, e.g. "yaml"
        name = constraint.id.rsplit(".", 1)[-1].replace("_", " ")
        cues.append((repr(name), _text_cue(name)))
    clean = text.replace("\ufe0f", "")
    return [label for label, pattern in cues if not re.search(pattern, clean, re.IGNORECASE)]


def _relations_text() -> str:
    return "\n".join(f"- {r.name}: {r.definition}" for r in FLOW_RELATIONS.values())


def _flow_text(flow: Flow) -> str:
    lines = []
    for k in range(flow.n_turns):
        relation = flow.relation_of(k)
        if relation is None:
            lines.append(f"{turn_name(k)}: opens the conversation")
        elif relation == "unrelatedness":
            lines.append(f"{turn_name(k)}: unrelated to the earlier turns")
        else:
            sources = ", ".join(turn_name(s) for s in flow.sources_of(k))
            lines.append(f"{turn_name(k)}: {relation} of {sources}")
    return "\n".join(lines)


def _named_list(data: Any, key: str, n: int, fields: Sequence[str]) -> list[dict[str, str]]:
    """Validate `data[key]` as n objects named c1..cn in order, each with non-empty string `fields`."""
    if not isinstance(data, Mapping) or not isinstance(data.get(key), list):
        raise _Invalid(f'the answer must be a JSON object with a list under "{key}"')
    entries = data[key]
    if len(entries) != n:
        raise _Invalid(f'"{key}" must have exactly {n} entries (c1 to c{n}), it has {len(entries)}')
    out = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise _Invalid(f'entry {k + 1} of "{key}" is not an object')
        name = entry.get("name", turn_name(k))
        if name != turn_name(k):
            raise _Invalid(f'entry {k + 1} of "{key}" is named {name!r}; the entries must be c1 to c{n} in order')
        values = {}
        for f in fields:
            value = entry.get(f)
            if not isinstance(value, str) or not value.strip():
                raise _Invalid(f'entry {turn_name(k)} needs a non-empty string "{f}"')
            values[f] = value.strip()
        out.append(values)
    return out


def _intra_type(value: Any) -> str:
    if isinstance(value, str):
        text = value.strip()
        for t in INTRA_TYPES:
            if text.lower() in (t.lower(), t.lower().removesuffix(" constraint")):
                return t
    hint = did_you_mean(value, INTRA_TYPES) if isinstance(value, str) else ""
    raise _Invalid(f"{value!r} is not one of the allowed types.{hint} Allowed: {', '.join(INTRA_TYPES)}")


class LLMDialogueGenerator(_GeneratorBase):
    """StructFlow dialogues written by a model: plan -> user prompts -> checklist per turn -> structural items.

    `client` is any ifgym chat client (`chat`/`achat` returning `.text`). Each stage's answer that
    cannot be used is re-asked up to `max_retries` times with the reason; then GenerationError.
    The other arguments are those of TemplateDialogueGenerator. `.stats` counts calls, re-asks and
    "unstated": answers of the prompts stage rejected because a user prompt left out one of its
    sampled rule requirements (see `unstated`).
    """

    def __init__(self, client: Any, *, max_retries: int = 2, **kwargs: Any):
        super().__init__(**kwargs)
        if not (hasattr(client, "chat") and hasattr(client, "achat")):
            raise ConfigError(f"LLMDialogueGenerator needs a chat client (with chat and achat), got {client!r}")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ConfigError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.client = client
        self.max_retries = max_retries
        self.stats = {"calls": 0, "retries": 0, "unstated": 0}
        self._lock = threading.Lock()

    def generate(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Dialogue:
        """Generate one dialogue (blocking calls)."""
        return converse(self.session(rng, options), self._call)

    async def agenerate(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Dialogue:
        """Async twin of `generate`."""
        return await aconverse(self.session(rng, options), self._acall)

    def _call(self, messages: list[Message]) -> str:
        return self.client.chat(messages).text or ""

    async def _acall(self, messages: list[Message]) -> str:
        return (await self.client.achat(messages)).text or ""

    def session(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Conversation[Dialogue]:
        """The pipeline as a generator: yields the messages of each call, receives the model's text."""
        flow, topic, task, user = self.parameters(rng, options)
        plans = self.planner.plan(flow, topic, rng)
        return self._pipeline(flow, topic, task, user, plans, int(rng.integers(10**6)))

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _ask(self, messages: list[Message], validate: Callable[[Any], Any], stage: str) -> Conversation[Any]:
        attempts = 0
        while True:
            text = yield messages
            attempts += 1
            self._count("calls")
            data = json_object(text)
            try:
                if data is None:
                    raise _Invalid("no JSON object was found in the answer")
                return validate(data)
            except _Invalid as exc:
                problem = str(exc)
            if attempts > self.max_retries:
                raise GenerationError(f"stage {stage!r}: {problem} (after {attempts} call(s))")
            self._count("retries")
            messages = [
                *messages,
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": f"That answer could not be used: {problem}. Reply again with only the JSON object "
                    "in the form asked for.",
                },
            ]

    def _pipeline(
        self, flow: Flow, topic: Topic, task: TaskType, user: str, plans: list[_TurnPlan], draw: int
    ) -> Conversation[Dialogue]:
        n = flow.n_turns
        system = (
            "You design realistic multi-turn conversations between a user and an AI assistant. Answer with JSON only."
        )
        plan_prompt = (
            f"Relations between turns:\n{_relations_text()}\n\n"
            f"The conversation has {n} user turns with this structure:\n{_flow_text(flow)}\n\n"
            f"Topic: {topic.title} (domain: {topic.domain}).\n"
            f"Task type: {task.name}: {task.definition}\n"
            + "".join(
                f"Turn {turn_name(k)} is about: {p.topic.title}{f' (focus: {p.focus})' if p.focus else ''}.\n"
                for k, p in enumerate(plans)
            )
            + "\nWrite the user's purpose and a one-sentence summary of each user turn that makes its relation clear. "
            'Return {"purpose": "...", "plan": [{"name": "c1", "description": "..."}, ...]} with exactly '
            f"{n} entries, c1 to c{n}."
        )

        def check_plan(data: Any) -> tuple[str, list[str]]:
            purpose = data.get("purpose") if isinstance(data, Mapping) else None
            if not isinstance(purpose, str) or not purpose.strip():
                raise _Invalid('"purpose" must be a non-empty string')
            return purpose.strip(), [e["description"] for e in _named_list(data, "plan", n, ["description"])]

        purpose, plan = yield from self._ask(
            [{"role": "system", "content": system}, {"role": "user", "content": plan_prompt}], check_plan, "plan"
        )
        required = []
        for k, p in enumerate(plans):
            asks = "; ".join(c.describe().rstrip(".") for c in p.constraints) or "nothing fixed"
            required.append(f"{turn_name(k)}: {plan[k]}\n    requirements it must state: {asks}.")
        prompt_prompt = (
            f"The plan of a {n}-turn conversation ({task.name}; purpose: {purpose}):\n" + "\n".join(required) + "\n\n"
            f"The user {USER_VOICES[user]}. Write each user message as this user would, stating every listed "
            "requirement in the user's own words (other natural requirements may be added), and a good assistant "
            'answer to it. Return {"turns": [{"name": "c1", "user prompt": "...", "assistant answer": "..."}, ...]} '
            f"with exactly {n} entries, c1 to c{n}."
        )

        def check_turns(data: Any) -> list[dict[str, str]]:
            turns = _named_list(data, "turns", n, ["user prompt", "assistant answer"])
            gaps = []
            for k, turn in enumerate(turns):
                for c in plans[k].constraints:
                    missing = ", ".join(unstated(c, turn["user prompt"]))
                    if missing:
                        gaps.append(f'{turn_name(k)} does not state "{c.describe().rstrip(".")}" (missing: {missing})')
            if gaps:
                self._count("unstated")  # rule items stay on the checklist, so the user must have asked for them
                raise _Invalid("every user prompt must state each requirement listed for it: " + "; ".join(gaps))
            return turns

        turns = yield from self._ask(
            [{"role": "system", "content": system}, {"role": "user", "content": prompt_prompt}],
            check_turns,
            "prompts",
        )
        did = f"llm/{flow.id or 'flow'}/{topic.id}/{task.name}/{user}/{draw:06d}"
        out_turns = []
        for k, turn in enumerate(turns):
            rule_items = tuple(
                constraint_item(c, f"{did}/{turn_name(k)}/{j + 1}") for j, c in enumerate(plans[k].constraints)
            )
            history = "\n".join(f"{turn_name(i)}: {turns[i]['user prompt']}" for i in range(k)) or "(none)"
            covered = "\n".join(f"- {i.question}" for i in rule_items) or "- (none)"
            extract_prompt = (
                "Kinds of requirements a user message can make:\n"
                + "\n".join(f"- {t}: {INTRA_DEFINITIONS[t]}" for t in INTRA_TYPES)
                + f"\n\nEarlier user messages:\n{history}\n\nThe user message to analyse:\n<message>\n"
                f"{turn['user prompt']}\n</message>\n\nAlready on the checklist (do not repeat them):\n{covered}\n\n"
                "List every other requirement the message makes of the reply, one per kind at most, each as a yes/no "
                'question about the reply. Return {"constraints": [{"type": "<kind>", "content": "<question>"}]} '
                '("constraints": [] when there is nothing more).'
            )

            def check_items(data: Any, k: int = k, rule_items: tuple = rule_items) -> list[ChecklistItem]:
                raw = data.get("constraints") if isinstance(data, Mapping) else None
                if not isinstance(raw, list):
                    raise _Invalid('the answer must be a JSON object with a list under "constraints"')
                items = []
                for j, entry in enumerate(raw):
                    if not isinstance(entry, Mapping):
                        raise _Invalid(f"constraint {j + 1} is not an object")
                    kind = _intra_type(entry.get("type"))
                    if any(i.type == kind for i in items):
                        raise _Invalid(f"two constraints of the kind {kind!r}; merge them into one question")
                    question = entry.get("content")
                    if not isinstance(question, str) or not question.strip():
                        raise _Invalid(f'constraint {j + 1} needs a non-empty "content" question')
                    items.append(
                        ChecklistItem(
                            id=f"{did}/{turn_name(k)}/{len(rule_items) + j + 1}",
                            question=question.strip(),
                            type=kind,
                            weight=TYPE_WEIGHTS[kind],
                        )
                    )
                if not items and not rule_items:
                    raise _Invalid("the message makes at least one requirement; list it")
                return items

            extracted = yield from self._ask(
                [{"role": "system", "content": system}, {"role": "user", "content": extract_prompt}],
                check_items,
                f"checklist {turn_name(k)}",
            )
            checklist = rule_items + tuple(extracted) + flow.structural_items(k, id_prefix=f"{did}/")
            out_turns.append(DialogueTurn(turn["user prompt"], turn["assistant answer"], checklist, plan[k]))
        return Dialogue(
            id=did,
            flow=flow,
            turns=tuple(out_turns),
            task=f"{task.name}: {task.definition}",
            topic=topic.domain,
            user_type=user,
            purpose=purpose,
            source="llm-generator",
            meta={"template": flow.id, "topic_id": topic.id, "topic_title": topic.title, "generator": "llm"},
        )


# ---------------------------------------------------------------------------------------------
# The user simulator
# ---------------------------------------------------------------------------------------------


class StructFlowUser(UserSimulator):
    """Plays a StructFlow dialogue turn by turn: one of `dialogues`, or one made by `generator` per episode.

    Replay: `reset(rng, {"dialogue": index or id})` picks a dialogue (without it, `rng` picks).
    Generation: options `template`, `topic_id`, `task`, `user_type` pin the parameters. With an
    `LLMDialogueGenerator`, a GenerationError falls back to `fallback` (an offline generator) for
    the same rng draw, and `stats["fallbacks"]` counts it. The script never depends on replies.
    """

    def __init__(
        self,
        dialogues: Sequence[Dialogue] | None = None,
        generator: TemplateDialogueGenerator | LLMDialogueGenerator | None = None,
        fallback: TemplateDialogueGenerator | None = None,
    ):
        if (dialogues is None) == (generator is None):
            raise ConfigError("StructFlowUser needs exactly one of dialogues (replay) or generator")
        self.dialogues = tuple(dialogues) if dialogues is not None else ()
        if dialogues is not None and not self.dialogues:
            raise ConfigError("StructFlowUser needs at least one dialogue to replay")
        self._by_id = {d.id: i for i, d in enumerate(self.dialogues)}
        self.generator = generator
        self.fallback = fallback
        self.dialogue: Dialogue | None = None
        self._next = 0
        self._stats: dict[str, int] = {}

    # -- choosing the dialogue ----------------------------------------------------------------
    def _pick(self, rng: np.random.Generator, options: Mapping | None) -> Dialogue:
        options = dict(options or {})
        for key in options:
            if key != "dialogue":
                raise UnknownNameError("StructFlow replay option", key, ("dialogue",))
        choice = options.get("dialogue")
        if choice is None:
            return self.dialogues[int(rng.integers(len(self.dialogues)))]
        if isinstance(choice, numbers.Integral) and not isinstance(choice, bool):  # also numpy integers
            choice = int(choice)
            if not 0 <= choice < len(self.dialogues):
                raise ConfigError(f"dialogue index {choice} is outside 0..{len(self.dialogues) - 1}")
            return self.dialogues[choice]
        if isinstance(choice, str) and choice in self._by_id:
            return self.dialogues[self._by_id[choice]]
        raise UnknownNameError("dialogue id", choice, self._by_id)

    def _generate(self, rng: np.random.Generator, options: Mapping | None) -> Dialogue:
        if isinstance(self.generator, LLMDialogueGenerator):
            state = rng.bit_generator.state
            try:
                return self.generator.generate(rng, options)
            except GenerationError as exc:
                return self._fall_back(rng, state, options, exc)
        return self.generator.generate(rng, options)

    async def _agenerate(self, rng: np.random.Generator, options: Mapping | None) -> Dialogue:
        if isinstance(self.generator, LLMDialogueGenerator):
            state = rng.bit_generator.state
            try:
                return await self.generator.agenerate(rng, options)
            except GenerationError as exc:
                return self._fall_back(rng, state, options, exc)
        return self.generator.generate(rng, options)

    def _fall_back(self, rng: np.random.Generator, state: Any, options: Mapping | None, exc: Exception) -> Dialogue:
        if self.fallback is None:
            raise exc
        rng.bit_generator.state = state  # the same draw: same template, topic, task and user type
        self._stats["fallbacks"] = self._stats.get("fallbacks", 0) + 1
        dialogue = self.fallback.generate(rng, options)
        return Dialogue(**{**dialogue.__dict__, "meta": {**dialogue.meta, "fallback_reason": str(exc)}})

    # -- the protocol ---------------------------------------------------------------------------
    def _begin(self, dialogue: Dialogue, before: Mapping[str, int]) -> UserTurn:
        self.dialogue = dialogue
        self._next = 1
        stats = {"turns": len(dialogue.turns), "played": 1}
        if self.generator is not None:
            stats["generated"] = 1
            stats["fallbacks"] = self._stats.get("fallbacks", 0)
            if isinstance(self.generator, LLMDialogueGenerator):
                stats["generation_calls"] = self.generator.stats["calls"] - before["calls"]
                stats["unstated_prompts"] = self.generator.stats["unstated"] - before["unstated"]
        self._stats = stats
        return UserTurn(dialogue.turns[0].prompt, dialogue.spec(0))

    def _calls(self) -> dict[str, int]:
        if isinstance(self.generator, LLMDialogueGenerator):
            return {"calls": self.generator.stats["calls"], "unstated": self.generator.stats["unstated"]}
        return {"calls": 0, "unstated": 0}

    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Pick (replay) or generate the episode's dialogue and return its first turn."""
        before = self._calls()
        self._stats = {}
        dialogue = self._pick(rng, options) if self.generator is None else self._generate(rng, options)
        return self._begin(dialogue, before)

    async def areset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Async twin of `reset` (the LLM generator's calls are awaited)."""
        before = self._calls()
        self._stats = {}
        dialogue = self._pick(rng, options) if self.generator is None else await self._agenerate(rng, options)
        return self._begin(dialogue, before)

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The dialogue's next turn, or None after its last."""
        if self.dialogue is None:
            raise IfgymError("StructFlowUser.next() called before reset()")
        if self._next >= len(self.dialogue.turns):
            return None
        k = self._next
        self._next += 1
        self._stats["played"] = self._next
        return UserTurn(self.dialogue.turns[k].prompt, self.dialogue.spec(k))

    @property
    def stats(self) -> dict[str, int | float]:
        """Per-episode counters: turns and played.

        Generated dialogues add generated and fallbacks; the LLM generator adds generation_calls and
        unstated_prompts (answers of its prompts stage rejected by `unstated`).
        """
        return dict(self._stats)
