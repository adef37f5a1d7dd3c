"""Plain data that flows through one turn: checklist items, turn specs, user turns, turn records, episodes.

Everything here is JSON-serialisable and free of behaviour beyond (de)serialisation, so
simulators, rewards, envs and the logger can share it without importing each other.

`TurnSpec.move` says where the dialogue is (`Move`, values in `MOVES`), and who sets which:

- `new_topic`: EvolIF, a first or a new topic; StructFlow, the opening turn;
- `continue`: EvolIF, the same topic; FlexBench, every caller turn after the first;
- `return`: EvolIF, back to an earlier topic (its rules come back with it);
- `replay`: a replayed file that states no move: EvolIF dialogues, GraphIF's evaluation sets
  (their turn's relations are in `meta["relation"]`);
- `open`: FlexBench, the caller's first words;
- `follow-up`, `refinement`, `recall`, `expansion`, `summary`, `unrelatedness`: StructFlow, the
  turn's relation to earlier turns.

`ChecklistItem.kind` (`ItemKind`, values in `ITEM_KINDS`): `intra` (about this turn alone: a
StructFlow intra-turn constraint), `structural` (about the turn's relation to earlier turns), `sop`
(a FlexBench dimension, judged over the whole call).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import orjson

from ifgym.core.constraints import Constraint
from ifgym.core.verdicts import Verdict
from ifgym.errors import UnknownNameError


def json_line(data: Any) -> str:
    """`data` as one line of JSON that reads back as `json.dumps(data, ensure_ascii=False)` did (an episodes line).

    orjson writes it (under half of json's time for an episode, this check included): its text is read back,
    and where it would read otherwise (a NaN or infinity, which orjson writes null; a tuple; keys that are not
    strings) or orjson refuses the data (a float subclass, an integer beyond 64 bits), json.dumps writes it.
    """
    try:
        text = orjson.dumps(data)
    except TypeError:
        return json.dumps(data, ensure_ascii=False)
    if orjson.loads(text) != data:
        return json.dumps(data, ensure_ascii=False)
    return text.decode()


_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))  # each ASCII digit as "0", any other byte a space
_LONG_NUMBER = b"0" * 19  # 19 digits: the shortest integer orjson may read as a float (-9999999999999999999)


def read_json_line(line: bytes) -> Any:
    """One JSON line (of an episodes file) as `json.loads` reads it; by orjson (3x faster) where it reads the same.

    orjson reads an integer beyond 64 bits as a float, and refuses what only json reads (NaN and
    Infinity, which `json_line` writes through json; lone surrogates; UTF-16): a line with 19 digits in a
    row anywhere, or that orjson refuses, is read by json, which raises as before on a line that is not JSON.
    """
    if _LONG_NUMBER not in line.translate(_DIGITS):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line)


Move = Literal[
    "new_topic",
    "continue",
    "return",
    "replay",
    "open",
    "follow-up",
    "refinement",
    "recall",
    "expansion",
    "summary",
    "unrelatedness",
]
MOVES: tuple[str, ...] = get_args(Move)
ItemKind = Literal["intra", "structural", "sop"]
ITEM_KINDS: tuple[str, ...] = get_args(ItemKind)
Change = Literal["add", "remove", "modify"]
CHANGES: tuple[str, ...] = get_args(Change)


@dataclass(frozen=True)
class ChecklistItem:
    """One yes/no question a reply must satisfy (StructFlow's checklists and similar).

    `kind` is "intra" (about this turn alone), "structural" (about its relation to earlier turns)
    or "sop" (a FlexBench dimension); `type` names the constraint or relation type; `weight` is its
    weight in weighted scores. When the item is machine-checkable, `constraint` carries it and the
    rule decides instead of a judge.
    """

    id: str
    question: str
    type: str
    kind: ItemKind = "intra"
    weight: float = 1.0
    constraint: Constraint | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ITEM_KINDS:
            raise UnknownNameError("checklist item kind", self.kind, ITEM_KINDS)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "type": self.type,
            "kind": self.kind,
            "weight": self.weight,
            "constraint": self.constraint.to_json() if self.constraint is not None else None,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChecklistItem:
        raw = data.get("constraint")
        return cls(
            id=data["id"],
            question=data["question"],
            type=data["type"],
            kind=data.get("kind", "intra"),
            weight=data.get("weight", 1.0),
            constraint=Constraint.from_json(raw) if raw is not None else None,
            meta=dict(data.get("meta", {})),
        )


@dataclass(frozen=True)
class TurnSpec:
    """The ground truth of a user turn. Never shown to the policy.

    `constraints` must hold in the reply; `topic` and `move` say where the dialogue is (`MOVES`:
    see the module docstring for who sets which); `change` is the instruction-state edit made this
    turn (`CHANGES`: "add", "remove", "modify"; None for none); `checklist` holds yes/no items for
    checklist-judged envs (StructFlow, FlexBench); `meta` holds env-specific facts.
    """

    constraints: tuple[Constraint, ...] = ()
    topic: str = ""
    move: Move = "continue"
    change: Change | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    checklist: tuple[ChecklistItem, ...] = ()

    def __post_init__(self) -> None:
        if self.move not in MOVES:
            raise UnknownNameError("turn move", self.move, MOVES)
        if self.change is not None and self.change not in CHANGES:
            raise UnknownNameError("instruction change", self.change, CHANGES)

    def to_json(self) -> dict[str, Any]:
        data = {
            "constraints": [c.to_json() for c in self.constraints],
            "topic": self.topic,
            "move": self.move,
            "change": self.change,
            "meta": dict(self.meta),
        }
        if self.checklist:
            data["checklist"] = [item.to_json() for item in self.checklist]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnSpec:
        return cls(
            constraints=tuple(Constraint.from_json(c) for c in data.get("constraints", ())),
            topic=data.get("topic", ""),
            move=data.get("move", "continue"),
            change=data.get("change"),
            checklist=tuple(ChecklistItem.from_json(i) for i in data.get("checklist", ())),
            meta=dict(data.get("meta", {})),
        )


@dataclass(frozen=True)
class UserTurn:
    """What the simulated user says (`text`) and what it means (`spec`)."""

    text: str
    spec: TurnSpec


@dataclass
class TurnRecord:
    """One scored turn: the user's words and spec, the reply, verdicts (strict and loose), reward."""

    index: int
    user: str
    spec: TurnSpec
    reply: str
    verdicts: list[Verdict]
    loose_verdicts: list[Verdict]
    reward: float
    patience: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "user": self.user,
            "spec": self.spec.to_json(),
            "reply": self.reply,
            "verdicts": [v.to_json() for v in self.verdicts],
            "loose_verdicts": [v.to_json() for v in self.loose_verdicts],
            "reward": self.reward,
            "patience": self.patience,
            "info": self.info,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnRecord:
        return cls(
            index=data["index"],
            user=data["user"],
            spec=TurnSpec.from_json(data["spec"]),
            reply=data["reply"],
            verdicts=[Verdict.from_json(v) for v in data["verdicts"]],
            loose_verdicts=[Verdict.from_json(v) for v in data.get("loose_verdicts", data["verdicts"])],
            reward=data["reward"],
            patience=data.get("patience"),
            info=dict(data.get("info", {})),
        )


@dataclass
class Episode:
    """A finished (or cut-off) dialogue; one JSONL line. `done_reason` says why it ended."""

    episode_id: str
    env_id: str
    seed: int | None
    turns: list[TurnRecord] = field(default_factory=list)
    done_reason: str = ""
    system_prompt: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "env_id": self.env_id,
            "seed": self.seed,
            "done_reason": self.done_reason,
            "system_prompt": self.system_prompt,
            "meta": self.meta,
            "turns": [t.to_json() for t in self.turns],
        }

    def to_jsonl(self) -> str:
        return json_line(self.to_json())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Episode:
        return cls(
            episode_id=data["episode_id"],
            env_id=data["env_id"],
            seed=data.get("seed"),
            turns=[TurnRecord.from_json(t) for t in data.get("turns", [])],
            done_reason=data.get("done_reason", ""),
            system_prompt=data.get("system_prompt"),
            meta=dict(data.get("meta", {})),
        )
