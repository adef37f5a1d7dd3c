"""The documentation site works as written: every ```python block of docs/*.md runs, and the site builds strictly.

Each block runs in a fresh namespace, in a temporary working folder (a block that writes files writes them
there), with W&B offline; the env ids a block registers are unregistered after it. A block that cannot run
in the tests (it needs a served model, a GPU or a dataset ifgym does not ship) is marked on its page, on the
line right before it, with `<!-- not run: the reason -->`; the marked blocks are counted and their reasons
shown (a warning in pytest's summary), never skipped in silence.
The README's own loop and the pages' snippets of it run in tests/test_docs.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from gymnasium.envs.registration import registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```$", flags=re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\s*\Z")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, reason not run or None) of each ```python block of a Markdown page."""
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        mark = NOT_RUN.search(before)
        found.append((before.count("\n") + 1, match.group(1), mark.group(1) if mark else None))
    return found


def all_blocks() -> list[tuple[str, int, str, str | None]]:
    return [
        (page.relative_to(ROOT).as_posix(), line, code, reason)
        for page in sorted(DOCS.rglob("*.md"))
        for line, code, reason in python_blocks(page.read_text(encoding="utf-8"))
    ]


BLOCKS = all_blocks()
TO_RUN = [(page, line, code) for page, line, code, reason in BLOCKS if reason is None]
NOT_RUN_REASONS = [(page, line, reason) for page, line, _, reason in BLOCKS if reason is not None]


def test_blocks_are_found_and_marks_are_read():
    text = (
        "Intro.\n\n```python\nx = 1\n```\n\n<!-- not run: needs a served model -->\n```python\ny = 2\n```\n"
        "\n```bash\nls\n```\n\n```python\nz = 3\n```\n"
    )
    assert python_blocks(text) == [(3, "x = 1\n", None), (8, "y = 2\n", "needs a served model"), (16, "z = 3\n", None)]
    # a mark applies only to the block right after it
    assert python_blocks("<!-- not run: r -->\nText.\n```python\nx\n```\n") == [(3, "x\n", None)]


def test_the_pages_have_blocks_to_run():
    # the Environments page's composite example at least: an empty list would make the test below vacuous
    assert any(page == "docs/environments.md" for page, _, _ in TO_RUN)


def test_blocks_not_run_are_counted_with_their_reasons():
    for page, line, reason in NOT_RUN_REASONS:
        assert reason.strip(), f"{page}:{line}: a `not run` mark needs a reason"
    if NOT_RUN_REASONS:
        listed = "; ".join(f"{page}:{line} ({reason})" for page, line, reason in NOT_RUN_REASONS)
        warnings.warn(f"{len(NOT_RUN_REASONS)} docs block(s) not run: {listed}", stacklevel=1)
    print(f"docs python blocks: {len(TO_RUN)} run, {len(NOT_RUN_REASONS)} not run")


@pytest.mark.parametrize(("page", "line", "code"), TO_RUN, ids=[f"{p}:{n}" for p, n, _ in TO_RUN])
def test_a_docs_python_block_runs(page, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    registered = set(registry)
    scope: dict = {"__name__": "__docs__"}
    try:
        exec(compile(code, f"{page}:{line}", "exec"), scope)  # noqa: S102 (the docs' own code)
    finally:
        for env_id in set(registry) - registered:  # env ids a block registers (a task of one's own) go with it
            del registry[env_id]


def test_the_site_builds_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (make installs the docs extra)")
    site = tmp_path / "site"
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file() and (site / "api" / "core" / "index.html").is_file()
    loop = (site / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert "my_model" in loop  # the README's loop, included from the README itself
