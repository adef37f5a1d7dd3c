"""What the EvolIF user says, change-only vs restate-all, side by side: `python benchmarks/evolif_fidelity.py`.

Two parts (`--parts`, both by default), each on the same seeds under both `restate` settings of
ifgym/EvolIF-v1 (the tracker's script is the same; only the wording differs):

**text** (template user, no model, a second): per user turn, the words of the message (whitespace
tokens), the live constraints, and the constraints the message states (a live constraint counts as
stated when one of the template's phrasings of it is in the text; a dropped rule is named but no
longer live, so it is not counted), split by the turn's move: the
first turn of a new topic, a turn on the same topic, a return to an earlier topic. `restated` counts
stated constraints the turn did not change: what the model is told again instead of remembering.

**model** (minutes to hours): a model plays the same seeds under both settings: the embedded one
(`--model`, default Qwen2.5-Coder-1.5B-Instruct, in process) or any OpenAI-compatible server
(`--base-url URL --model NAME`), greedy, patience 3, rule checks (9 groups: no LLM judge here), a
safety cap of `--max-turns` turns. CSR, ISR, EDR, REC and ROB under each, and the paired difference
change-only − restate-all with a 95% paired bootstrap interval and a permutation p-value over
dialogues (`ifgym.core.stats.compare`). `--patience none --max-turns N`: both settings play the same N
turns of every script, so CSR and ISR compare the same constraints, worded two ways (EDR is not
defined then). Episodes are appended to `--out` as they finish, and a re-run resumes there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import gymnasium as gym

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.core import Episode
from ifgym.llm import LLMConfig
from ifgym.rewards.evolif.metrics import HEADLINE

MODES = ("change", "all")
KINDS = ("new topic", "same topic", "return", "all turns")


def _kind(move: str) -> str:
    return {"new_topic": "new topic", "continue": "same topic", "return": "return"}[move]


def _mentioned(constraint, text: str) -> bool:
    low = text.lower()
    return any(p.lower() in low for p in constraint.phrasings())


def turn_texts(mode: str, seeds: range, turns: int) -> list[list[tuple[str, str, list, list]]]:
    """Per seed, the (move, text, live constraints, touched constraints) of each user turn."""
    out = []
    for seed in seeds:
        env = gym.make("ifgym/EvolIF-v1", restate=mode, patience=None, max_turns=turns).unwrapped
        env.reset(seed=seed)
        for _ in range(turns):
            _, _, _, truncated, _ = env.step("A reply.")
            if truncated:
                break
        episode = env.episode
        rows = []
        for t in episode.turns:
            spec = t.spec
            touched = [x for x in (spec.meta.get("old"), spec.meta.get("new")) if x is not None]
            rows.append((spec.move, t.user, list(spec.constraints), touched))
        out.append(rows)
    return out


def text_part(seeds: range, turns: int) -> dict[str, dict[str, dict[str, float]]]:
    """Mean words, live, stated and restated constraints per user turn, by move kind and mode."""
    by_mode = {mode: turn_texts(mode, seeds, turns) for mode in MODES}
    scripts = {
        mode: [[(m, [c.to_json() for c in live]) for m, _, live, _ in ep] for ep in episodes]
        for mode, episodes in by_mode.items()
    }
    if scripts["change"] != scripts["all"]:
        raise RuntimeError("the two restate settings played different tracker scripts; the comparison is void")
    table: dict[str, dict[str, dict[str, float]]] = {}
    for mode, episodes in by_mode.items():
        acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for rows in episodes:
            for move, text, live, touched in rows:
                changed = {json.dumps(t, sort_keys=True) for t in touched}
                stated = [c for c in live if _mentioned(c, text)]
                restated = [
                    c for c in stated if json.dumps(c.to_json(), sort_keys=True) not in changed and move != "new_topic"
                ]
                for kind in (_kind(move), "all turns"):
                    acc[kind]["words"].append(len(text.split()))
                    acc[kind]["live"].append(len(live))
                    acc[kind]["stated"].append(len(stated))
                    acc[kind]["restated"].append(len(restated))
                    acc[kind]["turns"].append(1)
        table[mode] = {
            kind: {k: (sum(v) if k == "turns" else statistics.fmean(v)) for k, v in acc[kind].items()}
            for kind in KINDS
            if kind in acc
        }
    return table


def print_text(table: dict, seeds: range, turns: int) -> None:
    print(f"\nUser turns, template user, seeds {seeds.start}-{seeds.stop - 1}, up to {turns} turns each (patience off)")
    head = f"{'turn kind':<11} {'turns':>6}  {'live':>5}  {'words change':>12} {'words all':>10} {'ratio':>6}"
    head += f"  {'stated change':>13} {'stated all':>10}  {'restated change':>15} {'restated all':>12}"
    print(head)
    print("-" * len(head))
    for kind in KINDS:
        if kind not in table["change"]:
            continue
        c, a = table["change"][kind], table["all"][kind]
        print(
            f"{kind:<11} {c['turns']:>6.0f}  {c['live']:>5.2f}  {c['words']:>12.1f} {a['words']:>10.1f} "
            f"{c['words'] / a['words']:>6.2f}  {c['stated']:>13.2f} {a['stated']:>10.2f}  "
            f"{c['restated']:>15.2f} {a['restated']:>12.2f}"
        )


def model_part(
    seeds: range, max_turns: int, out: Path, config: LLMConfig, patience: int | None
) -> dict[str, list[Episode]]:
    """Play the model on the same seeds under both settings; episodes by mode."""
    from ifgym.llm import make_client
    from ifgym.policies import ChatPolicy
    from ifgym.runner.rollout import run

    client = make_client(config, "policy")
    model = config.model if config.base_url else config.embedded_model
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for mode in MODES:

        def make_env(mode: str = mode):
            return gym.make("ifgym/EvolIF-v1", restate=mode, max_turns=max_turns, patience=patience)

        key = f"{model}-{mode}-t{max_turns}-m{config.max_tokens}-p{patience}".replace("/", "_")  # a file per config
        print(f"{model}, restate={mode}: {len(seeds)} dialogues (appending to {out / f'{key}.jsonl'})")
        result = run(
            make_env, lambda: ChatPolicy(client), seeds, output=out / f"{key}.jsonl", run_key=key, concurrency=1
        )
        if result.failed:  # the comparison pairs seeds: a failed one would drop out of one side silently
            raise SystemExit(f"{len(result.failed)} episodes failed: {result.failures['by_type']}; rerun to retry them")
        runs[mode] = result.episodes
    return runs


def print_model(runs: dict[str, list[Episode]], max_turns: int, model: str, patience: int | None) -> None:
    from ifgym.core.stats import compare
    from ifgym.envs.evolif import EvolIFEnv

    # with patience off every dialogue plays the same max_turns turns: EDR says nothing then
    metrics = list(HEADLINE) if patience is not None else ["CSR", "ISR"]
    result = compare(runs["all"], runs["change"], EvolIFEnv.summarize, metrics)
    n = len(runs["change"])
    turns = {m: sum(len(e.turns) for e in runs[m]) for m in MODES}
    print(
        f"\n{model} (greedy), {n} dialogues per setting, same seeds, "
        f"{'patience off (the same turns under both)' if patience is None else f'patience {patience}'}, "
        f"rule checks (9 groups), {'' if patience is None else 'safety cap '}{max_turns} turns; "
        f"turns played: change {turns['change']}, "
        f"all {turns['all']}"
    )
    head = f"{'metric':<9} {'change':>8} {'all':>8} {'change-all':>11}  {'95% CI (paired)':>18} {'p':>6}"
    print(head)
    print("-" * len(head))
    for m in metrics:
        r = result[m]
        ci = "n/a" if r["ci"] is None else f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
        p = "n/a" if r["p_value"] is None else f"{r['p_value']:.3f}"
        print(f"{m:<9} {r['b']:>8.3f} {r['a']:>8.3f} {r['diff']:>+11.3f}  {ci:>18} {p:>6}")


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="text,model", help="comma-separated: text, model")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--text-episodes", type=int, default=200, help="template episodes per setting")
    parser.add_argument("--text-turns", type=int, default=30, help="user turns per template episode")
    parser.add_argument("--episodes", type=int, default=10, help="model dialogues per setting")
    parser.add_argument("--max-turns", type=int, default=40, help="safety cap per model dialogue (EvolIF: 100)")
    parser.add_argument(
        "--patience", default="3", help="model part: patience, or 'none' (both settings play the same turns)"
    )
    parser.add_argument("--max-tokens", type=int, default=384, help="longest model reply")
    parser.add_argument(
        "--model",
        default=None,
        help="embedded model (default qwen2.5-coder-1.5b; smollm2-135m for a smoke test), or the served model's name",
    )
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server instead of the embedded model")
    parser.add_argument("--n-ctx", type=int, default=32768, help="embedded model context (long dialogues)")
    parser.add_argument("--out", type=Path, default=Path("runs/evolif_fidelity"), help="episodes of the model part")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"text", "model"}
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; choose from text, model")
    if "text" in parts:
        seeds = range(args.seed, args.seed + args.text_episodes)
        print_text(text_part(seeds, args.text_turns), seeds, args.text_turns)
    if "model" in parts:
        seeds = range(args.seed, args.seed + args.episodes)
        patience = None if args.patience.lower() == "none" else int(args.patience)
        if args.base_url:
            if not args.model:
                parser.error("--base-url needs --model NAME (the served model)")
            config = LLMConfig(base_url=args.base_url, model=args.model, max_tokens=args.max_tokens)
        else:
            model = args.model or "qwen2.5-coder-1.5b"
            config = LLMConfig(embedded_model=model, max_tokens=args.max_tokens, n_ctx=args.n_ctx, concurrency=1)
        runs = model_part(seeds, args.max_turns, args.out, config, patience)
        print_model(runs, args.max_turns, config.model if config.base_url else config.embedded_model, patience)
    return 0


if __name__ == "__main__":
    sys.exit(main())
