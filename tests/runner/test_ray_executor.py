"""executor=ray end to end on a local Ray instance (2 CPUs): the same episodes as the local executor,
one JSONL written by the driver, a worker that dies mid-run has its episodes redone without duplicates.

ScriptedPolicy stands in for a model (its replies do not matter here); CannedServer is a real HTTP
server on 127.0.0.1 reached from inside the Ray workers; the crash is a real `os._exit` of a worker.
"""

from __future__ import annotations

import json
import os
import sys

import gymnasium as gym
import pytest
from support.canned_server import CannedServer
from support.ray_cluster import import_ray

import ifgym  # noqa: F401
from ifgym.llm import LLMConfig, make_client
from ifgym.policies import ChatPolicy, ScriptedPolicy

# ray_executor first: it points every Ray socket at 127.0.0.1 before `ray` is imported
from ifgym.runner.ray_executor import run_ray, start_ray  # noqa: E402
from ifgym.runner.rollout import iter_records, run

ray = import_ray()  # without the ray extra these tests fail, saying how to install it
# this module's factories travel to the workers by value (pytest's importlib mode: not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def local_ray():
    start_ray(2)
    yield
    ray.shutdown()


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None)


class CrashOnce(ScriptedPolicy):
    """Kills its own worker process the first time it plays seed 5 (a marker file says it happened)."""

    def __init__(self, marker):
        super().__init__(["A reply."])
        self.marker = marker

    def act(self, messages):
        if self.marker.exists() or "seed5" not in self.marker.name:
            return super().act(messages)
        self.marker.write_text(str(os.getpid()))
        os._exit(1)


def test_ray_plays_the_same_episodes_as_the_local_executor(tmp_path, local_ray):
    with CannedServer(replies=["Sure: a short answer."]) as server:
        client = make_client(LLMConfig(base_url=server.base_url, model="canned-model"), "policy")
        local = run(make_env, lambda: ChatPolicy(client), range(6), output=tmp_path / "a.jsonl", progress=False)
        remote = run_ray(
            make_env,
            lambda: ChatPolicy(client),
            range(6),
            num_workers=2,
            output=tmp_path / "b.jsonl",
            progress=False,
        )
        served = len(server.requests)
    assert served == 36  # 6 episodes x 3 turns, twice: the workers reached the server on 127.0.0.1
    assert sorted(e.seed for e in remote.episodes) == list(range(6)) and remote.failed == []
    strip = [({**e.to_json(), "meta": {}}) for e in local.episodes]
    assert [({**e.to_json(), "meta": {}}) for e in remote.episodes] == strip  # same seeds, same episodes
    # usage travels with the episodes (each worker has its own client)
    assert sum(e.meta["policy_usage"]["calls"] for e in remote.episodes) == 18


def test_a_killed_worker_has_its_episodes_redone_without_duplicates(tmp_path, local_ray):
    out = tmp_path / "e.jsonl"
    marker = tmp_path / "crashed-seed5"
    pids = []
    result = run_ray(
        make_env,
        lambda: CrashOnce(marker),
        range(10),
        num_workers=2,
        concurrency=2,
        output=out,
        progress=False,
        on_workers=lambda actors: pids.extend(ray.get([a.pid.remote() for a in actors])),
    )
    assert marker.exists() and int(marker.read_text()) in pids  # a worker really died
    assert result.worker_deaths >= 1
    assert sorted(e.seed for e in result.episodes) == list(range(10)) and result.failed == []
    seeds = [json.loads(line)["seed"] for line in out.read_text().splitlines()]
    assert sorted(seeds) == list(range(10))  # every seed once: none lost, none written twice
    assert len(pids) >= 3  # the lost share went to a new worker
    assert [r.seed for r in iter_records(out)] == seeds


def test_cli_executor_ray_writes_the_run_and_counts_usage_from_the_workers(tmp_path, local_ray, capsys):
    from ifgym.cli import main

    out = tmp_path / "e.jsonl"
    with CannedServer(replies=["A short reply."]) as server:
        args = [
            "eval",
            "executor=ray",
            "executor.num_workers=2",
            "policy=openai",
            f"policy.llm.base_url={server.base_url}",
            "policy.llm.model=canned-model",
            "episodes=4",
            "env.max_turns=2",
            f"output={out}",
            "progress=false",
            "plots=false",
            "ci=false",
        ]
        assert main(args) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["executor"]["kind"] == "ray"
    assert summary["usage"]["policy"]["calls"] == 8  # counted in the workers, summed from the records
    assert "usage[policy]: 8 calls" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"episode_timeout": 0}, "episode_timeout must be > 0"), ({"concurrency": 0}, "concurrency must be >= 1")],
)
def test_bad_run_settings_are_refused_before_ray_starts(tmp_path, settings, message):
    # the same check as the local executor's: a zero deadline would fail every episode in the workers
    from ifgym.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        run_ray(make_env, lambda: ScriptedPolicy(["x"]), range(3), output=tmp_path / "e.jsonl", **settings)
    assert not (tmp_path / "e.jsonl").exists()


def test_more_workers_than_cpus_is_refused_not_a_silent_hang(tmp_path, local_ray):
    from ifgym.errors import ConfigError

    with pytest.raises(ConfigError, match="num_workers=3 but the Ray cluster has 2 CPUs"):
        run_ray(make_env, lambda: ScriptedPolicy(["x"]), range(3), num_workers=3, output=tmp_path / "e.jsonl")
    run(make_env, lambda: ScriptedPolicy(["x"]), [0], output=tmp_path / "e.jsonl", progress=False)  # lock released
