"""Replay an EvolIF dialogue file: the user's turns come from the file instead of a tracker.

Input: EvolIF's dialogue JSONL, one user turn per line (see docs on the format), e.g.
`{"turn": 3, "active_topic": 3479, "user_query": "...", "user_query_verified": "...",
"instructions": [{"id": "format", "args": {"mode": "json"}, "description": "..."}], "style": {...}}`.

Decisions:
- text: `user_query_verified` when it is a non-empty string (the wording that passed EvolIF's
  query checks), otherwise `user_query`; `meta["text_field"]` records which one was used.
- constraints: `instructions` is the full live state at that turn; each entry goes through
  `from_evolif(id, args)`. `description` is ignored (EvolIF's descriptions are unreliable).
- topic: `active_topic` as a string; move is always "replay"; `change` is inferred by comparing
  with the same topic's previous state when exactly one group differs (else None).
The whole file is parsed up front, so a malformed line fails at construction, naming the file,
the line number and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import TurnSpec, UserTurn, Verdict
from ifgym.core.constraints import Constraint
from ifgym.core.evolif import from_evolif
from ifgym.errors import ConfigError, DataFormatError, IfgymError
from ifgym.files import not_a_folder
from ifgym.simulators.base import UserSimulator, pick_dialogue

__all__ = ["ReplayUser", "load_evolif_dialogue"]


def _infer_change(
    before: tuple[Constraint, ...] | None, after: tuple[Constraint, ...]
) -> tuple[str | None, str | None]:
    """(change, group) when exactly one group differs between two states of a topic."""
    if before is None:
        return None, None
    old = {c.group: c for c in before}
    new = {c.group: c for c in after}
    diffs = [("add", g) for g in new if g not in old]
    diffs += [("remove", g) for g in old if g not in new]
    diffs += [("modify", g) for g in new if g in old and new[g] != old[g]]
    return diffs[0] if len(diffs) == 1 else (None, None)


def _parse_line(record: Any, where: str) -> tuple[str, str, str, tuple[Constraint, ...], dict[str, Any]]:
    if not isinstance(record, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    verified, raw = record.get("user_query_verified"), record.get("user_query")
    if isinstance(verified, str) and verified.strip():
        text, text_field = verified.strip(), "user_query_verified"
    elif isinstance(raw, str) and raw.strip():
        text, text_field = raw.strip(), "user_query"
    else:
        raise DataFormatError(
            f"{where}: field 'user_query' must be a non-empty string (or 'user_query_verified' set), got {raw!r}"
        )
    if "active_topic" not in record:
        raise DataFormatError(f"{where}: missing field 'active_topic'")
    topic = record["active_topic"]
    if isinstance(topic, bool) or not isinstance(topic, str | int) or str(topic).strip() == "":
        raise DataFormatError(f"{where}: field 'active_topic' must be a string or an int, got {topic!r}")
    turn = record.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int)):
        raise DataFormatError(f"{where}: field 'turn' must be an int, got {turn!r}")
    instructions = record.get("instructions")
    if not isinstance(instructions, list):
        raise DataFormatError(f"{where}: field 'instructions' must be a list, got {instructions!r}")
    constraints = []
    for i, item in enumerate(instructions):
        field_name = f"instructions[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str) or "args" not in item:
            raise DataFormatError(f"{where}: field '{field_name}' must be an object with 'id' and 'args', got {item!r}")
        try:
            constraints.append(from_evolif(item["id"], item["args"]))
        except (IfgymError, ValueError) as exc:
            raise DataFormatError(f"{where}: field '{field_name}' (id {item['id']!r}): {exc}") from exc
    style = record.get("style")
    style_id = style.get("uuid") if isinstance(style, Mapping) else None
    meta = {"turn": turn, "text_field": text_field, "style_id": style_id}
    return text, text_field, str(topic).strip(), tuple(constraints), meta


def load_evolif_dialogue(path: str | Path) -> list[UserTurn]:
    """Parse an EvolIF dialogue JSONL into user turns (move "replay"). Blank lines are skipped."""
    path = not_a_folder(path, "EvolIF dialogue file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataFormatError(f"{path}: no such file") from None
    turns: list[UserTurn] = []
    states: dict[str, tuple[Constraint, ...]] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        text, _, topic, constraints, meta = _parse_line(record, where)
        change, group = _infer_change(states.get(topic), constraints)
        states[topic] = constraints
        meta.update(line=lineno, topic_title=topic, changed_group=group, source=str(path))
        turns.append(UserTurn(text, TurnSpec(constraints, topic, "replay", change, meta)))
    if not turns:
        raise DataFormatError(f"{path}: the file has no turns")
    return turns


class ReplayUser(UserSimulator):
    """Plays back EvolIF dialogue files turn by turn; the scripts are fixed, so rng is unused.

    `path` is one dialogue file, or a folder of them (every `*.jsonl` in it, in name order, each one
    dialogue: a folder of released dialogues replays in one run). `reset(options={"dialogue": i})`
    picks the dialogue by index in that order or by file name (without `.jsonl`); without the
    option a folder's dialogue is drawn from the rng (`EvolIFEnv` passes the seed modulo the count).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.is_dir():
            files = sorted(self.path.glob("*.jsonl"))
            if not files:
                raise DataFormatError(f"{self.path}: the folder holds no EvolIF dialogue file (*.jsonl)")
        else:
            files = [self.path]
        self.files = tuple(files)
        self.dialogues = [load_evolif_dialogue(f) for f in files]
        self._by_name = {f.stem: i for i, f in enumerate(files)}
        self.turns = self.dialogues[0]
        self.dialogue = 0
        self._next = 0
        self._started = False

    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Restart a script and return its first turn; the only option is `dialogue` (index or file name)."""
        if set(options or {}) - {"dialogue"}:
            raise ConfigError(
                f"ReplayUser.reset takes no options (the script is fixed) but 'dialogue', got {sorted(options or {})}"
            )
        if len(self.dialogues) == 1 and not options:
            self.dialogue = 0
        else:
            picked = pick_dialogue(
                range(len(self.dialogues)),
                self._by_name,
                rng,
                options,
                option_kind="EvolIF replay reset option",
                id_kind="EvolIF dialogue file",
            )
            self.dialogue = int(picked)
        self.turns = self.dialogues[self.dialogue]
        self._started = True
        self._next = 1
        return self.turns[0]

    def episode_meta(self) -> dict[str, Any]:
        """Which dialogue the episode replays: its file and its index among the replayed files."""
        return {"file": self.files[self.dialogue].name, "index": self.dialogue, "of": len(self.files)}

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The following turn of the file, or None at its end."""
        if not self._started:
            raise IfgymError("ReplayUser.next() called before reset()")
        if self._next >= len(self.turns):
            return None
        turn = self.turns[self._next]
        self._next += 1
        return turn

    @property
    def stats(self) -> dict[str, int | float]:
        """{"turns": script length, "played": turns returned so far}."""
        return {"turns": len(self.turns), "played": self._next}
