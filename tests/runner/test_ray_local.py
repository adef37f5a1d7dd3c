"""executor=ray on a local Ray instance the run starts itself: its lifetime is the run's.

No fixture starts Ray here (tests/runner/test_ray_executor.py shares one instance across its tests):
each run starts its own instance, in a temp folder this test chose, and must leave no process of it
behind. A worker is really killed (`os._exit`) to count the deaths.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest
from support.ray_cluster import import_ray

import ifgym  # noqa: F401
from ifgym.policies import ScriptedPolicy

# ray_executor first: it points every Ray socket at 127.0.0.1 before `ray` is imported
from ifgym.runner.ray_executor import run_ray  # noqa: E402

ray = import_ray()
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the factories travel to the workers by value


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)


class CrashOnce(ScriptedPolicy):
    """Kills its own worker process on the first turn any worker plays (a marker file says it happened)."""

    def __init__(self, marker: Path):
        super().__init__(["A reply."])
        self.marker = marker

    def act(self, messages):
        if not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().act(messages)


class Broken(ScriptedPolicy):
    """Fails every turn: the run stops on its failure rate."""

    def act(self, messages):
        raise RuntimeError("broken policy")


def processes_naming(folder: Path) -> list[str]:
    """Command lines of the processes that name `folder` (a Ray instance's temp folder)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in command and int(entry.name) != os.getpid():
            found.append(command.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


@pytest.fixture
def ray_temp(monkeypatch):
    """A short temp folder for the run's Ray instance (its socket paths have a length limit)."""
    folder = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    assert not ray.is_initialized()  # the run starts its own instance
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_one_killed_worker_is_one_death_and_the_local_instance_ends_with_the_run(tmp_path, ray_temp, capsys):
    marker = tmp_path / "crashed"
    result = run_ray(
        make_env,
        lambda: CrashOnce(marker),
        range(8),
        num_workers=2,
        concurrency=2,
        output=tmp_path / "e.jsonl",
        progress=False,
    )
    assert marker.exists()  # a worker really died
    assert result.worker_deaths == 1  # one worker, however many of its seeds were redone
    assert sorted(e.seed for e in result.episodes) == list(range(8)) and result.failed == []
    assert not ray.is_initialized()
    assert processes_naming(ray_temp) == []  # raylet, GCS, workers and Ray's agents all ended with the run
    err = capsys.readouterr().err
    assert "Ray: a local instance with 2 CPUs" in err and " s\n" in err  # its start-up time
    assert "SIGTERM handler is not set" not in err


def test_the_local_instance_ends_when_the_run_fails(tmp_path, ray_temp):
    from ifgym.errors import RunStoppedError

    with pytest.raises(RunStoppedError):
        run_ray(
            make_env,
            lambda: Broken(["x"]),
            range(6),
            num_workers=2,
            output=tmp_path / "e.jsonl",
            progress=False,
            retry_failed=False,
            max_failure_rate=0.0,
        )
    assert not ray.is_initialized()
    assert processes_naming(ray_temp) == []
