"""The FlexBench env: spaces and observation, rewards, end reasons, shipped SOPs end to end, LLM user over HTTP."""

from __future__ import annotations

import asyncio
import json
import math

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from support.canned_server import CannedServer
from support.flexbench_agents import (
    AGENTS,
    CARELESS_QUESTIONS,
    CarelessAgent,
    HangsUp,
    MerchantAgent,
    Policy,
    RuleBreaker,
)
from support.prompts import prompt_kind

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.core.tasks import task_of
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import CannedClient, make_client
from ifgym.rewards.flexbench import episode_scores, fingerprint, load_dimensions, summarize
from ifgym.runner.rollout import arollout, rollout
from ifgym.simulators.flexbench import SOP_DIR, load_sop, sop_names

MERCHANT = "merchant_onboarding"


@pytest.mark.parametrize("sop", sop_names())
def test_check_env_passes_with_the_scripted_user_for_every_shipped_sop(sop):
    check_env(gym.make("ifgym/FlexBench-v0", sop=sop).unwrapped)


def test_observation_is_sop_then_opening_line_then_the_caller():
    env = gym.make("ifgym/FlexBench-v0", sop="freight_dispatch")
    obs, info = env.reset(seed=0)
    sop = load_sop("freight_dispatch")
    assert [m["role"] for m in obs] == ["system", "assistant", "user"]
    assert obs[0]["content"] == sop.instruction and obs[1]["content"] == sop.opening_line
    assert info["sop"] == "freight_dispatch" and info["cooperativeness"] in ("poor", "general", "good")
    meta = env.unwrapped.episode.meta["flexbench"]
    assert meta["facts"] and meta["dimensions"]["sop"] == "freight_dispatch"


def test_same_seed_same_facts_and_same_user_turns():
    def play(seed):
        env = gym.make("ifgym/FlexBench-v0", patience=None, max_turns=6)
        obs, _ = env.reset(seed=seed)
        turns = [obs[-1]["content"]]
        for line in ["Are you the person in charge of the payment settings?", "Which platform?", "Hmm.", "Okay."]:
            obs, reward, term, trunc, info = env.step(line)
            turns.append((obs[-1]["content"], reward, info["labels"]))
        return env.unwrapped.episode.meta["flexbench"]["facts"], turns

    assert play(11) == play(11)
    assert play(11) != play(12)


@pytest.mark.parametrize("sop", sop_names())
def test_an_assistant_that_follows_the_sop_scores_full_achievement(sop):
    env = gym.make("ifgym/FlexBench-v0", sop=sop, max_turns=20)
    episodes = [rollout(env, Policy(AGENTS[sop]()), seed=seed) for seed in range(12)]
    for ep in episodes:
        scores = episode_scores(ep)
        assert "no" not in scores.labels.values(), (ep.seed, scores.labels)
        assert math.isnan(scores.achievement) or scores.achievement == 1.0
        assert ep.done_reason in ("assistant_closed", "user_lost_patience")
    summary = summarize(episodes)
    # coverage < 1 only where the SOP itself ends the call early (caller not in charge / not the driver / absent)
    assert summary["achievement"] == 1.0 and summary["coverage"] > 0.75 and summary["compliance"] == 1.0
    assert summary["end/assistant_closed"] >= 0.9
    # the careless assistant asks the base questions but acts on no branch: Achievement drops
    careless = [rollout(env, Policy(CarelessAgent(CARELESS_QUESTIONS[sop])), seed=s) for s in range(12)]
    assert summarize(careless)["achievement"] < 0.5


def test_branches_follow_the_facts():
    # pinning the facts decides which branch applies; the other branch stays unknown (precondition not met)
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT)
    policy = Policy(AGENTS[MERCHANT]())
    shopify = rollout(env, policy, seed=0, options={"facts": {"in_charge": "yes", "platform": "Shopify"}})
    owner_away = rollout(env, policy, seed=0, options={"facts": {"in_charge": "no"}})
    a, b = episode_scores(shopify).labels, episode_scores(owner_away).labels
    dims = load_dimensions(MERCHANT)
    shopify_steps = next(d.id for d in dims.dimensions if (d.precondition or "").endswith("Shopify"))
    ask_owner = next(d.id for d in dims.dimensions if "name of the person in charge" in d.criterion)
    assert (a[shopify_steps], a[ask_owner]) == ("yes", "unknown")
    assert (b[shopify_steps], b[ask_owner]) == ("unknown", "yes")


# Six dimensions the rules decide from plain words: four base actions, two always-on rules
TOY_DIMENSIONS = {
    "schema": "ifgym.flexbench.dimensions/v1",
    "sop": MERCHANT,
    "dimensions": [
        {
            "id": "greet",
            "criterion": "Welcomes the caller?",
            "precondition": None,
            "rule": {"evidence": [r"\bwelcome\b"]},
        },
        {
            "id": "verify",
            "criterion": "Verifies identity?",
            "precondition": None,
            "rule": {"evidence": [r"\bverify\b"]},
        },
        {
            "id": "platform",
            "criterion": "Asks the platform?",
            "precondition": None,
            "rule": {"evidence": [r"\bplatform\b"]},
        },
        {"id": "fee", "criterion": "States the fee?", "precondition": None, "rule": {"evidence": [r"\bfee\b"]}},
        {
            "id": "no_discount",
            "criterion": "Never offers a discount?",
            "precondition": "always",
            "rule": {"violation": [r"\bdiscount\b"]},
        },
        {"id": "short", "criterion": "Under 40 words?", "precondition": "always", "rule": {"max_words": 40}},
    ],
}
TOY_REPLIES = [
    "Welcome to the merchant team.",  # greet: 1 of 6 newly satisfied
    "I need to verify your identity and ask which platform you use.",  # verify, platform: 2 of 6
    "We can offer you a discount.",  # no_discount broken: -1 of 6
    "Our fee is two percent.",  # fee: 1 of 6; the last allowed turn
]


def _toy_call(**kwargs):
    env = gym.make(
        "ifgym/FlexBench-v0", sop=MERCHANT, dimensions=TOY_DIMENSIONS, cooperativeness="good", max_turns=4, **kwargs
    )
    env.reset(seed=0)
    steps = [env.step(reply) for reply in TOY_REPLIES]
    return [s[1] for s in steps], [s[4] for s in steps], steps[-1]


def test_turn_rewards_of_a_scripted_call_with_known_verdicts():
    rewards, infos, (_, _, term, trunc, info) = _toy_call(reward="turn")
    assert rewards == pytest.approx([0.166667, 0.333333, -0.166667, 0.166667], abs=1e-6)
    assert [i["newly_satisfied"] for i in infos] == [["greet"], ["verify", "platform"], [], ["fee"]]
    assert [i["newly_broken"] for i in infos] == [[], [], ["no_discount"], []]
    assert (term, trunc, info["done_reason"]) == (False, True, "max_turns") and "episode_score" not in info


def test_the_episode_reward_comes_at_the_end():
    # the final trace: 4 of 4 base actions (coverage 1, no branch: achievement n/a), 1 of 2 rules kept
    # (compliance 0.5): episode score 0.5, times end_weight 2
    rewards, infos, (_, _, _, _, info) = _toy_call(reward="episode", end_weight=2.0)
    assert rewards == [0.0, 0.0, 0.0, 1.0] and info["episode_score"] == 0.5
    both, _, _ = _toy_call(reward="both", end_weight=2.0)
    assert both == pytest.approx([0.166667, 0.333333, -0.166667, 1.166667], abs=1e-6)
    end_only, infos, _ = _toy_call(reward="episode", end_weight=2.0, judge_every_turn=False)
    assert end_only == [0.0, 0.0, 0.0, 1.0] and [i["reward_defined"] for i in infos] == [False, False, False, True]


def test_a_reply_that_closes_the_call_on_the_last_turn_ends_it_properly():
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, dimensions=TOY_DIMENSIONS, cooperativeness="good", max_turns=1)
    env.reset(seed=0)
    _, reward, term, trunc, info = env.step("Welcome aboard, thanks for your time. Goodbye!")
    assert (term, trunc, info["done_reason"]) == (True, False, "assistant_closed")
    # greet newly satisfied (1/6); all 1 base of 4 attempted, both rules kept: score 0.25
    assert reward == pytest.approx(0.166667 + 0.25, abs=1e-6)


def _play(env, agent, seed=0):
    policy = Policy(agent)
    policy.reset()
    obs, _ = env.reset(seed=seed)
    rewards, infos, done = [], [], False
    while not done:
        obs, r, term, trunc, info = env.step(policy.act(obs))
        rewards.append(r)
        infos.append(info)
        done = term or trunc
    return rewards, infos, episode_scores(env.unwrapped.episode)


@pytest.mark.parametrize("seed", range(4))
def test_breaking_the_always_on_rules_costs_the_score_and_turn_rewards(seed):
    # the audit's agent: every SOP step done, but fees waived, ~100 words and three questions per message,
    # fees before the identity check. It used to score Coverage 1.0 and Achievement 1.0 at no cost.
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, patience=None, reward="both")
    rewards, infos, scores = _play(env, RuleBreaker(MerchantAgent()), seed)
    rules = {d.id for d in load_dimensions(MERCHANT).dimensions if d.kind == "always"}
    assert scores.compliance == 0.0 and scores.score == 0.0 and infos[-1]["episode_score"] == 0.0
    assert {d for i in infos for d in i["newly_broken"]} == rules  # each broken rule is charged once ...
    assert rewards[0] < 0  # ... on the turn it breaks (a turn reward can be negative)
    careful, _, _ = _play(env, MerchantAgent(), seed)
    assert sum(rewards) < sum(careful) - 0.5


@pytest.mark.parametrize("sop", sop_names())
def test_ending_the_call_at_once_scores_clearly_worse_than_a_careless_engaged_call(sop):
    env = gym.make("ifgym/FlexBench-v0", sop=sop, patience=None)
    bases = sum(d.kind == "base" for d in load_dimensions(sop).dimensions)
    hang = [rollout(env, Policy(HangsUp()), seed=s) for s in range(6)]
    careless = [rollout(env, Policy(CarelessAgent(CARELESS_QUESTIONS[sop])), seed=s) for s in range(6)]
    for ep in hang:
        scores = episode_scores(ep)  # only the close was attempted (and done wrong: no summary)
        assert scores.coverage == pytest.approx(1 / bases) and math.isnan(scores.achievement)
        assert [t.reward for t in ep.turns] == [pytest.approx(1 / bases)]  # no turn reward, end score only
    assert summarize(hang)["score"] <= 0.25
    assert summarize(careless)["score"] >= summarize(hang)["score"] + 0.15
    total = lambda eps: sum(t.reward for e in eps for t in e.turns)  # noqa: E731
    assert total(careless) > total(hang)


# --- leakage: the caller gets nothing from the evaluation side ------------------------------------------


def test_the_env_passes_the_caller_no_verdicts_and_nothing_from_the_dimensions(monkeypatch):
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, patience=None)
    user = env.unwrapped.user
    calls = []
    real_next = user.next

    def spy(history, verdicts):
        calls.append((json.dumps(history), list(verdicts)))
        return real_next(history, verdicts)

    monkeypatch.setattr(user, "next", spy)
    rollout(env, Policy(MerchantAgent()), seed=0)
    assert calls and all(verdicts == [] for _, verdicts in calls)
    dims = load_dimensions(MERCHANT)
    secrets = [d.criterion for d in dims.dimensions] + [d.precondition for d in dims.dimensions if d.kind == "branch"]
    for history, _ in calls:
        assert not any(json.dumps(s)[1:-1] in history for s in secrets)
        assert '"labels"' not in history and "coverage" not in history


def test_async_steps_pass_the_caller_no_verdicts_either(monkeypatch):
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, patience=None)
    user = env.unwrapped.user
    seen = []
    real_anext = user.anext

    async def spy(history, verdicts):
        seen.append(list(verdicts))
        return await real_anext(history, verdicts)

    monkeypatch.setattr(user, "anext", spy)
    asyncio.run(arollout(env, Policy(MerchantAgent()), seed=0))
    assert seen and all(v == [] for v in seen)


def test_other_dimensions_leave_the_callers_words_unchanged():
    # the caller cannot depend on the dimensions: swap them for a one-item set, same seed and replies, same call
    only_identity = load_dimensions(MERCHANT).to_json()
    only_identity["dimensions"] = only_identity["dimensions"][:1]
    only_identity["groups"], only_identity["exclusive"] = [], []
    calls = []
    for dims in (None, only_identity):
        env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, dimensions=dims, patience=None)
        calls.append([(t.user, t.reply) for t in rollout(env, Policy(MerchantAgent()), seed=2).turns])
    assert calls[0] == calls[1] and len(calls[0]) > 3


def test_judging_only_at_the_end():
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, reward="episode", judge_every_turn=False)
    ep = rollout(env, Policy(AGENTS[MERCHANT]()), seed=3)
    assert all(not t.verdicts for t in ep.turns[:-1]) and ep.turns[-1].verdicts
    assert len(ep.turns[-1].spec.checklist) == len(ep.turns[-1].verdicts)  # the record says what was scored


def test_truncation_and_patience_end_reasons():
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, max_turns=3, patience=None)
    env.reset(seed=0)
    for _ in range(3):
        _, _, term, trunc, info = env.step("Hmm.")
    assert trunc and not term and info["done_reason"] == "max_turns"
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, cooperativeness="poor")
    env.reset(seed=0)
    for _ in range(2):
        _, _, term, trunc, info = env.step("Hmm.")
    assert term and info["done_reason"] == "user_lost_patience"
    assert "[hangs up]" in env.unwrapped.episode.meta["flexbench"]["final_user_message"]


def test_render_shows_labels_and_na():
    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT, render_mode="ansi")
    env.reset(seed=0)
    env.step("Hello.")
    text = env.render()
    assert "[opening] ASSISTANT" in text and "coverage" in text and "achievement n/a" in text


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"user": "scriptd"}, UnknownNameError, "Did you mean 'scripted'"),
        ({"judge": "rule"}, UnknownNameError, "Did you mean 'rules'"),
        ({"reward": "turns"}, UnknownNameError, "Did you mean 'turn'"),
        ({"sop": "merchant_onbording"}, UnknownNameError, "Did you mean 'merchant_onboarding'"),
        ({"cooperativeness": "bad"}, UnknownNameError, "cooperativeness"),
        ({"patience": 0}, ConfigError, "patience"),
        ({"end_weight": float("nan")}, ConfigError, "end_weight"),
        ({"judge_every_turn": False}, ConfigError, "judge_every_turn"),  # turn rewards need per-turn verdicts
        # the offline rules only know the scripted caller's words: a model caller needs the model judge
        ({"user": "llm", "judge": "rules", "user_llm": CannedClient(["Hi."])}, ConfigError, "judge=llm"),
        ({"dimensions_out": "x.json"}, ConfigError, "dimensions='build'"),  # nothing is built to save
    ],
)
def test_bad_make_kwargs(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        gym.make("ifgym/FlexBench-v0", **kwargs)


def user_sop(tmp_path, dims_sha=None):
    """A user's own SOP: the shipped merchant files copied next to each other under a new name."""
    sop = tmp_path / "shop.md"
    sop.write_text((SOP_DIR / f"{MERCHANT}.md").read_text().replace(f"name: {MERCHANT}", "name: shop"))
    (tmp_path / "shop.user.json").write_text((SOP_DIR / f"{MERCHANT}.user.json").read_text())
    dims = load_dimensions(MERCHANT).to_json()
    if dims_sha != "keep":
        dims["sop_sha256"] = dims_sha
    return sop, dims


def test_a_user_sop_with_companion_files_runs(tmp_path):
    sop, dims = user_sop(tmp_path, "keep")
    (tmp_path / "shop.dimensions.json").write_text(json.dumps(dims))
    env = gym.make("ifgym/FlexBench-v0", sop=str(sop))
    ep = rollout(env, Policy(AGENTS[MERCHANT]()), seed=1)
    assert ep.done_reason == "assistant_closed" and episode_scores(ep).coverage > 0


def test_a_user_sop_without_dimensions_or_with_stale_ones_is_a_clear_error(tmp_path):
    sop, dims = user_sop(tmp_path, fingerprint("an older version of the SOP"))
    with pytest.raises(ConfigError, match="no dimensions for SOP 'shop'"):
        gym.make("ifgym/FlexBench-v0", sop=str(sop))
    with pytest.raises(ConfigError, match="another version"):
        gym.make("ifgym/FlexBench-v0", sop=str(sop), dimensions=dims)
    no_rules = dict(
        dims, sop_sha256=None, dimensions=[{k: v for k, v in d.items() if k != "rule"} for d in dims["dimensions"]]
    )
    with pytest.raises(ConfigError, match="offline rule"):
        gym.make("ifgym/FlexBench-v0", sop=str(sop), dimensions=no_rules)


# --- an LLM user and an LLM judge through a real HTTP server ---------------------------------------

CALLER_LINES = ["Hi, yes. What's this about?", "Yes, I'm the owner.", "We're on Shopify.", "Okay. [hangs up]"]


def server_reply(body):
    """The canned model server: plays the caller, the end detector and the judge by their system prompts."""
    messages = body["messages"]
    if prompt_kind(messages) == "caller.speak":
        spoken = sum(m["role"] == "assistant" for m in messages)  # the caller's own earlier lines
        return CALLER_LINES[min(spoken, len(CALLER_LINES) - 1)]
    if prompt_kind(messages) == "caller.end":
        return json.dumps({"user_hung_up": False, "assistant_closed": False, "helpful": True})
    if prompt_kind(messages) == "judge.dimensions":
        n = messages[-1]["content"].count("<item ")
        return json.dumps({"items": [{"item": i, "label": "yes" if i == 1 else "unknown"} for i in range(1, n + 1)]})
    raise AssertionError(messages[0]["content"][:80])


def test_llm_user_episode_through_a_real_http_server_never_shows_the_dimensions_to_the_user():
    dims = load_dimensions(MERCHANT)
    with CannedServer(server_reply, model="canned-model") as server:
        settings = {"base_url": server.base_url, "model": server.model}
        env = gym.make(
            "ifgym/FlexBench-LLM-v0",
            sop=MERCHANT,
            user_llm=make_client(settings, "user"),
            judge_llm=make_client(settings, "judge"),
            cooperativeness="general",
        )
        lines = ["Am I speaking with the person in charge?", "Which platform does the store run on?", "Thanks."]
        obs, _ = env.reset(seed=0)
        assert obs[-1]["content"] == CALLER_LINES[0]
        for line in lines:
            obs, reward, term, trunc, info = env.step(line)
            if term or trunc:
                break
        requests = list(server.requests)
    episode = env.unwrapped.episode
    assert term and info["done_reason"] == "user_hung_up"
    assert episode.meta["flexbench"]["final_user_message"] == "Okay. [hangs up]"
    assert [t.user for t in episode.turns] == CALLER_LINES[:3]
    verdicts = episode.turns[-1].verdicts
    assert verdicts[0].label == "yes" and verdicts[0].source == "judge:canned-model"
    assert episode_scores(episode).coverage == pytest.approx(1 / 4)  # one of four base actions attempted
    # leakage: what the user model (caller and end detector) received never holds dimension text
    user_side = [json.dumps(r) for r in requests if "audit call transcripts" not in r["messages"][0]["content"]]
    judge_side = [json.dumps(r) for r in requests if "audit call transcripts" in r["messages"][0]["content"]]
    assert user_side and judge_side
    secrets = [d.criterion for d in dims.dimensions] + [d.precondition for d in dims.dimensions if d.precondition]
    for text in secrets:
        assert all(json.dumps(text)[1:-1] not in r for r in user_side), text
    assert any(json.dumps(dims.dimensions[0].criterion)[1:-1] in r for r in judge_side)  # the check can see it
    assert all(json.dumps(load_sop(MERCHANT).instruction[:80])[1:-1] not in r for r in user_side)


def test_async_rollout_with_the_llm_user():
    from ifgym.llm import CannedClient

    client = CannedClient(lambda messages: server_reply({"messages": messages}), role="user", model="c")
    env = gym.make("ifgym/FlexBench-LLM-v0", user_llm=client, judge_llm=client, cooperativeness="good")
    episode = asyncio.run(arollout(env, Policy(AGENTS[MERCHANT]()), seed=0))
    # the caller names its platform before its email, so the scripted assistant gives up and closes
    assert episode.done_reason == "assistant_closed" and episode.turns[-1].verdicts
    assert [t.user for t in episode.turns] == CALLER_LINES[:3]


def test_cli_eval_runs_flexbench(tmp_path, capsys):
    from ifgym.cli import main

    out = tmp_path / "episodes.jsonl"
    args = ["eval", "env=flexbench", "policy=scripted", "episodes=2", f"output={out}", "progress=false", "plots=false"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "coverage" in printed and "achievement" in printed
    assert len(out.read_text().splitlines()) == 2


def test_built_dimensions_are_built_once_per_sop_and_model_and_saved(tmp_path):
    from support.flexbench_pipeline import TOY_SOP, pipeline_answerer

    sop = tmp_path / "cached.md"
    sop.write_text(f"---\nopening_line: Hello from the cache test.\n---\n{TOY_SOP}\n")
    answer = pipeline_answerer()
    client = CannedClient(lambda m: answer(m) or "{}", role="judge", model="cache-test-model")
    out = tmp_path / "saved" / "cached.dimensions.json"
    envs = [
        gym.make(
            "ifgym/FlexBench-v0",
            sop=str(sop),
            user="scripted",
            persona=str(SOP_DIR / f"{MERCHANT}.user.json"),
            judge="llm",
            judge_llm=client,
            dimensions="build",
            dimensions_out=str(out),
        )
        for _ in range(3)
    ]
    segmentations = [r for r in client.requests if "Split the procedure into units" in r[-1]["content"]]
    assert len(segmentations) == 1  # three envs (as the CLI makes them), one pipeline run
    assert envs[0].unwrapped.dimensions is envs[2].unwrapped.dimensions
    saved = load_dimensions(str(out))
    assert saved == envs[0].unwrapped.dimensions and not saved.reviewed
    # after a run the task's report sections save the built file next to the run too (what `ifgym eval` calls)
    episode = rollout(envs[0], Policy(CarelessAgent(["Are you in charge?"])), seed=0)
    assert episode.meta["flexbench"]["dimensions_built"] is True
    files = task_of(episode).report_sections([episode], tmp_path / "run", plots=False)
    assert load_dimensions(str(files["dimensions"])) == saved and files["dimension_table"].is_file()
    assert "heatmap" not in files
    other = CannedClient(lambda m: answer(m) or "{}", role="judge", model="another-model")
    gym.make(
        "ifgym/FlexBench-v0",
        sop=str(sop),
        persona=str(SOP_DIR / f"{MERCHANT}.user.json"),
        judge="llm",
        judge_llm=other,
        dimensions="build",
    )
    assert any("Split the procedure" in r[-1]["content"] for r in other.requests)  # another model builds anew


def test_consistency_of_two_corpora_generated_with_different_seeds():
    from ifgym.rewards.flexbench import consistency

    env = gym.make("ifgym/FlexBench-v0", sop=MERCHANT)
    careful = [[rollout(env, Policy(MerchantAgent()), seed=s) for s in range(start, start + 10)] for start in (0, 100)]
    careless = [rollout(env, Policy(CarelessAgent(CARELESS_QUESTIONS[MERCHANT])), seed=s) for s in range(100, 110)]
    same = consistency(*careful)
    assert same["dimensions_compared"] >= 8 and same["mad"] == 0.0  # a careful agent is right whatever the facts
    assert same["coverage_diff"] < 0.25
    assert consistency(careful[0], careless)["mad"] > 0.3  # a different policy is told apart


def test_any_user_sop_runs_with_llm_user_llm_judge_and_built_dimensions(tmp_path):
    """A bare SOP file (no caller file, no dimensions): persona inferred, dimensions built, judged by a model."""
    from support.flexbench_pipeline import TOY_SOP, pipeline_answerer

    from ifgym.llm import CannedClient

    sop = tmp_path / "toy.md"
    sop.write_text(f"---\nopening_line: Hello, this is Kim from Acme.\n---\n{TOY_SOP}\n")
    pipeline = pipeline_answerer()

    def model(messages):
        if prompt_kind(messages) == "caller.design":
            return json.dumps(
                {"business_context": "A shop owner.", "goal": "Get paid.", "typical_questions": [], "catchphrases": []}
            )
        if prompt_kind(messages) == "caller.speak":
            return "Yes, I'm the one in charge." if len(messages) > 2 else "Hello?"
        if prompt_kind(messages) == "caller.end":
            return json.dumps({"user_hung_up": False, "assistant_closed": False, "helpful": True})
        if prompt_kind(messages) == "judge.dimensions":
            n = messages[-1]["content"].count("<item ")
            return json.dumps({"items": [{"item": i, "label": "yes"} for i in range(1, n + 1)]})
        return pipeline(messages)

    client = CannedClient(model, role="judge", model="one-model")
    env = gym.make("ifgym/FlexBench-LLM-v0", sop=str(sop), dimensions="build", user_llm=client, judge_llm=client)
    dims = env.unwrapped.dimensions
    assert len(dims.dimensions) == 5 and not dims.reviewed and dims.sop == "toy"
    obs, _ = env.reset(seed=0)
    assert obs[1]["content"] == "Hello, this is Kim from Acme." and obs[-1]["content"] == "Hello?"
    obs, reward, term, trunc, info = env.step("Are you in charge?")
    assert obs[-1]["content"] == "Yes, I'm the one in charge." and info["coverage"] == 1.0
    _, _, term, _, info = env.step("Thanks, goodbye!")
    assert term and info["done_reason"] == "assistant_closed" and info["achievement"] == 1.0
