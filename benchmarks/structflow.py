"""StructFlow judge cost per turn: `python benchmarks/structflow.py [--episodes N] [--dataset PATH]`.

Side by side, on the same offline-generated dialogues and replies: rule-checkable items decided by
their rules (ifgym's default) vs every item sent to the judge (the benchmark's way); and, with
--dataset, a replay of StructFlowBench's dialogues (none of its items is rule-checkable).

Runs offline: a CannedClient stands in for the judge model, answering "Yes" to every question it
is asked, so the numbers are about how much is asked, not about a model. Its token counts are
whitespace-separated words of the prompt and the answer (a real tokenizer gives more tokens).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import gymnasium as gym

import ifgym  # noqa: F401
from ifgym.llm import CannedClient
from ifgym.simulators.structflow import DATASETS

REPLY = (
    "Here is an answer that covers the main points.\n\n"
    "- First, the background and why it matters.\n"
    "- Second, the details you asked about.\n\n"
    "That is the short version; ask if you want more."
)
DEFAULT_DATASET = DATASETS["structflowbench"]


def all_yes(messages: list[dict[str, str]]) -> str:
    """The canned judge: one Yes per <item N> in the prompt."""
    n = len(re.findall(r"<item \d+>", messages[-1]["content"]))
    return json.dumps({"results": [{"item": i + 1, "judgement": "Yes", "reason": "canned"} for i in range(n)]})


def measure(label: str, episodes: int, **env_kwargs) -> dict[str, float | str]:
    """Play `episodes` dialogues with a fixed reply; judge calls, items asked and tokens per turn."""
    client = CannedClient(all_yes, role="judge", model="canned-judge")
    env = gym.make("ifgym/StructFlow-v0", judge="llm", judge_llm=client, **env_kwargs).unwrapped
    turns = items = 0
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(REPLY)
            items += len(info["checklist"])  # the scored turn's checklist
            turns += 1
            done = terminated or truncated
    stats = env.scorer.judge.stats
    return {
        "mode": label,
        "turns": turns,
        "items/turn": items / turns,
        "calls/turn": stats["calls"] / turns,
        "judged/turn": sum(len(re.findall(r"<item \d+>", r[-1]["content"])) for r in client.requests) / turns,
        "prompt tok/turn": stats["prompt_tokens"] / turns,
        "completion tok/turn": stats["completion_tokens"] / turns,
    }


def main(argv: list[str] | None = None) -> list[dict[str, float | str]]:
    """Print the side-by-side table and return its rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="dialogues per mode")
    parser.add_argument(
        "--dataset", type=Path, default=DEFAULT_DATASET, help="StructFlowBench.json (skipped if absent)"
    )
    args = parser.parse_args(argv)
    rows = [
        measure("generated, rules decide rule items", args.episodes),
        measure("generated, judge asked every item", args.episodes, judge_rule_items=True),
    ]
    if args.dataset.exists():
        rows.append(measure("StructFlowBench replay (all judged)", args.episodes, dataset=str(args.dataset)))
    else:
        print(f"(no dataset at {args.dataset}: replay row skipped)")
    print("StructFlow judge cost per turn. Offline: a CannedClient stands in for the judge (answers Yes to all);")
    print("tokens are whitespace words of prompt and answer as it counts them, not a real tokenizer's.\n")
    keys = list(rows[0])
    width = max(len(str(r["mode"])) for r in rows)
    print(f"{'mode':<{width}}  " + "  ".join(f"{k:>19}" for k in keys[1:]))
    for r in rows:
        cells = [f"{r[k]:>19.2f}" if isinstance(r[k], float) else f"{r[k]:>19}" for k in keys[1:]]
        print(f"{r['mode']:<{width}}  " + "  ".join(cells))
    return rows


if __name__ == "__main__":
    main()
