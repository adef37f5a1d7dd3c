"""Small pieces of English the user's words are built from: quoting, counts, lists, articles, clauses.

Shared by the constraint types' phrasings (`ifgym.core.catalog`) and the renderers that put them
into a message (`ifgym.simulators.render`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NUMBER_WORDS", "a", "and_list", "clause", "count", "or_list", "quote", "times"]

NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def quote(text: str) -> str:
    """`text` in curly double quotes."""
    return f"“{text}”"


def times(n: int) -> str:
    """Once, twice, 3 times: how often, in words."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def count(n: int, unit: tuple[str, str]) -> str:
    """A count with its unit, small numbers in words: one word, two words, 40 words."""
    return f"{NUMBER_WORDS.get(n, n)} {unit[0] if n == 1 else unit[1]}"


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
