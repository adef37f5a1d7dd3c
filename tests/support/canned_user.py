"""Canned answers for the LLM user renderer's three kinds of calls (generate, topic check, checklist).

Use with ifgym.llm.CannedClient(fn): the function looks at the system prompt to tell the calls
apart, so a test can script each kind independently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from support.prompts import known_kind

Messages = list[dict[str, str]]


def call_kind(messages: Messages) -> str:
    """'generate', 'topic' or 'checklist': which of the renderer's calls this is (see support.prompts)."""
    kind = known_kind(messages)
    if not kind.startswith("user."):
        raise AssertionError(f"not a renderer prompt: {messages[0]['content'][:80]!r}")
    return kind.removeprefix("user.")


def requirement_count(messages: Messages) -> int:
    """How many numbered requirements the checklist prompt lists."""
    body = messages[-1]["content"].split("Requirements:", 1)[1]
    return len(re.findall(r"^\d+\. ", body, flags=re.MULTILINE))


def stating_draft(messages: Messages) -> str:
    """A draft made of the generation prompt's instruction lines: it contains every value they ask to state."""
    asks = [line[2:] for line in messages[-1]["content"].splitlines() if line.startswith("- ")]
    return " ".join(asks[:3])


def all_yes(n: int) -> str:
    return json.dumps({str(i): "yes" for i in range(1, n + 1)})


def scripted_user_model(
    generate: Callable[[Messages], str] | None = None,
    topic: Callable[[Messages], str] | None = None,
    checklist: Callable[[Messages], str] | None = None,
) -> Callable[[Messages], str]:
    """A CannedClient function; each kind defaults to a draft that passes every check."""

    def answer(messages: Messages) -> str:
        kind = call_kind(messages)
        if kind == "generate":
            return generate(messages) if generate else "Could you write about this for me, following all my rules?"
        if kind == "topic":
            return topic(messages) if topic else "yes"
        return checklist(messages) if checklist else all_yes(requirement_count(messages))

    return answer


all_yes_user_model = scripted_user_model()
