"""Turn rewards for every env in TRL's shape: StructFlow checklists, FlexBench dimensions, dispatch, episode returns.

The strongest check is against the envs themselves: every row exported from real episodes, scored
with its recorded reply, gets the reward the env gave that turn.
"""

from __future__ import annotations

import asyncio
import json
import pickle

import gymnasium as gym
import pytest
from support.canned_server import CannedServer
from support.flexbench_agents import AGENTS, Policy, RuleBreaker

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.core import ChecklistItem, Episode, TurnRecord, TurnSpec, Verdict
from ifgym.core.constraints import Constraint
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import make_client
from ifgym.policies import ScriptedPolicy
from ifgym.rewards.export import prompt_rows
from ifgym.rewards.flexbench import load_dimensions
from ifgym.rewards.structflow.judge import ChecklistJudge
from ifgym.rewards.trl import (
    AsyncReward,
    ChecklistReward,
    EpisodeReturn,
    FlexBenchReward,
    TurnReward,
    episode_return,
    survived,
)
from ifgym.runner.rollout import rollout

LOWER = ChecklistItem("c1", "Is the response in lowercase?", "Style", constraint=Constraint("case.lower", {}))
SHORT = ChecklistItem("c2", "Is the response limited to 5 words?", "Length Constraint")  # a question rule decides it
RELATION = ChecklistItem("c3", "Does the response refine the earlier answer?", "refinement", "structural", 2.0)


def checklist(*items: ChecklistItem) -> str:
    return json.dumps([i.to_json() for i in items])


@pytest.mark.parametrize(
    ("reply", "items", "mode", "expected"),
    [
        # both rule items hold
        ("all small words here", [LOWER, SHORT], "weighted", 1.0),
        # lowercase fails, length holds: 1 of 2
        ("All small words here", [LOWER, SHORT], "weighted", 0.5),
        ("All small words here", [LOWER, SHORT], "all_pass", 0.0),
        # six words and lowercase: the question rule says no
        ("one two three four five six", [LOWER, SHORT], "fraction", 0.5),
        # the structural item needs a judge: without one it is left out, the rule items decide
        ("All small words here", [LOWER, SHORT, RELATION], "weighted", 0.5),
        # only judge items and no judge: nothing to score
        ("anything", [RELATION], "weighted", None),
        # an empty checklist: nothing to score (the env gives 1; nothing to learn from)
        ("anything", [], "weighted", None),
    ],
)
def test_checklist_reward_without_judge(reply, items, mode, expected):
    assert ChecklistReward(mode=mode)([reply], checklist=[checklist(*items)]) == [expected]


def judge_server(answers: list[str]) -> CannedServer:
    """A canned judge model: answers each checklist with the next JSON list of yes/no."""
    it = iter(answers)
    return CannedServer(lambda body: next(it), model="judge")


def test_checklist_reward_with_a_judge_weighs_structural_items_two():
    # the judge answers the structural item only (rule items never reach it): No
    with judge_server(['{"results": [{"item": 1, "judgement": "No"}]}']) as srv:
        judge = ChecklistJudge(make_client({"base_url": srv.base_url, "model": "judge"}, "judge"))
        prompt = [{"role": "user", "content": "Shorten it, in lowercase."}]
        out = ChecklistReward(judge)(
            ["all small words here"], checklist=[checklist(LOWER, SHORT, RELATION)], prompts=[prompt]
        )
        # weighted: yes 1 + yes 1 + no 2 -> 2 / 4
        assert out == [0.5]
        assert len(srv.requests) == 1
        asked = srv.requests[0]["messages"][-1]["content"]
        assert "refine the earlier answer" in asked and "lowercase?" not in asked
        assert "Shorten it, in lowercase." in json.dumps(srv.requests[0]["messages"])


def test_checklist_judge_answers_run_concurrently_under_trl_async_call():
    answers = ['{"results": [{"item": 1, "judgement": "Yes"}]}'] * 3
    with judge_server(answers) as srv:
        srv.delay = 0.3
        judge = ChecklistJudge(make_client({"base_url": srv.base_url, "model": "judge"}, "judge"))
        reward = AsyncReward(ChecklistReward(judge))
        prompt = [{"role": "user", "content": "Refine it."}]
        out = asyncio.run(reward(["a", "b", "c"], checklist=[checklist(RELATION)] * 3, prompts=[prompt] * 3))
        assert out == [1.0, 1.0, 1.0]
        assert srv.max_in_flight > 1
    assert reward.__name__ == "ifgym_checklist_weighted_judged"


def test_turn_reward_awaited_gives_the_blocking_rewards_with_the_judge_calls_concurrent():
    answers = ['{"results": [{"item": 1, "judgement": "Yes"}]}', '{"results": [{"item": 1, "judgement": "No"}]}']
    row = {
        "scorer": ["checklist", "constraints", "checklist"],
        "constraints": ["[]", json.dumps([{"id": "case.lower", "params": {}}]), "[]"],
        "checklist": [checklist(RELATION), "[]", checklist(RELATION)],
        "prompts": [[{"role": "user", "content": "Refine it."}]] * 3,
    }
    with judge_server(answers * 2) as srv:
        srv.delay = 0.3
        judge = ChecklistJudge(make_client({"base_url": srv.base_url, "model": "judge"}, "judge"))
        blocking = TurnReward(judge)(["a", "B", "c"], **row)
        assert srv.max_in_flight == 1  # the blocking form asks one row after the other
        awaited = asyncio.run(AsyncReward(TurnReward(judge))(["a", "B", "c"], **row))
        assert srv.max_in_flight > 1  # the awaited form asks the batch's rows together
    assert blocking == [1.0, 0.0, 0.0]  # yes, lowercase broken, no
    assert awaited[1] == 0.0 and sorted(awaited) == [0.0, 0.0, 1.0]  # the judge answers in the order it took the calls


def test_unreadable_judge_answer_is_unknown_not_a_score():
    with judge_server(["I cannot tell."] * 3) as srv:
        judge = ChecklistJudge(make_client({"base_url": srv.base_url, "model": "judge"}, "judge"), max_retries=2)
        prompts = [[{"role": "user", "content": "?"}]]
        out = ChecklistReward(judge)(["x"], checklist=[checklist(RELATION)], prompts=prompts)
    assert out == [None]  # every item unknown: undefined, never 0 or 1


def flex_row(history: list[dict[str, str]]) -> dict:
    return {"dimensions": [json.dumps(load_dimensions("merchant_onboarding").to_json())], "prompts": [history]}


def test_flexbench_reward_by_hand():
    dims = load_dimensions("merchant_onboarding")
    env = gym.make("ifgym/FlexBench-v0", cooperativeness="good")
    obs, _ = env.reset(seed=0)
    reward = FlexBenchReward()
    row = flex_row(obs)
    # a reply that does nothing: no dimension newly satisfied, no rule broken
    assert reward(["Okay."], **row) == [0.0]
    # the env agrees on what a step earns: same reply, same turn reward
    agent = AGENTS["merchant_onboarding"]()
    good = agent.act(obs)
    _, env_reward, *_ = env.step(good)
    assert reward([good], **row) == [pytest.approx(env_reward)]
    assert env_reward > 0 and env_reward * len(dims.ids) == pytest.approx(round(env_reward * len(dims.ids)))


def test_flexbench_reward_without_offline_rules_is_none():
    dims = load_dimensions("merchant_onboarding").to_json()
    for d in dims["dimensions"]:
        d.pop("rule", None)
    out = FlexBenchReward()(["Hello."], dimensions=[json.dumps(dims)], prompts=[[{"role": "user", "content": "Hi"}]])
    assert out == [None]


def play(env_id: str, policy, seeds, **kwargs) -> list[Episode]:
    return [rollout(gym.make(env_id, **kwargs), policy, seed=s) for s in seeds]


def rescored(episodes: list[Episode]) -> tuple[list, list]:
    rows, _ = prompt_rows(episodes)
    columns = {k: [r[k] for r in rows] for k in ("scorer", "constraints", "checklist", "dimensions", "prompt")}
    got = TurnReward()([r["reply"] for r in rows], prompts=columns.pop("prompt"), **columns)
    return got, [r["reward"] for r in rows]


def test_turn_reward_recomputes_every_envs_recorded_reward():
    evolif = play("ifgym/EvolIF-v1", ScriptedPolicy(["sure, here it is.", "OK"]), range(3), max_turns=6)
    structflow = play("ifgym/StructFlow-v0", ScriptedPolicy(["Sure. Here is a short answer about it."]), range(3))
    merchant = lambda: Policy(AGENTS["merchant_onboarding"]())  # noqa: E731
    flexbench = play("ifgym/FlexBench-v0", merchant(), range(2))
    flexbench += play("ifgym/FlexBench-v0", Policy(RuleBreaker(AGENTS["merchant_onboarding"]())), range(2))
    for episodes in (evolif, structflow, flexbench):
        got, recorded = rescored(episodes)
        assert got == pytest.approx(recorded)
        assert len({g for g in got if g is not None}) > 1, "the rewards must vary for this check to mean anything"
    got, _ = rescored(flexbench)
    assert min(g for g in got if g is not None) < 0  # a broken always-on rule costs


def test_turn_reward_dispatches_a_mixed_batch_and_pickles():
    items = checklist(LOWER)
    row = {
        "scorer": ["constraints", "checklist", "flexbench"],
        "constraints": [json.dumps([{"id": "case.lower", "params": {}}]), "[]", "[]"],
        "checklist": ["[]", items, "[]"],
        "dimensions": ["", "", flex_row([])["dimensions"][0]],
    }
    history = [
        {"role": "system", "content": "SOP"},
        {"role": "assistant", "content": "opening"},
        {"role": "user", "content": "hi"},
    ]
    row["prompts"] = [history] * 3
    reward = pickle.loads(pickle.dumps(TurnReward()))
    assert reward(["HELLO", "hello", "Okay."], **row) == [0.0, 1.0, 0.0]
    with pytest.raises(UnknownNameError, match="Did you mean 'checklist'"):
        reward(["x"], scorer=["checklst"], checklist=["[]"])
    with pytest.raises(DataFormatError, match="column 'scorer'"):
        reward(["x"], checklist=["[]"])


def test_bad_rows_are_clear_errors():
    with pytest.raises(DataFormatError, match="'checklist' is not valid JSON"):
        ChecklistReward()(["x"], checklist=["[{"])
    with pytest.raises(DataFormatError, match="checklist item dict"):
        ChecklistReward()(["x"], checklist=[[{"question": "no id"}]])
    with pytest.raises(DataFormatError, match="conversational prompt"):
        FlexBenchReward()(["x"], **{**flex_row([]), "prompts": ["a plain string"]})
    with pytest.raises(UnknownNameError, match="Allowed: all_pass, fraction, weighted"):
        ChecklistReward(mode="all")
    with pytest.raises(ConfigError, match="ChecklistJudge"):
        ChecklistReward(judge="gpt")


def test_rewards_pickle_and_are_named_for_trl_logs():
    for reward, name in (
        (ChecklistReward(mode="fraction", loose=True), "ifgym_checklist_fraction_loose"),
        (FlexBenchReward(), "ifgym_flexbench_turn"),
        (TurnReward(), "ifgym_turn"),
        (EpisodeReturn(discount=0.9), "ifgym_episode_return"),
        (AsyncReward(TurnReward()), "ifgym_turn"),
    ):
        again = pickle.loads(pickle.dumps(reward))
        assert again.__name__ == name


def episode(rewards: list[float], done_reason: str) -> Episode:
    turns = [TurnRecord(i, "u", TurnSpec(), "r", [Verdict("yes")], [Verdict("yes")], r) for i, r in enumerate(rewards)]
    return Episode("e", "ifgym/EvolIF-v1", 0, turns, done_reason)


def test_episode_return_discounts_and_rewards_survival():
    assert episode_return([1.0, 0.5, 1.0], 0.5) == 1.0 + 0.25 + 0.25
    kept, lost = episode([1.0, 1.0], "max_turns"), episode([1.0, 0.0], "patience")
    assert survived(kept) and not survived(lost)
    reward = EpisodeReturn(discount=0.5, survival_bonus=1.0)
    assert reward(["c1", "c2"], episode=[kept.to_jsonl(), lost.to_json()]) == [1.5 + 1.0, 1.0]
    assert EpisodeReturn(per_turn=True)(["c"], episode=[kept]) == [1.0]
    assert EpisodeReturn()(["c"], episode=[episode([], "patience")]) == [None]
    with pytest.raises(ConfigError, match="discount must be in"):
        EpisodeReturn(discount=0)
    with pytest.raises(DataFormatError, match="not an ifgym Episode's JSON"):
        EpisodeReturn()(["c"], episode=[{"turns": []}])


def test_pass_rates_per_group_are_logged_when_trl_gives_log_metric():
    logged = []
    rows = {"scorer": ["constraints"] * 3, "constraints": [json.dumps([{"id": "case.lower", "params": {}}])] * 3}
    out = TurnReward()(["hello", "HELLO", "hi"], **rows, log_metric=lambda k, v: logged.append((k, v)))
    assert out == [1.0, 0.0, 1.0]
    assert logged == [("pass_rate/case", pytest.approx(2 / 3))]
    logged.clear()
    ChecklistReward()(
        ["All small words here"], checklist=[checklist(LOWER, SHORT)], log_metric=lambda *a: logged.append(a)
    )
    assert sorted(logged) == [("pass_rate/Length Constraint", 1.0), ("pass_rate/Style", 0.0)]
