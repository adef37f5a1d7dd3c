"""EvolIF metrics on small hand-built episodes; every expected number is worked out in a comment."""

from __future__ import annotations

import math

import pytest

from ifgym.core import Episode, TurnRecord, TurnSpec, Verdict
from ifgym.core.constraints import Constraint
from ifgym.errors import DataFormatError
from ifgym.rewards.evolif import metrics

WORDS = Constraint("length.words", {"relation": "less_than", "n": 50})  # group length
JSON = Constraint("format.json", {})  # group format
LOWER = Constraint("case.lower", {})  # group case
TONE = Constraint("emotion.tone", {"emotion": "happy"})  # group emotion (judged)

Y, N, U = "yes", "no", "unknown"


def turn(index, items, loose=None):
    """A turn from [(constraint, label), ...]; `loose` gives loose labels (default: same as strict)."""
    constraints = tuple(c for c, _ in items)
    strict = [Verdict(label, "test") for _, label in items]
    loose_verdicts = [Verdict(label, "test") for label in loose] if loose is not None else list(strict)
    return TurnRecord(index, f"user {index}", TurnSpec(constraints), f"reply {index}", strict, loose_verdicts, 0.0)


def episode(eid, *turns, done="patience"):
    return Episode(eid, "ifgym/EvolIF-v1", 0, list(turns), done)


# E1: pass, fail, pass (a recovery), fail
E1 = episode(
    "e1",
    turn(0, [(WORDS, Y), (JSON, Y)]),  # pass, csr 1
    turn(1, [(WORDS, Y), (JSON, N)]),  # fail, csr 1/2
    turn(2, [(WORDS, Y), (JSON, Y), (LOWER, Y)]),  # pass, csr 1, recovers from turn 1
    turn(3, [(WORDS, N), (LOWER, N)]),  # fail, csr 0
)
# E2: pass, pass, fail
E2 = episode(
    "e2",
    turn(0, [(WORDS, Y)]),  # pass, csr 1
    turn(1, [(WORDS, Y), (LOWER, Y)]),  # pass, csr 1
    turn(2, [(WORDS, N), (LOWER, Y)]),  # fail, csr 1/2
)
# E3: never fails
E3 = episode("e3", turn(0, [(WORDS, Y)]), turn(1, [(JSON, Y)]), done="max_turns")
# E4: unknown verdicts
E4 = episode(
    "e4",
    turn(0, [(WORDS, Y), (TONE, U)]),  # undetermined (yes + unknown); csr 1/1 = 1
    turn(1, [(WORDS, N)]),  # fail, csr 0
    turn(2, [(TONE, U)]),  # undetermined, no csr at all
    turn(3, [(WORDS, Y)]),  # pass, csr 1; next determined turn after the failure: a recovery
)
# E5: every verdict unknown
E5 = episode("e5", turn(0, [(TONE, U)]))
# E6: fail, fail, pass, fail -- one failure left unrecovered although a turn followed it
E6 = episode(
    "e6",
    turn(0, [(WORDS, N)]),  # fail, followed by a fail: not recovered
    turn(1, [(WORDS, N)]),  # fail, followed by a pass: recovered
    turn(2, [(WORDS, Y)]),  # pass
    turn(3, [(WORDS, N)]),  # fail, last turn: no chance to recover, not in the denominator
)


@pytest.mark.parametrize(
    ("name", "episodes", "expected"),
    [
        # E1+E2: csr sums 2.5 + 2.5 over 4 + 3 turns = 5/7
        ("CSR", [E1, E2], 5 / 7),
        # passing turns 2 + 2 of 7 determined turns
        ("ISR", [E1, E2], 4 / 7),
        # turns (4 + 3) / 2
        ("EDR_len", [E1, E2], 3.5),
        # csr sums (2.5 + 2.5) / 2
        ("EDR_acc", [E1, E2], 2.5),
        # passing turns (2 + 2) / 2
        ("EDR_succ", [E1, E2], 2.0),
        # longest passing runs: E1 1 (pass, fail, pass, fail), E2 2 -> (1 + 2) / 2
        ("EDR_lss", [E1, E2], 1.5),
        # per dialogue, recovered / failed turns that have a next turn (EvolIF's score.py):
        # E1 turn 1 recovered at turn 2 (turn 3 is last) -> 1/1; E2 fails only at its last turn -> 1.0
        ("REC", [E1, E2], 1.0),
        # E6: turn 0 not recovered, turn 1 recovered, turn 3 last -> 1/2
        ("REC", [E6], 0.5),
        # per-episode ISR: E1 2/4, E2 2/3 -> (1/2 + 2/3) / 2 = 7/12
        ("ROB", [E1, E2], 7 / 12),
        ("failed_turns", [E1, E2], 3.0),
        ("unknown", [E1, E2], 0.0),
        # E3 has no failure: REC was never measured, so NaN (n/a), not a perfect 1.0
        ("REC", [E3], math.nan),
        # E1 recovered its one recoverable failure; E3's 1.0 (nothing left unrecovered) joins the mean
        ("REC", [E1, E3], 1.0),
        ("ISR", [E3], 1.0),
        ("EDR_lss", [E3], 2.0),
        # E4: csr over the 3 turns that have one: (1 + 0 + 1) / 3
        ("CSR", [E4], 2 / 3),
        # E4: determined turns are 1 (fail) and 3 (pass) -> 1/2
        ("ISR", [E4], 0.5),
        # E4: EDR_len counts every turn played, determined or not
        ("EDR_len", [E4], 4.0),
        # E4: sum of csr 1 + 0 + 1
        ("EDR_acc", [E4], 2.0),
        # E4: the failure at turn 1 is recovered at turn 3 (undetermined turn 2 skipped)
        ("REC", [E4], 1.0),
        ("unknown", [E4], 2.0),
        ("undetermined_turns", [E4], 2.0),
        # REC is a mean over dialogues: E1 1.0, E6 1/2 -> 3/4 (pooled would be 2/3)
        ("REC", [E1, E6], 0.75),
        # E1+E3 ROB: (2/4 + 2/2) / 2 = 3/4, while pooled ISR is 4/6
        ("ROB", [E1, E3], 0.75),
        ("ISR", [E1, E3], 4 / 6),
        # E2+E5: E5 has nothing determined and is left out of ROB -> E2's 2/3
        ("ROB", [E2, E5], 2 / 3),
        # ... but it still counts as a dialogue for EDR: (3 + 1) / 2 turns
        ("EDR_len", [E2, E5], 2.0),
    ],
)
def test_summary_values_by_hand(name, episodes, expected):
    assert metrics.summarize(episodes)[name] == pytest.approx(expected, nan_ok=True)


def test_function_api_matches_summary():
    s = metrics.summarize([E1, E2, E4])
    assert metrics.csr([E1, E2, E4]) == pytest.approx(s["CSR"])
    assert metrics.isr([E1, E2, E4]) == pytest.approx(s["ISR"])
    assert metrics.recovery([E1, E2, E4]) == pytest.approx(s["REC"])
    assert metrics.robustness([E1, E2, E4]) == pytest.approx(s["ROB"])
    assert metrics.stability([E1, E2, E4]) == pytest.approx(s["ROB"])  # the STA is EvolIF's ROB
    edr = metrics.endurance([E1, E2, E4])
    assert [edr[k] for k in ("len", "acc", "succ", "lss")] == pytest.approx(
        [s["EDR_len"], s["EDR_acc"], s["EDR_succ"], s["EDR_lss"]]
    )
    assert metrics.unknown_count([E1, E2, E4]) == 2


def test_csr_is_edr_acc_over_edr_len_without_unknowns():
    # The identity EvolIF's leaderboard satisfies (e.g. GPT-5 17.11 / 19.32 = 88.57%).
    s = metrics.summarize([E1, E2, E3])
    assert s["CSR"] == pytest.approx(s["EDR_acc"] / s["EDR_len"])
    assert s["ISR"] == pytest.approx(s["EDR_succ"] / s["EDR_len"])


def test_per_episode_tallies():
    m = metrics.episode_metrics(E1)
    assert (m.turns, m.acc, m.succ, m.failed, m.lss, m.recoveries) == (4, 2.5, 2, 2, 1, 1)
    assert m.isr == 0.5
    assert m.recoverable == 1  # turn 1 has a next turn; turn 3 ends the dialogue
    assert m.rec == 1.0  # 1 recovery / 1 recoverable failure
    assert metrics.episode_metrics(E3).rec == 1.0  # no failure: defined, not NaN


def test_undetermined_turn_neither_breaks_nor_extends_a_streak():
    ep = episode("s", turn(0, [(WORDS, Y)]), turn(1, [(TONE, U)]), turn(2, [(WORDS, Y)]))
    m = metrics.episode_metrics(ep)
    assert (m.succ, m.lss, m.undetermined) == (2, 2, 1)


def test_turn_without_constraints_passes_vacuously_like_the_patience():
    ep = episode("v", turn(0, []), turn(1, [(WORDS, N)]))
    s = metrics.summarize([ep])
    assert s["ISR"] == 0.5  # turn 0 passes, turn 1 fails
    assert s["CSR"] == 0.5  # (1 + 0) / 2


def test_nothing_determinable_gives_nan_not_a_made_up_number():
    s = metrics.summarize([E5])
    assert math.isnan(s["CSR"]) and math.isnan(s["ISR"]) and math.isnan(s["ROB"])
    assert math.isnan(s["REC"])  # no failure with a next turn: nothing to recover
    assert s["unknown"] == 1.0


def test_loose_verdicts_are_used_with_loose_true():
    # strict: JSON fails (fenced); loose: it passes
    ep = episode("l", turn(0, [(WORDS, Y), (JSON, N)], loose=[Y, Y]))
    assert metrics.csr([ep]) == 0.5
    assert metrics.csr([ep], loose=True) == 1.0
    assert metrics.isr([ep]) == 0.0
    assert metrics.isr([ep], loose=True) == 1.0
    assert metrics.summarize([ep], loose=True)["pass_rate/format"] == 1.0


def test_group_pass_rates_by_hand():
    rates = metrics.group_pass_rates([E1, E2])
    # length: E1 y y y n, E2 y y n -> 5/7; format: E1 y n y -> 2/3; case: E1 y n, E2 y y -> 3/4
    assert rates == pytest.approx({"length": 5 / 7, "format": 2 / 3, "case": 3 / 4})
    # catalog group order: format before case before length
    assert list(rates) == ["format", "case", "length"]


def test_group_pass_rates_skip_unknown_only_groups():
    # emotion has only unknown verdicts in E4: no rate rather than a fake 0
    assert metrics.group_pass_rates([E4]) == pytest.approx({"length": 2 / 3})


def test_survival_curve():
    # lengths 4 and 3: all reach turns 0..3, only E1 reaches 4
    assert metrics.survival_curve([E1, E2]) == [1.0, 1.0, 1.0, 1.0, 0.5]
    # an episode with no turn at all survives only t = 0
    assert metrics.survival_curve([episode("z"), E3]) == [1.0, 0.5, 0.5]


def test_summary_is_flat_floats():
    s = metrics.summarize([E1, E2])
    assert all(isinstance(v, float) for v in s.values())
    expected_keys = {"episodes", "turns", "EDR_len", "EDR_acc", "EDR_succ", "EDR_lss", "CSR", "ISR", "REC", "ROB"}
    assert expected_keys <= set(s)
    assert {"pass_rate/length", "pass_rate/format", "pass_rate/case"} <= set(s)


@pytest.mark.parametrize(
    "call",
    [
        metrics.summarize,
        metrics.csr,
        metrics.isr,
        metrics.recovery,
        metrics.robustness,
        metrics.endurance,
        metrics.group_pass_rates,
        metrics.survival_curve,
        metrics.unknown_count,
    ],
)
def test_empty_episode_list_is_a_clear_error(call):
    with pytest.raises(DataFormatError, match="at least one episode"):
        call([])


def test_single_episode_instead_of_list_is_a_clear_error():
    with pytest.raises(DataFormatError, match="list of episodes"):
        metrics.summarize(E1)


def test_verdict_count_mismatch_names_the_turn():
    bad = turn(0, [(WORDS, Y), (JSON, Y)])
    bad.verdicts = bad.verdicts[:1]
    with pytest.raises(DataFormatError, match="episode 'bad' turn 0"):
        metrics.summarize([episode("bad", bad)])


def test_json_round_trip_keeps_metrics():
    again = [Episode.from_json(e.to_json()) for e in (E1, E2, E4)]
    assert metrics.summarize(again) == pytest.approx(metrics.summarize([E1, E2, E4]))


def _dialogue(pattern: str, done: str) -> Episode:
    """An episode from a string of P (all pass) and F (a failed constraint), one turn per letter."""
    return episode(pattern, *(turn(i, [(WORDS, Y if c == "P" else N)]) for i, c in enumerate(pattern)), done=done)


# Each row: a dialogue, the value EvolIF's score.py prints for it (run on a hand-made eval file with
# the same pass/fail sequence), and ifgym's REC. Patience 3: "FFF" ends with the patience.
REC_EDGES = [
    ("FFF", "patience", 0.0, 0.0),  # 0 recoveries / (3 - 0 - 1) failures with a next turn
    ("PFPFFF", "patience", 1 / 3, 1 / 3),  # 1 / (6 - 2 - 1)
    ("FPFFF", "patience", 1 / 3, 1 / 3),  # 1 / (5 - 1 - 1)
    # alone in a run, a dialogue with no failure that has a next turn leaves REC unmeasured: n/a (NaN)
    ("PPP", "script_end", 0.0, math.nan),  # script: 0 / -1 (prints 0.0); ifgym: no failure, nothing to recover
    ("PPF", "script_end", math.nan, math.nan),  # script: 0 / 0; ifgym: the only failure has no next turn
    ("PFP", "script_end", math.inf, 1.0),  # script: 1 / 0; ifgym: 1 recovered of 1
    ("PFPFP", "script_end", 2.0, 1.0),  # script: 2 / 1; ifgym: 2 of 2
]


@pytest.mark.parametrize(("pattern", "done", "script", "ours"), REC_EDGES)
def test_rec_edge_cases_against_score_py(pattern: str, done: str, script: float, ours: float) -> None:
    dialogue = _dialogue(pattern, done)
    got = metrics.recovery_script([dialogue])
    if math.isnan(script):
        assert math.isnan(got)
    else:
        assert got == script
    assert metrics.recovery([dialogue]) == pytest.approx(ours, nan_ok=True)


def test_a_model_that_never_passes_has_no_perfect_rec() -> None:
    # the run: one-turn dialogues that all fail (CSR 0): no failure had a next turn, so REC is n/a
    never = [_dialogue("F", "patience") for _ in range(3)]
    s = metrics.summarize(never)
    assert s["CSR"] == 0.0 and math.isnan(s["REC"])
    assert metrics.episode_metrics(never[0]).rec == 1.0  # per dialogue, nothing was left unrecovered
    assert math.isnan(metrics.recovery_script(never))  # EvolIF's arithmetic stays available: 0 / 0 per dialogue


def test_rec_script_mean_carries_the_scripts_edge_values() -> None:
    patience, clean = _dialogue("PFPFFF", "patience"), _dialogue("PPP", "script_end")
    assert metrics.recovery_script([patience, clean]) == pytest.approx(1 / 6)  # (1/3 + 0) / 2
    assert metrics.recovery([patience, clean]) == pytest.approx(2 / 3)  # (1/3 + 1) / 2
    assert math.isnan(metrics.recovery_script([patience, _dialogue("PPF", "script_end")]))  # one NaN spoils it


# env=evolif_paper: a dialogue with no failure that has a next turn (ifgym's 0/0) counts as score.py counts
# a dialogue without failures (0 / -1 = -0.0, i.e. 0), and so does the P P F case, where the script's mean is NaN
PAPER_REC = [
    ("PFPFFF", "patience", 1 / 3),  # the script's own number where it is sound: 1 / (6 - 2 - 1)
    ("PPP", "script_end", 0.0),  # no failure: 0, as score.py prints (ifgym's default: 1.0)
    ("PPF", "script_end", 0.0),  # the only failure has no next turn: 0 recoveries of 0 -> 0
    ("F", "patience", 0.0),  # one failed turn, then the end
    ("PFP", "script_end", 1.0),  # 1 recovered of 1 (the script's 1 / 0 = inf is not followed)
]


@pytest.mark.parametrize(("pattern", "done", "rec"), PAPER_REC)
def test_evolif_paper_rec_follows_score_py_on_the_zero_over_zero_case(pattern: str, done: str, rec: float) -> None:
    dialogue = _dialogue(pattern, done)
    assert metrics.summarize_paper([dialogue])["REC"] == rec
    ratios = metrics.summary_ratios_paper([metrics.episode_row(dialogue)])["REC"]
    assert ratios[0][0] / ratios[1][0] == rec  # the bootstrap's fast path agrees


def test_evolif_paper_rec_averages_every_dialogue_and_leaves_the_rest_alone() -> None:
    patience, clean = _dialogue("PFPFFF", "patience"), _dialogue("PPP", "script_end")
    paper, ours = metrics.summarize_paper([patience, clean]), metrics.summarize([patience, clean])
    assert paper["REC"] == pytest.approx(1 / 6)  # (1/3 + 0) / 2, what score.py prints for these two
    assert ours["REC"] == pytest.approx(2 / 3)  # (1/3 + 1) / 2
    assert {k: v for k, v in paper.items() if k != "REC"} == {k: v for k, v in ours.items() if k != "REC"}
    assert metrics.summarize_paper([_dialogue("F", "patience")] * 2)["REC"] == 0.0  # never n/a, where ifgym says n/a
    assert metrics.HEADLINE_METRIC == "STA"  # EvolIF's holistic metric leads, in every preset
    assert "score.py" in metrics.PAPER_DEFINITIONS["REC"]
