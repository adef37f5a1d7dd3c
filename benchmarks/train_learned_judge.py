"""Train and measure the learned checklist judge on StructFlowBench's released GPT-4o verdicts.

    python benchmarks/build_judge_train.py --repo <StructFlowBench clone>     # the data, once
    nice -n 15 python benchmarks/train_learned_judge.py --seed 0 [--data FILE] [--write]

Candidates, cheapest first, each fitted on the `fit` split and chosen on `tune` (never on the
evaluation splits): a logistic regression over the counted features (`hand`), then with the MiniLM
cosines (`hand+cosines`), then with the question and reply embeddings (`hand+cosines+embeddings`),
and gradient boosting over the counted features and cosines. For each, C (or the boosting's depth)
and the P(yes) threshold are picked by Cohen's kappa on `tune` (`ifgym.rewards.audit.calibrate_threshold`).
The question rules decide what they decide in every measurement; only the other items reach a model.

Reported on `tune`, `seen_models` (the ten models on dialogues never trained on), `held_out_models`
(Mistral-7B, Llama-3.1-8B, Qwen2.5-7B on those dialogues) and the judge audit's real suite test split:
agreement, kappa, "yes" on the reference's "no", per constraint type, with 95% bootstrap intervals over
turns (`ifgym.rewards.audit.real_intervals`), and the shipped judge's items per second end to end.
`--write` writes the best linear candidate's weights and provenance to rewards/assets/learned_judge/,
and the measured numbers to benchmarks/results/learned_judge.json. MiniLM embeddings are cached under
$IFGYM_CACHE/learned_judge/ (a rerun does not embed again).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from build_judge_train import default_out  # noqa: E402

from ifgym.core import ChecklistItem, TurnSpec  # noqa: E402
from ifgym.core.structflow import STRUCTURAL_TYPES, TYPE_WEIGHTS  # noqa: E402
from ifgym.rewards.audit import (  # noqa: E402
    REAL_FLOOR,
    GoldItem,
    calibrate_threshold,
    load_real,
    measure,
    probes,
    real_intervals,
)
from ifgym.rewards.questions import question_rule  # noqa: E402
from ifgym.rewards.structflow.learned import (  # noqa: E402
    BLOCKS,
    COSINE_NAMES,
    HAND_NAMES,
    WEIGHTS_PATH,
    FeatureInput,
    Featurizer,
    LearnedChecklistJudge,
    LinearModel,
)

EVAL_SPLITS = ("tune", "seen_models", "held_out_models", "real_test")
CANDIDATES = ("always_yes", "lr:hand", "lr:hand+cosines", "lr:hand+cosines+embeddings", "gb:hand+cosines")
C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
DEPTH_GRID = (2, 3, 4)
RESAMPLES, TYPE_RESAMPLES = 500, 200  # bootstrap draws over turns: overall, per constraint type
RESULTS = ROOT / "benchmarks" / "results" / "learned_judge.json"


def _item(question: str, kind: str) -> ChecklistItem:
    structural = kind in STRUCTURAL_TYPES
    return ChecklistItem(
        id="q", question=question, type=kind, kind="structural" if structural else "intra", weight=TYPE_WEIGHTS[kind]
    )


def rows_from_train(data: dict) -> list[dict]:
    """One row per item of the built data: split, turn id, type, relation, gold, the rule's verdict, the input."""
    out = []
    for turn in data["turns"]:
        dialogue = data["dialogues"][str(turn["dialogue"])]
        turns = dialogue["turns"]
        current = turns[turn["turn"]]
        previous = turns[turn["turn"] - 1]["answer"] if turn["turn"] else ""
        for k, (item, gold) in enumerate(zip(current["items"], turn["verdicts"], strict=True)):
            out.append(_row(turn["split"], turn["id"], k, item, current, gold, turn["reply"], previous, turn["turn"]))
    return out


def rows_from_suite(real: dict) -> list[dict]:
    """The judge audit's real suite test split, as rows (the audit's own probes: same history and items)."""
    out = []
    for probe in probes("structflow_real", split="test", real=real):
        request = probe.history[-1]["content"]
        previous = probe.history[-2]["content"] if len(probe.history) > 1 else ""
        turn = sum(m["role"] == "user" for m in probe.history) - 1
        relation = probe.items[0].tags[0].split("/", 1)[1]
        for k, (item, gold) in enumerate(zip(probe.payload, probe.items, strict=True)):
            current = {"prompt": request, "relation": relation}
            raw = {"type": item.type, "question": item.question}
            out.append(_row("real_test", probe.case, k, raw, current, gold.gold, probe.reply, previous, turn))
    return out


def _row(split, turn_id, k, item, current, gold, reply, previous, turn) -> dict:
    rule = question_rule(item["question"])
    return {
        "split": split,
        "turn": turn_id,
        "key": f"{split}:{turn_id}/q{k + 1}",
        "type": item["type"],
        "relation": current["relation"],
        "gold": gold,
        "rule": rule.check(reply).label if rule is not None else None,
        "input": FeatureInput(item["question"], item["type"], reply, current["prompt"], previous, turn),
    }


class CachedEmbedder:
    """MiniLM with an on-disk cache of every text it embedded (keyed by the text's sha256)."""

    def __init__(self, path: Path):
        from ifgym.rewards.structflow.learned import _MiniLM

        self.path, self.model, self.rows = path, _MiniLM(), {}
        if path.is_file():
            with np.load(path, allow_pickle=False) as data:
                self.rows = dict(zip([str(k) for k in data["keys"]], data["rows"], strict=True))
        self.added = 0

    def encode(self, texts):
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        todo = sorted({(k, t) for k, t in zip(keys, texts, strict=True) if k not in self.rows})
        for start in range(0, len(todo), 256):
            chunk = todo[start : start + 256]
            for (k, _), row in zip(chunk, self.model.encode([t for _, t in chunk]), strict=True):
                self.rows[k] = row
            self.added += len(chunk)
            print(f"  embedded {self.added} new texts", file=sys.stderr, flush=True)
        return np.stack([self.rows[k] for k in keys])

    def save(self) -> None:
        if self.added:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            keys = sorted(self.rows)
            np.savez(self.path, keys=np.array(keys), rows=np.stack([self.rows[k] for k in keys]))


def columns(blocks: tuple[str, ...]) -> np.ndarray:
    """The columns of the full matrix (all of BLOCKS) that hold `blocks`."""
    sizes = {"hand": len(HAND_NAMES), "cosines": len(COSINE_NAMES), "embeddings": 3 * 384}
    out, at = [], 0
    for block in BLOCKS:
        if block in blocks:
            out += range(at, at + sizes[block])
        at += sizes[block]
    return np.array(out)


def fit_boosting(x, y, depth, seed):
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(max_depth=depth, learning_rate=0.05, max_iter=300, random_state=seed)
    return model.fit(x, y)


def labels(rows, model_rows, p_yes, threshold):
    """Each row's label: the rule's where it decides, else the model's (`p_yes` of `model_rows`)."""
    said = {row["key"]: ("yes" if p >= threshold else "no") for row, p in zip(model_rows, p_yes, strict=True)}
    return {row["key"]: row["rule"] if row["rule"] is not None else said[row["key"]] for row in rows}


def report(rows, predicted, types: bool = False) -> dict:
    """Agreement, kappa, yes on the reference's no (and no on yes) with intervals; per type with `types`."""
    units: dict[str, list[GoldItem]] = {}
    for row in rows:
        units.setdefault(row["turn"], []).append(GoldItem(row["key"], f"type/{row['type']}", row["gold"], "gpt-4o"))
    items = [i for u in units.values() for i in u]
    out = measure(items, predicted)
    out["turns"] = len(units)
    out["rule_items"] = sum(r["rule"] is not None for r in rows)
    out["ci"] = real_intervals(list(units.values()), predicted, resamples=RESAMPLES, seed=0)
    out["passes_goal"] = not REAL_FLOOR.failures(out)
    for key in ("injected", "injection_flip_rate", "injection_yes_rate"):
        out.pop(key)
    if types:
        out["types"] = {}
        for kind in sorted({r["type"] for r in rows}):
            typed = [[i for i in u if i.group == f"type/{kind}"] for u in units.values()]
            numbers = measure([i for u in typed for i in u], predicted)
            numbers["ci"] = real_intervals(typed, predicted, resamples=TYPE_RESAMPLES, seed=0)
            keep = ("items", "negatives", "accuracy", "kappa", "yes_rate_negatives", "ci")
            out["types"][kind] = {k: numbers[k] for k in keep}
    return out


def throughput(weights: Path, real: dict, repeats: int = 3) -> dict:
    """The shipped judge through the StructFlow scorer on the real suite's test turns: items per second.

    A fresh judge (empty embedding cache) each time: every reply, request and question is embedded.
    """
    from ifgym.rewards.structflow.scorer import StructFlowScorer

    todo = probes("structflow_real", split="test", real=real)
    best = None
    for _ in range(repeats):
        judge = LearnedChecklistJudge(weights)
        judge.featurizer.embed(["warm up"])  # the model's load is not per item
        scorer = StructFlowScorer(judge)
        started = time.perf_counter()
        for probe in todo:
            scorer.score(probe.reply, TurnSpec(checklist=tuple(probe.payload)), probe.history)
        seconds = time.perf_counter() - started
        best = seconds if best is None else min(best, seconds)
    items = sum(len(p.items) for p in todo)
    return {
        "items": items,
        "judged_items": judge.stats["items"],
        "seconds": round(best, 3),
        "items_per_second": round(items / best, 1),
        "torch_threads": _threads(),
    }


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _cell(numbers: dict, key: str) -> str:
    value, ci = numbers.get(key), (numbers.get("ci") or {}).get(key)
    if value is None:
        return "n/a"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.2f}"


NAMES = {
    "tune": "tune (10 models, tuning dialogues)",
    "seen_models": "10 models, unseen dialogues",
    "held_out_models": "3 held-out models, unseen dialogues",
    "real_test": "real suite, test split",
}


def markdown(out: dict) -> str:
    """The measured tables of a results file, as docs/learned_judge.md shows them."""
    lines = [
        "| candidate | split | items (no) | agreement | κ | yes on GPT-4o's no | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, result in out["candidates"].items():
        for split, numbers in result["splits"].items():
            lines.append(
                f"| {name} | {NAMES[split]} | {numbers['items']} ({numbers['negatives']}) | "
                f"{_cell(numbers, 'accuracy')} | {_cell(numbers, 'kappa')} | {_cell(numbers, 'yes_rate_negatives')} | "
                f"{'met' if numbers['passes_goal'] else 'not met'} |"
            )
    chosen = out["candidates"][out["chosen"]]["splits"]
    lines += ["", f"Per constraint type, {out['chosen']}:", ""]
    lines += [
        "| type | held-out models: items (no) | agreement | κ | yes on no | real test: items (no) | agreement | κ |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for kind in sorted(chosen["held_out_models"]["types"]):
        h = chosen["held_out_models"]["types"][kind]
        r = chosen["real_test"]["types"].get(kind)
        real = f"{r['items']} ({r['negatives']}) | {_cell(r, 'accuracy')} | {_cell(r, 'kappa')}" if r else "0 | | "
        lines.append(
            f"| {kind} | {h['items']} ({h['negatives']}) | {_cell(h, 'accuracy')} | {_cell(h, 'kappa')} | "
            f"{_cell(h, 'yes_rate_negatives')} | {real} |"
        )
    if "throughput" in out:
        t = out["throughput"]
        lines += [
            "",
            f"Throughput: {t['items_per_second']} items/s ({t['items']} items of the real suite's test split "
            f"in {t['seconds']} s through the StructFlow scorer, torch threads {t['torch_threads']}).",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None, help="build_judge_train.py's output (default: its default)")
    parser.add_argument("--write", action="store_true", help="write the chosen weights into the package")
    parser.add_argument("--no-embeddings", action="store_true", help="only the candidates without MiniLM")
    parser.add_argument("--candidates", default=",".join(CANDIDATES), help="a comma-separated subset of CANDIDATES")
    parser.add_argument("--table", action="store_true", help="print the tables of the last --write run and stop")
    args = parser.parse_args()
    if args.table:
        print(markdown(json.loads(RESULTS.read_text(encoding="utf-8"))))
        return
    data_path = args.data or default_out()
    if not data_path.is_file():
        raise SystemExit(f"{data_path} not found: run python benchmarks/build_judge_train.py --repo <clone> first")
    raw = data_path.read_bytes()
    data = json.loads(raw)
    real = load_real()
    rows = rows_from_train(data) + rows_from_suite(real)
    by_split = {s: [r for r in rows if r["split"] == s] for s in ("fit", *EVAL_SPLITS)}
    print({s: (len(v), sum(r["gold"] == "no" for r in v)) for s, v in by_split.items()}, file=sys.stderr)

    model_rows = {s: [r for r in v if r["rule"] is None] for s, v in by_split.items()}
    started = time.perf_counter()
    hand = Featurizer(("hand",))
    x = {s: hand.matrix([r["input"] for r in v]) for s, v in model_rows.items()}
    print(f"counted features in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    candidates = [c for c in args.candidates.split(",") if args.no_embeddings is False or "cosines" not in c]
    unknown = [c for c in candidates if c not in CANDIDATES]
    if unknown:
        raise SystemExit(f"--candidates: {unknown} are not among {list(CANDIDATES)}")
    if any("cosines" in c or "embeddings" in c for c in candidates):
        embedder = CachedEmbedder(data_path.parent / "minilm_cache.npz")
        embedded = Featurizer(("cosines", "embeddings"), embedder, cache_size=10**6)
        for s, v in model_rows.items():
            x[s] = np.concatenate([x[s], embedded.matrix([r["input"] for r in v])], axis=1)
            embedder.save()
        print(f"all features in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    y = {s: np.array([r["gold"] == "yes" for r in v]) for s, v in model_rows.items()}

    results, chosen, said = {}, {}, {}
    for name in candidates:
        started = time.perf_counter()
        if name == "always_yes":
            scores = {s: np.ones(len(model_rows[s])) for s in EVAL_SPLITS}
            threshold, setting = 0.5, None
        else:
            kind, blocks = name.split(":")
            cols = columns(tuple(blocks.split("+")))
            best = None
            for setting in C_GRID if kind == "lr" else DEPTH_GRID:
                if kind == "lr":
                    fitted = LinearModel.fit(x["fit"][:, cols], y["fit"], blocks.split("+"), c=setting, seed=args.seed)
                    predict = lambda m, s, cols=cols: m.p_yes(x[s][:, cols])  # noqa: E731
                else:
                    fitted = fit_boosting(x["fit"][:, cols], y["fit"], setting, args.seed)
                    predict = lambda m, s, cols=cols: m.predict_proba(x[s][:, cols])[:, 1]  # noqa: E731
                tuned = calibrate_threshold(list(predict(fitted, "tune")), ["yes" if v else "no" for v in y["tune"]])
                if best is None or (tuned["kappa"] or -2) > (best[0]["kappa"] or -2):
                    best = (tuned, setting, fitted, predict)
            tuned, setting, fitted, predict = best
            threshold = tuned["threshold"]
            scores = {s: predict(fitted, s) for s in EVAL_SPLITS}
            chosen[name] = (setting, fitted, threshold, cols)
        said[name] = {s: labels(by_split[s], model_rows[s], scores[s], threshold) for s in EVAL_SPLITS}
        results[name] = {
            "setting": setting,
            "threshold": threshold,
            "fit_seconds": round(time.perf_counter() - started, 1),
            "splits": {s: report(by_split[s], said[name][s]) for s in EVAL_SPLITS},
        }
        line = "  ".join(
            f"{s} acc {r['accuracy']:.3f} k {r['kappa'] if r['kappa'] is None else round(r['kappa'], 3)} "
            f"yes|no {r['yes_rate_negatives']:.3f}"
            for s, r in results[name]["splits"].items()
        )
        print(f"{name:28} {setting} thr {threshold}  {line}", file=sys.stderr)

    linear = [n for n in candidates if n.startswith("lr:")]
    best_name = max(linear, key=lambda n: results[n]["splits"]["tune"]["kappa"] or -2)  # chosen on tune only
    results[best_name]["splits"] = {s: report(by_split[s], said[best_name][s], types=True) for s in EVAL_SPLITS}
    out = {
        "command": f"python benchmarks/train_learned_judge.py --seed {args.seed}"
        + (f" --candidates {args.candidates}" if args.candidates != ",".join(CANDIDATES) else "")
        + (" --write" if args.write else ""),
        "seed": args.seed,
        "data": {
            "file": data_path.name,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "source": data["source"],
            "sampling": data["sampling"],
            "real_suite": real["source"],
        },
        "items": {
            s: {"all": len(v), "model": len(model_rows[s]), "no": sum(r["gold"] == "no" for r in v)}
            for s, v in by_split.items()
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "candidates": results,
        "chosen": best_name,
    }
    if args.write:
        setting, fitted, threshold, cols = chosen[best_name]
        blocks = fitted.blocks
        WEIGHTS_PATH.parent.mkdir(parents=True, exist_ok=True)
        dataclasses.replace(fitted, threshold=threshold).save(WEIGHTS_PATH)
        out["throughput"] = throughput(WEIGHTS_PATH, real)
        provenance = {
            "model": f"logistic regression (C={setting}) over {'+'.join(blocks)} features, threshold {threshold}",
            "command": out["command"],
            "seed": args.seed,
            "data": out["data"],
            "weights_sha256": hashlib.sha256(WEIGHTS_PATH.read_bytes()).hexdigest(),
            "measured": {
                s: {
                    k: out["candidates"][best_name]["splits"][s][k]
                    for k in ("items", "accuracy", "kappa", "yes_rate_negatives", "ci", "passes_goal")
                }
                for s in EVAL_SPLITS
            },
            "throughput": out["throughput"],
            "licence": "trained on StructFlowBench's released evaluation outputs (MIT, see LICENSE here)",
        }
        (WEIGHTS_PATH.parent / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {WEIGHTS_PATH} ({WEIGHTS_PATH.stat().st_size} bytes) and {RESULTS}", file=sys.stderr)
    print(
        json.dumps(
            {
                n: {s: {k: r[k] for k in ("accuracy", "kappa", "yes_rate_negatives")} for s, r in v["splits"].items()}
                for n, v in results.items()
            },
            indent=1,
        )
    )
    print("chosen:", best_name, Counter(r["type"] for r in model_rows["fit"]).most_common(3), file=sys.stderr)


if __name__ == "__main__":
    main()
