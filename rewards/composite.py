"""Composite scoring: the live constraints by EvolIF's scorer, the structural items by StructFlow's checklist scorer.

A composite turn's checklist lists one item per live constraint (in `spec.constraints`' order,
each carrying its rule) and then the flow's structural item, if any. `CompositeScorer` scores the
constraints with `EvolIFScorer` (rule checkers, EvolIF's or ifgym's semantics) and the rest of the
checklist with `StructFlowScorer` (rule-decidable questions by rule, the others by the checklist
judge; without a judge they are `unknown`, and `unscored` says so). The verdicts come back in the
checklist's order, so StructFlow's metrics read them as they are, and the first
`len(spec.constraints)` of them are EvolIF's verdicts.

Metrics (`summarize`): EvolIF's over the live constraints (CSR, ISR, EDR_*, REC, STA, pass rate per
group), StructFlow's over the whole checklist (`checklist/CSR`, `checklist/ISR`, DRFR, WCSR,
WCSR_pooled, `item_rate/<type>`), pass rates per relation × constraint group
(`relation_group/<relation>/<group>`), the structural items' pass rate per relation
(`structural/<relation>`), and CSR/ISR/EDR_len/DRFR per persona level (`persona/<level>/<metric>`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ifgym.core import Episode, TurnSpec
from ifgym.errors import DataFormatError
from ifgym.llm.conversation import Steps, steps_of, twin
from ifgym.rewards.evolif.metrics import DEFINITIONS as EVOLIF_DEFINITIONS
from ifgym.rewards.evolif.metrics import HEADLINE as EVOLIF_HEADLINE
from ifgym.rewards.evolif.metrics import HEADLINE_METRIC as EVOLIF_HEADLINE_METRIC
from ifgym.rewards.evolif.metrics import EvolIFRow
from ifgym.rewards.evolif.metrics import episode_row as evolif_row
from ifgym.rewards.evolif.metrics import summarize_rows as evolif_summarize_rows
from ifgym.rewards.evolif.scorer import EvolIFScorer
from ifgym.rewards.metrics import rows_of
from ifgym.rewards.scorer import Scores
from ifgym.rewards.structflow.metrics import FIRST_TURN, TurnRow
from ifgym.rewards.structflow.metrics import episode_row as structflow_row
from ifgym.rewards.structflow.metrics import summarize_rows as structflow_summarize_rows
from ifgym.rewards.structflow.scorer import StructFlowScorer

__all__ = [
    "DEFINITIONS",
    "HEADLINE",
    "HEADLINE_METRIC",
    "CompositeRow",
    "CompositeScorer",
    "episode_row",
    "evolif_view",
    "summarize",
    "summarize_rows",
]

HEADLINE: tuple[str, ...] = (*EVOLIF_HEADLINE, "checklist/CSR", "checklist/ISR", "DRFR", "WCSR")
HEADLINE_METRIC = EVOLIF_HEADLINE_METRIC  # the rules' stability (STA), as in EvolIF
# One line per metric, printed under the results table.
DEFINITIONS: dict[str, str] = EVOLIF_DEFINITIONS | {
    "checklist/CSR": "the structural checklist items met / judged, per turn, averaged over turns",
    "checklist/ISR": "share of turns that met every structural checklist item",
    "DRFR": "checklist items met / items judged, pooled over all items",
    "WCSR": "weighted checklist CSR: per turn, met weight / weight (structural items 2, others 1), averaged",
}


def _split(spec: TurnSpec) -> TurnSpec:
    """The spec of the checklist items after the constraint items (structural ones, or a StructFlow turn's rest)."""
    n = len(spec.constraints)
    head = spec.checklist[:n]
    if len(head) != n or any(item.constraint != c for item, c in zip(head, spec.constraints, strict=True)):
        raise DataFormatError(
            "a composite turn's checklist must start with one item per live constraint, in the same order"
        )
    return replace(spec, constraints=(), checklist=spec.checklist[n:])


class CompositeScorer:
    """The constraints by `rules` (an EvolIFScorer), the rest of the checklist by `checklist` (a StructFlowScorer)."""

    def __init__(self, rules: EvolIFScorer, checklist: StructFlowScorer):
        self.rules = rules
        self.checklist = checklist

    @property
    def judge(self) -> Any:
        """The checklist judge (None with judge='rules'): what `ifgym eval` audits."""
        return self.checklist.judge

    def reset(self) -> None:
        """Nothing to forget: each turn is scored on its own."""

    @staticmethod
    def _concat(a: Scores, b: Scores) -> Scores:
        return Scores(a.strict + b.strict, a.loose + b.loose, a.groups + b.groups, a.weights + b.weights)

    @twin
    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Steps[Scores]:
        """Verdicts for every checklist item, in the checklist's order; `ascore` awaits the judge's calls."""
        rest = _split(spec)
        constraints = yield from steps_of(self.rules, "score", reply, spec, history)
        return self._concat(constraints, (yield from steps_of(self.checklist, "score", reply, rest, history)))


def _evolif_episode(e: Episode) -> Episode:
    """An episode as EvolIF's metrics read it: each turn's verdicts cut to its live constraints."""
    turns = []
    for t in e.turns:
        n = len(t.spec.constraints)
        turns.append(replace(t, verdicts=t.verdicts[:n], loose_verdicts=t.loose_verdicts[:n]))
    return replace(e, turns=turns)


def evolif_view(episodes: Iterable[Episode], loose: bool = False) -> list[Episode]:
    """The episodes as EvolIF's metrics read them: each turn's verdicts cut to its live constraints."""
    return [_evolif_episode(e) for e in episodes]


def _rate(yes: int, known: int) -> float:
    return yes / known if known else math.nan


@dataclass(frozen=True, slots=True)
class CompositeRow:
    """One episode as `summarize_rows` needs it: its EvolIF and StructFlow rows, cross-table cells, persona."""

    evolif: EvolIFRow
    checklist: tuple[TurnRow, ...]
    cells: dict[tuple[str, str], tuple[int, int]]  # (relation, group) or ("structural", relation): (yes, known)
    level: str


def episode_row(episode: Episode, loose: bool = False) -> CompositeRow:
    """One episode's row for `summarize_rows` (numbers and labels only)."""
    evolif = evolif_row(_evolif_episode(episode), loose)
    checklist = structflow_row(episode, loose)
    cells: dict[tuple[str, str], tuple[int, int]] = {}
    for t in episode.turns:
        # without the structure axis a turn has no relation: it is named by EvolIF's move
        relation = t.spec.meta.get("relation") or (FIRST_TURN if t.index == 0 else f"move:{t.spec.move}")
        verdicts = t.loose_verdicts if loose else t.verdicts
        for item, v in zip(t.spec.checklist, verdicts, strict=True):
            if v.label == "unknown":
                continue
            key = (relation, item.constraint.group) if item.kind == "intra" and item.constraint else None
            if key is None and item.kind == "structural":
                key = ("structural", relation)
            if key is not None:
                yes, known = cells.get(key, (0, 0))
                cells[key] = (yes + (v.label == "yes"), known + 1)
    persona = episode.meta.get("persona") or {}
    return CompositeRow(evolif, checklist, cells, persona.get("level", "off"))


def summarize(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """Every composite metric in one flat dict (see the module docstring for the keys), in one pass over `episodes`."""
    return summarize_rows(rows_of(episodes, episode_row, loose))


def summarize_rows(rows: Sequence[CompositeRow], loose: bool = False) -> dict[str, float]:
    """`summarize` from the episodes' rows (`episode_row`); `loose` is the rows' business and is ignored here."""
    out = evolif_summarize_rows([r.evolif for r in rows])
    sf = structflow_summarize_rows([r.checklist for r in rows])
    out.update({"checklist/CSR": sf["CSR"], "checklist/ISR": sf["ISR"]})
    for key in ("DRFR", "WCSR", "WCSR_pooled", "items"):
        out[key] = sf[key]
    out["checklist_unknown"] = sf["unknown"]
    out.update({f"item_rate/{k[len('pass_rate/') :]}": v for k, v in sf.items() if k.startswith("pass_rate/")})
    cells: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        for key, (yes, known) in r.cells.items():
            cell = cells.setdefault(key, [0, 0])
            cell[0] += yes
            cell[1] += known
    for (a, b), (yes, known) in sorted(cells.items()):
        name = f"structural/{b}" if a == "structural" else f"relation_group/{a}/{b}"
        out[name] = _rate(yes, known)
    levels: dict[str, list[CompositeRow]] = {}
    for r in rows:
        levels.setdefault(r.level, []).append(r)
    for level, group in levels.items():
        ev = evolif_summarize_rows([r.evolif for r in group])
        out.update({f"persona/{level}/{k}": ev[k] for k in ("CSR", "ISR", "EDR_len")})
        out[f"persona/{level}/DRFR"] = structflow_summarize_rows([r.checklist for r in group])["DRFR"]
        out[f"persona/{level}/episodes"] = float(len(group))
    return out
