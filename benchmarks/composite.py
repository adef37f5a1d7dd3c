"""The composite user's corners, side by side: `python benchmarks/composite.py`.

A model plays ifgym/Composite-v0 on the same seeds in every corner of its three axes (structure,
constraints, persona): each axis alone where that is defined, each pair, and all three. Persona alone
scores nothing and is not a corner (FlexBench-v0 is that setting, with an SOP). The settings are the
same in every corner: template user, rule checks (judge=rules: the structural items no rule decides
are unknown and left out, so ISR and EDR measure the turn's constraints), patience 3, flows chained to
at least `--turns` turns, a cap of `--turns` turns. What the corners' constraints are: with the
constraints axis on, EvolIF's evolving rules (9 rule-checked groups), stated only as the change;
with it off, StructFlow's own rules of each turn, stated on the turn they apply to.

For each corner: ISR, CSR, EDR_len, EDR_succ and REC over the dialogues with a 95% bootstrap interval
(resampling dialogues, `ifgym.core.stats.intervals`), and the paired difference to the corner with one axis
fewer (`ifgym.core.stats.compare`: 95% paired bootstrap interval, permutation p-value), so a reader sees
what adding an axis does to the same seeds. The model is the embedded Qwen2.5-Coder-1.5B-Instruct
(greedy, in process) unless `--base-url URL --model NAME` names a served one. Episodes are appended
per corner to `--out` (a re-run resumes there).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import gymnasium as gym

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.core import Episode
from ifgym.llm import LLMConfig

# (name, structure, constraints, persona); the corner each one is compared with (one axis fewer)
CORNERS = (
    ("constraints", False, True, False),
    ("structure", True, False, False),
    ("constraints+persona", False, True, True),
    ("structure+persona", True, False, True),
    ("structure+constraints", True, True, False),
    ("all three", True, True, True),
)
BASELINE = {
    "constraints+persona": "constraints",
    "structure+persona": "structure",
    "structure+constraints": "constraints",
    "all three": "structure+constraints",
}
METRICS = ("ISR", "CSR", "EDR_len", "EDR_succ", "REC")


def play(seeds: range, turns: int, out: Path, config: LLMConfig) -> dict[str, list[Episode]]:
    """Every corner on the same seeds; episodes by corner."""
    from ifgym.llm import make_client
    from ifgym.policies import ChatPolicy
    from ifgym.runner.rollout import run

    client = make_client(config, "policy")
    model = config.model if config.base_url else config.embedded_model
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for name, structure, constraints, persona in CORNERS:
        axes = {"structure": structure, "constraints": constraints, "persona": persona}

        def make_env(axes: dict = axes):
            return gym.make("ifgym/Composite-v0", min_turns=turns, max_turns=turns, patience=3, **axes)

        key = f"{model}-{name.replace(' ', '_').replace('+', '_')}-t{turns}-m{config.max_tokens}".replace("/", "_")
        print(f"{model}, {name}: {len(seeds)} dialogues (appending to {out / f'{key}.jsonl'})", flush=True)
        result = run(
            make_env, lambda: ChatPolicy(client), seeds, output=out / f"{key}.jsonl", run_key=key, concurrency=1
        )
        if result.failed:
            print(f"  {len(result.failed)} failed episode(s), left out of the table: {result.failures['by_type']}")
        runs[name] = result.episodes
    return runs


def _fmt(value: float, ci: list[float] | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    interval = "" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"{value:.3f}{interval}"


def report(runs: dict[str, list[Episode]], turns: int, model: str) -> str:
    """The table (Markdown): each corner's metrics with intervals, then each axis's paired effect."""
    from ifgym.core.stats import compare, intervals
    from ifgym.envs.composite import CompositeEnv

    n = len(next(iter(runs.values())))
    lines = [
        f"{model} (greedy), {n} dialogues per corner on the same seeds, patience 3, up to {turns} turns, "
        "rule checks; mean [95% bootstrap interval over dialogues]",
        "",
        "| corner | turns | " + " | ".join(METRICS) + " |",
        "|---|---|" + "---|" * len(METRICS),
    ]
    for name, *_ in CORNERS:
        episodes = runs[name]
        summary = CompositeEnv.summarize(episodes)
        ci = intervals(episodes, CompositeEnv.summarize, list(METRICS))
        played = sum(len(e.turns) for e in episodes)
        lines.append(f"| {name} | {played} | " + " | ".join(_fmt(summary[m], ci[m]) for m in METRICS) + " |")
    lines += [
        "",
        "Adding an axis, paired by seed: corner − the corner without that axis (95% paired bootstrap interval, p)",
        "",
        "| corner − baseline | " + " | ".join(f"Δ{m}" for m in ("ISR", "CSR", "EDR_len")) + " |",
        "|---|" + "---|" * 3,
    ]
    for name, base in BASELINE.items():
        result = compare(runs[base], runs[name], CompositeEnv.summarize, ["ISR", "CSR", "EDR_len"])
        cells = []
        for m in ("ISR", "CSR", "EDR_len"):
            r = result[m]
            if r["ci"] is None or math.isnan(r["diff"]):
                cells.append("n/a")
            else:
                cells.append(f"{r['diff']:+.3f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] p={r['p_value']:.2f}")
        lines.append(f"| {name} − {base} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Play every corner and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--episodes", type=int, default=8, help="dialogues per corner")
    parser.add_argument("--turns", type=int, default=10, help="flows chained to at least this many turns; the cap")
    parser.add_argument("--max-tokens", type=int, default=256, help="longest model reply")
    parser.add_argument("--model", default=None, help="embedded model (default qwen2.5-coder-1.5b) or served model")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server instead of the embedded model")
    parser.add_argument("--n-ctx", type=int, default=16384, help="embedded model context")
    parser.add_argument("--out", type=Path, default=Path("runs/composite"), help="episodes, one file per corner")
    args = parser.parse_args(argv)
    if args.base_url:
        if not args.model:
            parser.error("--base-url needs --model NAME (the served model)")
        config = LLMConfig(base_url=args.base_url, model=args.model, max_tokens=args.max_tokens)
    else:
        config = LLMConfig(
            embedded_model=args.model or "qwen2.5-coder-1.5b",
            max_tokens=args.max_tokens,
            n_ctx=args.n_ctx,
            concurrency=1,
        )
    seeds = range(args.seed, args.seed + args.episodes)
    runs = play(seeds, args.turns, args.out, config)
    print()
    print(report(runs, args.turns, config.model if config.base_url else config.embedded_model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
