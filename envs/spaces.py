"""Spaces for text dialogue: a reply string (action) and a list of chat messages (observation).

gymnasium's `spaces.Text` has a fixed charset that rejects ordinary sentences, so ifgym has its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from ifgym.errors import ConfigError

ROLES = ("system", "user", "assistant")

# Words for `sample()`: enough variety to exercise checkers, nothing more.
_SAMPLE_WORDS = (
    "the model writes a short answer about rivers, bread and small robots; it lists facts, "
    "asks questions, and ends politely. JSON { } - * # 42 ok yes no because therefore"
).split()


class ReplySpace(spaces.Space[str]):
    """Any `str` of at most `max_chars` characters (the assistant's reply)."""

    def __init__(self, max_chars: int = 100_000, seed: int | np.random.Generator | None = None):
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ConfigError(f"max_chars must be a positive int, got {max_chars!r}")
        self.max_chars = max_chars
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A few random words; for smoke tests, not a meaningful reply."""
        n = int(self.np_random.integers(1, 40))
        words = self.np_random.choice(_SAMPLE_WORDS, size=n)
        return " ".join(words)[: self.max_chars]

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_chars

    def __repr__(self) -> str:
        return f"ReplySpace(max_chars={self.max_chars})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ReplySpace) and other.max_chars == self.max_chars


class ChatSpace(spaces.Space[list]):
    """A list of `{"role": system|user|assistant, "content": str}` messages (the observation)."""

    def __init__(self, seed: int | np.random.Generator | None = None):
        super().__init__(dtype=object, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        """One to three alternating messages ending with a user turn."""
        n = int(self.np_random.integers(0, 2)) * 2 + 1
        messages = []
        for i in range(n):
            words = self.np_random.choice(_SAMPLE_WORDS, size=int(self.np_random.integers(3, 12)))
            messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words)})
        return messages

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in x
        )

    def __repr__(self) -> str:
        return "ChatSpace()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ChatSpace)
