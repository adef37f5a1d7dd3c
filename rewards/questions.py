"""Checklist questions a rule can decide, read from their wording (StructFlowBench-style yes/no questions).

A small judge says "yes" to almost any question, including ones a rule answers exactly: "Is the
response limited to 150 words?", "Does the response include the keywords 'ATP' and 'glucose'?",
"Does the response avoid using the word 'canvas'?", "Does the response start with 'In summary'?".
`question_rule(question)` recognises such a question only when its whole wording matches one of a
few fixed forms (anything more, "limited to about 150 words", "at least twice", "150 words per
field", is left to the judge) and returns a `QuestionRule` whose `check(reply)` gives the verdict.

How each form is decided:

- words: whitespace-separated tokens holding a letter or digit ("state-of-the-art" is one word, as
  a reader counts it); "limited to / within / no more than / at most / up to N" means <= N,
  "under / fewer than / less than N" < N, "at least N" >= N, "more than / over / longer than N" > N,
  "exactly N" == N. Sentences are counted with pysbd and paragraphs as blocks between blank lines
  (the catalog's `length.sentences` and `length.paragraphs` checkers).
- keywords: case-insensitive, whole words, a plural "s"/"es" allowed ("pigment" is in "pigments",
  "Republic" is not in "Republican"); "include the keywords 'a', 'b' and 'c'" needs all of them,
  "avoid the word(s) 'a' (or 'b')" none of them.
- "start with 'X'" / "end with 'X'": the reply's first / last words are X, case-insensitive,
  ignoring surrounding quote marks and punctuation; a trailing "..." in X means "X and more".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ifgym.core import Verdict

__all__ = ["QuestionRule", "question_rule"]

_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "hundred": 100,
}
_SUBJECT = r"(?:is|does) the (?:entire |whole )?(?:response|answer|reply)"
_NUM = r"(\d+|" + "|".join(_NUMBER_WORDS) + r")"
_UNIT = r"(words?|sentences?|paragraphs?)"
_TAIL = r"(?: long| in length| or (?:fewer|less)| maximum| at most)?"
_QUOTED = r"['\"\u2018\u201c]([^'\"\u2019\u201d]+?)['\"\u2019\u201d]"
_QUOTES = _QUOTED + r"(?:(?:,|,? and|,? or) " + _QUOTED + r")*"
_BOUNDS: tuple[tuple[str, str], ...] = (
    ("<=", r"(?:limited to|kept to|kept within|within|no more than|not more than|at most|up to|a maximum of)"),
    ("<", r"(?:under|below|less than|fewer than|shorter than)"),
    (">=", r"(?:at least|no fewer than|no less than|a minimum of)"),
    (">", r"(?:more than|over|longer than)"),
    ("==", r"(?:exactly|precisely)"),
)
_LENGTH_FORMS = [
    (op, re.compile(rf"{_SUBJECT} (?:limited to )?{words} {_NUM} {_UNIT}{_TAIL}", re.IGNORECASE))
    for op, words in _BOUNDS
] + [("<=", re.compile(rf"{_SUBJECT} limited to {_NUM} {_UNIT}{_TAIL}", re.IGNORECASE))]
_INCLUDE = re.compile(
    rf"{_SUBJECT} (?:include|contain|use|mention|incorporate) (?:the )?(?:specific |exact )?(?:key)?"
    rf"(?:words?|terms?|phrases?) {_QUOTES}",
    re.IGNORECASE,
)
_AVOID = re.compile(
    rf"{_SUBJECT} (?:avoid|refrain from|not) (?:explicitly )?(?:using|mentioning|including|use|mention|include)? ?"
    rf"(?:the )?(?:key)?(?:words?|terms?|phrases?) {_QUOTES}",
    re.IGNORECASE,
)
_EDGE = re.compile(
    rf"{_SUBJECT} (start|begin|open|end|finish|conclude) with (?:the (?:words?|phrase) )?{_QUOTED}", re.I
)
_OPS: dict[str, Callable[[int, int], bool]] = {
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "==": lambda a, b: a == b,
}


@dataclass(frozen=True)
class QuestionRule:
    """A checklist question decided by a rule: `check(reply)` is yes or no, with the count or match found."""

    kind: str  # "length", "include", "avoid", "start" or "end"
    describe: str  # what is checked, in words (e.g. "words <= 150")
    _check: Callable[[str], tuple[bool, str]]

    def check(self, reply: str) -> Verdict:
        """The verdict for `reply`, with what was counted or found as the reason."""
        ok, found = self._check(reply)
        return Verdict("yes" if ok else "no", f"{self.describe}: {found}", "rule")


def _number(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBER_WORDS[text.lower()]


def _count(unit: str, reply: str) -> int:
    from ifgym.core.catalog import count_paragraphs, count_sentences

    if unit.startswith("word"):
        return len(re.findall(r"\S*\w\S*", reply))
    return count_sentences(reply) if unit.startswith("sentence") else count_paragraphs(reply)


def _keyword_re(keyword: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(w) for w in keyword.split())
    return re.compile(rf"(?<!\w){words}(?:e?s)?(?!\w)", re.IGNORECASE)


def _edge_words(text: str) -> str:
    """The text's words, lower-cased, with punctuation and quote marks dropped (apostrophes kept)."""
    return " ".join(re.sub(r"[^\w\s']", " ", text.casefold()).replace("'", " ").split())


def question_rule(question: str) -> QuestionRule | None:
    """The rule that decides `question`, or None when its wording is not one of the fixed forms."""
    if not isinstance(question, str):
        return None
    text = re.sub(r"\s+", " ", question.strip()).rstrip("?.! ").strip()
    for op, form in _LENGTH_FORMS:
        m = form.fullmatch(text)
        if m:
            n, unit = _number(m.group(1)), m.group(2).lower()
            plural = unit if unit.endswith("s") else unit + "s"

            def length(reply: str, op: str = op, n: int = n, unit: str = plural) -> tuple[bool, str]:
                count = _count(unit, reply)
                return _OPS[op](count, n), f"{count} {unit}"

            return QuestionRule("length", f"{plural} {op} {n}", length)
    for kind, form in (("include", _INCLUDE), ("avoid", _AVOID)):
        m = form.fullmatch(text)
        if m:
            keywords = [k.strip() for k in re.findall(_QUOTED, text) if k.strip()]
            patterns = [(k, _keyword_re(k)) for k in keywords]

            def keywords_check(reply: str, kind: str = kind, patterns=patterns) -> tuple[bool, str]:
                present = [k for k, p in patterns if p.search(reply)]
                if kind == "include":
                    missing = [k for k, _ in patterns if k not in present]
                    return not missing, f"missing {missing}" if missing else "all present"
                return not present, f"uses {present}" if present else "none used"

            return QuestionRule(kind, f"{kind} {keywords}", keywords_check)
    m = _EDGE.fullmatch(text)
    if m:
        where = "start" if m.group(1).lower() in ("start", "begin", "open") else "end"
        target = m.group(2).strip()
        prefix_only = target.endswith("...") or target.endswith("\u2026")
        wanted = _edge_words(target.rstrip(".\u2026"))
        if not wanted:
            return None

        def edge(
            reply: str, where: str = where, wanted: str = wanted, prefix_only: bool = prefix_only
        ) -> tuple[bool, str]:
            words = _edge_words(reply)
            if where == "start":
                ok = words == wanted or words.startswith(wanted + " ")
            else:
                ok = not prefix_only and (words == wanted or words.endswith(" " + wanted))
            shown = words[: len(wanted) + 20] if where == "start" else words[-(len(wanted) + 20) :]
            return ok, f"{where}s with {shown!r}"

        return QuestionRule(where, f"{where}s with {target!r}", edge)
    return None
