"""FlexBench's gating: a call's verdicts to Coverage, Achievement and Compliance (`gate`, `FlexScores`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ifgym.core import Verdict
from ifgym.errors import DataFormatError
from ifgym.rewards.flexbench.dimensions import DimensionSet

# ---------------------------------------------------------------------------------------------
# Gating: verdicts -> Coverage and Achievement
# ---------------------------------------------------------------------------------------------

_WORST = {"no": 0, "yes": 1}


@dataclass(frozen=True)
class FlexScores:
    """Coverage, Achievement and Compliance of one trace, with the tallies behind them.

    `raw` are the judge's labels; `labels` the labels after gating (a branch whose base action was
    not attempted becomes unknown). `achievement` is NaN when no branch was exercised,
    `compliance` when no always-on rule was judged (or the SOP has none).
    """

    raw: dict[str, str]
    labels: dict[str, str]
    attempted: int
    base_total: int
    branch_yes: int
    branch_no: int
    gated_out: int
    exclusive_conflicts: int
    kept: int = 0
    broken: int = 0

    @property
    def coverage(self) -> float:
        """Attempted base actions / (attempted + unknown)."""
        return self.attempted / self.base_total

    @property
    def achievement(self) -> float:
        """Gated branch yes / (yes + no); NaN ("n/a") when no branch was exercised."""
        known = self.branch_yes + self.branch_no
        return self.branch_yes / known if known else math.nan

    @property
    def compliance(self) -> float:
        """Always-on rules kept / (kept + broken); NaN ("n/a") when none was judged."""
        known = self.kept + self.broken
        return self.kept / known if known else math.nan

    @property
    def score(self) -> float:
        """The episode score: mean(Coverage, Achievement) × Compliance (n/a parts left out; see the module doc)."""
        done = self.coverage if math.isnan(self.achievement) else (self.coverage + self.achievement) / 2
        return done if math.isnan(self.compliance) else done * self.compliance

    def to_json(self) -> dict[str, Any]:
        return {
            "coverage": self.coverage,
            "achievement": None if math.isnan(self.achievement) else self.achievement,
            "compliance": None if math.isnan(self.compliance) else self.compliance,
            "score": self.score,
            "attempted": self.attempted,
            "base_total": self.base_total,
            "branch_yes": self.branch_yes,
            "branch_no": self.branch_no,
            "gated_out": self.gated_out,
            "exclusive_conflicts": self.exclusive_conflicts,
            "kept": self.kept,
            "broken": self.broken,
        }


def _labels(dims: DimensionSet, verdicts: Sequence[Verdict] | Mapping[str, str]) -> dict[str, str]:
    if isinstance(verdicts, Mapping):
        missing = [i for i in dims.ids if i not in verdicts]
        extra = [k for k in verdicts if k not in dims.ids]
        if missing or extra:
            raise DataFormatError(f"labels must cover exactly the dimensions; missing {missing}, unknown {extra}")
        labels = dict(verdicts)
    else:
        if len(verdicts) != len(dims.dimensions):
            raise DataFormatError(f"{len(verdicts)} verdicts for {len(dims.dimensions)} dimensions; need one each")
        labels = {d.id: v.label for d, v in zip(dims.dimensions, verdicts, strict=True)}
    for k, v in labels.items():
        if v not in ("yes", "no", "unknown"):
            raise DataFormatError(f"label of {k!r} must be yes, no or unknown, got {v!r}")
    return labels


def gate(dims: DimensionSet, verdicts: Sequence[Verdict] | Mapping[str, str]) -> FlexScores:
    """Coverage, Achievement and Compliance from one verdict per dimension (set order, or a mapping id -> label)."""
    raw = _labels(dims, verdicts)
    labels = dict(raw)
    gated_out = 0
    for d in dims.dimensions:
        base = dims.base_of(d.id)
        if base is not None and raw[base] == "unknown" and raw[d.id] != "unknown":
            labels[d.id] = "unknown"  # the base action was never attempted: the branch does not count
            gated_out += 1
    bases = [d for d in dims.dimensions if d.kind == "base"]
    attempted = sum(labels[d.id] != "unknown" for d in bases)
    rules = [d.id for d in dims.dimensions if d.kind == "always"]
    kept = sum(labels[r] == "yes" for r in rules)
    broken = sum(labels[r] == "no" for r in rules)
    # Known branches that exclude each other cannot all have applied (a judge contradiction): each
    # connected cluster of them counts once, by its worst label.
    known = [d.id for d in dims.dimensions if d.kind == "branch" and labels[d.id] != "unknown"]
    cluster = {k: k for k in known}

    def root(k: str) -> str:
        while cluster[k] != k:
            k = cluster[k]
        return k

    for i, a in enumerate(known):
        for b in known[i + 1 :]:
            if dims.excludes(a, b):
                cluster[root(b)] = root(a)
    members: dict[str, list[str]] = {}
    for k in known:
        members.setdefault(root(k), []).append(labels[k])
    yes = no = conflicts = 0
    for group in members.values():
        conflicts += len(group) > 1
        worst = min(group, key=_WORST.__getitem__)
        yes += worst == "yes"
        no += worst == "no"
    return FlexScores(raw, labels, attempted, len(bases), yes, no, gated_out, conflicts, kept, broken)


def format_rate(value: float | None) -> str:
    """A rate for people: three decimals, or "n/a" when it is undefined (NaN/None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.3f}"
