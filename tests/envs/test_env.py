"""Env conformance over every registered id, plus the turn mechanics (reward, patience, ends, bad input).

The policy here is a scripted stand-in for a model; LLM-backed ids get a CannedClient standing in for
the user and judge models (always answering a passing judgement).
"""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from support.paths import DATA

import ifgym
from ifgym.core import TurnSpec, UserTurn, Verdict
from ifgym.envs.base import ChatEnv
from ifgym.errors import ActionError, ConfigError, UnknownNameError
from ifgym.llm import CannedClient
from ifgym.rewards.rubric import VerdictRubric
from ifgym.rewards.scorer import Scores
from ifgym.rewards.tasks import EVOLIF
from ifgym.simulators.base import UserSimulator


def canned_judge_and_user(messages):
    text = messages[-1]["content"]
    if '"scores"' in text or "score" in text.lower():
        n = text.count("<item")
        return json.dumps({"scores": [{"item": i + 1, "score": 8, "reason": "fits"} for i in range(max(n, 1))]})
    return "Please write about it."


# ids that replay a file given by path (none ships): a made-up file in its format, and no user model
REPLAYED = {env_id: {"dataset": str(DATA / "ntm" / "made_up.jsonl")} for env_id in ("ifgym/NTM-v0", "ifgym/NTM-v1")}


def make(env_id, **kwargs):
    kwargs = {**REPLAYED.get(env_id, {}), **kwargs}
    if gym.spec(env_id).nondeterministic:
        client = CannedClient(canned_judge_and_user, role="judge")
        if env_id not in REPLAYED:
            kwargs.setdefault("user_llm", client)
        kwargs.setdefault("judge_llm", client)
    return gym.make(env_id, **kwargs)


OLD_IDS = "ignore:.*is out of date:DeprecationWarning"  # v0 ids stay registered for earlier results


@pytest.mark.filterwarnings(OLD_IDS)
@pytest.mark.parametrize("env_id", ifgym.ENV_IDS)
def test_check_env_passes(env_id):
    env = make(env_id)
    check_env(env.unwrapped)


@pytest.mark.filterwarnings(OLD_IDS)
@pytest.mark.parametrize("env_id", [i for i in ifgym.ENV_IDS if not gym.spec(i).nondeterministic])
def test_same_seed_same_episode(env_id):
    def play(seed):
        env = make(env_id, max_turns=12, patience=None)
        obs, _ = env.reset(seed=seed)
        trace = [obs[-1]["content"]]
        rewards = []
        for i in range(11):
            obs, r, term, trunc, info = env.step(f"Reply number {i}.")
            rewards.append(r)
            if term or trunc:  # a scripted dialogue (StructFlow) may end before max_turns
                trace.append(info["done_reason"])
                break
            trace.append(json.dumps(info["next_constraints"]) + obs[-1]["content"])
        return trace, rewards

    assert play(7) == play(7)
    assert play(7) != play(8)


def test_observation_is_chat_messages_ending_with_user():
    env = gym.make("ifgym/EvolIF-v1", system_prompt="Be brief.")
    obs, info = env.reset(seed=1)
    assert [m["role"] for m in obs] == ["system", "user"]
    assert info["constraints"] and info["patience"] == 3
    obs, *_ = env.step("ok")
    assert [m["role"] for m in obs] == ["system", "user", "assistant", "user"]


def test_patience_runs_out_after_three_failures_and_refills_on_pass():
    # An empty reply fails every length/keyword/format constraint the template user asks for.
    env = gym.make("ifgym/EvolIF-v1", patience=3, max_turns=50)
    env.reset(seed=3)
    patience = []
    for _ in range(3):
        _, _, term, trunc, info = env.step("")
        patience.append(info["patience"])
    assert patience == [2, 1, 0]
    assert term and not trunc and info["done_reason"] == "patience"


def test_truncated_at_max_turns_with_patience_off():
    env = gym.make("ifgym/EvolIF-v1", patience=None, max_turns=4)
    env.reset(seed=0)
    for _ in range(4):
        _, _, term, trunc, info = env.step("")
    assert trunc and not term and info["done_reason"] == "max_turns"
    assert len(env.unwrapped.episode.turns) == 4


def test_info_carries_constraints_verdicts_and_reward_is_fraction():
    env = gym.make("ifgym/EvolIF-v1")
    env.reset(seed=5)
    _, reward, _, _, info = env.step("Some reply.")
    assert len(info["verdicts"]) == len(info["constraints"]) == len(info["loose_verdicts"])
    yes = sum(v["label"] == "yes" for v in info["verdicts"])
    no = sum(v["label"] == "no" for v in info["verdicts"])
    assert reward == pytest.approx(yes / (yes + no))
    assert {"topic", "move", "patience", "done_reason", "unknown"} <= set(info)


@pytest.mark.parametrize(
    "action, fragment",
    [
        (42, "must be the reply as a str"),  # not a string
        (None, "must be the reply as a str"),  # a policy that returned nothing
        ("x" * 100_001, "max_reply_chars"),  # oversized
    ],
)
def test_bad_action_raises_one_clear_error(action, fragment):
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    env.reset(seed=0)
    with pytest.raises(ActionError, match=fragment):
        env.step(action)


def test_step_before_reset_is_an_error():
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    with pytest.raises(ActionError, match="reset"):
        env.step("hi")


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"renderer": "templates"}, UnknownNameError, "Did you mean 'template'"),
        ({"judge": "rule"}, UnknownNameError, "Did you mean 'rules'"),
        ({"reward": "fractoin"}, UnknownNameError, "Did you mean 'fraction'"),
        ({"patience": 0}, ConfigError, "patience"),
        ({"tracker": {"p_swtich": 0.5}}, UnknownNameError, "Did you mean 'p_switch'"),
        ({"tracker": {"words": [300, 30]}}, ConfigError, "words"),  # a range given backwards
        ({"patiense": 3}, UnknownNameError, "Did you mean 'patience'"),  # gym.make passes kwargs on unchecked
        ({"reward": "weighted", "reward_weights": {"lenght": 2}}, UnknownNameError, "Did you mean 'length'"),
        ({"reward_weights": {"length": 2}}, ValueError, "only apply with reward='weighted'"),  # silently unused
        ({"reward": "weighted", "reward_weights": {"length": -1}}, ValueError, ">= 0"),
        ({"tracker": {"groups": ["emotion", "length"]}}, ConfigError, "need an LLM judge"),  # unscorable turns
        ({"script": "x.jsonl", "tracker": {"p_switch": 0.5}}, ConfigError, "tracker would be ignored"),
    ],
)
def test_bad_make_kwargs(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        gym.make("ifgym/EvolIF-v1", **kwargs)


def test_rules_judge_never_samples_judged_groups():
    env = gym.make("ifgym/EvolIF-v1", max_turns=60, patience=None)
    env.reset(seed=11)
    ids = set()
    for _ in range(59):
        _, _, _, _, info = env.step("x")
        ids |= {c["id"].split(".")[0] for c in info["next_constraints"]}
    assert not ids & {"emotion", "style", "reader_age"}


def test_llm_judge_scores_judged_constraints_through_the_client():
    client = CannedClient(canned_judge_and_user, role="judge")
    env = gym.make("ifgym/EvolIF-v1", judge="llm", judge_llm=client, max_turns=80, patience=None)
    env.reset(seed=2)
    seen = []
    for _ in range(79):
        _, _, _, _, info = env.step("A calm, formal reply.")
        seen += [
            (c, v)
            for c, v in zip(info["constraints"], info["verdicts"], strict=True)
            if c["id"].split(".")[0] in ("emotion", "style", "reader_age")
        ]
    assert seen, "80 turns with judge='llm' should sample a judged group"
    # the judge scores them all, except active/passive voice, which a rule decides (see rewards.judge)
    for c, v in seen:
        voice = str(c["params"].get("style", "")).endswith("voice")
        assert v["source"] == "rule" if voice else v["source"].startswith("judge:"), (c, v)


def test_replay_plays_an_evolif_dialogue_file_as_the_script():

    from ifgym.core.evolif import from_evolif

    path = DATA / "evolif_dialogue.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    env = gym.make("ifgym/EvolIF-v1", script=str(path), patience=None, max_turns=None)
    obs, info = env.reset(seed=0)
    seen = [info["constraints"]]
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step("A reply.")
        done = terminated or truncated
        if not done:
            seen.append(info["next_constraints"])
    assert terminated and info["done_reason"] == "script_end"
    expected = [[from_evolif(i["id"], i["args"]).to_json() for i in row["instructions"]] for row in rows]
    assert seen == expected


def test_llm_pieces_record_the_nondeterministic_id_and_pass_regenerations():
    client = CannedClient(canned_judge_and_user, role="judge")
    env = gym.make(
        "ifgym/EvolIF-v1", judge="llm", judge_llm=client, renderer="llm", user_llm=client, regenerations=0, max_turns=1
    )
    env.reset(seed=0)
    env.step("A reply.")
    assert env.unwrapped.episode.env_id == "ifgym/EvolIF-LLM-v1"
    assert env.unwrapped.user.renderer.regenerations == 0
    assert gym.make("ifgym/EvolIF-v1").unwrapped.env_name == "ifgym/EvolIF-v1"


class OwnUser(UserSimulator):
    """A user's own simulator written plainly: blocking `reset`/`next` only (the base gives `areset`/`anext`)."""

    def __init__(self):
        self.calls = []

    def reset(self, rng, options=None):
        self.calls.append("reset")
        return UserTurn("Say yes.", TurnSpec(topic="t"))

    def next(self, history, verdicts):
        self.calls.append(("next", [v.label for v in verdicts]))
        return UserTurn("Again.", TurnSpec(topic="t")) if len(self.calls) < 4 else None


class OwnScorer:
    """A user's own scorer with a hand-written `score`/`ascore` pair: passes a reply that says yes."""

    def __init__(self):
        self.calls = []

    def reset(self):
        pass

    def _scores(self, reply):
        verdict = Verdict("yes" if "yes" in reply else "no")
        return Scores([verdict], [verdict], ["own"])

    def score(self, reply, spec, history=None):
        self.calls.append("score")
        return self._scores(reply)

    async def ascore(self, reply, spec, history=None):
        self.calls.append("ascore")
        return self._scores(reply)


def _play_own(play):
    user, scorer = OwnUser(), OwnScorer()
    env = ChatEnv(task=EVOLIF, user=user, scorer=scorer, rubric=VerdictRubric(patience=None))
    rewards = play(env)
    return rewards, [t.user for t in env.episode.turns], env.episode.done_reason, user.calls, scorer.calls


def test_a_plainly_written_user_and_scorer_play_sync_and_async_alike():
    def sync(env):
        env.reset(seed=0)
        return [env.step(reply)[1] for reply in ("yes", "no", "yes")]

    async def awaited(env):
        await env.areset(seed=0)
        return [(await env.astep(reply))[1] for reply in ("yes", "no", "yes")]

    rewards, users, done, user_calls, scorer_calls = _play_own(sync)
    assert (rewards, users, done) == ([1.0, 0.0, 1.0], ["Say yes.", "Again.", "Again."], "script_end")
    assert user_calls == ["reset", ("next", ["yes"]), ("next", ["no"]), ("next", ["yes"])]
    assert scorer_calls == ["score"] * 3
    a_rewards, a_users, a_done, a_user_calls, a_scorer_calls = _play_own(lambda env: asyncio.run(awaited(env)))
    assert (a_rewards, a_users, a_done, a_user_calls) == (rewards, users, done, user_calls)
    assert a_scorer_calls == ["ascore"] * 3  # the scorer's own awaited half; the user's blocking one via the base


def test_astep_checks_the_action_when_awaited():
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    env.reset(seed=0)
    with pytest.raises(ActionError, match="reply as a str"):
        asyncio.run(env.astep(3))
