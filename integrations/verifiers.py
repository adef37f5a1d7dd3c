"""Every ifgym env as a `verifiers.v1` environment (verifiers 0.4.0): ifgym's user speaks, verifiers' agent answers.

`load_environment(env_id, **env_kwargs)` returns a `verifiers.v1.Env` whose episodes are ifgym
episodes: for each task (one seed of `env_id`), the ifgym env is reset host-side, its simulated
user's turns are sent to verifiers' agent one by one (`Agent.interaction`), each reply is stepped
through the ifgym env (its scorer, patience and user simulator), until the ifgym env ends the
episode. So verifiers' eval (`vf-eval`) and trainers built on verifiers (prime-rl) see ifgym's
scores:

- **per turn** (verifiers 0.4 has no per-turn reward field): metrics `turn_<i>_reward` (the env's
  turn reward), and `trace.info["turn_rewards"]`;
- **per episode**: the reward `ifgym_return`, the episode return of
  `ifgym.rewards.trl.EpisodeReturn(discount, survival_bonus, per_turn)` over the turn rewards (by
  default their mean, so long and short dialogues compare); metrics `turns`, `return` (the plain
  sum), `survived` (the user did not give up), and the env's headline metrics for the episode
  (`ifgym/<metric>`, e.g. `ifgym/CSR`); the whole scored transcript (verdicts strict and loose,
  patience, end reason) in `trace.info["ifgym_episode"]` (an `ifgym.Episode` as JSON).

A turn whose agent call failed ends the episode without scoring that turn; an episode in which no
turn was answered records no reward (the trace is not ok, and verifiers reports the error).

The user's opening: the ifgym observation's system message becomes the task's system prompt, and
the messages before the first user turn (FlexBench's scripted opening line, an assistant message)
go with the first turn, so the agent sees the conversation the ifgym env defines.

verifiers finds environments by importing a top-level module named after the id (a dotted id
does not work), so the id is `ifgym-verifiers` (the module `ifgym_verifiers`, shipped with ifgym,
re-exports the classes here). From the command line::

    vf-eval ifgym-verifiers -m MODEL --client.base-url URL --client.api-key-var VAR --no-push
        --env.taskset.env-id ifgym/EvolIF-v1 --env.taskset.episodes 20

(`--no-push`: vf-eval uploads to the Prime platform otherwise.) The agent runs verifiers' `null`
harness (its tool-less chat loop) in a local subprocess runtime; verifiers launches that program
with `uv`, which installs the program's dependencies (openai, mcp, httpx, …) on first use. Offline,
point uv at local wheels: `UV_NO_INDEX=1 UV_FIND_LINKS=DIR` (the Makefile downloads them to
`.venv/uv-wheels` at set-up; `offline_uv_env()` gives the variables).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import verifiers.v1 as vf
from pydantic import Field

from ifgym.core import Episode
from ifgym.errors import ConfigError, IfgymError
from ifgym.rewards.trl import EpisodeReturn, survived

__all__ = [
    "TASKSET_ID",
    "IfgymData",
    "IfgymEnv",
    "IfgymEnvConfig",
    "IfgymTask",
    "IfgymTaskset",
    "IfgymTasksetConfig",
    "load_environment",
    "offline_uv_env",
]

TASKSET_ID = "ifgym-verifiers"  # the top-level module `ifgym_verifiers` (verifiers imports ids as modules)


class IfgymTasksetConfig(vf.TasksetConfig):
    """The environment's arguments (`--env.taskset.<field>` on verifiers' command line)."""

    env_id: str = "ifgym/EvolIF-v1"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    episodes: int = 8
    seed: int = 0
    discount: float = 1.0
    survival_bonus: float = 0.0
    per_turn: bool = True


class IfgymData(vf.TaskData):
    """One task: one seed of an ifgym env."""

    seed: int
    env_id: str


class IfgymTask(vf.Task[IfgymData, vf.State, vf.TaskConfig]):
    """A seed of an ifgym env; scored by the env itself, turn by turn (see `IfgymEnv.run`)."""


class IfgymTaskset(vf.Taskset[IfgymTask, IfgymTasksetConfig]):
    """Seeds `seed` .. `seed + episodes - 1` of `env_id`."""

    def load(self) -> Any:
        cfg = self.config
        for seed in range(cfg.seed, cfg.seed + cfg.episodes):
            data = IfgymData(name=f"{cfg.env_id}:seed-{seed}", id=str(seed), seed=seed, env_id=cfg.env_id)
            yield IfgymTask(data, cfg.task)


class IfgymEnvConfig(vf.EnvConfig):
    """One seat, `assistant`: verifiers' tool-less chat harness in a local subprocess (not a cloud sandbox)."""

    assistant: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())


class IfgymEnv(vf.Env[IfgymEnvConfig]):
    """ifgym's env drives the dialogue: its user speaks, the `assistant` agent answers, its scorer scores."""

    async def run(self, task: IfgymTask, agents: Any) -> None:
        """Play one ifgym episode through the agent; record per-turn metrics and the episode reward."""
        cfg = self.config.taskset
        env = _make(task.data.env_id, cfg.env_kwargs).unwrapped
        obs, _ = await env.areset(seed=task.data.seed)
        system = "\n\n".join(m["content"] for m in obs if m["role"] == "system") or None
        opening = [m for m in obs if m["role"] != "system"]  # the opening line (if any) and the first user turn
        chat_task = type(task)(task.data.model_copy(update={"prompt": None, "system_prompt": system}), task.config)
        async with agents.assistant.interaction(chat_task) as chat:
            message: Any = opening if len(opening) > 1 else opening[-1]["content"]
            while True:
                segment = await chat.turn(message)
                if segment.terminated or chat.trace.errors:
                    break  # a limit, or the agent's call failed: this turn is not scored
                obs, _, terminated, truncated, _ = await env.astep(segment.last_reply)
                if terminated or truncated:
                    break
                message = obs[-1]["content"]
            # recorded before the interaction closes, so verifiers' own log line shows them
            _record(chat.trace, env.episode, env, cfg)
        env.close()


def _make(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    from ifgym.core.tasks import load_plugins
    from ifgym.runner.build import known_env_ids

    if env_id not in gym.registry:  # an installed task package's id, perhaps
        load_plugins()
    try:
        return gym.make(env_id, **dict(env_kwargs))
    except gym.error.Error as exc:
        raise ConfigError(f"env_id={env_id}: {exc} ({known_env_ids()})") from None


def _record(trace: Any, episode: Episode, env: Any, cfg: IfgymTasksetConfig) -> None:
    rewards = [t.reward for t in episode.turns]
    trace.info["turn_rewards"] = rewards
    trace.info["ifgym_episode"] = episode.to_json()
    trace.info["done_reason"] = episode.done_reason
    if not rewards:
        return  # nothing answered: no reward (verifiers marks the trace failed)
    for i, r in enumerate(rewards):
        trace.record_metric(f"turn_{i}_reward", r)
    trace.record_metric("turns", float(len(rewards)))
    trace.record_metric("return", float(sum(rewards)))
    trace.record_metric("survived", float(survived(episode)))
    for name, value in env.task.summarize([episode]).items():
        if name in env.task.headline and isinstance(value, int | float) and math.isfinite(value):
            trace.record_metric(f"ifgym/{name}", float(value))
    value = EpisodeReturn(cfg.discount, cfg.survival_bonus, cfg.per_turn).score(episode)
    trace.record_reward("ifgym_return", value, 1.0)


def load_environment(env_id: str, *, episodes: int = 8, seed: int = 0, **env_kwargs: Any) -> IfgymEnv:
    """A `verifiers.v1` env playing seeds `seed` .. `seed + episodes - 1` of the ifgym env `env_id`.

    `env_kwargs` go to `gym.make(env_id, ...)` (JSON values: they travel in verifiers' config);
    the env is made once now, so a bad id or argument fails here with ifgym's error. The episode
    reward's shape (`discount`, `survival_bonus`, `per_turn`) can be passed too.
    """
    shape = {k: env_kwargs.pop(k) for k in ("discount", "survival_bonus", "per_turn") if k in env_kwargs}
    try:
        _make(env_id, env_kwargs).close()
    except IfgymError as exc:
        raise ConfigError(f"env ({env_id}): {exc}") from None
    taskset = {"id": TASKSET_ID, "env_id": env_id, "env_kwargs": env_kwargs, "episodes": episodes, "seed": seed}
    config = vf.resolve_env_config({"taskset": taskset | shape})
    return vf.load_environment(config)


def offline_uv_env(wheels: str | Path | None = None) -> dict[str, str]:
    """Environment variables that make verifiers' `uv` install its program's dependencies from local wheels only.

    `wheels`: a folder of wheels (default: `uv-wheels` beside this Python's venv, where the
    Makefile puts them). uv uses this interpreter and never downloads a Python.
    """
    folder = Path(wheels) if wheels is not None else Path(sys.prefix) / "uv-wheels"
    if not folder.is_dir():
        raise ConfigError(
            f"no wheel folder at {folder}: download the harness's dependencies there first, e.g. `pip download "
            f"--only-binary=:all: --dest {folder} openai mcp==2.0.0 httpx httpx2 tenacity certifi`"
        )
    return {
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(folder),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # uv beside this Python
    }
