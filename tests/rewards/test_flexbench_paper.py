"""FlexBench's paper metrics: equations (6) and (7) pooled over a scripted corpus with known verdicts."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from support.flexbench_sets import labels, small

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.core import Episode, TurnRecord, TurnSpec, Verdict
from ifgym.errors import DataFormatError, UnknownNameError
from ifgym.rewards.flexbench import (
    PAPER_HEADLINE,
    DimensionSet,
    episode_row,
    gate,
    paper_metrics,
    summarize,
    summarize_rows,
)


def episode(episode_id, given, metrics="paper"):
    """One call of the toy SOP whose last judged turn carries `given` (id -> label)."""
    dims = DimensionSet.from_json(small())
    verdicts = [Verdict(given[d]) for d in dims.ids]
    turn = TurnRecord(0, "hi", TurnSpec(checklist=dims.checklist()), "reply", verdicts, verdicts, 0.0)
    meta = {"flexbench": {"dimensions": dims.to_json()}}
    if metrics is not None:
        meta["flexbench"]["metrics"] = metrics
    return Episode(episode_id, "ifgym/FlexBench-v0", 0, [turn], "assistant_closed", meta=meta)


# The toy set (`small`): base actions d1, d4; d1 decides branches d2 / d3 and d4 decides d5 / d6 (each pair
# mutually exclusive); d7 is a free-standing branch; d8 an always-on rule.
CORPUS = {
    # every base action attempted; branches d2 yes, d5 no, d7 yes; the rule kept
    "e1": labels(d1="yes", d2="yes", d4="yes", d5="no", d7="yes", d8="yes"),
    # d4 never attempted, so the judge's yes on its branch d5 is gated out; d2 and d3 exclude each other
    # but were both judged: one requirement, with the worst label (no); the rule broken
    "e2": labels(d1="yes", d2="yes", d3="no", d4="unknown", d5="yes", d8="no"),
    # a base action done wrong is still attempted; no branch's condition ever held (gated branches that
    # never trigger are in neither sum); the rule unknown (no agent message judged)
    "e3": labels(d1="no", d4="yes"),
    # nothing attempted, every branch unknown, the rule kept
    "e4": labels(d8="yes"),
}


def test_coverage_and_achievement_are_the_papers_pooled_sums_worked_by_hand():
    s = summarize([episode(k, v) for k, v in CORPUS.items()])
    # (6) Coverage: attempted base actions / base actions over all calls = (2 + 1 + 2 + 0) / (4 x 2)
    assert s["Coverage"] == pytest.approx(5 / 8)
    # (7) Achievement: done right / applied over all calls; per call (right, applied):
    # e1 branches d2, d5, d7 + rule kept (3, 4); e2 cluster {d2, d3} no + rule broken (0, 2); e3 (0, 0); e4 (1, 1)
    assert s["Achievement"] == pytest.approx(4 / 7)
    # ifgym's per-call means stay, under their own names: achievement per call e1 2/3, e2 0 (e3, e4 n/a)
    assert s["coverage_per_call"] == pytest.approx((1 + 1 / 2 + 1 + 0) / 4)
    assert s["achievement_per_call"] == pytest.approx((2 / 3 + 0) / 2)
    assert s["compliance"] == pytest.approx((1 + 0 + 1) / 3) and s["compliance_pooled"] == pytest.approx(2 / 3)
    # raw unknown verdicts: e1 d3, d6; e2 d4, d6, d7; e3 six; e4 seven
    assert (s["gated_out"], s["exclusive_conflicts"], s["unknown"]) == (1, 1, 2 + 3 + 6 + 7)
    # the names that would be read as the headline in ifgym's form are not there
    assert not {"coverage", "achievement", "coverage_pooled", "achievement_pooled"} & set(s)
    assert set(PAPER_HEADLINE) <= set(s)


def test_the_same_corpus_summed_up_by_ifgym_keeps_its_own_names():
    s = summarize([episode(k, v, metrics=None) for k, v in CORPUS.items()])
    assert "Coverage" not in s and "Achievement" not in s
    # ifgym's pooled achievement leaves the rules out: 2 yes of 4 branch requirements
    assert s["achievement_pooled"] == pytest.approx(2 / 4) and s["coverage"] == pytest.approx(5 / 8)


def test_achievement_is_na_when_no_requirement_ever_applied():
    s = summarize([episode("a", CORPUS["e3"]), episode("b", labels(d1="yes"))])
    assert math.isnan(s["Achievement"]) and s["Coverage"] == pytest.approx(3 / 4)


def test_gated_out_and_excluded_branches_count_as_gate_says():
    dims = DimensionSet.from_json(small())
    # d2 and d3 exclude each other and both are yes: one requirement done right, not two
    both = paper_metrics([gate(dims, labels(d1="yes", d2="yes", d3="yes"))])
    assert both == {"Coverage": pytest.approx(1 / 2), "Achievement": 1.0}
    # a yes on a branch whose base action was never attempted does not count: nothing applied
    gated = paper_metrics([gate(dims, labels(d4="unknown", d5="yes", d6="no"))])
    assert gated["Coverage"] == 0.0 and math.isnan(gated["Achievement"])


def test_a_corpus_summed_up_two_ways_is_refused():
    rows = [episode_row(episode("a", CORPUS["e1"])), episode_row(episode("b", CORPUS["e1"], metrics=None))]
    with pytest.raises(DataFormatError, match="two ways"):
        summarize_rows(rows)


def test_an_unknown_metrics_name_in_an_episode_is_named():
    with pytest.raises(DataFormatError, match="'papr'"):
        episode_row(episode("a", CORPUS["e1"], metrics="papr"))


# --- the env ------------------------------------------------------------------------------------------


def test_metrics_paper_leads_with_the_papers_equations_and_records_it():
    env = gym.make("ifgym/FlexBench-v0", metrics="paper").unwrapped
    assert env.task.headline[:2] == ("Coverage", "Achievement") and env.task.headline_metric == "Achievement"
    env.reset(seed=0)
    env.step("Hello, am I speaking with the person in charge of the store?")
    assert env._episode.meta["flexbench"]["metrics"] == "paper"
    s = env.summarize([env._episode])
    assert "Coverage" in s and "coverage" not in s


def test_default_metrics_are_unchanged_and_unrecorded():
    env = gym.make("ifgym/FlexBench-v0").unwrapped
    env.reset(seed=0)
    assert "metrics" not in env._episode.meta["flexbench"] and env.task.headline_metric == "score"
    assert env.protocol()["deviations"] == [] and "paper" not in env.protocol()


def test_protocol_names_every_difference_of_an_offline_paper_run():
    protocol = gym.make("ifgym/FlexBench-v0", metrics="paper").unwrapped.protocol()
    assert protocol["paper"] == "FlexBench" and protocol["metrics"] == "paper"
    text = "\n".join(protocol["deviations"])
    for fragment in (
        "not one of the paper's scenarios",
        "ifgym's own words",
        "always-on rules",
        "user=scripted",
        "judge=rules",
        "not built by the paper's pipeline",
    ):
        assert fragment in text


def test_the_callers_patience_is_named_as_ifgyms_and_the_preset_turns_it_off():
    from omegaconf import OmegaConf

    from ifgym.cli import compose

    persona = gym.make("ifgym/FlexBench-v0", metrics="paper").unwrapped.protocol()
    said = [d for d in persona["deviations"] if d.startswith("patience=persona")]
    assert len(said) == 1 and "the paper's callers have no patience: env.patience=null" in said[0]
    off = gym.make("ifgym/FlexBench-v0", metrics="paper", patience=None).unwrapped.protocol()
    assert not any(d.startswith("patience=") for d in off["deviations"]) and off["caller_patience"] is None
    assert OmegaConf.to_container(compose(["env=flexbench_paper"]).env)["patience"] is None
    # the evaluated model's decoding the paper states (§5.1), for the results table's decoding line
    assert persona["paper_decoding"]["temperature"] == 0.3


def test_bad_metrics_name_suggests_the_fix():
    with pytest.raises(UnknownNameError, match="paper"):
        gym.make("ifgym/FlexBench-v0", metrics="papers")
