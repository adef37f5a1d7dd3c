"""Build the judge audit's real suite from StructFlowBench's released evaluation outputs (seeded, reproducible).

    python benchmarks/build_judge_suite.py --repo /path/to/StructFlowBench [--commit 5a65141d...]

`--repo` is a git clone of github.com/MLGroupJLU/StructFlowBench (MIT); the files are read at
`--commit` with `git show`, so the clone's working tree does not matter. Writes
`rewards/assets/structflow_real/suite.json` (and SOURCE beside it; LICENSE is the repository's).

What it takes: for each of the models below, its replies and the benchmark's GPT-4o verdicts
(`evaluation/output/evaluation/<model>_evaluate.json`: one "Yes"/"No" per checklist item per
turn; the judge saw the golden earlier turns, the user's request and the reply). The Mistral-7B,
Llama-3.1-8B and Qwen2.5-7B outputs are left out entirely: they are the review's held-out check.

How it samples (seed `SEED`): the 155 dialogues are shuffled and split in half, dev and test, so
no dialogue has turns in both. Per model and split, `NO_TURNS` turns holding at least one "No"
and `YES_TURNS` turns answered "Yes" throughout are drawn, a (dialogue, turn) at most once in the
whole suite, among turns whose reply is at most `MAX_REPLY_CHARS` characters and whose earlier
turns, request and reply together are at most `MAX_PROMPT_CHARS` (a small judge's context). The
first `SHORT_NO` + `SHORT_YES` of each model's test turns form the short set the pre-eval audit uses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
from pathlib import Path

COMMIT = "5a65141d21285c2519d82380eeb828c2d70a593d"
MODELS = (
    "claude_3_5_sonnet_20241022",
    "deepseek_v3",
    "gemini_1_5_pro",
    "gpt4o",
    "qwen2_5_14b_instruct",
    "glm_4_9b_chat",
    "phi_3_5_mini_instruct",
    "yi_6b_chat",
    "deepseek_R1_llama_8b",
    "deepseek_R1_qwen_7b",
)
HELD_OUT = ("mistral_7b_instruct_v0_3", "llama_3_1_8b_instruct", "qwen2_5_7b_instruct")
SEED = 25
NO_TURNS, YES_TURNS = 4, 2
SHORT_NO, SHORT_YES = 2, 1
MAX_REPLY_CHARS, MAX_PROMPT_CHARS = 5000, 14000
OUT = Path(__file__).resolve().parents[1] / "rewards" / "assets" / "structflow_real"


def _show(repo: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True).stdout


def _relations(structure: list[dict], n: int) -> list[str]:
    out = ["first_turn"] * n
    for edge in structure or []:
        targets = edge["target"] if isinstance(edge["target"], list) else [edge["target"]]
        for target in targets:  # "c2", or a list of them
            k = int(str(target).lstrip("c")) - 1
            if 0 <= k < n:
                out[k] = edge["relation"]
    return out


def build(repo: Path, commit: str) -> dict:
    """The suite as written to suite.json."""
    assert not set(MODELS) & set(HELD_OUT)
    dataset = json.loads(_show(repo, commit, "StructFlowBench.json"))
    rng = random.Random(SEED)
    order = list(range(len(dataset)))
    rng.shuffle(order)
    split_of = {d: ("dev" if k < len(order) // 2 else "test") for k, d in enumerate(order)}
    taken: set[tuple[int, int]] = set()
    turns, used = [], set()
    for model in MODELS:
        evaluated = json.loads(_show(repo, commit, f"evaluation/output/evaluation/{model}_evaluate.json"))
        if len(evaluated) != len(dataset):
            raise SystemExit(f"{model}: {len(evaluated)} records, the dataset has {len(dataset)}")
        pools: dict[tuple[str, bool], list[tuple[int, int, str, list[str]]]] = {}
        for d, record in enumerate(evaluated):
            conv = record["whole_conv"]
            for t, turn in enumerate(conv):
                gold = dataset[d]["whole_conv"][t]
                if turn["user prompt"] != gold["user prompt"] or [c["content"] for c in turn["constraints"]] != [
                    c["content"] for c in gold["constraints"]
                ]:
                    raise SystemExit(f"{model} record {d} turn {t}: differs from StructFlowBench.json")
                results = turn.get("judge result")
                if not isinstance(results, list) or len(results) != len(turn["constraints"]):
                    continue
                reply = turn["response"]
                before = sum(len(c["user prompt"]) + len(c["assistant answer"]) for c in conv[:t])
                if len(reply) > MAX_REPLY_CHARS or before + len(turn["user prompt"]) + len(reply) > MAX_PROMPT_CHARS:
                    continue
                verdicts = ["yes" if r.get("judgement") == "Yes" else "no" for r in results]
                pools.setdefault((split_of[d], "no" in verdicts), []).append((d, t, reply, verdicts))
        for split in ("dev", "test"):
            picked = []
            for has_no, count in ((True, NO_TURNS), (False, YES_TURNS)):
                pool = [p for p in pools.get((split, has_no), []) if (p[0], p[1]) not in taken]
                rng.shuffle(pool)
                for k, (d, t, reply, verdicts) in enumerate(pool[:count]):
                    taken.add((d, t))
                    short = split == "test" and k < (SHORT_NO if has_no else SHORT_YES)
                    picked.append(
                        {
                            "id": f"{model}/d{d}/c{t + 1}",
                            "model": model,
                            "dialogue": d,
                            "turn": t,
                            "split": split,
                            "short": short,
                            "reply": reply,
                            "verdicts": verdicts,
                        }
                    )
                    used.add(d)
            turns += picked
    dialogues = {}
    for d in sorted(used):
        record = dataset[d]
        last = max(t["turn"] for t in turns if t["dialogue"] == d)
        conv = record["whole_conv"][: last + 1]
        relations = _relations(record.get("structure"), len(record["whole_conv"]))
        dialogues[str(d)] = {
            "task": record["conv_task"].split(":")[0].strip(),
            "user_type": "professional" if record.get("user_type") == 1 else "non-professional",
            "split": split_of[d],
            "turns": [
                {
                    "prompt": c["user prompt"],
                    "answer": c["assistant answer"],
                    "relation": relations[t],
                    "items": [{"type": x["type"], "question": x["content"]} for x in c["constraints"]],
                }
                for t, c in enumerate(conv)
            ],
        }
    return {
        "schema": "ifgym.judge_real/v1",
        "source": {"repository": "https://github.com/MLGroupJLU/StructFlowBench", "commit": commit},
        "reference_judge": "gpt-4o (StructFlowBench's evaluate.py, its released verdicts)",
        "sampling": {
            "seed": SEED,
            "models": list(MODELS),
            "held_out": list(HELD_OUT),
            "per_model_and_split": {"turns_with_a_no": NO_TURNS, "turns_all_yes": YES_TURNS},
            "short_per_model": {"turns_with_a_no": SHORT_NO, "turns_all_yes": SHORT_YES},
            "max_reply_chars": MAX_REPLY_CHARS,
            "max_prompt_chars": MAX_PROMPT_CHARS,
            "split": "by dialogue: StructFlowBench's 155 dialogues shuffled with the seed, first half dev",
        },
        "dialogues": dialogues,
        "turns": turns,
    }


def main() -> None:
    """Build, write suite.json and SOURCE, print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git clone of MLGroupJLU/StructFlowBench")
    parser.add_argument("--commit", default=COMMIT)
    args = parser.parse_args()
    suite = build(args.repo, args.commit)
    OUT.mkdir(parents=True, exist_ok=True)
    text = json.dumps(suite, ensure_ascii=False, indent=1) + "\n"
    (OUT / "suite.json").write_text(text, encoding="utf-8")
    (OUT / "LICENSE").write_bytes(_show(args.repo, args.commit, "LICENSE"))
    items = [v for t in suite["turns"] for v in t["verdicts"]]
    per_split = {
        s: (
            sum(t["split"] == s for t in suite["turns"]),
            sum(len(t["verdicts"]) for t in suite["turns"] if t["split"] == s),
        )
        for s in ("dev", "test")
    }
    digest = hashlib.sha256(text.encode()).hexdigest()
    files = "\n".join(f"  evaluation/output/evaluation/{m}_evaluate.json (replies and GPT-4o verdicts)" for m in MODELS)
    (OUT / "SOURCE").write_text(
        "StructFlowBench's released evaluation outputs (MIT licence, see LICENSE in this folder): a seeded sample.\n\n"
        f"repository: https://github.com/MLGroupJLU/StructFlowBench\ncommit:     {args.commit}\nfiles:\n"
        f"  StructFlowBench.json (the dialogues: requests, golden answers, checklists)\n{files}\n\n"
        f"built by:   python benchmarks/build_judge_suite.py --repo <clone> (seed {SEED})\n"
        f"suite.json: sha256 {digest}\n"
        f"            {len(suite['turns'])} turns, {len(items)} items, {items.count('no')} judged No by GPT-4o; "
        f"dev {per_split['dev'][0]} turns / {per_split['dev'][1]} items, "
        f"test {per_split['test'][0]} turns / {per_split['test'][1]} items\n"
        f"held out (not in the suite): {', '.join(HELD_OUT)}\n",
        encoding="utf-8",
    )
    print((OUT / "SOURCE").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
