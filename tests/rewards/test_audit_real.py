"""The judge audit's real suite: StructFlowBench's released GPT-4o verdicts on real replies, and its floor."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

from support.canned_judges import gold_or, oracle, yes_sayer
from support.canned_server import CannedServer

from ifgym.cli import main
from ifgym.llm import CannedClient
from ifgym.rewards.audit import REAL_FLOOR, REAL_PATH, audit, format_report, load_real, probes
from ifgym.rewards.structflow.scorer import StructFlowScorer

REAL = load_real()
MODELS = REAL["sampling"]["models"]


def test_the_real_suite_holds_what_its_source_says():
    folder = REAL_PATH.parent
    source = (folder / "SOURCE").read_text()
    assert "MIT License" in (folder / "LICENSE").read_text()
    assert "commit:     5a65141d21285c2519d82380eeb828c2d70a593d" in source
    assert hashlib.sha256(REAL_PATH.read_bytes()).hexdigest() in source  # the file is the one the script wrote
    verdicts = [v for t in REAL["turns"] for v in t["verdicts"]]
    assert (len(REAL["turns"]), len(verdicts), verdicts.count("no")) == (120, 350, 97)
    assert "120 turns, 350 items, 97 judged No" in source


def test_the_real_suite_is_stratified_by_model_split_and_verdict():
    turns = REAL["turns"]
    # per model and split: 4 turns holding a "no", 2 answered "yes" throughout
    strata = Counter((t["model"], t["split"], "no" in t["verdicts"]) for t in turns)
    assert strata == {(m, s, has_no): 4 if has_no else 2 for m in MODELS for s in ("dev", "test") for has_no in (1, 0)}
    # the review's held-out models are nowhere in it
    for held_out in ("mistral_7b_instruct_v0_3", "llama_3_1_8b_instruct", "qwen2_5_7b_instruct"):
        assert held_out in REAL["sampling"]["held_out"] and not any(held_out in t["id"] for t in turns)
    # split by dialogue: no dialogue has turns in both splits; a (dialogue, turn) is sampled once
    splits: dict[int, set[str]] = {}
    for t in turns:
        splits.setdefault(t["dialogue"], set()).add(t["split"])
        assert REAL["dialogues"][str(t["dialogue"])]["split"] == t["split"]
    assert all(len(s) == 1 for s in splits.values())
    assert len({(t["dialogue"], t["turn"]) for t in turns}) == len(turns)
    # the short set: 2 turns with a "no" and 1 without per model, all from the test split
    short = [t for t in turns if t["short"]]
    assert len(short) == 30 and {t["split"] for t in short} == {"test"}
    assert Counter("no" in t["verdicts"] for t in short) == {True: 20, False: 10}


def test_probes_carry_the_golden_history_the_reference_judge_saw():
    test, dev, short = (
        probes("structflow_real"),
        probes("structflow_real", split="dev"),
        probes("structflow_real", True),
    )
    assert (len(test), len(dev), len(short)) == (60, 60, 30)
    assert sum(len(p.items) for p in test) + sum(len(p.items) for p in dev) == 350
    for probe in test:
        turn = next(t for t in REAL["turns"] if t["id"] == probe.case)
        dialogue = REAL["dialogues"][str(turn["dialogue"])]
        assert len(probe.history) == 2 * turn["turn"] + 1 and probe.history[-1]["role"] == "user"
        assert probe.history[-1]["content"] == dialogue["turns"][turn["turn"]]["prompt"]
        if turn["turn"]:
            assert probe.history[1]["content"] == dialogue["turns"][0]["answer"]  # golden answers, not the model's
        assert [i.gold for i in probe.items] == turn["verdicts"]
        relation = dialogue["turns"][turn["turn"]]["relation"]
        assert all(i.tags == (f"relation/{relation}",) and i.group.startswith("type/") for i in probe.items)


def always_yes(messages):
    n = len(re.findall(r"<item \d+>", messages[-1]["content"]))
    return json.dumps({"results": [{"item": i, "judgement": "Yes"} for i in range(1, n + 1)]})


def test_an_always_yes_judge_fails_the_real_floor_with_the_numbers_worked_out():
    report = audit(CannedClient(always_yes, role="judge", model="yes"), suites=["structflow_real"])
    r = report["suites"]["structflow_real"]
    # by hand: question rules decide what they can, every other item is "yes"
    scorer = StructFlowScorer(None)
    said, gold = [], []
    for probe in probes("structflow_real"):
        for item, g in zip(probe.payload, probe.items, strict=True):
            rule = scorer._rule(item)
            said.append(rule.check(probe.reply).label if rule is not None else "yes")
            gold.append(g.gold)
    negatives = [s for s, g in zip(said, gold, strict=True) if g == "no"]
    assert r["items"] == len(gold) == 182 and r["turns"] == 60 and r["split"] == "test"
    assert r["accuracy"] == sum(s == g for s, g in zip(said, gold, strict=True)) / len(gold)
    assert r["yes_rate_negatives"] == negatives.count("yes") / len(negatives) > 0.9
    assert not report["passed"]["structflow_real"] and report["floors"]["structflow_real"] == REAL_FLOOR.to_json()
    assert any(f.startswith("yes-rate on negatives") for f in report["failures"]["structflow_real"])
    # intervals over turns hold the point estimates; every type and relation has its row
    for name in ("accuracy", "kappa", "yes_rate_negatives", "no_rate_positives"):
        low, high = r["ci"][name]
        assert low <= r[name] <= high
    assert {"type/refinement", "type/Content Constraint", "relation/first_turn", "relation/expansion"} <= set(
        r["groups"]
    )
    text = format_report(report)
    assert "structflow_real [FAIL]" in text and "agreement with StructFlowBench's GPT-4o judge" in text


def test_the_report_says_what_real_material_the_other_judges_have():
    report = audit(CannedClient(oracle, role="judge", model="o"), suites=["evolif", "flexbench"], short=True)
    text = format_report(report)
    assert "real verdicts for evolif: none" in text and "without model replies or judge scores" in text
    assert "real verdicts for flexbench: none" in text and "ifgym has no real FlexBench verdicts" in text


def structflow_eval(server, tmp_path, *extra):
    return [
        "eval",
        "env=structflow",
        "judge=llm",
        f"judge.llm.base_url={server.base_url}",
        "judge.llm.model=canned-model",
        "policy=scripted",
        "episodes=1",
        "env.max_turns=2",
        f"output={tmp_path / 'run' / 'e.jsonl'}",
        "progress=false",
        "plots=false",
        "ci=false",
        *extra,
    ]


def test_eval_refuses_an_always_yes_checklist_judge_on_the_real_suite(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        assert main(structflow_eval(server, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "fails its audit: structflow_real: " in err and "yes-rate on negatives 0.9" in err
    assert "judge.trust=true" in err and not (tmp_path / "run" / "e.jsonl").exists()


def test_trust_records_the_real_audit_and_the_results_print_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        assert main(structflow_eval(server, tmp_path / "refused")) == 2  # the audit runs once and is cached
        assert main(structflow_eval(server, tmp_path, "judge.trust=true")) == 0  # trust records the known audit
    out = capsys.readouterr().out
    judge = json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]
    real = judge["real_audit"]
    assert judge["trusted_below_floor"] and real["suite"] == "structflow_real" and not real["passed"]
    assert real["split"] == "short" and real["items"] == sum(len(p.items) for p in probes("structflow_real", True))
    shown = f"real-suite agreement {real['accuracy']:.2f}, kappa {real['kappa']:.2f}"
    title = next(line for line in out.splitlines() if line.startswith("run: "))
    assert f"({shown})" in title and "judge canned-model" in title  # in the run's title, above the headline
    assert f"judge: {shown}, yes on the reference's no" in out  # and in full under it
    assert "on real replies FAILED (run with judge.trust=true)" in out


def test_a_judge_that_agrees_with_the_reference_passes_both_suites(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(gold_or(yes_sayer)) as server:
        assert main(structflow_eval(server, tmp_path)) == 0
    judge = json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]
    assert judge["real_audit"]["passed"] and judge["audit"]["passed"] and "trusted_below_floor" not in judge
    assert judge["real_audit"]["accuracy"] > 0.95  # the rules decide a few items against GPT-4o's miscounts
