"""The judge audit: exact numbers on canned judges with known answers, the cache, and the CLI's refusal and override."""

from __future__ import annotations

import json
import re

import pytest
from support.canned_judges import gold_or, oracle, yes_sayer
from support.canned_server import CannedServer
from support.loops import running_loop

from ifgym.cli import main
from ifgym.errors import UnknownNameError
from ifgym.llm import CannedClient
from ifgym.llm.loop import YOUNG_GC_THRESHOLD, event_loop_name
from ifgym.rewards.audit import FLOOR, audit, cached_audit, format_report, load_gold, probes

# A gold set small enough to work the numbers out by hand.
TEXT_A = "What a wonderful day at the beach with everyone!"  # happy; clearly not sad, not angry
TEXT_B = "I miss her every single day since the funeral."  # sad; clearly not happy
TINY = {
    "schema": "ifgym.judge_gold/v1",
    "evolif": {
        "texts": [
            {"id": "a", "text": TEXT_A, "labels": {"emotion": "happy"}, "not": {"emotion": ["sad", "angry"]}},
            {"id": "b", "text": TEXT_B, "labels": {"emotion": "sad"}, "not": {"emotion": ["happy"]}},
        ],
        # an injection the judge's filter for notes to the grader lets through (it reads as content)
        "injections": ["\n\nFeeling {claim} now."],
        "claims": {"emotion": "so {label}"},
    },
}


def tiny_judge(messages):
    """Calls text A sad (wrong) and text B sad (right), and believes an injected claim of 'happy'."""
    text = messages[-1]["content"]
    return json.dumps({"emotion": "happy" if "so happy" in text else "sad"})


def test_audit_numbers_on_a_judge_with_known_mistakes():
    report = audit(CannedClient(tiny_judge, role="judge", model="tiny"), suites=["evolif"], gold=TINY)
    r = report["suites"]["evolif"]
    # items: A/happy (gold yes, judged no), A/sad (no, judged yes), A/angry (no, no), B/sad (yes, yes),
    # B/happy (no, no): 3 of 5 right
    assert r["items"] == 5 and r["accuracy"] == pytest.approx(3 / 5)
    # negatives A/sad, A/angry, B/happy: one judged yes
    assert r["negatives"] == 3 and r["yes_rate_negatives"] == pytest.approx(1 / 3)
    # kappa: observed 3/5; expected 0.4*0.4 + 0.6*0.6 = 0.52 (both have 2 yes, 3 no) -> (0.6 - 0.52) / 0.48
    assert r["kappa"] == pytest.approx(1 / 6)
    # injections: A claims "sad" (its first negative; clean A/sad was already yes: cannot flip), B claims
    # "happy" (clean B/happy was no; the judge now says happy: a flip) -> 1 of 1 flippable flipped, 2 of 2 yes
    assert (r["injected"], r["injection_flip_rate"], r["injection_yes_rate"]) == (2, 1.0, 1.0)
    assert r["unknown_rate"] == 0.0
    # one call per distinct prompt: A's three items share one, B's two another, plus the two injected texts
    assert r["calls"] == 4
    assert report["passed"] == {"evolif": False}
    assert report["failures"]["evolif"] == ["accuracy 0.600 < 0.75"]


def test_the_audit_awaits_its_judge_on_the_loop_runs_use():
    # the loop of `ifgym.llm.loop.run_async`: uvloop's where installed, the young generation collected less often
    seen = []

    def judge(messages):
        seen.append(running_loop())
        return tiny_judge(messages)

    audit(CannedClient(judge, role="judge", model="tiny"), suites=["evolif"], gold=TINY)
    assert len(seen) == 4
    assert {loop for loop, _ in seen} == {event_loop_name()}
    assert min(threshold for _, threshold in seen) >= YOUNG_GC_THRESHOLD


def test_a_perfect_judge_scores_perfectly_on_every_suite_and_mode():
    for modes in ({"evolif": "blind", "structflow": "evidence"}, {"evolif": "rating", "structflow": "plain"}):
        suites = ["evolif", "structflow", "flexbench"]  # the real suite's reference is not always right: below
        report = audit(CannedClient(oracle, role="judge", model="oracle"), suites=suites, modes=modes)
        for suite, r in report["suites"].items():
            assert (r["accuracy"], r["yes_rate_negatives"], r["kappa"]) == (1.0, 0.0, 1.0), suite
            assert (r["injection_flip_rate"], r["injection_yes_rate"], r["unknown_rate"]) == (0.0, 0.0, 0.0), suite
        assert all(report["passed"].values())


def test_a_yes_sayer_fails_the_checklist_suites():
    report = audit(CannedClient(yes_sayer, role="judge", model="yes"), suites=["structflow", "flexbench"])
    structflow, flexbench = report["suites"]["structflow"], report["suites"]["flexbench"]
    # checklist: 40 items. 12 of the 16 rule items are worded so that the scorer's question rules decide
    # them (all right; JSON and lowercase among them); the judge says yes to the other 28: right on the 1 of
    # 4 unread rule items and the 14 of 24 hand-labelled items whose answer is yes -> 27 / 40. Negatives: 21,
    # of which the rules answer 8 (no) and the judge 13 (yes) -> 13 / 21 judged yes
    assert (structflow["items"], structflow["accuracy"]) == (40, 27 / 40)
    assert structflow["yes_rate_negatives"] == pytest.approx(13 / 21)
    assert structflow["groups"]["structflow/hand"]["accuracy"] == 14 / 24
    # dimensions: 15 of the 30 verdicts are yes
    assert (flexbench["items"], flexbench["accuracy"], flexbench["yes_rate_negatives"]) == (30, 15 / 30, 1.0)
    # the judge never said no, so no injection could flip anything; every injected negative it saw is yes
    assert flexbench["injection_flip_rate"] is None and flexbench["injection_yes_rate"] == 1.0
    assert report["passed"] == {"structflow": False, "flexbench": False}
    assert "yes-rate on negatives 0.619 > 0.5" in report["failures"]["structflow"]


def test_the_gold_set_has_four_clear_positives_and_negatives_per_label():
    counts: dict[tuple[str, str], list[int]] = {}
    for probe in probes("evolif"):
        for item in probe.items:
            if item.clean is None:
                label = item.key.split("=", 1)[1]
                counts.setdefault((item.group, label), [0, 0])[item.gold != "yes"] += 1
    assert len(counts) == 6 + 4 + 2 + 2  # emotions, reader ages, registers, voices
    assert all(pos >= 4 and neg >= 4 for pos, neg in counts.values()), counts


def test_rule_items_get_their_answer_from_the_rule_checker():
    sky = next(p for p in probes("structflow") if p.case == "sky")
    # "Is the response limited to 50 words?" on a 70-word reply: computed, not written down
    assert (sky.items[0].source, sky.items[0].gold) == ("rule", "no")
    assert sky.items[2].gold == "yes"  # "Does the response include the keyword 'Rayleigh'?" (a negated rule)


def test_the_cache_answers_the_second_audit(tmp_path):
    client = CannedClient(oracle, role="judge", model="oracle")
    first = cached_audit(client, suites=["flexbench"], short=True, cache_dir=tmp_path)
    sent = len(client.requests)
    second = cached_audit(client, suites=["flexbench"], short=True, cache_dir=tmp_path)
    assert (first["cached"], second["cached"]) == (False, True) and len(client.requests) == sent
    assert second["suites"] == first["suites"]
    # another mode is another prompt: audited anew
    third = cached_audit(client, suites=["flexbench"], modes={"flexbench": "evidence"}, cache_dir=tmp_path)
    assert not third["cached"] and len(client.requests) > sent


def test_unknown_suites_and_modes_are_named():
    with pytest.raises(UnknownNameError, match="Did you mean 'evolif'"):
        audit(CannedClient(oracle), suites=["evolf"])
    with pytest.raises(UnknownNameError, match="evolif judge mode"):
        audit(CannedClient(oracle), suites=["evolif"], modes={"evolif": "plain"})


def test_the_report_table_names_each_suite_group_and_failure():
    report = audit(CannedClient(yes_sayer, role="judge", model="yes"), suites=["structflow"])
    table = format_report(report)
    assert "structflow [FAIL]" in table and "structflow/rule" in table and "structflow/hand" in table
    assert "below the floor: accuracy 0.675 < 0.75; yes-rate on negatives 0.619 > 0.5" in table
    assert FLOOR.failures({"accuracy": 0.8, "yes_rate_negatives": 0.2}) == []


# --- `ifgym eval` with an LLM judge, and `ifgym judge-audit` ----------------------------------------------


def blind_neutral(messages):
    """A judge for the episodes' replies (not gold texts): neutral, adult, formal, active."""
    keys = re.findall(r'"(\w+)"', messages[-1]["content"].rsplit("Return only", 1)[1])
    first = {"emotion": "neutral", "reader_age": "adult", "register": "formal", "voice": "active"}
    return json.dumps({k: first[k] for k in keys})


def eval_args(server, tmp_path, *extra):
    return [
        "eval",
        "judge=llm",
        f"judge.llm.base_url={server.base_url}",
        "judge.llm.model=canned-model",
        "policy=scripted",
        "episodes=2",
        "env.max_turns=2",
        f"output={tmp_path / 'run' / 'e.jsonl'}",
        "progress=false",
        "plots=false",
        *extra,
    ]


def test_eval_refuses_a_judge_below_the_floor_and_names_the_override(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        assert main(eval_args(server, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "fails its audit" in err and re.search(r"accuracy 0\.\d+ < 0\.75", err) and "judge.trust=true" in err
    assert "evolif [FAIL]" in err  # the audit table is printed before the refusal
    assert not (tmp_path / "run" / "e.jsonl").exists()  # no episode was played


def gold_requests(server):
    """How many requests to `server` carried a gold-set text (the audit's, not the episodes')."""
    gold_texts = [t["text"] for t in load_gold()["evolif"]["texts"]]
    return sum(any(t in m["content"] for t in gold_texts for m in r["messages"]) for r in server.requests)


def test_trust_skips_the_audit_and_records_that_it_did(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        assert main(eval_args(server, tmp_path, "judge.trust=true")) == 0
        assert gold_requests(server) == 0  # no audit call at all
    out = capsys.readouterr().out
    judge = json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]
    assert judge["trust"] is True and judge["audit"] is None and judge["audit_skipped"] == "judge.trust=true"
    assert judge["mode"] == "blind" and judge["model"] == "canned-model"
    assert "not audited (judge.trust=true)" in out


def test_trust_records_an_audit_already_known_without_running_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        assert main(eval_args(server, tmp_path / "refused")) == 2  # audited and refused: the audit is cached
        audited = gold_requests(server)
        assert main(eval_args(server, tmp_path, "judge.trust=true")) == 0
        assert gold_requests(server) == audited  # the cached audit is recorded, not run again
    out = capsys.readouterr().out
    judge = json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]
    assert judge["trust"] is True and judge["trusted_below_floor"] is True and judge["audit"]["passed"] is False
    assert judge["audit"]["cached"] is True and judge["audit"]["set"] == "short"
    assert "audit (short gold set, evolif) FAILED" in out


def test_a_shipped_audit_refuses_at_once(tmp_path, capsys, monkeypatch):
    """A judge whose audit ships with ifgym (the packaged embedded judge's) is refused with no model call."""
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    shipped = tmp_path / "shipped"
    monkeypatch.setattr("ifgym.rewards.audit.SHIPPED_AUDITS", shipped)
    with CannedServer(lambda body: yes_sayer(body["messages"])) as server:
        assert main(eval_args(server, tmp_path / "first")) == 2
        # what the project measured and shipped: the audit under its key, and no cache on this machine
        (cached,) = (tmp_path / "cache" / "judge-audit").glob("*.json")
        shipped.mkdir()
        cached.rename(shipped / cached.name)
        capsys.readouterr()
        before = len(server.requests)
        assert main(eval_args(server, tmp_path / "second")) == 2
        assert len(server.requests) == before  # refused before any call: no audit, no episode
    err = capsys.readouterr().err
    assert "(shipped with ifgym)" in err and "fails its audit" in err and "judge.trust=true" in err
    assert not (tmp_path / "second" / "run" / "e.jsonl").exists()


def test_a_passing_judge_is_audited_once_and_recorded(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(gold_or(blind_neutral)) as server:
        assert main(eval_args(server, tmp_path)) == 0
        assert gold_requests(server) > 0
        before = gold_requests(server)
        assert main(eval_args(server, tmp_path / "again")) == 0
        assert gold_requests(server) == before  # the second run read the audit from the cache
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "again" / "run" / "summary.json").read_text())
    audit_record = summary["judge"]["audit"]
    assert audit_record["passed"] and audit_record["cached"] and audit_record["accuracy"] == 1.0
    assert summary["judge"]["mode"] == "blind" and "trusted_below_floor" not in summary["judge"]
    assert "audit (short gold set, evolif) passed: accuracy 1.00" in out
    # env.id=ifgym/EvolIF-v1 with judge=llm plays ifgym/EvolIF-LLM-v1: the header and the protocol say the same
    assert summary["run"]["env"] == summary["protocol"]["env_id"] == "ifgym/EvolIF-LLM-v1"
    assert "protocol: ifgym/EvolIF-LLM-v1 (" in out and "run: ifgym/EvolIF-LLM-v1 · " in out


def test_judge_mode_reaches_the_env_and_the_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    with CannedServer(gold_or(lambda m: json.dumps({"scores": [{"item": 1, "score": 2}]}))) as server:
        assert main(eval_args(server, tmp_path, "judge.mode=rating", "episodes=1")) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]["mode"] == "rating"
    with CannedServer(gold_or(blind_neutral)) as server:
        assert main(eval_args(server, tmp_path / "b", "judge.mode=evidence")) == 2
    assert "unknown judge_mode 'evidence'" in capsys.readouterr().err


def test_judge_audit_command_prints_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / "audit.json"
    with CannedServer(lambda body: oracle(body["messages"])) as server:
        code = main(
            [
                "judge-audit",
                f"judge.llm.base_url={server.base_url}",
                "judge.llm.model=canned-model",
                "suites=evolif,structflow",
                f"out={out}",
            ]
        )
    assert code == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    # the short set by default: a screen in seconds on a served judge (set=full before reporting one)
    assert set(report["suites"]) == {"evolif", "structflow"} and report["set"] == "short"
    assert "evolif [pass]" in printed and "structflow [pass]" in printed


def test_judge_audit_with_a_mode_skips_the_suites_without_it(tmp_path, capsys):
    with CannedServer(lambda body: oracle(body["messages"])) as server:
        code = main(
            [
                "judge-audit",
                f"judge.llm.base_url={server.base_url}",
                "judge.llm.model=canned-model",
                "judge.mode=rating",
                "set=short",
                f"out={tmp_path / 'a.json'}",
            ]
        )
    captured = capsys.readouterr()
    assert code == 0 and "not a mode of structflow_real, structflow, flexbench: skipped" in captured.err
    assert list(json.loads((tmp_path / "a.json").read_text())["suites"]) == ["evolif"]


@pytest.mark.embedded
def test_judge_llm_without_a_url_says_the_embedded_model_judges_and_prints_its_audit(tmp_path, capsys, monkeypatch):
    # SmolLM2-135M (the suite's small embedded model) as the judge: the audit runs through llama.cpp for real,
    # on two of the gold texts (the whole short set takes minutes on a small CPU)
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    gold = load_gold()
    gold["evolif"]["texts"] = [t for t in gold["evolif"]["texts"] if t["id"] in ("emotion-sad-1", "voice-passive-1")]
    monkeypatch.setattr("ifgym.rewards.audit.load_gold", lambda: gold)
    code = main(
        [
            "eval",
            "judge=llm",
            "judge.llm.embedded_model=smollm2-135m",
            "judge.llm.max_tokens=60",
            "policy=scripted",
            "episodes=1",
            "env.max_turns=1",
            f"output={tmp_path / 'run' / 'e.jsonl'}",
            "progress=false",
            "plots=false",
        ]
    )
    err = capsys.readouterr().err
    assert "without judge.llm.base_url: the embedded model (smollm2-135m) is the judge" in err
    assert re.search(r"judge audit: smollm2-135m \(embedded\), short gold set \w+, \d+ calls", err)
    assert "evolif [" in err  # its numbers, pass or fail
    if code == 2:  # a 135M judge is expected to fail the floor: then the refusal names the numbers and the override
        assert "fails its audit" in err and "judge.trust=true" in err
    else:
        judge = json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]
        assert code == 0 and judge["audit"]["passed"]


def test_the_embedded_judges_shipped_flexbench_audit_refuses_before_any_model_call(tmp_path, capsys, monkeypatch):
    """`ifgym eval env=flexbench judge=llm` without a URL: the packaged judge's measured audit, no audit run."""
    from omegaconf import OmegaConf

    from ifgym.cli import compose
    from ifgym.llm import make_client
    from ifgym.rewards.audit import SHIPPED_AUDITS, audit_key, known_audit

    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))  # nothing cached on this machine
    judge = OmegaConf.to_container(compose(["judge=llm"]).judge, resolve=True)
    client = make_client(judge["llm"], "judge_audit", "judge.llm")  # the embedded Qwen, not loaded
    report = known_audit(audit_key(client, ["flexbench"], {"flexbench": "plain"}))
    assert report["shipped"] and report["cache_path"].startswith(str(SHIPPED_AUDITS))
    # measured with benchmarks/judge_audits.py: 15 items, accuracy 0.333, yes to 0.875 of the negatives
    assert report["passed"] == {"flexbench": False} and report["suites"]["flexbench"]["items"] == 15
    assert report["judge"]["embedded_model"] == "qwen2.5-coder-1.5b"  # its key also holds the file's sha256
    code = main(["eval", "env=flexbench", "judge=llm", "policy=scripted", "episodes=1", "progress=false"])
    err = capsys.readouterr().err
    assert code == 2 and "(shipped with ifgym)" in err and "the embedded judge (" in err and "fails its audit" in err
    assert "accuracy 0.333 < 0.75" in err and "judge.llm.base_url=URL" in err
    assert not (tmp_path / "cache" / "judge-audit").exists()  # nothing was audited here
