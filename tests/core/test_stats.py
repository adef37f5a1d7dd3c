"""Bootstrap intervals over dialogues and the paired comparison of two runs, on hand-built episodes."""

from __future__ import annotations

import math
import sys

import pytest

from ifgym.core import Episode, TurnRecord, TurnSpec, Verdict
from ifgym.core.constraints import Constraint
from ifgym.core.stats import CISettings, cohen_kappa, compare, intervals, metric_names
from ifgym.errors import ConfigError
from ifgym.rewards.evolif.metrics import HEADLINE, summarize

WORDS = Constraint("length.words", {"relation": "less_than", "n": 50})


def episode(seed: int, labels: list[str]) -> Episode:
    """One episode whose turns each carry one constraint with the given label."""
    turns = [
        TurnRecord(i, "u", TurnSpec((WORDS,)), "r", [Verdict(label, "t")], [Verdict(label, "t")], 0.0)
        for i, label in enumerate(labels)
    ]
    return Episode(f"e{seed}", "ifgym/EvolIF-v1", seed, turns, "max_turns")


def run(n: int, pass_every: int, offset: int = 0) -> list[Episode]:
    """n two-turn episodes; episode k passes both turns when (k + offset) % pass_every == 0, else fails both."""
    return [episode(k, ["yes", "yes"] if (k + offset) % pass_every == 0 else ["no", "no"]) for k in range(n)]


def width(bounds):
    return bounds[1] - bounds[0]


def test_the_interval_covers_the_estimate_and_narrows_with_more_dialogues():
    # the same mixture (half the dialogues pass) with 10 and with 160 dialogues: CSR is 0.5 in both
    small, large = run(10, 2), run(160, 2)
    assert summarize(small)["CSR"] == summarize(large)["CSR"] == 0.5
    ci_small = intervals(small, summarize, ["CSR"])["CSR"]
    ci_large = intervals(large, summarize, ["CSR"])["CSR"]
    assert ci_small[0] <= 0.5 <= ci_small[1] and ci_large[0] <= 0.5 <= ci_large[1]
    # the standard error falls as 1/sqrt(n): 16x the dialogues, about a quarter of the width
    assert width(ci_large) < width(ci_small) / 2.5


def test_intervals_are_seeded_and_resample_whole_dialogues():
    episodes = run(12, 3)
    a = intervals(episodes, summarize, ["CSR", "ISR"], settings=CISettings(200, 0.9, seed=7))
    b = intervals(episodes, summarize, ["CSR", "ISR"], settings=CISettings(200, 0.9, seed=7))
    assert a == b
    # every dialogue passes or fails as a whole, so a draw's CSR is a multiple of 1/12: so are the bounds
    for bound in a["CSR"]:
        assert math.isclose(bound * 12, round(bound * 12), abs_tol=1e-9)


def test_no_interval_from_one_dialogue_or_for_an_undefined_metric():
    assert intervals(run(1, 1), summarize, ["CSR"]) == {"CSR": None}
    unknown = [episode(k, ["unknown"]) for k in range(5)]  # CSR is NaN in every draw
    assert intervals(unknown, summarize, ["CSR"]) == {"CSR": None}


def test_constant_metrics_have_a_point_interval():
    assert intervals(run(6, 1), summarize, ["CSR"]) == {"CSR": [1.0, 1.0]}


def test_metric_names_are_the_headline_metrics_and_pass_rates():
    names = metric_names(summarize(run(4, 2)), HEADLINE)
    assert set(names) == {*HEADLINE, "pass_rate/length"}


@pytest.mark.parametrize("bad", [{"resamples": 0}, {"level": 1.5}, {"level": 0}, {"seed": "x"}])
def test_bad_settings_name_the_key(bad):
    with pytest.raises(ConfigError, match="ci_resamples|ci_level|seed"):
        CISettings(**bad)


def test_compare_finds_a_known_difference():
    # A passes every dialogue; B passes 1 in 4 (on the same seeds): B - A = -0.75 on CSR
    a, b = run(40, 1), run(40, 4)
    result = compare(a, b, summarize, ["CSR", "EDR_len"], settings=CISettings(500))
    csr = result["CSR"]
    assert (csr["a"], csr["b"], csr["diff"]) == (1.0, 0.25, -0.75)
    assert csr["ci"][0] <= -0.75 <= csr["ci"][1] < 0
    # 40 pairs, 30 of them differ: a permutation p-value as low as the 500 draws can show
    assert csr["p_value"] < 0.01
    # both runs play two turns per dialogue: no difference, p = 1
    assert result["EDR_len"]["diff"] == 0.0 and result["EDR_len"]["ci"] == [0.0, 0.0]
    assert result["EDR_len"]["p_value"] == 1.0


def test_compare_without_scipy_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # as if the compare extra were not installed
    with pytest.raises(ConfigError, match=r"SciPy: pip install 'ifgym\[compare\]'"):
        compare(run(4, 1), run(4, 2), summarize, ["CSR"], settings=CISettings(50))


def test_compare_without_a_difference_is_not_significant():
    # the same share of passing dialogues, on different seeds of the pair: no real difference
    a, b = run(40, 2), run(40, 2, offset=1)
    csr = compare(a, b, summarize, ["CSR"], settings=CISettings(500))["CSR"]
    assert csr["diff"] == 0.0 and csr["ci"][0] < 0 < csr["ci"][1]
    assert csr["p_value"] > 0.5


def test_compare_pairs_by_seed_whatever_the_order():
    a, b = run(10, 1), run(10, 2)
    forward = compare(a, b, summarize, ["CSR"], settings=CISettings(100))
    shuffled = compare(list(reversed(a)), b, summarize, ["CSR"], settings=CISettings(100))
    assert forward == shuffled


def test_compare_refuses_runs_on_different_seeds():
    a, b = run(4, 1), run(5, 1)
    with pytest.raises(ConfigError, match=r"different seeds.*only in A: none; only in B: 4"):
        compare(a, b, summarize, ["CSR"])
    with pytest.raises(ConfigError, match="seed 0 occurs twice"):
        compare([*a, a[0]], b, summarize, ["CSR"])


LOWER = Constraint("case.lower", {})


def mixed_rows(n: int) -> list:
    """n EvolIF rows of varied length and verdicts: undetermined episodes, a group most episodes lack, unknowns."""
    from ifgym.rewards.evolif.metrics import episode_row

    labels = ["yes", "no", "unknown"]
    rows = []
    for k in range(n):
        turns = []
        for i in range(1 + k % 4):
            both = k % 5 == 0  # every fifth episode also has a lowercase rule: its group is absent from many draws
            spec = TurnSpec((WORDS, LOWER) if both else (WORDS,))
            verdicts = [Verdict(labels[(k * 7 + i * 3 + j) % 3], "t") for j in range(len(spec.constraints))]
            if k % 6 == 1:  # undetermined throughout: no ISR of its own, left out of ROB
                verdicts = [Verdict("unknown", "t") for _ in verdicts]
            turns.append(TurnRecord(i, "u", spec, "r", verdicts, verdicts, 0.0))
        rows.append(episode_row(Episode(f"e{k}", "ifgym/EvolIF-v1", k, turns, "max_turns")))
    return rows


def test_ratio_metrics_in_bulk_match_summarize_on_each_draw(monkeypatch):
    # the same draws scored two ways: EvolIF's ratios of sums over a chunk of draws, and summarize_rows per draw
    import ifgym.core.stats
    from ifgym.rewards.evolif.metrics import summarize_rows, summary_ratios

    rows = mixed_rows(37)
    metrics = metric_names(summarize_rows(rows), HEADLINE)
    assert {"STA", "pass_rate/case", "pass_rate/length"} <= set(metrics)
    settings = CISettings(300, 0.9, seed=3)
    per_draw = intervals(rows, summarize_rows, metrics, settings=settings)
    bulk = intervals(rows, summarize_rows, metrics, settings=settings, ratios=summary_ratios)
    monkeypatch.setattr(ifgym.core.stats, "CHUNK_CELLS", 50)  # one draw of 37 dialogues per chunk: same numbers
    small_chunks = intervals(rows, summarize_rows, metrics, settings=settings, ratios=summary_ratios)
    assert bulk == small_chunks
    for m in metrics:
        assert per_draw[m] is not None, m
        assert bulk[m] == pytest.approx(per_draw[m], abs=1e-12), m


def test_summary_ratios_give_summarize_rows_values():
    from ifgym.rewards.evolif.metrics import summarize_rows, summary_ratios

    rows = mixed_rows(23)
    summary = summarize_rows(rows)
    for metric, (numerators, denominators) in summary_ratios(rows).items():
        assert sum(numerators) / sum(denominators) == pytest.approx(summary[metric], abs=1e-12), metric


# Cohen's kappa, each table computed by hand: kappa = (observed - chance) / (1 - chance).
@pytest.mark.parametrize(
    ("first", "second", "kappa"),
    [
        # observed 4/5; first 3 yes 2 no, second 2 yes 3 no: chance (3*2 + 2*3)/25 = 12/25 -> (8/25)/(13/25)
        (["yes", "yes", "no", "no", "yes"], ["yes", "no", "no", "no", "yes"], 8 / 13),
        # three labels: observed 2/4; chance (2*1 + 1*2 + 1*1)/16 = 5/16 -> (3/16)/(11/16)
        (["yes", "no", "unknown", "yes"], ["yes", "no", "no", "unknown"], 3 / 11),
        # always disagreeing on a balanced table: observed 0, chance 1/2 -> -1
        (["yes", "no"], ["no", "yes"], -1.0),
        # a label outside the labels is left out: the two pairs left agree, chance 1/2 -> 1
        (["yes", "no", "maybe"], ["yes", "no", "yes"], 1.0),
    ],
)
def test_cohen_kappa_on_hand_computed_tables(first, second, kappa):
    assert cohen_kappa(first, second, labels=("yes", "no", "unknown")) == pytest.approx(kappa)


def test_cohen_kappa_is_nan_where_undefined_and_refuses_unequal_lengths():
    assert math.isnan(cohen_kappa(["yes", "yes"], ["yes", "yes"], labels=("yes", "no")))  # chance agreement 1
    assert math.isnan(cohen_kappa([], [], labels=("yes", "no")))  # no pairs
    with pytest.raises(ValueError, match="3 labels from the first rater, 2 from the second"):
        cohen_kappa(["yes", "no", "yes"], ["yes", "no"], labels=("yes", "no"))


def test_structflow_summary_ratios_by_hand_and_as_summarize_rows_on_every_draw():
    from ifgym.rewards.structflow.metrics import TurnRow, summarize_rows, summary_ratios

    def turn(*items):  # (label, type, weight) per checklist item; none: an empty checklist
        labels, types, weights = zip(*items, strict=True) if items else ((), (), ())
        return TurnRow(labels, types, weights)

    a = (turn(("yes", "T1", 1.0), ("no", "S", 2.0)), turn(("yes", "T1", 1.0), ("unknown", "T1", 1.0)))
    b = (turn(("unknown", "S", 2.0)), turn(("yes", "T2", 1.0), ("yes", "S", 2.0)))
    terms = {m: (list(num), list(den)) for m, (num, den) in summary_ratios([a, b]).items()}
    # per turn (CSR, WCSR, ISR): a1 (1/2, 1/3, 0); a2 (1, 1, undetermined: one unknown item); b1 unknown; b2 (1, 1, 1)
    assert terms["CSR"] == ([1.5, 1.0], [2.0, 1.0]) and terms["ISR"] == ([0.0, 1.0], [1.0, 1.0])
    assert terms["WCSR"][1] == [2.0, 1.0] and terms["WCSR"][0] == pytest.approx([4 / 3, 1.0])
    assert terms["DRFR"] == ([2.0, 2.0], [3.0, 2.0]) and terms["WCSR_pooled"] == ([2.0, 3.0], [4.0, 3.0])
    assert terms["pass_rate/T1"] == ([2.0, 0.0], [2.0, 0.0]) and terms["pass_rate/S"] == ([0.0, 1.0], [1.0, 1.0])
    summary = summarize_rows([a, b])
    assert summary["CSR"] == pytest.approx(2.5 / 3) and summary["WCSR_pooled"] == pytest.approx(5 / 7)
    # the same bootstrap draws scored both ways agree (pass_rate/T2 is absent from some draws: NaN both ways)
    rows = [a, b, (turn(("no", "T2", 1.0)),), (turn(("yes", "S", 2.0), ("no", "T1", 1.0)), turn()), a]
    metrics = metric_names(summarize_rows(rows), ("CSR", "ISR", "WCSR", "DRFR", "WCSR_pooled"))
    settings = CISettings(200, 0.9, seed=5)
    per_draw = intervals(rows, summarize_rows, metrics, settings=settings)
    bulk = intervals(rows, summarize_rows, metrics, settings=settings, ratios=summary_ratios)
    for m in metrics:
        assert bulk[m] == pytest.approx(per_draw[m], abs=1e-12), m
