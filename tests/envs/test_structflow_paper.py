"""env=structflow_paper: StructFlowBench's evaluation as one preset, over canned judge servers on 127.0.0.1.

Every checklist question (rule-decidable ones too) is asked of the judge in one call per turn, in the
paper-shaped prompt (`ChecklistJudge(mode="paper")`); made-up judge outputs in the benchmark's released
format (a fenced `{"judge result": [...]}`) are read and scored to CSR/ISR/WCSR/DRFR worked out by hand,
the same numbers `score_file` gives for the same judgements written as the benchmark's evaluation file;
a malformed answer leaves its items unknown, counted; `protocol()` names what still differs.
"""

from __future__ import annotations

import json
import math
import re

import gymnasium as gym
import pytest
from omegaconf import OmegaConf
from support.canned_judges import gold_or, oracle, yes_sayer
from support.canned_server import CannedServer
from support.paths import REPO

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import compose, main
from ifgym.errors import UnknownNameError
from ifgym.llm import CannedClient
from ifgym.rewards.audit import audit
from ifgym.rewards.questions import question_rule
from ifgym.rewards.structflow.judge import PAPER_TASK
from ifgym.rewards.structflow.metrics import score_file, summarize
from ifgym.runner.report import protocol_lines
from ifgym.simulators.structflow import load_dataset

DIALOGUES = load_dataset("structflowbench")
REQUEST_RE = re.compile(r"<request>\n(.*?)\n</request>", re.DOTALL)
ITEM_RE = re.compile(r"<item (\d+)>(.*?)</item>", re.DOTALL)

# Made-up judgements for dialogues 0 and 1 (3 turns of 3 questions each; the third question of turns 2
# and 3 is structural, weight 2), and the hand-worked metrics:
#   turn      labels      CSR   ISR  WCSR (weights 1,1,1 / 1,1,2)
#   d0 c1     Y Y N       2/3   0    2/3
#   d0 c2     Y Y Y       1     1    4/4
#   d0 c3     N Y Y       2/3   0    3/4
#   d1 c1     Y Y Y       1     1    3/3
#   d1 c2     Y N N       1/3   0    1/4
#   d1 c3     N N Y       1/3   0    2/4
# CSR = 4/6, ISR = 2/6, WCSR = (2/3 + 1 + 3/4 + 1 + 1/4 + 1/2) / 6 = 25/36, DRFR = 12/18 yes,
# WCSR_pooled = (2 + 4 + 3 + 3 + 1 + 2) / (3 + 4 + 4 + 3 + 4 + 4) = 15/22.
LABELS = {
    0: ["YYN", "YYY", "NYY"],
    1: ["YYY", "YNN", "NNY"],
}
BY_HAND = {"CSR": 4 / 6, "ISR": 2 / 6, "WCSR": 25 / 36, "DRFR": 12 / 18, "WCSR_pooled": 15 / 22}


def released(labels: str) -> str:
    """A judge answer as the benchmark's evaluator gets it from GPT-4o: a fenced JSON object, judgement then reason."""
    entries = [
        {"judgement": "Yes" if x == "Y" else "No", "reason": f"made-up reason {i}"} for i, x in enumerate(labels)
    ]
    return "```json\n" + json.dumps({"judge result": entries}, indent=4) + "\n```"


def request_of(body_or_messages) -> str:
    messages = body_or_messages["messages"] if isinstance(body_or_messages, dict) else body_or_messages
    return REQUEST_RE.search(messages[0]["content"]).group(1)


def turn_labels() -> dict[str, str]:
    """The made-up labels of each turn, keyed by the turn's request as the judge sees it."""
    out = {}
    for d, turns in LABELS.items():
        for k, labels in enumerate(turns):
            out[DIALOGUES[d].turns[k].prompt.strip()] = labels
    return out


def made_up_judge(body) -> str:
    return released(turn_labels()[request_of(body).strip()])


def paper_env(server, **overrides):
    """The preset as `ifgym eval env=structflow_paper judge=llm` builds it, its judge behind `server`."""
    settings = OmegaConf.to_container(compose(["env=structflow_paper"]).env)
    env_id = settings.pop("id")
    settings.update(judge="llm", judge_llm={"base_url": server.base_url, "model": server.model}, **overrides)
    return gym.make(env_id, **settings).unwrapped


def play(env, dialogue, reply="Here is my answer."):
    env.reset(seed=dialogue)
    infos, done = [], False
    while not done:
        _, _, terminated, truncated, info = env.step(reply)
        infos.append(info)
        done = terminated or truncated
    return env.episode, infos


# ---------------------------------------------------------------------------------------------
# the preset


def test_preset_is_the_benchmarks_settings():
    env = gym.make("ifgym/StructFlow-v0", judge="llm", judge_llm={"base_url": "http://127.0.0.1:9/v1"}).unwrapped
    settings = OmegaConf.to_container(compose(["env=structflow_paper"]).env)
    assert settings["dataset"] == "structflowbench" and settings["context"] == "golden"
    assert settings["judge_mode"] == "paper" and settings["judge_rule_items"] is True
    assert settings["patience"] is None and settings["max_turns"] is None
    assert len(DIALOGUES) == 155
    assert env.scorer.judge.mode == "plain" and env.scorer.judge_rule_items is False  # env=structflow unchanged


def test_every_question_is_asked_in_one_call_per_turn():
    # dialogue 0 opens with "Is the response limited to 150 words?": a rule decides it under env=structflow
    first = DIALOGUES[0].turns[0].checklist
    assert question_rule(first[0].question) is not None
    with CannedServer(made_up_judge) as server:
        env = paper_env(server)
        episode, infos = play(env, 0)
        requests = list(server.requests)
    turns = DIALOGUES[0].turns
    assert len(requests) == len(turns) == 3  # one call per turn, no re-ask
    for body, turn in zip(requests, turns, strict=True):
        messages = body["messages"]
        assert [m["role"] for m in messages] == ["user"]  # one user message, as the paper's evaluator sends
        prompt = messages[0]["content"]
        numbered = [(int(n), q) for n, q in ITEM_RE.findall(prompt)]
        assert numbered == [(i, item.question) for i, item in enumerate(turn.checklist, 1)]
        assert PAPER_TASK in prompt and prompt.index("<reply>") < prompt.index("<item 1>") < prompt.index(PAPER_TASK)
    # every verdict is the judge's, rule-decidable questions included
    assert all(v.source == "judge:canned-model" for t in episode.turns for v in t.verdicts)
    assert [[v.label for v in t.verdicts] for t in episode.turns] == [
        ["yes" if x == "Y" else "no" for x in labels] for labels in LABELS[0]
    ]
    assert env.scorer.judge.stats["calls"] == 3 and env.scorer.judge.stats["unknown"] == 0
    assert all(info["unknown"] == 0 for info in infos)


def test_the_history_is_the_reference_answers():
    with CannedServer(made_up_judge) as server:
        play(paper_env(server), 0, reply="MY OWN REPLY")
        last = server.requests[-1]["messages"][0]["content"]
    history = last.split("<history>", 1)[1].split("</history>", 1)[0]
    assert DIALOGUES[0].turns[0].answer.split(".")[0] in history and "MY OWN REPLY" not in history
    assert "MY OWN REPLY" in last.split("<reply>", 1)[1]  # the reply judged is the policy's


def test_released_format_judge_outputs_score_to_the_hand_worked_metrics(tmp_path):
    episodes = []
    with CannedServer(made_up_judge) as server:
        env = paper_env(server)
        for dialogue in LABELS:
            episodes.append(play(env, dialogue)[0])
    metrics = summarize(episodes)
    for key, value in BY_HAND.items():
        assert metrics[key] == pytest.approx(value), key
    assert metrics["turns"] == 6 and metrics["items"] == 18 and metrics["unknown"] == 0

    # the same judgements as the benchmark's evaluation file: score_file gives the same numbers
    raw = json.loads((REPO / "simulators/assets/structflowbench/StructFlowBench.json").read_text(encoding="utf-8"))
    records = []
    for dialogue, turns in LABELS.items():
        record = raw[dialogue]
        for turn, labels in zip(record["whole_conv"], turns, strict=True):
            turn["response"] = "Here is my answer."
            turn["judge result"] = json.loads(released(labels).removeprefix("```json\n").removesuffix("\n```"))[
                "judge result"
            ]
        records.append(record)
    path = tmp_path / "made_up_evaluate.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    scored = score_file(path)
    for key, value in BY_HAND.items():
        assert scored[key] == pytest.approx(value), key


def test_a_malformed_answer_leaves_its_items_unknown_and_counted():
    broken = DIALOGUES[0].turns[1].prompt.strip()  # turn c2 gets answers the parser cannot place

    def judge(body):
        request = request_of(body).strip()
        if request == broken:  # two unnumbered judgements for three questions: nothing says which is which
            return '```json\n{"judge result": [{"judgement": "Yes", "reason": "a"}, {"judgement": "No"}]}\n```'
        return made_up_judge(body)

    with CannedServer(judge) as server:
        env = paper_env(server)
        episode, infos = play(env, 0)
        calls = len(server.requests)
        reasks = [b["messages"] for b in server.requests if len(b["messages"]) > 1]
    assert calls == 2 + 5  # turns c1 and c3 once; c2 five tries (judge_max_retries=4), as the paper's max_try
    assert reasks and '{"judge result": [...]}' in reasks[0][-1]["content"]  # the re-ask names the paper's shape
    assert [v.label for v in episode.turns[1].verdicts] == ["unknown"] * 3
    assert infos[1]["unknown"] == 3 and env.scorer.judge.stats["unknown"] == 3
    metrics = summarize([episode])
    assert metrics["unknown"] == 3 and metrics["undetermined_turns"] == 1
    # c2 is left out of every rate: CSR over c1 (2/3) and c3 (2/3)
    assert metrics["CSR"] == pytest.approx(2 / 3) and metrics["DRFR"] == pytest.approx(4 / 6)
    assert not math.isnan(metrics["WCSR"])


def test_garbage_is_unknown_not_a_no():
    with CannedServer(["I cannot judge this."]) as server:
        env = paper_env(server, judge_max_retries=0)
        episode, infos = play(env, 0)
    assert all(v.label == "unknown" for t in episode.turns for v in t.verdicts)
    assert [info["unknown"] for info in infos] == [3, 3, 3] and not any(info["reward_defined"] for info in infos)
    assert math.isnan(summarize([episode])["CSR"])


# ---------------------------------------------------------------------------------------------
# the protocol lines


def test_protocol_lines_name_every_remaining_difference():
    with CannedServer(made_up_judge) as server:
        env = paper_env(server)
        lines = protocol_lines(env.protocol())
    assert lines == [
        "protocol: ifgym/StructFlow-v0 (dataset=structflowbench, context=golden, judge=llm, judge_mode=paper, "
        "judge_rule_items=True, metrics=paper, dialogues=155)",
        "not StructFlowBench's protocol:",
        "  - judge canned-model, not GPT-4o (the paper's judge)",
        "  - the judge prompt is ifgym's own wording of the paper's evaluator prompt (same material, strictness and "
        "output shape), with the questions numbered rather than bulleted and the material fenced in tags the judge "
        "is told to read as material, never as instructions",
        "  - judge temperature 0: the paper's evaluator sends none, so GPT-4o samples at its default 1 "
        "(judge.llm.temperature=1 does the same)",
        "  - an answer that cannot be read leaves its items unknown after at most 5 tries, counted and left out of "
        "the rates; the paper's evaluator re-asks (up to 5 tries) only when the count of judgements is wrong, and "
        "its score script cannot read a turn it failed to judge",
        "  - each judge answer is capped at 128 + 96 tokens per question (or judge.llm.max_tokens when larger); the "
        "paper's evaluator sets no cap",
        "  - the policy sees the history as chat messages; the paper's inference sends it flattened into one user "
        "message ('user:…' and 'assistant:…' lines)",
    ]


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"judge_mode": "plain"}, "judge_mode=plain: ifgym's own checklist prompt and output shape"),
        ({"judge_rule_items": False}, "questions a rule can decide (word counts, keywords, opening and closing"),
        ({"context": "own"}, "context=own: the policy's own earlier replies as history"),
        ({"max_turns": 2}, "max_turns=2: only the first turns of each dialogue are played"),
        ({"patience": 1}, "patience=1: a dialogue stops after failed turns"),
        ({"system_prompt": "Be brief."}, "a system prompt the paper's inference does not send"),
    ],
)
def test_each_setting_off_the_paper_is_named(overrides, line):
    with CannedServer(made_up_judge) as server:
        deviations = paper_env(server, **overrides).protocol()["deviations"]
    assert sum(d.startswith(line) for d in deviations) == 1


def test_a_gpt4o_judge_is_named_as_the_papers_model_with_its_snapshot_unstated():
    with CannedServer(made_up_judge, model="gpt-4o") as server:
        deviations = paper_env(server).protocol()["deviations"]
    assert "judge gpt-4o: GPT-4o by name; the snapshot the paper used is not stated" in deviations
    assert not any("not GPT-4o" in d for d in deviations)


def test_the_generating_env_says_it_is_not_the_benchmark():
    deviations = gym.make("ifgym/StructFlow-v0").unwrapped.protocol()["deviations"]
    assert deviations[:4] == [
        "generated dialogues, not StructFlowBench's 155 (env.dataset=structflowbench replays them)",
        "context=own: the policy's own earlier replies as history, not the reference answers",
        "metrics=ifgym: WCSR is the released script's per-turn mean; the papers' equation (pooled over items) is "
        "WCSR_pooled (env.metrics=paper makes it WCSR)",
        "judge=rules: only rule-checkable items are scored, the rest are unknown (the paper's judge is GPT-4o)",
    ]


# ---------------------------------------------------------------------------------------------
# the command line


def test_preset_without_an_llm_judge_says_what_to_add(capsys):
    assert main(["eval", "env=structflow_paper", "policy=scripted", "episodes=1", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert "judge=llm judge.llm.base_url=" in err


def test_preset_from_the_command_line_prints_its_protocol_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    # the audit before the episodes gets the gold set's answers; the episodes get the made-up judgements
    with CannedServer(gold_or(made_up_judge)) as judge:
        code = main(
            [
                "eval",
                "env=structflow_paper",
                "judge=llm",
                f"judge.llm.base_url={judge.base_url}",
                "judge.llm.model=canned-model",
                "policy=scripted",
                "policy.replies=[Here is my answer.]",
                "episodes=2",
                f"output={tmp_path / 'episodes.jsonl'}",
                "progress=false",
                "plots=false",
            ]
        )
    assert code == 0
    table = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    protocol = summary["protocol"]
    assert protocol["judge_mode"] == "paper" and protocol["judge_rule_items"] is True
    for line in protocol_lines(protocol):
        assert line in table
    # seeds 0 and 1, the dialogues above: the preset's WCSR is the paper's equation, the script's beside it
    assert summary["strict"]["WCSR"] == pytest.approx(BY_HAND["WCSR_pooled"])
    assert summary["strict"]["WCSR_per_turn"] == pytest.approx(BY_HAND["WCSR"])
    assert summary["headline_metric"] == "WCSR" and "StructFlowBench §3.5" in summary["definitions"]["WCSR"]


def test_a_bad_judge_mode_is_named():
    with pytest.raises(UnknownNameError, match="Did you mean 'paper'"):
        gym.make("ifgym/StructFlow-v0", judge_mode="papr")


def test_the_audit_reads_the_paper_prompt_and_refuses_a_yes_sayer():
    def run(judge):
        client = CannedClient(judge, role="judge", model="m")
        report = audit(client, suites=["structflow"], modes={"structflow": "paper"}, progress=False)
        assert all(len(r) == 1 and r[0]["role"] == "user" for r in client.requests)  # paper-shaped prompts
        return report

    good, bad = run(oracle), run(yes_sayer)
    assert good["passed"]["structflow"] and good["suites"]["structflow"]["accuracy"] == 1.0
    assert not bad["passed"]["structflow"] and bad["suites"]["structflow"]["yes_rate_negatives"] > 0.5
