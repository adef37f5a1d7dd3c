"""`ifgym compare RUN_A RUN_B`: two runs' episodes paired by seed, each metric's difference with its interval."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


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
    result: dict[str, Any] = {"a": str(pa), "b": str(pb), "pairs": len(ea), "settings": settings.to_json()}
    lines = [f"A: {pa}\nB: {pb}\n{len(ea)} episodes paired by seed; B - A with a paired bootstrap interval"]
    for mode in modes:
        metrics = metric_names(task.summarize(ea, loose=mode == "loose"), task.headline)
        table = compare(ea, eb, task.summarize, metrics, loose=mode == "loose", settings=settings)
        result[mode] = table
        lines.append(_compare_table(mode, table, settings.level))
    print("\n\n".join(lines))
    if options.get("out"):
        out = Path(options["out"]).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"\nwritten to {out}")
    plot = options.get("plot") or (str(Path(options["out"]).with_suffix(".png")) if options.get("out") else None)
    if plot:  # the two runs side by side, each metric with each run's own interval
        from ifgym.runner.report import SHOWN_METRICS, policy_label, shown_first, write_comparison_plot

        read = [json.loads((p.parent / "summary.json").read_text(encoding="utf-8")) for p in (pa, pb)]
        names = [policy_label(s.get("run") or {}) for s in read]
        if names[0] == names[1]:  # the same policy: the folders tell them apart
            names = [f"{n} ({p.parent.name})" for n, p in zip(names, (pa, pb), strict=True)]
        summaries = {f"{label}: {name}": s for label, name, s in zip("AB", names, read, strict=True)}
        headline = [m for m in task.headline if m in result["strict"]]
        metrics = shown_first(headline, task.headline_metric)[:SHOWN_METRICS]
        title = f"{env_id}: A and B, {len(ea)} episodes"
        path = write_comparison_plot(summaries, metrics, Path(plot).expanduser(), title=title)
        print(f"plot: {path} (the paired differences B - A are in the table)")
    return 0


def _compare_table(mode: str, table: dict[str, dict[str, Any]], level: float) -> str:
    def num(value: Any) -> str:
        return "n/a" if value is None or value != value else f"{value:.3f}"

    head = (mode, "A", "B", "B - A", f"{level:.0%} CI", "p")
    rows = [
        (
            name,
            num(r["a"]),
            num(r["b"]),
            num(r["diff"]),
            f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r["ci"] else "",
            "" if r["p_value"] is None else f"{r['p_value']:.3f}",
        )
        for name, r in table.items()
    ]
    widths = [max(len(head[k]), *(len(r[k]) for r in rows)) for k in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if k == 0 else f"{{:>{w}}}" for k, w in enumerate(widths))
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)])
