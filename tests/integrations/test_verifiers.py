"""The verifiers adapter end to end: verifiers' own rollout against the canned OpenAI-compatible server.

`Env.run_slot` is what `vf-eval` runs per rollout: verifiers starts its interception server on
127.0.0.1, launches its `null` chat harness in a subprocess (through `uv`, from the local wheels the
Makefile downloads: nothing is fetched here), and the harness's streamed calls reach the canned
server, which stands in for the model. ifgym's env plays the user and scores each reply.
"""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest
import verifiers.v1 as vf
from support.canned_server import CannedServer
from support.paths import DATA
from verifiers.v1.env import RunSlot

import ifgym
from ifgym.errors import ConfigError
from ifgym.integrations.verifiers import IfgymEnv, load_environment, offline_uv_env
from ifgym.policies import ScriptedPolicy
from ifgym.runner.rollout import rollout


def answer(messages: list[dict]) -> str:
    """The canned model: its reply depends on the user's latest words, so some constraints pass and some fail."""
    last = messages[-1]["content"]
    return "sure, here you go." if len(last) % 2 else "OK! HERE IT IS."


@pytest.fixture
def offline_uv(tmp_path, monkeypatch):
    for key, value in offline_uv_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))  # an empty cache: the wheels alone must do
    monkeypatch.setenv("IFGYM_VF_KEY", "sk-verifiers")


async def play(env: IfgymEnv, srv: CannedServer) -> list:
    ctx = vf.ModelContext(
        model=srv.model,
        client=vf.EvalClientConfig(base_url=srv.base_url, api_key_var="IFGYM_VF_KEY"),
        sampling=vf.Sampling(temperature=0.0, max_tokens=64),
    )
    async with env.serving():
        return await asyncio.gather(*(env.run_slot(RunSlot(task), ctx) for task in env.taskset))


def test_verifiers_rollout_scores_each_turn_with_ifgym(offline_uv):
    env = load_environment("ifgym/EvolIF-v1", episodes=2, seed=3, max_turns=2)
    with CannedServer(lambda body: answer(body["messages"]), ttl=600) as srv:
        episodes = asyncio.run(play(env, srv))
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.ok, episode.errors
        (trace,) = episode.traces
        assert trace.ok, trace.errors
        recorded = ifgym.Episode.from_json(trace.info["ifgym_episode"])
        # the same seed played by ifgym's own loop with the same model gives the same turns and rewards
        local = rollout(gym.make("ifgym/EvolIF-v1", max_turns=2), ScriptedPolicy(answer), seed=recorded.seed)
        assert [t.user for t in recorded.turns] == [t.user for t in local.turns]
        assert [t.reply for t in recorded.turns] == [t.reply for t in local.turns]
        assert trace.info["turn_rewards"] == [t.reward for t in local.turns]
        assert trace.metrics["turn_0_reward"] == local.turns[0].reward
        assert trace.metrics["turns"] == len(local.turns)
        mean = sum(t.reward for t in local.turns) / len(local.turns)
        assert trace.rewards["ifgym_return"].score == pytest.approx(mean)
        assert "ifgym/CSR" in trace.metrics
    rewards = [r for e in episodes for r in e.traces[0].info["turn_rewards"]]
    assert 0.0 in rewards and 1.0 in rewards, "the canned replies must both pass and fail for this to test anything"
    # the model saw ifgym's user turns, through verifiers' harness, with the key from our variable
    assert srv.requests and all(r["stream"] for r in srv.requests)
    users = {m["content"] for r in srv.requests for m in r["messages"] if m["role"] == "user"}
    assert {t.user for e in episodes for t in ifgym.Episode.from_json(e.traces[0].info["ifgym_episode"]).turns} <= users
    assert srv.headers[0]["authorization"] == "Bearer sk-verifiers"


def test_every_env_id_loads_and_bad_arguments_are_ifgym_errors():
    llm = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}  # never called: making the env contacts no model
    for env_id in ifgym.ENV_IDS:
        kwargs = {"user_llm": llm, "judge_llm": llm} if "LLM" in env_id else {}
        if env_id.startswith("ifgym/NTM-"):  # replays a file given by path (none ships), LLM-judged by default
            kwargs = {"dataset": str(DATA / "ntm" / "made_up.jsonl"), "judge_llm": llm}
        env = load_environment(env_id, episodes=3, **kwargs)
        assert isinstance(env, IfgymEnv)
        assert [t.data.seed for t in env.taskset] == [0, 1, 2]
        assert json.loads(env.config.taskset.model_dump_json())["env_id"] == env_id
    with pytest.raises(ConfigError, match="Did you mean"):
        load_environment("ifgym/EvolIF-v1", max_turn=3)
    with pytest.raises(ConfigError, match="ifgym's ids"):
        load_environment("ifgym/Nope-v0")
