"""env=evolif_paper is EvolIF's protocol by default (issue 20): the LLM user with its drafts counted, the 1-10
rating judge (audited; the embedded one refused with a served judge named as the fix), the task system prompt
sent first, the trivial-dialogue filter on fixed seeds, STA under the paper's name, a folder of dialogue
files replayed in one run, and a protocol that lists what still differs. Models are canned servers."""

from __future__ import annotations

import json
import re
import shutil

import gymnasium as gym
import pytest
from support.canned_judges import gold_or, yes_sayer
from support.canned_server import CannedServer
from support.canned_user import scripted_user_model, stating_draft
from support.paths import DATA

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import compose, main
from ifgym.core.constraints import GROUPS
from ifgym.envs.evolif import TASK_SYSTEM_PROMPT
from ifgym.errors import ConfigError
from ifgym.llm import CannedClient
from ifgym.runner.build import build_env
from ifgym.runner.judge_gate import audit_judge, audit_refusal
from ifgym.runner.rollout import select_seeds


def judge_model(messages):
    """A canned rating judge: every judged item scores 8 (a pass)."""
    n = messages[-1]["content"].count("<item")
    return json.dumps({"scores": [{"item": i + 1, "score": 8, "reason": "fits"} for i in range(max(n, 1))]})


def paper_env(**kwargs):
    """EvolIF-v1 at the paper's tracker settings (all 12 groups, so an LLM judge) with a canned judge."""
    return gym.make(
        "ifgym/EvolIF-v1", judge="llm", judge_llm=CannedClient(judge_model), tracker={"groups": list(GROUPS)}, **kwargs
    ).unwrapped


# ---------------------------------------------------------------------------------------------
# the trivial-dialogue filter on fixed seeds

# Live constraints summed over the first 20 turns of seeds 0..11 at the paper's settings, read off the
# played dialogues (`played_counts`) and written down; a mean under 2 is a sum under 40: seeds 0, 6 and 8.
TOTALS_0_TO_11 = [39, 41, 50, 59, 48, 63, 35, 41, 37, 48, 41, 41]
SKIPPED_0_TO_11 = [0, 6, 8]


def played_counts(seed, turns=20):
    """The live constraints of each turn of the dialogue as played and recorded (the episode's turns)."""
    env = paper_env(patience=None, max_turns=turns)
    env.reset(seed=seed)
    done = False
    while not done:
        *_, terminated, truncated, _ = env.step("A reply.")
        done = terminated or truncated
    return [len(t.spec.constraints) for t in env.episode.turns]


def test_filter_skips_the_seeds_whose_first_20_turns_average_under_two_constraints():
    assert [sum(played_counts(s)) for s in range(12)] == TOTALS_0_TO_11
    env = paper_env(min_mean_constraints=2)
    assert [s for s in range(12) if not env.keeps_seed(s)] == SKIPPED_0_TO_11
    assert env.mean_constraints(0) == pytest.approx(1.95)


def user_turns(env, filter_between):
    """The user's three turns of seed 7, with the filter asked about seeds 6-8 after the first if `filter_between`."""
    obs, _ = env.reset(seed=7)
    calls = len(env.user.renderer.client.requests)
    if filter_between:
        assert [env.keeps_seed(s) for s in (6, 7, 8)] == [False, True, False]
        assert len(env.user.renderer.client.requests) == calls  # deciding makes no model call
    texts = [obs[-1]["content"]]
    for _ in range(2):
        obs, *_ = env.step("A reply.")
        texts.append(obs[-1]["content"])
    return texts


def test_the_filter_makes_no_model_call_and_leaves_the_episode_alone():
    def make():
        user = CannedClient(scripted_user_model(generate=stating_draft), role="user")
        return paper_env(renderer="llm", user_llm=user, min_mean_constraints=2, max_turns=3, patience=None)

    assert user_turns(make(), True) == user_turns(make(), False)


def test_a_run_of_n_episodes_plays_n_kept_seeds_in_order():
    env = paper_env(min_mean_constraints=2)
    selection = select_seeds(env, 0, 9)
    assert selection.skipped == SKIPPED_0_TO_11 and selection.seeds == [1, 2, 3, 4, 5, 7, 9, 10, 11]
    assert select_seeds(paper_env(), 0, 3).seeds == [0, 1, 2]  # no filter: every seed
    with pytest.raises(ConfigError, match="min_mean_constraints"):
        select_seeds(paper_env(min_mean_constraints=13), 0, 2)  # 12 groups: never 13 live constraints


def test_bad_filter_values_are_refused():
    with pytest.raises(ConfigError, match="min_mean_constraints must be a number > 0"):
        paper_env(min_mean_constraints=0)
    with pytest.raises(ConfigError, match="min_mean_constraints would be ignored"):
        gym.make("ifgym/EvolIF-v1", script=DATA / "evolif_dialogue.jsonl", min_mean_constraints=3)


# ---------------------------------------------------------------------------------------------
# the preset over the command line: canned user, judge and policy servers


def paper_args(tmp_path, user, judge, policy, *extra):
    return [
        "eval",
        "env=evolif_paper",
        f"env.user_llm.base_url={user.base_url}",
        "env.user_llm.model=canned-model",
        "env.max_turns=2",
        "judge=llm",
        f"judge.llm.base_url={judge.base_url}",
        "judge.llm.model=canned-model",
        "policy=openai",
        f"policy.llm.base_url={policy.base_url}",
        "policy.llm.model=canned-model",
        "seed=5",
        "episodes=3",
        f"output={tmp_path / 'e.jsonl'}",
        "progress=false",
        "plots=false",
        *extra,
    ]


def user_answer(body):
    return scripted_user_model(generate=stating_draft)(body["messages"])


def test_the_paper_preset_by_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with (
        CannedServer(user_answer) as user,
        CannedServer(gold_or(judge_model)) as judge,
        CannedServer(replies=["An answer."]) as policy,
    ):
        assert main(paper_args(tmp_path, user, judge, policy)) == 0
        user_requests = len(user.requests)
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    episodes = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    # seeds 6 and 8 are trivial: three dialogues are still played, on 5, 7 and 9
    assert sorted(e["seed"] for e in episodes) == [5, 7, 9]
    assert summary["seed_filter"]["skipped_seeds"] == [6, 8] and summary["seed_filter"]["skipped"] == 2
    assert "seed filter (at least 2 live constraints on average over the first 20 turns): 2 seeds skipped (6, 8)" in out
    # the task system prompt is sent first, in every request
    assert {json.dumps(r["messages"][0]) for r in policy.requests} == {
        json.dumps({"role": "system", "content": TASK_SYSTEM_PROMPT})
    }
    # the user model wrote the queries; its checked drafts and fallbacks are counted and printed
    stats = summary["user_stats"]
    assert stats["renders"] == 6 and stats["drafts"] >= 6 and stats["llm_fallbacks"] == 0
    assert stats["llm_calls"] == user_requests  # every call to the user model is an episode's
    assert f"drafts {stats['drafts']}" in out and "llm_fallbacks 0" in out
    # the 1-10 rating judge by default; STA under the paper's name, ROB kept in summary.json only
    assert summary["judge"]["mode"] == "rating" and summary["protocol"]["judge_mode"] == "rating"
    assert summary["strict"]["STA"] == summary["strict"]["ROB"] and "STA" in summary["headline"]
    assert re.search(r"^STA\s", out, re.MULTILINE) and not re.search(r"^ROB\s", out, re.MULTILINE)
    protocol = summary["protocol"]
    assert (protocol["renderer"], protocol["system_prompt"], protocol["min_mean_constraints"]) == ("llm", "task", 2)
    assert protocol["user_model"] == "canned-model (served)"
    assert "user_model=canned-model (served)" in out.splitlines()[0]


def test_without_the_system_prompt_is_the_papers_other_row(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with (
        CannedServer(user_answer) as user,
        CannedServer(gold_or(judge_model)) as judge,
        CannedServer(replies=["An answer."]) as policy,
    ):
        assert main(paper_args(tmp_path, user, judge, policy, "env.system_prompt=none", "episodes=1")) == 0
    assert all(r["messages"][0]["role"] == "user" for r in policy.requests)
    out = capsys.readouterr().out
    assert "no system prompt: EvolIF's 'w/o system prompt' row" in out


def test_shards_play_the_same_kept_seeds_as_one_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    args = ["env.renderer=template", "policy=scripted", "episodes=4"]
    with CannedServer(user_answer) as user, CannedServer(gold_or(judge_model)) as judge:
        for shard in ("shard=0/2", "shard=1/2"):
            assert main(paper_args(tmp_path, user, judge, user, *args, shard)) == 0
        assert main(["merge", str(tmp_path)]) == 0
    merged = [json.loads(line)["seed"] for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert sorted(merged) == [5, 7, 9, 10]
    assert json.loads((tmp_path / "summary.json").read_text())["seed_filter"]["skipped_seeds"] == [6, 8]


# ---------------------------------------------------------------------------------------------
# the judge: rating by default, audited, a failing judge refused with the fix


def test_the_preset_rates_and_a_judge_below_the_floor_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with (
        CannedServer(user_answer) as user,
        CannedServer(lambda body: yes_sayer(body["messages"])) as judge,
        CannedServer(replies=["An answer."]) as policy,
    ):
        assert main(paper_args(tmp_path, user, judge, policy)) == 2
        err = capsys.readouterr().err
        assert "mode rating) fails its audit" in err and "judge.trust=true" in err
        assert not (tmp_path / "e.jsonl").exists()
        # the same judge, trusted: its record says why the embedded one would be refused and what to do
        judge_args = [f"judge.llm.base_url={judge.base_url}", "judge.llm.model=canned-model", "judge.trust=true"]
        cfg = compose(["env=evolif_paper", "judge=llm", *judge_args])
        from omegaconf import OmegaConf

        resolved = OmegaConf.to_container(cfg, resolve=True)
        resolved["env"]["user_llm"].update(base_url=user.base_url, model="canned-model")
        env = build_env(resolved["env"], resolved["judge"], {})().unwrapped
        record = audit_judge(env, resolved["judge"], progress=False)
    assert record["mode"] == "rating" and record["audit"]["passed"] is False
    message = audit_refusal(record, embedded=True)
    assert message.startswith("the embedded judge (") and "mode rating" in message
    assert "serve a stronger judge and pass judge.llm.base_url=URL judge.llm.model=NAME" in message


def test_judge_mode_blind_is_a_named_deviation_of_the_preset():
    cfg = compose(["env=evolif_paper", "judge=llm", "judge.mode=blind"])
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["env"]["judge_mode"] == "rating" and resolved["judge"]["mode"] == "blind"


# ---------------------------------------------------------------------------------------------
# a folder of released dialogue files, replayed in one run


def dialogue_folder(tmp_path):
    folder = tmp_path / "dialogues"
    folder.mkdir()
    shutil.copy(DATA / "evolif_dialogue.jsonl", folder / "a.jsonl")
    lines = (DATA / "evolif_dialogue.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (folder / "b.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_a_folder_replays_one_file_per_seed_in_name_order(tmp_path):
    env = gym.make("ifgym/EvolIF-v1", script=dialogue_folder(tmp_path), patience=None)
    played = []
    for seed in range(3):
        env.reset(seed=seed)
        turns, done = 1, False
        while not done:
            *_, terminated, truncated, _ = env.step("A reply.")
            done = terminated or truncated
            turns += not done
        played.append((env.unwrapped.episode.meta["dialogue"]["file"], len(env.unwrapped.episode.turns)))
    assert played == [("a.jsonl", 7), ("b.jsonl", 3), ("a.jsonl", 7)]
    protocol = env.unwrapped.protocol()
    assert protocol["dialogues"] == 2 and protocol["renderer"] == "replay"


def test_a_folder_replays_in_one_eval_run(tmp_path, capsys):
    folder = dialogue_folder(tmp_path)
    out = tmp_path / "run" / "e.jsonl"
    args = ["eval", "env=evolif", f"env.script={folder}", "env.patience=null", "policy=scripted", "episodes=2"]
    assert main([*args, f"output={out}", "progress=false", "plots=false"]) == 0
    files = [json.loads(line)["meta"]["dialogue"]["file"] for line in out.read_text().splitlines()]
    assert sorted(files) == ["a.jsonl", "b.jsonl"]
    assert json.loads((out.parent / "summary.json").read_text())["strict"]["turns"] == 10


def test_an_empty_folder_is_one_clear_error(tmp_path):
    with pytest.raises(Exception, match="holds no EvolIF dialogue file"):
        gym.make("ifgym/EvolIF-v1", script=tmp_path)
