"""Is a constraint stated? The cues a user's text must carry to state it, and the patterns they are built from.

Each constraint type gives its cues (`ConstraintType.cues`): what a message stating it must
contain — the keyword, the number, the emoji, the letter named as a letter, the mark quoted or by
name, the name of a format, a case or a length unit — each a regular expression searched in the
text, case-insensitively, with a label saying what is missing. On a change (a modify), the type is
also given the old params and asks only for what changed. `ifgym.core.unstated(constraint, text,
old)` (in `ifgym.core.constraints`) looks for them and serves every user simulator: EvolIF's LLM
user checks each draft with it, as EvolIF's query synthesis does (a rule, no model call); the
StructFlow generator checks the model's user prompts with it.

It catches a requirement left out or stated with another value, not one turned around ("under"
for "over"): relations are said in too many ways to check by words. The helpers here build the
cue patterns the catalog's types use; a type registered without `cues` gets one per param value
(`param_cues`), or its id's last part.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ifgym.core.wording import NUMBER_WORDS

__all__ = [
    "VARIATION",
    "Cue",
    "letter_cue",
    "mark_cue",
    "number_cue",
    "param_cues",
    "text_cue",
    "word_start_cue",
]

VARIATION = "\ufe0f"  # emoji variation selector: "❤️" and "❤" are the same heart to a reader
_TIMES_WORDS = {1: "once", 2: "twice", 3: "thrice"}
_AMBIGUOUS_LETTERS = frozenset("ai")  # "a" and "I" stand alone in ordinary English
_OPEN_QUOTES = "\"'\u201c\u2018\u00ab\u300c"
_CLOSE_QUOTES = "\"'\u201d\u2019\u00bb\u300d"
_PROSE_MARKS = ".,:;!?'\"-()"  # so common in prose that only a quoted copy or the name counts
_MARK_NAMES = {
    ".": r"period|full stop|dot",
    ",": r"comma",
    ":": r"colon",
    ";": r"semicolon",
    "!": r"exclamation",
    "?": r"question mark",
    "'": r"apostrophe",
    '"': r"quotation mark|double quote",
    "-": r"hyphen|dash",
    "(": r"parenthes[ie]s|bracket",
    ")": r"parenthes[ie]s|bracket",
    "~": r"tilde",
    "&": r"ampersand",
    "\u2026": r"ellipsis",
    "\u2014": r"em dash|dash",
    "\u2013": r"en dash|dash",
}
_SKIP_PARAMS = ("relation",)  # less_than / more_than / exactly: said in too many ways to check by words


@dataclass(frozen=True)
class Cue:
    """What a text must carry to state (part of) a constraint: `pattern`, a regex searched case-insensitively.

    `label` says what is missing when the pattern is not found (it goes into the feedback a user
    model gets). `then` are cues asked for only once this one is found (how often a keyword
    occurs, once the keyword is there), so a missing keyword is reported once.
    """

    label: str
    pattern: str
    then: tuple[Cue, ...] = ()


def number_cue(n: int, *, times: bool = False) -> str:
    """`n` in digits (1200, 1,200) or as a word (zero to twenty); with `times`, also once, twice, thrice."""
    digits = str(n)
    if n >= 1000:  # a thousands separator may be written: 1,200 / 1 200
        digits = re.sub(r"(\d)(?=(\d{3})+$)", lambda m: m[1] + "[,\u202f\u00a0]?", digits)
    forms = [rf"(?<![\d.])(?<!\d[,\u202f\u00a0]){digits}(?!\d|[,\u202f\u00a0]\d{{3}}(?!\d))"]
    words = [NUMBER_WORDS[n]] if 0 <= n < len(NUMBER_WORDS) else []
    if times and n in _TIMES_WORDS:
        words.append(_TIMES_WORDS[n])
    return "|".join(forms + [rf"(?<![^\W_]){w}(?![^\W_])" for w in words])


def text_cue(value: str) -> str:
    """`value` as whole words, any run of spaces or hyphens between them ("hand drawn" = "hand-drawn")."""
    text = value.replace(VARIATION, "").strip()
    body = r"[\s\-]+".join(re.escape(part) for part in text.split())
    before = r"(?<!\w)" if text[:1].isalnum() else ""
    after = r"(?!\w)" if text[-1:].isalnum() else ""
    return before + body + after


def word_start_cue(*words: str) -> str:
    """One of `words` starting a word of the text: "formal" is in "formally", not in "informal"."""
    return "|".join(r"(?<![^\W_])" + re.escape(w) for w in words)


def letter_cue(letter: str) -> str:
    """The letter named as a letter: quoted, after the word "letter" ("the letter T", "letter is W"), or alone.

    Standing alone counts except for "a" and "I", which stand alone in ordinary English.
    """
    x = re.escape(letter)
    quoted = rf"[{_OPEN_QUOTES}]{x}[{_CLOSE_QUOTES}]"
    named = rf"\bletter\b(?:\s+\w+){{0,3}}?\s+[{_OPEN_QUOTES}]?{x}(?![^\W\d_])"
    alone = rf"(?<![^\W_]){x}(?![^\W_])" if letter.lower() not in _AMBIGUOUS_LETTERS else None
    return "|".join(p for p in (quoted, named, alone) if p)


def mark_cue(mark: str) -> str:
    """A punctuation mark quoted or bracketed, by its name, or bare when it is not a mark of ordinary prose."""
    quoted = rf"[{_OPEN_QUOTES}(\[]\s*{re.escape(mark)}\s*[{_CLOSE_QUOTES})\]]"
    names = _MARK_NAMES.get(mark)
    bare = re.escape(mark) if mark not in _PROSE_MARKS else None
    return "|".join(p for p in (quoted, names, bare) if p)


def param_cues(key: str, value: Any) -> list[Cue]:
    """Cues for one param of a type that gives none of its own: each value (numbers, words, marks) must appear."""
    if key in _SKIP_PARAMS or isinstance(value, bool) or value is None:
        return []
    if key == "mark" and isinstance(value, str):
        return [Cue(f"the mark {value!r}", mark_cue(value))]
    if isinstance(value, int):
        return [Cue(f"the number {value}", number_cue(value))]
    if isinstance(value, float):
        shown = f"{value:g}"
        return [Cue(f"the number {shown}", number_cue(int(value)) if value.is_integer() else re.escape(shown))]
    if isinstance(value, str):
        return [Cue(f"the value {value!r}", text_cue(value))] if value.strip() else []
    if isinstance(value, Mapping):
        return [cue for k, v in value.items() for cue in (*param_cues(key, str(k)), *param_cues(key, v))]
    if isinstance(value, Sequence):
        return [cue for v in value for cue in param_cues(key, v)]
    return []
