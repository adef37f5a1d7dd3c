"""An example task package: `register` puts its env id and task descriptor where ifgym finds them.

ifgym calls `register` (its `ifgym.tasks` entry point) the first time it meets an env id or a task name
it does not know. String entry points: nothing of the env is imported until `gym.make` builds one.
"""

ENV_ID = "example/Echo-v0"
TASK = "echo"


def register() -> None:
    """Register the env id with gymnasium and the task descriptor with ifgym (once)."""
    from gymnasium.envs.registration import register as register_env
    from gymnasium.envs.registration import registry

    from ifgym.core import tasks

    if ENV_ID not in registry:
        register_env(id=ENV_ID, entry_point="ifgym_example_task.env:EchoEnv")
    if TASK not in tasks.task_names():
        tasks.register("ifgym_example_task.env:ECHO", TASK)
