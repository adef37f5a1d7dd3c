"""LLM judge cost per turn, by judge mode: `python benchmarks/judges.py [--episodes N] [--words]`.

Side by side, on the same seeded episodes and the same fixed reply: EvolIF's judged groups in
blind mode (one classification per reply, every axis in one call) and in rating mode (EvolIF's
1-10 scores); StructFlow's checklist judge and FlexBench's dimension judge, each plain and with
evidence quotes. And the calls of the short audit `ifgym eval` runs once per judge and mode.

Runs offline: a CannedClient stands in for the judge model with a well-formed answer to every
prompt (no re-asks), so the numbers are about how much each mode asks. Tokens are counted with
the embedded Qwen2.5-Coder-1.5B tokenizer over its chat template (prompt) and over the canned
answer (completion); a model's own answer can be longer, e.g. with evidence quotes. `--words`
counts whitespace words instead (no model file needed).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable

import gymnasium as gym

import ifgym  # noqa: F401
from ifgym.llm import CannedClient
from ifgym.rewards.audit import SUITE_MODES, audit

REPLY = (
    "Here is an answer that covers the main points.\n\n"
    "- First, the background and why it matters.\n"
    "- Second, the details you asked about.\n\n"
    "That is the short version; ask if you want more."
)


def canned(messages: list[dict[str, str]]) -> str:
    """A well-formed judge answer to any judge prompt (blind labels, scores, Yes/No, dimension labels)."""
    system, content = messages[0]["content"], messages[-1]["content"]
    n = len(re.findall(r"<item \d+>", content))
    if system.startswith("You classify"):
        keys = re.findall(r'"(\w+)"', content.rsplit("Return only", 1)[1])
        first = {"emotion": "neutral", "reader_age": "adult", "register": "formal", "voice": "active"}
        return json.dumps({k: first[k] for k in keys})
    if "<transcript>" in content:
        return json.dumps({"items": [{"item": i, "evidence": "", "label": "unknown"} for i in range(1, n + 1)]})
    if system.startswith("You check whether"):
        return json.dumps({"results": [{"item": i, "evidence": "", "judgement": "No"} for i in range(1, n + 1)]})
    return json.dumps({"scores": [{"item": i, "score": 5, "reason": "canned"} for i in range(1, n + 1)]})


def token_counter(words: bool) -> tuple[Callable[[list[dict[str, str]]], int], Callable[[str], int], str]:
    """(prompt tokens of messages, tokens of a text, unit name)."""
    if words:
        return (lambda ms: sum(len(m["content"].split()) for m in ms)), (lambda t: len(t.split())), "words"
    from ifgym.llm.embedded import EmbeddedBackend

    backend = EmbeddedBackend("qwen2.5-coder-1.5b")
    llama = backend.load()
    return backend.count_tokens, (lambda t: len(llama.tokenize(t.encode(), add_bos=False))), "Qwen tokens"


def play(env_id: str, episodes: int, max_turns: int, **kwargs) -> tuple[CannedClient, int]:
    """Play `episodes` seeded episodes with a fixed reply and a canned judge; return the judge client and turns."""
    client = CannedClient(canned, role="judge", model="canned-judge")
    env = gym.make(env_id, judge="llm", judge_llm=client, max_turns=max_turns, **kwargs).unwrapped
    turns = 0
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(REPLY)
            turns += 1
            done = terminated or truncated
    return client, turns


def row(label: str, client: CannedClient, turns: int, count, tokens) -> dict[str, float | str]:
    prompts = [count(r) for r in client.requests]
    answers = [tokens(canned(r)) for r in client.requests]
    return {
        "judge / mode": label,
        "turns": turns,
        "calls/turn": len(client.requests) / turns,
        "prompt tok/turn": sum(prompts) / turns,
        "completion tok/turn": sum(answers) / turns,
        "prompt tok/call": sum(prompts) / max(len(prompts), 1),
    }


def main(argv: list[str] | None = None) -> list[dict[str, float | str]]:
    """Print the side-by-side table and return its rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="episodes per judge and mode")
    parser.add_argument("--words", action="store_true", help="count whitespace words, not Qwen tokens")
    args = parser.parse_args(argv)
    count, tokens, unit = token_counter(args.words)
    started = time.perf_counter()
    rows = []
    for mode in ("blind", "rating"):
        # patience off: every episode plays its 10 turns, so judged groups come and go
        client, turns = play("ifgym/EvolIF-v1", args.episodes, 10, judge_mode=mode, patience=None)
        rows.append(row(f"EvolIF judged groups, {mode}", client, turns, count, tokens))
    for mode in ("plain", "evidence"):
        client, turns = play("ifgym/StructFlow-v0", args.episodes, None, judge_mode=mode, judge_rule_items=True)
        rows.append(row(f"StructFlow checklist, {mode}", client, turns, count, tokens))
    for mode in ("plain", "evidence"):
        client, turns = play("ifgym/FlexBench-v0", max(args.episodes // 4, 1), 8, judge_mode=mode)
        rows.append(row(f"FlexBench dimensions, {mode}", client, turns, count, tokens))
    audits = []
    for suite, modes in SUITE_MODES.items():
        for mode in modes:
            report = audit(CannedClient(canned, role="judge"), suites=[suite], modes={suite: mode}, short=True)
            audits.append((suite, mode, report["calls"]))

    print(f"Judge cost per turn (canned judge, same seeds and reply; tokens: {unit}).\n")
    keys = list(rows[0])
    width = max(len(str(r[keys[0]])) for r in rows)
    print(f"{keys[0]:<{width}}  " + "  ".join(f"{k:>19}" for k in keys[1:]))
    for r in rows:
        cells = [f"{r[k]:>19.2f}" if isinstance(r[k], float) else f"{r[k]:>19}" for k in keys[1:]]
        print(f"{r[keys[0]]:<{width}}  " + "  ".join(cells))
    print("\nShort audit before `ifgym eval` (once per judge, mode and prompt version; cached):")
    for suite, mode, calls in audits:
        print(f"  {suite:<11} {mode:<9} {calls:>4} calls")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    return rows


if __name__ == "__main__":
    main()
