"""The judge checked against people on the run at hand: a labelling sample, the labels file, Cohen's kappa per group.

`ifgym view RUN --serve` shows a sample of the run's judged verdicts (strict, `source` "judge:…"),
drawn stratified by constraint group and judge label (`sample_items`), with the judge's answer
hidden until the researcher has labelled the item. Each label is appended to `labels.jsonl` in the
run folder (`append_label`: one JSON line, flushed and fsynced; a relabelled item's last line
counts). `ifgym agreement RUN` (`agreement`) pairs the labels with the run's verdicts and reports,
per group and over all groups, Cohen's kappa (`ifgym.core.stats.cohen_kappa` over the labels
yes/no/unknown: a judge's unknown counts as disagreeing with the human's yes or no), accuracy (share of
items where the judge said what the human said) and the yes-rate on the human's negatives (share of
items a human labelled "no" that the judge passed), each with a percentile bootstrap interval over
episodes (`ifgym.core.stats.intervals`: the labelled items of one episode are drawn together).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import LABELS, Episode, TurnRecord
from ifgym.core.stats import cohen_kappa
from ifgym.errors import DataFormatError

LABELS_FILE = "labels.jsonl"
HUMAN_LABELS = ("yes", "no")
SAMPLE_SIZE = 100  # labelled items a researcher is offered per run by default
ALL = "all"  # the row over every group
FIGURES = ("kappa", "accuracy", "yes_rate_negatives")

__all__ = [
    "LABELS_FILE",
    "agreement",
    "agreement_lines",
    "append_label",
    "item_key",
    "read_labels",
    "sample_items",
    "turn_items",
]


def turn_items(turn: TurnRecord) -> list[tuple[str, str, str]]:
    """(name, group, question) of each verdict of a turn, in verdict order.

    The name is the checklist item's id, else the constraint's id; the group is the constraint's
    group (EvolIF's twelve) or, for a checklist item without a constraint, its type; the question is
    the checklist's question, else the constraint's description.
    """
    spec = turn.spec
    if spec.checklist and len(spec.checklist) == len(turn.verdicts):
        return [(i.id, i.constraint.group if i.constraint is not None else i.type, i.question) for i in spec.checklist]
    if len(spec.constraints) == len(turn.verdicts):
        return [(c.id, c.group, c.describe()) for c in spec.constraints]
    return [(f"item {k + 1}", "other", "") for k in range(len(turn.verdicts))]


def item_key(episode: Episode, turn_index: int, item: int) -> str:
    """The key a label is saved under: episode id, turn and item position (`ep-12/3/0`)."""
    return f"{episode.episode_id}/{turn_index}/{item}"


def judged(source: str) -> bool:
    """Whether a verdict's source is an LLM judge (`judge:<model>`), not a rule."""
    return source.startswith("judge")


def sample_items(episodes: Iterable[Episode], size: int = SAMPLE_SIZE, seed: int = 0) -> list[dict[str, Any]]:
    """A labelling sample of the run's judged (strict) verdicts, stratified by group and judge label.

    Every (group, judge label) stratum is shuffled with numpy's generator seeded `seed`, then the
    strata are taken in turn, one item each, until `size` items are drawn or all are: equal
    allocation, so a rare stratum (a group's few "no"s) is as present as a common one. Each item
    says where it is (`episode`, `seed`, `turn`: the position in the episode's turns, `item`) and
    what the judge said (`judge`, `reason`), which the viewer hides until the item is labelled.
    """
    strata: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e_index, episode in enumerate(episodes):
        for t_index, turn in enumerate(episode.turns):
            for k, ((name, group, _), verdict) in enumerate(zip(turn_items(turn), turn.verdicts, strict=True)):
                if not judged(verdict.source):
                    continue
                strata.setdefault((group, verdict.label), []).append(
                    {
                        "key": item_key(episode, t_index, k),
                        "index": e_index,
                        "episode": episode.episode_id,
                        "seed": episode.seed,
                        "turn": t_index,
                        "item": k,
                        "name": name,
                        "group": group,
                        "judge": verdict.label,
                        "reason": verdict.reason,
                    }
                )
    rng = np.random.default_rng(seed)
    queues = []
    for stratum in sorted(strata):
        items = strata[stratum]
        queues.append([items[i] for i in rng.permutation(len(items))])
    out: list[dict[str, Any]] = []
    while len(out) < size and any(queues):
        for queue in queues:
            if queue and len(out) < size:
                out.append(queue.pop(0))
    return out


_APPEND_LOCK = threading.Lock()


def append_label(folder: Path, label: dict[str, Any]) -> dict[str, Any]:
    """Check a label posted by the viewer and append it to the run's `labels.jsonl` (flushed and fsynced).

    `label` needs `key` (`item_key`) and `human` ("yes" or "no"); `episode`, `seed`, `turn`, `item`,
    `group` and `judge` are kept when given. Returns the line written (with its UTC `time`).
    """
    if not isinstance(label, dict):
        raise DataFormatError(f"a label must be a JSON object, got {type(label).__name__}")
    if not isinstance(label.get("key"), str) or not label["key"]:
        raise DataFormatError("a label needs a non-empty string `key` (episode id/turn/item)")
    if label.get("human") not in HUMAN_LABELS:
        raise DataFormatError(f"a label's `human` must be one of {HUMAN_LABELS}, got {label.get('human')!r}")
    kept = ("key", "human", "episode", "seed", "turn", "item", "group", "judge")
    line = {k: label[k] for k in kept if k in label}
    line["time"] = datetime.now(UTC).isoformat(timespec="seconds")
    path = folder / LABELS_FILE
    with _APPEND_LOCK, path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return line


def read_labels(folder: Path) -> list[dict[str, Any]]:
    """Every line of the run's `labels.jsonl`, in order ([] when there is none); a cut-off last line is ignored."""
    path = folder / LABELS_FILE
    if not path.exists():
        return []
    out = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):  # an interrupted append: no newline after it
                break
            raise DataFormatError(f"{path}:{number}: not a label ({exc}); fix or remove that line") from None
    return out


def _kappa(human: Sequence[str], judge: Sequence[str]) -> float:
    return cohen_kappa(human, judge, labels=LABELS)  # one label in play: undefined (NaN), which the row says


def _figures(pairs: Sequence[tuple[str, str, str]]) -> dict[str, float]:
    """kappa, accuracy, yes-rate on the human's negatives and n of (group, human, judge) pairs."""
    human = [h for _, h, _ in pairs]
    judge = [j for _, _, j in pairs]
    negatives = [j for h, j in zip(human, judge, strict=True) if h == "no"]
    return {
        "kappa": _kappa(human, judge),
        "accuracy": float(np.mean([h == j for h, j in zip(human, judge, strict=True)])) if pairs else math.nan,
        "yes_rate_negatives": float(np.mean([j == "yes" for j in negatives])) if negatives else math.nan,
        "n": float(len(pairs)),
    }


def _summarize(units: Sequence[list[tuple[str, str, str]]], loose: bool = False) -> dict[str, float]:
    """The figures over all groups (`all/kappa` …) and per group (`<group>/kappa` …) of episodes' label pairs."""
    pairs = [p for unit in units for p in unit]
    out = {f"{ALL}/{k}": v for k, v in _figures(pairs).items()}
    for group in sorted({g for g, _, _ in pairs}):
        out.update({f"{group}/{k}": v for k, v in _figures([p for p in pairs if p[0] == group]).items()})
    return out


def agreement(episodes: Iterable[Episode], labels: Sequence[dict[str, Any]], settings: Any = None) -> dict[str, Any]:
    """The judge's agreement with the human labels of its verdicts in this run, per group and over all.

    Returns `{"groups": {group: {"n", "kappa", "accuracy", "yes_rate_negatives", "ci": {figure: [lo, hi]}}},
    "labels": lines read, "matched": labels paired with a judged verdict, "unmatched": keys not found,
    "ci_settings"}`; `ALL` ("all") is the row over every group. A figure undefined on the labels (kappa
    with a single label in play, the yes-rate without a human "no") is None. `settings`:
    `ifgym.core.stats.CISettings` (default: 1,000 resamples, 95%, seed 0).
    """
    from ifgym.core.stats import CISettings, intervals

    settings = settings or CISettings()
    latest = {label["key"]: label for label in labels if isinstance(label, dict) and "key" in label}
    units: dict[str, list[tuple[str, str, str]]] = {}
    found: set[str] = set()
    for episode in episodes:
        for t_index, turn in enumerate(episode.turns):
            for k, ((_, group, _), verdict) in enumerate(zip(turn_items(turn), turn.verdicts, strict=True)):
                key = item_key(episode, t_index, k)
                if key in latest and judged(verdict.source):
                    units.setdefault(episode.episode_id, []).append((group, latest[key]["human"], verdict.label))
                    found.add(key)
    per_episode = list(units.values())
    point = _summarize(per_episode)
    metrics = [m for m in point if m.rsplit("/", 1)[1] in FIGURES]
    bounds = intervals(per_episode, _summarize, metrics, settings=settings) if per_episode else {}
    groups: dict[str, dict[str, Any]] = {}
    for name, value in point.items():
        group, figure = name.rsplit("/", 1)
        row = groups.setdefault(group, {"ci": {}})
        row[figure] = int(value) if figure == "n" else (None if math.isnan(value) else value)
        if figure in FIGURES:
            row["ci"][figure] = bounds.get(name)
    return {
        "groups": groups,
        "labels": len(latest),
        "matched": len(found),
        "unmatched": sorted(set(latest) - found),
        "ci_settings": settings.to_json(),
    }


def agreement_lines(result: dict[str, Any]) -> list[str]:
    """The agreement as a printed table: a row per group (all groups first), each figure with its interval."""
    if not result["groups"]:
        return [f"no human labels paired with a judged verdict of this run ({result['labels']} labels read)"]
    level = result["ci_settings"]["level"]

    def cell(row: dict[str, Any], figure: str) -> str:
        value, ci = row.get(figure), row["ci"].get(figure)
        if value is None:
            return "n/a"
        return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    head = ("group", "n", "kappa", "accuracy", "yes-rate on human no")
    order = [ALL, *sorted(g for g in result["groups"] if g != ALL)]
    rows = [(g, str(result["groups"][g]["n"]), *(cell(result["groups"][g], f) for f in FIGURES)) for g in order]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"judge vs human labels ({level:.0%} bootstrap intervals over episodes)"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    if result["unmatched"]:
        lines.append(f"{len(result['unmatched'])} labels name no judged verdict of this run (left out)")
    return lines
