"""`ifgym rescore RUN`: a recorded run's replies judged again, the policy never called; and the call cache in eval."""

from __future__ import annotations

import json

import pytest
from support.canned_judges import gold_or, yes_sayer
from support.canned_server import CannedServer

from ifgym.cli import main

# one bullet outside a code block and one inside: ifgym counts 1 bullet point, EvolIF's evaluator 2 (it reads
# every '-' line); the env asks only for bullet counts, so the two semantics part on every "exactly 2" turn
REPLY = "- one\n```\n- two\n```"
BASE = ["episodes=6", "env.max_turns=4", "+env.tracker.groups=[bullets]", "progress=false", "plots=false", "ci=false"]


def lines(folder):
    """The folder's episode records by seed (episodes are written as they finish, in any order)."""
    records = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    return sorted(records, key=lambda e: e["seed"])


def verdicts(folder):
    return {e["seed"]: [(t["verdicts"], t["loose_verdicts"], t["reward"]) for t in e["turns"]] for e in lines(folder)}


@pytest.fixture
def scripted_run(tmp_path):
    folder = tmp_path / "played"
    args = [
        "eval",
        "policy=scripted",
        f'policy.replies=["{REPLY}"]',
        "env.patience=2",
        *BASE,
        f"hydra.run.dir={folder}",
    ]
    assert main(args) == 0
    return folder


def labels(folder):
    return {seed: [[v["label"] for v in t[0]] for t in turns] for seed, turns in verdicts(folder).items()}


def test_the_same_judge_gives_the_recorded_verdicts(scripted_run, tmp_path):
    out = tmp_path / "same"
    assert main(["rescore", str(scripted_run), f"out={out}", "progress=false", "plots=false"]) == 0
    assert verdicts(out) == verdicts(scripted_run)
    played, rescored = (json.loads((f / "summary.json").read_text()) for f in (scripted_run, out))
    assert rescored["strict"] == played["strict"] and rescored["loose"] == played["loose"]
    assert all(e["meta"]["rescore"]["would_end"] is None for e in lines(out))
    assert [e["done_reason"] for e in lines(out)] == [e["done_reason"] for e in lines(scripted_run)]


def test_another_checker_semantics_gives_other_verdicts_and_the_record_names_both(scripted_run, tmp_path, capsys):
    out = tmp_path / "evolif"
    assert main(["rescore", str(scripted_run), f"out={out}", "checker_semantics=evolif", "progress=false"]) == 0
    before, after = labels(scripted_run), labels(out)
    assert before.keys() == after.keys()
    assert before[0] == [["no"], ["no"]] and after[0] == [["yes"], ["no"]]  # seed 0 asks for exactly 2 first
    sources = {v["source"] for turns in verdicts(out).values() for t in turns for v in t[0]}
    assert sources == {"rule:evolif"}
    # the transcript is the recorded one: same users' words, same replies, same number of turns
    for old, new in zip(lines(scripted_run), lines(out), strict=True):
        assert [(t["user"], t["reply"]) for t in old["turns"]] == [(t["user"], t["reply"]) for t in new["turns"]]
        assert new["meta"]["checker_semantics"] == "evolif"
    record = json.loads((out / "run.json").read_text())
    source = json.loads((scripted_run / "run.json").read_text())
    assert record["rescore"]["source"]["run_key"] == source["run_key"]
    assert record["rescore"]["source"]["folder"] == str(scripted_run)
    assert record["rescore"]["source_judge"] == {"kind": "rules", "mode": None, "checker_semantics": "ifgym"}
    assert record["rescore"]["judge"] == {"kind": "rules", "mode": None, "checker_semantics": "evolif"}
    assert record["config"]["env"]["checker_semantics"] == "evolif" and record["status"] == "finished"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checker_semantics"] == "evolif" and summary["rescore"]["source"]["run_key"] == source["run_key"]
    # seed 0's first turn now passes: patience (2) would not have run out at turn 1, where the dialogue ended
    assert lines(out)[0]["meta"]["rescore"]["would_end"] == {"turn": 1, "reason": "goes on", "recorded": "patience"}
    assert 0 in record["rescore"]["ending_would_differ"] and 0 in summary["rescore"]["ending_would_differ"]
    printed = capsys.readouterr()
    assert "the policy is not called" in printed.err and "would have ended the dialogue at another turn" in printed.out


@pytest.mark.filterwarnings("ignore:.*is out of date")  # evolif_v0 on purpose: its first-release user
@pytest.mark.parametrize("env", ["structflow", "flexbench", "composite", "evolif_v0"])
def test_every_env_rescored_by_its_own_judge_gives_its_record_back(env, tmp_path):
    played, out = tmp_path / "played", tmp_path / "rescored"
    args = ["eval", f"env={env}", "policy=scripted", "episodes=3", "env.max_turns=4", "progress=false", "plots=false"]
    assert main([*args, "ci=false", f"hydra.run.dir={played}"]) == 0
    assert main(["rescore", str(played), f"out={out}", "progress=false", "plots=false"]) == 0
    for old, new in zip(lines(played), lines(out), strict=True):
        assert new["turns"] == old["turns"] and new["done_reason"] == old["done_reason"]
        changed = {k for k in old["meta"].keys() | new["meta"].keys() if old["meta"].get(k) != new["meta"].get(k)}
        assert (
            changed <= {"rescore", "played_usage", "run_key", "usage"} and new["meta"]["rescore"]["would_end"] is None
        )
    played_summary, rescored = (json.loads((f / "summary.json").read_text()) for f in (played, out))
    assert rescored["strict"] == played_summary["strict"]


def test_rerunning_a_rescore_resumes_into_its_folder(scripted_run):
    args = ["rescore", str(scripted_run), "checker_semantics=evolif", "progress=false", "plots=false"]
    assert main(args) == 0
    (out,) = scripted_run.parent.glob("played-rescore-*")  # beside the source run, by default
    first = (out / "episodes.jsonl").read_text()
    assert main(args) == 0
    assert (out / "episodes.jsonl").read_text() == first  # nothing rescored twice


def test_verdicts_that_would_have_run_the_patience_out_earlier_are_said(tmp_path):
    played = tmp_path / "played"
    args = ["eval", "policy=scripted", f'policy.replies=["{REPLY}"]', "env.patience=1", "env.checker_semantics=evolif"]
    assert main([*args, *BASE, f"hydra.run.dir={played}"]) == 0
    assert len(lines(played)[0]["turns"]) == 2  # EvolIF's reading passes seed 0's first turn, fails its second
    out = tmp_path / "ifgym"
    assert main(["rescore", str(played), f"out={out}", "checker_semantics=ifgym", "progress=false", "plots=false"]) == 0
    (first, *_) = lines(out)
    assert len(first["turns"]) == 2 and first["done_reason"] == "patience"  # scored as played
    assert first["meta"]["rescore"]["would_end"] == {"turn": 0, "reason": "patience", "recorded": "patience"}


def test_an_llm_judge_rescores_a_served_policy_run_without_calling_the_policy(tmp_path, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "audit-cache"))
    played = tmp_path / "played"
    with CannedServer(replies=["A short answer."]) as policy:
        args = [
            "eval",
            "env=composite",
            "policy=openai",
            f"policy.llm.base_url={policy.base_url}",
            "policy.llm.model=canned-model",
            *BASE,
            f"hydra.run.dir={played}",
        ]
        assert main(args) == 0
        calls = len(policy.requests)
        assert calls > 0
        with CannedServer(replies=gold_or(yes_sayer)) as judge:
            out = tmp_path / "judged"
            rescore = [
                "rescore",
                str(played / "episodes.jsonl"),
                "judge=llm",
                f"judge.llm.base_url={judge.base_url}",
                "judge.llm.model=canned-model",
                f"cache={tmp_path / 'calls'}",
                "progress=false",
                "plots=false",
            ]
            assert main([*rescore, f"out={out}"]) == 0
            judged = len(judge.requests)
            # the same rescoring again, into another folder: every judge call answered from the cache
            assert main([*rescore, f"out={tmp_path / 'again'}"]) == 0
            assert len(judge.requests) == judged
        assert len(policy.requests) == calls  # the policy server was never asked again
    again = json.loads((tmp_path / "again" / "summary.json").read_text())["usage"]["judge"]
    assert again["calls"] == 0 and again["cache_hits"] > 0
    assert verdicts(tmp_path / "again") == verdicts(out)
    before, after = verdicts(played), verdicts(out)
    labels_before = {v["label"] for turns in before.values() for t in turns for v in t[0] if v["source"] != "rule"}
    labels_after = {v["label"] for turns in after.values() for t in turns for v in t[0] if v["source"] != "rule"}
    assert "unknown" in labels_before and labels_after == {"yes"}  # the structural items the rules left open
    summary = json.loads((out / "summary.json").read_text())
    assert summary["usage"]["judge"]["calls"] > 0 and judged >= summary["usage"]["judge"]["calls"]
    assert "policy" not in summary["usage"]
    record = json.loads((out / "run.json").read_text())
    assert record["rescore"]["source_judge"]["kind"] == "rules"
    assert record["rescore"]["judge"]["kind"] == "llm" and record["rescore"]["judge"]["model"] == "canned-model"


def test_a_folder_that_is_no_run_is_refused(tmp_path, capsys):
    assert main(["rescore", str(tmp_path)]) == 2
    assert "no run.json" in capsys.readouterr().err


def test_an_unknown_option_is_named(scripted_run, capsys):
    assert main(["rescore", str(scripted_run), "checker_semantic=evolif"]) == 2
    assert "Did you mean 'checker_semantics'" in capsys.readouterr().err


def test_a_second_identical_run_with_a_cache_makes_no_server_calls(tmp_path, capsys):
    cache = tmp_path / "calls"
    with CannedServer(replies=["One answer.", "Another answer."]) as srv:

        def run(name):
            folder = tmp_path / name
            args = [
                "eval",
                "policy=openai",
                f"policy.llm.base_url={srv.base_url}",
                "policy.llm.model=canned-model",
                f"cache={cache}",
                *BASE,
                f"hydra.run.dir={folder}",
            ]
            assert main(args) == 0
            return folder

        first = run("first")
        calls = len(srv.requests)
        capsys.readouterr()
        second = run("second")
        assert len(srv.requests) == calls  # every call answered from the cache
    one, two = (json.loads((f / "summary.json").read_text())["usage"]["policy"] for f in (first, second))
    assert one["calls"] == calls and "cache_hits" not in one
    assert two["calls"] == 0 and two["cache_hits"] == calls
    assert f"usage[policy]: 0 calls, 0 prompt + 0 completion tokens ({calls} cache_hits)" in capsys.readouterr().out
    assert verdicts(first) == verdicts(second)
    key = {json.loads((f / "run.json").read_text())["run_key"] for f in (first, second)}
    assert len(key) == 1  # the cache does not change what the run is


def test_the_llm_user_goes_through_the_cache_its_sampled_calls_only_when_asked(tmp_path):
    from support.canned_user import scripted_user_model, stating_draft

    user_model = scripted_user_model(generate=stating_draft)
    with CannedServer(replies=lambda body: user_model(body["messages"])) as srv:

        def run(name, *extra):
            folder = tmp_path / name
            args = [
                "eval",
                "env=evolif_llm",
                f"env.user_llm.base_url={srv.base_url}",
                "env.user_llm.model=canned-model",
            ]
            args += ["policy=scripted", f"cache={tmp_path / 'calls'}", *extra, *BASE, f"hydra.run.dir={folder}"]
            assert main(args) == 0
            return len(srv.requests)

        sampled = run("sampled")  # the user model samples (temperature 0.7): its calls are not kept
        assert run("sampled-again") == 2 * sampled
        kept = run("kept", "cache_nondeterministic=true")
        assert run("kept-again", "cache_nondeterministic=true") == kept  # answered from the cache
    usage = json.loads((tmp_path / "kept-again" / "summary.json").read_text())["usage"]["user"]
    assert usage["calls"] == 0 and usage["cache_hits"] == kept - 2 * sampled
    assert verdicts(tmp_path / "kept") == verdicts(tmp_path / "kept-again")
    users = [{e["seed"]: [t["user"] for t in e["turns"]] for e in lines(tmp_path / n)} for n in ("kept", "kept-again")]
    assert users[0] == users[1]
