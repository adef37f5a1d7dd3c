"""Vector envs: every episode, autoreset ones included, has a seed that replays it.

gymnasium's AsyncVectorEnv (worker processes, shared_memory=False: observations are message lists)
resets a finished sub-env without a seed; ScriptedPolicy-like fixed replies stand in for a model.
"""

from __future__ import annotations

import gymnasium as gym

import ifgym  # noqa: F401


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None)


def played(first_seed):
    envs = gym.vector.AsyncVectorEnv([make_env, make_env], shared_memory=False)
    try:
        envs.reset(seed=first_seed)
        seen = {}
        for _ in range(9):  # 2 turns per episode, then the autoreset step: 3 episodes per sub-env
            envs.step(["A reply.", "A reply."])
            for episode in envs.call("episode"):
                seen[(episode.seed, episode.turns[0].user if episode.turns else None)] = len(episode.turns)
        return seen
    finally:
        envs.close()


def test_autoreset_episodes_have_seeds_that_replay_them():
    first = played(100)
    seeds = sorted({seed for seed, _ in first})
    assert None not in seeds and {100, 101} <= set(seeds) and len(seeds) >= 6
    assert played(100) == first  # the same first seed, the same sequence
    for seed, user in first:
        if user is None:
            continue
        env = make_env()
        obs, _ = env.reset(seed=seed)
        assert obs[-1]["content"] == user  # replayed from its recorded seed alone


def test_a_single_env_reset_without_seed_continues_its_sequence():
    env = make_env().unwrapped
    env.reset(seed=7)
    a = env.episode.seed
    env.reset()
    b = env.episode.seed
    env.reset(seed=7)
    env.reset()
    assert a == 7 and isinstance(b, int) and env.episode.seed == b
