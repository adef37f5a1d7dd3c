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
- length, other wordings: "Does the response contain / have / consist of exactly 3 paragraphs",
  "Is the response written / provided in 4 paragraphs" (exactly 4), "in one sentence", "a
  single paragraph" (exactly 1), "Is the response 100 words or fewer" (<=), "... or more" (>=).
- keyword counts: "Does the response mention / use / include (the word) 'X' at least / exactly /
  at most N times" (or "once", "twice", "thrice"), matched as keywords are above (whole words,
  any case, a plural allowed).
- formats: "Is the response (presented / formatted / provided / written / output) in / as JSON
  (format)": the reply (the catalog's `format.json`, strict or loose) or a fenced block in it
  parses as JSON; "... in Markdown (format)": the reply uses Markdown syntax (a heading, a list,
  bold, a table or a code fence; a fence left open by a cut-off reply still counts); "... in a
  (Markdown) table (format)" and "Does the response include / use / contain a (Markdown) table":
  a Markdown table (a header row with pipes and a `---` separator row under it); "... in bullet
  points / as a bulleted list" and "Does the response use bullet points": at least two bullet
  lines (`-`, `*`, `+` or `•`); "... as a numbered list" / "Does the response use a numbered
  list": at least two lines starting "1." / "2)".
- language: "Is the response (written) in English / Chinese / Japanese / Korean / Russian /
  Arabic": the share of the reply's letters in that script (Latin for English, and then English
  function words among its words: at least 1 in 10) is at least 0.9 (Chinese: Han; Japanese:
  kana present and Han or kana 0.9); other languages are left to the judge.
- case: "Is the response (written) (entirely) in lowercase / uppercase / capital letters / all
  caps": the catalog's `case.lower` / `case.upper`.
"""

from __future__ import annotations

import functools
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
_TIMES = r"(?:(once|twice|thrice)|" + _NUM + r" times?)"
_COUNT_BOUNDS = ((">=", r"at least"), ("==", r"exactly"), ("<=", r"(?:at most|no more than)"), ("==", r""))
_COUNT_FORMS = [
    (
        op,
        re.compile(
            r"(?:does the (?:response|answer|reply) (?:mention|use|include|contain|repeat)"
            rf"|{_SUBJECT} (?:mentioning|using)) "
            rf"(?:the )?(?:key)?(?:words?|terms?|phrases?)? ?{_QUOTED} {bound + ' ' if bound else ''}{_TIMES}",
            re.IGNORECASE,
        ),
    )
    for op, bound in _COUNT_BOUNDS
]
_TIMES_WORDS = {"once": 1, "twice": 2, "thrice": 3}
_HAVE = r"does the (?:response|answer|reply) (?:contain|have|consist of|include|use)"
_IN = rf"{_SUBJECT} (?:written |provided |presented |given |delivered |structured |kept )?in"
_MORE_LENGTH_FORMS = [(op, re.compile(rf"{_HAVE} {words} {_NUM} {_UNIT}", re.IGNORECASE)) for op, words in _BOUNDS] + [
    ("==", re.compile(rf"{_HAVE} {_NUM} {_UNIT}", re.IGNORECASE)),
    ("==", re.compile(rf"{_IN} (?:exactly )?{_NUM} {_UNIT}", re.IGNORECASE)),
    (
        "==",
        re.compile(
            rf"{_SUBJECT} (?:written |provided |presented )?(?:as |in )?(a single|one) (paragraph|sentence)", re.I
        ),
    ),
    ("<=", re.compile(rf"{_SUBJECT} {_NUM} {_UNIT}(?: long)? or (?:fewer|less)", re.IGNORECASE)),
    (">=", re.compile(rf"{_SUBJECT} {_NUM} {_UNIT}(?: long)? or (?:more|longer)", re.IGNORECASE)),
]
_SHAPED = r"(?:presented|formatted|provided|output|written|structured|given|delivered|organized|organised)"
_FORMAT_NAMES = {
    "json": r"(?:valid |proper |well-formed )?json(?: format| structure| object| form)?",
    "markdown": r"(?:proper |valid )?markdown(?: format| formatting| document| syntax)?",
    "table": r"(?:a |the )?(?:markdown )?table(?: format| form)?|(?:a |the )?markdown table",
    "bullets": r"(?:the )?(?:form of )?(?:a )?"
    r"(?:bullet(?:ed)? points?|bullet(?:ed)? list|bulleted format|bullet point format)",
    "numbered": r"(?:a )?numbered (?:list|points|steps)(?: format)?",
}
_FORMAT_FORMS = [
    (
        name,
        re.compile(
            rf"(?:{_SUBJECT} (?:{_SHAPED} )?(?:in|as|using|with) (?:an? |the )?(?:{words})(?: for clarity)?"
            rf"|(?:does|did) the (?:response|answer|reply) (?:use|include|contain|follow|adopt|present (?:the )?"
            rf"(?:information|content|answer) (?:in|as)) (?:an? |the )?(?:{words}))",
            re.IGNORECASE,
        ),
    )
    for name, words in _FORMAT_NAMES.items()
]
_LANGUAGES = ("english", "chinese", "japanese", "korean", "russian", "arabic")
_LANGUAGE = re.compile(
    rf"{_SUBJECT} (?:written |provided |presented |given )?(?:entirely |only |fully )?in "
    rf"({'|'.join(_LANGUAGES)})(?: language)?(?: only)?",
    re.IGNORECASE,
)
_CASE = re.compile(
    rf"(?:{_SUBJECT} (?:written |provided |presented )?(?:entirely |only |completely |fully )?in "
    rf"|does the (?:response|answer|reply) use only )(?:all )?"
    r"(lowercase|lower case|lower-case|uppercase|upper case|upper-case|capital letters|capitals|all caps)(?: letters)?",
    re.IGNORECASE,
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

    kind: str  # "length", "include", "avoid", "start", "end", "count", "format", "language" or "case"
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
    return _more_rules(text)


def _more_rules(text: str) -> QuestionRule | None:
    """The question forms beyond length, keywords and edges (see the module docstring)."""
    for op, form in _MORE_LENGTH_FORMS:
        m = form.fullmatch(text)
        if m:
            n = 1 if m.group(1).lower() in ("a single", "one") else _number(m.group(1))
            unit = m.group(2).lower()
            plural = unit if unit.endswith("s") else unit + "s"

            def length(reply: str, op: str = op, n: int = n, unit: str = plural) -> tuple[bool, str]:
                count = _count(unit, reply)
                return _OPS[op](count, n), f"{count} {unit}"

            return QuestionRule("length", f"{plural} {op} {n}", length)
    for op, form in _COUNT_FORMS:
        m = form.fullmatch(text)
        if m:
            keyword, word, digits = m.group(1).strip(), m.group(2), m.group(3)
            n = _TIMES_WORDS[word.lower()] if word else _number(digits)

            def times(reply: str, keyword: str = keyword, op: str = op, n: int = n) -> tuple[bool, str]:
                found = len(_keyword_re(keyword).findall(reply))
                return _OPS[op](found, n), f"{keyword!r} {found} times"

            return QuestionRule("count", f"{keyword!r} {op} {n} times", times)
    for name, form in _FORMAT_FORMS:
        if form.fullmatch(text):
            return QuestionRule("format", name, functools.partial(_format_check, name))
    m = _LANGUAGE.fullmatch(text)
    if m:
        return QuestionRule("language", m.group(1).lower(), functools.partial(_language_check, m.group(1).lower()))
    m = _CASE.fullmatch(text)
    if m:
        case = "lower" if m.group(1).lower().startswith("lower") else "upper"
        return QuestionRule("case", f"case.{case}", functools.partial(_case_check, case))
    return None


_FENCED = re.compile(r"^[ \t]*```[\w+-]*[ \t]*\n(.*?)\n[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_MARKDOWN = (
    ("heading", re.compile(r"^#{1,6}[ \t]+\S", re.MULTILINE)),
    ("list", re.compile(r"^[ \t]*(?:[*+-]|\d{1,3}[.)])[ \t]+\S", re.MULTILINE)),
    ("emphasis", re.compile(r"(\*\*|__)\S(?:.*?\S)?\1")),
    ("table", re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$", re.MULTILINE)),
    ("code fence", re.compile(r"^[ \t]*```", re.MULTILINE)),
)
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$")
_BULLET_LINE = re.compile(r"^[ \t]*(?:[*+\-\u2022])[ \t]+\S", re.MULTILINE)
_NUMBERED_LINE = re.compile(r"^[ \t]*\d{1,3}[.)][ \t]+\S", re.MULTILINE)


def _format_check(name: str, reply: str) -> tuple[bool, str]:
    from ifgym.core.constraints import Constraint
    from ifgym.rewards.checks import check

    if name == "json":
        verdict = check(Constraint("format.json", {}), reply, loose=True)
        if verdict.label == "yes":
            return True, verdict.reason
        for k, block in enumerate(_FENCED.findall(reply), start=1):  # a JSON block with prose around it
            if check(Constraint("format.json", {}), block).label == "yes":
                return True, f"fenced block {k} is valid JSON"
        return False, verdict.reason
    if name == "markdown":
        found = [what for what, pattern in _MARKDOWN if pattern.search(reply)]
        return bool(found), f"Markdown: {', '.join(found)}" if found else "no Markdown syntax"
    if name == "table":
        lines = reply.splitlines()
        rows = [k for k in range(1, len(lines)) if _TABLE_SEPARATOR.match(lines[k]) and "|" in lines[k - 1]]
        return bool(rows), f"a Markdown table at line {rows[0]}" if rows else "no Markdown table"
    pattern = _BULLET_LINE if name == "bullets" else _NUMBERED_LINE
    found = len(pattern.findall(reply))
    return found >= 2, f"{found} {'bullet' if name == 'bullets' else 'numbered'} lines"


_SCRIPTS = {
    "english": r"[A-Za-z\u00C0-\u024F]",
    "chinese": r"[\u4E00-\u9FFF\u3400-\u4DBF]",
    "japanese": r"[\u3040-\u30FF\u4E00-\u9FFF]",
    "korean": r"[\uAC00-\uD7AF\u1100-\u11FF]",
    "russian": r"[\u0400-\u04FF]",
    "arabic": r"[\u0600-\u06FF]",
}
_ENGLISH_WORDS = frozenset(
    "the a an and or of to in on for with is are was were be it this that as at by from not but have has you we they"
    " i he she his her its their our can will would should which who what".split()
)


def _language_check(language: str, reply: str) -> tuple[bool, str]:
    letters = [ch for ch in reply if ch.isalpha()]
    if not letters:
        return False, "no letters"
    share = sum(bool(re.match(_SCRIPTS[language], ch)) for ch in letters) / len(letters)
    ok = share >= 0.9
    if language == "japanese":
        ok = ok and bool(re.search(r"[\u3040-\u30FF]", reply))  # kana: Han alone is Chinese
    if language == "english":
        words = re.findall(r"[A-Za-z']+", reply.lower())
        english = sum(w in _ENGLISH_WORDS for w in words) / len(words) if words else 0.0
        return ok and english >= 0.1, f"{share:.0%} Latin letters, {english:.0%} English function words"
    return ok, f"{share:.0%} of the letters in {language}'s script"


def _case_check(case: str, reply: str) -> tuple[bool, str]:
    from ifgym.core.constraints import Constraint
    from ifgym.rewards.checks import check

    verdict = check(Constraint(f"case.{case}", {}), reply)
    return verdict.label == "yes", verdict.reason
