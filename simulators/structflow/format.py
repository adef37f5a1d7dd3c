"""StructFlow dialogues and their files: tasks, `Dialogue`, StructFlowBench's records, GraphIF's evaluation sets."""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core import ChecklistItem, TurnSpec
from ifgym.core.constraints import Constraint
from ifgym.core.structflow import (
    FLOW_RELATIONS,
    ITEM_TYPES,
    STRUCTURAL_TYPES,
    STRUCTURAL_WEIGHT,
    TYPE_WEIGHTS,
    USER_TYPES,
    Flow,
    flow_from_json,
    task_name,
    turn_name,
    user_type_name,
)
from ifgym.errors import ConfigError, DataFormatError, IfgymError, did_you_mean
from ifgym.simulators.assets_io import STRUCTFLOWBENCH_DIR, packaged_or_path

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
        if self.meta.get("format") == "graphif":  # its questions name turns "Round 0", "Round 1", ...: the judge too
            meta["turn_names"] = "rounds"
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
# StructFlowBench's WCSR; "Global" (a constraint from an earlier turn that holds to the end, repeated
# on every later checklist) is inter-turn too, as GraphIF counts global constraints, and weighs 2;
# the instruction types are about the turn itself and weigh 1.
GRAPHIF_STRUCTURAL_TYPES: tuple[str, ...] = (
    "follow-up",
    "expansion",
    "refine",
    "recall",
    "summary",
    "modify",
    "anchored",
)
GRAPHIF_INTRA_TYPES: tuple[str, ...] = ("Instruction", "instruction")
GRAPHIF_GLOBAL = "Global"
GRAPHIF_TYPES: tuple[str, ...] = (*GRAPHIF_INTRA_TYPES, GRAPHIF_GLOBAL, *GRAPHIF_STRUCTURAL_TYPES)


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
    Python list literal, of equal length). Structural types (GRAPHIF_STRUCTURAL_TYPES) and `Global`
    are inter-turn items of weight 2 (GraphIF counts global constraints as inter-turn), the
    instruction types intra-turn items of weight 1. The dialogue has no flow
    structure (GraphIF's files state none: `flow` is None); each turn's relation is labelled by
    its structural types.
    `task` names the set in the per-task breakdown (by default the file's name).

    The weights follow the papers (inter-turn 2, the rest 1). GraphIF's own released scorer
    (evaluate/evaluate.py) weighs only lower-case `instruction` 1 and every other type 2,
    upper-case `Instruction` included; compare WCSR with GraphIF's published numbers with that in mind.
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
            structural = kind in GRAPHIF_STRUCTURAL_TYPES or kind == GRAPHIF_GLOBAL
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
