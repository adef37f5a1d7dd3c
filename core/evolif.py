"""EvolIF's instructions as ifgym Constraints: `from_evolif` and `to_evolif`.

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

EvolIF's own verdicts on these constraints are `ifgym.rewards.evolif.evaluator.evolif_check` (or
`ifgym.rewards.check(..., semantics="evolif")`): scoring, not vocabulary, so it lives with the rewards.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from ifgym.core.constraints import REGISTRY, Constraint
from ifgym.errors import ConstraintParamsError, DataFormatError, UnknownNameError, did_you_mean

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
