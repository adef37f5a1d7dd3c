"""The rubric interface: known verdicts -> known rewards, patience and ends (default and FlexBench rubrics)."""

from __future__ import annotations

import math

import pytest
from support.paths import DATA

from ifgym.core import Verdict
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.rewards.evolif.scorer import EvolIFScorer
from ifgym.rewards.flexbench import FlexBenchRubric, load_dimensions
from ifgym.rewards.rubric import Ending, Grade, Patience, Rubric, VerdictRubric
from ifgym.rewards.scorer import Scores
from ifgym.rewards.tasks import EVOLIF
from ifgym.simulators.evolif.replay import ReplayUser

DIALOGUE = DATA / "evolif_dialogue.jsonl"


def scores(labels: str, groups: str | None = None) -> Scores:
    """Scores from a string of labels: y = yes, n = no, u = unknown (one group letter per item if given)."""
    names = {"y": "yes", "n": "no", "u": "unknown"}
    verdicts = [Verdict(names[c], "", "rule") for c in labels]
    return Scores(verdicts, list(verdicts), list(groups) if groups else ["g"] * len(verdicts))


# --- the default rubric ---------------------------------------------------------------------------------


def test_default_rubric_rewards_and_patience_over_a_dialogue():
    rubric = VerdictRubric("fraction", patience=2)
    rubric.reset()
    played = []
    for labels in ["yny", "yu", "yy", "n", "nn"]:
        grade = rubric.grade(scores(labels))
        played.append((grade.reward, rubric.patience.value, rubric.end("reply", last_turn=False)))
    assert played == [
        (pytest.approx(0.666667, abs=1e-6), 1, None),  # 2 yes of 3 known; a no costs one
        (1.0, 1, None),  # the unknown counts neither way, and neither passes nor fails the turn
        (1.0, 2, None),  # a passing turn refills patience
        (0.0, 1, None),
        (0.0, 0, Ending("patience")),  # out of patience: the dialogue ends (terminated, not truncated)
    ]
    rubric.reset()
    assert rubric.patience.value == 2


def test_default_rubric_modes_on_the_same_verdicts():
    assert VerdictRubric("all_pass").grade(scores("yu")).reward == 0.0  # an unknown is not a pass
    assert VerdictRubric("all_pass").grade(scores("yy")).reward == 1.0
    weighted = VerdictRubric("weighted", {"a": 3.0})
    assert weighted.grade(scores("yn", groups="ab")).reward == 0.75  # 3 / (3 + 1)
    assert weighted.grade(scores("ny", groups="ab")).reward == 0.25


def test_default_rubric_grade_records_the_tally():
    grade = VerdictRubric().grade(scores("uu"))
    assert grade == Grade(
        0.0,
        False,  # only unknowns: the reward is not defined
        info={"all_pass": False, "unknown": 2, "reward_defined": False},
        record={"unknown": 2, "reward_defined": False},
    )
    assert VerdictRubric().grade(scores("")).reward == 1.0  # nothing asked: vacuously satisfied


def test_default_rubric_end_rule():
    rubric = VerdictRubric(patience=None)
    rubric.reset()
    for _ in range(5):
        rubric.grade(scores("n"))
    assert rubric.end("reply", last_turn=False) is None  # patience off never runs out
    assert rubric.end("reply", last_turn=True) == Ending("max_turns", truncated=True)
    assert rubric.scores_turn(None) and rubric.close(grade := rubric.grade(scores("y")), Ending("x")) is grade


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"mode": "fractoin"}, UnknownNameError, "Did you mean 'fraction'"),
        ({"mode": "fraction", "weights": {"a": 1.0}}, ConfigError, "reward_weights only apply"),
        ({"mode": "weighted", "weights": {"a": -1}}, ConfigError, r"reward_weights\['a'\]"),
        ({"patience": 0}, ConfigError, "patience must be a positive int"),
    ],
)
def test_default_rubric_refuses_bad_settings(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        VerdictRubric(**kwargs)


def test_a_rubric_needs_a_grade():
    class NoGrade(Rubric):
        pass

    with pytest.raises(TypeError):
        NoGrade()


# --- FlexBench's rubric ----------------------------------------------------------------------------------

# five dimensions: two base actions, a branch of the first, two always-on rules
DIMS = load_dimensions(
    {
        "schema": "ifgym.flexbench.dimensions/v1",
        "sop": "toy",
        "dimensions": [
            {"id": "ask", "criterion": "Asks the name?", "precondition": None},
            {"id": "spell", "criterion": "Spells it back?", "precondition": "If the name is unusual"},
            {"id": "fee", "criterion": "States the fee?", "precondition": None},
            {"id": "polite", "criterion": "Stays polite?", "precondition": "always"},
            {"id": "short", "criterion": "Under 80 words?", "precondition": "always"},
        ],
        "groups": [{"base": "ask", "branches": ["spell"]}],
    }
)


def flex(labels: str) -> Scores:
    """Scores in DIMS' order (ask, spell, fee, polite, short)."""
    return scores(labels)


def test_flexbench_turn_rewards_count_newly_satisfied_and_newly_broken_dimensions():
    rubric = FlexBenchRubric(DIMS, reward="turn")
    rubric.reset()
    rewards = [rubric.grade(flex(labels)).reward for labels in ["uyuyy", "yyuyy", "yyyny", "yyyny"]]
    # 1: the branch's yes is gated out (its base action not attempted); the kept rules earn nothing -> 0
    # 2: ask and spell newly satisfied: 2 of 5 -> 0.4
    # 3: fee newly satisfied, polite newly broken: (1 - 1) / 5 -> 0
    # 4: nothing new, polite already charged -> 0
    assert rewards == [0.0, 0.4, 0.0, 0.0]
    rubric.reset()
    assert rubric.grade(flex("uuuny")).reward == -0.2  # a rule broken at once: negative


def test_flexbench_grade_info_and_unscored_turns():
    rubric = FlexBenchRubric(DIMS, reward="both")
    rubric.reset()
    grade = rubric.grade(flex("yuunu"))
    assert grade.info["newly_satisfied"] == ["ask"] and grade.info["newly_broken"] == ["polite"]
    assert grade.reward == 0.0 and grade.info["unknown"] == 3
    assert (grade.info["coverage"], grade.info["achievement"], grade.info["compliance"]) == (0.5, None, 0.0)
    assert set(grade.record) == {"coverage", "achievement", "compliance", "newly_satisfied", "newly_broken"}
    assert rubric.grade(None) == Grade(0.0, False, info={"unknown": 0, "reward_defined": False})


def test_flexbench_episode_term_at_the_end():
    rubric = FlexBenchRubric(DIMS, reward="both", end_weight=2.0)
    rubric.reset()
    rubric.grade(flex("yuuyy"))  # ask: +1/5
    last = rubric.grade(flex("yyyny"))  # spell, fee +2/5; polite broken -1/5 -> 0.2
    assert last.reward == pytest.approx(0.2, abs=1e-12)
    closed = rubric.close(last, Ending("assistant_closed"))
    # coverage 2/2, achievement 1/1 -> 1.0; compliance 1 kept of 2 -> 0.5; score 0.5, × end_weight 2 -> 1.0
    assert closed.info["episode_score"] == 0.5 and closed.reward == pytest.approx(1.2, abs=1e-12)
    episode_only = FlexBenchRubric(DIMS, reward="episode", end_weight=2.0)
    episode_only.reset()
    assert episode_only.grade(flex("yyyny")).reward == 0.0
    assert episode_only.close(episode_only.grade(flex("yyyny")), Ending("max_turns", True)).reward == 1.0


def test_flexbench_end_rule_and_judging_schedule():
    rubric = FlexBenchRubric(DIMS, reward="episode", judge_every_turn=False, closes=lambda r: r.endswith("Bye."))
    assert not rubric.scores_turn(None) and rubric.scores_turn(Ending("user_hung_up"))
    assert rubric.end("Thanks. Bye.", last_turn=False) is None  # the caller decides before the last turn
    assert rubric.end("Thanks. Bye.", last_turn=True) == Ending("assistant_closed")
    assert rubric.end("Anything else?", last_turn=True) == Ending("max_turns", truncated=True)
    assert rubric.patience.full is None  # the caller keeps its own patience


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"reward": "turns"}, UnknownNameError, "Did you mean 'turn'"),
        ({"end_weight": math.inf}, ConfigError, "end_weight"),
        ({"judge_every_turn": False}, ConfigError, "judge_every_turn"),
    ],
)
def test_flexbench_rubric_refuses_bad_settings(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        FlexBenchRubric(DIMS, **kwargs)


# --- a rubric plugged into the env's loop ------------------------------------------------------------------


class CountYesUntilAFailure(Rubric):
    """A toy task: one point per yes verdict; the first turn with a no ends the dialogue."""

    def __init__(self) -> None:
        self.patience = Patience(None)
        self.failed = False

    def reset(self) -> None:
        super().reset()
        self.failed = False

    def grade(self, scores: Scores | None) -> Grade:
        yes = sum(v.label == "yes" for v in scores.strict)
        self.failed = any(v.label == "no" for v in scores.strict)
        return Grade(float(yes), True, info={"yes": yes})

    def end(self, reply: str, last_turn: bool) -> Ending | None:
        return Ending("first_failure") if self.failed else super().end(reply, last_turn)


def test_the_env_loop_runs_any_rubric():
    env = ChatEnv(task=EVOLIF, user=ReplayUser(DIALOGUE), scorer=EvolIFScorer(None), rubric=CountYesUntilAFailure())
    env.reset(seed=0)
    _, reward, term, trunc, info = env.step("Roof bees need a calm hive.")  # turn 1 asks: start with 'R'
    assert (reward, term, trunc, info["yes"], info["done_reason"]) == (1.0, False, False, 1, None)
    _, reward, term, trunc, info = env.step("nothing")  # breaks the live rules
    assert (reward, term, trunc, info["done_reason"]) == (0.0, True, False, "first_failure")
    assert [t.reward for t in env.episode.turns] == [1.0, 0.0] and env.episode.done_reason == "first_failure"
