"""Turn episodes and their metrics into things people read: a results table, PNG plots, a summary file."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifgym.core import Episode


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def _interval(ci: dict[str, Any], name: str) -> str:
    bounds = ci.get(name)
    return f"[{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else ""


def protocol_lines(protocol: dict[str, Any]) -> list[str]:
    """What the numbers measure: the env's settings on one line, then each way they differ from the paper's."""
    if not protocol:
        return []
    shown = {
        k: (len(v) if k == "groups" else v)
        for k, v in protocol.items()
        if k not in ("env_id", "paper", "deviations") and not isinstance(v, dict) and v is not None
    }
    lines = [f"protocol: {protocol.get('env_id', '?')} (" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"]
    paper, deviations = protocol.get("paper"), protocol.get("deviations", [])
    if deviations:
        lines.append(f"not {paper}'s protocol:" if paper else "differs from the paper's protocol:")
        lines += [f"  - {d}" for d in deviations]
    elif paper:
        lines.append(f"{paper}'s protocol")
    return lines


def results_table(summary: dict[str, Any]) -> str:
    """The protocol, then metrics side by side, strict and loose (strict only when `loose` is empty), as plain text.

    With intervals in the summary (`ci`), each value is followed by its bootstrap interval.
    """
    strict, loose = summary["strict"], summary["loose"]
    ci = summary.get("ci") or {}
    ci_strict, ci_loose = ci.get("strict", {}), ci.get("loose", {})
    rows = [
        (name, _fmt(strict[name]), _interval(ci_strict, name), _fmt(loose.get(name, "")), _interval(ci_loose, name))
        for name in strict
    ]
    width = max(len(r[0]) for r in rows) if rows else 6
    columns = [("strict" if loose else "value", 1)]
    if ci:
        level = summary.get("ci_settings", {}).get("level", 0.95)
        columns.append((f"{level:.0%} CI", 2))
    if loose:
        columns.append(("loose", 3))
        if ci:
            columns.append((columns[1][0], 4))
    widths = [max([len(title)] + [len(r[i]) for r in rows]) for title, i in columns]
    lines = protocol_lines(summary.get("protocol", {}))
    lines += [
        "  ".join([f"{'metric':<{width}}", *(f"{t:>{w}}" for (t, _), w in zip(columns, widths, strict=True))]),
        "  ".join(["-" * width, *("-" * w for w in widths)]),
    ]
    for row in rows:
        cells = [f"{row[i]:>{w}}" for (_, i), w in zip(columns, widths, strict=True)]
        lines.append("  ".join([f"{row[0]:<{width}}", *cells]).rstrip())
    if summary.get("checker_semantics") == "evolif":
        lines.append("checker semantics: evolif (the verdicts of EvolIF's released evaluator, one reading)")
    if summary.get("user_stats"):
        lines.append("user simulator: " + ", ".join(f"{k} {v}" for k, v in summary["user_stats"].items()))
    for role, usage in summary.get("usage", {}).items():
        lines.append(
            f"usage[{role}]: {usage['calls']} calls, {usage['prompt_tokens']} prompt + "
            f"{usage['completion_tokens']} completion tokens"
        )
    return "\n".join(lines)


def user_stats(episodes: Sequence[Episode]) -> dict[str, int | float]:
    """The user simulator's counters (renders, LLM fallbacks, regenerations …) summed over episodes."""
    total: dict[str, int | float] = {}
    for episode in episodes:
        for key, value in episode.meta.get("user_stats", {}).items():
            total[key] = total.get(key, 0) + value
    return total


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """Write the summary as JSON (NaN written as null)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    path.write_text(json.dumps(clean(summary), indent=2) + "\n", encoding="utf-8")


def write_plots(episodes: Sequence[Episode], summary: dict[str, Any], folder: Path) -> dict[str, Path]:
    """Survival curve and the summary's pass rates per group (`pass_rate/<group>`, strict and loose) as PNGs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ifgym.rewards.metrics import survival_curve

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"survival_plot": folder / "survival.png", "group_plot": folder / "group_pass_rates.png"}

    curve = survival_curve(episodes)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.step(range(len(curve)), curve, where="post")
    ax.set(xlabel="turn", ylabel="share of dialogues still going", ylim=(0, 1.05), title="Survival")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths["survival_plot"], dpi=120)
    plt.close(fig)

    prefix = "pass_rate/"
    strict = {k[len(prefix) :]: v for k, v in summary["strict"].items() if k.startswith(prefix)}
    loose = {k[len(prefix) :]: v for k, v in summary["loose"].items() if k.startswith(prefix)}
    groups = list(strict)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(groups))
    ax.bar([i - 0.2 for i in x], [strict[g] for g in groups], width=0.4, label="strict")
    if loose:
        ax.bar([i + 0.2 for i in x], [loose.get(g, float("nan")) for g in groups], width=0.4, label="loose")
    ax.set_xticks(list(x), groups, rotation=30, ha="right")
    ax.set(ylabel="pass rate", ylim=(0, 1.05), title="Pass rate per constraint group")
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths["group_plot"], dpi=120)
    plt.close(fig)
    return paths
