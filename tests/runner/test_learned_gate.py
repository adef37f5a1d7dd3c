"""judge=learned in a run: StructFlow scored offline, and the pre-run audit holding it to the real suite's floor."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import compose, main
from ifgym.errors import ConfigError
from ifgym.rewards.audit import REAL_FLOOR
from ifgym.rewards.structflow.learned import WEIGHTS_PATH
from ifgym.runner.build import build_env
from ifgym.runner.judge_gate import audit_judge


def _env(overrides):
    resolved = OmegaConf.to_container(
        compose(["env=structflow", "env.dataset=structflowbench", *overrides]), resolve=True
    )
    return build_env(resolved["env"], resolved["judge"], {})().unwrapped, resolved["judge"]


def test_judge_learned_scores_every_item_of_a_structflowbench_turn_without_a_server():
    env, _ = _env(["judge=learned"])
    env.reset(seed=3)
    _, _, _, _, info = env.step("A short reply that does not do much of what was asked")
    assert info["unknown"] == 0  # every item decided: by a rule, or by the learned judge
    sources = {v["source"] for v in info["verdicts"]}
    assert env.scorer.judge.source in sources and sources <= {"rule", env.scorer.judge.source}
    protocol = env.protocol()
    assert protocol["judge"] == "learned" and protocol["judge_mode"] == "learned"
    assert any(d.startswith("judge=learned (learned-") for d in protocol["deviations"])


def test_the_pre_run_audit_holds_the_learned_judge_to_the_real_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path))
    env, judge_cfg = _env(["judge=learned"])
    measured = json.loads((WEIGHTS_PATH.parent / "provenance.json").read_text())["measured"]
    try:
        record = audit_judge(env, judge_cfg, progress=False)
    except ConfigError as refusal:  # below the floor on the short set: refused, naming the fix
        assert "the learned checklist judge (learned-" in str(refusal) and "judge.trust=true" in str(refusal)
        env, judge_cfg = _env(["judge=learned", "judge.trust=true"])
        record = audit_judge(env, judge_cfg, progress=False)  # read from the cache written above
        assert record["trusted_below_floor"] is True and record["audit"]["cached"] is True
    real = record["real_audit"]
    assert record["kind"] == "learned" and record["mode"] == "learned" and real["split"] == "short"
    assert real["passed"] == (not REAL_FLOOR.failures(real))
    assert measured["real_test"]["items"] == 182  # the full test split; the gate reads its short set (30 turns)


def test_judge_learned_is_refused_by_name_where_no_checklist_needs_it():
    with pytest.raises(ConfigError, match="learned"):
        resolved = OmegaConf.to_container(compose(["env=evolif", "judge=learned"]), resolve=True)
        build_env(resolved["env"], resolved["judge"], {})


def test_judge_audit_command_measures_the_learned_judge_without_a_server(tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert main(["judge-audit", "judge=learned", "suites=structflow_real,evolif", f"out={out}"]) == 0
    report = json.loads(out.read_text())
    assert "judge.mode=learned is not a mode of evolif: skipped" in capsys.readouterr().err
    real = report["suites"]["structflow_real"]
    assert set(report["suites"]) == {"structflow_real"} and real["split"] == "short" and real["turns"] == 30
    assert report["judge"]["model"].startswith("learned-") and real["calls"] == 0 and real["unknown_rate"] == 0
