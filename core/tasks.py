"""What is task-specific, in one place per task: the `Task` descriptor and the registry of tasks.

A task (EvolIF, StructFlow, FlexBench, Composite, NTM) is more than its env: a run's summary, its
intervals, the report, the judge audit, the TRL rewards and the training exports each need to know
which metrics the task reports and how its episodes are read. The `Task` says so once; the env
holds it (`ChatEnv(task=…)`, `env.task`) and everything that reads a finished run asks
`task_of(episode)`, never the episode's meta keys or the env's attributes.

Each task's descriptor is defined with its metrics (`ifgym.rewards.tasks`); the root package
registers them by name with string entry points (as it registers the env ids), so this neutral
module names no room and a descriptor is imported only when first asked for. `register` also takes
a `Task` itself (a task of one's own).

Installed packages add tasks through the entry point group `ifgym.tasks` (docs/plugins.md): each entry
point is a function that registers the package's env ids with gymnasium and its descriptors here.
`load_plugins` calls them, once, when ifgym meets a task name or an env id it does not know.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core.turns import Episode, TurnRecord
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError

__all__ = ["Task", "load_plugins", "recorded_user_meta", "register", "task", "task_of", "task_names"]

ENTRY_POINT_GROUP = "ifgym.tasks"


def recorded_user_meta(episode: Episode, at: int) -> dict[str, Any]:
    """What a user contributed to `episode`'s meta, as recorded: its dialogue's entries, its persona and structure."""
    meta = episode.meta
    return {**dict(meta.get("dialogue") or {}), **{k: meta[k] for k in ("persona", "structure") if k in meta}}


@dataclass(frozen=True)
class Task:
    """One task's plan: what its runs report and how its episodes become rows, rewards and training data.

    Metrics: `summarize(episodes, loose=False)` gives the task's metrics over finished episodes, the
    same split in two so a run keeps numbers, never its episodes (`episode_row(episode, loose)`,
    then `summarize_rows(rows, loose)`); `summary_ratios(rows, loose)` is the bootstrap intervals'
    fast path (`ifgym.core.stats`; None: resample `summarize_rows`). `headline` are the keys of
    `summarize` that get intervals, `headline_metric` the one a run is read by first,
    `definitions` one line per metric under the results table, `aliases` earlier names kept in
    `summarize` (not printed). `loose_metrics`: whether runs report a loose variant (FlexBench's
    dimension verdicts have none). `judge_suite`: the judge audit's suite for the task's LLM judge.

    Training: `training_reward(episode)` names the TRL reward that scores its turns
    (`ifgym.rewards.trl.SCORERS`: "constraints", "checklist" or "flexbench"); `opening_line(episode)`
    is a scripted first assistant message the policy saw (None: none); `turn_reward(episode, turn)`
    a task's own per-turn reward for the exports (None: the recorded turn reward).

    Report: `report_sections(episodes, folder, plots=…, subtitle=…)` writes the task's own files
    beside a run's summary (FlexBench: the per-dimension table, its heatmap with `plots`) and
    returns name -> path; `ifgym eval` calls it after a run with the run's folder and title
    (None: the task has no files of its own).

    Rescoring: `user_meta(episode, at)` is what the task's user contributed to the episode's meta
    (its `episode_meta()`) after answering turn `at`, read back from the record, so a rescored
    episode records it unchanged (`ifgym rescore`; by default `recorded_user_meta`).
    """

    name: str
    summarize: Callable[..., dict[str, Any]]
    episode_row: Callable[..., Any]
    summarize_rows: Callable[..., dict[str, Any]]
    headline: tuple[str, ...]
    headline_metric: str
    definitions: Mapping[str, str]
    training_reward: Callable[[Episode], str]
    aliases: Mapping[str, str] = field(default_factory=dict)
    summary_ratios: Callable[..., Any] | None = None
    loose_metrics: bool = True
    judge_suite: str | None = None
    opening_line: Callable[[Episode], str | None] | None = None
    turn_reward: Callable[[Episode, TurnRecord], float | None] | None = None
    report_sections: Callable[..., dict[str, Path]] | None = None
    user_meta: Callable[[Episode, int], dict[str, Any]] = recorded_user_meta


_REGISTRY: dict[str, Task | str] = {}  # name -> the Task, or its entry point "module:attribute" until first asked


def register(entry: Task | str, name: str | None = None) -> None:
    """Register a `Task`, or a task `name` by its entry point ("module:attribute", imported when first asked)."""
    if isinstance(entry, Task):
        _REGISTRY[entry.name] = entry
        return
    if name is None or ":" not in entry:
        raise ValueError(f"register a Task, or a name with an entry point 'module:attribute'; got {entry!r}")
    _REGISTRY[name] = entry


def task_names() -> tuple[str, ...]:
    """Every registered task's name."""
    return tuple(_REGISTRY)


_loaded: dict[str, str] = {}  # entry point name -> the distribution that gave it, once its function has run


def load_plugins() -> dict[str, str]:
    """Run the `ifgym.tasks` entry point of every installed package not run yet; entry point name -> package.

    Each entry point names a function of no arguments that registers its package's env ids
    (`gymnasium.register`) and task descriptors (`register`). One that fails raises a ConfigError
    naming it and its package: a task package that cannot load is never skipped silently.
    """
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in _loaded:
            continue
        package = f"{entry.dist.name} {entry.dist.version}" if entry.dist is not None else "an unknown package"
        try:
            entry.load()()
        except Exception as exc:
            raise ConfigError(
                f"the {ENTRY_POINT_GROUP} entry point {entry.name!r} = {entry.value!r} of {package} failed: "
                f"{type(exc).__name__}: {exc} (reinstall or uninstall that package)"
            ) from exc
        _loaded[entry.name] = package
    return dict(_loaded)


def task(name: str) -> Task:
    """The registered task called `name` (an unknown one gets a did-you-mean)."""
    if name not in _REGISTRY:  # an installed task package's, perhaps
        load_plugins()
    entry = _REGISTRY.get(name)
    if entry is None:
        raise UnknownNameError("task", name, task_names())
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = getattr(importlib.import_module(module), attribute)
        if not isinstance(entry, Task) or entry.name != name:
            raise TypeError(f"task {name!r}: {_REGISTRY[name]} is not the Task named {name!r}")
        _REGISTRY[name] = entry
    return entry


def _name_from_env_id(env_id: str) -> str:
    """The task an env id belongs to, for episodes recorded before `meta["task"]`: "ifgym/EvolIF-LLM-v1" -> "evolif"."""
    return env_id.rpartition("/")[2].partition("-")[0].lower()


def task_of(episode: Episode) -> Task:
    """The task `episode` was played in: its `meta["task"]`, or for an earlier record, the task its env id names.

    The one place an episode's task is read: every reader of finished episodes (the report,
    rescoring, exports, TRL rewards) dispatches on what this returns.
    """
    name = episode.meta.get("task") or _name_from_env_id(episode.env_id)
    if name not in _REGISTRY:  # an installed task package's, perhaps
        load_plugins()
    if name not in _REGISTRY:
        raise DataFormatError(
            f"episode {episode.episode_id!r} (env {episode.env_id!r}) names no registered task "
            f"(one of {', '.join(task_names())}); record its task as meta['task']"
        )
    return task(name)
