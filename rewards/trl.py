"""Trainer-facing rewards and data: a TRL reward function and episode -> prompt-dataset export.

`ConstraintReward` has the signature TRL's `GRPOTrainer(reward_funcs=...)` calls:
`reward(completions, **columns) -> list[float | None]`, reading each sample's constraints from a
dataset column named `constraints`. `export_prompt_rows` turns every turn of recorded episodes
into such a row (conversational prompt + constraints), `write_prompt_rows` writes them as JSONL.

Only rule-checkable constraints are scored here: judged ones (emotion, style, reader age) need an
LLM call per completion and are skipped, so a sample whose constraints are all judged gets None
("not applicable" to TRL), as does one whose rule verdicts are all unknown.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ifgym.core import Episode
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.rewards.constraints import SEMANTICS, Constraint, check

__all__ = ["ConstraintReward", "export_prompt_rows", "write_prompt_rows"]

REWARD_MODES = ("fraction", "all")


class ConstraintReward:
    """TRL reward: how well each completion meets its sample's rule-checkable constraints.

    `mode="fraction"`: the share of rule constraints satisfied; `mode="all"`: 1.0 when all hold,
    else 0.0. `loose=True` uses IFEval-style loose checking; `semantics="evolif"` the verdicts of
    EvolIF's released evaluator (see `ifgym.rewards.check`; it has no loose reading).

    Unknown rule verdicts (a branch that does not apply) count neither way. A plain class so that
    it pickles (TRL may copy reward functions into worker processes); `__name__` names it in logs.
    """

    def __init__(self, loose: bool = False, mode: str = "fraction", semantics: str = "ifgym"):
        if mode not in REWARD_MODES:
            raise UnknownNameError("ConstraintReward mode", mode, REWARD_MODES)
        if not isinstance(loose, bool):
            raise ConfigError(f"ConstraintReward loose must be True or False, got {loose!r}")
        if semantics not in SEMANTICS:
            raise UnknownNameError("ConstraintReward semantics", semantics, SEMANTICS)
        if loose and semantics == "evolif":
            raise ConfigError("ConstraintReward: semantics='evolif' has one reading; drop loose=True")
        self.loose = loose
        self.mode = mode
        self.semantics = semantics
        suffix = "_loose" if loose else "_evolif" if semantics == "evolif" else ""
        self.__name__ = f"ifgym_constraints_{mode}{suffix}"

    def __repr__(self) -> str:
        return f"ConstraintReward(loose={self.loose}, mode={self.mode!r}, semantics={self.semantics!r})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion against the constraints in the same row of `kwargs["constraints"]`."""
        if "constraints" not in kwargs:
            raise DataFormatError(
                "ConstraintReward needs a dataset column 'constraints' (per sample a list of "
                "{'id': ..., 'params': {...}} dicts, or a JSON string of that list); the columns "
                f"received were: {sorted(kwargs) or 'none'}. Build the dataset with "
                "ifgym.rewards.trl.export_prompt_rows."
            )
        column = kwargs["constraints"]
        if isinstance(column, str | bytes) or not isinstance(column, Sequence):
            raise DataFormatError(
                f"the 'constraints' column must hold one entry per completion, got {type(column).__name__}"
            )
        if len(column) != len(completions):
            raise DataFormatError(
                f"{len(completions)} completions but {len(column)} 'constraints' entries; they must pair up"
            )
        return [
            self._score(_completion_text(c, i), _parse_constraints(raw, i))
            for i, (c, raw) in enumerate(zip(completions, column, strict=True))
        ]

    def _score(self, text: str, constraints: Sequence[Constraint]) -> float | None:
        rule = [c for c in constraints if not c.judged]
        labels = [check(c, text, loose=self.loose, semantics=self.semantics).label for c in rule]
        yes, no = labels.count("yes"), labels.count("no")
        if yes + no == 0:
            return None
        if self.mode == "all":
            return float(no == 0)
        return yes / (yes + no)


def _completion_text(completion: Any, index: int) -> str:
    """Return the text of a completion: a plain string, or the last assistant message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            # TRL builds {"role": "assistant", "content": ...}; some callers omit the role
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                raise DataFormatError(
                    f"completion {index}: the assistant message content must be a str, got {content!r}"
                )
        raise DataFormatError(f"completion {index}: a conversational completion has no assistant message")
    raise DataFormatError(
        f"completion {index}: expected a str or a list of chat messages, got {type(completion).__name__}"
    )


def _parse_constraints(raw: Any, index: int) -> tuple[Constraint, ...]:
    if isinstance(raw, str):
        try:
            return _constraints_from_string(raw)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"sample {index}: 'constraints' is not valid JSON ({err})") from None
        except DataFormatError as err:
            raise DataFormatError(f"sample {index}: {err}") from None
    return _constraints_from_list(raw, index)


# GRPO scores several completions per prompt, so the same constraints string comes back again and
# again; Constraint objects are immutable, so parsed ones can be shared.
@functools.lru_cache(maxsize=4096)
def _constraints_from_string(raw: str) -> tuple[Constraint, ...]:
    return _constraints_from_list(json.loads(raw), None)


def _constraints_from_list(raw: Any, index: int | None) -> tuple[Constraint, ...]:
    where = "" if index is None else f"sample {index}: "
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise DataFormatError(f"{where}'constraints' must be a list of constraint dicts, got {type(raw).__name__}")
    return tuple(Constraint.from_json(c) for c in raw)


def export_prompt_rows(episodes: Iterable[Episode], *, constraints_as_json: bool = True) -> list[dict[str, Any]]:
    """One prompt row per turn of each episode, in TRL's conversational prompt format.

    `prompt` holds the system prompt (if any), the earlier turns (user, then the recorded assistant
    reply) and this turn's user message; `constraints` is that turn's constraints (rule and judged;
    ConstraintReward skips the judged ones); `episode_id` and `turn` say where the row came from.

    `constraints` is a JSON string of the list of `{"id", "params"}` dicts by default: loaded with
    `datasets`, a column of dicts whose keys differ from row to row is widened to one struct type
    (every row gets every key, absent ones as None), which would corrupt the params.
    `constraints_as_json=False` keeps the list of dicts as is.
    """
    rows: list[dict[str, Any]] = []
    for episode in episodes:
        history: list[dict[str, str]] = []
        if episode.system_prompt:
            history.append({"role": "system", "content": episode.system_prompt})
        for turn in episode.turns:
            prompt = [*history, {"role": "user", "content": turn.user}]
            constraints = [c.to_json() for c in turn.spec.constraints]
            rows.append(
                {
                    "prompt": prompt,
                    "constraints": json.dumps(constraints, ensure_ascii=False) if constraints_as_json else constraints,
                    "episode_id": episode.episode_id,
                    "turn": turn.index,
                }
            )
            history = [*prompt, {"role": "assistant", "content": turn.reply}]
    return rows


def write_prompt_rows(episodes: Iterable[Episode], path: str | Path, *, constraints_as_json: bool = True) -> int:
    """Write `export_prompt_rows(episodes)` to `path` as JSONL (UTF-8); return the number of rows."""
    rows = export_prompt_rows(episodes, constraints_as_json=constraints_as_json)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)
