"""Scoring: the constraint catalog and its rule checkers, the LLM judge, reward/patience, metrics, TRL rewards.

Import public names from here (`from ifgym.rewards import Constraint, from_evolif, summarize`).
"""

from ifgym import lazy_submodules
from ifgym.rewards.constraints import (
    GROUPS,
    JUDGED_GROUPS,
    REGISTRY,
    RULE_GROUPS,
    SEMANTICS,
    Constraint,
    check,
    conflicts,
    ids_in_group,
)
from ifgym.rewards.evolif_compat import evolif_check, from_evolif, to_evolif
from ifgym.rewards.evolif_judge import EvolIFJudge
from ifgym.rewards.metrics import group_pass_rates, summarize, survival_curve
from ifgym.rewards.rubric import Patience, turn_outcome
from ifgym.rewards.scorer import Scorer, Scores
from ifgym.rewards.trl import ChecklistReward, ConstraintReward, EpisodeReturn, FlexBenchReward, TurnReward

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "GROUPS",
    "JUDGED_GROUPS",
    "REGISTRY",
    "RULE_GROUPS",
    "SEMANTICS",
    "ChecklistReward",
    "Constraint",
    "ConstraintReward",
    "EvolIFJudge",
    "EpisodeReturn",
    "FlexBenchReward",
    "Patience",
    "Scorer",
    "Scores",
    "check",
    "conflicts",
    "evolif_check",
    "from_evolif",
    "group_pass_rates",
    "ids_in_group",
    "summarize",
    "survival_curve",
    "to_evolif",
    "TurnReward",
    "turn_outcome",
]
