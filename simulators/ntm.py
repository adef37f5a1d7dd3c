"""NTM (Context-Agent's benchmark): its file format, and a user that replays a dialogue's user turns.

The file is JSON Lines, one dialogue per line:
`{"conversation_id": str, "metadata": {"rounds": "10"}, "user_turns": [{"turn_id": 1, "content": str}, ...],
"checkpoint_question": str}`. There are no reference answers, so the model's own replies are the history.

Quirks the reader handles (`docs`: /work/shared/data/ntm/FORMAT.md, the format page):
- `metadata.rounds` is the number of user turns written as a string ("10"); it must equal
  `len(user_turns)` (an int is accepted too).
- `checkpoint_question` holds every checkpoint of the dialogue in one string, numbered inline as
  `(1)`, `( 2 )`, … `(10)` with varying spaces and leading/trailing spaces; the words before `(1)`
  are the question's stem ("Does the recommendation include"), put before each checkpoint so the
  judge reads a whole question.
- One dialogue numbers none and lists them in prose ("the following 6 points: a, b, c, ..."): the
  list after the colon is split at commas, semicolons and a final "and", and must give as many
  items as the sentence says. A question with neither is one checkpoint: the whole question.

The whole file is parsed up front: a missing or malformed file is one DataFormatError naming the file
and the line; nothing is half-loaded.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import ChecklistItem, TurnSpec, UserTurn, Verdict
from ifgym.errors import ConfigError, DataFormatError, IfgymError
from ifgym.files import not_a_folder
from ifgym.simulators.base import UserSimulator, pick_dialogue

__all__ = ["LENGTH_BUCKETS", "NTMDialogue", "NTMUser", "length_bucket", "load_ntm", "parse_checkpoints"]

LENGTH_BUCKETS = ("10", "15", "20", "25", "other")  # the paper's dialogue lengths, and the rest (11-27 turns)
_MARKER = re.compile(r"[(\uff08]\s*(\d{1,2})\s*[)\uff09]")  # ASCII or full-width parentheses
_PROSE = re.compile(
    r"(?:the\s+)?following\s+(\d{1,2})\s+(?:points|items|requirements|checkpoints)\s*:\s*(.+)$", re.I | re.S
)
_LIST_SPLIT = re.compile(r"\s*[,;]\s*(?:and\s+)?|\s+and\s+", re.I)
_EDGES = " \t\n,;.?!:"
# Negations that govern a disjunction: "without A or B" is "without A" and "without B"
_SCOPE = r"without|not|no|never|neither|avoid(?:ing)?|except(?:\s+for)?|excluding|instead\s+of|rather\s+than"
_LEADING_SCOPE = re.compile(rf"(?:{_SCOPE})\b", re.I)
_TRAILING_SCOPE = re.compile(rf"(?<![\w-])(?:{_SCOPE.replace('|no|', '|')})$", re.I)  # "yes or no" ends an item
_JOINED = re.compile(r"(?:,\s*)?\b(?:or|nor)\s*$", re.I)  # items joined in one disjunction under one scope word


def length_bucket(turns: int) -> str:
    """The dialogue-length bucket of the paper's tables: "10", "15", "20", "25", or "other"."""
    return str(turns) if str(turns) in LENGTH_BUCKETS else "other"


def _clean(text: str) -> str:
    """A checkpoint's words without the separators around them (", and", a final "?")."""
    text = text.strip(_EDGES)
    text = re.sub(r"(?:,|;)?\s+(?:and|or|nor)$", "", text, flags=re.I)  # "..., and (4)" leaves "... and" behind
    return text.strip(_EDGES)


def _first_release_clean(text: str) -> str:
    """`_clean` as first released (ifgym/NTM-v0): only a trailing "and" was taken off."""
    text = re.sub(r"(?:,|;)?\s+and$", "", text.strip(_EDGES), flags=re.I)
    return text.strip(_EDGES)


def _scoped(parts: Sequence[str]) -> tuple[str, ...]:
    """The numbered items, each with the negation that governs it.

    A negation left dangling before a marker ("..., without (3)filing") moves into the item it
    governs; a negation that opens an item joined to the next by "or"/"nor" ("(3)without filing a
    complaint or (4)requesting an upgrade") governs the next item too, unless that one has its own.
    """
    items: list[str] = []
    carried = ""
    for k, part in enumerate(parts):
        text = part.strip(_EDGES)
        dangling = _TRAILING_SCOPE.search(text) if k < len(parts) - 1 else None
        if dangling:
            text = text[: dangling.start()].strip(_EDGES)
        item = _clean(text)
        own = _LEADING_SCOPE.match(item)
        if carried and not own and item:
            item = f"{carried} {item}"
        scope = ("not" if own.group(0).lower() == "neither" else own.group(0)) if own else carried  # neither A nor B
        items.append(item)
        if dangling:
            carried = dangling.group(0)
        elif _JOINED.search(text) and scope:
            carried = scope
        else:
            carried = ""
    return tuple(items)


def parse_checkpoints(question: str, scope: bool = True) -> tuple[tuple[str, ...], str, bool]:
    """(checkpoints, stem, numbered) of a checkpoint question; a ValueError says what is wrong with it.

    Numbered: the text between `(k)` and `(k+1)`; the markers must count 1, 2, … in order; with
    `scope` each item keeps the negation that governs it and no item ends in "or" (`_scoped`;
    False: the first release's reading, ifgym/NTM-v0). Prose:
    "the following N points: a, b, c" gives the N items. Neither: the whole question is one checkpoint.
    """
    question = question.strip()
    markers = list(_MARKER.finditer(question))
    if markers:
        numbers_seen = [int(m.group(1)) for m in markers]
        if numbers_seen != list(range(1, len(markers) + 1)):
            raise ValueError(f"checkpoints must be numbered (1), (2), … in order; found {numbers_seen}")
        stem = question[: markers[0].start()].strip(_EDGES)
        ends = [m.start() for m in markers[1:]] + [len(question)]
        parts = [question[m.end() : end] for m, end in zip(markers, ends, strict=True)]
        items = _scoped(parts) if scope else tuple(_first_release_clean(part) for part in parts)
        empty = [k for k, item in enumerate(items, 1) if not item]
        if empty:
            raise ValueError(f"checkpoint ({empty[0]}) has no words")
        return items, stem, True
    prose = _PROSE.search(question)
    if prose:
        stated = int(prose.group(1))
        items = tuple(i for i in (_clean(p) for p in _LIST_SPLIT.split(prose.group(2).strip(_EDGES))) if i)
        if len(items) != stated:
            raise ValueError(f"the question says {stated} points but lists {len(items)}: {list(items)}")
        stem = question[: prose.start()].strip(_EDGES)
        return items, stem, False
    return (question.strip(_EDGES),), "", False


def _question(stem: str, item: str) -> str:
    """One checkpoint as a yes/no question for the judge: the stem, then the item."""
    return f"{stem}: {item}?" if stem else f"{item}?"


@dataclass(frozen=True)
class NTMDialogue:
    """One NTM dialogue: its user turns, the checkpoint question, and the checkpoints read from it."""

    id: str
    turns: tuple[str, ...]
    checkpoint_question: str
    checkpoints: tuple[str, ...]  # each a whole yes/no question (stem + item)
    numbered: bool  # False: the question lists its checkpoints in prose (or is one checkpoint)
    line: int
    source: str

    @property
    def bucket(self) -> str:
        """The length bucket ("10", "15", "20", "25" or "other")."""
        return length_bucket(len(self.turns))

    def checklist(self) -> tuple[ChecklistItem, ...]:
        """The final turn's checklist: one item per checkpoint, ids c1, c2, …."""
        return tuple(
            ChecklistItem(id=f"c{k}", question=q, type="checkpoint") for k, q in enumerate(self.checkpoints, start=1)
        )


def _field(record: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in record:
        raise DataFormatError(f"{where}: missing field {key!r}")
    value = record[key]
    if not isinstance(value, kind):
        raise DataFormatError(f"{where}: {key!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _parse_line(record: Any, where: str, lineno: int, source: str, scope: bool = True) -> NTMDialogue:
    if not isinstance(record, dict):
        raise DataFormatError(f"{where}: a dialogue must be a JSON object, got {type(record).__name__}")
    conv_id = _field(record, "conversation_id", str, where).strip()
    if not conv_id:
        raise DataFormatError(f"{where}: 'conversation_id' is empty")
    rounds = _field(record, "metadata", dict, where).get("rounds")
    turns_raw = _field(record, "user_turns", list, where)
    if not turns_raw:
        raise DataFormatError(f"{where}: 'user_turns' is empty")
    turns = []
    for k, turn in enumerate(turns_raw, start=1):
        at = f"{where}: user_turns[{k - 1}]"
        if not isinstance(turn, dict):
            raise DataFormatError(f"{at} must be an object with turn_id and content")
        turn_id = turn.get("turn_id")
        if isinstance(turn_id, bool) or not isinstance(turn_id, numbers.Integral) or int(turn_id) != k:
            raise DataFormatError(f"{at}: turn_id must be {k} (ids 1..n in order), got {turn_id!r}")
        content = turn.get("content")
        if not isinstance(content, str) or not content.strip():
            raise DataFormatError(f"{at}: 'content' must be a non-empty string")
        turns.append(content.strip())
    rounds_text = str(rounds).strip() if isinstance(rounds, str | int) and not isinstance(rounds, bool) else None
    if rounds_text is None or not rounds_text.isdigit():
        raise DataFormatError(f'{where}: metadata.rounds must be the number of user turns (e.g. "10"), got {rounds!r}')
    if int(rounds_text) != len(turns):
        raise DataFormatError(f"{where}: metadata.rounds is {rounds!r} but the dialogue has {len(turns)} user turns")
    question = _field(record, "checkpoint_question", str, where).strip()
    if not question:
        raise DataFormatError(f"{where}: 'checkpoint_question' is empty")
    try:
        items, stem, numbered = parse_checkpoints(question, scope)
    except ValueError as exc:
        raise DataFormatError(f"{where}: checkpoint_question: {exc}") from None
    return NTMDialogue(
        id=conv_id,
        turns=tuple(turns),
        checkpoint_question=question,
        checkpoints=tuple(_question(stem, item) for item in items),
        numbered=numbered,
        line=lineno,
        source=source,
    )


def load_ntm(path: str | Path, scope: bool = True) -> tuple[NTMDialogue, ...]:
    """Every dialogue of an NTM file (JSON Lines; blank lines skipped), validated up front.

    `scope`: checkpoints keep the negations that govern them (`parse_checkpoints`).
    """
    path = not_a_folder(path, "NTM file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataFormatError(
            f"{path}: no such file (give the NTM file, e.g. dataset=/data/dataset-full.jsonl)"
        ) from None
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    dialogues: list[NTMDialogue] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        dialogue = _parse_line(record, where, lineno, str(path), scope)
        if dialogue.id in seen:
            raise DataFormatError(f"{where}: conversation_id {dialogue.id!r} already used on line {seen[dialogue.id]}")
        seen[dialogue.id] = lineno
        dialogues.append(dialogue)
    if not dialogues:
        raise DataFormatError(f"{path}: the file has no dialogues")
    return tuple(dialogues)


class NTMUser(UserSimulator):
    """Replays one NTM dialogue's user turns in order; it never reads the replies.

    `reset(rng, {"dialogue": index or conversation_id})` picks the dialogue (without it, `rng`
    picks). Every turn's spec carries `meta` (dialogue id, turn number, whether it is the last);
    only the last turn's spec carries the checklist (one item per checkpoint).
    """

    def __init__(self, dialogues: Sequence[NTMDialogue]):
        self.dialogues = tuple(dialogues)
        if not self.dialogues:
            raise ConfigError("NTMUser needs at least one dialogue")
        self._by_id = {d.id: i for i, d in enumerate(self.dialogues)}
        self.dialogue: NTMDialogue | None = None
        self._next = 0

    def _pick(self, rng: np.random.Generator, options: Mapping | None) -> NTMDialogue:
        return pick_dialogue(
            self.dialogues, self._by_id, rng, options, option_kind="NTM reset option", id_kind="NTM conversation_id"
        )

    def _turn(self, k: int) -> UserTurn:
        d = self.dialogue
        last = k == len(d.turns) - 1
        meta = {"dialogue": d.id, "turn_number": k + 1, "final": last}
        return UserTurn(
            d.turns[k], TurnSpec(topic=d.id, move="replay", meta=meta, checklist=d.checklist() if last else ())
        )

    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Pick the episode's dialogue and return its first user turn."""
        self.dialogue = self._pick(rng, options)
        self._next = 1
        return self._turn(0)

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The dialogue's next user turn, or None after its last."""
        if self.dialogue is None:
            raise IfgymError("NTMUser.next() called before reset()")
        if self._next >= len(self.dialogue.turns):
            return None
        self._next += 1
        return self._turn(self._next - 1)

    def episode_meta(self) -> dict[str, Any]:
        """The dialogue played: id, index in the file, line, turns, length bucket, checkpoints, the question."""
        d = self.dialogue
        if d is None:
            return {}
        return {
            "id": d.id,
            "index": self._by_id[d.id],
            "line": d.line,
            "turns": len(d.turns),
            "bucket": d.bucket,
            "checkpoints": len(d.checkpoints),
            "numbered": d.numbered,
            "checkpoint_question": d.checkpoint_question,
            "source": d.source,
        }

    @property
    def stats(self) -> dict[str, int | float]:
        """{"turns": the dialogue's length, "played": turns given so far}."""
        return {"turns": len(self.dialogue.turns) if self.dialogue else 0, "played": self._next}
