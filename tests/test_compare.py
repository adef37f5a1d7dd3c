"""`ifgym compare RUN_A RUN_B`: two runs of scripted policies on the same seeds, and the runs it refuses."""

from __future__ import annotations

import json

import pytest

from ifgym.cli import main

BASE = ["eval", "policy=scripted", "episodes=8", "env.max_turns=3", "progress=false", "plots=false", "ci=false"]


def run(tmp_path, name, *extra):
    out = tmp_path / name / "episodes.jsonl"
    assert main([*BASE, f"output={out}", *extra]) == 0
    return out.parent


@pytest.fixture
def two_runs(tmp_path):
    # the default scripted reply never satisfies the first constraint of an EvolIF episode; an empty-ish,
    # all-lowercase reply sometimes does: the two policies differ, on the same seeds and env settings
    a = run(tmp_path, "a", "policy.replies=[Here is my answer]")
    b = run(tmp_path, "b", "policy.replies=[ok]")
    return a, b


def test_compare_prints_paired_differences_and_writes_json(two_runs, tmp_path, capsys, monkeypatch):
    a, b = two_runs
    capsys.readouterr()
    import ifgym.runner.report

    drawn = []  # what the plot was drawn with (the real function draws it)
    real = ifgym.runner.report.write_comparison_plot

    def record(summaries, metrics, path, **kwargs):
        drawn.append((list(summaries), list(metrics)))
        return real(summaries, metrics, path, **kwargs)

    monkeypatch.setattr(ifgym.runner.report, "write_comparison_plot", record)
    out = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(b / "episodes.jsonl"), "resamples=200", f"out={out}"]) == 0
    printed = capsys.readouterr().out
    assert "8 episodes paired by seed" in printed and "B - A" in printed and "95% CI" in printed
    result = json.loads(out.read_text())
    strict_a = json.loads((a / "summary.json").read_text())["strict"]
    strict_b = json.loads((b / "summary.json").read_text())["strict"]
    csr = result["strict"]["CSR"]
    # the point estimates are the runs' own summary values, and the difference is B - A
    assert (csr["a"], csr["b"]) == (strict_a["CSR"], strict_b["CSR"])
    assert csr["diff"] == pytest.approx(strict_b["CSR"] - strict_a["CSR"])
    assert 0.0 <= csr["p_value"] <= 1.0 and set(result) >= {"strict", "loose", "settings", "pairs"}
    # the episodes last as long in both runs? then the difference is exactly 0 with p = 1
    if strict_a["EDR_len"] == strict_b["EDR_len"]:
        assert result["strict"]["EDR_len"]["p_value"] == 1.0
    # the two runs side by side (each with its own summary's values), beside the JSON
    assert f"plot: {out.with_suffix('.png')}" in printed and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    # the headline metric (EvolIF's REC) is drawn first; the same policy on both sides: the folders tell them apart
    ((labels, metrics),) = drawn
    assert metrics[0] == "REC" and labels == ["A: scripted (a)", "B: scripted (b)"]


def test_compare_refuses_runs_with_different_env_settings(two_runs, tmp_path, capsys):
    a, _ = two_runs
    c = run(tmp_path, "c", "env.max_turns=2")
    capsys.readouterr()
    assert main(["compare", str(a), str(c)]) == 2
    err = capsys.readouterr().err
    assert "not comparable" in err and "env.max_turns: A=3, B=2" in err


def test_compare_refuses_runs_on_different_seeds(two_runs, tmp_path, capsys):
    a, _ = two_runs
    d = run(tmp_path, "d", "seed=4")
    capsys.readouterr()
    assert main(["compare", str(a), str(d)]) == 2
    err = capsys.readouterr().err
    assert "different seeds" in err and "only in A: 0, 1, 2, 3" in err and "only in B: 8, 9, 10, 11" in err


def test_compare_needs_two_finished_runs(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "usage: ifgym compare" in capsys.readouterr().err
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert "no summary.json" in capsys.readouterr().err
