"""verifiers imports an environment by a top-level module named after its id: this is ifgym's (`ifgym-verifiers`).

Use `ifgym.integrations.verifiers.load_environment(env_id, ...)` from Python, or
`vf-eval ifgym-verifiers --env.taskset.env-id ifgym/EvolIF-v1 …`; see that module.
"""

from ifgym.integrations.verifiers import (
    IfgymData,
    IfgymEnv,
    IfgymEnvConfig,
    IfgymTask,
    IfgymTaskset,
    IfgymTasksetConfig,
)

__all__ = ["IfgymData", "IfgymEnv", "IfgymEnvConfig", "IfgymTask", "IfgymTaskset", "IfgymTasksetConfig"]
