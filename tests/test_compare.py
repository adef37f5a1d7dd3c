"""`ifgym compare RUN_A RUN_B`: two runs on the same seeds, the runs it refuses, its warnings and its run names."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
from support.canned_server import CannedServer

from ifgym.cli import main

BASE = ["eval", "policy=scripted", "episodes=8", "env.max_turns=3", "progress=false", "plots=false", "ci=false"]


def run(tmp_path, name, *extra):
    """A run of BASE's settings, `extra` overrides replacing BASE's of the same key."""
    out = tmp_path / name / "episodes.jsonl"
    overridden = {e.split("=", 1)[0] for e in extra}
    base = [b for b in BASE if b.split("=", 1)[0] not in overridden]
    assert main([*base, f"output={out}", *extra]) == 0
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
    # the headline metric (EvolIF's STA) is drawn first; the same policy on both sides: the folders tell them apart
    ((labels, metrics),) = drawn
    assert metrics[0] == "STA" and labels == ["A: scripted (a)", "B: scripted (b)"]


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


@pytest.mark.parametrize(
    ("level", "fewest"),
    [
        (0.95, 6),  # 2 / 2**5 = 0.0625 > 0.05, 2 / 2**6 = 0.031
        (0.90, 5),  # 2 / 2**4 = 0.125 > 0.10, 2 / 2**5 = 0.0625
        (0.99, 8),  # 2 / 2**7 = 0.0156 > 0.01, 2 / 2**8 = 0.0078
        (0.50, 2),  # 2 / 2**2 = 0.5: two pairs are the least compare takes
    ],
)
def test_min_pairs_is_where_a_permutation_test_can_reach_the_level(level, fewest):
    from ifgym.runner.compare import min_pairs

    assert min_pairs(level) == fewest


def test_two_episodes_give_intervals_said_to_be_not_meaningful(tmp_path, capsys):
    # two pairs: the bootstrap draws among four resamples, the permutation test's smallest p is 2 / 2**2 = 0.5
    a = run(tmp_path, "a", "episodes=2", "policy.replies=[Here is my answer]")
    b = run(tmp_path, "b", "episodes=2", "policy.replies=[ok]")
    capsys.readouterr()
    out = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(b), "resamples=100", f"out={out}"]) == 0
    printed = capsys.readouterr().out
    assert "warning: only 2 paired episodes" in printed and "the smallest p is 0.5" in printed
    assert "play at least 6 episodes" in printed
    rows = [line for line in printed.splitlines() if line.startswith(("CSR", "ISR", "REC"))]
    assert rows and all("not meaningful [" in line for line in rows if "[" in line)
    result = json.loads(out.read_text())
    assert result["pairs"] == 2 and result["intervals_meaningful"] is False and len(result["warnings"]) == 1


def test_eight_episodes_warn_that_the_intervals_are_rough(two_runs, capsys):
    a, b = two_runs
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "resamples=100"]) == 0
    printed = capsys.readouterr().out
    assert "warning: only 8 paired episodes: below 20" in printed and "not meaningful" not in printed


def test_twenty_episodes_print_no_warning(tmp_path, capsys):
    a = run(tmp_path, "a", "episodes=20", "env.max_turns=1", "policy.replies=[Here is my answer]")
    b = run(tmp_path, "b", "episodes=20", "env.max_turns=1", "policy.replies=[ok]")
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "resamples=50"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_runs_are_named_by_model_and_the_settings_that_differ(tmp_path, capsys):
    # two served models (real HTTP, one canned server each) on the same seeds; B also samples at another temperature
    with (
        CannedServer(replies=["Here is my answer"], model="model-a") as sa,
        CannedServer(replies=["ok"], model="model-b") as sb,
    ):
        common = ["episodes=3", "policy=openai", "plots=false"]
        a = run(tmp_path, "a", *common, f"policy.llm.base_url={sa.base_url}", "policy.llm.model=model-a")
        b = run(
            tmp_path,
            "b",
            *common,
            f"policy.llm.base_url={sb.base_url}",
            "policy.llm.model=model-b",
            "policy.llm.temperature=0.7",
        )
    capsys.readouterr()
    out = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(b), "resamples=50", f"out={out}"]) == 0
    head = capsys.readouterr().out.split("\n\n")[0].splitlines()
    # each model as run.json names it: the model, its backend and its endpoint's host
    name_a, name_b = (f"model-{x} (http {urlsplit(s.base_url).netloc})" for x, s in (("a", sa), ("b", sb)))
    assert head[0] == f"A: {name_a}  ({a / 'episodes.jsonl'})"
    assert head[1] == f"B: {name_b}  ({b / 'episodes.jsonl'})"
    assert "policy.llm.model: A='model-a', B='model-b'" in head[2]
    assert "policy.llm.temperature: A=0.0, B=0.7" in head[2]
    assert f"policy.llm.base_url: A='{sa.base_url}', B='{sb.base_url}'" in head[2]
    result = json.loads(out.read_text())
    assert result["names"] == {"a": name_a, "b": name_b}
    assert result["differences"]["policy.llm.temperature"] == {"a": 0.0, "b": 0.7}
