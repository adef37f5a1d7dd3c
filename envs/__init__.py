"""The dialogue envs.

`ChatEnv` (base) owns the one turn loop: each task env plugs in its task's descriptor (`task`,
`ifgym.rewards.tasks`), a user simulator (`simulators/`), a scorer and a `Rubric` (`rewards/`: the
reward, the patience meter, the end rule) and fills hooks
(`_start`, `_record_start`/`_record_end`, `_scoring_spec`) instead of writing a loop of its own;
it reads what the user contributes to the record through `UserSimulator.episode_meta()`.
Playing episodes in an env (`rollout`, `run`, the Ray executor, shards) is `ifgym.runner`'s.
"""

from ifgym.envs.base import ChatEnv
from ifgym.envs.spaces import ChatSpace, ReplySpace
from ifgym.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = ["ChatEnv", "ChatSpace", "ReplySpace"]
