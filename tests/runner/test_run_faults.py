"""Runs that survive faults: a failing episode becomes a failed-episode line, the run goes on, reruns retry it.

ScriptedPolicy subclasses stand in for a buggy policy wrapper; CannedServer is a real
OpenAI-compatible HTTP server on 127.0.0.1 whose injected 500s stand in for a failing model server.
"""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest
from support.canned_server import CannedServer

import ifgym  # noqa: F401
from ifgym.cli import main
from ifgym.errors import RunStoppedError
from ifgym.llm import LLMConfig, make_client
from ifgym.policies import ChatPolicy, ScriptedPolicy
from ifgym.runner.rollout import STOP_MIN_ATTEMPTS, FailedEpisode, iter_records, read_episodes, run


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None)


class BuggyPolicy(ScriptedPolicy):
    """Raises at turn `at` (1-based) of the episodes whose seed is in `bad`: a bug in a wrapper."""

    def __init__(self, bad, at=2, message="wrapper bug"):
        super().__init__(["A reply."])
        self.bad, self.at, self.message, self.turn, self.seed = set(bad), at, message, 0, None

    def reset(self):
        super().reset()
        self.turn = 0

    def act(self, messages):
        self.turn += 1
        if self.seed in self.bad and self.turn == self.at:
            raise ValueError(self.message)
        return super().act(messages)


def buggy_env_and_policy(bad, **kw):
    """A factory pair: the env tells the policy its seed (as a stateful wrapper would know it)."""
    holder = {}

    def env():
        e = make_env()
        reset = e.unwrapped.areset

        async def areset(seed=None, options=None):
            holder["policy"].seed = seed
            return await reset(seed=seed, options=options)

        e.unwrapped.areset = areset
        return e

    def policy():
        holder["policy"] = BuggyPolicy(bad, **kw)
        return holder["policy"]

    return env, policy


def test_a_failing_episode_is_a_failed_line_and_the_run_goes_on(tmp_path):
    out = tmp_path / "e.jsonl"
    env, policy = buggy_env_and_policy({1, 3})
    result = run(env, policy, range(5), output=out, run_key="k", progress=False, max_failure_rate=0.5, concurrency=1)
    assert [e.seed for e in result.episodes] == [0, 2, 4]
    assert [f.seed for f in result.failed] == [1, 3]
    line = json.loads(out.read_text().splitlines()[1])
    assert line["failed"] is True and line["seed"] == 1 and line["turns"] == 1  # turn 1 finished, turn 2 raised
    assert line["error"]["type"] == "ValueError" and line["error"]["message"] == "wrapper bug"
    assert line["error"]["at"].startswith("test_run_faults.py:")
    assert line["meta"]["run_key"] == "k" and line["episode_id"] == "k-seed1"
    assert result.failures == {
        "episodes": 2,
        "of": 5,
        "by_type": {"ValueError": 2},
        "by_status": {},  # no model server answered
        "examples": {"ValueError": ["wrapper bug"]},  # the same message is kept once
        "seeds": [1, 3],
    }
    assert [e.seed for e in read_episodes(out)] == [0, 2, 4]  # readers of finished episodes skip failed lines


def test_rerun_retries_failed_seeds_and_never_duplicates(tmp_path):
    out = tmp_path / "e.jsonl"
    env, policy = buggy_env_and_policy({1, 3})
    run(env, policy, range(5), output=out, run_key="k", progress=False, max_failure_rate=0.5)
    # no retry: the failures stand, nothing runs
    kept = run(env, policy, range(5), output=out, run_key="k", progress=False, retry_failed=False)
    assert len(kept.failed) == 2 and len(out.read_text().splitlines()) == 5
    env, policy = buggy_env_and_policy(set())  # the bug is fixed
    fixed = run(env, policy, range(5), output=out, run_key="k", progress=False)
    assert [e.seed for e in fixed.episodes] == [0, 1, 2, 3, 4] and fixed.failed == []
    records = list(iter_records(out))
    assert [r.seed for r in records] == [0, 1, 2, 3, 4, 1, 3]  # the failed lines stay as history
    assert [e.seed for e in read_episodes(out)] == [0, 2, 4, 1, 3]  # the last record per seed wins, in file order
    again = run(env, policy, range(5), output=out, run_key="k", progress=False)
    assert len(again.episodes) == 5 and len(out.read_text().splitlines()) == 7  # nothing left to run


def test_too_many_failures_stop_the_run_naming_the_commonest_error(tmp_path):
    out = tmp_path / "e.jsonl"
    env, policy = buggy_env_and_policy(set(range(20)), at=1, message="bad reply parser")
    with pytest.raises(RunStoppedError, match=r"ValueError \(3 episodes\): bad reply parser") as info:
        run(env, policy, range(10), output=out, run_key="k", progress=False, concurrency=1)
    assert "3 of the 10 episodes this run plays have failed, more than max_failure_rate=0.2" in str(info.value)
    assert len(out.read_text().splitlines()) == 3  # 0.2 x 10 = 2 failures allowed; the third stops the run


def test_the_stop_rule_judges_a_sample_of_what_this_run_attempted(tmp_path):
    # every third seed fails (33%): too few failures to be sure of 100 episodes' share, so the rule waits for
    # 20 attempts (STOP_MIN_ATTEMPTS) and then sees 7 of 20 > 0.2
    out = tmp_path / "e.jsonl"
    env, policy = buggy_env_and_policy(set(range(0, 100, 3)), at=1)
    with pytest.raises(RunStoppedError, match=r"7 of the 20 episodes this run attempted failed"):
        run(env, policy, range(100), output=out, run_key="k", progress=False, concurrency=1)
    assert len(out.read_text().splitlines()) == STOP_MIN_ATTEMPTS == 20


def test_a_rerun_after_many_failures_finishes_every_failed_seed_in_one_go(tmp_path):
    out = tmp_path / "e.jsonl"
    bad = set(range(0, 40, 2)) - {0, 2}  # 18 of 40 seeds fail
    env, policy = buggy_env_and_policy(bad, at=1)
    first = run(env, policy, range(40), output=out, run_key="k", progress=False, max_failure_rate=1)
    assert len(first.failed) == 18
    # the bug is still there: the rerun is judged on the 18 it retries (more than 0.2 x 18 failing stops it)
    with pytest.raises(RunStoppedError, match=r"4 of the 18 episodes this run plays have failed"):
        run(env, policy, range(40), output=out, run_key="k", progress=False, concurrency=1)
    assert len(out.read_text().splitlines()) == 44
    # the bug is fixed: the 18 failures in the file do not count, one rerun finishes them all
    env, policy = buggy_env_and_policy(set())
    fixed = run(env, policy, range(40), output=out, run_key="k", progress=False)
    assert len(fixed.episodes) == 40 and fixed.failed == []
    assert len(out.read_text().splitlines()) == 44 + 18


def test_a_failure_with_nothing_left_to_play_ends_the_run_without_a_stop(tmp_path):
    # max_failure_rate=0 stops at the first failure while seeds are left; the last seed's failure has none to spare
    env, policy = buggy_env_and_policy({4}, at=1)
    result = run(env, policy, range(5), progress=False, concurrency=1, max_failure_rate=0)
    assert [f.seed for f in result.failed] == [4] and len(result.episodes) == 4
    env, policy = buggy_env_and_policy({3}, at=1)
    with pytest.raises(RunStoppedError, match="1 of the 5 episodes this run plays have failed"):
        run(env, policy, range(5), progress=False, concurrency=1, max_failure_rate=0)


def test_secrets_never_reach_the_failed_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", "hunter2-very-secret")
    env, policy = buggy_env_and_policy({0}, at=1, message="auth failed for hunter2-very-secret / sk-abcdef0123456789")
    run(env, policy, [0, 1, 2, 3, 4, 5], output=tmp_path / "e.jsonl", run_key="k", progress=False)
    text = (tmp_path / "e.jsonl").read_text()
    assert "hunter2" not in text and "sk-abcdef" not in text
    assert "auth failed for [redacted] / [redacted]" in text


def test_an_episode_past_its_deadline_is_a_failed_episode(tmp_path):
    class Slow(ScriptedPolicy):
        async def aact(self, messages):
            await asyncio.sleep(5)
            return "late"

    result = run(make_env, lambda: Slow(["x"]), [0], progress=False, episode_timeout=0.2, max_failure_rate=1)
    (failed,) = result.failed
    assert isinstance(failed, FailedEpisode) and failed.error["type"] == "EpisodeTimeoutError"
    assert "episode_timeout=0.2s" in failed.error["message"] and failed.turns == 0


def test_a_timeout_inside_an_episode_is_its_own_error_not_the_deadline():
    class TimesOut(ScriptedPolicy):
        async def aact(self, messages):
            raise TimeoutError("the policy's own wait ran out")

    result = run(make_env, lambda: TimesOut(["x"]), [0], progress=False, episode_timeout=60, max_failure_rate=1)
    (failed,) = result.failed
    assert failed.error["type"] == "TimeoutError" and failed.error["message"] == "the policy's own wait ran out"


def test_model_server_errors_fail_one_episode_not_the_run(tmp_path):
    # the first request of the run gets a 500 and the client may not retry: that episode fails
    with CannedServer(replies=["Fine."], faults=[(500, {})]) as server:
        client = make_client(LLMConfig(base_url=server.base_url, model="canned-model", max_retries=0), "policy")
        result = run(make_env, lambda: ChatPolicy(client), range(6), progress=False, concurrency=1)
    assert [f.seed for f in result.failed] == [0]
    assert result.failed[0].error["type"] == "ServerError" and result.failed[0].error["status"] == 500
    assert "500" in result.failed[0].error["message"]
    assert [e.seed for e in result.episodes] == [1, 2, 3, 4, 5]


def test_cli_reports_failures_in_table_and_summary_and_exits_non_zero(tmp_path, capsys):
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=["Fine."], faults=[(500, {})] * 1) as server:
        args = [
            "eval",
            "policy=openai",
            f"policy.llm.base_url={server.base_url}",
            "policy.llm.model=canned-model",
            "policy.llm.max_retries=0",
            "episodes=5",
            "concurrency=1",
            "env.max_turns=2",
            f"output={out}",
            "progress=false",
            "plots=false",
            "ci=false",
        ]
        assert main(args) == 1
        captured = capsys.readouterr()
        assert "failed episodes: 1 of 5 (ServerError 1; HTTP 500 1)" in captured.out
        assert "episodes failed (1 of 5 in" in captured.err
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["episodes"] == 4 and summary["failures"]["by_type"] == {"ServerError": 1}
        # the rerun retries seed 0 (the server now answers) and exits 0
        assert main(args) == 0
    assert [e.seed for e in read_episodes(out)] == [1, 2, 3, 4, 0]
    assert json.loads((tmp_path / "summary.json").read_text())["failures"]["episodes"] == 0


@pytest.mark.parametrize("own, peak", [(None, 3), (1, 1)])
def test_one_concurrency_knob_sets_every_role_unless_a_role_sets_its_own(tmp_path, capsys, own, peak):
    with CannedServer(replies=["Fine."], delay=0.15) as server:
        args = [
            "eval",
            "policy=openai",
            f"policy.llm.base_url={server.base_url}",
            "policy.llm.model=canned-model",
            "episodes=6",
            "concurrency=3",
            "env.max_turns=2",
            f"output={tmp_path / 'e.jsonl'}",
            "progress=false",
            "plots=false",
            "ci=false",
        ]
        if own is not None:
            args.append(f"policy.llm.concurrency={own}")
        assert main(args) == 0
        assert server.max_in_flight == peak
    assert f"concurrency: 3 episodes at once; requests in flight at most: policy {peak}" in capsys.readouterr().err
