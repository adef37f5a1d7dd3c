"""FlexBench's dimensions: the schema of a dimension set, its checks, and loading one."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core import ChecklistItem
from ifgym.errors import DataFormatError, UnknownNameError, did_you_mean
from ifgym.files import read_json_file

SCHEMA = "ifgym.flexbench.dimensions/v1"
DIMENSIONS_DIR = Path(__file__).parents[1] / "assets" / "flexbench"
DIMENSIONS_SUFFIX = ".dimensions.json"
_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_TOP_KEYS = ("schema", "sop", "sop_sha256", "reviewed", "dimensions", "groups", "exclusive", "meta")
_DIM_KEYS = ("id", "unit", "criterion", "precondition", "rule")
_RULE_KEYS = ("when", "until", "evidence", "attempt", "violation", "max_words", "max_questions")
_PATTERN_KEYS = ("when", "until", "evidence", "attempt", "violation")
ALWAYS = "always"  # the precondition of an always-on rule
KINDS = ("base", "branch", "always")

Message = dict[str, str]
Trace = Sequence[Mapping[str, Any]]  # {"role": "assistant"|"user", "content": str, "scripted": bool}


def fingerprint(instruction: str) -> str:
    """SHA-256 of an SOP's instruction text with whitespace collapsed (reflowing a file keeps it)."""
    return hashlib.sha256(" ".join(instruction.split()).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DimensionRule:
    """How the rule checker decides one dimension (see the module docstring)."""

    when: tuple[str, ...] = ()
    until: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    violation: tuple[str, ...] = ()
    max_words: int | None = None
    max_questions: int | None = None
    attempt: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in _PATTERN_KEYS:
            for pattern in getattr(self, name):
                re.compile(pattern)  # a bad pattern fails at load time, not mid-episode

    def compiled(self, name: str) -> tuple[re.Pattern[str], ...]:
        """The patterns of one field, compiled case-insensitively."""
        return tuple(re.compile(p, re.IGNORECASE) for p in getattr(self, name))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _PATTERN_KEYS:
            if getattr(self, name):
                out[name] = list(getattr(self, name))
        for name in ("max_words", "max_questions"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True)
class Dimension:
    """One checkable clause: the SOP `unit` it comes from, its question, and its precondition.

    `precondition` is None for a base action, "always" for an always-on rule, else the branch's
    "If …"/"When …" condition.
    """

    id: str
    criterion: str
    precondition: str | None = None
    unit: str = ""
    rule: DimensionRule | None = None

    @property
    def kind(self) -> str:
        """Return "base" (no precondition), "always" (an always-on rule) or "branch"."""
        if self.precondition is None:
            return "base"
        return "always" if self.precondition.strip().lower() == ALWAYS else "branch"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "unit": self.unit,
            "criterion": self.criterion,
            "precondition": self.precondition,
        }
        if self.rule is not None:
            out["rule"] = self.rule.to_json()
        return out


@dataclass(frozen=True)
class DimensionSet:
    """An SOP's dimensions with their logic: precondition groups and mutually exclusive branch sets."""

    sop: str
    dimensions: tuple[Dimension, ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclusive: tuple[tuple[str, ...], ...] = ()
    sop_sha256: str | None = None
    reviewed: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_logic(self.dimensions, self.groups, self.exclusive, f"dimensions of {self.sop!r}")

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.dimensions)

    def get(self, dim_id: str) -> Dimension:
        """The dimension with this id."""
        for d in self.dimensions:
            if d.id == dim_id:
                return d
        raise UnknownNameError("dimension", dim_id, self.ids)

    def base_of(self, dim_id: str) -> str | None:
        """The base action a branch hangs on, or None (a base action, or a free-standing branch)."""
        for base, branches in self.groups:
            if dim_id in branches:
                return base
        return None

    def excludes(self, a: str, b: str) -> bool:
        """Tell whether two branches are listed together in a mutually exclusive set."""
        return a != b and any(a in s and b in s for s in self.exclusive)

    def checklist(self) -> tuple[ChecklistItem, ...]:
        """The dimensions as checklist items (what a turn's spec records as scored)."""
        return tuple(
            ChecklistItem(
                id=d.id,
                question=d.criterion,
                type=d.kind,
                kind="sop",
                meta={"precondition": d.precondition, "base": self.base_of(d.id)},
            )
            for d in self.dimensions
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "sop": self.sop,
            "sop_sha256": self.sop_sha256,
            "reviewed": self.reviewed,
            "dimensions": [d.to_json() for d in self.dimensions],
            "groups": [{"base": base, "branches": list(branches)} for base, branches in self.groups],
            "exclusive": [list(s) for s in self.exclusive],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "dimensions") -> DimensionSet:
        """Validate and read a dimension file's JSON; every problem names its place in the file."""
        if not isinstance(data, Mapping):
            raise DataFormatError(f"{where}: a dimension file is a JSON object with fields {', '.join(_TOP_KEYS)}")
        _keys(data, _TOP_KEYS, where)
        if data.get("schema") != SCHEMA:
            raise DataFormatError(f"{where}.schema: must be {SCHEMA!r}, got {data.get('schema')!r}")
        sop = data.get("sop")
        if not isinstance(sop, str) or not sop.strip():
            raise DataFormatError(f"{where}.sop: the SOP's name (a non-empty string) is required")
        sha = data.get("sop_sha256")
        if sha is not None and (not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise DataFormatError(f"{where}.sop_sha256: a 64-digit hex SHA-256 or null, got {sha!r}")
        reviewed = data.get("reviewed", False)
        if not isinstance(reviewed, bool):
            raise DataFormatError(f"{where}.reviewed: true or false, got {reviewed!r}")
        raw_dims = data.get("dimensions")
        if not isinstance(raw_dims, list) or not raw_dims:
            raise DataFormatError(f"{where}.dimensions: a non-empty list of dimension objects")
        dims = tuple(_dimension(d, f"{where}.dimensions[{i}]") for i, d in enumerate(raw_dims))
        groups = []
        raw_groups = data.get("groups", [])
        if not isinstance(raw_groups, list):
            raise DataFormatError(f"{where}.groups: a list of {{'base': id, 'branches': [ids]}}")
        for i, g in enumerate(raw_groups):
            here = f"{where}.groups[{i}]"
            if not isinstance(g, Mapping):
                raise DataFormatError(f"{here}: an object {{'base': id, 'branches': [ids]}}")
            _keys(g, ("base", "branches"), here)
            if not isinstance(g.get("base"), str):
                raise DataFormatError(f"{here}.base: a dimension id, got {g.get('base')!r}")
            groups.append((g["base"], _id_list(g.get("branches"), f"{here}.branches")))
        raw_excl = data.get("exclusive", [])
        if not isinstance(raw_excl, list):
            raise DataFormatError(f"{where}.exclusive: a list of lists of dimension ids")
        exclusive = tuple(_id_list(s, f"{where}.exclusive[{i}]") for i, s in enumerate(raw_excl))
        meta = data.get("meta", {})
        if not isinstance(meta, Mapping):
            raise DataFormatError(f"{where}.meta: an object")
        _check_logic(dims, tuple(groups), exclusive, where)
        return cls(sop.strip(), dims, tuple(groups), exclusive, sha, reviewed, dict(meta))

    def save(self, path: str | Path) -> Path:
        """Write the set as indented JSON (for review) and return the path."""
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


def _keys(data: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            hint = did_you_mean(key, allowed)
            raise DataFormatError(f"{where}: unknown field {key!r}.{hint} Allowed: {', '.join(allowed)}")


def _id_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise DataFormatError(f"{where}: a non-empty list of dimension ids, got {value!r:.120}")
    if len(set(value)) != len(value):
        raise DataFormatError(f"{where}: lists an id twice: {value}")
    return tuple(value)


def _patterns(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise DataFormatError(f"{where}: a list of regular expressions, got {value!r:.120}")
    for i, p in enumerate(value):
        try:
            re.compile(p)
        except re.error as exc:
            raise DataFormatError(f"{where}[{i}]: bad regular expression {p!r} ({exc})") from None
    return tuple(value)


def _dimension(data: Any, where: str) -> Dimension:
    if not isinstance(data, Mapping):
        raise DataFormatError(f"{where}: a dimension is an object with fields {', '.join(_DIM_KEYS)}")
    _keys(data, _DIM_KEYS, where)
    dim_id = data.get("id")
    if not isinstance(dim_id, str) or not _ID_RE.match(dim_id):
        raise DataFormatError(f"{where}.id: letters, digits, '_', '-' or '.', got {dim_id!r}")
    criterion = data.get("criterion")
    if not isinstance(criterion, str) or not criterion.strip():
        raise DataFormatError(f"{where}.criterion: the evaluation question (a non-empty string) is required")
    pre = data.get("precondition")
    if pre is not None and (not isinstance(pre, str) or not pre.strip()):
        raise DataFormatError(
            f'{where}.precondition: null (a base action), "always" (an always-on rule) or a non-empty '
            "'If …' sentence (a branch)"
        )
    if pre is not None:
        pre = ALWAYS if pre.strip().lower() == ALWAYS else pre.strip()
    unit = data.get("unit", "")
    if not isinstance(unit, str):
        raise DataFormatError(f"{where}.unit: the SOP text this dimension checks, as a string")
    rule = None
    if data.get("rule") is not None:
        raw = data["rule"]
        here = f"{where}.rule"
        if not isinstance(raw, Mapping):
            raise DataFormatError(f"{here}: an object with fields {', '.join(_RULE_KEYS)}")
        _keys(raw, _RULE_KEYS, here)
        limits = {}
        for name in ("max_words", "max_questions"):
            value = raw.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise DataFormatError(f"{here}.{name}: an int >= 0, got {value!r}")
            limits[name] = value
        rule = DimensionRule(
            **{name: _patterns(raw.get(name, []), f"{here}.{name}") for name in _PATTERN_KEYS},
            **limits,
        )
        _check_rule(rule, pre, here)
    return Dimension(dim_id, criterion.strip(), pre, unit.strip(), rule)


def _check_rule(rule: DimensionRule, pre: str | None, here: str) -> None:
    """What each kind's offline rule must (and must not) have."""
    limits = rule.max_words is not None or rule.max_questions is not None
    if rule.when and (pre is None or pre == ALWAYS):
        raise DataFormatError(f"{here}.when: only a branch (an 'If …' precondition) can have 'when' patterns")
    if rule.attempt and not rule.evidence:
        raise DataFormatError(f"{here}.attempt: only with 'evidence' (attempted without the evidence = done wrong)")
    if pre is None and not rule.evidence:
        # a base action is credited on evidence only: a rule that is merely "not broken" would
        # count as attempted in every call that says anything
        raise DataFormatError(
            f"{here}: a base action needs 'evidence' patterns (what shows it was done); a rule that is only "
            'kept or broken ("never …", a limit, "not before …") is an always-on rule: set its precondition '
            'to "always"'
        )
    if pre == ALWAYS and (rule.evidence or rule.attempt or not (rule.violation or limits)):
        raise DataFormatError(
            f"{here}: an always-on rule is kept or broken: give 'violation' patterns or max_words/max_questions, "
            "and no evidence/attempt (an action every call must contain is a base action: precondition null)"
        )
    if not (rule.evidence or rule.violation or limits):
        raise DataFormatError(f"{here}: give at least one of evidence, violation, max_words, max_questions")


def _check_logic(
    dims: Sequence[Dimension],
    groups: Sequence[tuple[str, Sequence[str]]],
    exclusive: Sequence[Sequence[str]],
    where: str,
) -> None:
    """The structural rules of a dimension set; one DataFormatError naming the first violation."""
    if not dims:
        raise DataFormatError(f"{where}: no dimensions")
    by_id: dict[str, Dimension] = {}
    for d in dims:
        if d.id in by_id:
            raise DataFormatError(f"{where}: dimension id {d.id!r} is used twice")
        by_id[d.id] = d
        if d.rule is not None:
            _check_rule(d.rule, d.precondition, f"{where}: dimension {d.id!r} rule")
    if not any(d.kind == "base" for d in dims):
        raise DataFormatError(f"{where}: no base action (a dimension without precondition); Coverage needs one")

    def known(dim_id: str, here: str) -> Dimension:
        if dim_id not in by_id:
            raise DataFormatError(f"{here}: no dimension {dim_id!r}.{did_you_mean(dim_id, by_id)}")
        return by_id[dim_id]

    bases: set[str] = set()
    in_group: dict[str, str] = {}
    for i, (base, branches) in enumerate(groups):
        here = f"{where}.groups[{i}]"
        if known(base, f"{here}.base").kind != "base":
            raise DataFormatError(f"{here}.base: {base!r} has a precondition; a group's base is a base action")
        if base in bases:
            raise DataFormatError(f"{here}.base: {base!r} heads two groups; merge their branches")
        bases.add(base)
        for b in branches:
            kind = known(b, f"{here}.branches").kind
            if kind == "base":
                raise DataFormatError(f"{here}.branches: {b!r} has no precondition, so it is not a branch")
            if kind == "always":
                raise DataFormatError(f"{here}.branches: {b!r} is an always-on rule; it hangs on no base action")
            if b in in_group:
                raise DataFormatError(f"{here}.branches: {b!r} is already a branch of {in_group[b]!r}")
            in_group[b] = base
    for i, members in enumerate(exclusive):
        here = f"{where}.exclusive[{i}]"
        if len(set(members)) < 2:
            raise DataFormatError(f"{here}: a mutually exclusive set needs at least two different branches")
        for m in members:
            kind = known(m, here).kind
            if kind != "branch":
                what = "a base action" if kind == "base" else "an always-on rule"
                raise DataFormatError(f"{here}: {m!r} is {what}; only branches can exclude each other")


def dimension_names() -> tuple[str, ...]:
    """SOP names with a shipped dimension file."""
    return tuple(sorted(p.name[: -len(DIMENSIONS_SUFFIX)] for p in DIMENSIONS_DIR.glob(f"*{DIMENSIONS_SUFFIX}")))


def load_dimensions(source: str | Path | Mapping[str, Any]) -> DimensionSet:
    """A dimension set by shipped SOP name, path to a `.dimensions.json` file, or an already-parsed mapping."""
    if isinstance(source, Mapping):
        return DimensionSet.from_json(source)
    text = str(source)
    path = Path(text).expanduser()
    if isinstance(source, str) and "/" not in text and not text.endswith(".json"):
        path = DIMENSIONS_DIR / f"{text}{DIMENSIONS_SUFFIX}"
        if not path.is_file():
            raise UnknownNameError("SOP with shipped dimensions", text, dimension_names())
    return DimensionSet.from_json(read_json_file(path, "dimension file"), str(path))
