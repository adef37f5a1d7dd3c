"""A run folder is ifgym's before anything is written into it, and every ending leaves records that agree.

Real `ifgym eval` runs (`ifgym.cli.main`, or a process where signals or kill -9 are needed) against
CannedServer, a real OpenAI-compatible server on 127.0.0.1. A refused run is compared with the
folder byte for byte: every file's bytes and every folder, as they were before it.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import time
from pathlib import Path

from support.canned_judges import yes_sayer
from support.canned_server import CannedServer, eval_args
from support.eval_process import lines, start_eval, wait_for_lines

from ifgym.cli import main


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under `root`, by relative path."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def records(folder: Path) -> tuple[dict, dict]:
    """summary.json and run.json of a run folder."""
    return json.loads((folder / "summary.json").read_text()), json.loads((folder / "run.json").read_text())


# --- refused runs change no byte ------------------------------------------------------------------------------


def test_a_rerun_of_another_configuration_is_refused_and_changes_no_byte(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."]) as server:
        assert main(eval_args(server, out, 2)) == 0
        assert (tmp_path / ".hydra" / "overrides.yaml").is_file()  # Hydra's record, written by ifgym
        before = snapshot(tmp_path)
        capsys.readouterr()
        assert main([*eval_args(server, out, 2), "env.max_turns=3"]) == 2
    err = capsys.readouterr().err
    assert "holds the run record of another configuration" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before
    assert records(tmp_path)[1]["status"] == "finished"


def test_a_second_writer_with_other_overrides_leaves_the_live_runs_hydra_record_and_run_json(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], delay=0.1) as server:
        args = [*eval_args(server, out, 40), "concurrency=1"]
        proc = start_eval(args, tmp_path)
        wait_for_lines(out, 2, proc)
        kept = [tmp_path / "run.json", *sorted((tmp_path / ".hydra").iterdir())]
        before = {p: p.read_bytes() for p in kept}
        assert b"episodes=40" in before[tmp_path / ".hydra" / "overrides.yaml"]
        assert main([*eval_args(server, out, 25), "seed=5"]) == 2
        assert f"is being written by another ifgym run (pid {proc.pid})" in capsys.readouterr().err
        assert {p: p.read_bytes() for p in kept} == before
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            ".episodes.jsonl.lock",
            ".hydra",
            "episodes.jsonl",
            "run.json",
        ]
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    assert proc.returncode == 143


def test_a_folder_of_foreign_files_is_refused_untouched(tmp_path, capsys):
    cases = {
        "episodes": {"episodes.jsonl": b"my own notes\nnot episodes\n"},
        "run_json": {"run.json": b'{"experiment": "mine", "seed": 3}\n'},
        "summary": {"summary.json": b'{"accuracy": 0.5}\n'},
        "hydra": {".hydra/config.yaml": b"lr: 0.1\n"},
        "plot": {"survival.png": b"\x89PNG my own figure"},
    }
    with CannedServer(replies=["Fine."]) as server:
        for name, files in cases.items():
            folder = tmp_path / name
            for rel, data in files.items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(data)
            (folder / "notes.txt").write_text("mine\n")
            before = snapshot(folder)
            capsys.readouterr()
            assert main(eval_args(server, folder / "episodes.jsonl", 1)) == 2, name
            err = capsys.readouterr().err
            assert err.startswith("ifgym: error: ") and err.count("\n") == 1, err
            assert snapshot(folder) == before, name
        assert server.requests == []  # refused before any episode


def test_a_judge_refused_by_its_audit_leaves_no_folder_and_a_users_folder_as_it_was(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    before = snapshot(mine)
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        for out in (tmp_path / "runs" / "new" / "e.jsonl", mine / "e.jsonl"):
            args = ["eval", "judge=llm", f"judge.llm.base_url={server.base_url}", "judge.llm.model=canned-model"]
            args += ["policy=scripted", "episodes=2", "env.max_turns=2", f"output={out}", "progress=false"]
            assert main(args) == 2
            assert "fails its audit" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # the folders it made are gone again
    assert snapshot(mine) == before


# --- resume keeps what is complete ----------------------------------------------------------------------------


def test_a_last_record_without_its_newline_is_kept_and_not_played_again(tmp_path):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."]) as server:
        assert main([*eval_args(server, out, 3), "concurrency=1"]) == 0
        whole = out.read_bytes()
        out.write_bytes(whole.rstrip(b"\n"))  # the last append lost only its newline
        assert main([*eval_args(server, out, 4), "concurrency=1"]) == 0
    assert out.read_bytes().startswith(whole)  # the three records as they were, the newline back
    assert [e["seed"] for e in lines(out)] == [0, 1, 2, 3]


def test_a_garbage_line_mid_file_refuses_the_rerun_and_leaves_the_finished_records_agreeing(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."]) as server:
        assert main(eval_args(server, out, 3)) == 0
        first, *rest = out.read_bytes().splitlines(keepends=True)
        out.write_bytes(first + b"garbage\n" + b"".join(rest))
        before = snapshot(tmp_path)
        capsys.readouterr()
        assert main(eval_args(server, out, 3)) == 2
    assert f"{out}:2: not an episode record" in capsys.readouterr().err
    assert snapshot(tmp_path) == before
    summary, record = records(tmp_path)
    assert summary["ending"]["status"] == record["status"] == "finished"


# --- endings -----------------------------------------------------------------------------------------------------


def test_after_kill_9_view_and_the_resume_say_the_summary_is_stale(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], delay=0.1) as server:
        assert main(eval_args(server, out, 2)) == 0  # an earlier ending: 2 episodes, finished
        old_summary, _ = records(tmp_path)
        args = [*eval_args(server, out, 12), "concurrency=1"]
        proc = start_eval(args, tmp_path)
        wait_for_lines(out, 4, proc)
        proc.kill()
        proc.communicate(timeout=60)
        killed = json.loads((tmp_path / "run.json").read_text())
        capsys.readouterr()
        assert main(["view", str(tmp_path)]) == 0
        err = capsys.readouterr().err
        assert f"says the run started {killed['started']} (pid {proc.pid}) is running" in err
        assert "it was killed; resume with: ifgym eval" in err
        stale = f"{tmp_path / 'summary.json'} is stale: it tells the ending of an earlier session"
        assert stale in err and "finished, 2 episodes" in err
        page = (tmp_path / "report.html").read_text()
        assert "is stale: it tells the ending of an earlier session" in page
        assert main(args) == 0
        assert stale in capsys.readouterr().err
    summary, record = records(tmp_path)
    assert summary["run"]["started"] == record["started"] != old_summary["run"]["started"]
    assert summary["episodes"] == 12 and summary["ending"]["status"] == record["status"] == "finished"


def test_two_ctrl_c_20_ms_apart_still_leave_a_summary_that_agrees_with_run_json(tmp_path):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], delay=0.1) as server:
        proc = start_eval([*eval_args(server, out, 30), "concurrency=2"], tmp_path)
        wait_for_lines(out, 2, proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    summary, record = records(tmp_path)
    assert summary["ending"]["status"] == record["status"] == "interrupted"
    assert summary["run"]["started"] == record["started"] and summary["episodes"] == record["episodes"]


def test_ctrl_c_during_start_up_prints_one_line(tmp_path):
    # from the first line of ifgym's code on (before it, only Python's own start-up: the site module)
    interrupted, crashed = 0, []
    for delay in (0.2, 0.4, 0.6, 0.8, 1.0):
        proc = start_eval(["eval", "policy=scripted", "episodes=2", f"output={tmp_path / 'e.jsonl'}"], tmp_path)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        if proc.returncode == 0 or stderr.startswith("concurrency:"):  # past start-up: the run's own ending
            continue
        if proc.returncode < 0:  # killed by the signal before Python could raise it (its start-up, an extension)
            crashed.append((delay, proc.returncode))
            continue
        interrupted += 1
        assert proc.returncode == 130 and stderr == "ifgym: interrupted (Ctrl-C)\n", (delay, stderr)
    assert interrupted >= 2, crashed


def test_the_printed_resume_command_with_a_header_runs_as_printed(tmp_path, capsys, monkeypatch):
    out = tmp_path / "episodes.jsonl"
    header = "canary-header-5e0b"
    with CannedServer(replies=["Fine."], faults=[(500, {})]) as server:
        args = [*eval_args(server, out, 3), "concurrency=1", "policy.llm.max_retries=0"]
        assert main([*args, f"+policy.llm.headers={{X-Gateway-Key:{header}}}"]) == 3  # stopped by its first failure
        printed = capsys.readouterr().err
        summary, record = records(tmp_path)
        assert header not in json.dumps(summary) + json.dumps(record) + printed
        variable = "IFGYM_POLICY_LLM_HEADER_X_GATEWAY_KEY"
        assert summary["ending"]["resume_env"] == {variable: "the value of header X-Gateway-Key of policy.llm"}
        match = re.search(rf"resume with: (.*)  \(with {variable} set to the value of header X-Gateway-Key", printed)
        assert match, printed
        command = shlex.split(match[1])
        assert command[:2] == ["ifgym", "eval"] and "<hidden>" not in match[1]
        assert match[1] == summary["ending"]["resume"] == record["command"]
        monkeypatch.setenv(variable, header)
        assert main(command[1:]) == 0
    assert [h.get("x-gateway-key") for h in server.headers] == [header] * len(server.headers)
    assert sorted(e["seed"] for e in lines(out) if not e.get("failed")) == [0, 1, 2]


def test_hydras_own_record_when_asked_for_is_kept_without_credentials(tmp_path):
    header = "canary-header-5e0b"
    with CannedServer(replies=["Fine."]) as server:
        args = [*eval_args(server, tmp_path / "episodes.jsonl", 1), "hydra.output_subdir=.hydra"]
        assert main([*args, f"+policy.llm.headers={{X-Gateway-Key:{header}}}"]) == 0
    written = {p.name: p.read_text() for p in (tmp_path / ".hydra").iterdir()}
    assert sorted(written) == ["config.yaml", "hydra.yaml", "overrides.yaml"]  # Hydra's, as it wrote them
    assert not any(header in text for text in written.values())
    assert "+policy.llm.headers=<hidden>" in written["overrides.yaml"]
