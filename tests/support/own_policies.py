"""Policies of a user's own, as `ifgym eval policy=custom policy._target_=support.own_policies.NAME` builds them.

Plain classes and functions (no ifgym base class), each of one of the forms a researcher's agent takes:
an object with `act` (and `reset`), one with only `async aact`, and a function of the messages. Their
replies say what they saw, so a test reads from the episodes what reached them.
"""

from __future__ import annotations

import asyncio


class CountingAgent:
    """Replies '<prefix> <n> users, call <k>': the user messages it was shown, and its calls since `reset`."""

    def __init__(self, prefix: str = "Seen", start: int = 0):
        self.prefix = prefix
        self.start = start
        self.calls = start
        self.resets = 0

    def reset(self) -> None:
        self.calls = self.start
        self.resets += 1

    def act(self, messages: list[dict[str, str]]) -> str:
        self.calls += 1
        users = sum(m["role"] == "user" for m in messages)
        return f"{self.prefix} {users} users, call {self.calls}"


class AsyncAgent:
    """Only `aact`: replies 'async <n>' (the user messages it was shown)."""

    async def aact(self, messages: list[dict[str, str]]) -> str:
        await asyncio.sleep(0)
        return f"async {sum(m['role'] == 'user' for m in messages)}"


def last_words(messages: list[dict[str, str]], words: int = 2) -> str:
    """A function messages -> str: the last `words` words of the newest user message."""
    return " ".join(messages[-1]["content"].split()[-words:])


class NotAPolicy:
    """Neither callable nor with act/aact."""

    def __init__(self, size: int = 1):
        self.size = size


class QuotedWordAgent:
    """Starts its reply with the first word the newest user message quotes ('…'): what a word-asking user wants."""

    def act(self, messages: list[dict[str, str]]) -> str:
        quoted = messages[-1]["content"].split("'")[1]
        return f"{quoted.capitalize()} is the word you asked for."
