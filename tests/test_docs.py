"""The README works as written: its loop runs (a stand-in policy, then the real one over HTTP); and the docs'
list of config options (the Served models page) is the one on disk (as `ifgym --help` prints it)."""

from __future__ import annotations

import re
from pathlib import Path

from support.canned_server import CannedServer

from ifgym.cli import main, option_lines

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SERVED_MODELS = ROOT / "docs" / "served-models.md"


def section(title: str, page: Path = README) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_the_readme_loop_runs_as_written_with_the_stand_in_then_the_real_model(monkeypatch, capsys):
    stand_in, loop, real = blocks(section("The loop"), "python")
    scope: dict = {}
    exec(compile(stand_in, "README stand-in", "exec"), scope)
    exec(compile(loop, "README loop", "exec"), scope)
    first = scope["episode"]
    assert first.turns and first.done_reason in ("patience", "max_turns")
    assert all(t.reply == "Sure! Here is my answer." for t in first.turns)

    with CannedServer(replies=["A real answer."], model="my-model") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-readme")
        exec(compile(real, "README real model", "exec"), scope)
        exec(compile(loop, "README loop", "exec"), scope)
    second = scope["episode"]
    assert [t.reply for t in second.turns] == ["A real answer."] * len(second.turns)
    assert len(server.requests) == len(second.turns)  # one model call per turn, through HTTP
    assert server.headers[0]["authorization"] == "Bearer sk-readme"  # the key as the openai client reads it
    assert capsys.readouterr().out  # the loop prints each turn's constraints and verdicts


def test_the_docs_and_help_list_the_config_options_on_disk(capsys):
    conf = ROOT / "conf"
    on_disk = [
        f"{group}={{{', '.join(sorted(p.stem for p in (conf / group).glob('*.yaml')))}}}"
        for group in ("env", "policy", "judge", "logger", "trainer")
    ]
    assert option_lines() == on_disk
    text = section("Evaluate any OpenAI-compatible model", SERVED_MODELS)
    listed = text.split("<!-- config-options:", 1)[1]
    (block,) = blocks(listed, "text")[:1]
    assert block.splitlines() == on_disk, "update the option list in docs/served-models.md to:\n" + "\n".join(on_disk)
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    assert all(f"  {line}" in help_text for line in on_disk)
