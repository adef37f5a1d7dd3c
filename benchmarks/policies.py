"""Policy wrappers side by side, one command: `python benchmarks/policies.py` (also part of `make bench`).

Two parts (`--parts`, both by default):

**relations**: GraphIF's extraction measured on hand-written dialogues with hand-labelled relation
graphs (tests/support/canned_light.py): precision, recall and F1 of the (relation, source ->
target) edges found by the fast, loop and single-shot extractions, printed side by side, and the
agreement between fast and loop (edge F1 of one against the other, turns with identical edges).
The light model is a rule-based stand-in that reads the prompt (cue phrases, word overlap with
the turns the view shows), or with `--light embedded` a real model in process (`--light-model`:
qwen2.5-coder-1.5b or smollm2-135m); the output says which. The model under test answers from the
script, so the transcript is the same for every extraction.

**costs**: every policy plays the same seeded ifgym/EvolIF-v1 episodes (patience off, template
user) of 10, 15, 20 and 25 turns. Reported per policy and length: model calls per turn (base and
light), ACT (context tokens of the answering call per turn; see ifgym.policies.wrapper) and its
ratio to full history, GraphIF's rewrite tokens per turn (apart from ACT), every prompt token per
turn relative to full history, and the time the policy's calls took per turn (the wall time of
act, env and scoring excluded; median over `--repeats` runs) and its ratio to full history. Also
how often GraphIF fast and loop find the same edges on those episodes, and Context-Agent's branch
decisions.

Offline: the model under test and the light model are canned-reply OpenAI-compatible servers on
127.0.0.1 (tests/support/canned_server.py), so calls go through real HTTP, but tokens are
whitespace words (the servers' usage) and each call waits a simulated latency (default 20 ms for
the base model, 10 ms for the light one; --base-latency / --light-latency). The light model of
this part is a rule-based stand-in that reads the template user's openers (new topic, return,
follow-up, a new angle); it is not a language model.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the canned server lives with the tests

from support.canned_light import DIALOGUES, edge_keys, prf, reading_light, scripted_base  # noqa: E402
from support.canned_server import CannedServer  # noqa: E402

import ifgym  # noqa: E402, F401  (registers the env ids)
from ifgym.llm import CannedClient, make_client  # noqa: E402
from ifgym.policies import ChatPolicy, ContextAgent, GraphIF, HashingEmbedder, MiniLMEmbedder, Truncation  # noqa: E402
from ifgym.policies.context_agent import BRANCH_SYSTEM, SUMMARY_SYSTEM, TOPIC_SYSTEM  # noqa: E402
from ifgym.policies.graphif import (  # noqa: E402
    FAST_SYSTEM,
    IDENTIFY_SYSTEM,
    INTENTION_SYSTEM,
    REWRITE_SYSTEM,
    SINGLE_SYSTEM,
)
from ifgym.runner.rollout import rollout  # noqa: E402

LENGTHS = (10, 15, 20, 25)
EXTRACTIONS = ("fast", "loop", "single")
PASSED = ("earlier point of this thread", "other branch")  # Context-Agent's filter let the candidate through
STAND_IN = "rule-based stand-in that reads the prompt (cue phrases, word overlap with the turns shown)"
REPLY = (
    "Here is a short piece on that. First, the main idea in plain words. Second, two details that "
    "matter in practice, with one example each. Third, a caution about the most common mistake. "
    "That covers the request; tell me if you want more depth on any part."
)

# The template user's openers (simulators/evolif/render.py): what a light model would read in the message.
_NEW = re.compile(
    r"switch to something new|Different topic now|Moving on to another subject|New request, unrelated|fresh topic"
)
_RETURN = re.compile(r"go back to an earlier topic|Going back to|Returning to what we discussed|Back to the earlier")
_ANGLE = re.compile(r"new angle|different aspect")
_CURRENT = re.compile(r"Current request \(turn (\d+)\):\n(.*)", re.DOTALL)
_TOPIC_LINE = re.compile(r"^([* ]) topic (\d+) '(.*)': turns ([\d, ]+)$", re.MULTILINE)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]{4,}", text.lower()))


def _move(message: str) -> str:
    return "new" if _NEW.search(message) else "return" if _RETURN.search(message) else "continue"


def _closest(message: str, candidates: Sequence[tuple[Any, str]]) -> Any:
    """The candidate whose text shares the most words with the message (None when there is none)."""
    scored = [(len(_words(message) & _words(text)), key) for key, text in candidates]
    return max(scored, key=lambda s: s[0])[1] if scored else None


def graphif_relations(prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """(intention, relations) the stand-in light model reports for a GraphIF view."""
    m = _CURRENT.search(prompt)
    turn, message = int(m.group(1)), m.group(2)
    move = _move(message)
    if turn == 1:
        return "start the first topic", [{"type": "new_topic", "return_to": None, "label": message[:40]}]
    if move == "new":
        return "start a new topic", [{"type": "new_topic", "return_to": None, "label": message[:40]}]
    if move == "return":
        others = [(int(t.split(",")[0]), label) for mark, _, label, t in _TOPIC_LINE.findall(prompt) if mark != "*"]
        back = _closest(message, others)
        if back is not None:
            return "go back to an earlier topic", [{"type": "new_topic", "return_to": back, "label": ""}]
    return "continue the topic", [{"type": "context_anchored", "turns": [turn - 1], "binds": "build on it"}]


def light_model(body: dict[str, Any]) -> str:
    """The stand-in light model: answers GraphIF's and Context-Agent's prompts from the template openers."""
    messages = body["messages"]
    system, prompt = messages[0]["content"], messages[-1]["content"]
    if system in (FAST_SYSTEM, SINGLE_SYSTEM):
        intention, relations = graphif_relations(prompt)
        return json.dumps({"intention": intention, "relations": relations})
    if system == INTENTION_SYSTEM:
        return json.dumps({"intention": graphif_relations(prompt)[0]})
    if system == IDENTIFY_SYSTEM:
        done = prompt.split("Notebook (extracted so far for this request):", 1)[1]
        for rel in graphif_relations(prompt)[1]:
            if f"- {rel['type']}:" not in done:
                return json.dumps({"action": rel["type"]})
        return json.dumps({"action": "done"})
    if system.startswith("The user's latest request has this relation"):
        kind = system.split("\n")[1].split(":")[0]
        rel = next((r for r in graphif_relations(prompt)[1] if r["type"] == kind), {})
        return json.dumps(rel)
    if system == TOPIC_SYSTEM:
        message = prompt.split("New message:\n", 1)[1]
        move = _move(message)
        if move == "new":
            return json.dumps({"decision": "create"})
        if move == "return":
            topics = re.findall(r"^- topic (\d+)(?! \(active\)): (.*)$", prompt, re.MULTILINE)
            back = _closest(message, [(int(i), s) for i, s in topics])
            if back is not None:
                return json.dumps({"decision": "switch", "topic": back})
        return json.dumps({"decision": "continue"})
    if system == BRANCH_SYSTEM:
        # a return resumes the earlier point's branch; "a new angle" / "a different aspect" branches off it
        message = prompt.split("New message:\n", 1)[1]
        if _move(message) == "return":
            return json.dumps({"decision": "switch"})
        if _ANGLE.search(message):
            return json.dumps({"decision": "create"})
        return json.dumps({"decision": "continue"})
    if system == SUMMARY_SYSTEM:
        so_far = prompt.split("\n", 1)[0].removeprefix("Topic summary so far: ")
        user = prompt.split("User: ", 1)[1].split("\nAssistant: ", 1)[0]
        summary = " ".join(user.split()[:15])
        return json.dumps({"summary": summary, "topic_summary": summary if so_far == "(new topic)" else so_far})
    raise ValueError(f"the stand-in light model does not know this prompt: {system[:80]!r}")


def base_model(body: dict[str, Any]) -> str:
    """The stand-in model under test: the request's first line restated, then one fixed answer.

    GraphIF's rewrite gets the draft back as JSON. The restated request gives the answers of one
    subject words in common, as a real model's answers have, so Context-Agent's fork points vary.
    """
    messages = body["messages"]
    if messages[0]["content"] == REWRITE_SYSTEM:
        return json.dumps({"reply": messages[-1]["content"].split("Draft answer:\n", 1)[1]})
    return f"On your request ({messages[-1]['content'].splitlines()[0]}): {REPLY}"


def play(make_policy: Callable[[], Any], length: int, seeds: Sequence[int]) -> dict[str, Any]:
    """Run the episodes with fresh policies: per-turn costs pooled, policy-call seconds summed, what to compare kept."""
    costs, users, edges, branches = [], [], [], []
    for seed in seeds:
        env = gym.make("ifgym/EvolIF-v1", patience=None, max_turns=length)
        policy = make_policy()
        episode = rollout(env, policy, seed=seed)
        costs.extend(policy.costs)
        users.append([t.user for t in episode.turns])
        trace = episode.meta["policy_trace"]
        if "graph" in trace:
            edges.append({(e["relation"], e["source"], e["target"]) for e in trace["graph"]["edges"]})
        if "forest" in trace:  # the branch decisions the light model was asked for, and what it decided
            asked = [d["branch"] for d in trace["forest"]["decisions"] if d.get("filter") in PASSED]
            branches.extend(asked)
    n = len(costs)
    row = {
        "turns": n,
        "calls": sum(c.total_calls for c in costs) / n,
        "base_calls": sum(c.calls["base"] for c in costs) / n,
        "light_calls": sum(c.calls["light"] for c in costs) / n,
        "ACT": sum(c.context_tokens for c in costs) / n,
        "rewrite_tokens": sum(c.rewrite_tokens for c in costs) / n,
        "prompt_tokens": sum(sum(c.prompt_tokens.values()) for c in costs) / n,
    }
    return {"row": row, "users": users, "edges": edges, "branches": branches, "seconds": sum(c.seconds for c in costs)}


def agreement(a: Sequence[set], b: Sequence[set]) -> dict[str, Any]:
    """Edge F1 of one extraction against the other (pooled over episodes), and turns with identical edges."""
    pool_a = {(i, *e) for i, edges in enumerate(a) for e in edges}
    pool_b = {(i, *e) for i, edges in enumerate(b) for e in edges}
    by_turn = lambda pool: {(e[0], e[2]): {x for x in pool if (x[0], x[2]) == (e[0], e[2])} for e in pool}  # noqa: E731
    ta, tb = by_turn(pool_a), by_turn(pool_b)
    turns = set(ta) | set(tb)
    same = sum(ta.get(t, set()) == tb.get(t, set()) for t in turns)
    f1 = prf(pool_a, pool_b)[2] if pool_a or pool_b else None  # nothing found by either: nothing to agree on
    return {"f1": f1, "edges": (len(pool_a), len(pool_b)), "same_turns": same, "turns": len(turns)}


def _f1(a: dict[str, Any]) -> str:
    return "n/a (no edges from either)" if a["f1"] is None else f"{a['f1']:.2f}"


# ---------------------------------------------------------------------------------------------
# Part 1: relations on the hand-written dialogues
# ---------------------------------------------------------------------------------------------


def light_for(args: argparse.Namespace) -> tuple[Any, str]:
    """The light model of the relations part, and the words that say what it is."""
    if args.light == "stand-in":
        return CannedClient(reading_light, role="light", model="reading-stand-in"), STAND_IN
    settings = {
        "base_url": None,
        "embedded_model": args.light_model,
        "temperature": 0.0,
        "max_tokens": args.light_max_tokens,
        "n_ctx": 8192,
        "seed": 0,
    }
    client = make_client(settings, "light")
    return client, (
        f"embedded {args.light_model} (llama.cpp in process, temperature 0, max_tokens {args.light_max_tokens})"
    )


def measure_relations(light: Any) -> dict[str, Any]:
    """P/R/F1 of each extraction against the hand labels, per dialogue and pooled; fast vs loop agreement."""
    rows, found_by = [], {}
    for extraction in EXTRACTIONS:
        pooled_found, pooled_gold, calls, light_calls, turns = set(), set(), 0, 0, 0
        for d in DIALOGUES:
            policy = GraphIF(ChatPolicy(CannedClient(scripted_base())), light, extraction=extraction)
            messages: list[dict[str, str]] = []
            for user in d.users:
                messages.append({"role": "user", "content": user})
                messages.append({"role": "assistant", "content": policy.act(messages)})
            found, gold = edge_keys(policy.graph.edges, d.topics), d.gold()
            found_by[(d.name, extraction)] = found
            p, r, f1 = prf(found, gold)
            summary = policy.cost_summary()
            rows.append(
                {
                    "dialogue": d.name,
                    "extraction": extraction,
                    "precision": p,
                    "recall": r,
                    "f1": f1,
                    "calls_per_turn": summary["calls_per_turn"],
                    "light_calls_per_turn": summary["light_calls_per_turn"],
                    "defaults": {k: v for k, v in policy.stats.items() if k != "rewrites" and v},
                }
            )
            pooled_found |= {(d.name, *k) for k in found}
            pooled_gold |= {(d.name, *k) for k in gold}
            calls += sum(c.total_calls for c in policy.costs)
            light_calls += sum(c.calls["light"] for c in policy.costs)
            turns += len(policy.costs)
        p, r, f1 = prf(pooled_found, pooled_gold)
        rows.append(
            {
                "dialogue": "all",
                "extraction": extraction,
                "precision": p,
                "recall": r,
                "f1": f1,
                "calls_per_turn": calls / turns,
                "light_calls_per_turn": light_calls / turns,
            }
        )
    fast = [found_by[(d.name, "fast")] for d in DIALOGUES]
    loop = [found_by[(d.name, "loop")] for d in DIALOGUES]
    return {"rows": rows, "agreement": agreement(fast, loop), "gold_edges": sum(len(d.gold()) for d in DIALOGUES)}


def print_relations(rel: dict[str, Any]) -> None:
    """The relations part, side by side."""
    sizes = ", ".join(f"{d.name} {len(d.turns)} turns" for d in DIALOGUES)
    print(f"GraphIF relations on hand-written dialogues ({sizes}; {rel['gold_edges']} hand-labelled edges)")
    print(f"light model: {rel['light']}")
    header = (
        f"{'dialogue':<12} {'extraction':<10} {'precision':>9} {'recall':>6} {'F1':>5} {'calls/turn':>10} {'light':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in rel["rows"]:
        print(
            f"{r['dialogue']:<12} {r['extraction']:<10} {r['precision']:>9.2f} {r['recall']:>6.2f} {r['f1']:>5.2f} "
            f"{r['calls_per_turn']:>10.2f} {r['light_calls_per_turn']:>5.2f}"
            + (f"  defaults taken: {r['defaults']}" if r.get("defaults") else "")
        )
    a = rel["agreement"]
    print(
        f"fast vs loop: edge F1 {_f1(a)} (fast {a['edges'][0]} edges, loop {a['edges'][1]}); "
        f"identical edges on {a['same_turns']}/{a['turns']} turns that have any\n"
    )


# ---------------------------------------------------------------------------------------------
# Part 2: costs on EvolIF episodes
# ---------------------------------------------------------------------------------------------


def measure_costs(args: argparse.Namespace) -> dict[str, Any]:
    """Every policy on the same seeded episodes, `repeats` times; per-turn costs and median policy-call time."""
    embedder = HashingEmbedder() if args.embedder == "hashing" else MiniLMEmbedder()
    seeds = range(args.episodes)
    results: dict[str, dict[int, dict[str, Any]]] = {}
    extras: dict[int, dict[str, Any]] = {}
    same_users = True
    with (
        CannedServer(replies=base_model, delay=args.base_latency, max_requests=10**7, ttl=36000) as base_srv,
        CannedServer(replies=light_model, delay=args.light_latency, max_requests=10**7, ttl=36000) as light_srv,
    ):
        settings = {"model": "canned-model", "api_key_env": None, "max_retries": 0}
        base_client = make_client({**settings, "base_url": base_srv.base_url}, "policy")
        light = make_client({**settings, "base_url": light_srv.base_url}, "light")

        def chat() -> ChatPolicy:
            return ChatPolicy(base_client)

        policies: dict[str, Callable[[], Any]] = {
            "full history": lambda: Truncation(chat(), k=None),
            "truncation k=4": lambda: Truncation(chat(), k=4),
            "graphif fast": lambda: GraphIF(chat(), light),
            "graphif loop": lambda: GraphIF(chat(), light, extraction="loop"),
            "context-agent": lambda: ContextAgent(chat(), light, embedder=embedder),
        }
        for make in policies.values():  # warm-up, untimed: imports, HTTP connections, first-call costs
            play(make, 2, [0])
        for length in args.lengths:
            reference = None
            outs: dict[str, dict[str, Any]] = {}
            for _ in range(args.repeats):  # interleaved, so a slow spell of the machine hits every policy
                for name, make in policies.items():
                    out = play(make, length, seeds)
                    first = outs.setdefault(name, out)
                    first.setdefault("timings", []).append(out["seconds"] / out["row"]["turns"])
                    reference = reference if reference is not None else out["users"]
                    same_users = same_users and out["users"] == reference
            for name, out in outs.items():
                row = dict(out["row"])
                row["policy_seconds"] = out["timings"]
                row["seconds_per_turn"] = statistics.median(out["timings"])
                results.setdefault(name, {})[length] = row
            asked = outs["context-agent"]["branches"]
            ca = results["context-agent"][length]
            ca["branch_calls"] = len(asked)
            ca["branches_created"] = asked.count("create")
            ca["branch_switches"] = asked.count("switch")
            extras[length] = {"graphif": agreement(outs["graphif fast"]["edges"], outs["graphif loop"]["edges"])}
    for length in args.lengths:
        full = results["full history"][length]
        for by_length in results.values():
            r = by_length[length]
            r["ACT_ratio"] = r["ACT"] / full["ACT"]
            r["prompt_ratio"] = r["prompt_tokens"] / full["prompt_tokens"]
            r["time_ratio"] = r["seconds_per_turn"] / full["seconds_per_turn"]
    return {"results": results, "agreement": extras, "same_episodes": same_users}


def print_costs(out: dict[str, Any], args: argparse.Namespace) -> None:
    """The cost part, side by side per length."""
    results = out["results"]
    print(
        "policy wrappers on ifgym/EvolIF-v1 (patience off), "
        f"{args.episodes} seeded episodes per length, the same episodes for every policy"
    )
    print(
        "offline: canned OpenAI-compatible servers on 127.0.0.1 stand in for the base and light models; "
        "tokens are whitespace words;"
    )
    print(
        f"  latency per call: base {args.base_latency * 1000:.1f} ms, light {args.light_latency * 1000:.1f} ms "
        f"(simulated by the servers); Context-Agent embedder: {args.embedder}"
    )
    print(
        "  light model: rule-based stand-in reading the template user's openers; time = the policy's own calls "
        f"(act wall time, env and scoring excluded), median of {args.repeats} repeats"
    )
    print("  ACT = context tokens of the answering call per turn; GraphIF's rewrite prompt is counted apart")
    print(f"identical user turns across policies: {'yes' if out['same_episodes'] else 'NO'}\n")
    header = (
        f"{'policy':<16} {'length':>6} {'calls/turn':>10} {'base':>5} {'light':>5} {'ACT':>8} {'ACT/full':>8} "
        f"{'rewrite':>8} {'prompt/full':>11} {'ms/turn':>8} {'time/full':>9}"
    )
    print(header)
    print("-" * len(header))
    for length in args.lengths:
        for name, by_length in results.items():
            r = by_length[length]
            print(
                f"{name:<16} {length:>6} {r['calls']:>10.2f} {r['base_calls']:>5.2f} {r['light_calls']:>5.2f} "
                f"{r['ACT']:>8.1f} {r['ACT_ratio']:>8.2f} {r['rewrite_tokens']:>8.1f} {r['prompt_ratio']:>11.2f} "
                f"{r['seconds_per_turn'] * 1000:>8.1f} {r['time_ratio']:>9.2f}"
            )
        a = out["agreement"][length]["graphif"]
        ca = results["context-agent"][length]
        print(
            f"  graphif fast vs loop: edge F1 {_f1(a)}, identical edges on {a['same_turns']}/{a['turns']} turns "
            "with any; "
            f"context-agent: {ca['branch_calls']} branch decisions asked, {ca['branches_created']} branches created, "
            f"{ca['branch_switches']} switches\n"
        )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the parts asked for, print them, and return the numbers."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=("relations", "costs"), default=["relations", "costs"])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="episode lengths in turns")
    parser.add_argument("--episodes", type=int, default=3, help="seeded episodes per length (seeds 0..N-1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of every episode; the median is reported")
    parser.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing", help="Context-Agent embedder")
    parser.add_argument("--base-latency", type=float, default=0.020, help="seconds the base server waits per call")
    parser.add_argument("--light-latency", type=float, default=0.010, help="seconds the light server waits per call")
    parser.add_argument(
        "--light", choices=("stand-in", "embedded"), default="stand-in", help="light model of the relations part"
    )
    parser.add_argument(
        "--light-model", default="qwen2.5-coder-1.5b", help="embedded model (qwen2.5-coder-1.5b | smollm2-135m)"
    )
    parser.add_argument("--light-max-tokens", type=int, default=400, help="longest light-model answer (embedded)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.episodes < 1:
        parser.error("--repeats and --episodes must be at least 1")

    out: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if "relations" in args.parts:
        light, described = light_for(args)
        out["relations"] = {"light": described, **measure_relations(light)}
        print_relations(out["relations"])
    if "costs" in args.parts:
        out.update(measure_costs(args))
        print_costs(out, args)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
