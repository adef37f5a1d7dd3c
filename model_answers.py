"""Reading what a model answered: JSON found in it, text defanged for a prompt, numbered answers placed.

Every judge, simulator and policy wrapper that asks a model for structured output reads the answer
here, so they all forgive the same mess and refuse the same guesses:

- `extract_json(text, accept)`: the first JSON value in an answer that `accept` likes, wherever it
  is: the whole text, a Markdown code fence, the span from the first `{` (or `[`) to the last `}`
  (`]`) in prose; strict JSON first, then the same places repaired by `json_repair` (truncated
  answers, single quotes, trailing commas). `json_object(text)` is the usual case: an object.
- `defang(text, tags)`: copies of a prompt's own tags inside text that goes into the prompt (a
  reply, a request, a transcript) become harmless: `<reply>`, `< /Reply >`, `<item 3>` turn into
  `[reply]`, `[/Reply]`, `[item 3]`, so the text cannot close its own block and speak to the model.
- `item_number(value)` and `place(answers, n)`: answers to numbered items. **The rule for count
  mismatches**: an answer that names its item (a number, or a key the caller maps to one) goes to
  that item; an answer that names none is placed by its position only when the answer holds exactly
  `n` entries. With more or fewer entries nothing says which item was skipped or added, so such
  answers are not placed (`Placement.unplaced` counts them), their items stay unanswered, and the
  caller re-asks or reports them unknown. The first answer to an item wins; numbers outside 1..n are
  reported as `extra`.
- `yes_no(value)`: a Yes or a No (with an optional short explanation after it) in one entry of a
  structured answer, or None; `leading_yes_no(text)`: the answer to a one-word yes-or-no question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import json_repair

__all__ = [
    "Placement",
    "defang",
    "extract_json",
    "item_number",
    "item_problems",
    "json_object",
    "leading_yes_no",
    "place",
    "yes_no",
]

T = TypeVar("T")

_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json(text: Any, accept: Callable[[Any], bool] = lambda data: True) -> Any:
    """The first JSON value in a model's `text` that `accept` likes, or None (never raises).

    Tries, in order: the whole text, fenced blocks, the span between the first '{' and the last
    '}' (then '[' ... ']') as strict JSON; then the fenced blocks, the text from the first brace on
    (which keeps a truncated tail), the spans and the whole text through `json_repair`.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    fenced = [m.group(1) for m in _FENCE_RE.finditer(text)]
    spans, tails = [], []
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = text.find(open_), text.rfind(close)
        if start != -1:
            tails.append(text[start:])
            if end > start:
                spans.append(text[start : end + 1])
    for candidate in [text, *fenced, *spans]:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if accept(data):
            return data
    for candidate in [*fenced, *tails, *spans, text]:
        data = json_repair.loads(candidate)
        if accept(data):
            return data
    return None


def json_object(text: Any) -> dict[str, Any] | None:
    """The first JSON object in a model's answer (see `extract_json`), or None; a list or a string is none."""
    return extract_json(text, lambda data: isinstance(data, dict))


def defang(text: str, tags: Iterable[str]) -> str:
    """`text` with every copy of `tags` (opening or closing, any case, spaces or attributes) in square brackets."""
    names = "|".join(re.escape(t) for t in tags)
    pattern = re.compile(rf"<\s*(/?)\s*({names})\b([^>]*)>", re.IGNORECASE)
    return pattern.sub(lambda m: f"[{m.group(1)}{m.group(2)}{m.group(3).rstrip()}]", text)


ITEM_PREFIX = r"(?:item|question|q)?\s*#?"


def item_number(value: Any, prefix: str = ITEM_PREFIX) -> int | None:
    """A number a model gave for an item: 3, 3.0, "3", "item 3", "#3", "question 3", "Q3"; else None.

    `prefix` is the regex of the words that may come before the digits in a string (other callers
    number turns or rules, e.g. "turn 3").
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(rf"\s*{prefix}\s*(\d+)\s*", value, re.IGNORECASE)
        return int(m.group(1)) if m else None
    return None


@dataclass
class Placement(Generic[T]):
    """Answers placed on items 1..n: `items` by number, `unplaced` unnumbered answers, `extra` numbers beyond n."""

    n: int
    items: dict[int, T] = field(default_factory=dict)
    unplaced: int = 0
    entries: int = 0  # how many entries the answer held

    @property
    def missing(self) -> list[int]:
        """Items 1..n with no answer."""
        return [i for i in range(1, self.n + 1) if i not in self.items]

    @property
    def extra(self) -> list[int]:
        """Item numbers the answer used that do not exist."""
        return sorted(i for i in self.items if not 1 <= i <= self.n)


def place(answers: Sequence[tuple[int | None, T | None]], n: int) -> Placement[T]:
    """Place `(item number or None, answer or None)` pairs on items 1..n by the module's one rule.

    An entry whose answer is None (cut off, or without the value asked for) counts as an entry but
    answers nothing, so its item stays missing and is re-asked.
    """
    out: Placement[T] = Placement(n, entries=len(answers))
    by_position = len(answers) == n
    for position, (item, answer) in enumerate(answers, start=1):
        if item is None:
            if not by_position:
                out.unplaced += answer is not None
                continue
            item = position
        if answer is not None:
            out.items.setdefault(item, answer)
    return out


def item_problems(placement: Placement[Any], noun: Literal["score", "answer", "label"]) -> list[str]:
    """What a placement lacks, worded for the model when it is re-asked (answers without a number first)."""
    problems = []
    if placement.unplaced:
        problems.append(
            f"{placement.entries} answers for {placement.n} items, {placement.unplaced} of them without an item "
            'number, so they cannot be matched to items; give every entry its "item" number'
        )
    if placement.missing:
        problems.append(f"no {noun} for item(s) {', '.join(map(str, placement.missing))}")
    if placement.extra:
        problems.append(f"item(s) {', '.join(map(str, placement.extra))} do not exist (there are {placement.n})")
    return problems


# "Yes", "**No**", "No, it is too long", "**No** - too long"; not "Not really", "No problem", "Yes and no"
_YES_NO = re.compile(
    r"[\s*_\"'`]*(yes|no)[*_\"'`]*(?:[\s*_\"'`.!]*|\s*[,.;:!\-\u2013\u2014(].*)", re.IGNORECASE | re.DOTALL
)


def yes_no(value: Any) -> Literal["yes", "no"] | None:
    """Yes or no from one entry of a model's answer: a bool, or a Yes/No with an optional explanation after it.

    None for anything else, so "No problem", "Not really" or "Yes and no" are no answer at all.
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        m = _YES_NO.fullmatch(value.strip())
        if m:
            return "yes" if m.group(1).lower() == "yes" else "no"
    return None


_LEADING_YES_NO = re.compile(r"^[\W_]*(yes|no)\b")


def leading_yes_no(text: str) -> bool | None:
    """The answer to a one-word yes-or-no question, read from its first word ("Yes, it does" is yes); else None.

    Looser than `yes_no`, which reads one entry of a structured answer: here the whole answer is the
    reply to a question that asked for a single word, so what follows that word does not matter.
    """
    match = _LEADING_YES_NO.match(text.strip().lower())
    return None if match is None else match.group(1) == "yes"
