"""A real `ifgym eval` process for tests that send it signals or kill it, and the episodes file it writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def lines(path: Path) -> list[dict]:
    """The episodes file's records (none when it does not exist)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start_eval(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m ifgym.cli *args`, Ctrl-C handled as in a terminal (a background job may inherit SIGINT ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ifgym.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "WANDB_MODE": "disabled", **(env or {})},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen) -> None:
    """Wait until `path` holds `n` lines (a guard against a hang, not a speed check)."""
    deadline = time.monotonic() + 180
    while len(lines(path)) < n:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {n} lines: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {n} lines in {path} after 180 s")
        time.sleep(0.05)
