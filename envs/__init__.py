"""The dialogue envs and the loops that run policies in them."""

from ifgym import lazy_submodules
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
