"""The Ray executor: the same episodes as `ifgym.runner.rollout.arun`, played in Ray workers.

Each worker (a Ray actor, one CPU) runs the asyncio runner on its share of the seeds with its own
env and policy factories (its own model clients: an LLMClient pickles as its settings). Finished
and failed episodes stream back to the driver as they end, and the driver writes the one JSONL
(the same `Recorder` as the local executor: resume, retries, failure counts, progress bar). A worker
that dies (killed, out of memory, a crash) loses only its episodes in flight: the driver redoes
every seed of its share it has not received on a new worker, and a seed delivered twice is written
once; `worker_deaths` counts the workers that died. `ray` is imported only here, when `executor=ray`
is chosen.

A local Ray instance the run starts (no `address`, Ray not yet initialized) is the run's own: its
temp folder is a fresh `ifgym-ray-*` folder in the system's temp folder (its logs stay there), its
start-up time is printed, and it is shut down when the run ends, however it ends (finished, an
error, Ctrl-C, SIGTERM), every process of it included (Ray's agents would otherwise outlive the run
by up to a minute). Only a kill -9 of the driver leaves it running: its processes carry the folder's
name in their command lines (`pkill -f ifgym-ray-<id>` ends them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError
from ifgym.llm.loop import gather_or_cancel, run_async
from ifgym.runner.redaction import known
from ifgym.runner.rollout import Record, Recorder, RunResult, check_run_settings, play, record_from_json

# a seed whose worker died this many times is recorded as failed (WorkerDiedError), not tried again
MAX_WORKER_DEATHS_PER_SEED = 3


# every Ray socket on 127.0.0.1, no usage reporting, no token-auth warning: read when `ray` is imported
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("executor=ray needs Ray: pip install 'ifgym[ray]' (ray>=2.60,<3)") from None
    return ray


def start_ray(num_workers: int, address: str | None = None, temp_dir: str | None = None) -> Any:
    """Connect to the cluster at `address`, or start a local Ray instance with `num_workers` CPUs; returns `ray`.

    `temp_dir`: the local instance's folder for sessions, sockets and logs (Ray's default otherwise).
    A SIGTERM handler set before (ifgym's, or the caller's) stays: Ray's own replaces only the default.
    """
    ray = _import_ray()
    if not ray.is_initialized():
        options: dict[str, Any] = {"logging_level": "WARNING", "log_to_driver": False}
        if address is None:
            options |= {"num_cpus": num_workers, "include_dashboard": False}
            if temp_dir is not None:
                options["_temp_dir"] = temp_dir
        handler = signal.getsignal(signal.SIGTERM)
        ray.init(address=address, **options)
        if callable(handler) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)
    return ray


def _processes_under(folder: str) -> list[int]:
    """Ids of the processes whose command line names `folder` (a local Ray instance's); [] without /proc."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if folder.encode() in command and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def stop_local_ray(ray: Any, temp_dir: str, timeout: float = 10.0) -> None:
    """Shut down the local Ray instance started in `temp_dir`, then end what is left of it (Ray's agents)."""
    with contextlib.suppress(Exception):  # a half-started instance: what remains is ended below
        ray.shutdown()
    deadline = time.monotonic() + timeout
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _processes_under(temp_dir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        while _processes_under(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _processes_under(temp_dir):
            return
        deadline = time.monotonic() + timeout


class _Worker:
    """A Ray actor's body: plays its seeds concurrently and yields each record (as JSON) when it ends."""

    def __init__(
        self,
        make_env: Callable[[], Any],
        make_policy: Callable[[], Any],
        run_key: str,
        concurrency: int,
        episode_timeout: float | None,
        credentials: frozenset[str] = frozenset(),
    ):
        from ifgym.runner.redaction import remember

        remember(*credentials)  # the driver's: a failed episode's message is redacted here as it is there
        self.make_env, self.make_policy = make_env, make_policy
        self.run_key, self.concurrency, self.episode_timeout = run_key, concurrency, episode_timeout

    def pid(self) -> int:
        return os.getpid()

    async def play(self, seeds: Sequence[int]) -> Any:
        limit = asyncio.Semaphore(self.concurrency)
        spare: list[Any] = []  # envs of finished episodes, each reset for a next one (at most `concurrency`)

        async def one(seed: int) -> Record:
            async with limit:
                return await play(
                    self.make_env,
                    self.make_policy,
                    seed,
                    run_key=self.run_key,
                    episode_timeout=self.episode_timeout,
                    spare_envs=spare,
                )

        for done in asyncio.as_completed([one(s) for s in seeds]):
            yield (await done).to_json()


async def arun_ray(
    make_env: Callable[[], Any],
    make_policy: Callable[[], Any],
    seeds: Sequence[int],
    *,
    num_workers: int = 2,
    address: str | None = None,
    output: str | Path | None = None,
    run_key: str = "run",
    concurrency: int = 4,
    progress: bool = True,
    on_episode: Callable[[Any], None] | None = None,
    retry_failed: bool = True,
    max_failure_rate: float = 0.2,
    episode_timeout: float | None = None,
    on_workers: Callable[[list[Any]], None] | None = None,
) -> RunResult:
    """`arun` on Ray: `num_workers` actors, each `concurrency` episodes at a time; returns the same RunResult.

    `on_workers` is called with each batch of new actor handles (tests use it to kill one).
    """
    if num_workers < 1:
        raise ConfigError(f"executor.num_workers must be >= 1, got {num_workers!r}")
    check_run_settings(concurrency, episode_timeout)
    recorder = Recorder(
        seeds,
        output=output,
        run_key=run_key,
        retry_failed=retry_failed,
        max_failure_rate=max_failure_rate,
        progress=progress,
        on_episode=on_episode,
    )
    deaths: dict[int, int] = {}  # per seed: how many of its workers died
    workers_died = 0
    todo = list(recorder.todo)
    actors: list[Any] = []
    ray: Any = _import_ray()
    # a local instance started here is the run's own, in a folder of its own, shut down with the run
    local_dir = tempfile.mkdtemp(prefix="ifgym-ray-") if address is None and not ray.is_initialized() else None
    try:
        started = time.monotonic()
        # in this (the main) thread: Ray sets its SIGTERM handler there, and warns from any other thread
        start_ray(num_workers, address, local_dir)
        if local_dir is not None:
            where = f"a local instance with {num_workers} CPUs (its logs: {local_dir})"
        else:
            where = f"the cluster at {address}" if address else "the Ray instance this process had started"
        print(f"Ray: {where}, ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < num_workers:  # the extra workers would wait for a CPU forever, silently
            raise ConfigError(
                f"executor.num_workers={num_workers} but the Ray cluster has {cpus:g} CPUs (one per worker); "
                "use fewer workers, or a cluster with more CPUs"
            )
        worker_class = ray.remote(num_cpus=1, max_restarts=0)(_Worker)
        while todo:
            shares = [todo[i::num_workers] for i in range(num_workers) if todo[i::num_workers]]
            batch = [
                worker_class.remote(make_env, make_policy, run_key, concurrency, episode_timeout, known())
                for _ in shares
            ]
            actors += batch
            if on_workers:
                on_workers(batch)
            # a stop ends every share's stream before the instance is shut down under it
            lost = await gather_or_cancel(_consume(ray, a, s, recorder) for a, s in zip(batch, shares, strict=True))
            for actor in batch:
                ray.kill(actor)  # an actor holds its CPU until killed
            todo = []
            for share_lost, error in lost:
                workers_died += bool(error)
                for seed in share_lost:
                    deaths[seed] = deaths.get(seed, 0) + 1
                    if deaths[seed] < MAX_WORKER_DEATHS_PER_SEED:
                        todo.append(seed)
                    else:
                        recorder.record(_worker_died(seed, run_key, deaths[seed], error))
    finally:
        try:
            if local_dir is not None:
                stop_local_ray(ray, local_dir)
            else:
                for actor in actors:
                    ray.kill(actor)
        finally:
            recorder.close()
    result = recorder.result()
    result.worker_deaths = workers_died
    return result


async def _consume(ray: Any, actor: Any, share: list[int], recorder: Recorder) -> tuple[list[int], str]:
    """Record the share's episodes as they stream in; returns the seeds lost to the worker's death, and why.

    The reason is "" when the worker did not die.
    """
    delivered: set[int] = set()
    stream = actor.play.options(num_returns="streaming").remote(share)
    try:
        async for ref in stream:
            record = record_from_json(await ref)
            delivered.add(record.seed)
            recorder.record(record)
    except ray.exceptions.RayActorError as exc:  # the worker died: its undelivered seeds are redone
        return [s for s in share if s not in delivered], f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return [], ""


def _worker_died(seed: int, run_key: str, times: int, error: str) -> Record:
    from ifgym.runner.rollout import FailedEpisode

    return FailedEpisode(
        episode_id=f"{run_key}-seed{seed}",
        env_id="",
        seed=seed,
        error={
            "type": "WorkerDiedError",
            "message": f"the Ray worker playing this episode died {times} times (last: {error})",
            "at": "",
        },
        meta={"run_key": run_key},
    )


def run_ray(
    make_env: Callable[[], Any], make_policy: Callable[[], Any], seeds: Sequence[int], **kwargs: Any
) -> RunResult:
    """Blocking wrapper around `arun_ray` (the driver's loop: `run_async`)."""
    return run_async(arun_ray(make_env, make_policy, list(seeds), **kwargs))
