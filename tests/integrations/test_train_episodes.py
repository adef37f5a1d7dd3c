"""`ifgym train trainer.rollout=episode`: whole episodes as GRPO completions (ifgym.integrations.trl_episodes).

The rollout tests play real envs with SmolLM2-135M's real tokenizer and a scripted generator (known
replies as token ids), so masks, groups, endings and rewards are known by hand; the last test is a
2-step run of the real model through TRL (as tests/integrations/test_train.py), with W&B offline.
"""

from __future__ import annotations

import json
import math
import os
import sys

import gymnasium as gym
import pytest
from support.loops import running_loop
from support.wandb_reader import history, offline_runs

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import main
from ifgym.errors import ConfigError
from ifgym.integrations.trl_episodes import (
    ENDED_BY_BUDGET,
    EpisodeRollout,
    chat_ids,
    episode_metrics,
    play_episodes,
    token_advantages,
    turn_advantages,
    user_suffix_ids,
)
from ifgym.llm.loop import YOUNG_GC_THRESHOLD, event_loop_name
from ifgym.rewards.trl import EpisodeReturn


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from ifgym.policies.transformers import model_folder

    return AutoTokenizer.from_pretrained(model_folder("smollm2-135m"), padding_side="left")


class Scripted:
    """A stand-in for the model: call k answers the live episodes with `calls[k]` (text, or (text, False): no EOS)."""

    def __init__(self, tokenizer, calls):
        self.tokenizer, self.calls, self.seen = tokenizer, list(calls), []

    def __call__(self, ids):
        self.seen.append([list(i) for i in ids])
        replies = self.calls.pop(0)
        assert len(replies) == len(ids), "the test scripted a reply for every live episode"
        out = []
        for reply in replies:
            text, closed = reply if isinstance(reply, tuple) else (reply, True)
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(tokens + ([self.tokenizer.eos_token_id] if closed else []))
        return out, None


def evolif(**kw):
    return gym.make("ifgym/EvolIF-v1", max_turns=2, patience=1, **kw)


# Seeds 5 and 7 of EvolIF-v1 (template user, rule checks): seed 5 asks to end with "songwriting", then (turn 2)
# with the letter "a"; seed 7 forbids "lessons", "progress", "schedule", then adds exactly 3 bullets.
SCRIPT = [
    ["I love songwriting", "x", "Sure here", "y"],  # turn 1: pass, fail (patience 1 ends it), pass, pass
    ["Here is a", "* one\n* two\n* three", "d"],  # turn 2 of the three left: pass, pass, bullets missed
]


def test_user_turns_are_masked_and_the_tokens_are_the_dialogue(tokenizer):
    envs = [evolif() for _ in range(4)]
    generate = Scripted(tokenizer, SCRIPT)
    played = play_episodes(envs, [5, 5, 7, 7], generate, tokenizer, max_tokens=512, reply_tokens=16)
    eos = tokenizer.eos_token_id
    for p in played:
        turns = p.episode.turns
        # one span per reply; mask 1 exactly on the spans (the replies with their end-of-turn token)
        assert len(p.spans) == len(turns)
        trained = {k for start, end in p.spans for k in range(start, end)}
        assert [k for k, m in enumerate(p.mask) if m] == sorted(trained)
        for (start, end), turn in zip(p.spans, turns, strict=True):
            assert p.completion_ids[end - 1] == eos
            assert tokenizer.decode(p.completion_ids[start : end - 1]) == turn.reply
        # no user token trained: each later user turn sits, whole, in the masked tokens
        masked = tokenizer.decode([t for t, m in zip(p.completion_ids, p.mask, strict=True) if not m])
        assert all(t.user in masked for t in turns[1:])
        assert not any(
            t.user in tokenizer.decode([x for x, m in zip(p.completion_ids, p.mask, strict=True) if m])
            for t in turns[1:]
        )
        # prompt + completion is the chat template's own rendering of the whole dialogue
        messages = [{"role": "user", "content": turns[0].user}]
        for k, t in enumerate(turns):
            messages += [{"role": "assistant", "content": t.reply}] + (
                [{"role": "user", "content": turns[k + 1].user}] if k + 1 < len(turns) else []
            )
        whole = tokenizer.apply_chat_template(messages, tokenize=False)
        assert tokenizer.decode(p.prompt_ids + p.completion_ids) == whole.rstrip("\n")
    # each turn's generation saw exactly the episode's tokens so far
    assert generate.seen[1] == [
        played[i].prompt_ids + played[i].completion_ids[: played[i].spans[1][0]] for i in (0, 2, 3)
    ]


def test_the_envs_reset_and_step_on_the_loop_runs_use(tokenizer):
    # the loop of `ifgym.llm.loop.run_async`: uvloop's where installed, the young generation collected less often
    seen = []

    class Seen(gym.RewardWrapper):
        def reward(self, reward):
            seen.append(running_loop())
            return reward

    played = play_episodes(
        [Seen(evolif())], [5], Scripted(tokenizer, SCRIPT_SEED_5), tokenizer, max_tokens=512, reply_tokens=16
    )
    assert len(played[0].episode.turns) == len(seen) == 2
    assert {loop for loop, _ in seen} == {event_loop_name()}
    assert min(threshold for _, threshold in seen) >= YOUNG_GC_THRESHOLD


SCRIPT_SEED_5 = [["I love songwriting"], ["Here is a"]]  # SCRIPT's replies to seed 5: both turns pass


def test_a_group_is_one_seed_and_patience_ends_an_episode_inside_the_rollout(tokenizer):
    envs = [evolif() for _ in range(4)]
    played = play_episodes(envs, [5, 5, 7, 7], Scripted(tokenizer, SCRIPT), tokenizer, max_tokens=512, reply_tokens=16)
    assert [p.seed for p in played] == [5, 5, 7, 7]
    # the same seed: the same first prompt and (the template user does not read replies) the same user turns
    assert played[0].prompt_ids == played[1].prompt_ids != played[2].prompt_ids == played[3].prompt_ids
    assert [t.user for t in played[2].episode.turns] == [t.user for t in played[3].episode.turns]
    # the missed first turn ended episode 1 at once (patience 1), though max_turns allowed two
    assert [len(p.episode.turns) for p in played] == [2, 1, 2, 2]
    assert [p.ended for p in played] == ["max_turns", "patience", "max_turns", "patience"]
    assert played[1].completion_ids[-1] == tokenizer.eos_token_id  # no user turn after the end
    assert [[t.reward for t in p.episode.turns] for p in played] == [[1.0, 1.0], [0.0], [1.0, 1.0], [1.0, 0.5]]
    reward = EpisodeReturn()
    assert reward(["-"] * 4, episode=[p.episode for p in played]) == [2.0, 0.0, 2.0, 1.5]
    metrics = episode_metrics(played, [[t.reward for t in p.episode.turns] for p in played], 2)
    assert metrics["turn_reward/0"] == 0.75 and metrics["turn_reward/1"] == pytest.approx(2.5 / 3)
    assert metrics["episode/turns"] == 7 / 4
    assert metrics["episode/ended/patience"] == metrics["episode/ended/max_turns"] == 0.5
    assert metrics["episode/same_user_turns"] == 1.0


def test_turn_level_credit_by_hand():
    rewards = [[1.0, 1.0], [0.0], [1.0, 1.0], [1.0, 0.5]]  # the episodes above, groups of two
    # group 1, turn 1: 1 vs 0 -> +-0.5; turn 2 reached by one episode only -> 0
    # group 2, turn 1: 1 vs 1 -> 0; turn 2: 1 vs 0.5 -> +-0.25
    assert turn_advantages(rewards, 2, "none") == [[0.5, 0.0], [-0.5], [0.0, 0.25], [0.0, -0.25]]
    std = math.sqrt(0.5)  # sample standard deviation of {1, 0}: sqrt((0.25 + 0.25) / 1)
    scaled = turn_advantages(rewards, 2, "group")
    assert scaled[0][0] == pytest.approx(0.5 / (std + 1e-4)) and scaled[1][0] == pytest.approx(-0.5 / (std + 1e-4))
    assert scaled[3][1] == pytest.approx(-0.25 / (math.sqrt(0.125) + 1e-4))
    # each reply's tokens carry its turn's advantage; user and padding tokens 0
    tokens = token_advantages([[0.5, -1.0], [2.0]], [[(0, 2), (4, 6)], [(0, 3)]], 7)
    assert tokens.tolist() == [[0.5, 0.5, 0, 0, -1.0, -1.0, 0], [2.0, 2.0, 2.0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="groups of 2"):
        turn_advantages([[1.0]] * 3, 2)


def test_length_floor_and_discount_in_the_episode_return(tokenizer):
    envs = [evolif() for _ in range(2)]
    played = play_episodes(
        envs,
        [5, 5],
        Scripted(tokenizer, [["I love songwriting", "songwriting"], ["Here is a", "x"]]),
        tokenizer,
        max_tokens=512,
        reply_tokens=16,
    )
    reward = EpisodeReturn(discount=0.5, min_words=2)
    # episode 2's one-word first reply met its rule (1.0 from the env) but counts 0 under the 2-word floor
    assert [[t.reward for t in p.episode.turns] for p in played] == [[1.0, 1.0], [1.0, 0.0]]
    assert [reward.turn_rewards(p.episode) for p in played] == [[1.0, 1.0], [0.0, 0.0]]
    assert [reward.score(p.episode) for p in played] == [1.5, 0.0]
    assert "min_words=2" in repr(reward)


def test_token_budget_and_an_unfinished_reply(tokenizer):
    envs = [evolif(), evolif()]
    script = [[("I love songwriting", False), "I love songwriting"]]  # the first stopped at the length limit
    played = play_episodes(envs, [5, 5], Scripted(tokenizer, script), tokenizer, max_tokens=30, reply_tokens=16)
    cut = played[0]
    # its turn is closed with an end-of-turn token the model did not write (mask 0, outside the span)
    written = len(tokenizer.encode("I love songwriting", add_special_tokens=False))
    assert cut.completion_ids[-1] == tokenizer.eos_token_id and cut.mask[-1] == 0 and cut.spans == [(0, written)]
    assert [p.cut for p in played] == [1, 0]
    assert episode_metrics(played, [[1.0], [1.0]], 2)["episode/cut_replies"] == 0.5
    assert played[1].spans == [(0, written + 1)] and played[1].mask == [1] * (written + 1)
    # the second turn could pass 30 tokens (reply so far + user turn + 16): not played
    assert [p.ended for p in played] == [ENDED_BY_BUDGET, ENDED_BY_BUDGET]
    assert played[1].episode.done_reason == ENDED_BY_BUDGET and len(played[1].episode.turns) == 1


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("ifgym/StructFlow-v0", {}),  # generated dialogues, own context
        ("ifgym/StructFlow-v0", {"dataset": "structflowbench", "allow_unjudged": True, "context": "own"}),
        ("ifgym/Composite-v0", {}),
        ("ifgym/FlexBench-v0", {}),  # system prompt and a scripted opening line before the caller speaks
    ],
)
def test_every_env_plays_as_one_token_sequence(tokenizer, env_id, kwargs):
    envs = [gym.make(env_id, max_turns=2, **kwargs) for _ in range(2)]
    played = play_episodes(
        envs,
        [3, 3],
        Scripted(tokenizer, [["Sure, here it is.", "Okay."], ["Done."] * 2]),
        tokenizer,
        max_tokens=2048,
        reply_tokens=16,
    )
    for p in played:
        assert p.episode.turns and p.prompt_ids == chat_ids(tokenizer, _first_messages(env_id, kwargs))
        assert sum(p.mask) == sum(end - start for start, end in p.spans)
        assert all(isinstance(t.reward, float) for t in p.episode.turns)


def _first_messages(env_id, kwargs):
    obs, _ = gym.make(env_id, max_turns=2, **kwargs).reset(seed=3)
    return obs


def test_golden_context_is_refused_with_the_fix(tokenizer):
    envs = [gym.make("ifgym/StructFlow-v0", dataset="structflowbench", allow_unjudged=True, max_turns=2)]
    with pytest.raises(ConfigError, match="env.context=own"):
        play_episodes(envs, [0], Scripted(tokenizer, [["Sure."]]), tokenizer, max_tokens=2048, reply_tokens=16)


def test_user_suffix_follows_the_chat_template(tokenizer):
    suffix = user_suffix_ids(tokenizer, {"role": "user", "content": "hello"})
    assert tokenizer.decode(suffix) == "\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ConfigError, match="less than one reply"):
        EpisodeRollout(lambda: None, tokenizer, max_tokens=8, reply_tokens=16)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["trainer.rollout=episodes"], "Did you mean 'episode'?"),
        (["trainer.rollout=episode", "trainer.episode.credit=turns"], "Did you mean 'turn'?"),
        (["trainer.rollout=episode", "trainer.episode.max_tokens=4"], "less than one reply"),
        (
            ["trainer.rollout=episode", "env=structflow", "env.dataset=structflowbench", "env.allow_unjudged=true"],
            "set env.context=own",
        ),
    ],
)
def test_episode_mistakes_are_one_line_before_any_model_loads(tmp_path, capsys, args, fragment):
    assert main(["train", "trainer=smoke", *args, f"hydra.run.dir={tmp_path / 'run'}", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ifgym: error:") and len(err.strip().splitlines()) == 1, err
    assert fragment in err


def test_two_episode_steps_with_turn_credit_log_rows_and_episodes(tmp_path, capsys, monkeypatch):
    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("NETRC", "/nonexistent/netrc")  # no API key: W&B runs offline, into the run folder
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    args = ["train", "trainer=smoke", "trainer.rollout=episode", "trainer.episode.max_turns=2"]
    args += ["trainer.episode.credit=turn", "+trainer.grpo.scale_rewards=none", "trainer.prompts.episodes=2"]
    args += [f"hydra.run.dir={out}", "progress=false", "trainer.threads=1", "logger=wandb"]
    monkeypatch.setattr(sys, "argv", ["ifgym", *args])
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    episodes = [json.loads(line) for line in (out / "train_episodes.jsonl").read_text().splitlines()]
    assert [(e["step"], e["group"]) for e in episodes] == [(1, 0), (1, 0), (2, 0), (2, 0)]
    for step, row in zip((1, 2), rows, strict=True):
        played = [e for e in episodes if e["step"] == step]
        assert played[0]["seed"] == played[1]["seed"]  # one group: two episodes of one seed
        for e in played:
            turns = e["episode"]["turns"]
            assert 1 <= len(turns) <= 2 and e["ended"] == e["episode"]["done_reason"]
            assert e["turn_rewards"] == [t["reward"] for t in turns]  # min_words 0: the env's rewards
            assert e["return"] == pytest.approx(sum(e["turn_rewards"]))
            assert e["trained_tokens"] == sum(end - start for start, end in e["reply_spans"])
        # turn credit, scale none: each turn's reward minus the group's mean for that turn (one episode alone: 0)
        a, b = (e["turn_rewards"] for e in played)
        for t in range(max(len(a), len(b))):
            if t < len(a) and t < len(b):
                assert played[0]["advantage"][t] == pytest.approx((a[t] - b[t]) / 2)
            else:
                assert [e["advantage"][t] for e in played if t < len(e["advantage"])] == [0.0]
        # TRL counted only the tokens the model wrote (its env_mask): the mean over the step's episodes
        assert row["completions/mean_length"] == pytest.approx(sum(e["trained_tokens"] for e in played) / 2)
        assert row["reward"] == pytest.approx(sum(e["return"] for e in played) / 2)
        assert row["episode/turns"] == sum(len(e["turn_rewards"]) for e in played) / 2
        assert row["turn_reward/0"] == pytest.approx(sum(e["turn_rewards"][0] for e in played) / 2)
        ends = {e["ended"] for e in played}
        assert {k.removeprefix("episode/ended/") for k in row if k.startswith("episode/ended/")} == ends
        assert any(k.startswith("pass_rate/") for k in row)
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["rollout"] == "episode" and summary["steps"] == 2 and summary["calls"] == {}
    assert summary["held_out"]["after"]["mean_turn_reward"]["value"] is not None
    assert "trained smollm2-135m for 2 steps" in capsys.readouterr().out
    (run_file,) = offline_runs(out)
    logged = [h for h in history(run_file) if "train/reward" in h]
    assert [h["train/episode/turns"] for h in logged] == [r["episode/turns"] for r in rows]
    assert [h["train/turn_reward/0"] for h in logged] == [r["turn_reward/0"] for r in rows]


class StandInTrainer:
    """What `EpisodeRollout` uses of TRL's trainer: its batched one-turn generation (here scripted)."""

    def __init__(self, generate):
        self.generate = generate

    def _generate_single_turn(self, ids, images, multimodal_fields, num_generations):
        assert images is None and multimodal_fields == {} and num_generations == 1
        return self.generate(ids)


def test_a_judged_env_counts_its_judge_calls_per_step(tokenizer):
    from support.canned_judges import yes_sayer
    from support.canned_server import CannedServer

    from ifgym.llm import make_client

    with CannedServer(replies=lambda body: yes_sayer(body["messages"])) as server:
        judge = make_client({"base_url": server.base_url, "model": server.model}, "judge")

        def make_env():
            return gym.make(
                "ifgym/StructFlow-v0",
                dataset="structflowbench",
                context="own",
                judge="llm",
                judge_llm=judge,
                max_turns=2,
            )

        rollout = EpisodeRollout(make_env, tokenizer, max_tokens=2048, reply_tokens=16)
        rollout.seeds = [0, 0]
        script = Scripted(tokenizer, [["Here it is.", "Sure."], ["Done.", "Fine."]])
        out = rollout([[{"role": "user", "content": "(row 0)"}]] * 2, StandInTrainer(script))
        sent = len(server.requests)
    # StructFlowBench's items are judged: every reply scored by the judge (yes to all), each call counted
    assert sent > 0 and rollout.usage["judge"]["calls"] == sent == rollout.calls["judge"]
    assert all(any(v.source.startswith("judge:") for v in t.verdicts) for e in rollout.last for t in e.episode.turns)
    metrics = episode_metrics(rollout.last, [[1.0, 1.0]] * 2, 2, usage=rollout.usage)
    assert metrics["calls/judge"] == sent
    # what TRL receives: ids, the mask as env_mask, no logprobs from this backend, the episodes for the reward
    assert out["env_mask"] == [p.mask for p in rollout.last] and out["logprobs"] is None
    assert out["episode"] == [p.episode for p in rollout.last]
    assert [len(ids) for ids in out["completion_ids"]] == [len(m) for m in out["env_mask"]]
