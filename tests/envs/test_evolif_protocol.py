"""EvolIF's protocol and the env's versions: v1's defaults (change-only user, patience 3, 100-turn safety
cap), v0 kept as first released, the paper config, CLI/Python default agreement, what the results table
says, and the LLM user's independence from the replies over a real HTTP server (a canned one)."""

from __future__ import annotations

import hashlib
import inspect
import json
import re

import gymnasium as gym
import pytest
from support.canned_judges import gold_or
from support.canned_server import CannedServer
from support.canned_user import scripted_user_model, stating_draft
from support.paths import REPO

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import compose, main
from ifgym.core.constraints import GROUPS
from ifgym.envs.evolif import PAPER_PROTOCOL, EvolIFEnv
from ifgym.errors import ConfigError
from ifgym.llm import CannedClient

OLD_IDS = "ignore:.*is out of date:DeprecationWarning"


def judge_model(messages):
    """A canned judge: every judged item scores 8 (a pass)."""
    n = messages[-1]["content"].count("<item")
    return json.dumps({"scores": [{"item": i + 1, "score": 8, "reason": "fits"} for i in range(max(n, 1))]})


def user_texts(env_id, seed, turns, reply="Reply {i}.", **kwargs):
    env = gym.make(env_id, patience=None, max_turns=turns, **kwargs)
    obs, _ = env.reset(seed=seed)
    texts = [obs[-1]["content"]]
    for i in range(turns - 1):
        obs, *_ = env.step(reply.format(i=i))
        texts.append(obs[-1]["content"])
    return texts


def digest(value):
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# versions


def test_v1_defaults_are_evolifs_user_patience_and_cap():
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    assert (env.max_turns, env.patience.full) == (PAPER_PROTOCOL["max_turns"], PAPER_PROTOCOL["patience"]) == (100, 3)
    assert env.user.restate == "change" and env.user.adaptive is False and env.user.checks == "rules"


@pytest.mark.filterwarnings(OLD_IDS)
def test_v0_is_kept_word_for_word_and_warns_that_it_is_out_of_date():
    with pytest.warns(DeprecationWarning, match="out of date"):
        env = gym.make("ifgym/EvolIF-v0").unwrapped
    assert (env.max_turns, env.user.restate, env.user.adaptive, env.user.checks) == (20, "all", True, "model")
    # the first release's user turns (seeds 0-4, 12 turns each), hashed on the commit before v1 (3ca1491)
    texts = [t for seed in range(5) for t in user_texts("ifgym/EvolIF-v0", seed, 12)]
    assert digest(texts) == "10f20153f69eefa9f38d7ec9655e202d21603e2aa3fad37ed7f293936c87a4d1"


@pytest.mark.filterwarnings(OLD_IDS)
def test_v0_llm_user_sends_the_first_releases_prompts():
    # every prompt the v0 LLM user sent on 8 turns (seed 4; a checklist that fails single-item turns),
    # hashed on the commit before v1 (3ca1491): v0's LLM episodes are reproducible against a model too
    def checklist(m):
        return '{"1": "no"}' if "2." not in m[-1]["content"] else '{"1":"yes","2":"yes"}'

    user = CannedClient(scripted_user_model(checklist=checklist), role="user")
    texts = user_texts("ifgym/EvolIF-LLM-v0", 4, 8, user_llm=user, judge_llm=CannedClient(judge_model))
    assert digest([user.requests, texts]) == "a161d586e160a46f81d3965e6b86a7db3dd87dd5be2d39ebcb8d918f80e35c1b"


def test_v1_user_turns_are_shorter_than_v0s_on_the_same_script():
    v1 = user_texts("ifgym/EvolIF-v1", 3, 12)
    v0 = user_texts("ifgym/EvolIF-v1", 3, 12, restate="all")
    assert v1[0] == v0[0] or len(v1[0]) <= len(v0[0])
    assert sum(map(len, v1[1:])) < 0.7 * sum(map(len, v0[1:]))


# ---------------------------------------------------------------------------------------------
# protocol and deviations


# What no setting removes: the models, the banks and the prompts in ifgym's own words.
INHERENT = [
    "queries written by user-m, a served model, not by EvolIF's user models",
    "up to 4 checked drafts per turn (env.regenerations=3), then ifgym's template text",
    "topics and user styles are ifgym's own banks",
    "judge judge-m: not EvolIF's judge model",
    "judge answers that cannot be read leave their items unknown",
    "the task system prompt is in ifgym's own words",
    "the tracker's probabilities are ifgym's",
]


def test_protocol_at_evolifs_settings_lists_only_what_no_setting_removes():
    judge = CannedClient(judge_model, model="judge-m")
    user = CannedClient(scripted_user_model(), model="user-m", role="user")
    env = gym.make(
        "ifgym/EvolIF-v1",
        renderer="llm",
        user_llm=user,
        judge="llm",
        judge_llm=judge,
        checker_semantics="evolif",
        judge_mode="rating",
        system_prompt="task",
        min_mean_constraints=2,
        metrics="paper",
    ).unwrapped
    p = env.protocol()
    assert len(p["deviations"]) == len(INHERENT), p["deviations"]
    assert all(d.startswith(i) for d, i in zip(sorted(p["deviations"]), sorted(INHERENT), strict=True))
    assert p["paper"] == "EvolIF" and set(p["groups"]) == set(GROUPS)
    assert (p["restate"], p["patience"], p["max_turns"], p["judge_model"]) == ("change", 3, 100, "judge-m")


@pytest.mark.filterwarnings(OLD_IDS)
@pytest.mark.parametrize(
    ("env_id", "kwargs", "fragments"),
    [
        ("ifgym/EvolIF-v1", {}, ["9 of 12 constraint groups", "judge=rules"]),  # rules judge: no judged groups
        ("ifgym/EvolIF-v1", {}, ["checker_semantics=ifgym", "stricter"]),  # not EvolIF's evaluator
        ("ifgym/EvolIF-v1", {"max_turns": 5}, ["max_turns=5: a quick demo, not EvolIF's protocol"]),
        ("ifgym/EvolIF-v1", {"patience": None}, ["patience off"]),
        ("ifgym/EvolIF-v1", {"restate": "all"}, ["restate=all", "easier"]),
        ("ifgym/EvolIF-v1", {"tracker": {"p_switch": 0.5}}, ["p_switch=0.5"]),
        ("ifgym/EvolIF-v0", {}, ["restate=all", "max_turns=20"]),
        ("ifgym/EvolIF-v1", {"renderer": "llm", "adaptive": True}, ["adaptive user"]),
        ("ifgym/EvolIF-v1", {"renderer": "llm", "user_checks": "model"}, ["user_checks=model"]),
        ("ifgym/EvolIF-v1", {"judge": "llm"}, ["judge_mode=blind", "not rated 1-10"]),  # ifgym's default judging
        ("ifgym/EvolIF-v1", {}, ["no system prompt: EvolIF's 'w/o system prompt' row"]),
        ("ifgym/EvolIF-v1", {"system_prompt": "Be brief."}, ["a system prompt of your own"]),
        ("ifgym/EvolIF-v1", {}, ["trivial dialogues kept", "env.min_mean_constraints=2"]),
        ("ifgym/EvolIF-v1", {"min_mean_constraints": 3}, ["min_mean_constraints=3"]),
        ("ifgym/EvolIF-v1", {}, ["queries worded by ifgym's templates", "GPT-4.1, Gemini-2.5-Flash and DeepSeek-V3.1"]),
        ("ifgym/EvolIF-v1", {"renderer": "llm", "regenerations": 1}, ["up to 2 checked drafts", "k = 3"]),
    ],
)
def test_protocol_names_each_deviation(env_id, kwargs, fragments):
    if kwargs.get("renderer") == "llm":
        kwargs["user_llm"] = CannedClient(scripted_user_model())
    if kwargs.get("judge") == "llm":
        kwargs["judge_llm"] = CannedClient(judge_model)
    text = " | ".join(gym.make(env_id, **kwargs).unwrapped.protocol()["deviations"])
    assert all(f in text for f in fragments), text


def test_every_episode_records_its_protocol():
    env = gym.make("ifgym/EvolIF-v1", restate="all", max_turns=2)
    env.reset(seed=0)
    env.step("a")
    meta = env.unwrapped.episode.meta["evolif"]
    assert meta["restate"] == "all" and meta["max_turns"] == 2 and meta["renderer"] == "template"
    assert meta["adaptive"] is None  # the template user never sees replies: not applicable


def test_judged_groups_without_an_llm_judge_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"EvolIF's protocol samples all 12 groups.*judge=llm"):
        gym.make("ifgym/EvolIF-v1", tracker={"groups": list(GROUPS)})
    # groups=None means all twelve: it must not slip past the check either
    with pytest.raises(ConfigError, match="need an LLM judge"):
        gym.make("ifgym/EvolIF-v1", tracker={"groups": ["length", "emotion"]})
    assert set(gym.make("ifgym/EvolIF-v1", tracker={"groups": None}).unwrapped.groups) <= set(GROUPS[:9])


# ---------------------------------------------------------------------------------------------
# the command line

NOT_IN_YAML = {"judge", "judge_mode", "judge_llm", "user_llm", "render_mode", "env_name"}
# what each option sets on purpose (its renderer or its groups); everything else is gym.make's default
YAML_DIFFERS = {
    "evolif": {},
    "evolif_llm": {"renderer": "llm"},
    "evolif_paper": {
        "tracker": {"groups": list(GROUPS)},
        "checker_semantics": "evolif",
        "renderer": "llm",
        "system_prompt": "task",
        "min_mean_constraints": 2,
        "metrics": "paper",
    },
    "evolif_v0": {"restate": "all", "adaptive": True, "user_checks": "model", "max_turns": 20},
}


@pytest.mark.parametrize("option", sorted(YAML_DIFFERS))
def test_cli_options_and_gym_make_defaults_agree(option):
    from omegaconf import OmegaConf

    env = OmegaConf.to_container(compose([f"env={option}"]).env)
    params = {n: p.default for n, p in inspect.signature(EvolIFEnv.__init__).parameters.items() if n != "self"}
    expected = {k: YAML_DIFFERS[option].get(k, v) for k, v in params.items() if k not in NOT_IN_YAML}
    expected.update(reward_weights=expected["reward_weights"] or {}, tracker=expected["tracker"] or {})
    assert {k: env[k] for k in expected} == expected
    judge_mode = {"judge_mode"} if option == "evolif_paper" else set()  # the paper's rating judge, unless judge.mode
    assert set(env) - {"id", "user_llm"} == set(expected) | judge_mode  # nothing missing, nothing unknown
    assert env.get("judge_mode", "rating") == "rating"


def test_paper_config_without_an_llm_judge_says_what_to_add(capsys):
    assert main(["eval", "env=evolif_paper", "policy=scripted", "episodes=1", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert "all 12 groups" in err and "judge=llm judge.llm.base_url=" in err


def test_paper_config_with_a_judge_is_evolifs_protocol(tmp_path, capsys, monkeypatch):
    out = tmp_path / "episodes.jsonl"
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    # the judge's audit before the episodes gets the gold set's answers; the episodes' replies score 8
    with CannedServer(gold_or(judge_model)) as judge, CannedServer(echo_user_model) as user:
        code = main(
            [
                "eval",
                "env=evolif_paper",
                f"env.user_llm.base_url={user.base_url}",
                "env.user_llm.model=canned-model",
                "judge=llm",
                f"judge.llm.base_url={judge.base_url}",
                "judge.llm.model=canned-model",
                "policy=scripted",
                "episodes=2",
                f"output={out}",
                "progress=false",
                "plots=false",
            ]
        )
    assert code == 0
    table = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    protocol = summary["protocol"]
    assert protocol["max_turns"] == 100 and protocol["judge_mode"] == "rating"
    # only what no setting removes is listed: no setting of the run differs from EvolIF's
    served = [
        i.replace("user-m", "canned-model (served)").replace("judge-m", "canned-model (served)") for i in INHERENT
    ]
    assert len(protocol["deviations"]) == len(INHERENT)
    assert all(d.startswith(i) for d, i in zip(sorted(protocol["deviations"]), sorted(served), strict=True))
    assert table.splitlines()[1] == "not EvolIF's protocol:" and "queries written by canned-model" in table


def make_eval_demo() -> list[str]:
    """The overrides `make eval` adds (the Makefile's DEMO), read from the Makefile itself."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    return re.search(r"^DEMO \?= (.*)$", makefile, re.MULTILINE).group(1).split()


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (make_eval_demo(), "max_turns=5: a quick demo, not EvolIF's protocol"),  # what `make eval` runs
        (["env.max_turns=3", "env.restate=all"], "restate=all: every turn restates all live rules"),
    ],
)
def test_results_table_names_the_protocol(tmp_path, capsys, overrides, line):
    args = ["eval", "policy=scripted", "episodes=1", f"output={tmp_path / 'e.jsonl'}", "progress=false", "plots=false"]
    assert main(args + overrides) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].startswith("protocol: ifgym/EvolIF-v1") and line in table
    summary = json.loads((tmp_path / "summary.json").read_text())
    restate = "all" if "env.restate=all" in overrides else "change"
    assert summary["protocol"]["restate"] == restate
    episode = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert episode["meta"]["evolif"]["restate"] == restate


# ---------------------------------------------------------------------------------------------
# the LLM user over HTTP: the same seed gives the same user turns whatever the replies


def echo_user_model(body):
    """The user model behind the server: drafts that state what the prompt asks; every topic check passes."""
    return scripted_user_model(generate=stating_draft)(body["messages"])


def play_llm_user(server, replies, seed, adaptive=False):
    user_llm = {"base_url": server.base_url, "model": server.model, "temperature": 0.0}
    env = gym.make("ifgym/EvolIF-v1", renderer="llm", user_llm=user_llm, adaptive=adaptive, patience=None, max_turns=9)
    obs, _ = env.reset(seed=seed)
    turns = [obs[-1]["content"]]
    for reply in replies:
        obs, _, _, truncated, _ = env.step(reply)
        if truncated:
            break
        turns.append(obs[-1]["content"])
    return turns, env.unwrapped.user.stats


@pytest.mark.parametrize("seed", [0, 5])
def test_llm_user_turns_do_not_depend_on_the_replies(seed):
    good = ["A short reply about it."] * 8
    odd = [f"ZZ{i} something else entirely, {'x' * (40 * i)}" for i in range(8)]
    with CannedServer(echo_user_model) as server:
        first, stats = play_llm_user(server, good, seed)
        second, _ = play_llm_user(server, odd, seed)
        sent = json.dumps(server.requests)
    assert first == second and len(first) == 9
    assert "ZZ" not in sent and "A short reply" not in sent  # the user model never saw a reply
    assert stats["renders"] == 9 and stats["llm_fallbacks"] == 0  # the drafts are the model's, not templates


def test_adaptive_llm_user_does_see_the_replies():
    with CannedServer(echo_user_model) as server:
        play_llm_user(server, [f"ZZ{i} reply" for i in range(8)], 0, adaptive=True)
        sent = json.dumps(server.requests)
    assert "ZZ3 reply" in sent


def test_llm_user_fallbacks_are_counted_in_the_summary(tmp_path, capsys):
    # a user model that never states the values: every turn falls back to the template, and says so
    with CannedServer(lambda body: "Sure, whatever you like.") as server:
        code = main(
            [
                "eval",
                "env=evolif_llm",
                f"env.user_llm.base_url={server.base_url}",
                "env.user_llm.model=canned-model",
                "env.max_turns=3",
                "env.regenerations=1",
                "policy=scripted",
                "episodes=1",
                f"output={tmp_path / 'e.jsonl'}",
                "progress=false",
                "plots=false",
            ]
        )
    assert code == 0
    out = capsys.readouterr().out
    stats = json.loads((tmp_path / "summary.json").read_text())["user_stats"]
    turns = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])["turns"]
    for t in turns:  # a removal asks for no key values, so even this draft passes there
        assert t["spec"]["meta"]["fallback"] is (t["spec"]["change"] != "remove")
    assert stats["renders"] == 3 and stats["llm_fallbacks"] == sum(t["spec"]["meta"]["fallback"] for t in turns) >= 1
    assert f"llm_fallbacks {stats['llm_fallbacks']}" in out
