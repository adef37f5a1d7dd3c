"""Small pieces of English the user's words are built from: number words, quoting, counts, lists, clauses.

Shared by the constraint types' phrasings and cues (`ifgym.core.catalog`) and the user simulators
that put them into a message (`ifgym.simulators`). Picking one phrasing at random is
`ifgym.core.sampling.choice`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "NUMBER_WORDS",
    "a",
    "and_list",
    "clause",
    "count",
    "lower_first",
    "or_list",
    "quote",
    "sentences",
    "times",
]

# The name of each number from zero to twenty: NUMBER_WORDS[n] names n.
NUMBER_WORDS: tuple[str, ...] = tuple(
    (
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty"
    ).split()
)
_SMALL = 5  # counts up to five are written in words ("two words"), larger ones in digits ("40 words")


def quote(text: str) -> str:
    """`text` in curly double quotes."""
    return f"“{text}”"


def times(n: int) -> str:
    """Once, twice, 3 times: how often, in words."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def count(n: int, unit: tuple[str, str]) -> str:
    """A count with its unit, small numbers in words: one word, two words, 40 words."""
    return f"{NUMBER_WORDS[n] if 1 <= n <= _SMALL else n} {unit[0] if n == 1 else unit[1]}"


def and_list(items: Sequence[str]) -> str:
    """Items joined as in prose: a; a and b; a, b and c."""
    items = list(items)
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def or_list(items: Sequence[str]) -> str:
    """Items joined as alternatives: a; a or b; a, b or c."""
    items = list(items)
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


def a(word: str) -> str:
    """`word` with its indefinite article ("an excited", "a formal")."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def clause(text: str) -> str:
    """A sentence as a clause: end punctuation dropped, first letter lowered unless the word is an acronym."""
    text = text.strip().rstrip(".!")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def lower_first(text: str) -> str:
    """`text` with its first letter lowered to go on a sentence: "Hello there" -> "hello there".

    "I" (I'd, I'm) and an acronym (JSON, AI) keep their capital.
    """
    if text[1:2].isupper() or re.match(r"I\b", text):
        return text
    return text[:1].lower() + text[1:]


def sentences(parts: Sequence[str]) -> str:
    """Non-empty parts, stripped, joined by a space: the pieces of one message."""
    return " ".join(p.strip() for p in parts if p and p.strip())
