"""The interface every simulated user implements; the env calls exactly these methods."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ifgym.core import UserTurn, Verdict
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm.conversation import Completion, awaits_blocking

__all__ = ["UserSimulator"]


def text_of(completion: Completion) -> str:
    """A completion's text, "" for none: what a user model's Conversation is sent back (`asking(…, read=text_of)`)."""
    return completion.text or ""


class UserSimulator(ABC):
    """The user side of a dialogue: emits user turns, each with its ground-truth spec.

    `reset` starts an episode and returns the first turn; `next` returns the following turn
    given the dialogue so far (the last message is the model's reply to the previous turn) and
    that reply's verdicts, or None when the user's script is over. Sync and async are written
    once: a simulator that calls a model writes `reset`/`next` with `ifgym.llm.conversation.twin`
    (generators of Calls), which gives `areset`/`anext` too; one written plainly (blocking
    `reset`/`next` only, as a user's own simulator may be) gets `areset`/`anext` from this base,
    calling the blocking ones.
    """

    @abstractmethod
    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Start a new episode; every random choice comes from `rng`."""

    @abstractmethod
    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The next user turn, or None when the script is over."""

    areset = awaits_blocking("reset")
    anext = awaits_blocking("next")

    @property
    def stats(self) -> dict[str, int | float]:
        """Counters for logging (renders, LLM fallbacks, regenerations …); empty by default."""
        return {}

    def episode_meta(self) -> dict[str, Any]:
        """What this user contributes to the episode record (the env reads it, never the user's internals).

        Users with per-episode draws return them (a persona, sampled facts, the dialogue played,
        their last words, a patience of their own); empty by default.
        """
        return {}

    @property
    def system_prompt(self) -> str | None:
        """A system prompt the env puts before the dialogue, or None."""
        return None

    @property
    def end_reason(self) -> str:
        """Why `next` returned None (the env's `done_reason`): "script_end" unless the user says otherwise.

        Simulators that can end a dialogue for other reasons (a hang-up, a finished task) override it.
        """
        return "script_end"


def pick_dialogue(
    dialogues: Sequence[Any],
    by_id: Mapping[str, int],
    rng: np.random.Generator,
    options: Mapping | None,
    *,
    option_kind: str,
    id_kind: str,
) -> Any:
    """A replaying user's dialogue for `reset`: `options["dialogue"]` (an index or an id in `by_id`), else `rng`'s pick.

    `option_kind` and `id_kind` name the reset option and the id in the errors (unknown option,
    index out of range, unknown id).
    """
    options = dict(options or {})
    for key in options:
        if key != "dialogue":
            raise UnknownNameError(option_kind, key, ("dialogue",))
    choice = options.get("dialogue")
    if choice is None:
        return dialogues[int(rng.integers(len(dialogues)))]
    if isinstance(choice, numbers.Integral) and not isinstance(choice, bool):  # also numpy integers
        choice = int(choice)
        if not 0 <= choice < len(dialogues):
            raise ConfigError(f"dialogue index {choice} is outside 0..{len(dialogues) - 1}")
        return dialogues[choice]
    if isinstance(choice, str) and choice in by_id:
        return dialogues[by_id[choice]]
    raise UnknownNameError(id_kind, choice, by_id)
