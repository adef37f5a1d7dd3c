"""The task registry: every env id's task resolves, an episode's task is read in one place, and a task is one plan."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import gymnasium as gym
import pytest

import ifgym
from ifgym.core import Episode, TurnRecord, TurnSpec
from ifgym.core.tasks import Task, register, task, task_names, task_of
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import CannedClient
from ifgym.policies import ScriptedPolicy
from ifgym.rewards.audit import SUITES
from ifgym.rewards.evolif.scorer import EvolIFScorer
from ifgym.rewards.tasks import EVOLIF, FLEXBENCH, FLEXBENCH_PAPER
from ifgym.rewards.trl import SCORERS
from ifgym.runner.rollout import read_episodes, run
from ifgym.simulators.evolif.replay import ReplayUser

DATA = Path(__file__).resolve().parents[1] / "data"
TASKS = ("evolif", "structflow", "flexbench", "composite", "ntm")
# env id -> the task its episodes belong to (the root package's registrations)
ENV_TASKS = {
    "ifgym/EvolIF-v1": "evolif",
    "ifgym/EvolIF-LLM-v1": "evolif",
    "ifgym/EvolIF-v0": "evolif",
    "ifgym/EvolIF-LLM-v0": "evolif",
    "ifgym/FlexBench-v0": "flexbench",
    "ifgym/FlexBench-LLM-v0": "flexbench",
    "ifgym/StructFlow-v0": "structflow",
    "ifgym/StructFlow-LLM-v0": "structflow",
    "ifgym/NTM-v1": "ntm",
    "ifgym/NTM-v0": "ntm",
    "ifgym/Composite-v0": "composite",
    "ifgym/Composite-LLM-v0": "composite",
}


def episode(env_id: str, **meta) -> Episode:
    return Episode(episode_id="e", env_id=env_id, seed=0, meta=meta)


def test_every_task_is_registered_and_resolves_to_its_descriptor():
    assert set(TASKS) <= set(task_names())
    for name in TASKS:
        assert isinstance(task(name), Task) and task(name).name == name
    assert task("evolif") is EVOLIF  # imported once, then the same object


@pytest.mark.parametrize("name", TASKS)
def test_a_task_is_one_consistent_plan(name):
    t = task(name)
    assert t.headline_metric in t.headline  # the one a run is read by first is among those with intervals
    assert set(t.headline) <= set(t.definitions)  # every headline metric has its line under the table
    assert t.judge_suite in SUITES  # the judge audit knows the suite
    assert pickle.loads(pickle.dumps(t)) == t  # Ray workers get envs (and their task) pickled


def test_every_env_id_has_a_case_here():
    assert set(ENV_TASKS) == set(ifgym.ENV_IDS)


@pytest.mark.parametrize(("env_id", "name"), ENV_TASKS.items())
def test_an_episode_file_from_before_meta_task_is_read_as_its_env_ids_task(env_id, name):
    assert task_of(episode(env_id)).name == name


# the ids that build offline (the LLM ids need a model; NTM a dataset and a judge)
OFFLINE = {
    "ifgym/EvolIF-v1": {},
    "ifgym/FlexBench-v0": {},
    "ifgym/StructFlow-v0": {},
    "ifgym/Composite-v0": {},
    "ifgym/NTM-v1": {"dataset": str(DATA / "ntm" / "made_up.jsonl"), "judge_llm": CannedClient(["Yes"], role="judge")},
}


@pytest.mark.parametrize("env_id", OFFLINE)
def test_an_env_holds_its_task(env_id):
    env = gym.make(env_id, **OFFLINE[env_id])
    assert env.unwrapped.task is task(ENV_TASKS[env_id])
    env.close()


def test_flexbench_with_the_papers_metrics_holds_the_papers_headline():
    env = gym.make("ifgym/FlexBench-v0", metrics="paper")
    assert env.unwrapped.task is FLEXBENCH_PAPER and env.unwrapped.task.headline_metric == "Achievement"


def test_meta_task_wins_over_the_env_id():
    assert task_of(episode("ifgym/EvolIF-v1", task="structflow")).name == "structflow"


def test_an_episode_of_no_known_task_is_refused_with_what_to_do():
    with pytest.raises(DataFormatError, match=r"env 'my/Thing-v0'.*no registered task.*meta\['task'\]"):
        task_of(episode("my/Thing-v0"))


def test_an_unknown_task_name_gets_a_did_you_mean():
    with pytest.raises(UnknownNameError, match="Did you mean 'flexbench'"):
        task("flexbnech")


def test_a_task_of_ones_own_registers_as_an_object():
    own = Task(
        name="test_own",
        summarize=EVOLIF.summarize,
        episode_row=EVOLIF.episode_row,
        summarize_rows=EVOLIF.summarize_rows,
        headline=("CSR",),
        headline_metric="CSR",
        definitions={"CSR": "…"},
        training_reward=EVOLIF.training_reward,
    )
    register(own)
    assert task("test_own") is own and task_of(episode("x/Own-v0", task="test_own")) is own
    with pytest.raises(ValueError, match="entry point"):
        register("not-an-entry-point", "other")


def test_chat_env_has_no_default_task():
    user, scorer = ReplayUser(DATA / "evolif_dialogue.jsonl"), EvolIFScorer(None)
    with pytest.raises(TypeError, match="task"):
        ChatEnv(user=user, scorer=scorer)
    with pytest.raises(ConfigError, match="task must be an ifgym.core.tasks.Task"):
        ChatEnv(task="evolif", user=user, scorer=scorer)


def test_training_rewards_and_export_rules_follow_the_task():
    assert {task(n).training_reward(episode("x")) for n in TASKS} <= set(SCORERS)
    assert EVOLIF.training_reward(episode("ifgym/EvolIF-v1")) == "constraints"
    assert EVOLIF.training_reward(episode("ifgym/EvolIF-v1", dialogue={"file": "a"})) == "checklist"  # a replay
    assert task("structflow").training_reward(episode("ifgym/StructFlow-v0")) == "checklist"
    assert FLEXBENCH.training_reward(episode("ifgym/FlexBench-v0")) == "flexbench"
    assert EVOLIF.opening_line is None and EVOLIF.turn_reward is None  # the recorded turn reward, no opening
    flex = episode("ifgym/FlexBench-v0", flexbench={"opening_line": "Hello, Acme here."})
    assert FLEXBENCH.opening_line(flex) == "Hello, Acme here."
    assert FLEXBENCH.loose_metrics is False and EVOLIF.loose_metrics is True
    assert FLEXBENCH_PAPER.name == "flexbench" and FLEXBENCH_PAPER.headline_metric == "Achievement"


def test_rescoring_reads_back_what_the_tasks_user_recorded():
    spec_turn = TurnRecord(0, "hi", TurnSpec(), "hello", [], [], 0.0, 2, {})
    replayed = Episode("e", "ifgym/StructFlow-v0", 0, [spec_turn], meta={"dialogue": {"index": 3}, "persona": "p"})
    assert task("structflow").user_meta(replayed, 0) == {"index": 3, "persona": "p"}
    call = Episode("e", "ifgym/FlexBench-v0", 0, [spec_turn], meta={"flexbench": {"facts": {"a": 1}}})
    assert FLEXBENCH.user_meta(call, 0) == {"facts": {"a": 1}, "patience": 2}  # the caller's own patience too


def test_a_runs_file_names_each_episodes_task_and_reads_back_without_it(tmp_path):
    out = tmp_path / "episodes.jsonl"
    make_env = lambda: gym.make("ifgym/StructFlow-v0", max_turns=2)  # noqa: E731
    run(make_env, lambda: ScriptedPolicy(["A reply."]), range(2), output=out, progress=False)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["meta"]["task"] for line in lines] == ["structflow", "structflow"]
    for line in lines:  # the same file as written before meta["task"]: its env id says the task
        del line["meta"]["task"]
    out.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert [task_of(e).name for e in read_episodes(out)] == ["structflow", "structflow"]


def test_a_task_package_that_fails_to_load_is_named(monkeypatch):
    import importlib.metadata

    from ifgym.core import tasks
    from ifgym.errors import ConfigError

    # stands for an installed package whose ifgym.tasks entry point names a module that is gone
    broken = importlib.metadata.EntryPoint("broken", "no_such_task_module:register", tasks.ENTRY_POINT_GROUP)
    monkeypatch.setattr(tasks.importlib.metadata, "entry_points", lambda group: [broken])
    with pytest.raises(ConfigError) as caught:
        task("no_such_task")
    assert str(caught.value).startswith(
        "the ifgym.tasks entry point 'broken' = 'no_such_task_module:register' of an unknown package failed: "
        "ModuleNotFoundError: No module named 'no_such_task_module'"
    )
    assert "broken" not in tasks._loaded  # tried again next time, never skipped


def test_a_task_package_registers_its_task_when_an_unknown_name_is_asked(monkeypatch):
    import importlib.metadata
    import sys
    import types

    from ifgym.core import tasks
    from ifgym.rewards.tasks import EVOLIF

    # stands for an installed package: a module with a register function, and its entry point
    module = types.ModuleType("fake_task_package")
    module.register = lambda: register(Task(**{**EVOLIF.__dict__, "name": "fake_task"}))
    monkeypatch.setitem(sys.modules, "fake_task_package", module)
    entry = importlib.metadata.EntryPoint("fake", "fake_task_package:register", tasks.ENTRY_POINT_GROUP)
    monkeypatch.setattr(tasks.importlib.metadata, "entry_points", lambda group: [entry])
    monkeypatch.delitem(tasks._loaded, "fake", raising=False)  # both put back as they were after the test
    monkeypatch.delitem(tasks._REGISTRY, "fake_task", raising=False)
    assert "fake_task" not in task_names()
    assert task("fake_task").headline_metric == EVOLIF.headline_metric
    assert tasks._loaded["fake"] == "an unknown package"
