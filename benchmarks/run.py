"""Benchmarks, one command: `make bench` (or `python benchmarks/run.py`).

1. Env overhead per turn (template user + rule scoring, no model): median step time at turns
   10, 100 and 1000 of the same episodes, side by side, with the ratio to turn 10 (flat = ~1.0).
2. Checker throughput: strict and loose checks per second for every rule constraint id.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

import ifgym  # noqa: F401
from ifgym.core.constraints import REGISTRY, Constraint
from ifgym.rewards.checks import check

REPLY = (
    "Here is a plan for the week.\n\n"
    "- Monday: lentil soup with bread, about 2 dollars a serving.\n"
    "- Tuesday: chickpea salad; keep the dressing apart until noon.\n"
    "- Wednesday: rice bowls with roasted vegetables and a soft egg.\n\n"
    "Shopping once keeps the cost down. Dr. Lee's advice: cook beans in bulk, freeze 3.5 cups per bag, "
    "and label everything. That way lunch takes five minutes! Does that fit your schedule?"
)
AT = (10, 100, 1000)


def fresh_reply(i: int) -> str:
    """REPLY with every paragraph made unique, so no checker cache ever hits (model replies are all new)."""
    return "\n\n".join(f"{p} Note {i}." for p in REPLY.split("\n\n"))


WINDOW = 5  # turns on each side of the mark


def env_overhead(episodes: int) -> dict[int, float]:
    """Median microseconds per env.step around each mark, pooled over episodes."""
    samples: dict[int, list[float]] = {t: [] for t in AT}
    for seed in range(episodes):
        env = gym.make("ifgym/EvolIF-v1", patience=None, max_turns=max(AT) + WINDOW + 1).unwrapped
        env.reset(seed=seed)
        for turn in range(1, max(AT) + WINDOW + 1):
            reply = fresh_reply(turn)
            start = time.perf_counter_ns()
            env.step(reply)
            elapsed = (time.perf_counter_ns() - start) / 1000
            for mark in AT:
                if abs(turn - mark) <= WINDOW:
                    samples[mark].append(elapsed)
    return {t: statistics.median(v) for t, v in samples.items()}


def sampled_constraints() -> dict[str, Constraint]:
    """One constraint per rule id, as the EvolIF user samples them (first seen over a long episode)."""
    found: dict[str, Constraint] = {}
    for seed in range(20):
        env = gym.make("ifgym/EvolIF-v1", patience=None, max_turns=400).unwrapped
        env.reset(seed=seed)
        for _ in range(399):
            env.step(REPLY)
        for turn in env.episode.turns:
            for c in turn.spec.constraints:
                found.setdefault(c.id, c)
        if len(found) == sum(not kind.judged for kind in REGISTRY.values()):
            break
    return found


def checker_throughput(seconds: float) -> list[tuple[str, float, float]]:
    """(id, strict checks/s, loose checks/s) for every rule constraint id."""
    replies = [fresh_reply(i) for i in range(5000)]  # more than any checker cache holds
    rows = []
    for cid, c in sorted(sampled_constraints().items()):
        rates = []
        for loose in (False, True):
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                check(c, replies[n % len(replies)], loose=loose)
                n += 1
            rates.append(n / (time.perf_counter() - start))
        rows.append((cid, rates[0], rates[1]))
    return rows


def main() -> None:
    """Run both benchmarks and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10, help="episodes of 1005 turns for the overhead table")
    parser.add_argument("--seconds", type=float, default=0.3, help="time per checker and mode")
    args = parser.parse_args()

    medians = env_overhead(args.episodes)
    print(f"env overhead per turn (template user + rule scoring), {args.episodes} episodes, median of ±{WINDOW} turns")
    print(f"{'turn':>6}  {'median µs':>10}  {'ratio to turn 10':>16}")
    for t in AT:
        print(f"{t:>6}  {medians[t]:>10.1f}  {medians[t] / medians[AT[0]]:>16.2f}")

    print(f"\nchecker throughput on distinct {len(fresh_reply(0).split())}-word replies")
    print(f"{'constraint id':<26}  {'strict /s':>10}  {'loose /s':>10}  {'loose/strict':>12}")
    for cid, strict, loose in checker_throughput(args.seconds):
        print(f"{cid:<26}  {strict:>10.0f}  {loose:>10.0f}  {loose / strict:>12.2f}")


if __name__ == "__main__":
    main()
