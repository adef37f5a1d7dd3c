"""StructFlowBench's metrics over episodes (`summarize`) and over its own evaluation files (`score_file`).

Metrics (StructFlowBench, arXiv 2502.14494, and its scoring script `evaluation/score.py` in
github.com/MLGroupJLU/StructFlowBench, which fixes the details): a Yes counts 1, a No 0.

- CSR: per turn, the share of its checklist items satisfied; averaged over all turns.
- ISR: per turn, 1 when every item is satisfied, else 0; averaged over all turns.
- WCSR: per turn, sum(weight * satisfied) / sum(weight) with structural items (follow-up,
  refinement, recall, expansion, summary) weighing 2 and intra-turn items 1; averaged over turns.
  This is the released script's computation and the headline `WCSR` (the benchmark's published
  numbers come from it).
- WCSR_pooled: the paper's formula (StructFlowBench §3.5; GraphIF eq. 10), sum(weight *
  satisfied) / sum(weight) over every item of every turn at once. It differs from `WCSR` when turns
  carry different total weights: a turn with two structural items weighs more here, while `WCSR`
  gives every turn the same say. Reported beside `WCSR` by `summarize` and `score_file`.
- The paper presets (`env=structflow_paper`, the env's `metrics="paper"`) report the paper's
  formula as `WCSR` (overall and in every breakdown), and the script's per-turn mean as
  `WCSR_per_turn` (`summarize_paper`); `WCSR_pooled` is the equation in every preset.
- DRFR: satisfied items / all items, pooled over every item of every turn.
- per item type: satisfied / items of that type, pooled; per task (the part of `conv_task` before
  ':'): CSR, ISR, DRFR and WCSR over that task's turns. ifgym adds the same four per user type
  (StructFlowBench's `user_type` 1 = professional, 0 = non-professional) and per relation (the
  turn's relation to earlier turns; "first_turn" for opening turns).
- the script's edge case: a turn with an empty checklist has CSR 0, ISR 1 and WCSR 0; kept.
- an item whose type is none of the 13 counts in CSR, ISR and DRFR but weighs 0 in WCSR and gets
  no per-type key, as in the script (only files read by `score_file` can hold one).

ifgym's only addition is `unknown` (a judge that could not be read): unknown items count in no
numerator or denominator; a turn whose items are all unknown is left out of CSR/ISR/WCSR, and a
turn with a known No is ISR 0 while one with only Yes and unknown is left out of ISR. Rates with
nothing to measure are NaN. `score_file` reads the benchmark's own evaluation output (no unknowns
there: as its script does, anything but exactly "Yes" is a No) and reproduces its numbers and its
key set; `ndigits=2` also reproduces its rounding. `summarize` (episodes) and `score_file` name the
same quantities alike up to nesting: see `summarize` for the mapping.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import Episode
from ifgym.core.structflow import (
    ITEM_TYPES,
    TASK_NAMES,
    TYPE_WEIGHTS,
    flow_from_json,
    task_name,
    user_type_name,
)
from ifgym.errors import ConfigError, DataFormatError, did_you_mean
from ifgym.files import not_a_folder
from ifgym.rewards.metrics import rows_of

__all__ = [
    "DEFINITIONS",
    "FIRST_TURN",
    "HEADLINE_METRIC",
    "TurnRow",
    "compute_metrics",
    "episode_row",
    "rows_from_episodes",
    "score_file",
    "summarize",
    "summarize_paper",
    "summarize_rows",
    "summarize_rows_paper",
]

FIRST_TURN = "first_turn"  # the relation key of opening turns

# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)  # a run's summary keeps one per turn
class TurnRow:
    """One scored turn as the metrics see it: each item's label, type and weight, and the turn's groups."""

    labels: tuple[str, ...]
    types: tuple[str, ...]
    weights: tuple[float, ...]
    task: str = ""
    user_type: str = "unknown"
    relation: str = FIRST_TURN
    dialogue: str = ""


def _turn_values(row: TurnRow) -> tuple[float | None, float | None, float | None]:
    """(CSR, ISR, WCSR) of one turn; None where unknown verdicts leave nothing to measure."""
    if not row.labels:
        return 0.0, 1.0, 0.0  # the benchmark script's values for an empty checklist
    known = [(label, w) for label, w in zip(row.labels, row.weights, strict=True) if label != "unknown"]
    if not known:
        return None, None, None
    yes = sum(label == "yes" for label, _ in known)
    csr = yes / len(known)
    total = sum(w for _, w in known)
    wcsr = sum(w for label, w in known if label == "yes") / total if total else 0.0
    if yes < len(known):
        isr: float | None = 0.0
    else:
        isr = 1.0 if len(known) == len(row.labels) else None
    return csr, isr, wcsr


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _pooled_wcsr(rows: Sequence[TurnRow]) -> float:
    """Met weight / weight over every known item of `rows` at once (the papers' equation)."""
    known = [(label, w) for r in rows for label, w in zip(r.labels, r.weights, strict=True) if label != "unknown"]
    weight = sum(w for _, w in known)
    return sum(w for label, w in known if label == "yes") / weight if weight else math.nan


def _aggregate(rows: Sequence[TurnRow], pooled: bool = False) -> dict[str, float]:
    """CSR, ISR, WCSR, DRFR of `rows`; `pooled`: WCSR is the papers' equation, not the script's per-turn mean."""
    csr, isr, wcsr = [], [], []
    yes = known = 0
    for row in rows:
        c, i, w = _turn_values(row)
        if c is not None:
            csr.append(c)
            wcsr.append(w)
        if i is not None:
            isr.append(i)
        yes += sum(label == "yes" for label in row.labels)
        known += sum(label != "unknown" for label in row.labels)
    drfr = yes / known if known else math.nan
    return {"CSR": _mean(csr), "ISR": _mean(isr), "WCSR": _pooled_wcsr(rows) if pooled else _mean(wcsr), "DRFR": drfr}


def _only_type(rows: Sequence[TurnRow], kind: str) -> list[TurnRow]:
    """The turns that have items of `kind`, each cut down to those items (per-type CSR/ISR/WCSR/DRFR)."""
    out = []
    for row in rows:
        items = [(label, w) for label, t, w in zip(row.labels, row.types, row.weights, strict=True) if t == kind]
        if items:
            labels, weights = zip(*items, strict=True)
            out.append(TurnRow(labels, (kind,) * len(items), weights, row.task, row.user_type))
    return out


def _ordered(keys: Sequence[str], order: Sequence[str]) -> list[str]:
    rank = {k: i for i, k in enumerate(order)}
    return sorted(keys, key=lambda k: (rank.get(k, len(rank)), k))


def compute_metrics(rows: Sequence[TurnRow], pooled: bool = False) -> dict[str, Any]:
    """CSR, ISR, WCSR, DRFR (and WCSR_pooled) overall; pass rate per item type; the four per task, user type, relation.

    Returns {"CSR", "ISR", "WCSR", "DRFR", "WCSR_pooled", "types": {type: rate}, "type_metrics": {type:
    the four over that type's items only}, "tasks": {task: {...}}, "user_types": {...}, "relations": {...},
    "dialogues": {dialogue id: {...}}, "turns", "items", "unknown", "undetermined_turns"}. Within one type
    WCSR equals CSR (one weight) and DRFR equals the type's rate. `pooled=True` (the paper presets):
    every WCSR is the papers' equation, and "WCSR_per_turn" the script's per-turn mean.
    """
    if isinstance(rows, TurnRow) or len(rows) == 0:
        raise DataFormatError("StructFlow metrics need at least one scored turn; got none")
    out: dict[str, Any] = _aggregate(rows, pooled)
    out["WCSR_pooled"] = _pooled_wcsr(rows)
    if pooled:
        out["WCSR_per_turn"] = _aggregate(rows)["WCSR"]
    yes: dict[str, int] = {}
    known: dict[str, int] = {}
    for row in rows:
        for label, kind in zip(row.labels, row.types, strict=True):
            if label != "unknown":
                known[kind] = known.get(kind, 0) + 1
                yes[kind] = yes.get(kind, 0) + (label == "yes")
    out["types"] = {k: yes[k] / known[k] for k in _ordered(list(known), ITEM_TYPES)}
    out["type_metrics"] = {k: _aggregate(_only_type(rows, k), pooled) for k in out["types"]}
    for key, attr, order in (
        ("tasks", "task", [*TASK_NAMES, "mix"]),
        ("user_types", "user_type", ("professional", "non-professional")),
        ("relations", "relation", (FIRST_TURN, "follow-up", "refinement", "recall", "expansion", "summary")),
    ):
        groups: dict[str, list[TurnRow]] = {}
        for row in rows:
            groups.setdefault(getattr(row, attr), []).append(row)
        out[key] = {g: _aggregate(groups[g], pooled) for g in _ordered(list(groups), order)}
    dialogues: dict[str, list[TurnRow]] = {}
    for row in rows:
        dialogues.setdefault(row.dialogue, []).append(row)
    out["dialogues"] = {d: _aggregate(dialogue_rows, pooled) for d, dialogue_rows in dialogues.items()}
    out["turns"] = len(rows)
    out["items"] = sum(len(r.labels) for r in rows)
    out["unknown"] = sum(label == "unknown" for r in rows for label in r.labels)
    out["undetermined_turns"] = sum(1 for r in rows if r.labels and _turn_values(r)[0] is None)
    return out


def episode_row(episode: Episode, loose: bool = False) -> tuple[TurnRow, ...]:
    """One episode's scored turns (strict verdicts, or loose with `loose=True`): its row for `summarize_rows`."""
    rows = []
    for turn in episode.turns:
        verdicts = turn.loose_verdicts if loose else turn.verdicts
        checklist = turn.spec.checklist
        if len(verdicts) != len(checklist):
            raise DataFormatError(
                f"episode {episode.episode_id!r} turn {turn.index}: {len(verdicts)} verdicts for {len(checklist)} "
                "checklist items; a StructFlow turn needs one verdict per item, in the checklist's order"
            )
        meta = turn.spec.meta
        # interned: a run keeps a row per turn, and these few strings repeat in every one
        rows.append(
            TurnRow(
                labels=tuple(sys.intern(v.label) for v in verdicts),
                types=tuple(sys.intern(i.type) for i in checklist),
                weights=tuple(float(i.weight) for i in checklist),
                task=sys.intern(str(meta.get("task", ""))),
                user_type=sys.intern(str(meta.get("user_type", "unknown"))),
                relation=sys.intern(meta.get("relation") or FIRST_TURN),
                dialogue=sys.intern(str(meta.get("dialogue", episode.episode_id))),
            )
        )
    return tuple(rows)


def rows_from_episodes(episodes: Iterable[Episode], loose: bool = False) -> list[TurnRow]:
    """The scored turns of StructFlow episodes (strict verdicts, or loose with `loose=True`)."""
    return [turn for row in rows_of(episodes, episode_row, loose) for turn in row]


def summarize(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """StructFlow's metrics of finished episodes as one flat dict (results table, W&B).

    Keys: CSR, ISR, WCSR (per-turn mean, the headline), DRFR, WCSR_pooled (the paper's pooled
    formula), episodes, turns, items, unknown, undetermined_turns,
    `pass_rate/<item type>`, `type/<item type>/CSR` and `.../ISR` (over that type's items only),
    and `task/<task>/<metric>`, `user_type/<type>/<metric>`, `relation/<relation>/<metric>` for
    metric in CSR, ISR, WCSR, DRFR. Per dialogue: `dialogue_metrics`.

    The same quantities in `score_file`'s output (the benchmark's nesting): `pass_rate/<item type>`
    is its bare `<item type>` key, `task/<task>/<metric>` is `["tasks"][<task>][<metric>]`,
    `user_type/...` and `relation/...` are `["user_types"]` and `["relations"]`; CSR, ISR, WCSR,
    DRFR, turns and items have the same names. Types and tasks never measured are left out here
    (with unknown verdicts a rate can be undefined), where `score_file` writes the script's 0.0.
    """
    return summarize_rows(rows_of(episodes, episode_row, loose))


def summarize_paper(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """`summarize` as the paper presets report it: WCSR is the papers' pooled equation, WCSR_per_turn the script's."""
    return summarize_rows_paper(rows_of(episodes, episode_row, loose))


def summarize_rows(
    rows: Sequence[tuple[TurnRow, ...]], loose: bool = False, *, pooled: bool = False
) -> dict[str, float]:
    """`summarize` from the episodes' rows (`episode_row`); `loose` is the rows' business and is ignored here."""
    if not rows:
        raise DataFormatError("metrics need at least one episode; got an empty list")
    m = compute_metrics([turn for row in rows for turn in row], pooled)
    out: dict[str, float] = {k: m[k] for k in ("CSR", "ISR", "WCSR", "DRFR", "WCSR_pooled")}
    if pooled:
        out["WCSR_per_turn"] = m["WCSR_per_turn"]
    out["episodes"] = float(len(rows))
    for key in ("turns", "items", "unknown", "undetermined_turns"):
        out[key] = float(m[key])
    out.update({f"pass_rate/{k}": v for k, v in m["types"].items()})
    for kind, values in m["type_metrics"].items():  # DRFR of a type is its pass_rate; WCSR its CSR
        out.update({f"type/{kind}/{name}": values[name] for name in ("CSR", "ISR")})
    for prefix, key in (("task", "tasks"), ("user_type", "user_types"), ("relation", "relations")):
        for group, values in m[key].items():
            out.update({f"{prefix}/{group}/{name}": value for name, value in values.items()})
    return out


def summarize_rows_paper(rows: Sequence[tuple[TurnRow, ...]], loose: bool = False) -> dict[str, float]:
    """`summarize_paper` from the episodes' rows."""
    return summarize_rows(rows, loose, pooled=True)


def summary_ratios_paper(
    rows: Sequence[tuple[TurnRow, ...]], loose: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`summary_ratios` named as `summarize_rows_paper` names them: WCSR pooled, WCSR_per_turn the script's."""
    out = summary_ratios(rows, loose)
    out["WCSR_per_turn"], out["WCSR"] = out["WCSR"], out["WCSR_pooled"]
    return out


def summary_ratios(
    rows: Sequence[tuple[TurnRow, ...]], loose: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The headline metrics and pass rates of `summarize_rows`, each as sum(numerators) / sum(denominators) over rows.

    Per dialogue (a row: its scored turns): CSR and WCSR sum the turn values of the turns with a
    known verdict over their count, ISR the determined turns' values over theirs, DRFR and each
    pass rate the yes items over the known ones, WCSR_pooled the yes weight over the known weight.
    A bootstrap draw's value is then a weighted sum (`ifgym.core.stats.intervals`) instead of a full
    `summarize_rows` with every breakdown. `loose` is the rows' business and is ignored here.
    """
    n = len(rows)
    names = ("CSR", "WCSR", "ISR", "DRFR", "WCSR_pooled")
    num = {k: np.zeros(n) for k in names}
    den = {k: np.zeros(n) for k in names}
    types: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, row in enumerate(rows):
        for turn in row:
            csr, isr, wcsr = _turn_values(turn)
            if csr is not None:
                num["CSR"][i] += csr
                num["WCSR"][i] += wcsr
                den["CSR"][i] += 1
                den["WCSR"][i] += 1
            if isr is not None:
                num["ISR"][i] += isr
                den["ISR"][i] += 1
            for label, kind, weight in zip(turn.labels, turn.types, turn.weights, strict=True):
                if label == "unknown":
                    continue
                yes = label == "yes"
                num["DRFR"][i] += yes
                den["DRFR"][i] += 1
                num["WCSR_pooled"][i] += weight * yes
                den["WCSR_pooled"][i] += weight
                columns = types.setdefault(kind, (np.zeros(n), np.zeros(n)))
                columns[0][i] += yes
                columns[1][i] += 1
    out = {k: (num[k], den[k]) for k in names}
    for kind in _ordered(list(types), ITEM_TYPES):
        out[f"pass_rate/{kind}"] = types[kind]
    return out


def dialogue_metrics(episodes: Sequence[Episode], loose: bool = False) -> dict[str, dict[str, float]]:
    """CSR, ISR, WCSR and DRFR of each dialogue (keyed by dialogue id, in the episodes' order)."""
    return compute_metrics(rows_from_episodes(episodes, loose))["dialogues"]


def _round(value: Any, ndigits: int | None) -> Any:
    if ndigits is None:
        return value
    if isinstance(value, float):
        return value if math.isnan(value) else float(np.round(value, ndigits))  # numpy's rounding, as the script
    if isinstance(value, dict):
        return {k: _round(v, ndigits) for k, v in value.items()}
    return value


SCRIPT_TASKS: tuple[str, ...] = (*TASK_NAMES, "mix")  # the benchmark script's task list, in its order
METRICS = ("CSR", "ISR", "WCSR", "DRFR")
HEADLINE = (*METRICS, "WCSR_pooled")  # the metrics a run is judged by (bootstrap intervals in `ifgym eval`)
HEADLINE_METRIC = "WCSR"  # the one a run is read by first (the benchmark's published number)
PAPER_HEADLINE = (*METRICS, "WCSR_per_turn")  # the paper presets': WCSR is the equation, beside the script's
# One line per metric, printed under the results table.
DEFINITIONS: dict[str, str] = {
    "CSR": "constraint satisfaction rate: per turn, checklist items met / items judged, averaged over turns",
    "ISR": "instruction satisfaction rate: share of turns that met every checklist item",
    "WCSR": "weighted CSR: per turn, met weight / weight (structural items 2, others 1), averaged over turns",
    "DRFR": "decomposed requirements following ratio: items met / items judged, pooled over all items",
    "WCSR_pooled": "the paper's WCSR: met weight / weight summed over all items at once",
    "loose": "the same reply checked again with Markdown fences or a first/last framing line stripped",
}
PAPER_DEFINITIONS: dict[str, str] = {
    **DEFINITIONS,
    "WCSR": "weighted CSR as StructFlowBench §3.5 and GraphIF eq. 10 define it: met weight / weight summed over all "
    "items of all turns at once (structural items 2, others 1)",
    "WCSR_per_turn": "the released scoring script's WCSR: per turn, met weight / weight, averaged over turns",
    "WCSR_pooled": "the papers' WCSR (the same as WCSR here; named alike in every preset)",
}


def _evaluated_record(record: Any, index: int, source: str) -> tuple[list[TurnRow], bool, int, int]:
    """One record of an evaluation file, read as leniently as the benchmark's script reads it.

    Returns (its turns, whether its structure could be read, non-standard judgements, items of other types).
    Only what the script needs is required: `conv_task` (one of its tasks), and per turn `constraints`
    (objects with a `type`) and a `judge result` list of `{"judgement": ...}`, one per constraint.
    """
    where = f"{source}: record {index}"
    if not isinstance(record, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    conv = record.get("whole_conv")
    if not isinstance(conv, list):
        raise DataFormatError(f"{where}: field 'whole_conv' must be a list of turns, got {conv!r:.80}")
    conv_task = record.get("conv_task")
    if not isinstance(conv_task, str):
        raise DataFormatError(f"{where}: field 'conv_task' must be a string, got {conv_task!r:.80}")
    task = task_name(conv_task)
    if task not in SCRIPT_TASKS:  # the script stops here too (its per-task table has no such key)
        raise DataFormatError(
            f"{where}: field 'conv_task' names the task {task!r}, not one of the benchmark's tasks."
            f"{did_you_mean(task, SCRIPT_TASKS)} Allowed: {', '.join(SCRIPT_TASKS)}"
        )
    try:
        user = user_type_name(record.get("user_type"))
    except ConfigError:
        user = "unknown"  # the script never reads user_type
    try:  # the script never reads the structure either: it only feeds ifgym's per-relation breakdown
        flow = flow_from_json(record.get("structure"), max(len(conv), 1), where=f"{where} field 'structure'")
    except DataFormatError:
        flow = None
    rows, nonstandard, other = [], 0, 0
    for k, raw in enumerate(conv):
        at = f"{where} whole_conv[{k}]"
        if not isinstance(raw, Mapping):
            raise DataFormatError(f"{at}: expected an object, got {type(raw).__name__}")
        constraints = raw.get("constraints")
        if not isinstance(constraints, list):
            raise DataFormatError(f"{at}: field 'constraints' must be a list, got {constraints!r:.80}")
        types = []
        for j, c in enumerate(constraints):
            if not isinstance(c, Mapping) or not isinstance(c.get("type"), str):
                raise DataFormatError(
                    f"{at}['constraints'][{j}]: expected an object with a string 'type', got {c!r:.80}"
                )
            types.append(c["type"])
        if "judge result" not in raw:
            raise DataFormatError(
                f"{at}: missing field 'judge result' (this turn was never judged; re-run the evaluation for it)"
            )
        results = raw["judge result"]
        if isinstance(results, Mapping):
            raise DataFormatError(
                f"{at}: field 'judge result' holds a judge failure, not judgements: {results!r:.120}; "
                "re-run the evaluation for this turn"
            )
        # the benchmark's evaluate.py never writes a list of another length (it re-asks, then leaves the
        # field out); a mismatch means the file was edited, and pairing by position would misattribute
        if not isinstance(results, list) or len(results) != len(types):
            count = len(results) if isinstance(results, list) else type(results).__name__
            raise DataFormatError(
                f"{at}: field 'judge result' must be a list with one entry per constraint ({len(types)}), got {count}"
            )
        labels = []
        for j, entry in enumerate(results):
            if not isinstance(entry, Mapping) or "judgement" not in entry:
                raise DataFormatError(
                    f"{at}['judge result'][{j}]: expected an object with 'judgement', got {entry!r:.80}"
                )
            value = entry["judgement"]
            nonstandard += value not in ("Yes", "No")
            labels.append("yes" if value == "Yes" else "no")
        other += sum(t not in TYPE_WEIGHTS for t in types)
        rows.append(
            TurnRow(
                labels=tuple(labels),
                types=tuple(types),
                # a type the script does not know weighs 0: counted in CSR, ISR and DRFR, not in WCSR
                weights=tuple(TYPE_WEIGHTS.get(t, 0.0) for t in types),
                task=task,
                user_type=user,
                relation=(flow.relation_of(k) or FIRST_TURN) if flow is not None else "",
            )
        )
    return rows, flow is not None, nonstandard, other


def score_file(path: str | Path, *, ndigits: int | None = None) -> dict[str, Any]:
    """Re-score an evaluation output file of StructFlowBench (its dataset records with a "judge result" per turn).

    Reads what the benchmark's `evaluation/score.py` reads and nothing more: each record's
    `conv_task` and, per turn, the `constraints`' types and the `judge result` list (one
    `{"judgement": ...}` per constraint, in order). As the script does, exactly "Yes" counts as
    satisfied and anything else as not (`nonstandard_judgements` counts values other than
    "Yes"/"No"); an item whose type is not one of the benchmark's 13 counts in CSR, ISR and DRFR
    but not in WCSR or any per-type rate (`other_type_items` counts them).

    Returns the script's keys, always all of them: "CSR", "ISR", "WCSR", "DRFR", the 13 item
    types (0.0 for a type with no items, as the script writes it), and "tasks" with its 8 tasks
    (each CSR, ISR, WCSR, DRFR; 0.0 for a task with no turns). ifgym adds "user_types" and
    "relations" (the latter from records whose `structure` is a valid flow; `invalid_structures`
    counts the others, which are left out of it), "WCSR_pooled" (the paper's formula),
    "items_per_type", "turns_per_task", "turns", "items", "nonstandard_judgements" and
    "other_type_items". `ndigits=2` rounds like the script.

    What the script cannot score either is a DataFormatError naming the record and turn: a judge
    failure left in the file, a missing field it reads, a task outside its list, or a judge result
    list whose length differs from the constraints' (evaluate.py never writes one).
    """
    path = not_a_folder(path, "evaluation file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFormatError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, list) or not data:
        raise DataFormatError(f"{path}: expected a non-empty JSON list of evaluated records, got {type(data).__name__}")
    rows: list[TurnRow] = []
    structured: list[TurnRow] = []
    nonstandard = other = invalid = 0
    for index, record in enumerate(data):
        record_rows, has_flow, bad_values, other_types = _evaluated_record(record, index, str(path))
        rows += record_rows
        structured += record_rows if has_flow else []
        invalid += not has_flow
        nonstandard += bad_values
        other += other_types
    m = compute_metrics(rows)
    zero = dict.fromkeys(METRICS, 0.0)
    out: dict[str, Any] = {k: m[k] for k in METRICS}
    out.update({t: m["types"].get(t, 0.0) for t in ITEM_TYPES})
    out["WCSR_pooled"] = m["WCSR_pooled"]  # ifgym's addition, after the script's keys: the paper's formula
    out["tasks"] = {t: m["tasks"].get(t, zero) for t in SCRIPT_TASKS}
    out["user_types"] = m["user_types"]
    out["relations"] = compute_metrics(structured)["relations"] if structured else {}
    out = _round(out, ndigits)
    out["items_per_type"] = {t: sum(r.types.count(t) for r in rows) for t in ITEM_TYPES}
    out["turns_per_task"] = {t: sum(r.task == t for r in rows) for t in SCRIPT_TASKS}
    out.update(
        turns=m["turns"],
        items=m["items"],
        nonstandard_judgements=nonstandard,
        other_type_items=other,
        invalid_structures=invalid,
    )
    return out
