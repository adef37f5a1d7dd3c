"""Rollouts: one episode, many concurrently over a real HTTP server, JSONL append, resume after an interruption.

ScriptedPolicy stands in for a model where the model's words don't matter; CannedServer is a real
OpenAI-compatible HTTP server on 127.0.0.1 with canned replies, standing in for vLLM/OpenAI.
"""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest
from support.canned_server import CannedServer

import ifgym  # noqa: F401
from ifgym.errors import ConfigError, DataFormatError
from ifgym.llm import LLMConfig, make_client
from ifgym.policies import ChatPolicy, ScriptedPolicy
from ifgym.runner.rollout import arollout, arun, read_episodes, rollout, run


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=4, patience=None)


def test_single_rollout_plays_to_the_end():
    episode = rollout(make_env(), ScriptedPolicy(["First.", "Second."]), seed=3)
    assert len(episode.turns) == 4 and episode.done_reason == "max_turns"
    assert [t.reply for t in episode.turns] == ["First.", "Second.", "First.", "Second."]
    assert episode.meta["policy_usage"]["calls"] == 4


def test_episode_through_a_real_http_server():
    with CannedServer(replies=["Sure: a short answer about it."]) as server:
        client = make_client(LLMConfig(base_url=server.base_url, model="canned-model"), "policy")
        episode = rollout(make_env(), ChatPolicy(client), seed=1)
        bodies = server.requests
    assert len(episode.turns) == 4
    assert all(t.reply == "Sure: a short answer about it." for t in episode.turns)
    # the server received the growing dialogue: turn k sends 2k+1 messages
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5, 7]
    assert client.usage.calls == 4


def test_concurrent_run_over_http_overlaps_episodes(tmp_path):
    with CannedServer(replies=["ok"], delay=0.05) as server:
        client = make_client(LLMConfig(base_url=server.base_url, model="canned-model", concurrency=3), "policy")
        episodes = run(
            make_env,
            lambda: ChatPolicy(client),
            range(6),
            output=tmp_path / "e.jsonl",
            concurrency=3,
            progress=False,
        ).episodes
        peak = server.max_in_flight
    assert [e.seed for e in episodes] == list(range(6))
    assert 2 <= peak <= 3
    assert len(read_episodes(tmp_path / "e.jsonl")) == 6


def test_resume_skips_finished_episodes_and_repairs_a_cut_line(tmp_path):
    out = tmp_path / "episodes.jsonl"
    made = []

    def make_policy():
        made.append(1)
        return ScriptedPolicy(["reply"])

    first = run(make_env, make_policy, [0, 1], output=out, run_key="k", progress=False).episodes
    # an interrupted third episode left half a line behind
    with out.open("a") as f:
        f.write(json.dumps(first[0].to_json())[:50])
    made.clear()
    episodes = run(make_env, make_policy, [0, 1, 2, 3], output=out, run_key="k", progress=False).episodes
    assert len(made) == 2  # only seeds 2 and 3 ran
    assert [e.seed for e in episodes] == [0, 1, 2, 3]
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["meta"]["run_key"] == "k" for line in lines)


def test_a_worker_resets_the_env_of_its_finished_episode_and_drops_a_failed_ones():
    made = []

    def make_counted_env():
        made.append(make_env())
        return made[-1]

    class FailsOnSeed2(ScriptedPolicy):
        def reset(self):
            super().reset()
            self.turn = 0

        def act(self, messages):
            self.turn += 1
            if self.turn == 2 and "seed 2" in self.label:
                raise ValueError("the policy broke on seed 2")
            return super().act(messages)

    policies = iter(FailsOnSeed2(["A reply."]) for _ in range(5))
    labels = iter(f"seed {s}" for s in range(5))

    def make_policy():
        policy = next(policies)
        policy.label = next(labels)
        return policy

    result = run(make_counted_env, make_policy, range(5), concurrency=1, progress=False)
    assert [e.seed for e in result.episodes] == [0, 1, 3, 4] and [f.seed for f in result.failed] == [2]
    # seeds 0, 1, 2 on the first env; seed 2 failed mid-episode, so seeds 3 and 4 play on a new one
    assert len(made) == 2
    # what an env played before does not show in an episode: the same seeds on fresh envs give the same turns
    fresh = run(make_env, lambda: ScriptedPolicy(["A reply."]), [0, 1, 3, 4], concurrency=4, progress=False)
    assert [e.to_json()["turns"] for e in result.episodes] == [e.to_json()["turns"] for e in fresh.episodes]


def test_resume_refuses_another_configuration(tmp_path):
    out = tmp_path / "episodes.jsonl"
    run(make_env, lambda: ScriptedPolicy(["a"]), [0], output=out, run_key="one", progress=False)
    with pytest.raises(ConfigError, match="another configuration"):
        run(make_env, lambda: ScriptedPolicy(["a"]), [0], output=out, run_key="two", progress=False)


def test_corrupt_line_in_the_middle_names_the_line(tmp_path):
    out = tmp_path / "episodes.jsonl"
    run(make_env, lambda: ScriptedPolicy(["a"]), [0, 1], output=out, run_key="k", progress=False)
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n{not json\n" + lines[1] + "\n")
    with pytest.raises(DataFormatError, match=":2:"):
        read_episodes(out)


def test_arun_is_usable_from_a_running_loop():
    import asyncio

    episodes = asyncio.run(arun(make_env, lambda: ScriptedPolicy(["a"]), [5, 6], progress=False)).episodes
    assert [len(e.turns) for e in episodes] == [4, 4]


@pytest.mark.embedded
def test_episode_through_the_embedded_backend_with_the_small_model():
    from ifgym.policies import embedded_policy

    # SmolLM2-135M in process through llama.cpp: too weak to judge quality, enough to prove the path.
    policy = embedded_policy("smollm2-135m", max_tokens=48, n_ctx=2048, seed=0)
    episode = rollout(gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None), policy, seed=2)
    assert len(episode.turns) == 3
    assert all(t.reply.strip() for t in episode.turns)
    assert all(len(t.verdicts) == len(t.spec.constraints) >= 1 for t in episode.turns)
    assert episode.meta["policy_usage"]["calls"] == 3
    assert episode.meta["policy_usage"]["completion_tokens"] > 0


def test_the_log_writes_each_line_where_append_said_and_raises_a_write_that_failed(tmp_path):
    # lines are written by the log's own thread: each lands at the offset append returned, in order
    from ifgym.runner.rollout import EpisodeLog, StoredEpisodes

    source = tmp_path / "a.jsonl"
    run(make_env, lambda: ScriptedPolicy(["A reply."]), range(3), output=source, run_key="k", progress=False)
    episodes = read_episodes(source)
    log = EpisodeLog(tmp_path / "b" / "e.jsonl", "k")
    offsets = [log.append(e) for e in reversed(episodes)]
    log.close()
    assert [e.seed for e in StoredEpisodes(log.path, offsets)] == [2, 1, 0]
    assert log.path.read_bytes() == b"".join(e.to_jsonl().encode() + b"\n" for e in reversed(episodes))
    # a write that fails (its folder removed under it) is raised when the log closes, not lost in silence
    log = EpisodeLog(tmp_path / "c" / "e.jsonl", "k")
    (tmp_path / "c" / ".e.jsonl.lock").unlink()
    (tmp_path / "c").rmdir()
    with pytest.raises(FileNotFoundError):  # by the next append, or by close when the write was still pending
        try:
            log.append(episodes[0])
            log.append(episodes[1])
        finally:
            log.close()


def test_the_log_keeps_its_file_open_and_fails_loudly_when_the_file_is_removed_under_it(tmp_path):
    # the log's thread keeps the file open across lines: lines written to a removed file would be lost in
    # silence, so a write that finds the file gone (or replaced) is raised, and nothing is written after it
    import time

    from ifgym.runner.rollout import EpisodeLog

    episodes = run(make_env, lambda: ScriptedPolicy(["A reply."]), range(3), progress=False).episodes
    path = tmp_path / "e.jsonl"
    log = EpisodeLog(path, "k")
    log.append(episodes[0])
    first = episodes[0].to_jsonl().encode() + b"\n"
    deadline = time.monotonic() + 30
    while (not path.exists() or path.stat().st_size < len(first)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.read_bytes() == first
    path.rename(tmp_path / "moved.jsonl")  # the open file lives on under another name
    with pytest.raises(FileNotFoundError, match="removed or replaced during the run"):
        try:
            log.append(episodes[1])
            time.sleep(0.5)  # the thread has most likely met the missing file by now: the next append raises it
            log.append(episodes[2])
        finally:
            log.close()
    assert not path.exists()
    # the moved file holds whole lines in order, from the first to those of the batch that found the file gone
    # (a batch of its own, or the second's, or the second's and third's: the thread's pace decides), nothing after
    lines = [e.to_jsonl().encode() + b"\n" for e in episodes]
    assert (tmp_path / "moved.jsonl").read_bytes() in (lines[0], b"".join(lines[:2]), b"".join(lines))


class OnlyAct:
    """A policy with only the blocking `act` (and `reset`)."""

    def reset(self):
        pass

    def act(self, messages):
        return "A reply."


class OnlyAact:
    """A policy with only the awaited `aact` (and `reset`)."""

    def reset(self):
        pass

    async def aact(self, messages):
        return "A reply."


def test_each_driver_needs_only_the_policy_method_it_calls():
    env = gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)
    assert [t.reply for t in rollout(env, OnlyAct(), seed=0).turns] == ["A reply."] * 2
    assert [t.reply for t in asyncio.run(arollout(env, OnlyAact(), seed=0)).turns] == ["A reply."] * 2
