"""NTM (Context-Agent's benchmark) as an env, on made-up files in its format (tests/data/ntm/; no NTM data ships).

The reader's quirks and its errors, one verdict per checkpoint on the final turn only, TCR and ACT
by hand, determinism, check_env, and `ifgym eval` / `ifgym compare` over canned model servers.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from support.canned_judges import gold_or
from support.canned_server import CannedServer
from support.paths import DATA

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.core import Episode, TurnRecord, TurnSpec, Verdict
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import CannedClient
from ifgym.policies import ScriptedPolicy, Truncation
from ifgym.rewards.ntm import NTMRow, summarize, summarize_rows
from ifgym.runner import rollout
from ifgym.simulators.ntm import load_ntm, parse_checkpoints

MADE_UP = DATA / "ntm" / "made_up.jsonl"


def alternating_judge(messages):
    """A judge answering Yes, No, Yes, … for the items it is asked about."""
    n = messages[-1]["content"].count("<item ")
    return json.dumps({"results": [{"item": i + 1, "judgement": "Yes" if i % 2 == 0 else "No"} for i in range(n)]})


def make(**kwargs):
    kwargs.setdefault("judge_llm", CannedClient(alternating_judge, role="judge"))
    return gym.make("ifgym/NTM-v1", dataset=str(MADE_UP), **kwargs)


# --- the reader -------------------------------------------------------------------------------


def test_reader_reads_every_quirk_of_the_made_up_file():
    dialogues = load_ntm(MADE_UP)
    assert [d.id for d in dialogues] == [f"ntm-made-up-00{k}" for k in range(1, 5)]
    assert [len(d.turns) for d in dialogues] == [10, 15, 12, 10]  # rounds given as strings, equal to the turns
    assert [d.bucket for d in dialogues] == ["10", "15", "other", "10"]
    first, party, trip, study = dialogues
    assert first.checkpoints == (
        "Does the recommendation include: a laptop with a budget of 9000 yuan?",
        "Does the recommendation include: 16GB RAM?",
        "Does the recommendation include: 1TB SSD?",  # "(3) 1TB SSD": the space after the marker
        "Does the recommendation include: a 14-inch screen?",  # ", and (4)…?  ": the separator and trailing spaces
    )
    assert len(party.checkpoints) == 10 and party.checkpoints[-1].endswith(": games for eight-year-olds?")  # "(10)"
    assert party.checkpoints[0].endswith(": a party for an eight-year-old?")  # "( 1 )"
    assert trip.numbered is False and len(trip.checkpoints) == 6  # prose: "the following 6 points: a, b, … and f"
    assert trip.checkpoints[-1] == "Does the final plan meet: a return by train?"
    assert (
        study.checkpoints[1] == "Does the schedule include: physics on Monday and Wednesday only?"
    )  # "(2)" with no space before
    assert study.turns[0] == "Help me plan my study week for the exam."  # leading spaces stripped


@pytest.mark.parametrize(
    "question, items, stem, numbered",
    [
        ("Is it (1)red, (2)big?", ("red", "big"), "Is it", True),  # the plain case
        ("  Is it (1) red ,( 2 )big and (3)  round.  ", ("red", "big", "round"), "Is it", True),  # spaces, "and"
        ("Does it cover the following 2 points: speed; cost", ("speed", "cost"), "Does it cover", False),  # prose
        ("Is it \uff081\uff09red, \uff082\uff09big?", ("red", "big"), "Is it", True),  # full-width parentheses
        ("Is the plan final?", ("Is the plan final",), "", False),  # neither markers nor a list: one checkpoint
        # a negation that opens an item joined to the next by "or" governs the next one too
        (
            "Is the final status to: (1)refunded, (2)without filing a complaint or (3)requesting a VIP service upgrade",
            ("refunded", "without filing a complaint", "without requesting a VIP service upgrade"),
            "Is the final status to",
            True,
        ),
        # "or" before a marker is a separator: no checkpoint ends in "or"
        ("Does it (1)keep the budget, or (2)drop the SSD", ("keep the budget", "drop the SSD"), "Does it", True),
        # a negation left before a marker moves into the items it governs, through "or" and no further
        (
            "Is the plan (1)cheap, without (2)flights or (3)hotels, and (4)short?",
            ("cheap", "without flights", "without hotels", "short"),
            "Is the plan",
            True,
        ),
        # an item with its own negation keeps it; "neither ... nor" gives "not" to the second
        ("Is it (1)not loud or (2)never late", ("not loud", "never late"), "Is it", True),
        (
            "Does it have (1)neither meat nor (2)fish, (3)rice",
            ("neither meat", "not fish", "rice"),
            "Does it have",
            True,
        ),
        # a negation joined by "," or "and" is a list item of its own, not a scope over the next
        ("Does it include (1)no sugar, (2)salt and (3)pepper", ("no sugar", "salt", "pepper"), "Does it include", True),
        ("Does it include (1)no sugar and (2)salt", ("no sugar", "salt"), "Does it include", True),
        # "yes or no" at the end of an item is not a dangling negation
        ("Does it (1)say yes or no, (2)cite a source", ("say yes or no", "cite a source"), "Does it", True),
    ],
)
def test_parse_checkpoints(question, items, stem, numbered):
    assert parse_checkpoints(question) == (items, stem, numbered)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda r: r.update(metadata={"rounds": "9"}), "metadata.rounds is '9' but the dialogue has 10"),
        (lambda r: r.update(metadata={}), "metadata.rounds must be the number of user turns"),
        (lambda r: r["user_turns"][3].update(turn_id=7), r"user_turns\[3\]: turn_id must be 4"),
        (lambda r: r.pop("checkpoint_question"), "missing field 'checkpoint_question'"),
        (lambda r: r.update(checkpoint_question="Is it (1)red, (3)big?"), r"numbered \(1\), \(2\), … in order"),
        (
            lambda r: r.update(checkpoint_question="Does it meet the following 3 points: a, b"),
            "says 3 points but lists 2",
        ),
        (lambda r: r["user_turns"][0].update(content="  "), "'content' must be a non-empty string"),
    ],
)
def test_a_malformed_line_is_one_error_naming_the_line(tmp_path, edit, fragment):
    lines = MADE_UP.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    edit(record)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[1], json.dumps(record), *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=fragment) as exc:
        load_ntm(bad)
    assert f"{bad}:2:" in str(exc.value)  # the file and the line


def test_missing_file_bad_json_duplicate_ids_and_no_dataset_are_clear_errors(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        load_ntm(tmp_path / "nope.jsonl")
    (tmp_path / "broken.jsonl").write_text(MADE_UP.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(DataFormatError, match=r"broken.jsonl:2: invalid JSON"):
        load_ntm(tmp_path / "broken.jsonl")
    line = MADE_UP.read_text().splitlines()[0]
    (tmp_path / "twice.jsonl").write_text(f"{line}\n\n{line}\n")
    with pytest.raises(
        DataFormatError, match=r"twice.jsonl:3: conversation_id 'ntm-made-up-001' already used on line 1"
    ):
        load_ntm(tmp_path / "twice.jsonl")
    with pytest.raises(ConfigError, match="env.dataset=PATH"):
        gym.make("ifgym/NTM-v1")
    with pytest.raises(DataFormatError, match="no such file"):
        gym.make("ifgym/NTM-v1", dataset=str(tmp_path / "nope.jsonl"), judge="rules")
    with pytest.raises(UnknownNameError, match="Did you mean 'rules'"):
        make(judge="rule")


# --- the env ----------------------------------------------------------------------------------


def test_only_the_final_reply_is_judged_with_one_verdict_per_checkpoint():
    calls = []

    def judge(messages):
        calls.append(messages)
        return alternating_judge(messages)

    env = make(judge_llm=CannedClient(judge, role="judge"))
    obs, info = env.reset(options={"dialogue": 1})  # the 15-turn dialogue with 10 checkpoints
    assert obs[-1]["content"] == "I'm organising a birthday party for my daughter." and info["final"] is False
    steps = []
    while True:
        obs, reward, terminated, truncated, info = env.step(f"reply {len(steps)}")
        steps.append((reward, info))
        if terminated or truncated:
            break
    assert len(steps) == 15 and terminated and not truncated and info["done_reason"] == "script_end"
    assert all(r == 0.0 and i["scored"] is False and "verdicts" not in i for r, i in steps[:-1])
    assert [v["label"] for v in info["verdicts"]] == ["yes", "no"] * 5  # one per checkpoint, never coerced
    assert info["scored"] is True and steps[-1][0] == pytest.approx(0.5) == info["TCR"]
    assert len(calls) == 1  # one judge call for the dialogue
    # the judge reads the final request and reply only, as the paper's judge
    prompt = calls[0][-1]["content"]
    assert "Summarise the final party plan." in prompt and "reply 14" in prompt
    assert "reply 13" not in prompt and "birthday party for my daughter" not in prompt
    # the policy saw its own replies as the history (no reference answers)
    assert [m["content"] for m in obs if m["role"] == "assistant"] == [f"reply {k}" for k in range(15)]
    assert env.unwrapped.max_turns == 15 and env.unwrapped.episode.meta["dialogue"]["id"] == "ntm-made-up-002"


def test_the_user_never_sees_the_replies_and_seed_k_plays_dialogue_k():
    def user_turns(reply):
        env = make(judge="rules", allow_unjudged=True)
        obs, _ = env.reset(seed=6)  # 6 mod 4 = dialogue 2
        said = [obs[-1]["content"]]
        while True:
            obs, _, terminated, truncated, _ = env.step(reply)
            if terminated or truncated:
                return said, env.unwrapped.episode.meta["dialogue"]["id"]
            said.append(obs[-1]["content"])

    quiet, loud = user_turns("ok"), user_turns("Something entirely different and much longer.")
    assert quiet == loud and quiet[1] == "ntm-made-up-003"
    assert quiet[0] == [t["content"] for t in json.loads(MADE_UP.read_text().splitlines()[2])["user_turns"]]


def test_judge_rules_leaves_every_checkpoint_unknown_and_counts_it():
    env = make(judge="rules", allow_unjudged=True)
    episode = rollout(env, ScriptedPolicy(["fine"]), seed=0)
    final = episode.turns[-1]
    assert [v.label for v in final.verdicts] == ["unknown"] * 4 and final.reward == 0.0
    summary = summarize([episode])
    assert math.isnan(summary["TCR"]) and summary["unknown_share"] == 1.0 and summary["undetermined_dialogues"] == 1
    assert any("every verdict is unknown" in d for d in env.unwrapped.protocol()["deviations"])


def test_same_dialogue_same_episode_and_check_env():
    def play():
        episode = rollout(make(), ScriptedPolicy(["A", "B", "C"]), seed=3)
        return [(t.user, t.reply, t.reward, [v.to_json() for v in t.verdicts]) for t in episode.turns]

    assert play() == play()
    check_env(make().unwrapped)


# --- metrics ----------------------------------------------------------------------------------


def _row(bucket, labels, tokens=None, turns=10):
    return NTMRow(
        dialogue=f"d{bucket}{labels}", bucket=bucket, labels=tuple(labels), context_tokens=tokens, turns=turns
    )


def first_only_judge(messages):
    """A judge answering Yes to the first checkpoint it is asked about and No to the rest."""
    n = messages[-1]["content"].count("<item ")
    return json.dumps({"results": [{"item": i + 1, "judgement": "Yes" if i == 0 else "No"} for i in range(n)]})


def play_all(env, seeds):
    return [rollout(env, ScriptedPolicy(["an answer"]), seed=s) for s in seeds]


def test_tcr_per_length_bucket_and_the_off_bucket_dialogues_apart_on_a_made_up_file():
    # the made-up file: 10 turns (4 checkpoints), 15 (10), 12 (6: off the paper's lengths), 10 (3); a judge that
    # passes the first checkpoint only gives each dialogue TCR 1/n
    judge = CannedClient(first_only_judge, role="judge")
    env = make(judge_llm=judge)
    s = summarize(play_all(env, range(4)))
    assert s["TCR/10"] == pytest.approx((1 / 4 + 1 / 3) / 2) and s["TCR/15"] == pytest.approx(1 / 10)
    assert s["TCR/other"] == pytest.approx(1 / 6) and s["dialogues/other"] == 1  # the 12-turn dialogue, apart
    assert s["TCR/paper_lengths"] == pytest.approx((1 / 4 + 1 / 10 + 1 / 3) / 3)  # without it
    assert s["TCR"] == pytest.approx((1 / 4 + 1 / 10 + 1 / 6 + 1 / 3) / 4)  # every dialogue
    line = env.unwrapped.protocol()["deviations"][0]
    assert line.startswith("corpus: 4 dialogues, 47 user turns; the paper reports 165 dialogues and 2,929 user turns")
    assert "(405 dialogues, 6,931 user turns)" in line and "env.lengths=[10,15,20,25]" in line
    # env.lengths keeps the paper's lengths: seeds 0-2 play the three dialogues of 10 and 15 turns
    paper = make(judge_llm=judge, lengths=[10, 15, 20, 25])
    assert paper.unwrapped.replayed == 3 and paper.unwrapped.protocol()["lengths"] == "10/15/20/25"
    restricted = play_all(paper, range(3))
    assert [e.meta["dialogue"]["id"] for e in restricted] == ["ntm-made-up-001", "ntm-made-up-002", "ntm-made-up-004"]
    r = summarize(restricted)
    assert "TCR/other" not in r and r["TCR"] == pytest.approx(s["TCR/paper_lengths"])
    assert "this run plays the 3 of 10/15/20/25 turns (env.lengths)" in paper.unwrapped.protocol()["deviations"][0]


@pytest.mark.parametrize(
    "lengths, fragment",
    [
        ([30], r"no dialogue has \[30\] user turns \(env.lengths\); its lengths: \[10, 12, 15\]"),
        ("10", "env.lengths must be a list of dialogue lengths"),
        ([10, "x"], "env.lengths must be a list of dialogue lengths"),
        ([], "env.lengths must be a list of dialogue lengths"),
    ],
)
def test_lengths_that_keep_nothing_or_are_not_lengths_are_refused(lengths, fragment):
    with pytest.raises(ConfigError, match=fragment):
        make(lengths=lengths)


def test_v1_keeps_the_negation_that_governs_a_checkpoint_and_v0_reads_as_first_released(tmp_path):
    record = json.loads(MADE_UP.read_text(encoding="utf-8").splitlines()[0])
    record["checkpoint_question"] = (
        "Is the final status to: (1)refunded, (2)without filing a complaint or (3)requesting a VIP service upgrade?"
    )
    path = tmp_path / "negation.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    asked = {}
    for env_id in ("ifgym/NTM-v1", "ifgym/NTM-v0"):
        env = gym.make(env_id, dataset=str(path), judge_llm=CannedClient(first_only_judge, role="judge"))
        episode = rollout(env, ScriptedPolicy(["an answer"]), seed=0)
        asked[env_id] = [i.question for i in episode.turns[-1].spec.checklist]
    assert asked["ifgym/NTM-v1"][1:] == [
        "Is the final status to: without filing a complaint?",
        "Is the final status to: without requesting a VIP service upgrade?",
    ]
    assert asked["ifgym/NTM-v0"][2] == "Is the final status to: requesting a VIP service upgrade?"


def test_tcr_arithmetic_by_hand():
    rows = [
        _row("10", ["yes", "no", "yes", "yes"], 1000, 10),  # TCR 3/4
        _row("10", ["no", "no"], 3000, 10),  # TCR 0
        _row("15", ["yes", "unknown", "no"], 4500, 15),  # TCR 1/2 over the judged two; one unknown
        _row("other", ["unknown"], None, 12),  # undetermined; no usage record
    ]
    s = summarize_rows(rows)
    assert s["TCR"] == pytest.approx((0.75 + 0 + 0.5) / 3)  # the undetermined dialogue is left out
    assert s["TCR_pooled"] == pytest.approx(4 / 8)  # 4 met of 8 judged
    assert s["unknown_share"] == pytest.approx(2 / 10)
    assert s["TCR/10"] == pytest.approx(0.375) and s["TCR/15"] == pytest.approx(0.5) and math.isnan(s["TCR/other"])
    assert s["ACT/10"] == pytest.approx(4000 / 20) and s["ACT/15"] == pytest.approx(300) and math.isnan(s["ACT/other"])
    assert s["ACT"] == pytest.approx(8500 / 35)
    assert "TCR/20" not in s and s["dialogues/10"] == 2 and s["checkpoints"] == 10 and s["undetermined_dialogues"] == 1


def test_act_per_bucket_comes_from_the_policys_usage_records():
    env = make()
    plain = [rollout(env, ScriptedPolicy(["two words"]), seed=s) for s in (0, 1, 2)]

    # ScriptedPolicy counts the words it was sent as prompt tokens: recount them from the episodes
    def sent(e):
        return sum(
            len(t.user.split()) + sum(len(u.reply.split()) + len(u.user.split()) for u in e.turns[: t.index])
            for t in e.turns
        )

    s = summarize(plain)
    assert s["ACT/10"] == pytest.approx(sent(plain[0]) / 10)
    assert s["ACT/15"] == pytest.approx(sent(plain[1]) / 15) and s["ACT/other"] == pytest.approx(sent(plain[2]) / 12)
    # a wrapper's own count (context_tokens): truncation to the current turn sends far less
    short = [rollout(env, Truncation(ScriptedPolicy(["two words"]), k=1), seed=s) for s in (0, 1, 2)]
    s_short = summarize(short)
    assert s_short["ACT/10"] == pytest.approx(sum(len(t.user.split()) for t in short[0].turns) / 10)
    assert s_short["ACT/15"] < s["ACT/15"]


def test_episode_row_reads_the_final_turn_strict_or_loose():
    spec = TurnSpec(move="replay")
    final = TurnRecord(
        index=1,
        user="u",
        spec=spec,
        reply="r",
        verdicts=[Verdict("yes", "", "judge"), Verdict("unknown", "", "judge")],
        loose_verdicts=[Verdict("yes", "", "judge"), Verdict("no", "", "judge")],
        reward=1.0,
    )
    first = TurnRecord(index=0, user="u", spec=spec, reply="r", verdicts=[], loose_verdicts=[], reward=0.0)
    meta = {"dialogue": {"id": "x", "bucket": "20"}, "policy_usage": {"turns": 2, "context_tokens": 50}}
    episode = Episode(episode_id="e", env_id="ifgym/NTM-v1", seed=0, turns=[first, final], meta=meta)
    assert summarize([episode])["TCR/20"] == 1.0 and summarize([episode], loose=True)["TCR/20"] == 0.5
    assert summarize([episode])["ACT/20"] == 25.0
    # a plain policy's prompt tokens count, unless a call's usage went unreported (then ACT leaves it out)
    episode.meta["policy_usage"] = {"calls": 2, "prompt_tokens": 30, "missing_usage": 0}
    assert summarize([episode])["ACT/20"] == 15.0
    episode.meta["policy_usage"] = {"calls": 2, "prompt_tokens": 30, "missing_usage": 1}
    assert math.isnan(summarize([episode])["ACT/20"])


# --- the command line -------------------------------------------------------------------------


def _eval(tmp_path, name, judge_url, policy_url):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ifgym.cli",
            "eval",
            "env=ntm",
            f"env.dataset={MADE_UP}",
            "judge=llm",
            f"judge.llm.base_url={judge_url}",
            "judge.llm.model=canned-model",
            "policy=openai",
            f"policy.llm.base_url={policy_url}",
            "policy.llm.model=canned-model",
            "episodes=4",
            f"output={tmp_path / name / 'episodes.jsonl'}",
            "progress=false",
            "plots=false",
            "ci_resamples=100",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "IFGYM_CACHE": str(tmp_path / "cache")},
    )


def test_eval_writes_tcr_and_act_per_bucket_and_compare_pairs_two_runs_by_dialogue(tmp_path):
    with (
        CannedServer(replies=gold_or(alternating_judge)) as judge,
        CannedServer(replies=["A short answer."]) as short,
        CannedServer(replies=["A much longer answer that repeats itself, " * 5]) as long,
    ):
        a = _eval(tmp_path, "a", judge.base_url, short.base_url)
        assert a.returncode == 0, a.stderr
        b = _eval(tmp_path, "b", judge.base_url, long.base_url)
        assert b.returncode == 0, b.stderr
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    strict = summary["strict"]
    assert strict["TCR"] == pytest.approx((2 / 4 + 5 / 10 + 3 / 6 + 2 / 3) / 4)  # Yes, No, Yes, … per dialogue
    assert {"ACT/10", "ACT/15", "ACT/other", "TCR/10", "TCR/15", "TCR/other"} <= set(strict)
    assert summary["ci"]["strict"]["TCR"] is not None and summary["headline_metric"] == "TCR"
    assert "not Context-Agent (NTM)'s protocol:" in a.stdout and "ifgym's checklist judge" in a.stdout
    act_b = json.loads((tmp_path / "b" / "summary.json").read_text())["strict"]["ACT/15"]
    assert act_b > strict["ACT/15"]  # longer replies in the history: more context sent per turn
    out = tmp_path / "cmp.json"
    r = subprocess.run(
        [sys.executable, "-m", "ifgym.cli", "compare", str(tmp_path / "a"), str(tmp_path / "b"), f"out={out}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "4 episodes paired by seed" in r.stdout  # seed k is dialogue k: paired by dialogue
    assert json.loads(out.read_text())["strict"]["ACT/15"]["diff"] == pytest.approx(act_b - strict["ACT/15"])


def test_act_of_a_context_agent_run_is_the_wrappers_own_count():
    from golden.doubles import server_model

    from ifgym.llm import make_client
    from ifgym.policies import ChatPolicy, ContextAgent, HashingEmbedder

    with CannedServer(server_model) as base, CannedServer(server_model) as light:

        def client(server, role):
            config = {"base_url": server.base_url, "model": server.model, "api_key_env": None, "max_retries": 0}
            return make_client(config, role)

        policy = ContextAgent(ChatPolicy(client(base, "policy")), client(light, "light"), embedder=HashingEmbedder())
        episode = rollout(make(judge="rules", allow_unjudged=True), policy, seed=1)  # the 15-turn dialogue
    sent = [c.context_tokens for c in policy.costs]
    assert len(sent) == 15 and episode.meta["policy_usage"]["context_tokens"] == sum(sent)
    assert summarize([episode])["ACT/15"] == pytest.approx(sum(sent) / 15)


def test_judge_rules_is_refused_unless_replaying_unscored_is_asked_for():
    # no rule decides a checkpoint: a rules-only judge would leave TCR n/a, so it is refused, as StructFlowBench's is
    with pytest.raises(ConfigError, match=r"judge='rules' would score nothing.*judge='llm'.*allow_unjudged=True"):
        make(judge="rules")
    with pytest.raises(ConfigError, match="allow_unjudged must be True or False"):
        make(allow_unjudged="yes")
    assert make(judge="rules", allow_unjudged=True).unwrapped.judge_kind == "rules"  # asked for: unscored replay
