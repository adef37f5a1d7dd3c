"""Agreement with EvolIF's own evaluator: `python benchmarks/evolif_agreement.py PATH [--show N]`.

PATH is a JSONL file, or a folder of them, holding pairs of an EvolIF instruction and a real reply
with the verdict EvolIF's released evaluator gave. Two line shapes are read:

- a pair: `{"id": "format", "args": {"mode": "json"}, "reply": "...", "evolif": true}`;
- a turn of EvolIF's own evaluation output (its eval.py writes `eval_*.jsonl`):
  `{"instructions": [{"id", "args", ...}, ...], "response": "...", "eval": {"details": {id: bool}}}`,
  one pair per rule-checked instruction.

For every pair the reply is checked with ifgym's strict and loose rules and with
`semantics="evolif"`, and the table gives, per EvolIF instruction id, the share of pairs whose
verdict equals EvolIF's. Judged instructions (emotion, reader_age, style) are skipped: a model
scores them, not a rule. An instruction ifgym refuses to read counts as a disagreement in every
column and is listed. No such data ships with ifgym (it carries no licence for redistribution):
point PATH at files kept outside the repository.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from ifgym.core.evolif import from_evolif
from ifgym.errors import IfgymError
from ifgym.rewards import check

JUDGED = ("emotion", "reader_age", "style")
COLUMNS = ("strict", "loose", "evolif")


def read_pairs(path: Path) -> list[dict]:
    """Every (id, args, reply, evolif) pair in a JSONL file or a folder of them (sorted by name)."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"{path}: no .jsonl files")
    pairs = []
    for file in files:
        for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "instructions" in row:
                details = row["eval"]["details"]
                for inst in row["instructions"]:
                    if inst["id"] not in JUDGED and inst["id"] in details:
                        verdict = bool(details[inst["id"]])
                        pair = {"id": inst["id"], "args": inst["args"], "reply": row["response"], "evolif": verdict}
                        pairs.append({**pair, "where": f"{file.name}:{lineno}"})
            elif row.get("id") not in JUDGED:
                pairs.append({**row, "evolif": bool(row["evolif"]), "where": f"{file.name}:{lineno}"})
    return pairs


def measure(pairs: list[dict]) -> tuple[dict[str, Counter], list[dict], list[dict]]:
    """Per instruction id: pairs, EvolIF yes, and agreements per column; plus refusals and evolif misses."""
    table: dict[str, Counter] = defaultdict(Counter)
    refused, misses = [], []
    for pair in pairs:
        row = table[pair["id"]]
        row["pairs"] += 1
        row["evolif yes"] += pair["evolif"]
        try:
            constraint = from_evolif(pair["id"], pair["args"])
        except IfgymError as err:
            refused.append({**pair, "error": str(err)})
            continue
        verdicts = {
            "strict": check(constraint, pair["reply"]),
            "loose": check(constraint, pair["reply"], loose=True),
            "evolif": check(constraint, pair["reply"], semantics="evolif"),
        }
        for column, verdict in verdicts.items():
            row[column] += (verdict.label == "yes") == pair["evolif"]
        if (verdicts["evolif"].label == "yes") != pair["evolif"]:
            misses.append({**pair, "ours": verdicts["evolif"].reason})
    return table, refused, misses


def render(table: dict[str, Counter]) -> str:
    """Agreement per instruction id and overall, as aligned text."""
    total: Counter = sum(table.values(), Counter())
    lines = [f"{'instruction':<15} {'pairs':>6} {'EvolIF yes':>10}  " + "  ".join(f"{c:>7}" for c in COLUMNS)]
    for name, row in [*sorted(table.items()), ("all", total)]:
        n = row["pairs"]
        cells = "  ".join(f"{100 * row[c] / n:6.1f}%" for c in COLUMNS)
        lines.append(f"{name:<15} {n:>6} {100 * row['evolif yes'] / n:9.1f}%  {cells}")
    return "\n".join(lines)


def main() -> None:
    """Read the pairs, print the agreement table, the refused instructions and some evolif misses."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="pairs JSONL, EvolIF eval_*.jsonl, or a folder of them")
    parser.add_argument("--show", type=int, default=5, help="semantics='evolif' disagreements to print")
    args = parser.parse_args()
    table, refused, misses = measure(read_pairs(args.path))
    print("agreement with EvolIF's evaluator (share of pairs with the same verdict)\n")
    print(render(table))
    print(f"\nrefused by from_evolif: {len(refused)}")
    for pair in refused[:10]:
        print(f"  {pair['where']}: {pair['error']}")
    print(f"semantics='evolif' disagreements: {len(misses)}")
    for pair in misses[: args.show]:
        instruction = f"{pair['id']} {json.dumps(pair['args'], ensure_ascii=False)}"
        print(f"  {pair['where']} {instruction}: EvolIF {'yes' if pair['evolif'] else 'no'}, ours: {pair['ours']}")
        print(f"    reply: {pair['reply'][:160]!r}")


if __name__ == "__main__":
    main()
