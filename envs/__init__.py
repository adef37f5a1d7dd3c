"""The dialogue envs and the loops that run policies in them.

`ChatEnv` (base) owns the one turn loop: each task env plugs in its task's descriptor (`task`,
`ifgym.rewards.tasks`), a user simulator (`simulators/`), a scorer and a `Rubric` (`rewards/`: the
reward, the patience meter, the end rule) and fills hooks
(`_start`, `_record_start`/`_record_end`, `_scoring_spec`) instead of writing a loop of its own;
it reads what the user contributes to the record through `UserSimulator.episode_meta()`.
`rollout`/`arollout` play one episode (through the env's wrappers: `async_wrappers`);
`run`/`arun` play many (failed episodes recorded, resume, one concurrency knob), `ray_executor` on
Ray workers, `shards` combines a sharded run's files.
"""

from ifgym.envs.async_wrappers import async_reset, async_step
from ifgym.envs.base import ChatEnv
from ifgym.envs.rollout import (
    EpisodeLog,
    FailedEpisode,
    RunResult,
    arollout,
    arun,
    iter_records,
    read_episodes,
    rollout,
    run,
)
from ifgym.envs.spaces import ChatSpace, ReplySpace
from ifgym.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "ChatEnv",
    "ChatSpace",
    "EpisodeLog",
    "FailedEpisode",
    "RunResult",
    "ReplySpace",
    "arollout",
    "arun",
    "async_reset",
    "async_step",
    "iter_records",
    "read_episodes",
    "rollout",
    "run",
]
