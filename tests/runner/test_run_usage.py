"""Usage that adds up (summed from the episodes' own records) and one writer per episodes file.

CannedServer is a real OpenAI-compatible server on 127.0.0.1 (standing in for vLLM/OpenAI); the
second writer is a real second Python process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest
from support.canned_server import CannedServer, eval_args

import ifgym  # noqa: F401
from ifgym.cli import main
from ifgym.errors import ConfigError
from ifgym.llm import LLMConfig, make_client
from ifgym.policies import ChatPolicy
from ifgym.runner.rollout import EpisodeLog, claim_output, run, usage_totals


def test_usage_after_a_resume_counts_every_call_of_the_run(tmp_path):
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=["A short reply."]) as server:
        assert main(eval_args(server, out, 3)) == 0
        assert main(eval_args(server, out, 5)) == 0  # a second process would see the same file
        served = len(server.requests)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert served == 10 and summary["usage"]["policy"]["calls"] == 10  # not only the 4 calls of the last process
    assert summary["usage"]["policy"]["completion_tokens"] == 30  # 3 words x 10 replies


def test_failed_episodes_and_their_retries_are_in_the_usage(tmp_path):
    out = tmp_path / "e.jsonl"
    # episode 0: two 500s answered, both retried, then a body without choices: the episode fails
    faults = [(500, {"retry-after-ms": "5"}), (500, {"retry-after-ms": "5"}), (200, {}, {"choices": []})]
    with CannedServer(replies=["Fine."], faults=faults) as server:
        client = make_client(LLMConfig(base_url=server.base_url, model="canned-model", max_retries=2), "policy")
        result = run(
            lambda: gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None),
            lambda: ChatPolicy(client),
            range(3),
            output=out,
            run_key="k",
            progress=False,
            concurrency=1,
            max_failure_rate=1,
        )
    assert [f.seed for f in result.failed] == [0]
    assert result.failed[0].meta["usage"]["policy"]["retries"] == 2
    totals = usage_totals(out, "k")["policy"]
    assert totals["retries"] == 2 and totals["calls"] == 4  # 2 episodes x 2 turns; the failed call had no reply
    assert client.usage.retries == 2


def test_a_second_writer_on_the_same_output_is_refused(tmp_path):
    out = tmp_path / "e.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from ifgym.runner.rollout import EpisodeLog; "
            f"log = EpisodeLog({str(out)!r}, 'k'); print('locked', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"is being written by another ifgym run \(pid {holder.pid}\)"):
            run(lambda: gym.make("ifgym/EvolIF-v1", max_turns=2), lambda: None, [0], output=out, run_key="k")
    finally:
        holder.communicate("", timeout=30)
    # once the first writer is gone, the file is free again
    log = EpisodeLog(out, "k")
    log.close()


def test_a_claimed_output_is_lent_to_the_run_inside_the_claim_and_refused_to_any_other_writer(tmp_path):
    from ifgym.policies import ScriptedPolicy

    out = tmp_path / "e.jsonl"
    lock = tmp_path / ".e.jsonl.lock"
    with claim_output(out):
        with pytest.raises(ConfigError, match=r"is being written by another ifgym run \(pid \d+\)"):
            with claim_output(out):  # a second claim, even in this process
                pass
        log = EpisodeLog(out, "k")  # the claim is lent to one user at a time
        with pytest.raises(ConfigError, match="is being written by another ifgym run"):
            EpisodeLog(out, "k")
        log.close()  # given back to the claim, which still holds the file
        result = run(
            lambda: gym.make("ifgym/EvolIF-v1", max_turns=2),
            lambda: ScriptedPolicy(["A reply."]),
            [0, 1],
            output=out,
            run_key="k",
            progress=False,
        )
        assert len(result.episodes) == 2
    assert lock.exists()  # episodes were written: the lock file stays beside them
    with claim_output(tmp_path / "none.jsonl"):
        assert (tmp_path / ".none.jsonl.lock").exists()
    assert not (tmp_path / ".none.jsonl.lock").exists()  # nothing written: nothing left behind
