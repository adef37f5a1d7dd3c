"""The policy wrappers as their papers run them, side by side: `python benchmarks/wrappers_paper.py`.

Calls and context tokens per turn, by dialogue length (10, 15, 20, 25 turns: NTM's buckets), for
full history, truncation (k = 4, Context-Agent's paper), Context-Agent (`policy=context_agent`, the paper
preset `policy=context_agent_paper` and its two Table 4 ablations: without the tree, without the retriever),
GraphIF as its paper runs it (`policy=graphif_paper`: the agent loop, the per-turn summary call,
every reply rewritten with a final-response section) and its two Table 3 ablations (w/o agent:
one extraction call; w/o graph prompt), and Self-Refine (`policy=self_refine`), in one table.

Every policy plays the same seeded ifgym/EvolIF-v1 episodes (patience off, template user, cut at
the length). Offline: the model under test and the light model are canned-reply OpenAI-compatible
servers on 127.0.0.1 (tests/support/canned_server.py), so every call goes through real HTTP and is
counted by the wrapper; tokens are whitespace words (the servers' usage). The light model is the
rule-based stand-in of `benchmarks/policies.py` (it reads the template user's openers: most turns
continue the topic, so GraphIF finds one relation there), plus a summary of the first words for
GraphIF's summary call. Self-Refine's stand-in feedback always finds something to fix, so its
3 calls per turn are its most for one round. ACT is the mean context tokens of the call that
answers from the dialogue (ifgym.policies.wrapper); GraphIF's rewrite and Self-Refine's feedback
and revision are passes over a draft, counted apart as rewrite tokens; `prompt/turn` is every
prompt token of every role.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bench_policies", HERE / "policies.py")
bench = importlib.util.module_from_spec(_spec)  # the stand-in models and the episode loop of benchmarks/policies.py
_spec.loader.exec_module(bench)

from support.canned_server import CannedServer  # noqa: E402  (on the path through benchmarks/policies.py)

from ifgym.llm import make_client  # noqa: E402
from ifgym.policies import ChatPolicy, ContextAgent, GraphIF, HashingEmbedder, SelfRefine, Truncation  # noqa: E402
from ifgym.policies.context_agent import NODE_SUMMARY_SYSTEM, PAPER_SETTINGS, PATH_SYSTEM  # noqa: E402
from ifgym.policies.graphif import FINAL_RESPONSE_SYSTEM  # noqa: E402
from ifgym.policies.graphif import SUMMARY_SYSTEM as TURN_SUMMARY_SYSTEM  # noqa: E402
from ifgym.policies.self_refine import FEEDBACK_SYSTEM, REVISE_SYSTEM  # noqa: E402

LENGTHS = (10, 15, 20, 25)
# GraphIF's paper setup (policy=graphif_paper); the ablations change one switch of it
PAPER = {
    "extraction": "loop",
    "summary": True,
    "rewrite": "always",
    "rewrite_format": "final_response",
    "view_chars": 1_000_000,  # nothing clipped, as the preset
    "linked_chars": 1_000_000,
}


def light_model(body: dict[str, Any]) -> str:
    """The stand-in light model of benchmarks/policies.py, GraphIF's per-turn summary (the first words), and
    Context-Agent's paper prompts: a thread is the message's own unless the message opens a new topic."""
    messages = body["messages"]
    system, prompt = messages[0]["content"], messages[-1]["content"]
    if system == TURN_SUMMARY_SYSTEM:
        user = prompt.split(":\n", 1)[1].split("\n\nAssistant:\n", 1)[0]
        return json.dumps({"summary": " ".join(user.split()[:15])})
    if system == PATH_SYSTEM:
        new = bench._move(prompt.split("New message:\n", 1)[1]) == "new"
        return json.dumps({"answer": "no" if new else "yes"})
    if system == NODE_SUMMARY_SYSTEM:
        user = prompt.split("User: ", 1)[1].split("\nAssistant: ", 1)[0]
        return json.dumps({"summary": " ".join(user.split()[:15])})
    return bench.light_model(body)


def _draft(prompt: str) -> str:
    return prompt.split("Draft answer:\n", 1)[1].split("\n\nFeedback:\n", 1)[0]


def base_model(body: dict[str, Any]) -> str:
    """The stand-in model under test (benchmarks/policies.py), which also rewrites, critiques and revises."""
    messages = body["messages"]
    system, prompt = messages[0]["content"], messages[-1]["content"]
    if system == FINAL_RESPONSE_SYSTEM:
        return f"Every requirement of the graph is met.\nFinal response:\n{_draft(prompt)}"
    if system == FEEDBACK_SYSTEM:
        return "The last request asks for a list; the draft is prose. Use a list."
    if system == REVISE_SYSTEM:
        return _draft(prompt)
    return bench.base_model(body)


def policies(base: Any, light: Any) -> dict[str, Callable[[], Any]]:
    """The rows of the table: a name and a factory of fresh policies."""

    def chat() -> ChatPolicy:
        return ChatPolicy(base)

    return {
        "full history": lambda: Truncation(chat(), k=None),
        "truncation k=4": lambda: Truncation(chat(), k=4),
        "context-agent": lambda: ContextAgent(chat(), light, embedder=HashingEmbedder()),
        "context-agent (paper)": lambda: ContextAgent(chat(), light, embedder=HashingEmbedder(), **PAPER_SETTINGS),
        "context-agent w/o tree": lambda: ContextAgent(
            chat(), light, embedder=HashingEmbedder(), **{**PAPER_SETTINGS, "tree": False}
        ),
        "context-agent w/o retriever": lambda: ContextAgent(
            chat(), light, embedder=HashingEmbedder(), **{**PAPER_SETTINGS, "retrieval": False}
        ),
        "graphif (paper)": lambda: GraphIF(chat(), light, **PAPER),
        "graphif w/o agent": lambda: GraphIF(chat(), light, **{**PAPER, "extraction": "fast"}),
        "graphif w/o graph prompt": lambda: GraphIF(chat(), light, **PAPER, graph_prompt=False),
        "self-refine": lambda: SelfRefine(chat()),
    }


def measure(lengths: Sequence[int], episodes: int) -> dict[str, Any]:
    """Every policy on the same seeded episodes per length: per-turn calls and tokens."""
    results: dict[str, dict[int, dict[str, Any]]] = {}
    same = True
    with (
        CannedServer(replies=base_model, max_requests=10**7, ttl=36000) as base_srv,
        CannedServer(replies=light_model, max_requests=10**7, ttl=36000) as light_srv,
    ):
        settings = {"model": "canned-model", "api_key_env": None, "max_retries": 0}
        base = make_client({**settings, "base_url": base_srv.base_url}, "policy")
        light = make_client({**settings, "base_url": light_srv.base_url}, "light")
        rows = policies(base, light)
        for length in lengths:
            reference = None
            for name, make in rows.items():
                out = bench.play(make, length, range(episodes))
                reference = reference if reference is not None else out["users"]
                same = same and out["users"] == reference
                results.setdefault(name, {})[length] = out["row"]
    for length in lengths:
        full = results["full history"][length]
        for by_length in results.values():
            row = by_length[length]
            row["ACT_ratio"] = row["ACT"] / full["ACT"]
            row["prompt_ratio"] = row["prompt_tokens"] / full["prompt_tokens"]
    return {"results": results, "same_episodes": same}


def table(out: dict[str, Any], lengths: Sequence[int], episodes: int) -> list[str]:
    """The results as text lines: one row per policy and length."""
    lines = [
        f"policy wrappers as their papers run them, on ifgym/EvolIF-v1 (patience off), {episodes} seeded episodes "
        "per length, the same episodes for every policy",
        "offline: canned OpenAI-compatible servers on 127.0.0.1; tokens are whitespace words; the light model is a "
        "rule-based stand-in",
        f"identical user turns across policies: {'yes' if out['same_episodes'] else 'NO'}",
        "",
    ]
    header = (
        f"{'policy':<28} {'length':>6} {'calls/turn':>10} {'base':>5} {'light':>5} {'ACT':>8} {'ACT/full':>8} "
        f"{'rewrite':>8} {'prompt/turn':>11} {'prompt/full':>11}"
    )
    lines += [header, "-" * len(header)]
    for length in lengths:
        for name, by_length in out["results"].items():
            r = by_length[length]
            lines.append(
                f"{name:<28} {length:>6} {r['calls']:>10.2f} {r['base_calls']:>5.2f} {r['light_calls']:>5.2f} "
                f"{r['ACT']:>8.1f} {r['ACT_ratio']:>8.2f} {r['rewrite_tokens']:>8.1f} {r['prompt_tokens']:>11.1f} "
                f"{r['prompt_ratio']:>11.2f}"
            )
        lines.append("")
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure, print the table, and return the numbers."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="dialogue lengths in turns")
    parser.add_argument("--episodes", type=int, default=3, help="seeded episodes per length (seeds 0..N-1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.episodes < 1 or min(args.lengths) < 1:
        parser.error("--episodes and every length must be at least 1")
    out = measure(args.lengths, args.episodes)
    print("\n".join(table(out, args.lengths, args.episodes)))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
