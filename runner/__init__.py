"""The runner: playing episodes in an env and turning them into a run folder.

Filled in by the next commits; see README "Architecture".
"""

from ifgym.lazy import lazy_submodules
from ifgym.runner.async_wrappers import async_reset, async_step
from ifgym.runner.rollout import (
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

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "EpisodeLog",
    "FailedEpisode",
    "RunResult",
    "arollout",
    "arun",
    "async_reset",
    "async_step",
    "iter_records",
    "read_episodes",
    "rollout",
    "run",
]
