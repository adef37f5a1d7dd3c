"""Every way `ifgym eval` ends leaves summary.json and run.json saying how, with its own exit status.

The model is CannedServer, a real OpenAI-compatible server on 127.0.0.1: injected 429s/500s stand in for an
overloaded or broken server, a reply delay for a slow one. Signals are sent to a real `ifgym eval` process
once a given number of episodes are in its episodes file.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from support.canned_server import CannedServer, eval_args
from support.eval_process import lines, start_eval, wait_for_lines

from ifgym.cli import main


def records(folder: Path) -> tuple[dict, dict]:
    """summary.json and run.json of a run folder."""
    return json.loads((folder / "summary.json").read_text()), json.loads((folder / "run.json").read_text())


def test_a_healthy_rerun_after_18_of_40_failures_finishes_every_seed_in_one_go(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    # the server answers 429 to the first 18 requests (one per episode: no retries), then recovers
    with CannedServer(replies=["Fine."], faults=[(429, {})] * 18) as server:
        args = [*eval_args(server, out, 40), "concurrency=1"]
        assert main([*args, "policy.llm.max_retries=0", "max_failure_rate=1"]) == 1
        summary, record = records(tmp_path)
        assert summary["failures"]["episodes"] == 18 and summary["episodes"] == 22
        assert summary["ending"]["status"] == record["status"] == "finished_with_failures"
        assert summary["ending"]["unplayed_seeds"] == [] and summary["ending"]["resume"].startswith("ifgym eval")
        capsys.readouterr()
        # the rerun (default max_failure_rate=0.2) is not stopped by the 18 failures it has yet to retry
        assert main(args) == 0
    assert capsys.readouterr().err.count("ifgym:") == 0
    assert len(lines(out)) == 40 + 18  # each failed seed retried once, the failed lines kept as history
    summary, record = records(tmp_path)
    assert summary["episodes"] == 40 and summary["failures"]["episodes"] == 0
    assert summary["ending"] == {"status": "finished", "reason": None, "unplayed_seeds": [], "resume": None}
    assert record["status"] == "finished" and record["episodes"] == 40


def test_a_run_stopped_early_writes_its_summary_names_the_unplayed_seeds_and_exits_3(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], faults=[(500, {})] * 100) as server:
        args = [*eval_args(server, out, 40), "concurrency=1", "policy.llm.max_retries=0"]
        assert main(args) == 3
    err = capsys.readouterr().err.strip().splitlines()
    # 0.2 x 40 = 8 failures allowed: the ninth stops the run, whatever the other 31 would do
    assert err[-1].startswith("ifgym: stopped early: 9 of the 40 episodes this run plays have failed")
    assert "(0 finished, 9 failed, 31 never played); resume with: ifgym eval policy=openai" in err[-1]
    assert not any(line.startswith("ifgym: error") for line in err)
    summary, record = records(tmp_path)
    assert summary["episodes"] == 0 and summary["failures"]["seeds"] == list(range(9))
    ending = summary["ending"]
    assert ending["status"] == record["status"] == "stopped_early"
    assert ending["unplayed_seeds"] == list(range(9, 40)) and ending["reason"].startswith("stopped early: 9 of")
    assert ending["resume"] == record["command"] and record["ending"] == {
        k: v for k, v in ending.items() if k != "status"
    }


def test_every_episode_failed_is_a_finished_run_with_failures(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], faults=[(500, {})] * 10) as server:
        args = [*eval_args(server, out, 3), "policy.llm.max_retries=0", "max_failure_rate=1"]
        assert main(args) == 1
    assert "failed episodes: 3 of 3" in capsys.readouterr().out
    summary, record = records(tmp_path)
    assert summary["episodes"] == 0 and record["status"] == summary["ending"]["status"] == "finished_with_failures"
    assert summary["ending"]["reason"].startswith("every episode failed; commonest error:")


# --- a real `ifgym eval` process: signals, kill -9 and a second writer ----------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_ends_with_one_line_a_summary_and_status_interrupted(tmp_path, sig, code):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], delay=0.1) as server:
        args = [*eval_args(server, out, 30), "concurrency=1"]
        proc = start_eval(args, tmp_path)
        wait_for_lines(out, 2, proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == code, stderr
        name = sig.name
        # one line says it all (the first line is the run's concurrency, printed at its start)
        assert "Traceback" not in stderr and stdout == ""
        # the start's lines (which models, how many at once) aside, the ending says one line
        said = [line for line in stderr.splitlines() if not line.startswith(("concurrency:", "models:"))]
        assert len(said) == 1 and said[0].startswith(f"ifgym: interrupted ({name}): wrote {tmp_path / 'summary.json'}")
        played = lines(out)
        finished = len(played)
        assert f"({finished} finished, 0 failed, {30 - finished} never played); resume with: ifgym eval" in said[0]
        summary, record = records(tmp_path)
        assert summary["episodes"] == finished and record["status"] == summary["ending"]["status"] == "interrupted"
        assert summary["ending"]["signal"] == name
        assert summary["ending"]["unplayed_seeds"] == sorted(set(range(30)) - {e["seed"] for e in played})
        assert not (tmp_path / "survival.png").exists()  # no plots for an interrupted run: the finished one draws them
        # the command it names resumes the run: the unplayed seeds are played, nothing twice
        assert main(args) == 0
    assert sorted(e["seed"] for e in lines(out)) == list(range(30))
    assert records(tmp_path)[1]["status"] == "finished"


def test_after_kill_9_the_next_run_says_so_and_takes_over(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], delay=0.1) as server:
        args = [*eval_args(server, out, 12), "concurrency=1"]
        proc = start_eval(args, tmp_path)
        wait_for_lines(out, 1, proc)
        proc.kill()
        proc.communicate(timeout=60)
        stale = json.loads((tmp_path / "run.json").read_text())
        assert stale["status"] == "running" and stale["pid"] == proc.pid  # nothing could say otherwise
        assert main(args) == 0
    err = capsys.readouterr().err
    assert f"says a run (pid {proc.pid}, started {stale['started']}) is still running" in err
    assert "that process is gone (killed?); this run takes over and resumes it" in err
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["status"] == "finished" and record["took_over"] == {"pid": proc.pid, "started": stale["started"]}
    assert sorted(e["seed"] for e in lines(out)) == list(range(12))


def test_a_refused_second_writer_leaves_the_running_runs_records_alone(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["Fine."], delay=0.1) as server:
        assert main(eval_args(server, out, 1)) == 0  # an earlier run's summary.json is in the folder
        args = [*eval_args(server, out, 30), "concurrency=1"]
        proc = start_eval(args, tmp_path)
        wait_for_lines(out, 2, proc)
        before = {name: (tmp_path / name).read_bytes() for name in ("run.json", "summary.json")}
        assert json.loads(before["run.json"])["status"] == "running"
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"is being written by another ifgym run (pid {proc.pid})" in err
        assert {name: (tmp_path / name).read_bytes() for name in before} == before
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    assert proc.returncode == 143 and records(tmp_path)[1]["status"] == "interrupted"
