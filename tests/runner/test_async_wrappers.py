"""arollout honours the wrappers around an env, as rollout does; one it cannot apply async is refused by name."""

from __future__ import annotations

import asyncio
import warnings

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics, TimeLimit

import ifgym  # noqa: F401
from ifgym.errors import AsyncWrapperError
from ifgym.policies import ScriptedPolicy
from ifgym.runner import async_reset, async_step
from ifgym.runner.rollout import arollout, rollout

REPLIES = ["Short answer.", "A longer answer, with a comma.", "YES.", "no"]


class TenfoldReward(gym.RewardWrapper):
    def reward(self, reward):
        return 10 * reward


class NoteInSystem(gym.ObservationWrapper):
    """Puts a system note before the messages the policy sees."""

    def observation(self, observation):
        return [{"role": "system", "content": "Be brief."}, *observation]


class Shout(gym.ActionWrapper):
    def action(self, action):
        return action.upper()


class Rewards(gym.Wrapper):
    """Keeps every reward it passes on; its own astep/areset make it usable by arollout too."""

    def __init__(self, env):
        super().__init__(env)
        self.rewards = []

    def reset(self, **kwargs):
        self.rewards = []
        return self.env.reset(**kwargs)

    def step(self, action):
        out = self.env.step(action)
        self.rewards.append(out[1])
        return out

    async def areset(self, *, seed=None, options=None):
        self.rewards = []
        return await async_reset(self.env, seed=seed, options=options)

    async def astep(self, action):
        out = await async_step(self.env, action)
        self.rewards.append(out[1])
        return out


def play(mode, wrap, seed=5):
    """(episode, rewards seen outside, observations the policy saw) of one episode of EvolIF-v1 behind `wrap`."""
    seen = []

    def reply(messages):
        seen.append(messages)
        return REPLIES[(len(seen) - 1) % len(REPLIES)]

    env = Rewards(wrap(gym.make("ifgym/EvolIF-v1", max_turns=5, patience=None)))
    policy = ScriptedPolicy(reply)
    if mode == "sync":
        episode = rollout(env, policy, seed=seed)
    else:
        episode = asyncio.run(arollout(env, policy, seed=seed))
    return episode, env.rewards, seen


def test_reward_wrapper_and_time_limit_give_the_same_episode_async_and_sync():
    def wrap(env):
        return TenfoldReward(TimeLimit(env, max_episode_steps=3))

    sync_episode, sync_rewards, sync_seen = play("sync", wrap)
    async_episode, async_rewards, async_seen = play("async", wrap)
    # TimeLimit cut both after 3 of the env's 5 turns; the RewardWrapper scaled both tenfold
    assert len(sync_episode.turns) == len(async_episode.turns) == 3
    assert async_rewards == sync_rewards == [10 * t.reward for t in sync_episode.turns]
    assert any(r > 0 for r in sync_rewards)
    assert async_episode.to_json() == sync_episode.to_json()
    assert async_seen == sync_seen


def test_observation_and_action_wrappers_apply_async_as_sync():
    def wrap(env):
        return Shout(NoteInSystem(env))

    sync_episode, _, sync_seen = play("sync", wrap)
    async_episode, _, async_seen = play("async", wrap)
    assert [m[0] for m in async_seen] == [{"role": "system", "content": "Be brief."}] * 5
    assert [t.reply for t in async_episode.turns] == [r.upper() for r in REPLIES] + [REPLIES[0].upper()]
    assert async_episode.to_json() == sync_episode.to_json() and async_seen == sync_seen


def test_without_wrappers_of_its_own_gym_make_chain_is_honoured():
    # gym.make gives PassiveEnvChecker(OrderEnforcing(env)); arollout goes through both
    env = gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)
    layers = []
    while env is not env.unwrapped:
        layers.append(type(env))
        env = env.env
    assert PassiveEnvChecker in layers and OrderEnforcing in layers
    episode, rewards, _ = play("async", lambda e: e)
    assert len(episode.turns) == len(rewards) == 5


def test_order_enforcing_refuses_a_step_before_reset_async():
    env = gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)
    with pytest.raises(ResetNeeded, match="before calling env.reset"):
        asyncio.run(async_step(env, "hello"))


def test_passive_checker_runs_its_checks_on_the_async_results():
    env = gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)
    checker = env
    while not isinstance(checker, PassiveEnvChecker):
        checker = checker.env
    assert not checker.checked_reset

    async def go():
        await async_reset(env, seed=1)
        await async_step(env, "x")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium's checker warns on a bad observation: none here
        asyncio.run(go())
    assert checker.checked_reset and checker.checked_step


class CountSteps(gym.Wrapper):
    """Overrides step without an async twin: arollout cannot apply it without blocking."""

    def step(self, action):
        return self.env.step(action)


class HalfAsync(gym.Wrapper):
    async def astep(self, action):
        return await async_step(self.env, action)


@pytest.mark.parametrize(
    ("wrapper", "says"),
    [
        (CountSteps, "it overrides step or reset without an async twin"),
        (RecordEpisodeStatistics, "it overrides step or reset without an async twin"),
        (HalfAsync, "it defines only astep"),
    ],
)
def test_a_wrapper_arollout_cannot_apply_is_refused_by_name(wrapper, says):
    env = TimeLimit(wrapper(gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)), max_episode_steps=9)
    with pytest.raises(AsyncWrapperError) as err:
        asyncio.run(arollout(env, ScriptedPolicy(["ok"]), seed=0))
    message = str(err.value)
    assert f"{wrapper.__module__}.{wrapper.__qualname__}" in message and says in message
    assert "async def astep" in message and "rollout (sync)" in message
