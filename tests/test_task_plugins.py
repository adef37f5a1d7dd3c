"""A task of another package's: installed into a fresh venv from its folder, evaluated through the CLI.

`tests/data/example_task` is such a package: its `ifgym.tasks` entry point registers the env id
`example/Echo-v0` and the task descriptor `echo`. The venv sees this interpreter's packages (ifgym
included) through a .pth file; pip installs the example without its dependencies, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from ifgym.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "example_task"


def fresh_venv(folder: Path) -> Path:
    """A venv in `folder` that sees this interpreter's site-packages (and so ifgym); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    # addsitedir, not a bare path line: the .pth files there (the editable ifgym, the shared packages) run too
    ours = site.getsitepackages()
    Path(purelib, "current-site.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in ours) + "\n"
    )
    return python


def test_an_unknown_env_id_names_the_ids_there_are(tmp_path, capsys):
    # this environment has no task package giving example/Echo-v0
    assert main(["eval", "env.id=example/Echo-v0", "policy=scripted", f"output={tmp_path / 'e.jsonl'}"]) == 2
    err = capsys.readouterr().err
    assert "env.id=example/Echo-v0" in err and "ifgym's ids: ifgym/EvolIF-v1" in err


def test_an_installed_task_package_is_evaluated_through_the_cli(tmp_path):
    python = fresh_venv(tmp_path / "venv")
    package = shutil.copytree(EXAMPLE, tmp_path / "example_task")  # its build files go there, not into the repo
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps"]
        + ["--no-build-isolation", "--no-index", str(package)],
        check=True,
        timeout=300,
    )
    out = tmp_path / "run" / "episodes.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}  # the policy: tests/support/own_policies.py
    done = subprocess.run(
        [str(python), "-m", "ifgym.cli", "eval", "env.id=example/Echo-v0", "+env.turns=2"]
        + ["policy=custom", "policy._target_=support.own_policies.QuotedWordAgent"]
        + ["episodes=3", f"output={out}", "progress=false", "plots=false"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["env_id"] for e in episodes] == ["example/Echo-v0"] * 3
    assert [len(e["turns"]) for e in episodes] == [2, 2, 2]  # its own argument, turns=2
    assert {e["meta"]["task"] for e in episodes} == {"echo"}
    # every reply starts with the word asked for, which the package's rule checks: all pass
    for turn in (t for e in episodes for t in e["turns"]):
        word = turn["user"].split("'")[1]
        assert turn["reply"].startswith(word.capitalize()) and [v["label"] for v in turn["verdicts"]] == ["yes"]
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["strict"]["pass_rate"] == 1.0 and summary["headline_metric"] == "pass_rate"
    assert "pass_rate" in done.stdout
