"""Scoring: rule checking (strict, loose, EvolIF's reading), the LLM judges, reward/patience, metrics, TRL rewards.

It uses nothing of `simulators/`: scoring does not depend on the user simulator. The vocabulary it
scores (constraints and their catalog, StructFlow's item types and weights, EvolIF's instruction
format) is `ifgym.core`'s: import those from there. Import scoring's public names from here
(`from ifgym.rewards import check, StructFlowScorer`). Each task's scorer and judge:
EvolIF `EvolIFScorer`/`EvolIFJudge` (metrics: `summarize`, `group_pass_rates`, `survival_curve` are EvolIF's),
StructFlow `StructFlowScorer`/`ChecklistJudge` (its metrics: `ifgym.rewards.structflow.metrics.summarize`), FlexBench
`FlexBenchScorer`/`LLMDimensionJudge`/`DimensionSet` (the rest in `ifgym.rewards.flexbench`), NTM
`NTMScorer`/`NTMRubric` with the checklist judge (TCR and ACT: `ifgym.rewards.ntm.summarize`). An env's own
`summarize` always gives its task's metrics.
"""

from ifgym.lazy import lazy_submodules
from ifgym.rewards.checks import SEMANTICS, check
from ifgym.rewards.evolif.evaluator import evolif_check
from ifgym.rewards.evolif.judge import EvolIFJudge
from ifgym.rewards.evolif.metrics import group_pass_rates, summarize, survival_curve
from ifgym.rewards.evolif.scorer import EvolIFScorer
from ifgym.rewards.flexbench import DimensionSet, FlexBenchScorer, LLMDimensionJudge
from ifgym.rewards.ntm import NTMRubric, NTMScorer
from ifgym.rewards.rubric import Patience, turn_outcome
from ifgym.rewards.scorer import Scores
from ifgym.rewards.structflow.judge import ChecklistJudge
from ifgym.rewards.structflow.scorer import StructFlowScorer
from ifgym.rewards.trl import ChecklistReward, ConstraintReward, EpisodeReturn, FlexBenchReward, TurnReward

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "SEMANTICS",
    "ChecklistJudge",
    "ChecklistReward",
    "ConstraintReward",
    "DimensionSet",
    "EvolIFJudge",
    "EpisodeReturn",
    "FlexBenchReward",
    "FlexBenchScorer",
    "LLMDimensionJudge",
    "NTMRubric",
    "NTMScorer",
    "Patience",
    "EvolIFScorer",
    "Scores",
    "StructFlowScorer",
    "check",
    "evolif_check",
    "group_pass_rates",
    "summarize",
    "survival_curve",
    "TurnReward",
    "turn_outcome",
]
