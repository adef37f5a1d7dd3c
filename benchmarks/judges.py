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

`--real` measures instead how well a real judge agrees with StructFlowBench's own (GPT-4o) verdicts
on the audit's real suite: each checklist judge mode of the embedded Qwen2.5-Coder-1.5B (or of a
served model: `--base-url`, `--model`), on the dev and test splits side by side, with agreement,
kappa, yes-rate on the reference's "no", no-rate on its "yes", calls and tokens per item. In
probability mode the P(yes) threshold is calibrated on dev (`calibrate_threshold`) and the test
split is judged with it. `--per-model K` keeps K turns per model and split (2 of 3 with a "no"),
so a CPU run finishes: `python benchmarks/judges.py --real --per-model 1 --modes plain,probability`.
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


def capped_real(per_model: int | None) -> dict:
    """The real suite cut to `per_model` turns per model and split: ceil(2/3) of them holding a "no", the rest not."""
    from ifgym.rewards.audit import load_real

    real = load_real()
    if per_model is None:
        return real
    with_no = -(-2 * per_model // 3)
    limits = {True: with_no, False: per_model - with_no}
    seen: dict[tuple[str, str, bool], int] = {}
    kept = []
    for turn in real["turns"]:
        key = (turn["model"], turn["split"], "no" in turn["verdicts"])
        if seen.get(key, 0) < limits[key[2]]:
            kept.append(turn)
        seen[key] = seen.get(key, 0) + 1
    return {**real, "turns": kept}


def real_rows(client, modes: list[str], real: dict, progress: bool) -> list[dict]:
    """Each mode on dev then test: the audit's real-suite numbers, calls and tokens per item."""
    from ifgym.rewards.audit import audit, calibrate_on_real

    rows = []
    for mode in modes:
        options: dict = {}
        for split in ("dev", "test"):
            started = time.perf_counter()
            if mode == "probability" and split == "dev":  # the threshold from every judged dev item's P(yes)
                try:
                    options = {"threshold": calibrate_on_real(client, split="dev", real=real)["threshold"]}
                except ValueError:  # no log-probabilities: the answer's text is read
                    options = {}
            report = audit(
                client,
                suites=["structflow_real"],
                modes={"structflow_real": mode},
                split=split,
                real=real,
                judge_options=options,
                progress=progress,
            )
            r = report["suites"]["structflow_real"]
            judged = max(r["items"] - r["rule_items"], 1)
            rows.append(
                {
                    "mode": mode + (f" (threshold {options['threshold']})" if options else ""),
                    "split": split,
                    "turns": r["turns"],
                    "items": r["items"],
                    "rule items": r["rule_items"],
                    "agreement": r["accuracy"],
                    "kappa": r["kappa"],
                    "yes on no": r["yes_rate_negatives"],
                    "no on yes": r["no_rate_positives"],
                    "unknown": r["unknown_rate"],
                    "calls/item": r["calls"] / judged,
                    "prompt tok/item": r["prompt_tokens"] / judged,
                    "compl. tok/item": r["completion_tokens"] / judged,
                    "s": round(time.perf_counter() - started),
                    "ci": r["ci"],
                }
            )
            print(format_row(rows[-1]), flush=True)
    return rows


def format_row(row: dict) -> str:
    """One row of the real-suite table, Markdown."""
    cells = []
    for key, value in row.items():
        if key == "ci":
            continue
        if isinstance(value, float):
            bounds = row["ci"].get(
                {"agreement": "accuracy", "yes on no": "yes_rate_negatives", "no on yes": "no_rate_positives"}.get(
                    key, key
                )
            )
            cells.append(f"{value:.2f}" + (f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else ""))
        else:
            cells.append("n/a" if value is None else str(value))
    return "| " + " | ".join(cells) + " |"


def main_real(args: argparse.Namespace) -> list[dict]:
    """The real-suite table (see the module docstring)."""
    from ifgym.llm import make_client

    if args.base_url:
        config = {"base_url": args.base_url, "model": args.model, "temperature": 0.0}
    else:
        config = {"embedded_model": "qwen2.5-coder-1.5b", "n_ctx": 8192, "temperature": 0.0}
    from ifgym.llm import CallCache

    # a call cache: probability mode's calibration pass and its dev audit ask the same prompts; re-runs are free
    client = make_client(config, "judge", cache=CallCache(args.cache) if args.cache else None)
    real = capped_real(args.per_model)
    keys = ["mode", "split", "turns", "items", "rule items", "agreement", "kappa", "yes on no", "no on yes", "unknown"]
    keys += ["calls/item", "prompt tok/item", "compl. tok/item", "s"]
    print(f"Checklist judge {client.model} against StructFlowBench's GPT-4o verdicts (real suite; 95% intervals):\n")
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys), flush=True)
    started = time.perf_counter()
    rows = real_rows(client, [m.strip() for m in args.modes.split(",")], real, args.progress)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, float | str]]:
    """Print the side-by-side table and return its rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="episodes per judge and mode")
    parser.add_argument("--words", action="store_true", help="count whitespace words, not Qwen tokens")
    parser.add_argument("--real", action="store_true", help="agreement with StructFlowBench's judge on real replies")
    parser.add_argument("--modes", default="plain,evidence,probability", help="checklist judge modes (--real)")
    parser.add_argument("--per-model", type=int, default=None, help="turns per model and split (--real; all: 6)")
    parser.add_argument("--base-url", default=None, help="a served judge instead of the embedded model (--real)")
    parser.add_argument("--model", default=None, help="the served judge's model name (--real)")
    parser.add_argument("--progress", action="store_true", help="progress bars (--real)")
    parser.add_argument("--cache", default=None, help="a call-cache folder for the judge's calls (--real)")
    args = parser.parse_args(argv)
    if args.real:
        return main_real(args)
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
