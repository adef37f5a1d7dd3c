"""FlexBench's corpus metrics over many calls: summaries, per-dimension tables, heatmaps, reports."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ifgym.core import Episode, TurnRecord, Verdict
from ifgym.core.tasks import recorded_user_meta
from ifgym.errors import DataFormatError
from ifgym.rewards.flexbench.dimensions import DIMENSIONS_SUFFIX, DimensionSet
from ifgym.rewards.flexbench.gating import FlexScores, format_rate, gate
from ifgym.rewards.metrics import rows_of

# ---------------------------------------------------------------------------------------------
# Corpus metrics
# ---------------------------------------------------------------------------------------------


def episode_dimensions(episode: Episode) -> DimensionSet:
    """The dimension set an episode was scored with (stored in `episode.meta["flexbench"]`)."""
    data = episode.meta.get("flexbench", {}).get("dimensions")
    if data is None:
        raise DataFormatError(
            f"episode {episode.episode_id!r} has no meta['flexbench']['dimensions']; it was not played in FlexBench"
        )
    return DimensionSet.from_json(data, f"episode {episode.episode_id!r} dimensions")


def opening_line(episode: Episode) -> str | None:
    """The SOP's opening line the assistant spoke before the caller's first turn (None in an episode without it)."""
    return episode.meta.get("flexbench", {}).get("opening_line")


def caller_meta(episode: Episode, at: int) -> dict[str, Any]:
    """What the caller contributed to the episode's meta, as recorded, with the patience it had after turn `at`."""
    return {
        **recorded_user_meta(episode, at),
        **dict(episode.meta.get("flexbench") or {}),
        "patience": episode.turns[at].patience,
    }


def dimensions_record(episode: Episode) -> dict[str, Any]:
    """The dimension set an episode was scored with, as recorded (the JSON `DimensionSet.to_json` wrote)."""
    return episode.meta["flexbench"]["dimensions"]


def turn_reward(episode: Episode, turn: TurnRecord) -> float | None:
    """A turn's own reward: dimensions newly satisfied less those newly broken, over all dimensions.

    None for a turn that was not judged (`judge_every_turn=False`).
    """
    if "newly_satisfied" not in turn.info:
        return None
    dims = len(episode_dimensions(episode).ids)
    return (len(turn.info["newly_satisfied"]) - len(turn.info.get("newly_broken", ()))) / dims


def _final_verdicts(episode: Episode, dims: DimensionSet) -> list[Verdict] | None:
    for turn in reversed(episode.turns):
        if turn.verdicts:
            if len(turn.verdicts) != len(dims.dimensions):
                raise DataFormatError(
                    f"episode {episode.episode_id!r} turn {turn.index}: {len(turn.verdicts)} verdicts for "
                    f"{len(dims.dimensions)} dimensions"
                )
            return turn.verdicts
    return None


def episode_scores(episode: Episode, dims: DimensionSet | None = None) -> FlexScores | None:
    """Coverage/Achievement of an episode from its last judged turn (None if no turn was judged)."""
    dims = dims or episode_dimensions(episode)
    verdicts = _final_verdicts(episode, dims)
    return gate(dims, verdicts) if verdicts is not None else None


def _corpus(episodes: Sequence[Episode]) -> tuple[DimensionSet, list[FlexScores]]:
    if isinstance(episodes, Episode):
        raise DataFormatError("metrics take a list of episodes; wrap a single episode as [episode]")
    if not episodes:
        raise DataFormatError("metrics need at least one episode; got an empty list")
    dims = episode_dimensions(episodes[0])
    for e in episodes[1:]:
        other = e.meta.get("flexbench", {}).get("dimensions", {})
        if other.get("sop") != dims.sop or [d.get("id") for d in other.get("dimensions", [])] != list(dims.ids):
            raise DataFormatError(
                f"episode {e.episode_id!r} was scored with other dimensions than {episodes[0].episode_id!r}; "
                "summarize one SOP's episodes at a time"
            )
    scores = [s for e in episodes if (s := episode_scores(e, dims)) is not None]
    return dims, scores


def _mean(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return sum(known) / len(known) if known else math.nan


def dimension_rates(dims: DimensionSet, scores: Sequence[FlexScores]) -> dict[str, float]:
    """Per dimension, gated yes / (yes + no) over the episodes; NaN where never known."""
    return _rates(dims.ids, scores)


def _rates(ids: Sequence[str], scores: Sequence[FlexScores]) -> dict[str, float]:
    out = {}
    for dim_id in ids:
        yes = sum(s.labels[dim_id] == "yes" for s in scores)
        no = sum(s.labels[dim_id] == "no" for s in scores)
        out[dim_id] = yes / (yes + no) if yes + no else math.nan
    return out


# The metrics a run is judged by (bootstrap intervals in `ifgym eval`'s summary).
HEADLINE: tuple[str, ...] = (
    "coverage",
    "achievement",
    "compliance",
    "score",
    "coverage_pooled",
    "achievement_pooled",
    "compliance_pooled",
)
HEADLINE_METRIC = "score"  # the one a run is read by first
# One line per metric, printed under the results table.
DEFINITIONS: dict[str, str] = {
    "coverage": "base actions of the SOP attempted, per call, averaged over calls",
    "achievement": "branches done right where they applied, per call, averaged (n/a: no branch applied)",
    "compliance": "always-on rules kept, per call, averaged over calls",
    "score": "per call mean(coverage, achievement) x compliance, averaged over calls",
    "coverage_pooled": "coverage as a ratio of sums over all calls (each base action weighs the same)",
    "achievement_pooled": "achievement as a ratio of sums over all calls",
    "compliance_pooled": "compliance as a ratio of sums over all calls",
}

# How a run's calls are summed up: ifgym's per-call means (`"ifgym"`) or FlexBench's equations (6)
# and (7) as the headline (`"paper"`, env=flexbench_paper); an episode records which in its meta.
METRICS = ("ifgym", "paper")
# The paper's headline: Coverage (6) and Achievement (7), ratios of sums over every call of the corpus.
PAPER_HEADLINE: tuple[str, ...] = (
    "Coverage",
    "Achievement",
    "coverage_per_call",
    "achievement_per_call",
    "compliance",
    "compliance_pooled",
    "score",
)
PAPER_HEADLINE_METRIC = "Achievement"
PAPER_DEFINITIONS: dict[str, str] = {
    "Coverage": "FlexBench eq. (6): base actions attempted (yes or no) / base actions, summed over all calls",
    "Achievement": "FlexBench eq. (7): requirements done right / requirements that applied, summed over all calls "
    "(branches whose condition held and whose base action was attempted, plus always-on rules)",
    "coverage_per_call": "ifgym's coverage: base actions attempted per call, averaged over calls",
    "achievement_per_call": "ifgym's achievement: branches done right per call (rules apart), averaged over calls",
    "compliance": "always-on rules kept, per call, averaged over calls (ifgym's; Achievement counts these rules)",
    "compliance_pooled": "always-on rules kept / judged, summed over all calls",
    "score": "ifgym's episode score, mean(coverage, achievement) x compliance per call, averaged (not the paper's)",
}


@dataclass(frozen=True, slots=True)
class FlexRow:
    """One episode as `summarize_rows` needs it: its dimension set's name and ids, scores, length and end."""

    episode_id: str
    sop: str
    ids: tuple[str, ...]
    scores: FlexScores | None
    turns: int
    done_reason: str
    metrics: str = "ifgym"


def episode_metrics(episode: Episode) -> str:
    """How an episode's corpus is summed up: `"paper"` (env=flexbench_paper) or `"ifgym"` (the default)."""
    metrics = episode.meta.get("flexbench", {}).get("metrics", "ifgym")
    if metrics not in METRICS:
        raise DataFormatError(
            f"episode {episode.episode_id!r}: meta['flexbench']['metrics'] is {metrics!r}; one of {', '.join(METRICS)}"
        )
    return str(metrics)


def episode_row(episode: Episode, loose: bool = False) -> FlexRow:
    """One episode's row for `summarize_rows` (`loose` is ignored: dimension verdicts have no loose variant)."""
    dims = episode_dimensions(episode)
    scores = episode_scores(episode, dims)
    return FlexRow(
        episode.episode_id,
        dims.sop,
        dims.ids,
        scores,
        len(episode.turns),
        episode.done_reason,
        episode_metrics(episode),
    )


def summarize(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """FlexBench's headline metrics over one SOP's episodes (flat dict of floats; NaN = n/a), in one pass.

    `turns` (total) and `turns_per_episode`; `coverage` / `achievement` / `compliance` / `score`:
    means over episodes, the headline (achievement and compliance over the episodes where they are
    defined); `*_pooled`: ratios of tallies pooled over all episodes, reported beside them (see the
    module docstring for when they differ). Episodes played with `metrics="paper"`
    (env=flexbench_paper) get the paper's headline instead: `Coverage` and `Achievement`, equations
    (6) and (7), with the per-call means renamed `coverage_per_call` / `achievement_per_call` (see
    `paper_metrics`). `achievement_defined`: share of episodes
    with an exercised branch; `unknown`,
    `gated_out`, `exclusive_conflicts`: totals; `end/<reason>`: share of episodes per
    done_reason; `pass_rate/<dimension id>`: gated yes / (yes + no), for the dimensions that were
    ever known. `loose` is accepted and ignored: dimension verdicts have no loose variant (the env
    says so with `loose_metrics = False`, and the CLI prints no loose column for it).
    """
    return summarize_rows(rows_of(episodes, episode_row, loose))


def summarize_rows(rows: Sequence[FlexRow], loose: bool = False) -> dict[str, float]:
    """`summarize` from the episodes' rows (`episode_row`); refuses rows of more than one dimension set."""
    if not rows:
        raise DataFormatError("metrics need at least one episode; got an empty list")
    first = rows[0]
    for r in rows[1:]:
        if r.sop != first.sop or r.ids != first.ids:
            raise DataFormatError(
                f"episode {r.episode_id!r} was scored with other dimensions than {first.episode_id!r}; "
                "summarize one SOP's episodes at a time"
            )
    kinds = {r.metrics for r in rows}
    if len(kinds) > 1:
        raise DataFormatError(
            "the episodes were summed up in two ways (metrics=ifgym and metrics=paper); summarize one run's "
            "episodes at a time"
        )
    scores = [r.scores for r in rows if r.scores is not None]
    n = len(rows)
    attempted = sum(s.attempted for s in scores)
    base_total = sum(s.base_total for s in scores)
    yes = sum(s.branch_yes for s in scores)
    no = sum(s.branch_no for s in scores)
    kept = sum(s.kept for s in scores)
    broken = sum(s.broken for s in scores)
    out: dict[str, float] = {
        "episodes": float(n),
        "judged_episodes": float(len(scores)),
        "turns": float(sum(r.turns for r in rows)),
        "turns_per_episode": float(sum(r.turns for r in rows)) / n,
        "coverage": _mean([s.coverage for s in scores]),
        "achievement": _mean([s.achievement for s in scores]),
        "compliance": _mean([s.compliance for s in scores]),
        "score": _mean([s.score for s in scores]),
        "coverage_pooled": attempted / base_total if base_total else math.nan,
        "achievement_pooled": yes / (yes + no) if yes + no else math.nan,
        "compliance_pooled": kept / (kept + broken) if kept + broken else math.nan,
        "achievement_defined": sum(not math.isnan(s.achievement) for s in scores) / len(scores) if scores else math.nan,
        "unknown": float(sum(sum(v == "unknown" for v in s.raw.values()) for s in scores)),
        "gated_out": float(sum(s.gated_out for s in scores)),
        "exclusive_conflicts": float(sum(s.exclusive_conflicts for s in scores)),
    }
    if kinds == {"paper"}:
        out = {**paper_metrics(scores), **_renamed(out)}
    reasons = sorted({r.done_reason or "unfinished" for r in rows})
    for reason in reasons:
        out[f"end/{reason}"] = sum((r.done_reason or "unfinished") == reason for r in rows) / n
    for dim_id, rate in _rates(first.ids, scores).items():
        if not math.isnan(rate):
            out[f"pass_rate/{dim_id}"] = rate
    return out


def paper_metrics(scores: Sequence[FlexScores]) -> dict[str, float]:
    """FlexBench's equations (6) and (7) over a corpus of calls' scores (NaN = n/a).

    `Coverage` (6) = Σ attempted base actions / Σ base actions: a base action is attempted when its
    verdict is yes or no. `Achievement` (7) = Σ requirements done right / Σ requirements that
    applied, where a call's requirements are its branches (the paper's conditional requirements,
    prohibitions under a condition among them) and its always-on rules (ifgym's name for an
    unconditional prohibition or limit: a requirement whose condition holds on every agent
    message; kept = done right, broken = not). A branch whose condition never held, or whose base
    action was never attempted (gated out), is unknown and in neither sum; known branches of one
    mutually exclusive set count once, with the worst label (`gate`). Achievement is n/a when no
    requirement applied in any call. Both are sums over every call of the corpus, so each base
    action and each requirement weighs the same, whichever call it came from.
    """
    attempted = sum(s.attempted for s in scores)
    bases = sum(s.base_total for s in scores)
    done = sum(s.branch_yes + s.kept for s in scores)
    applied = sum(s.branch_yes + s.branch_no + s.kept + s.broken for s in scores)
    return {
        "Coverage": attempted / bases if bases else math.nan,
        "Achievement": done / applied if applied else math.nan,
    }


_PAPER_RENAMES = {"coverage": "coverage_per_call", "achievement": "achievement_per_call"}
_PAPER_DROPS = ("coverage_pooled", "achievement_pooled")  # ifgym's pooled forms: the paper's are Coverage/Achievement


def _renamed(summary: Mapping[str, float]) -> dict[str, float]:
    return {_PAPER_RENAMES.get(k, k): v for k, v in summary.items() if k not in _PAPER_DROPS}


def dimension_table(episodes: Sequence[Episode]) -> list[dict[str, Any]]:
    """One row per dimension: kind, base, criterion, gated yes/no/unknown counts, gated-out count, rate."""
    dims, scores = _corpus(episodes)
    rates = dimension_rates(dims, scores)
    rows = []
    for d in dims.dimensions:
        rows.append(
            {
                "id": d.id,
                "kind": d.kind,
                "base": dims.base_of(d.id),
                "criterion": d.criterion,
                "precondition": d.precondition,
                "yes": sum(s.labels[d.id] == "yes" for s in scores),
                "no": sum(s.labels[d.id] == "no" for s in scores),
                "unknown": sum(s.labels[d.id] == "unknown" for s in scores),
                "gated_out": sum(s.raw[d.id] != "unknown" and s.labels[d.id] == "unknown" for s in scores),
                "rate": rates[d.id],
            }
        )
    return rows


def short_name(text: str, limit: int = 40) -> str:
    """A label-sized form of an SOP clause: whole words up to `limit` characters, "…" when cut."""
    text = " ".join(text.split()).rstrip(".")
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


def heatmap_matrix(corpora: Mapping[str, Sequence[Episode]]) -> dict[str, Any]:
    """Per-dimension rates of several corpora (e.g. one per model): rows = corpora, columns = dimensions.

    Returns {"rows": [...], "columns": [dimension ids], "labels": [id + short SOP clause, per column],
    "values": [[rate or NaN, ...], ...]}; every corpus must use the same dimension set.
    """
    if not corpora:
        raise DataFormatError("heatmap_matrix needs at least one named corpus")
    rows, values, columns, labels = [], [], None, None
    for name, episodes in corpora.items():
        dims, scores = _corpus(episodes)
        if columns is None:
            columns = list(dims.ids)
            labels = [f"{d.id} {short_name(d.unit or d.criterion)}" for d in dims.dimensions]
        elif list(dims.ids) != columns:
            raise DataFormatError(f"corpus {name!r} uses other dimensions than the first corpus")
        rates = dimension_rates(dims, scores)
        rows.append(name)
        values.append([rates[c] for c in columns])
    return {"rows": rows, "columns": columns, "labels": labels, "values": values}


def plot_heatmap(
    matrix: Mapping[str, Any],
    path: str | Path,
    title: str = "FlexBench: pass rate per dimension",
    subtitle: str = "",
) -> Path:
    """Draw `heatmap_matrix` output as a PNG and return the path.

    One row per dimension, labelled with its id and a short form of its SOP clause; one column per
    corpus; n/a cells grey and labelled.
    """
    fig = heatmap_figure(matrix, title, subtitle)
    path = Path(path)
    fig.savefig(path, dpi=120)  # a bare Figure renders with Agg; nothing to close (pyplot never held it)
    return path


def heatmap_figure(matrix: Mapping[str, Any], title: str, subtitle: str = "") -> Any:
    """The matplotlib Figure `plot_heatmap` saves (dimensions down, corpora across)."""
    import numpy as np

    from ifgym.plotting import new_figure

    values = np.array(matrix["values"], dtype=float).T  # dimensions as rows: their labels read horizontally
    masked = np.ma.masked_invalid(values)
    dims = matrix.get("labels") or matrix["columns"]
    corpora = matrix["rows"]
    size = (max(8.0, 1.2 * len(corpora) + 6), max(3.0, 0.32 * len(dims) + 2.2))
    fig = new_figure("FlexBench's dimension heatmap", figsize=size)
    from matplotlib import colormaps

    cmap = colormaps["RdYlGn"].with_extremes(bad="#d0d0d0")  # n/a cells grey
    ax = fig.subplots()
    image = ax.imshow(masked, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_yticks(range(len(dims)), dims, fontsize=8)
    ax.set_xticks(range(len(corpora)), corpora, rotation=30, ha="right")
    for r in range(len(dims)):
        for c in range(len(corpora)):
            ax.text(c, r, format_rate(float(values[r, c])).replace("0.", "."), ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, label="yes / (yes + no)")
    ax.set_title("\n".join(textwrap.wrap(title, 70) + textwrap.wrap(subtitle, 70)), fontsize=9)
    fig.tight_layout()
    fig.set_layout_engine(None)  # tight_layout leaves a placeholder engine, and with one savefig draws to lay out
    return fig


def consistency(corpus_a: Sequence[Episode], corpus_b: Sequence[Episode]) -> dict[str, float]:
    """How much two corpora of the same SOP (e.g. generated with different seeds) agree.

    `mad`: mean absolute difference of per-dimension rates over the dimensions defined in both
    (NaN when none is); `dimensions_compared`; `coverage_diff` / `achievement_diff`: absolute
    differences of the corpus means (NaN where either is n/a).
    """
    dims_a, scores_a = _corpus(corpus_a)
    dims_b, scores_b = _corpus(corpus_b)
    if dims_a.ids != dims_b.ids or dims_a.sop != dims_b.sop:
        raise DataFormatError("consistency compares two corpora of the same SOP and dimension set")
    rates_a, rates_b = dimension_rates(dims_a, scores_a), dimension_rates(dims_b, scores_b)
    diffs = [abs(rates_a[k] - rates_b[k]) for k in dims_a.ids if not (math.isnan(rates_a[k]) or math.isnan(rates_b[k]))]
    return {
        "mad": sum(diffs) / len(diffs) if diffs else math.nan,
        "dimensions_compared": float(len(diffs)),
        "coverage_diff": abs(_mean([s.coverage for s in scores_a]) - _mean([s.coverage for s in scores_b])),
        "achievement_diff": abs(_mean([s.achievement for s in scores_a]) - _mean([s.achievement for s in scores_b])),
    }


_TABLE_COLUMNS = ("id", "kind", "base", "yes", "no", "unknown", "gated_out", "rate", "criterion", "precondition")


def write_report(
    episodes: Sequence[Episode], folder: str | Path, *, name: str = "run", plots: bool = True, subtitle: str = ""
) -> dict[str, Path]:
    """Write one SOP's per-dimension table (CSV) and, with `plots`, its heatmap (PNG) into `folder`.

    The CLI calls this (through the task's `report_sections`) after `ifgym eval`; call it yourself
    on episodes read back with `ifgym.runner.rollout.read_episodes`. To compare runs, pass several
    corpora to `heatmap_matrix` / `plot_heatmap`, and two seeds' corpora to `consistency`.
    Returns {"dimension_table": path, "heatmap": path} (the heatmap only with `plots`); `subtitle`
    goes under the heatmap's title (the CLI passes the run: env, policy, judge, episodes, date).
    """
    import csv

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / "flexbench_dimensions.csv"
    with table.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=_TABLE_COLUMNS)
        writer.writeheader()
        for row in dimension_table(episodes):
            writer.writerow({**row, "rate": format_rate(row["rate"]), "base": row["base"] or ""})
    out = {"dimension_table": table}
    if plots:
        title = f"FlexBench {name}: pass rate per dimension ({len(episodes)} calls)"
        out["heatmap"] = plot_heatmap(
            heatmap_matrix({name: episodes}), folder / "flexbench_heatmap.png", title, subtitle
        )
    return out


def report_sections(
    episodes: Sequence[Episode], folder: str | Path, *, plots: bool = True, subtitle: str = ""
) -> dict[str, Path]:
    """FlexBench's files beside a run's summary (the task's `report_sections`): `write_report` for the run's SOP.

    When the run built its dimension set (env.dimensions=build: the episodes record
    `meta["flexbench"]["dimensions_built"]`), the set is saved beside them too, as
    `<sop>.dimensions.json` ("dimensions"), for review.
    """
    meta = episodes[0].meta.get("flexbench", {}) if episodes else {}
    name = meta.get("sop", "run")
    out = write_report(episodes, folder, name=name, plots=plots, subtitle=subtitle)
    if meta.get("dimensions_built"):
        out["dimensions"] = episode_dimensions(episodes[0]).save(Path(folder) / f"{name}{DIMENSIONS_SUFFIX}")
    return out
