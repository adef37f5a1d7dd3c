"""Does GRPO with ifgym's reward teach a small model something? `python benchmarks/train.py [RUN_FOLDER] [OVERRIDES…]`.

Runs `ifgym train trainer=cpu_start_with` (SmolLM2-135M-Instruct on the CPU, 25 minutes of
training plus two held-out evaluations) into `/work/data/train-bench` (or `--out`), then prints
what the README reports: the settings, the time, and on held-out seeds the mean turn reward and
the env's headline metrics before and after training, each with its 95% bootstrap interval over
dialogues, the paired difference after − before (by seed) with its interval and permutation
p-value, the training reward per step, the per-group pass rates, and sample replies before and
after (so a gain made by emptying the replies would show). With a RUN_FOLDER of an earlier run it
only prints that run's report. Run it in the background with `nice`: it keeps the cores busy.

`--compare` trains twice from the same start model with the same wall-clock budget:
`trainer=cpu_start_with` (single-turn prompts) into OUT/turn and `trainer=cpu_episode` (whole
episodes) into OUT/episode, both evaluated on the same held-out seeds of the multi-turn env with the
same number of turns (`--eval-turns`, `--eval-episodes`), then prints both reports and the paired
difference episode − turn (by seed) of the trained models, with its bootstrap interval and
permutation p-value. `--compare OUT` with finished runs only prints the comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def report(folder: Path) -> str:
    """The report of a finished `ifgym train` run folder."""
    summary = json.loads((folder / "train_summary.json").read_text(encoding="utf-8"))
    config = (folder / ".hydra" / "config.yaml").read_text(encoding="utf-8") if (folder / ".hydra").is_dir() else ""
    steps = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    lines = [f"run: {folder}", f"model {summary['model']} on {summary['device']}, {summary['prompts']} prompt rows"]
    lines.append(
        f"training: {summary['steps']} steps in {summary['train_seconds']:.0f} s "
        f"({summary['train_seconds'] / max(summary['steps'], 1):.1f} s/step); whole run {summary['seconds']:.0f} s"
        + (" (stopped by the time budget)" if summary.get("stopped_by_budget") else "")
    )
    held = summary.get("held_out", {})
    if held:
        lines.append(f"held-out seeds {held['seeds'][0]}..{held['seeds'][1]}, max_turns {held['max_turns']}:")
        lines.append(f"  {'metric':<18} {'before':>22} {'after':>22} {'after - before':>30}")
        for metric, after in held["after"].items():
            before = held.get("before", {}).get(metric)
            diff = held.get("after_minus_before", {}).get(metric)

            def cell(entry: dict | None) -> str:
                if not entry or entry["value"] is None:
                    return "n/a"
                ci = entry["ci"]
                return f"{entry['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

            change = ""
            if diff and diff["ci"]:
                change = f"{diff['diff']:+.3f} [{diff['ci'][0]:+.2f}, {diff['ci'][1]:+.2f}] p={diff['p_value']:.3f}"
            lines.append(f"  {metric:<18} {cell(before):>22} {cell(after):>22} {change:>30}")
    if summary.get("rollout") == "episode":
        turns = [s["episode/turns"] for s in steps if "episode/turns" in s]
        ends = sorted({k.removeprefix("episode/ended/") for s in steps for k in s if k.startswith("episode/ended/")})
        lines.append(
            f"training episodes: {sum(turns) / max(len(turns), 1):.2f} turns on average; ended by "
            + ", ".join(f"{e} {sum(s.get('episode/ended/' + e, 0) for s in steps) / len(steps):.2f}" for e in ends)
        )
    rewards = [s.get("reward") for s in steps]
    chunks = [rewards[i : i + 10] for i in range(0, len(rewards), 10)]
    lines.append(
        "training reward, mean per 10 steps: "
        + ", ".join(f"{sum(c) / len(c):.2f}" for c in chunks if c and None not in c)
    )
    lengths = [s.get("completions/mean_length") for s in steps]
    if lengths and None not in lengths:
        lines.append(f"completion length (tokens): first step {lengths[0]:.1f}, last step {lengths[-1]:.1f}")
    groups = sorted({k for s in steps for k in s if k.startswith("pass_rate/")})
    for group in groups:
        values = [s[group] for s in steps if group in s]
        half = max(len(values) // 2, 1)
        lines.append(
            f"{group} in training: first half {sum(values[:half]) / half:.2f}, "
            f"second half {sum(values[half:]) / max(len(values) - half, 1):.2f}"
        )
    for name in ("eval_before", "eval_after"):
        path = folder / name / "episodes.jsonl"
        if path.is_file():
            episodes = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:3]]
            lines.append(f"sample replies ({name}, first turn of the first held-out dialogues):")
            for e in episodes:
                t = e["turns"][0]
                lines.append(f"  [{t['reward']:.2f}] {t['user'][-70:]!r} -> {t['reply'][:90]!r}")
    if config:
        lines.append("settings (.hydra/config.yaml, trainer part):")
        lines.extend("  " + line for line in config.split("trainer:", 1)[-1].splitlines() if line.strip())
    return "\n".join(lines)


def compare_report(turn: Path, episode: Path, seed: int = 0) -> str:
    """Paired held-out difference (episode-trained − turn-trained, by seed) of two finished runs' trained models."""

    import ifgym  # noqa: F401  (registers the env ids)
    from ifgym.core.stats import CISettings, compare
    from ifgym.core.tasks import task_of
    from ifgym.integrations.trl import turn_summary
    from ifgym.runner.rollout import read_episodes

    runs = {
        name: read_episodes(folder / "eval_after" / "episodes.jsonl")
        for name, folder in (("turn", turn), ("episode", episode))
    }
    env_id = runs["turn"][0].env_id
    summarize = turn_summary(task_of(runs["turn"][0]).summarize)
    metrics = ["mean_turn_reward", *task_of(runs["turn"][0]).headline]
    rows = compare(runs["turn"], runs["episode"], summarize, metrics, settings=CISettings(1000, 0.95, seed))
    lines = [f"held-out ({len(runs['turn'])} dialogues of {env_id}, paired by seed): turn-trained vs episode-trained"]
    lines.append(f"  {'metric':<18} {'turn':>8} {'episode':>8} {'episode - turn [95% CI]':>30} {'p':>6}")
    for metric, row in rows.items():
        if row["ci"] is None:
            lines.append(f"  {metric:<18} {row['a']:>8.3f} {row['b']:>8.3f} {'n/a':>30}")
            continue
        change = f"{row['diff']:+.3f} [{row['ci'][0]:+.3f}, {row['ci'][1]:+.3f}]"
        lines.append(f"  {metric:<18} {row['a']:>8.3f} {row['b']:>8.3f} {change:>30} {row['p_value']:>6.3f}")
    return "\n".join(lines)


def _train(preset: str, out: Path, overrides: list[str]) -> int:
    command = [sys.executable, "-m", "ifgym.cli", "train", f"trainer={preset}", f"hydra.run.dir={out}"]
    command += ["progress=false", *overrides]
    start = time.monotonic()
    done = subprocess.run(command, check=False)
    print(f"\n(command: {' '.join(command[2:])}; {time.monotonic() - start:.0f} s)\n")
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", help="an earlier run folder to report (no training)")
    parser.add_argument("--out", default="/work/data/train-bench", help="run folder of a new run")
    parser.add_argument(
        "--compare", action="store_true", help="single-turn vs episode training (OUT/turn, OUT/episode)"
    )
    parser.add_argument("--eval-turns", type=int, default=3, help="--compare: turns per held-out dialogue")
    parser.add_argument("--eval-episodes", type=int, default=48, help="--compare: held-out dialogues")
    parser.add_argument("overrides", nargs="*", help="extra `ifgym train` overrides (both runs with --compare)")
    args = parser.parse_args()
    given = [args.run] if args.run and "=" in args.run else []  # an override, not a run folder
    if args.compare:
        out = Path(args.run) if args.run and not given else Path(args.out)
        overrides = [f"trainer.eval.max_turns={args.eval_turns}", f"trainer.eval.episodes={args.eval_episodes}"]
        overrides += given + args.overrides
        for name, preset in (("turn", "cpu_start_with"), ("episode", "cpu_episode")):
            if not (out / name / "train_summary.json").is_file() and _train(preset, out / name, overrides):
                return 1
        for name in ("turn", "episode"):
            print(report(out / name) + "\n")
        print(compare_report(out / "turn", out / "episode"))
        return 0
    if args.run and not given:
        print(report(Path(args.run)))
        return 0
    overrides = given + args.overrides
    if _train("cpu_start_with", Path(args.out), overrides):
        return 1
    print(report(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
