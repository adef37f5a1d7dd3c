"""`ifgym compare RUN_A RUN_B`: two runs' episodes paired by seed, each metric's difference with its interval.

Few pairs make the paired bootstrap's intervals too narrow (drawn from normal differences, a 95% interval
covers the true difference about 51% of the time at 2 pairs, 83% at 5, 90% at 10, 92% at 20): below
`FEW_PAIRS` pairs the output says so, and below the count at which the permutation test can reach
p <= 1 - level at all (6 pairs at 95%: its smallest p is 2 / 2**n) the intervals are shown as not meaningful.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

FEW_PAIRS = 20  # below this, the paired bootstrap's intervals cover noticeably less than their level


def _load_run(arg: str) -> tuple[dict[str, Any], list[Any], Path]:
    """A finished run's record (run.json: its resolved config) and episodes, from its folder or episodes file."""
    from ifgym.errors import ConfigError
    from ifgym.runner.records import RECORD_FILE
    from ifgym.runner.rollout import read_episodes

    path = Path(arg).expanduser()
    if not path.exists():
        raise ConfigError(f"{arg}: no such run folder or episodes file")
    folder = path if path.is_dir() else path.parent
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        raise ConfigError(f"{arg}: no summary.json in {folder}; give a finished run's folder or episodes file")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    episodes_path = path if path.is_file() else folder / Path(summary.get("output") or "episodes.jsonl").name
    episodes = read_episodes(episodes_path)
    if not episodes:
        raise ConfigError(f"{arg}: no episodes in {episodes_path}")
    record_path = folder / RECORD_FILE
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    return record, episodes, episodes_path


def _comparable(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Refuse two runs whose episodes do not measure the same thing: env or judge settings differ."""
    from ifgym.errors import ConfigError
    from ifgym.runner.records import OPERATIONAL_LLM_KEYS, RECORD_FILE

    def settings(record: dict[str, Any], name: str) -> dict[str, Any]:
        config = record.get("config")
        if not config:
            raise ConfigError(
                f"run {name} has no {RECORD_FILE} with its config (written by an older ifgym), so nothing says what "
                "it measured; re-run it"
            )

        def strip(node: Any) -> Any:
            if isinstance(node, dict):
                return {k: strip(v) for k, v in node.items() if k not in (*OPERATIONAL_LLM_KEYS, "trust")}
            return node

        return {"env": strip(config["env"]), "judge": strip(config["judge"])}

    sa, sb = settings(a, "A"), settings(b, "B")
    diffs = [d for d in _differences(sa, sb, "")]
    if diffs:
        shown = "; ".join(f"{key}: A={va!r}, B={vb!r}" for key, va, vb in diffs[:5])
        raise ConfigError(f"the runs are not comparable (their env or judge settings differ): {shown}")


def _differences(a: Any, b: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


def min_pairs(level: float) -> int:
    """The fewest pairs at which a paired permutation test can give p <= 1 - level (its smallest p is 2 / 2**n)."""
    return max(2, math.ceil(1 + math.log2(1 / (1 - level))))


def pair_warnings(pairs: int, level: float) -> list[str]:
    """What compare says of intervals over `pairs` paired episodes: nothing, a warning, or that they mean nothing."""
    fewest = min_pairs(level)
    if pairs < fewest:
        return [
            f"warning: only {pairs} paired episodes: the paired bootstrap has a handful of distinct resamples (its "
            f"interval can collapse to a point) and no difference can reach p <= {1 - level:.2g} (the smallest p "
            f"is {2 / 2**pairs:.3g}), so the {level:.0%} intervals are not meaningful; play at least {fewest} "
            f"episodes, and {FEW_PAIRS} or more for intervals to trust (episodes=N)"
        ]
    if pairs < FEW_PAIRS:
        return [
            f"warning: only {pairs} paired episodes: below {FEW_PAIRS} the paired bootstrap's intervals are too "
            f"narrow (they cover the true difference less often than {level:.0%}); read them as rough, or play "
            "more episodes (episodes=N)"
        ]
    return []


def policy_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The policy settings in which two runs' records (run.json) differ, operational LLM keys left out."""
    from ifgym.runner.records import OPERATIONAL_LLM_KEYS

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in OPERATIONAL_LLM_KEYS}
        return node

    pa, pb = ((r.get("config") or {}).get("policy") or {} for r in (a, b))
    return _differences(strip(pa), strip(pb), "policy.")


def compare_runs(args: list[str]) -> int:
    """`ifgym compare RUN_A RUN_B [KEY=VALUE ...]`: paired differences of two runs, by seed."""
    from ifgym.core.stats import CISettings, compare, metric_names
    from ifgym.core.tasks import task_of
    from ifgym.errors import ConfigError

    positional = [a for a in args if "=" not in a]
    if len(positional) != 2:
        print(
            "usage: ifgym compare RUN_A RUN_B [resamples=1000 seed=0 level=0.95 out=FILE.json plot=FILE.png]",
            file=sys.stderr,
        )
        return 2
    options = dict(a.split("=", 1) for a in args if "=" in a)
    unknown = sorted(set(options) - {"resamples", "seed", "level", "out", "plot"})
    if unknown:
        raise ConfigError(
            f"compare: unknown option(s) {', '.join(unknown)}; options: resamples, seed, level, out, plot"
        )
    try:
        settings = CISettings(
            int(options.get("resamples", 1000)), float(options.get("level", 0.95)), int(options.get("seed", 0))
        )
    except ValueError as exc:
        raise ConfigError(f"compare: resamples and seed take integers, level a number ({exc})") from None
    (sa, ea, pa), (sb, eb, pb) = _load_run(positional[0]), _load_run(positional[1])
    _comparable(sa, sb)
    env_ids = {e.env_id for e in ea} | {e.env_id for e in eb}
    if len(env_ids) != 1:
        raise ConfigError(f"the runs hold episodes of different envs ({', '.join(sorted(env_ids))}): not comparable")
    env_id = env_ids.pop()
    task = task_of(ea[0])  # what the runs' task reports
    modes = ("strict", "loose") if task.loose_metrics else ("strict",)
    from ifgym.runner.report import policy_label

    # each run named by its policy's model and wrapper (its summary's `run`, written from run.json's models)
    read = [json.loads((p.parent / "summary.json").read_text(encoding="utf-8")) for p in (pa, pb)]
    names = [policy_label(s.get("run") or {}) for s in read]
    differ = policy_differences(sa, sb)
    warnings = pair_warnings(len(ea), settings.level)
    meaningful = len(ea) >= min_pairs(settings.level)
    result: dict[str, Any] = {
        "a": str(pa),
        "b": str(pb),
        "names": {"a": names[0], "b": names[1]},
        "differences": {key: {"a": va, "b": vb} for key, va, vb in differ},
        "pairs": len(ea),
        "settings": settings.to_json(),
        "intervals_meaningful": meaningful,
        "warnings": warnings,
    }
    shown = "; ".join(f"{key}: A={va!r}, B={vb!r}" for key, va, vb in differ[:8])
    lines = [
        f"A: {names[0]}  ({pa})\nB: {names[1]}  ({pb})\n"
        + (f"policy settings that differ: {shown}" if differ else "the same policy settings (run.json)")
        + f"\n{len(ea)} episodes paired by seed; B - A with a paired bootstrap interval",
        *warnings,
    ]
    for mode in modes:
        metrics = metric_names(task.summarize(ea, loose=mode == "loose"), task.headline)
        table = compare(ea, eb, task.summarize, metrics, loose=mode == "loose", settings=settings)
        result[mode] = table
        lines.append(_compare_table(mode, table, settings.level, meaningful=meaningful))
    print("\n\n".join(lines))
    if options.get("out"):
        out = Path(options["out"]).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"\nwritten to {out}")
    plot = options.get("plot") or (str(Path(options["out"]).with_suffix(".png")) if options.get("out") else None)
    if plot:  # the two runs side by side, each metric with each run's own interval
        from ifgym.runner.report import SHOWN_METRICS, shown_first, write_comparison_plot

        if names[0] == names[1]:  # the same policy: the folders tell them apart
            names = [f"{n} ({p.parent.name})" for n, p in zip(names, (pa, pb), strict=True)]
        summaries = {f"{label}: {name}": s for label, name, s in zip("AB", names, read, strict=True)}
        headline = [m for m in task.headline if m in result["strict"]]
        metrics = shown_first(headline, task.headline_metric)[:SHOWN_METRICS]
        title = f"{env_id}: A and B, {len(ea)} episodes"
        path = write_comparison_plot(summaries, metrics, Path(plot).expanduser(), title=title)
        print(f"plot: {path} (the paired differences B - A are in the table)")
    return 0


def _compare_table(mode: str, table: dict[str, dict[str, Any]], level: float, *, meaningful: bool = True) -> str:
    def num(value: Any) -> str:
        return "n/a" if value is None or value != value else f"{value:.3f}"

    def interval(bounds: Any) -> str:
        if not bounds:
            return ""
        shown = f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"
        return shown if meaningful else f"not meaningful {shown}"

    head = (mode, "A", "B", "B - A", f"{level:.0%} CI", "p")
    rows = [
        (
            name,
            num(r["a"]),
            num(r["b"]),
            num(r["diff"]),
            interval(r["ci"]),
            "" if r["p_value"] is None else f"{r['p_value']:.3f}",
        )
        for name, r in table.items()
    ]
    widths = [max(len(head[k]), *(len(r[k]) for r in rows)) for k in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if k == 0 else f"{{:>{w}}}" for k, w in enumerate(widths))
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)])
