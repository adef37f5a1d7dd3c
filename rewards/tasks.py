"""Every task's descriptor (`ifgym.core.tasks.Task`): what is task-specific, side by side.

The root package registers each by name (`ifgym.core.tasks.task("evolif")`); envs pass theirs to
`ChatEnv`, and readers of finished runs get it from `ifgym.core.tasks.task_of(episode)`.
"""

from __future__ import annotations

from dataclasses import replace

from ifgym.core import Episode
from ifgym.core.tasks import Task
from ifgym.rewards import composite, ntm
from ifgym.rewards.evolif import metrics as evolif
from ifgym.rewards.flexbench import report as flexbench
from ifgym.rewards.structflow import metrics as structflow

__all__ = [
    "COMPOSITE",
    "EVOLIF",
    "EVOLIF_PAPER",
    "FLEXBENCH",
    "FLEXBENCH_PAPER",
    "NTM",
    "STRUCTFLOW",
    "STRUCTFLOW_PAPER",
]


def checklist_or_constraints(episode: Episode) -> str:
    """The TRL reward of an episode's turns by what they carry: a checklist (or a replayed file), else constraints."""
    if "dialogue" in episode.meta or any(t.spec.checklist for t in episode.turns):
        return "checklist"
    return "constraints"


def checklist(episode: Episode) -> str:
    """Every turn is scored against its checklist (StructFlow's and NTM's judge)."""
    return "checklist"


def dimensions(episode: Episode) -> str:
    """Every turn is scored against the SOP's dimensions (FlexBench)."""
    return "flexbench"


EVOLIF = Task(
    name="evolif",
    summarize=evolif.summarize,  # CSR, ISR, EDR, REC, STA, pass rates per group
    episode_row=evolif.episode_row,
    summarize_rows=evolif.summarize_rows,
    summary_ratios=evolif.summary_ratios,
    headline=evolif.HEADLINE,
    headline_metric=evolif.HEADLINE_METRIC,
    definitions=evolif.DEFINITIONS,
    aliases=evolif.ALIASES,
    judge_suite="evolif",  # the judge audit's suite for the LLM judge of the judged groups
    training_reward=checklist_or_constraints,
)

# env=evolif_paper (metrics="paper"): REC with the 0/0 convention of EvolIF's released score.py
EVOLIF_PAPER = replace(
    EVOLIF,
    name="evolif_paper",
    summarize=evolif.summarize_paper,
    summarize_rows=evolif.summarize_rows_paper,
    summary_ratios=evolif.summary_ratios_paper,
    definitions=evolif.PAPER_DEFINITIONS,
)

STRUCTFLOW = Task(
    name="structflow",
    summarize=structflow.summarize,  # CSR, ISR, WCSR, DRFR and breakdowns
    episode_row=structflow.episode_row,
    summarize_rows=structflow.summarize_rows,
    summary_ratios=structflow.summary_ratios,
    headline=structflow.HEADLINE,
    headline_metric=structflow.HEADLINE_METRIC,
    definitions=structflow.DEFINITIONS,
    judge_suite="structflow",  # the checklist judge's
    training_reward=checklist,
)

# env=structflow_paper (metrics="paper"): WCSR is the papers' pooled equation, the script's per-turn mean beside it
STRUCTFLOW_PAPER = replace(
    STRUCTFLOW,
    name="structflow_paper",
    summarize=structflow.summarize_paper,
    summarize_rows=structflow.summarize_rows_paper,
    summary_ratios=structflow.summary_ratios_paper,
    headline=structflow.PAPER_HEADLINE,
    definitions=structflow.PAPER_DEFINITIONS,
)

FLEXBENCH = Task(
    name="flexbench",
    summarize=flexbench.summarize,  # Coverage, Achievement, Compliance (n/a = NaN), score, per dimension
    episode_row=flexbench.episode_row,
    summarize_rows=flexbench.summarize_rows,
    headline=flexbench.HEADLINE,
    headline_metric=flexbench.HEADLINE_METRIC,
    definitions=flexbench.DEFINITIONS,
    loose_metrics=False,  # dimension verdicts have no loose variant: `ifgym eval` prints strict only
    judge_suite="flexbench",
    training_reward=dimensions,
    opening_line=flexbench.opening_line,  # the policy saw the SOP's opening line before the caller spoke
    turn_reward=flexbench.turn_reward,
    user_meta=flexbench.caller_meta,  # the caller keeps a patience of its own
    report_sections=flexbench.report_sections,  # the per-dimension table and heatmap
)
# env=flexbench_paper: the run's results table leads with the paper's equations (6) and (7)
FLEXBENCH_PAPER = replace(
    FLEXBENCH,
    headline=flexbench.PAPER_HEADLINE,
    headline_metric=flexbench.PAPER_HEADLINE_METRIC,
    definitions=flexbench.PAPER_DEFINITIONS,
)

COMPOSITE = Task(
    name="composite",
    summarize=composite.summarize,  # EvolIF's metrics, StructFlow's, and the cross tables
    episode_row=composite.episode_row,
    summarize_rows=composite.summarize_rows,
    headline=composite.HEADLINE,
    headline_metric=composite.HEADLINE_METRIC,
    definitions=composite.DEFINITIONS,
    aliases=evolif.ALIASES,  # EvolIF's metrics keep their earlier names in its summary too
    judge_suite="structflow",  # the checklist judge's
    training_reward=checklist_or_constraints,
)

NTM = Task(
    name="ntm",
    summarize=ntm.summarize,  # TCR (mean, pooled, per bucket), unknown share, ACT per bucket
    episode_row=ntm.episode_row,
    summarize_rows=ntm.summarize_rows,
    headline=ntm.HEADLINE,
    headline_metric=ntm.HEADLINE_METRIC,
    definitions=ntm.DEFINITIONS,
    judge_suite="structflow",  # the same checklist judge as StructFlow's
    training_reward=checklist,
)
