"""Write the golden fixtures: `python tests/golden/regenerate.py [CASE ...]` (from the repository root).

Plays every case of `tests/golden/cases.py` (or the named ones) on the sync path and writes
`tests/golden/fixtures/<case>.json`. Regenerate only when behaviour is meant to change, and say in the
commit which numbers changed and why: `tests/test_golden.py` fails on any difference, sync or async.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the `golden` and `support` packages

from golden.cases import CASES, FIXTURES, fixture_path, play  # noqa: E402


def main(names: list[str]) -> None:
    """Regenerate the fixtures of `names` (all cases when empty)."""
    known = {case.name: case for case in CASES}
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown golden case(s) {unknown}; known: {', '.join(known)}")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for case in [known[n] for n in names] or CASES:
        record = play(case, "sync")
        text = json.dumps(record, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
        fixture_path(case).write_text(text, encoding="utf-8")
        print(f"{case.name}: {len(record['episodes'])} episodes, {len(text) // 1024} KiB")


if __name__ == "__main__":
    main(sys.argv[1:])
