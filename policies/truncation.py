"""The truncation baseline: the wrapped policy sees only the last k turns of the dialogue."""

from __future__ import annotations

from typing import Any

from ifgym.llm import Message
from ifgym.policies.base import Policy
from ifgym.policies.wrapper import BaseCall, Turn, WrapperPolicy, check_int


def truncate(messages: list[Message], k: int | None) -> list[Message]:
    """System messages plus the last `k` turns; the current (unanswered) user message is one of them.

    A turn starts at a user message and runs to the next one, so the cut never leaves an assistant
    message without its question. `k=1` keeps only the current message; `k=None` keeps everything.
    """
    if k is None:
        return list(messages)
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if len(starts) <= k:
        return list(messages)
    cut = starts[-k]
    return [m for m in messages[:cut] if m["role"] == "system"] + list(messages[cut:])


class Truncation(WrapperPolicy):
    """Send the wrapped policy only the last `k` turns (default 4) plus any system message.

    A turn is a user message and the answer to it; the current user message counts as the last
    turn, so `k=4` shows the model three earlier exchanges and the new request. `k=None` keeps the
    whole history: the plain policy, with the same per-turn cost records (the full-history row
    of a comparison). No light model is used: one base call per turn.
    """

    def __init__(self, base: Policy, k: int | None = 4):
        super().__init__(base)
        if k is not None:
            check_int("Truncation k", k, 1)
        self.k = k

    def _reset_state(self) -> None:
        """Truncation keeps no state between turns."""

    def _turn(self, messages: list[Message]) -> Turn:
        reply = yield BaseCall(truncate(messages, self.k))
        return reply

    def __repr__(self) -> str:
        return f"Truncation(base={self.base!r}, k={self.k!r})"

    def describe(self) -> dict[str, Any]:
        """The wrapper's settings, for logs."""
        return {"policy": "truncation", "k": self.k}

    def protocol(self) -> dict[str, Any]:
        """The baseline as the results table names it: full history, or truncation with its k."""
        name = "full history" if self.k is None else f"truncation (k={self.k})"
        return {**super().protocol(), "name": name}
