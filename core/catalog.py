"""The concrete constraint types of the twelve groups, registered on import.

Importing `ifgym.core` (which any of its modules does first) registers them. Each type keeps
together what it means: its params (`normalize`), its words (`describe`), its rule (`check`), and
how it is drawn and varied (`sample`, `vary`; `ifgym.core.sampling` draws one that fits the others).
The constants here (QUOTATION_PAIRS, INCLUDE_MARKS, EXCLUDE_MARKS, LENGTH_RELATIONS, EMOTIONS,
STYLES, READER_AGES, LENGTH_UNITS) are the values a constraint's params may take; START_LETTERS,
END_LETTERS, EMOJIS, NATURAL_QUOTATION_PAIRS and NATURAL_INCLUDE_MARKS the ones the samplers draw.

Where ifgym's rules differ from EvolIF's own checkers, the class docstring says so; in short we
are stricter about formats (CSV needs a real table, Markdown needs Markdown, HTML needs balanced
tags) and we never turn a failing tool into a pass. EvolIF's own verdicts are one call away:
`ifgym.rewards.check(constraint, reply, semantics="evolif")` (see `ifgym.rewards.evolif.evaluator`).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
import unicodedata
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

import emoji
import numpy as np

from ifgym.core.constraints import ConstraintType, count_keyword, may_contain, params_error, register
from ifgym.core.cues import Cue, letter_cue, mark_cue, number_cue, text_cue, word_start_cue
from ifgym.core.sampling import SampleContext, choice, pick_keywords, randint, tokens
from ifgym.core.verdicts import Verdict
from ifgym.core.wording import a, and_list, count, or_list, quote, times
from ifgym.errors import ConstraintParamsError, did_you_mean

# ---------------------------------------------------------------------------------------------
# Sampling pools (facts shared with EvolIF, so its files round-trip).

QUOTATION_PAIRS: tuple[tuple[str, str], ...] = (
    ("(", ")"),
    ("[", "]"),
    ("{", "}"),
    ("<", ">"),
    ("\u300a", "\u300b"),  # 《 》
    ("\u3008", "\u3009"),  # 〈 〉
    ("\u300c", "\u300d"),  # 「 」
    ("\u300e", "\u300f"),  # 『 』
    ("\uff08", "\uff09"),  # （ ）
    ("\u00ab", "\u00bb"),  # « »
    ("\u3010", "\u3011"),  # 【 】
    ("\u201c", "\u201d"),  # “ ”
    ("\u2018", "\u2019"),  # ‘ ’
    ("'", "'"),
    ('"', '"'),
)
# Marks a user might ask to see at least once: uncommon enough that a reply rarely has one by chance.
INCLUDE_MARKS: tuple[str, ...] = (
    "!", "?", ";", "…", "—", "~", "*", "#", "@", "&", "%", "^", "|", "/", "+", "=", "$", "_",
    "！", "？", "；", "～", "·", "、", "。", "……", "——",
)  # fmt: skip
# Marks a user might forbid: so common that avoiding them takes effort.
EXCLUDE_MARKS: tuple[str, ...] = (".", ",", ":")
# What the samplers draw from: facts about what reads naturally in an English request, subsets of the pools above.
START_LETTERS = "ABCDEFGHILMNOPRSTW"  # letters many English words start with
END_LETTERS = "adehklmnorsty"  # letters many English words end with
EMOJIS: tuple[str, ...] = ("😀", "🚀", "🌟", "✅", "🔥", "🎉", "💡", "📌", "🌈", "🤔", "👍", "🍀")
NATURAL_QUOTATION_PAIRS: tuple[tuple[str, str], ...] = (
    ("“", "”"), ("《", "》"), ("「", "」"), ("[", "]"), ("«", "»"), ("『", "』"), ("〈", "〉"),
)  # fmt: skip
NATURAL_INCLUDE_MARKS: tuple[str, ...] = ("!", "?", ";", "…", "—", "~", "@", "&", "%")
_MARK_NAMES = {".": "period", ",": "comma", ":": "colon"}
FORMAT_NAMES = {"json": "JSON", "html": "HTML", "xml": "XML", "csv": "CSV", "markdown": "Markdown"}
LENGTH_RELATIONS: tuple[str, ...] = ("less_than", "more_than", "exactly")
LENGTH_UNITS: tuple[str, ...] = ("words", "paragraphs", "characters", "sentences")
EMOTIONS: tuple[str, ...] = ("happy", "sad", "neutral", "angry", "excited", "frustrated")
STYLES: tuple[str, ...] = ("formal", "informal", "active voice", "passive voice")
READER_AGES: tuple[str, ...] = ("child", "youth", "adult", "senior")

# ---------------------------------------------------------------------------------------------
# Param validation helpers. Each raises ConstraintParamsError naming id, field, value, allowed.


def _fields(cid: str, params: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """Refuse unknown and missing param names."""
    for key in params:
        if key not in names:
            hint = did_you_mean(key, names)
            raise ConstraintParamsError(
                f"{cid}: unknown param {key!r} (value {params[key]!r}).{hint} Expected params: {_expected(names)}"
            )
    for name in names:
        if name not in params:
            raise ConstraintParamsError(f"{cid}: missing param {name!r}. Expected params: {_expected(names)}")


def _expected(names: tuple[str, ...]) -> str:
    """The param names `_fields` expects, for its errors (only written when one is raised)."""
    return ", ".join(repr(n) for n in names) if names else "none (use {})"


def _text(cid: str, field: str, value: Any, what: str) -> str:
    """A non-empty string, stripped of surrounding whitespace."""
    if not isinstance(value, str) or not value.strip():
        raise params_error(cid, field, value, what)
    return value.strip()


def _int(cid: str, field: str, value: Any, low: int, high: int | None = None) -> int:
    """An int in [low, high] (bools are refused: True is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"  # for the error only
        raise params_error(cid, field, value, span)
    return int(value)


def _choice(cid: str, field: str, value: Any, allowed: tuple[str, ...]) -> str:
    """One of `allowed`, compared case-insensitively and returned in canonical (lower) case."""
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
    raise params_error(cid, field, value, f"one of {', '.join(allowed)}.{hint}".rstrip("."))


def _keyword(cid: str, field: str, value: Any) -> str:
    """A keyword: a stripped string containing at least one word character.

    Inner whitespace is kept as given, newlines included: EvolIF's files hold such keywords and its
    checker compares them verbatim (`semantics="evolif"`); ifgym's own matching treats any run of
    whitespace between the words of a phrase alike, so the spelling of the gap does not matter there.
    """
    keyword = _text(cid, field, value, "a non-empty word or phrase")
    if not re.search(r"\w", keyword):
        raise params_error(cid, field, value, "a word or phrase containing letters or digits")
    return keyword


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


# ---------------------------------------------------------------------------------------------
# Text helpers.

# Invisible characters models put at the edges of a reply (BOM, zero-width space/joiners).
_INVISIBLE = "\ufeff\u200b\u200c\u200d\u2060"
# Markdown markers that may wrap an emoji at the edges: headings, quotes, emphasis, code.
_MD_EDGE = "#>*_`~"
_EMOJI_SKIN = re.compile("[\U0001f3fb-\U0001f3ff\ufe0e\ufe0f]")


def _edge_strip(text: str) -> str:
    return text.strip().strip(_INVISIBLE).strip()


def _fold_letter(ch: str, last: bool) -> str:
    """The base letter of `ch`, lowercased: 'É' -> 'e'. `last` picks from the end of a ligature."""
    letters = [c for c in unicodedata.normalize("NFKD", ch) if c.isalpha()] or [ch]
    return (letters[-1] if last else letters[0]).casefold()


def _edge_letter(text: str, last: bool) -> str | None:
    for ch in reversed(text) if last else text:
        if ch.isalpha():
            return ch
    return None


def _bare_emoji(value: str) -> str:
    """An emoji without skin tones and variation selectors, for tolerant comparison."""
    return _EMOJI_SKIN.sub("", value)


@functools.cache
def _emoji_starts() -> frozenset[str]:
    """The characters an emoji of `emoji.EMOJI_DATA` starts with: `emoji_list` finds one only where one of them is."""
    return frozenset(e[0] for e in emoji.EMOJI_DATA)


def _edge_emoji(text: str, last: bool) -> str | None:
    """The whole emoji (ZWJ sequence, flag, keycap …) at the start/end of `text`, if any."""
    window = text[-40:] if last else text[:40]  # the longest emoji sequence is ~10 code points
    if _emoji_starts().isdisjoint(window):  # no emoji can start here: emoji_list walks the text for nothing
        return None
    found = emoji.emoji_list(window)
    if not found:
        return None
    item = found[-1] if last else found[0]
    at_edge = item["match_end"] == len(window) if last else item["match_start"] == 0
    return item["emoji"] if at_edge else None


def _show(text: str, limit: int = 24) -> str:
    """A short quoted excerpt for reasons."""
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


# ---------------------------------------------------------------------------------------------
# start_with / end_with


class _EdgeType(ConstraintType):
    """Shared wording for start/end types."""

    last = False  # False: start of the reply, True: end

    @classmethod
    def _verb(cls) -> str:
        return "End" if cls.last else "Start"

    @classmethod
    def _edge(cls) -> str:
        return "last" if cls.last else "first"


class _LetterType(_EdgeType):
    """The reply starts/ends with a given letter, case-insensitive.

    The letter looked at is the first (last) alphabetic character of the reply, so whitespace,
    punctuation, quotes, digits, emoji and Markdown markers around it are skipped. Accents are
    folded ("Élan" starts with E). EvolIF looks only at ASCII letters [A-Za-z]; we look at any
    alphabetic character, so a reply whose first letter is "ж" or "中" fails rather than being
    judged by some later Latin letter.
    """

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {letter}: one ASCII letter; stored lowercase (the check ignores case)."""
        _fields(cls.id, params, ("letter",))
        letter = params["letter"]
        if not isinstance(letter, str) or not re.fullmatch(r"[A-Za-z]", letter.strip()):
            raise params_error(cls.id, "letter", letter, "one ASCII letter A-Z (either case)")
        return {"letter": letter.strip().lower()}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Start your reply with the letter 'A'."."""
        return f"{cls._verb()} your reply with the letter '{params['letter'].upper()}'."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "start your reply with the letter “A”"."""
        letter, verb, edge = quote(params["letter"].upper()), cls._verb().lower(), cls._edge()
        return (
            f"{verb} your reply with the letter {letter}",
            f"make the {edge} letter of your answer {letter}",
            f"{'finish' if cls.last else 'begin'} the response so that its {edge} letter is {letter}",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The letter named as a letter (quoted, after "letter", or standing alone unless it is a or I)."""
        return (Cue(f"the letter {quote(params['letter'].upper())}", letter_cue(params["letter"])),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A letter many English words start (end) with."""
        return {"letter": choice(rng, END_LETTERS if cls.last else START_LETTERS)}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Compare the first/last alphabetic character, folded, with the letter."""
        want = params["letter"]
        found = _edge_letter(reply, cls.last)
        if found is None:
            return Verdict("no", f"the reply has no letters; required {cls._edge()} letter '{want}'")
        label = "yes" if _fold_letter(found, cls.last) == want else "no"
        return Verdict(label, f"{cls._edge()} letter is {found!r}; required '{want}' (any case)")


class _EmojiType(_EdgeType):
    """The reply starts/ends with a given emoji.

    Surrounding whitespace, zero-width characters and Markdown markers (# > * _ ` ~) are skipped.
    The whole emoji at the edge must match: a family emoji (a ZWJ sequence) does not count as the
    man emoji it begins with. Skin tones and variation selectors are ignored on both sides, so
    "❤" matches "❤️" and "👍🏽" matches "👍".
    """

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {emoji}: exactly one emoji (a ZWJ sequence or flag counts as one)."""
        _fields(cls.id, params, ("emoji",))
        value = params["emoji"]
        if not isinstance(value, str) or not emoji.is_emoji(value.strip()):
            raise params_error(cls.id, "emoji", value, "exactly one emoji, e.g. '😀' or '👍🏽'")
        return {"emoji": value.strip()}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "End your reply with the emoji 🤩."."""
        return f"{cls._verb()} your reply with the emoji {params['emoji']}."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "put 🚀 at the very end of your answer"."""
        e, verb = params["emoji"], cls._verb().lower()
        return (
            f"{verb} your reply with the emoji {e}",
            f"put {e} at the very {'end' if cls.last else 'beginning'} of your answer",
            f"{'close' if cls.last else 'open'} the response with {e}",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The emoji itself (a variation selector aside)."""
        return (Cue(f"the emoji {params['emoji']}", re.escape(params["emoji"].replace("\ufe0f", ""))),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A common emoji."""
        return {"emoji": choice(rng, EMOJIS)}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Find the whole emoji at the edge, with and without the Markdown markers stripped."""
        want = params["emoji"]
        text = _edge_strip(reply)
        found = _edge_emoji(text, cls.last)
        if found is None:
            unmarked = _edge_strip(text.rstrip(_MD_EDGE) if cls.last else text.lstrip(_MD_EDGE))
            found = _edge_emoji(unmarked, cls.last)
        if found is None:
            edge = text[-12:] if cls.last else text[:12]
            return Verdict("no", f"no emoji at the {'end' if cls.last else 'start'} ({_show(edge)}); required {want}")
        label = "yes" if _bare_emoji(found) == _bare_emoji(want) else "no"
        return Verdict(label, f"{cls._edge()} emoji is {found}; required {want}")


class _KeywordEdgeType(_EdgeType):
    """The reply starts/ends with a given word or phrase, case-insensitive, as a whole word.

    Characters that are not letters or digits (punctuation, quotes, emoji, Markdown markers) are
    skipped at the edge, so "**Compatibility** matters" starts with "compatibility", but
    "Compatibilityx" does not. EvolIF compares a raw case-insensitive prefix (so "art" would
    match "artist"); we require the whole word.
    """

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {keyword}: a word or short phrase (stripped; case kept for the wording)."""
        _fields(cls.id, params, ("keyword",))
        return {"keyword": _keyword(cls.id, "keyword", params["keyword"])}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Start your reply with the word 'compatibility'."."""
        kind = "phrase" if " " in params["keyword"] else "word"
        return f"{cls._verb()} your reply with the {kind} '{params['keyword']}'."

    @classmethod
    @functools.lru_cache(maxsize=1024)
    def _pattern(cls, keyword: str) -> re.Pattern[str]:
        body = r"\s+".join(re.escape(w) for w in keyword.split())
        head = r"(?<!\w)" if re.match(r"\w", keyword) else ""
        tail = r"(?!\w)" if re.search(r"\w$", keyword) else ""
        if cls.last:
            return re.compile(head + body + r"[\W_]*\Z", re.IGNORECASE)
        return re.compile(r"\A[\W_]*?" + body + tail, re.IGNORECASE)

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "make “battery” the first word of your answer"."""
        k, verb, edge = quote(params["keyword"]), cls._verb().lower(), cls._edge()
        return (
            f"{verb} your reply with the word {k}",
            f"make {k} the {edge} word of your answer",
            f"{'finish' if cls.last else 'begin'} the response with {k}",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The keyword as a whole word."""
        return (Cue(f"the word {quote(params['keyword'])}", text_cue(params["keyword"])),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any] | None:
        """A topic keyword no other constraint forbids, a single word when there is one."""
        pool = ctx.required_pool()
        single = [k for k in pool if " " not in k]  # a single word reads better as a first/last word
        pool = single or pool
        return {"keyword": choice(rng, pool)} if pool else None

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Match the keyword at the edge, skipping non-word characters."""
        want = params["keyword"]
        text = reply.strip()
        ok = may_contain(text, want) and cls._pattern(want).search(text) is not None
        words = re.findall(r"\w+", text[-200:] if cls.last else text[:200])
        edge_word = (words[-1] if cls.last else words[0]) if words else None
        seen = f"{cls._edge()} word is {edge_word!r}" if edge_word else "the reply has no words"
        return Verdict("yes" if ok else "no", f"{seen}; required {want!r} (any case, whole word)")


class _QuotationType(_EdgeType):
    """The reply is opened (start) or closed (end) by a quotation pair.

    start_with.quotation: the stripped reply starts with `left` and contains a later `right`.
    end_with.quotation: the stripped reply ends with `right` and contains an earlier `left`.
    For same-character pairs (' '), that means the mark appears at least twice.
    """

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {left, right}: quotation marks or brackets (no letters, digits or spaces)."""
        _fields(cls.id, params, ("left", "right"))
        out = {}
        for field in ("left", "right"):
            value = params[field].strip() if isinstance(params[field], str) else params[field]
            if (
                not isinstance(value, str)
                or not value
                or len(value) > 3
                or any(ch.isalnum() or ch.isspace() for ch in value)
            ):
                pairs = " ".join(left + right for left, right in QUOTATION_PAIRS)
                raise params_error(cls.id, field, value, f"a quotation mark or bracket of 1-3 characters, e.g. {pairs}")
            out[field] = value
        return out

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Start your reply with a quotation that opens with '《' and closes with '》'."."""
        left, right = params["left"], params["right"]
        if cls.last:
            return f"End your reply with a quotation that closes with '{right}' (opened earlier with '{left}')."
        return f"Start your reply with a quotation that opens with '{left}' and closes with '{right}'."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "begin the response with a quotation that starts with “《” and ends with “》”"."""
        left, right = quote(params["left"]), quote(params["right"])
        if not cls.last:
            return (
                f"open your reply with {left} and close that quotation later with {right}",
                f"begin the response with a quotation that starts with {left} and ends with {right}",
                f"start your answer with the quotation mark {left} (closed later by {right})",
            )
        return (
            f"end your reply with a quotation that opens with {left} and closes with {right}",
            f"close the response with {right}, the end of a quotation opened with {left}",
            f"finish your answer with a quoted passage between {left} and {right}",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """Both marks of the pair."""
        return tuple(Cue(f"the mark {quote(m)}", re.escape(m)) for m in (params["left"], params["right"]))

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A quotation pair that reads naturally in an English request."""
        left, right = choice(rng, NATURAL_QUOTATION_PAIRS)
        return {"left": left, "right": right}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Edge mark first, then the partner mark on the inner side."""
        left, right = params["left"], params["right"]
        text = _edge_strip(reply)
        if cls.last:
            if not text.endswith(right):
                return Verdict("no", f"reply ends with {_show(text[-12:])}, not with {right!r}")
            if left not in text[: len(text) - len(right)]:
                return Verdict("no", f"reply ends with {right!r} but no {left!r} opens the quotation before it")
            return Verdict("yes", f"reply ends with {right!r} after an opening {left!r}")
        if not text.startswith(left):
            return Verdict("no", f"reply starts with {_show(text[:12])}, not with {left!r}")
        if right not in text[len(left) :]:
            return Verdict("no", f"reply starts with {left!r} but no {right!r} closes the quotation")
        return Verdict("yes", f"reply starts with {left!r} and a later {right!r} closes it")


@register
class StartWithLetter(_LetterType):
    """The reply starts with a letter (see _LetterType for the exact rule)."""

    id, group = "start_with.letter", "start_with"


@register
class StartWithEmoji(_EmojiType):
    """The reply starts with an emoji (see _EmojiType)."""

    id, group = "start_with.emoji", "start_with"


@register
class StartWithKeyword(_KeywordEdgeType):
    """The reply starts with a word or phrase (see _KeywordEdgeType)."""

    id, group = "start_with.keyword", "start_with"


@register
class StartWithQuotation(_QuotationType):
    """The reply opens with `left` and a later `right` closes it (see _QuotationType)."""

    id, group = "start_with.quotation", "start_with"


@register
class EndWithLetter(_LetterType):
    """The reply ends with a letter (see _LetterType)."""

    id, group, last = "end_with.letter", "end_with", True


@register
class EndWithEmoji(_EmojiType):
    """The reply ends with an emoji (see _EmojiType)."""

    id, group, last = "end_with.emoji", "end_with", True


@register
class EndWithKeyword(_KeywordEdgeType):
    """The reply ends with a word or phrase (see _KeywordEdgeType)."""

    id, group, last = "end_with.keyword", "end_with", True


@register
class EndWithQuotation(_QuotationType):
    """The reply ends with `right` after an earlier `left` (see _QuotationType)."""

    id, group, last = "end_with.quotation", "end_with", True


# ---------------------------------------------------------------------------------------------
# format


_FORMAT_ASKS = {
    "format.json": "give me the whole answer as one JSON value that a parser accepts",
    "format.html": "write the answer as HTML markup with every tag properly closed",
    "format.xml": "wrap the whole answer in a single well-formed XML document",
    "format.csv": "present everything as a CSV table with the same number of columns on every row",
    "format.markdown": "use Markdown structure such as headings, lists or emphasis in your answer",
}


class _FormatType(ConstraintType):
    """Shared params handling of the format group (no params)."""

    group = "format"
    name = ""
    wording = ""

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """No params: pass {}."""
        _fields(cls.id, params, ())
        return {}

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "give me the response in JSON only"."""
        name = FORMAT_NAMES[cls.id.split(".")[1]]
        return (f"format the whole reply as valid {name}", _FORMAT_ASKS[cls.id], f"give me the response in {name} only")

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The format's name (CSV also as comma-separated)."""
        name = FORMAT_NAMES[cls.id.split(".")[1]]
        pattern = text_cue(name) + (r"|comma[- ]separated" if name == "CSV" else "")
        return (Cue(f"the format {name}", pattern),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """No params to draw."""
        return {}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """The format requirement in the user's words."""
        return cls.wording


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


@register
class FormatJson(_FormatType):
    """The whole reply is one valid JSON text (json.loads; NaN/Infinity refused as non-standard).

    Surrounding whitespace is allowed; a code fence or a sentence around it is not (loose
    checking strips those). Any JSON value counts, including a bare string.
    """

    id = "format.json"
    wording = "Give your whole reply as valid JSON that a standard JSON parser accepts, with nothing around it."

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """json.loads the whole reply."""
        try:
            value = json.loads(reply, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
            return Verdict("no", f"not valid JSON: {err}")
        kind = {dict: "object", list: "array", str: "string"}.get(type(value), "scalar")
        size = f" with {_plural(len(value), 'entry', 'entries')}" if isinstance(value, dict | list) else ""
        return Verdict("yes", f"valid JSON ({kind}{size})")


# The void elements of HTML (never closed) and the standard element names.
_VOID = frozenset("area base br col embed hr img input link meta param source track wbr keygen command".split())
_HTML_ELEMENTS = frozenset(
    """a abbr address area article aside audio b base bdi bdo blockquote body br button canvas caption
    cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset
    figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img input ins
    kbd label legend li link main map mark menu meta meter nav noscript object ol optgroup option
    output p param picture pre progress q rp rt ruby s samp script search section select slot small
    source span strong style sub summary sup table tbody td template textarea tfoot th thead time
    title tr track u ul var video wbr""".split()
)


class _TagBalance(HTMLParser):
    """Tag stack over html.parser: records the first imbalance and any text outside elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, int]] = []
        self.problem: str | None = None
        self.elements = 0
        self.known = 0
        self.first_tag: str | None = None

    def _element(self, tag: str) -> None:
        self.elements += 1
        self.known += tag in _HTML_ELEMENTS
        self.first_tag = self.first_tag or tag

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._element(tag)
        if tag not in _VOID:
            self.stack.append((tag, self.getpos()[0]))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._element(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.problem:
            return
        if tag in _VOID:
            return  # </br> and friends: tolerated, they close nothing
        if not self.stack:
            self.problem = f"</{tag}> on line {self.getpos()[0]} closes nothing"
        elif self.stack[-1][0] != tag:
            open_tag, line = self.stack[-1]
            self.problem = f"</{tag}> on line {self.getpos()[0]} does not close <{open_tag}> (line {line})"
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not self.stack and data.strip() and not self.problem:
            self.problem = f"text outside any element: {_show(data.strip())}"


@register
class FormatHtml(_FormatType):
    """The whole reply is HTML with balanced tags and no bare prose.

    Every non-void element must be closed explicitly, in order (the optional end tags of HTML,
    such as a bare `<li>`, are refused); at least one standard HTML element must appear; any text
    must sit inside an element. A doctype and comments are allowed anywhere.
    """

    id = "format.html"
    wording = "Write your whole reply as well-formed HTML: close every tag you open and put no text outside the tags."

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Run the tag-stack parser over the reply."""
        parser = _TagBalance()
        parser.feed(reply)
        parser.close()
        if parser.problem:
            return Verdict("no", f"not well-formed HTML: {parser.problem}")
        if parser.stack:
            tag, line = parser.stack[-1]
            return Verdict("no", f"not well-formed HTML: <{tag}> opened on line {line} is never closed")
        if parser.known == 0:
            what = f"only non-HTML tags such as <{parser.first_tag}>" if parser.elements else "no tags at all"
            return Verdict("no", f"not HTML: {what}")
        return Verdict("yes", f"well-formed HTML with {_plural(parser.elements, 'element')}")


@register
class FormatXml(_FormatType):
    """The whole (stripped) reply is one well-formed XML document (xml.etree parses it)."""

    id = "format.xml"
    wording = "Write your whole reply as one well-formed XML document, with nothing outside the root element."

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """ElementTree.fromstring on the stripped reply."""
        try:
            root = ElementTree.fromstring(reply.strip())
        except ElementTree.ParseError as err:
            return Verdict("no", f"not well-formed XML: {err}")
        return Verdict("yes", f"well-formed XML with root <{root.tag}> and {_plural(len(root), 'child element')}")


@register
class FormatCsv(_FormatType):
    """The whole (stripped) reply is a comma-separated table.

    At least 2 rows and 2 columns, the same number of columns on every row, quoting parsed by the
    csv module in strict mode; a blank line counts as a row with no columns. EvolIF accepts any
    single line as CSV (so nearly every sentence passes); we require a real table.
    """

    id = "format.csv"
    wording = (
        "Give your whole reply as CSV: at least two rows and two comma-separated columns, "
        "with the same number of columns on every row."
    )

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """csv.reader over the stripped reply, then count rows and columns."""
        try:
            rows = list(csv.reader(io.StringIO(reply.strip()), strict=True))
        except csv.Error as err:
            return Verdict("no", f"not valid CSV: {err}")
        if len(rows) < 2:
            return Verdict("no", f"{_plural(len(rows), 'row')}; CSV needs at least 2 rows")
        width = len(rows[0])
        if width < 2:
            return Verdict("no", f"the first row has {_plural(width, 'column')}; CSV needs at least 2")
        for index, row in enumerate(rows, start=1):
            if len(row) != width:
                return Verdict("no", f"row {index} has {len(row)} columns, row 1 has {width}")
        return Verdict("yes", f"CSV table of {len(rows)} rows x {width} columns")


_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")

# markdown-it token types that show the text really uses Markdown, and the name reasons give them.
_MD_BLOCK = {
    "heading_open": "heading",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "blockquote_open": "blockquote",
    "table_open": "table",
    "fence": "code",
    "code_block": "code",
}
_MD_INLINE = {
    "em_open": "emphasis",
    "strong_open": "strong",
    "code_inline": "code",
    "link_open": "link",
    "image": "link",
}


@functools.cache
def _markdown_parser() -> Any:
    from markdown_it import MarkdownIt  # imported on first use: only Markdown checks need it

    return MarkdownIt("commonmark").enable("table")


def _unclosed_fence(text: str) -> int | None:
    """Line number of a code fence that is opened and never closed, else None."""
    fence: tuple[str, int, int] | None = None  # (char, length, line)
    for number, line in enumerate(text.split("\n"), start=1):
        if fence is None:
            match = _FENCE_OPEN.match(line)
            if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
                fence = (match.group(1)[0], len(match.group(1)), number)
        elif _closes_fence(line, fence[0], fence[1]):
            fence = None
    return fence[2] if fence else None


def _closes_fence(line: str, char: str, length: int) -> bool:
    """Whether `line` closes a fence of `length` `char`s (at most 3 spaces of indent)."""
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return indent <= 3 and len(stripped) >= length and set(stripped) == {char}


@register
class FormatMarkdown(_FormatType):
    """The reply uses Markdown and every code fence is closed.

    Parsed with markdown-it-py (CommonMark + tables). It passes only if it contains at least one
    Markdown construct: heading, list, emphasis/strong, code (inline, fenced or indented),
    blockquote, table or link. Plain prose is valid Markdown but does not show the format was
    followed, so it fails. EvolIF only checks that fences are balanced, so nearly any prose passes.
    """

    id = "format.markdown"
    wording = (
        "Format your reply in Markdown, using elements such as headings, lists or bold text, "
        "and close every code fence you open."
    )

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Fence balance by line scan, then look for Markdown tokens."""
        line = _unclosed_fence(reply)
        if line is not None:
            return Verdict("no", f"the code fence opened on line {line} is never closed")
        found: dict[str, None] = {}
        for token in _markdown_parser().parse(reply):
            if token.type in _MD_BLOCK:
                found[_MD_BLOCK[token.type]] = None
            for child in token.children or ():
                if child.type in _MD_INLINE:
                    found[_MD_INLINE[child.type]] = None
        if not found:
            return Verdict("no", "no Markdown constructs (heading, list, emphasis, code, blockquote, table, link)")
        return Verdict("yes", f"Markdown with {', '.join(found)}; fences balanced")


# ---------------------------------------------------------------------------------------------
# case


def _case_counts(text: str) -> tuple[int, int]:
    """(uppercase, lowercase) cased letters; uncased scripts (CJK, digits) are not counted."""
    # one character is never both upper and lower case: two passes in C, not one in Python
    return sum(map(str.isupper, text)), sum(map(str.islower, text))


def _first(text: str, test: Any) -> str:
    for index, ch in enumerate(text):
        if test(ch):
            return _show(text[max(0, index - 8) : index + 8])
    return "''"


class _CaseType(ConstraintType):
    """All cased letters are in one case, and there is at least one.

    We look at every cased letter (Unicode), EvolIF at ASCII letters only: "ÉTÉ" is all caps for
    both, but "CAFé" fails here and passes there.
    """

    group = "case"
    want_upper = True

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """No params: pass {}."""
        _fields(cls.id, params, ())
        return {}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """All-caps or all-lowercase wording."""
        if cls.want_upper:
            return "Write your entire reply in capital letters, with no lowercase letters."
        return "Write your entire reply in lowercase letters, with no capital letters."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "put the whole reply in ALL CAPS"."""
        if cls.want_upper:
            return (
                "write everything in capital letters",
                "use only uppercase letters",
                "put the whole reply in ALL CAPS",
            )
        return ("write everything in lowercase letters", "keep every letter lowercase", "use lowercase only")

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """A word naming the case: upper, capital, caps; lower, small letters."""
        words = ("upper", "capital", "caps") if cls.want_upper else ("lower", "small letters")
        return (Cue(f"the case ({'/'.join(words)})", word_start_cue(*words)),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """No params to draw."""
        return {}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Count upper and lower cased letters."""
        upper, lower = _case_counts(reply)
        if upper + lower == 0:
            return Verdict("no", "the reply has no cased letters")
        wrong, wrong_name = (lower, "lowercase") if cls.want_upper else (upper, "uppercase")
        if wrong:
            where = _first(reply, str.islower if cls.want_upper else str.isupper)
            return Verdict("no", f"{_plural(wrong, wrong_name + ' letter')} (first near {where})")
        return Verdict("yes", f"all {upper + lower} cased letters are {'upper' if cls.want_upper else 'lower'}case")


@register
class CaseUpper(_CaseType):
    """No lowercase letters and at least one uppercase letter (see _CaseType)."""

    id = "case.upper"


@register
class CaseLower(_CaseType):
    """No uppercase letters and at least one lowercase letter (see _CaseType)."""

    id, want_upper = "case.lower", False


@register
class CaseUpperRatio(ConstraintType):
    """The uppercase share of the cased letters is within 3 percentage points of `percent`.

    Bounds are inclusive and computed exactly (no float rounding); a reply without cased letters
    fails. As for case.upper, we count all cased letters, EvolIF ASCII ones.
    """

    id, group = "case.upper_ratio", "case"
    tolerance = 3

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {percent}: an integer 0..100."""
        _fields(cls.id, params, ("percent",))
        return {"percent": _int(cls.id, "percent", params["percent"], 0, 100)}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Make about 46% of the letters in your reply uppercase."."""
        return f"Make about {params['percent']}% of the letters in your reply uppercase (give or take 3 points)."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "make about 40% of the letters uppercase"."""
        pct = params["percent"]
        return (
            f"make about {pct}% of the letters uppercase",
            f"keep the share of capital letters at roughly {pct}%",
            f"write so that around {pct} percent of all letters are capitals",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The percentage, then % or "percent"."""
        percent = params["percent"]
        return (Cue(f"the share {percent}%", number_cue(percent), (Cue("a percentage (% or percent)", r"%|percent"),)),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A percentage on the ranges' grid (`upper_ratio` in steps of `upper_ratio_step`)."""
        low, high = ctx.ranges.upper_ratio
        return {"percent": choice(rng, list(range(low, high + 1, ctx.ranges.upper_ratio_step)))}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Exact comparison |100*upper/total - percent| <= 3."""
        percent = params["percent"]
        upper, lower = _case_counts(reply)
        total = upper + lower
        if total == 0:
            return Verdict("no", f"the reply has no cased letters; required {percent}% uppercase")
        ok = abs(100 * upper - percent * total) <= cls.tolerance * total
        share = 100 * upper / total
        return Verdict(
            "yes" if ok else "no",
            f"{share:.1f}% uppercase ({upper} of {total} letters); required {percent}% ± {cls.tolerance}",
        )


# ---------------------------------------------------------------------------------------------
# punctuation


def _mark(cid: str, value: Any) -> str:
    # A mark: 1-3 characters, none a letter, digit or space ("……" and "——" are single marks).
    value = value.strip() if isinstance(value, str) else value
    if isinstance(value, str) and 1 <= len(value) <= 3 and not any(ch.isalnum() or ch.isspace() for ch in value):
        return value
    raise params_error(
        cid, "mark", value, f"a punctuation mark of 1-3 non-alphanumeric characters, e.g. {' '.join(INCLUDE_MARKS)}"
    )


@register
class PunctuationInclude(ConstraintType):
    """The reply contains the mark at least once (exact substring).

    Any mark of 1-3 characters without letters, digits or spaces is accepted, so that every mark
    found in EvolIF's files can be read; INCLUDE_MARKS is the pool a sampler should draw from.
    """

    id, group = "punctuation.include", "punctuation"

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {mark}: e.g. '!' or '……'."""
        _fields(cls.id, params, ("mark",))
        return {"mark": _mark(cls.id, params["mark"])}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Use the punctuation mark ';' at least once in your reply."."""
        return f"Use the punctuation mark '{params['mark']}' at least once in your reply."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "use “;” somewhere in the reply"."""
        mark = quote(params["mark"])
        return (
            f"include the character {mark} at least once",
            f"use {mark} somewhere in the reply",
            f"make sure a {mark} appears in your answer",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The mark quoted or by name (bare only when it is not a mark of ordinary prose)."""
        return (Cue(f"the mark {quote(params['mark'])}", mark_cue(params["mark"])),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A mark that reads naturally in an English request."""
        return {"mark": choice(rng, NATURAL_INCLUDE_MARKS)}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Substring count."""
        mark = params["mark"]
        n = reply.count(mark)
        return Verdict("yes" if n else "no", f"{mark!r} occurs {_plural(n, 'time')}; required at least once")


@register
class PunctuationExclude(ConstraintType):
    """The reply does not contain the mark anywhere (exact character, so '，' is not ',').

    Every occurrence counts, also inside numbers ("3.5"), URLs and code.
    """

    id, group = "punctuation.exclude", "punctuation"

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {mark}: one of . , :."""
        _fields(cls.id, params, ("mark",))
        mark = params["mark"].strip() if isinstance(params["mark"], str) else params["mark"]
        if mark not in EXCLUDE_MARKS:
            raise params_error(cls.id, "mark", mark, "one of " + " ".join(repr(m) for m in EXCLUDE_MARKS))
        return {"mark": mark}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Do not use a single comma (',') anywhere in your reply."."""
        mark = params["mark"]
        return f"Do not use a single {_MARK_NAMES[mark]} ('{mark}') anywhere in your reply."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "leave out every comma (“,”)"."""
        mark, name = quote(params["mark"]), _MARK_NAMES.get(params["mark"], "mark")
        return (
            f"avoid the {name} character {mark} entirely",
            f"leave out every {name} ({mark})",
            f"write without a single {mark}",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The mark quoted or by name (bare only when it is not a mark of ordinary prose)."""
        return (Cue(f"the mark {quote(params['mark'])}", mark_cue(params["mark"])),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A mark common enough that avoiding it takes effort."""
        return {"mark": choice(rng, EXCLUDE_MARKS)}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Substring count; reports where the first one is."""
        mark = params["mark"]
        n = reply.count(mark)
        if n == 0:
            return Verdict("yes", f"no {mark!r} in the reply")
        return Verdict("no", f"{mark!r} occurs {_plural(n, 'time')} (first near {_first(reply, mark.__eq__)})")


# ---------------------------------------------------------------------------------------------
# bullets

_BULLET = re.compile(r"^[ \t]*[*+-][ \t]+\S")
_RULE_LINE = re.compile(r"^ {0,3}([-*_])([ \t]*\1){2,}[ \t]*$")  # thematic break: --- or * * *


def count_bullets(text: str) -> int:
    """Lines that are bullet points: optional indent, '*', '-' or '+', a space, then text.

    `**bold**` lines, thematic breaks (`---`, `* * *`) and lines inside fenced code blocks do
    not count; nested bullets do.
    """
    count = 0
    fence: tuple[str, int] | None = None
    for line in text.split("\n"):
        opener = _FENCE_OPEN.match(line)
        if fence is None and opener:
            fence = (opener.group(1)[0], len(opener.group(1)))
            continue
        if fence is not None:
            if _closes_fence(line, fence[0], fence[1]):
                fence = None
            continue
        if _BULLET.match(line) and not _RULE_LINE.match(line):
            count += 1
    return count


@register
class BulletsCount(ConstraintType):
    """Exactly `n` bullet lines (see `count_bullets`).

    `n = 0` means no bullet points at all (EvolIF's `countableItems {"num": 0}`). EvolIF counts
    lines starting with '*' or '-'; we also accept '+' (a Markdown bullet) and skip code blocks
    and thematic breaks.
    """

    id, group = "bullets.count", "bullets"

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {n}: an integer >= 0 (0: no bullet points)."""
        _fields(cls.id, params, ("n",))
        return {"n": _int(cls.id, "n", params["n"], 0)}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Include exactly 3 bullet points, each on its own line starting with '* ' or '- '."."""
        if params["n"] == 0:
            return "Do not use any bullet points (no lines starting with '* ' or '- ')."
        return (
            f"Include exactly {_plural(params['n'], 'bullet point')}, each on its own line starting with '* ' or '- '."
        )

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "include exactly 3 bullet points"."""
        n = params["n"]
        plural = "bullet point" if n == 1 else "bullet points"
        return (
            f"include exactly {n} {plural}",
            f"use exactly {n} {plural} (lines starting with - or *)",
            f"give exactly {n} bulleted {'item' if n == 1 else 'items'}, no more and no fewer",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The number of bullet points, then a word naming them."""
        n = params["n"]
        return (
            Cue(f"the number of bullet points ({n})", number_cue(n), (Cue("bullet points", r"bullet|point|item"),)),
        )

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A count in `ranges.bullets`."""
        return {"n": randint(rng, ctx.ranges.bullets)}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Count bullet lines."""
        n, found = params["n"], count_bullets(reply)
        return Verdict("yes" if found == n else "no", f"{_plural(found, 'bullet point')}; required exactly {n}")


# ---------------------------------------------------------------------------------------------
# length

_WORDS = re.compile(r"\w+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def count_words(text: str) -> int:
    r"""Runs of word characters (`\w+`): "don't" is 2 words, a run of CJK characters is 1."""
    return len(_WORDS.findall(text))  # one item per match, counted in C


def count_paragraphs(text: str) -> int:
    """Non-empty blocks separated by blank (or whitespace-only) lines."""
    text = text.replace("\r\n", "\n")
    return sum(1 for block in _BLANK_LINE.split(text) if block.strip())


def count_characters(text: str) -> int:
    """Code points of the reply with surrounding whitespace removed (inner whitespace counts).

    Stripping keeps a trailing newline some APIs add from changing the verdict.
    """
    return len(text.strip())


@functools.cache
def _segmenter() -> Any:
    import pysbd  # loaded on first use: building the segmenter is the slow part

    return pysbd.Segmenter(language="en", clean=False)


def count_sentences(text: str) -> int:
    """Sentences by pysbd (English rules, clean=False) that contain a word character.

    Abbreviations ("Dr. Smith") and decimals ("3.5") do not end a sentence. A sentence never
    spans a blank line, so each paragraph is segmented on its own and cached: loose variants
    and repeated replies reuse the unchanged paragraphs (pysbd costs ~1 ms per 70 words). Errors
    from pysbd propagate: a count is never guessed.
    """
    text = text.replace("\r\n", "\n")
    return sum(_paragraph_sentences(block) for block in _BLANK_LINE.split(text) if block.strip())


@functools.lru_cache(maxsize=2048)
def _paragraph_sentences(block: str) -> int:
    return sum(1 for segment in _segmenter().segment(block) if _WORDS.search(segment))


_COUNTERS = {
    "words": count_words,
    "paragraphs": count_paragraphs,
    "characters": count_characters,
    "sentences": count_sentences,
}
_RELATION_WORDS = {"less_than": "less than", "more_than": "more than", "exactly": "exactly"}


class _LengthType(ConstraintType):
    r"""A count of the reply compared with `n`: strictly less, strictly more, or exactly.

    words: `\w+` runs. paragraphs: non-empty blocks between blank lines. characters: len() of
    the stripped reply (EvolIF: of the raw reply). sentences: pysbd segments with a word
    character (EvolIF: NLTK punkt, silently 1 when its data is missing; we never guess).
    """

    group = "length"
    unit = ""

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {relation: less_than|more_than|exactly, n: int >= 0} (EvolIF accepts 0, e.g. more_than 0)."""
        _fields(cls.id, params, ("relation", "n"))
        relation = params["relation"]
        if relation not in LENGTH_RELATIONS:
            hint = did_you_mean(relation, LENGTH_RELATIONS) if isinstance(relation, str) else ""
            raise params_error(cls.id, "relation", relation, f"one of {', '.join(LENGTH_RELATIONS)}.{hint}".rstrip("."))
        return {"relation": relation, "n": _int(cls.id, "n", params["n"], 0)}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Keep your reply under 40 words."."""
        relation, n = params["relation"], params["n"]
        amount = _plural(n, cls.unit[:-1], cls.unit)
        extra = " Separate paragraphs with a blank line." if cls.unit == "paragraphs" else ""
        if relation == "less_than":
            return f"Keep your reply under {amount}.{extra}"
        if relation == "more_than":
            if n == 0:
                return f"Write at least one {cls.unit[:-1]}.{extra}"
            return f"Write more than {amount}.{extra}"
        return f"Write exactly {amount}.{extra}"

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "keep it under 40 words"."""
        amount, relation = count(params["n"], (cls.unit[:-1], cls.unit)), params["relation"]
        if relation == "less_than":
            out = [f"keep it under {amount}", f"use fewer than {amount}", f"stay below {amount} in total"]
        elif relation == "more_than":
            out = [f"write more than {amount}", f"make it longer than {amount}", f"go beyond {amount}"]
        else:
            out = [f"use exactly {amount}", f"write exactly {amount}, no more and no fewer"]
            out.append(f"make it precisely {amount} long")
        if cls.unit == "paragraphs":
            out[0] += " (paragraphs separated by blank lines)"
        return tuple(out)

    @classmethod
    def _relations(cls, ctx: SampleContext) -> tuple[str, ...]:
        # "exactly" only for units where an exact count is a fair ask (exactly 137 words is not)
        return LENGTH_RELATIONS if cls.unit in ctx.ranges.exact_length_units else LENGTH_RELATIONS[:2]

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """The number, then the unit (the relation is said in too many ways to check by words)."""
        one = cls.unit[:-1]
        unit = r"\bchar(?:acter)?s?\b" if cls.unit == "characters" else rf"\b{one}s?\b"
        return (Cue(f"the number {params['n']}", number_cue(params["n"]), (Cue(f"the unit ({cls.unit})", unit),)),)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """A relation and a count in the unit's range."""
        return {"relation": choice(rng, cls._relations(ctx)), "n": randint(rng, getattr(ctx.ranges, cls.unit))}

    @classmethod
    def vary(cls, rng: np.random.Generator, params: Mapping[str, Any], ctx: SampleContext) -> dict[str, Any]:
        """Another relation, or another count (even odds)."""
        params = dict(params)
        if rng.random() < 0.5:
            others = [r for r in cls._relations(ctx) if r != params["relation"]]
            params["relation"] = choice(rng, others)
        else:
            params["n"] = randint(rng, getattr(ctx.ranges, cls.unit))
        return params

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Count, then compare strictly."""
        relation, n = params["relation"], params["n"]
        found = _COUNTERS[cls.unit](reply)
        ok = found < n if relation == "less_than" else found > n if relation == "more_than" else found == n
        return Verdict(
            "yes" if ok else "no",
            f"{_plural(found, cls.unit[:-1], cls.unit)}; required {_RELATION_WORDS[relation]} {n}",
        )


@register
class LengthWords(_LengthType):
    r"""Word count (`\w+` runs) compared with n (see _LengthType)."""

    id, unit = "length.words", "words"


@register
class LengthParagraphs(_LengthType):
    """Paragraph count (blocks between blank lines) compared with n (see _LengthType)."""

    id, unit = "length.paragraphs", "paragraphs"


@register
class LengthCharacters(_LengthType):
    """Character count of the stripped reply compared with n (see _LengthType)."""

    id, unit = "length.characters", "characters"


@register
class LengthSentences(_LengthType):
    """Sentence count (pysbd) compared with n (see _LengthType)."""

    id, unit = "length.sentences", "sentences"


# ---------------------------------------------------------------------------------------------
# keywords / forbidden


def _quoted_list(items: list[str], joiner: str) -> str:
    quoted = [f"'{item}'" for item in items]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" {joiner} " + quoted[-1]


def _no_duplicates(cid: str, field: str, keywords: list[str], value: Any) -> None:
    seen: set[str] = set()
    for keyword in keywords:
        if keyword.casefold() in seen:
            raise params_error(cid, field, value, f"distinct keywords (case-insensitive); {keyword!r} is repeated")
        seen.add(keyword.casefold())


@register
class KeywordsExactCount(ConstraintType):
    """Each keyword occurs exactly its count of times, case-insensitive.

    A single word matches as a whole word; a phrase of several words as a substring with any
    whitespace between its words (see `ifgym.core.constraints.keyword_pattern`). A count of 0
    means the keyword must not occur. EvolIF's checker skips keywords whose count is below 1
    (`semantics="evolif"` does too); its own sampler draws 1-3 keywords, and its edits can grow
    the set beyond three, so any number of keywords is accepted.
    """

    id, group = "keywords.exact_count", "keywords"

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {counts: {keyword: int >= 0}} with at least one keyword, distinct, order kept."""
        _fields(cls.id, params, ("counts",))
        counts = params["counts"]
        if not isinstance(counts, Mapping) or not counts:
            raise params_error(cls.id, "counts", counts, "a non-empty mapping of keywords to counts >= 0")
        keywords = [_keyword(cls.id, "counts", keyword) for keyword in counts]
        _no_duplicates(cls.id, "counts", keywords, counts)
        values = [
            _int(cls.id, f"counts[{kw!r}]", count, 0) for kw, count in zip(keywords, counts.values(), strict=True)
        ]
        return {"counts": dict(zip(keywords, values, strict=True))}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Use 'tourism' exactly 6 times and 'culture' exactly 10 times."."""
        parts = [f"'{kw}' exactly {_plural(n, 'time')}" for kw, n in params["counts"].items() if n]
        absent = [kw for kw, n in params["counts"].items() if not n]
        words = []
        if parts:
            words.append("Use " + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]))
        if absent:
            words.append(("do not use " if parts else "Do not use ") + _quoted_list(absent, "or"))
        return " and ".join(words) + " in your reply."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "mention “battery” exactly twice"."""
        exact = and_list([f"{quote(k)} exactly {times(v)}" for k, v in params["counts"].items()])
        return (f"mention {exact}", f"use {exact} in your reply", f"include {exact}, counting case-insensitively")

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """Each keyword whose count is new, and then how often it occurs (digits, words, once/twice/thrice)."""
        was = (before or {}).get("counts", {})
        return tuple(
            Cue(
                f"the keyword {quote(word)}",
                text_cue(word),
                (Cue(f"how often {quote(word)} occurs ({times(n)})", number_cue(n, times=True)),),
            )
            for word, n in params["counts"].items()
            if was.get(word) != n
        )

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any] | None:
        """Topic keywords no other constraint forbids, no two sharing a word, each with a count."""
        chosen = pick_keywords(rng, ctx.required_pool(), randint(rng, ctx.ranges.keywords_per_constraint))
        if not chosen:
            return None
        return {"counts": {k: randint(rng, ctx.ranges.keyword_count) for k in chosen}}

    @classmethod
    def vary(cls, rng: np.random.Generator, params: Mapping[str, Any], ctx: SampleContext) -> dict[str, Any] | None:
        """Change how often one keyword must occur, or swap one keyword for another of the topic (even odds)."""
        counts = dict(params["counts"])
        keys = list(counts)
        if rng.random() < 0.5:
            counts[choice(rng, keys)] = randint(rng, ctx.ranges.keyword_count)
            return {"counts": counts}
        key = choice(rng, keys)
        used = frozenset().union(*(tokens(k) for k in keys if k != key))
        pool = [k for k in ctx.required_pool() if k not in counts and not (tokens(k) & used)]
        if not pool:
            return None
        return {"counts": {(choice(rng, pool) if k == key else k): v for k, v in counts.items()}}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Count each keyword; report all counts."""
        report, ok = [], True
        for keyword, want in params["counts"].items():
            found = count_keyword(reply, keyword)
            ok = ok and found == want
            report.append(f"{keyword!r} {found}x (required {want})")
        return Verdict("yes" if ok else "no", "; ".join(report))


@register
class ForbiddenWords(ConstraintType):
    """None of the words occurs, case-insensitive (same matching as keywords.exact_count)."""

    id, group = "forbidden.words", "forbidden"

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params {words: [str, ...]}: one or more distinct keywords, kept as a tuple."""
        _fields(cls.id, params, ("words",))
        words = params["words"]
        if isinstance(words, str | bytes | Mapping) or not isinstance(words, list | tuple) or not words:
            raise params_error(cls.id, "words", words, "a non-empty list of words or phrases")
        out = [_keyword(cls.id, "words", word) for word in words]
        _no_duplicates(cls.id, "words", out, words)
        return {"words": tuple(out)}

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Do not use the words 'design' or 'tradition' anywhere in your reply."."""
        words = list(params["words"])
        noun = "word" if len(words) == 1 else "words"
        return f"Do not use the {noun} {_quoted_list(words, 'or')} anywhere in your reply."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "avoid the words “grid” or “roof”"."""
        words = or_list([quote(w) for w in params["words"]])
        noun = "word" if len(params["words"]) == 1 else "words"
        return (
            f"avoid the {noun} {words}",
            f"leave the {noun} {words} out of your reply",
            f"write without ever using {words}",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """Each newly forbidden word, as a whole word."""
        was = {w.casefold() for w in (before or {}).get("words", ())}
        return tuple(Cue(f"the word {quote(w)}", text_cue(w)) for w in params["words"] if w.casefold() not in was)

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any] | None:
        """Topic keywords outside the title and no other constraint's required words, no two sharing a word."""
        chosen = pick_keywords(rng, ctx.forbidden_pool(), randint(rng, ctx.ranges.keywords_per_constraint))
        return {"words": chosen} if chosen else None

    @classmethod
    def vary(cls, rng: np.random.Generator, params: Mapping[str, Any], ctx: SampleContext) -> dict[str, Any] | None:
        """Drop one word, forbid one more, or replace one (a third each, as far as possible)."""
        words = list(params["words"])
        high = ctx.ranges.keywords_per_constraint[1]
        pool = [k for k in ctx.forbidden_pool() if k not in words]
        roll = rng.random()
        if roll < 1 / 3 and len(words) > 1:  # drop one word
            del words[int(rng.integers(len(words)))]
            return {"words": words}
        used = frozenset().union(*(tokens(w) for w in words))
        fresh = [k for k in pool if not (tokens(k) & used)]
        if roll < 2 / 3 and len(words) < high and fresh:  # forbid one more word
            return {"words": [*words, choice(rng, fresh)]}
        i = int(rng.integers(len(words)))  # replace one word
        used = frozenset().union(*(tokens(w) for j, w in enumerate(words) if j != i))
        fresh = [k for k in pool if not (tokens(k) & used)]
        if not fresh:
            return None
        words[i] = choice(rng, fresh)
        return {"words": words}

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Count every forbidden word; name the ones found."""
        found = {word: count_keyword(reply, word) for word in params["words"]}
        hits = [f"{word!r} {n}x" for word, n in found.items() if n]
        if hits:
            return Verdict("no", "forbidden words found: " + ", ".join(hits))
        return Verdict("yes", f"none of {_plural(len(found), 'forbidden word')} found")


# ---------------------------------------------------------------------------------------------
# judged groups: normalize + describe only; the base class's check raises JudgeRequiredError.


class _JudgedType(ConstraintType):
    """A quality an LLM judge scores (EvolIF: 1-10, pass > 6); no rule check."""

    judged = True
    field = ""
    allowed: tuple[str, ...] = ()

    @classmethod
    def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """One param naming a value from the allowed list (case-insensitive, stored lowercase)."""
        _fields(cls.id, params, (cls.field,))
        return {cls.field: _choice(cls.id, cls.field, params[cls.field], cls.allowed)}

    @classmethod
    def sample(cls, rng: np.random.Generator, ctx: SampleContext) -> dict[str, Any]:
        """One of the allowed values."""
        return {cls.field: choice(rng, cls.allowed)}


@register
class EmotionTone(_JudgedType):
    """The reply conveys an emotion: happy, sad, neutral, angry, excited or frustrated."""

    id, group, field, allowed = "emotion.tone", "emotion", "emotion", EMOTIONS

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Write with an excited tone."."""
        value = params["emotion"]
        if value == "neutral":
            return "Keep the tone of your reply neutral, without showing emotion."
        article = "an" if value[0] in "aeiou" else "a"
        return f"Write your reply with {article} {value} tone."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "let the reply sound excited"."""
        e = params["emotion"]
        return (f"write in {a(e)} tone", f"let the reply sound {e}", f"make the mood of the answer {e}")

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """A word starting with the emotion ("excited", "excitedly")."""
        return (Cue(f"the tone {params['emotion']}", word_start_cue(params["emotion"])),)


@register
class StyleRegister(_JudgedType):
    """The reply is written in a style: formal, informal, active voice or passive voice."""

    id, group, field, allowed = "style.register", "style", "style", STYLES

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Write your reply in the passive voice."."""
        value = params["style"]
        if value.endswith("voice"):
            return f"Write your reply in the {value}."
        return f"Write your reply in {'a' if value == 'formal' else 'an'} {value} style."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "keep the register formal"."""
        s = params["style"]
        if "voice" in s:
            return (f"use the {s}", f"write mostly in the {s}", f"phrase your sentences in the {s}")
        return (f"write in {a(s)} style", f"keep the register {s}", f"make the wording {s}")

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """A word starting with the style's first word ("formal" in "formally", not in "informal")."""
        return (Cue(f"the style {params['style']}", word_start_cue(params["style"].split()[0])),)


_AUDIENCES = {  # three ways of naming each reader age, for the phrasings
    "child": ("a young child", "children", "a kid"),
    "youth": ("a teenager", "teenage readers", "a high-school student"),
    "adult": ("an adult reader", "grown-up readers", "an adult audience"),
    "senior": ("a senior reader", "older readers", "a retired audience"),
}
_AGE_CUES = {  # words that name a reader age in a request
    "child": ("child", "kid"),
    "youth": ("youth", "teen", "adolescent", "high-school", "high school"),
    "adult": ("adult", "grown-up", "grown up"),
    "senior": ("senior", "elder", "older", "retire"),
}
_AGE_WORDS = {
    "child": "a young child",
    "youth": "a teenager",
    "adult": "an adult",
    "senior": "an older, retired reader",
}


@register
class ReaderAgeAudience(_JudgedType):
    """The reply suits a reader age: child, youth, adult or senior."""

    id, group, field, allowed = "reader_age.audience", "reader_age", "age", READER_AGES

    @classmethod
    def describe(cls, params: Mapping[str, Any]) -> str:
        """E.g. "Write your reply so that a young child can follow it."."""
        return f"Write your reply so that {_AGE_WORDS[params['age']]} can follow it easily."

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """E.g. "aim the reply at teenage readers"."""
        one, many, other = _AUDIENCES[params["age"]]
        return (
            f"write it for {one}",
            f"aim the reply at {many}",
            f"pitch the answer so that {other} can follow it easily",
        )

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """A word naming the reader age ("teen" for youth, "retire" for senior)."""
        age = params["age"]
        return (Cue(f"the audience ({age})", word_start_cue(*_AGE_CUES[age])),)
