"""ifgym: multi-turn instruction following as Gymnasium environments.

Importing ifgym registers its env ids with gymnasium and its tasks' descriptors with
`ifgym.core.tasks` (string entry points, so nothing heavy is imported until `gym.make` or a
task is first asked for). Submodules load on first attribute access, so after `import ifgym`
`help(ifgym.envs.evolif.EvolIFEnv)` works without importing anything else up front.
"""

import os as _os
import sys as _sys


def _interrupted_at_start_up(kind: type[BaseException], value: BaseException, tb: object) -> None:
    """The `ifgym` command's Ctrl-C before its own handling starts (while it imports): one line, no traceback."""
    if issubclass(kind, KeyboardInterrupt):
        print("ifgym: interrupted (Ctrl-C)", file=_sys.stderr, flush=True)
        _os._exit(130)
    _sys.__excepthook__(kind, value, tb)


def _interrupt_in_clean_up(unraisable: object) -> None:
    """A Ctrl-C that lands in an object's clean-up (a `__del__` while a run ends): the run's own handling tells it."""
    if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
        return
    _sys.__unraisablehook__(unraisable)


# run as the `ifgym` command (its console script, or `python -m ifgym.cli`): the first code it runs, before any
# import of its own (os and sys are loaded with the interpreter)
if _os.path.basename(_sys.argv[0]) == "ifgym" or _sys.orig_argv[1:3] == ["-m", "ifgym.cli"]:
    _sys.excepthook = _interrupted_at_start_up
    _sys.unraisablehook = _interrupt_in_clean_up

from pathlib import Path  # noqa: E402

from gymnasium.envs.registration import register, registry  # noqa: E402

from ifgym.core import Episode, TurnRecord, TurnSpec, UserTurn, Verdict  # noqa: E402
from ifgym.core import tasks as _tasks  # noqa: E402
from ifgym.lazy import lazy_submodules  # noqa: E402
from ifgym.version import __version__ as __version__  # noqa: E402 (written once, in a module rooms may import)

# pytest (importlib mode) also runs this file as a plain module when the checkout folder's name is not
# an identifier (e.g. a worktree named `evolif-user`): there is no __path__ then, only __file__.
__getattr__ = lazy_submodules(__name__, globals().get("__path__") or [str(Path(__file__).parent)])
__all__ = ["ENV_IDS", "Episode", "TurnRecord", "TurnSpec", "UserTurn", "Verdict"]

# Every env id, in one place. LLM-backed ids are nondeterministic (the user or judge is a model).
# EvolIF v0 stays registered with its first-release behaviour (see EvolIFEnv's Version History).
_EVOLIF_V0 = {"restate": "all", "adaptive": True, "user_checks": "model", "max_turns": 20, "judge_mode": "rating"}
_ENVS = {
    "ifgym/EvolIF-v1": dict(entry_point="ifgym.envs.evolif:EvolIFEnv", nondeterministic=False, kwargs={}),
    "ifgym/EvolIF-LLM-v1": dict(
        entry_point="ifgym.envs.evolif:EvolIFEnv",
        nondeterministic=True,
        kwargs={"renderer": "llm", "judge": "llm", "env_name": "ifgym/EvolIF-LLM-v1"},
    ),
    "ifgym/EvolIF-v0": dict(
        entry_point="ifgym.envs.evolif:EvolIFEnv",
        nondeterministic=False,
        kwargs={**_EVOLIF_V0, "env_name": "ifgym/EvolIF-v0"},
    ),
    "ifgym/EvolIF-LLM-v0": dict(
        entry_point="ifgym.envs.evolif:EvolIFEnv",
        nondeterministic=True,
        kwargs={**_EVOLIF_V0, "renderer": "llm", "judge": "llm", "env_name": "ifgym/EvolIF-LLM-v0"},
    ),
    "ifgym/FlexBench-v0": dict(entry_point="ifgym.envs.flexbench:FlexBenchEnv", nondeterministic=False, kwargs={}),
    "ifgym/FlexBench-LLM-v0": dict(
        entry_point="ifgym.envs.flexbench:FlexBenchEnv",
        nondeterministic=True,
        kwargs={"user": "llm", "judge": "llm", "env_name": "ifgym/FlexBench-LLM-v0"},
    ),
    "ifgym/StructFlow-v0": dict(entry_point="ifgym.envs.structflow:StructFlowEnv", nondeterministic=False, kwargs={}),
    "ifgym/StructFlow-LLM-v0": dict(
        entry_point="ifgym.envs.structflow:StructFlowEnv",
        nondeterministic=True,
        kwargs={"generator": "llm", "judge": "llm", "env_name": "ifgym/StructFlow-LLM-v0"},
    ),
    "ifgym/NTM-v1": dict(entry_point="ifgym.envs.ntm:NTMEnv", nondeterministic=True, kwargs={}),  # judge=llm
    # NTM v0 stays registered with its first-release checkpoint reading (see NTMEnv's Version History).
    "ifgym/NTM-v0": dict(
        entry_point="ifgym.envs.ntm:NTMEnv",
        nondeterministic=True,
        kwargs={"checkpoint_scope": False, "env_name": "ifgym/NTM-v0"},
    ),
    "ifgym/Composite-v0": dict(entry_point="ifgym.envs.composite:CompositeEnv", nondeterministic=False, kwargs={}),
    "ifgym/Composite-LLM-v0": dict(
        entry_point="ifgym.envs.composite:CompositeEnv",
        nondeterministic=True,
        kwargs={"renderer": "llm", "judge": "llm", "env_name": "ifgym/Composite-LLM-v0"},
    ),
}
ENV_IDS = tuple(_ENVS)

for _id, _spec in _ENVS.items():
    if _id not in registry:
        register(id=_id, disable_env_checker=False, **_spec)

# Every task's descriptor (ifgym.core.tasks.Task: what is task-specific), by name, in one place;
# a descriptor is imported when first asked for (`ifgym.core.tasks.task(name)`, `task_of(episode)`).
_TASKS = {
    "evolif": "ifgym.rewards.tasks:EVOLIF",
    "evolif_paper": "ifgym.rewards.tasks:EVOLIF_PAPER",  # REC with score.py's 0/0 convention
    "structflow": "ifgym.rewards.tasks:STRUCTFLOW",
    "structflow_paper": "ifgym.rewards.tasks:STRUCTFLOW_PAPER",  # WCSR as the papers' equation
    "flexbench": "ifgym.rewards.tasks:FLEXBENCH",
    "composite": "ifgym.rewards.tasks:COMPOSITE",
    "ntm": "ifgym.rewards.tasks:NTM",
}
for _name, _entry_point in _TASKS.items():
    if _name not in _tasks.task_names():
        _tasks.register(_entry_point, _name)
