"""Build the learned checklist judge's training data and evaluation splits from StructFlowBench's release.

    python benchmarks/build_judge_train.py --repo /path/to/StructFlowBench [--commit 5a65141d...] [--out FILE]

`--repo` is a git clone of github.com/MLGroupJLU/StructFlowBench (MIT); files are read at `--commit`
with `git show`, as `benchmarks/build_judge_suite.py` reads them for the judge audit's real suite.
Writes one JSON file (default `$IFGYM_CACHE/learned_judge/judge_train.json`), the same bytes from the
same release: nothing in it depends on the machine, the clock or the order files are listed in.

The splits, leave-models-out and leave-dialogues-out at once:

- dialogues: the real suite's own split (`build_judge_suite.SEED`, StructFlowBench's 155 dialogues
  shuffled, first half dev). Its dev dialogues are for training, its test dialogues for evaluation,
  so the real suite's test turns are never trained on and no dialogue is in both.
- training dialogues are shuffled again with `SEED` and cut into `fit` (the model's weights) and
  `tune` (`TUNE_SHARE` of them: choosing among candidates and the yes threshold).
- models: the real suite's ten models give `fit`, `tune`, and `seen_models` (their replies on the
  evaluation dialogues); Mistral-7B, Llama-3.1-8B and Qwen2.5-7B (`build_judge_suite.HELD_OUT`) give
  only `held_out_models`, their replies on the evaluation dialogues: never trained or tuned on.

A turn is kept when the benchmark judged it with one verdict per checklist item, each "Yes" or "No"
(turns with another answer, e.g. "N/A", are counted in `dropped`). Earlier turns are the golden ones
the benchmark's judge saw; they live once per dialogue under `dialogues`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the suite builder beside this file
from build_judge_suite import COMMIT, HELD_OUT, MODELS, _relations, _show  # noqa: E402
from build_judge_suite import SEED as SUITE_SEED  # noqa: E402

SEED = 42
TUNE_SHARE = 0.25
SCHEMA = "ifgym.judge_train/v1"
SPLITS = ("fit", "tune", "seen_models", "held_out_models")


def dialogue_splits(n: int) -> dict[int, str]:
    """Each dialogue's part: the real suite's dev half cut into fit and tune, its test half for evaluation."""
    order = list(range(n))
    random.Random(SUITE_SEED).shuffle(order)  # exactly build_judge_suite's split
    suite_split = {d: ("dev" if k < n // 2 else "test") for k, d in enumerate(order)}
    train = sorted(d for d in range(n) if suite_split[d] == "dev")
    random.Random(SEED).shuffle(train)
    tune = set(train[: round(len(train) * TUNE_SHARE)])
    return {d: ("eval" if suite_split[d] == "test" else "tune" if d in tune else "fit") for d in range(n)}


def build(repo: Path, commit: str) -> dict:
    """The training data as written to the output file."""
    if set(MODELS) & set(HELD_OUT):
        raise SystemExit("a model is both trained on and held out")
    dataset = json.loads(_show(repo, commit, "StructFlowBench.json"))
    part = dialogue_splits(len(dataset))
    turns, dropped = [], 0
    for model in (*MODELS, *HELD_OUT):
        evaluated = json.loads(_show(repo, commit, f"evaluation/output/evaluation/{model}_evaluate.json"))
        if len(evaluated) != len(dataset):
            raise SystemExit(f"{model}: {len(evaluated)} records, the dataset has {len(dataset)}")
        for d, record in enumerate(evaluated):
            if part[d] == "eval":
                split = "held_out_models" if model in HELD_OUT else "seen_models"
            elif model in HELD_OUT:
                continue  # held-out models' replies on training dialogues: never used
            else:
                split = part[d]
            for t, turn in enumerate(record["whole_conv"]):
                gold = dataset[d]["whole_conv"][t]
                if turn["user prompt"] != gold["user prompt"] or [c["content"] for c in turn["constraints"]] != [
                    c["content"] for c in gold["constraints"]
                ]:
                    raise SystemExit(f"{model} record {d} turn {t}: differs from StructFlowBench.json")
                results = turn.get("judge result")
                answers = [r.get("judgement") for r in results] if isinstance(results, list) else []
                if len(answers) != len(turn["constraints"]) or not set(answers) <= {"Yes", "No"}:
                    dropped += 1
                    continue
                turns.append(
                    {
                        "id": f"{model}/d{d}/c{t + 1}",
                        "model": model,
                        "dialogue": d,
                        "turn": t,
                        "split": split,
                        "reply": turn["response"],
                        "verdicts": [a.lower() for a in answers],
                    }
                )
    dialogues = {}
    for d, record in enumerate(dataset):
        relations = _relations(record.get("structure"), len(record["whole_conv"]))
        dialogues[str(d)] = {
            "task": record["conv_task"].split(":")[0].strip(),
            "part": part[d],
            "turns": [
                {
                    "prompt": c["user prompt"],
                    "answer": c["assistant answer"],
                    "relation": relations[t],
                    "items": [{"type": x["type"], "question": x["content"]} for x in c["constraints"]],
                }
                for t, c in enumerate(record["whole_conv"])
            ],
        }
    return {
        "schema": SCHEMA,
        "source": {"repository": "https://github.com/MLGroupJLU/StructFlowBench", "commit": commit},
        "reference_judge": "gpt-4o (StructFlowBench's evaluate.py, its released verdicts)",
        "sampling": {
            "seed": SEED,
            "suite_seed": SUITE_SEED,
            "tune_share": TUNE_SHARE,
            "models": list(MODELS),
            "held_out": list(HELD_OUT),
            "splits": {
                "fit": "the real suite's ten models on its dev dialogues, less the tune ones",
                "tune": f"the same models on {TUNE_SHARE:.0%} of the dev dialogues (seeded): choosing, never fitting",
                "seen_models": "the same models on the real suite's test dialogues",
                "held_out_models": "the held-out models on the real suite's test dialogues",
            },
        },
        "dropped_turns": dropped,
        "dialogues": dialogues,
        "turns": turns,
    }


def write(data: dict, out: Path) -> str:
    """Write the data as the file's bytes; return their sha256."""
    text = json.dumps(data, ensure_ascii=False, indent=None, separators=(",", ":")) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def counts(data: dict) -> dict[str, tuple[int, int, int]]:
    """Per split: (turns, items, items the reference answered no)."""
    out = {}
    for split in SPLITS:
        verdicts = [v for t in data["turns"] if t["split"] == split for v in t["verdicts"]]
        out[split] = (sum(t["split"] == split for t in data["turns"]), len(verdicts), verdicts.count("no"))
    return out


def default_out() -> Path:
    from ifgym.llm.models import default_cache_dir

    return default_cache_dir() / "learned_judge" / "judge_train.json"


def main() -> None:
    """Build, write, print the counts and the file's sha256."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git clone of MLGroupJLU/StructFlowBench")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--out", type=Path, default=None, help="default: $IFGYM_CACHE/learned_judge/judge_train.json")
    args = parser.parse_args()
    out = args.out or default_out()
    data = build(args.repo, args.commit)
    digest = write(data, out)
    print(f"{out}: {out.stat().st_size} bytes, sha256 {digest}; {data['dropped_turns']} turns dropped")
    for split, (n_turns, n_items, n_no) in counts(data).items():
        print(f"  {split:16} {n_turns:5} turns {n_items:6} items {n_no:5} judged No")


if __name__ == "__main__":
    main()
