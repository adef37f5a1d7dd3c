"""Flat memory: a run with an output file keeps no Episode; resume and the summary read the file one line at a time.

The run keeps per seed only its line's offset (and a failed episode's small record); its result
reads episodes back from the file when they are used; resume reads seeds and status without
building an Episode; `ifgym eval`'s summary is built from one pass (`RunTally`).
"""

from __future__ import annotations

import gc

import gymnasium as gym
import pytest

import ifgym  # noqa: F401
from ifgym.core import Episode
from ifgym.errors import DataFormatError
from ifgym.policies import ScriptedPolicy
from ifgym.runner.report import RunTally
from ifgym.runner.rollout import StoredEpisodes, read_episodes, run, usage_totals


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None)


class FailsOn:
    """A scripted policy that raises at its first turn when `fail`."""

    def __init__(self, fail: bool):
        self.fail = fail
        self.inner = ScriptedPolicy(["A reply."])

    def reset(self):
        self.inner.reset()

    async def aact(self, messages):
        if self.fail:
            raise RuntimeError("the model fell over")
        return await self.inner.aact(messages)


def live_episodes() -> int:
    gc.collect()
    return sum(type(o) is Episode for o in gc.get_objects())  # type(): no attribute lookups on odd objects


def test_a_run_with_output_holds_no_episode_and_reads_them_back_from_the_file(tmp_path):
    out = tmp_path / "e.jsonl"
    before = live_episodes()
    result = run(make_env, lambda: ScriptedPolicy(["A reply."]), [3, 1, 2], output=out, progress=False)
    assert live_episodes() == before  # the result holds offsets, not episodes
    episodes = result.episodes
    assert isinstance(episodes, StoredEpisodes) and len(episodes) == 3
    # in the run's seed order, each as written; a second pass reads the same
    assert [e.seed for e in episodes] == [3, 1, 2] == [e.seed for e in episodes]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert sorted(e.to_jsonl() for e in episodes) == sorted(lines)
    assert episodes[1].seed == 1 and episodes[-1].seed == 2 and [e.seed for e in episodes[1:]] == [1, 2]
    assert [e.to_json() for e in read_episodes(out)] == [e.to_json() for e in episodes]


def test_a_run_without_output_keeps_its_episodes_in_memory():
    result = run(make_env, lambda: ScriptedPolicy(["A reply."]), [0, 1], progress=False)
    assert isinstance(result.episodes, list) and [e.seed for e in result.episodes] == [0, 1]
    # its repr counts them (asyncio.run formats it when the run ends; it must not walk every episode)
    assert repr(result) == "RunResult(2 episodes, 0 failed, worker_deaths=0)"


def test_resume_reads_seeds_and_status_without_building_an_episode(tmp_path, monkeypatch):
    out = tmp_path / "e.jsonl"
    seeds_that_fail = {1}
    policies = iter([FailsOn(s in seeds_that_fail) for s in (0, 1, 2)])
    first = run(
        make_env, lambda: next(policies), [0, 1, 2], output=out, progress=False, max_failure_rate=1, concurrency=1
    )
    assert [e.seed for e in first.episodes] == [0, 2] and [f.seed for f in first.failed] == [1]
    written = out.read_bytes()

    def refuse(*args, **kwargs):
        raise AssertionError("resume built an Episode")

    monkeypatch.setattr(Episode, "from_json", refuse)
    made = []

    def make_policy():
        made.append(1)
        return ScriptedPolicy(["A reply."])

    again = run(make_env, make_policy, [0, 1, 2, 3], output=out, progress=False)
    assert len(made) == 2  # seed 1 retried, seed 3 new; 0 and 2 skipped
    assert [f.seed for f in again.failed] == [] and len(again.episodes) == 4
    assert out.read_bytes().startswith(written)  # earlier lines byte-identical
    assert usage_totals(out, "run") == {}  # read from each line's meta, no Episode either (no model was called)
    monkeypatch.undo()
    assert [e.seed for e in again.episodes] == [0, 1, 2, 3]


def test_the_summary_tally_keeps_rows_not_episodes_and_gives_the_same_numbers(tmp_path):
    out = tmp_path / "e.jsonl"
    result = run(make_env, lambda: ScriptedPolicy(["A reply.", "Another reply."]), range(4), output=out, progress=False)
    env = make_env().unwrapped
    before = live_episodes()
    tally = RunTally.of(result.episodes, env.task, loose=True)
    assert live_episodes() == before
    assert tally.lengths == [3, 3, 3, 3] and tally.patience is False
    listed = read_episodes(out)
    assert env.task.summarize_rows(tally.strict) == env.summarize(listed)
    assert env.task.summarize_rows(tally.loose, loose=True) == env.summarize(listed, loose=True)
    assert env.task.summarize_rows(tally.strict)["episodes"] == 4.0


def test_the_rows_of_episodes_with_the_same_group_counts_share_them(tmp_path):
    # each EvolIF row keeps (group, yes, known) per group: the same triple is one object however many rows hold it
    out = tmp_path / "e.jsonl"
    result = run(make_env, lambda: ScriptedPolicy(["A reply."]), range(12), output=out, progress=False)
    env = make_env().unwrapped
    tally = RunTally.of(result.episodes, env.task, loose=False)
    triples = [t for row in tally.strict for t in row.groups]
    assert len(triples) > len(set(triples))  # twelve 3-turn episodes repeat triples
    assert len({id(t) for t in triples}) == len(set(triples))
    # the numbers are those of the episodes themselves (the test above); sharing changes none of them
    assert env.task.summarize_rows(tally.strict) == env.summarize(read_episodes(out))


def test_a_line_changed_under_a_stored_episode_is_named(tmp_path):
    out = tmp_path / "e.jsonl"
    result = run(make_env, lambda: ScriptedPolicy(["A reply."]), [0, 1], output=out, progress=False)
    out.write_text("x" * out.stat().st_size, encoding="utf-8")
    with pytest.raises(DataFormatError, match="at byte 0: not a finished episode"):
        result.episodes[0]
