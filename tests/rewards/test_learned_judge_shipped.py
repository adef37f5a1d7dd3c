"""The shipped learned checklist judge: its weights' size and provenance, and its audit on the real suite."""

from __future__ import annotations

import hashlib
import json

import pytest

from ifgym.rewards.audit import audit
from ifgym.rewards.structflow.learned import WEIGHTS_PATH, LearnedChecklistJudge


def test_the_shipped_weights_are_small_and_say_where_they_come_from():
    provenance = json.loads((WEIGHTS_PATH.parent / "provenance.json").read_text())
    assert WEIGHTS_PATH.stat().st_size < 64_000
    assert provenance["weights_sha256"] == hashlib.sha256(WEIGHTS_PATH.read_bytes()).hexdigest()
    assert provenance["data"]["source"]["commit"] == "5a65141d21285c2519d82380eeb828c2d70a593d"
    assert provenance["command"].startswith(f"python benchmarks/train_learned_judge.py --seed {provenance['seed']}")
    held_out = provenance["data"]["sampling"]["held_out"]
    assert set(held_out) == {"mistral_7b_instruct_v0_3", "llama_3_1_8b_instruct", "qwen2_5_7b_instruct"}
    assert not set(held_out) & set(provenance["data"]["sampling"]["models"])
    assert "MIT License" in (WEIGHTS_PATH.parent / "LICENSE").read_text()


def test_the_audit_measures_the_shipped_judge_as_its_training_run_did():
    # the judge audit's real suite, test split, through the audit's own scorer: the numbers provenance.json
    # recorded for the real suite's test split, and the floor's verdict on them
    provenance = json.loads((WEIGHTS_PATH.parent / "provenance.json").read_text())
    measured = provenance["measured"]["real_test"]
    judge = LearnedChecklistJudge()
    report = audit(judge, suites=["structflow_real"], modes={"structflow_real": "learned"}, split="test")
    real = report["suites"]["structflow_real"]
    assert real["items"] == measured["items"] == 182
    # the training run read cached embeddings; the audit embeds afresh (the same model: equal up to float noise)
    for key in ("accuracy", "kappa", "yes_rate_negatives"):
        assert real[key] == pytest.approx(measured[key], abs=0.02), key
    assert report["passed"]["structflow_real"] == measured["passes_goal"]
    assert report["judge"]["model"] == judge.model_name and real["calls"] == 0
