"""Read an offline W&B run back with W&B's own reader (`wandb leet inspect`, which reads the run's .wandb file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def inspect(wandb_file: Path, *flags: str) -> str:
    """W&B's own reader of a run's transaction log (the .wandb file an offline run writes), as JSON text."""
    done = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", str(wandb_file), "--json", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def offline_runs(folder: Path) -> list[Path]:
    """The .wandb files of the offline runs written under `folder`."""
    return sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))


def history(wandb_file: Path) -> list[dict[str, Any]]:
    """The run's logged history rows, in order."""
    records = [json.loads(line) for line in inspect(wandb_file).splitlines()]
    return [rec["history"]["item"] for rec in records if rec["type"] == "history"]
