"""Run policies in envs: one episode, or many concurrently with a JSONL log that resumes.

Concurrency is asyncio: every episode has its own env and policy, and awaits the model calls of
its turn; the clients' per-role semaphores bound the load. Episodes of different lengths never
wait for each other. Each finished episode is appended to the output at once, so an interrupted
run loses at most the episodes in flight, and re-running into the same file skips finished ones.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from ifgym.core import Episode
from ifgym.errors import ConfigError, DataFormatError
from ifgym.files import not_a_folder


def _finish(env: gym.Env, policy: Any) -> Episode:
    episode = env.unwrapped.episode
    # this episode's numbers (counted since reset); a policy without them gives its lifetime totals
    usage = getattr(policy, "episode_usage", None)
    episode.meta["policy_usage"] = dict(usage if usage is not None else policy.usage)
    record = getattr(policy, "episode_record", None)
    if callable(record):  # wrappers: per-turn costs, their graph/forest, counters of defaults taken
        episode.meta["policy_trace"] = record()
    return episode


def rollout(env: gym.Env, policy: Any, *, seed: int | None = None, options: dict | None = None) -> Episode:
    """Play one episode to its end with `policy` (anything with reset() and act(messages) -> str)."""
    policy.reset()
    obs, _ = env.reset(seed=seed, options=options)
    while True:
        obs, _, terminated, truncated, _ = env.step(policy.act(obs))
        if terminated or truncated:
            return _finish(env, policy)


async def arollout(env: gym.Env, policy: Any, *, seed: int | None = None, options: dict | None = None) -> Episode:
    """Async twin of `rollout`: awaits the policy's `aact` and the env's `astep`."""
    base = env.unwrapped
    policy.reset()
    obs, _ = await base.areset(seed=seed, options=options)
    while True:
        obs, _, terminated, truncated, _ = await base.astep(await policy.aact(obs))
        if terminated or truncated:
            return _finish(env, policy)


def read_episodes(path: str | Path) -> list[Episode]:
    """Episodes from a JSONL file. A cut-off last line (an interrupted write) is ignored."""
    path = not_a_folder(path, "episodes file")
    if not path.exists():
        return []
    episodes = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            episodes.append(Episode.from_json(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if number == len(lines):  # the tail of an interrupted append
                break
            raise DataFormatError(f"{path}:{number}: not an episode record ({exc}); fix or remove that line") from exc
    return episodes


def _drop_partial_tail(path: Path) -> None:
    """Cut a trailing partial line so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


class EpisodeLog:
    """Append-only JSONL of finished episodes for one run (identified by `run_key`)."""

    def __init__(self, path: str | Path, run_key: str):
        self.path = Path(path)
        self.run_key = run_key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_partial_tail(self.path)
        self.done = read_episodes(self.path)
        other = {e.meta.get("run_key") for e in self.done} - {run_key}
        if other:
            raise ConfigError(
                f"{self.path} holds episodes of another configuration (run_key {sorted(map(str, other))}, this "
                f"run is {run_key}); write to a new output path or delete that file"
            )

    def append(self, episode: Episode) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(episode.to_jsonl() + "\n")
            f.flush()
            os.fsync(f.fileno())


async def arun(
    make_env: Callable[[], gym.Env],
    make_policy: Callable[[], Any],
    seeds: Sequence[int],
    *,
    output: str | Path | None = None,
    run_key: str = "run",
    concurrency: int = 4,
    progress: bool = True,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run one episode per seed, `concurrency` at a time; returns all episodes of the run, by seed.

    With `output`, finished episodes are appended as they finish and seeds already in the file
    (same `run_key`) are skipped.
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError("seeds must be distinct: each seed names one episode of the run")
    log = EpisodeLog(output, run_key) if output is not None else None
    finished = {e.seed: e for e in log.done} if log else {}
    todo = [s for s in seeds if s not in finished]
    bar = tqdm(total=len(seeds), initial=len(seeds) - len(todo), desc="episodes", disable=not progress)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for s in todo:
        queue.put_nowait(s)

    async def worker() -> None:
        while not queue.empty():
            seed = queue.get_nowait()
            episode = await arollout(make_env(), make_policy(), seed=seed)
            episode.episode_id = f"{run_key}-seed{seed}"
            episode.meta["run_key"] = run_key
            finished[seed] = episode
            if log:
                log.append(episode)
            if on_episode:
                on_episode(episode)
            bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(todo)))))
    finally:
        bar.close()
    return [finished[s] for s in seeds if s in finished]


def run(
    make_env: Callable[[], gym.Env], make_policy: Callable[[], Any], seeds: Iterable[int], **kwargs: Any
) -> list[Episode]:
    """Blocking wrapper around `arun` for scripts and the CLI."""
    return asyncio.run(arun(make_env, make_policy, list(seeds), **kwargs))
