"""The checklist judge's probability mode: verdicts from a served model's log-probabilities of Yes and No.

A canned OpenAI-compatible server answers with known log-probabilities (or with none, as a server
that does not support them), so every P(yes) and verdict below is worked out by hand.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from support.canned_judges import REAL as REAL_VERDICTS
from support.canned_judges import REPLY_RE
from support.canned_server import CannedServer

from ifgym.cli import main
from ifgym.core import ChecklistItem
from ifgym.errors import ConfigError
from ifgym.llm import Completion, make_client
from ifgym.llm.cache import CallCache
from ifgym.rewards.audit import audit, calibrate_on_real, calibrate_threshold
from ifgym.rewards.structflow.judge import ChecklistJudge

ITEMS = [
    ChecklistItem("q1", "Does the response say the sky is blue?", "Content Constraint"),
    ChecklistItem("q2", "Does the response mention the moon?", "Content Constraint"),
]
HISTORY = [{"role": "user", "content": "What colour is the sky?"}]
REPLY = "The sky is blue."
LN = math.log


def alternatives(body):
    """P(Yes)+P( yes) = 0.75 vs P(No) = 0.2 for the sky; P(Yes) = 0.05 vs P(No) = 0.9 for the moon."""
    question = body["messages"][-1]["content"].rsplit("<item>", 1)[1]
    if "blue" in question:
        return [("Yes", LN(0.7)), ("No", LN(0.2)), (" yes", LN(0.05)), ("The", LN(0.03))]
    return [("No", LN(0.9)), ("Yes", LN(0.05)), ("I", LN(0.02))]


def served_judge(server, **kwargs):
    return ChecklistJudge(make_client({"base_url": server.base_url, "model": server.model}, "judge"), **kwargs)


def test_verdicts_from_the_log_probabilities_of_yes_and_no():
    with CannedServer(["No"], logprobs=alternatives) as server:
        judge = served_judge(server, mode="probability")
        verdicts = judge.judge(REPLY, ITEMS, HISTORY)
        stricter = served_judge(server, mode="probability", threshold=0.8).judge(REPLY, ITEMS, HISTORY)
    # the sky: 0.75 / 0.95 = 0.789 >= 0.5 (the answer's text, "No", is not what decides); the moon: 0.05 / 0.95
    assert [v.label for v in verdicts] == ["yes", "no"]
    assert verdicts[0].reason == "P(yes) 0.789, threshold 0.5" and verdicts[1].reason == "P(yes) 0.053, threshold 0.5"
    assert [v.label for v in stricter] == ["no", "no"]  # 0.789 < 0.8
    # one call per item, a one-token answer, the first token's 20 likeliest alternatives asked for
    first = server.requests[0]
    assert len(server.requests) == 4 and first["max_tokens"] == 1
    assert first["logprobs"] is True and first["top_logprobs"] == 20
    # the question comes last, so the items of a turn share the prompt's prefix
    prompts = [r["messages"][-1]["content"] for r in server.requests[:2]]
    prefix = prompts[0].rsplit("Question:", 1)[0]
    assert prompts[1].startswith(prefix) and prompts[0].endswith("Answer Yes or No.")
    assert "<request>\nWhat colour is the sky?\n</request>" in prefix
    assert judge.stats["calls"] == 2 and judge.stats["no_logprobs"] == 0


def test_a_server_without_log_probabilities_falls_back_to_the_answer_text_and_counts_it():
    with CannedServer(["Yes", "Maybe"]) as server:  # no logprobs function: answers as a server without them
        judge = served_judge(server, mode="probability")
        verdicts = judge.judge(REPLY, ITEMS, HISTORY)
    assert [v.label for v in verdicts] == ["yes", "unknown"]
    assert verdicts[0].reason == "no log-probabilities from the server: read from the answer's text"
    assert "'Maybe' is not Yes or No" in verdicts[1].reason
    assert judge.stats["no_logprobs"] == 2 and judge.stats["unknown"] == 1


def test_alternatives_without_yes_or_no_fall_back_too():
    with CannedServer(["No"], logprobs=lambda body: [("The", -0.1), ("I", -2.0)]) as server:
        judge = served_judge(server, mode="probability")
        verdict = judge.judge(REPLY, ITEMS[:1], HISTORY)[0]
    assert verdict.label == "no" and verdict.reason.startswith("no Yes or No among the likeliest answer tokens")
    assert judge.stats["no_logprobs"] == 1


def test_the_async_judge_gives_the_same_verdicts():
    with CannedServer(["No"], logprobs=alternatives) as server:
        verdicts = asyncio.run(served_judge(server, mode="probability").ajudge(REPLY, ITEMS, HISTORY))
    assert [(v.label, v.reason) for v in verdicts] == [
        ("yes", "P(yes) 0.789, threshold 0.5"),
        ("no", "P(yes) 0.053, threshold 0.5"),
    ]


def test_the_threshold_is_part_of_the_prompt_version_and_checked():
    client = make_client({"base_url": "http://127.0.0.1:9/v1", "model": "m"}, "judge")
    half, strict = ChecklistJudge(client, mode="probability"), ChecklistJudge(client, mode="probability", threshold=0.7)
    assert half.prompt_version != strict.prompt_version  # the audit cache never mixes thresholds
    for bad in (0, 1, 1.5, "0.5", True):
        with pytest.raises(ConfigError, match="threshold must be a number between 0 and 1"):
            ChecklistJudge(client, mode="probability", threshold=bad)


def test_top_logprobs_is_a_checked_per_call_setting():
    with CannedServer(["Yes"], logprobs=alternatives) as server:
        client = make_client({"base_url": server.base_url, "model": server.model}, "judge")
        for bad in (0, 21, 2.5):
            with pytest.raises(ConfigError, match="top_logprobs must be None or an integer from 1 to 20"):
                client.chat([{"role": "user", "content": "<item>blue</item>"}], top_logprobs=bad)
        answer = client.chat([{"role": "user", "content": "<item>blue</item>"}], top_logprobs=2)
        plain = client.chat([{"role": "user", "content": "<item>blue</item>"}])
    assert answer.top_logprobs == ((("Yes", LN(0.7)), ("No", LN(0.2))),)  # at most the 2 asked for
    assert plain.top_logprobs is None and "logprobs" not in server.requests[-1]


def test_the_call_cache_keeps_the_log_probabilities(tmp_path):
    cache = CallCache(tmp_path)
    stored = Completion("Yes", 3, 1, "m", "length", top_logprobs=((("Yes", -0.1), ("No", -2.5)),))
    cache.put("k", stored)
    assert cache.get("k").top_logprobs == stored.top_logprobs


def test_the_threshold_calibrated_on_known_probabilities():
    chosen = calibrate_threshold([0.9, 0.8, 0.6, 0.4, 0.3, None], ["yes", "yes", "no", "no", "no", "yes"])
    # 0.7 (between 0.6 and 0.8) separates them exactly; the item without a probability is left out
    assert chosen == {"threshold": 0.7, "kappa": 1.0, "accuracy": 1.0, "yes_rate_negatives": 0.0, "items": 5}
    with pytest.raises(ValueError, match="no item has a probability"):
        calibrate_threshold([None], ["yes"])


def test_the_audit_records_probability_mode_and_its_threshold():
    with CannedServer(["Yes"], logprobs=lambda body: [("Yes", LN(0.6)), ("No", LN(0.4))]) as server:
        client = make_client({"base_url": server.base_url, "model": server.model}, "judge")
        report = audit(client, suites=["structflow_real"], modes={"structflow_real": "probability"}, short=True)
    real = report["suites"]["structflow_real"]
    assert real["mode"] == "probability" and real["threshold"] == 0.5
    assert real["judge_stats"]["no_logprobs"] == 0
    # every judged item is a call of its own; the rule-decided ones make none
    assert real["calls"] == real["items"] - real["rule_items"]
    assert not report["passed"]["structflow_real"]  # P(yes) 0.6 everywhere: an always-yes judge


def reference_logprobs(body):
    """P(yes) 0.9 where StructFlowBench's GPT-4o said Yes to a real suite's item, 0.6 where it said No (leaning yes)."""
    content = body["messages"][-1]["content"]
    reply = REPLY_RE.search(content).group(1)
    question = content.rsplit("<item>", 1)[1].split("</item>", 1)[0]
    p = 0.9 if REAL_VERDICTS[reply][question] == "yes" else 0.6
    return [("Yes", LN(p)), ("No", LN(1 - p))]


def test_calibration_on_the_dev_split_finds_the_threshold_between_the_two_probabilities():
    with CannedServer(["No"], logprobs=reference_logprobs) as server:
        client = make_client({"base_url": server.base_url, "model": server.model}, "judge")
        fitted = calibrate_on_real(client, split="dev")
        asked = len(server.requests)
    # 0.75 = (0.6 + 0.9) / 2 separates the reference's yes and no exactly (0.5 says yes to all); one call per
    # item no rule decides
    assert (fitted["threshold"], fitted["kappa"], fitted["accuracy"]) == (0.75, 1.0, 1.0)
    assert fitted["split"] == "dev" and fitted["no_logprobs"] == 0 and fitted["items"] == asked > 100


def test_judge_audit_calibrates_on_dev_and_audits_test_with_that_threshold(tmp_path, capsys):
    out = tmp_path / "audit.json"
    with CannedServer(["No"], logprobs=reference_logprobs) as server:
        args = [f"judge.llm.base_url={server.base_url}", f"judge.llm.model={server.model}", "judge.mode=probability"]
        code = main(["judge-audit", *args, "suites=structflow_real", "calibrate=dev", f"out={out}"])
    assert code == 0
    assert "P(yes) threshold 0.75 calibrated on the real suite's dev split" in capsys.readouterr().err
    real = json.loads(out.read_text())["suites"]["structflow_real"]
    assert real["threshold"] == 0.75 and real["split"] == "short"
    # the 73 items the judge answered agree with the reference; the rules differ from it on 4 of their 15
    assert (real["items"], real["rule_items"], real["calls"]) == (88, 15, 73)
    assert round((1 - real["accuracy"]) * real["items"]) == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["eval", "env=structflow", "judge=llm", "judge.threshold=0.6"], "is read in probability mode only"),
        (["judge-audit", "suites=structflow_real", "calibrate=dev"], "pass judge.mode=probability calibrate=dev"),
        (
            ["judge-audit", "judge.mode=probability", "suites=structflow_real", "calibrate=dev", "split=dev"],
            "reports on what it fitted: use split=test",
        ),
    ],
)
def test_a_threshold_without_probability_mode_is_refused_with_the_fix(args, says, capsys):
    assert main(args) == 2
    assert says in capsys.readouterr().err
