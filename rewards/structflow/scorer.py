"""StructFlow's turn scorer (`StructFlowScorer`): rule-checkable checklist items by a rule, the rest by the judge.

Items that carry a rule-checkable constraint (`ChecklistItem.constraint`) or whose question a rule
reads (`ifgym.rewards.questions`) are decided by the rule; only the rest go to the judge, and
without a judge those are `unknown`. Labels are the item types, weights the items' weights
(2 structural, 1 intra).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ifgym.core import ChecklistItem, TurnSpec, Verdict
from ifgym.rewards.checks import check
from ifgym.rewards.questions import QuestionRule, question_rule
from ifgym.rewards.scorer import RulesThenJudgeScorer, Scores, no_judge
from ifgym.rewards.structflow.judge import ChecklistJudge

__all__ = ["StructFlowScorer"]

# ---------------------------------------------------------------------------------------------
# The turn scorer
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _question_rule(question: str) -> QuestionRule | None:
    return question_rule(question)  # checklists repeat their questions turn after turn: parse each once


class StructFlowScorer(RulesThenJudgeScorer):
    """Scores a turn's checklist: rule-decidable items by a rule, the others in one judge call.

    An item is rule-decidable when it carries a rule-checkable constraint, or (`question_rules`,
    on by default) when its question is one of the fixed forms `ifgym.rewards.questions` reads
    ("Is the response limited to 150 words?", "Does the response include the keyword 'X'?", …):
    a rule answers those exactly where a small judge would say yes to them. Such verdicts have
    source "rule". `judge_rule_items=True` sends every item to the judge (the benchmark's way).
    `judge_golden=True` shows the judge the turn's reference answer when the dataset has one
    (GraphIF's evaluator does; StructFlowBench's does not).
    """

    def __init__(
        self,
        judge: ChecklistJudge | None = None,
        *,
        judge_rule_items: bool = False,
        question_rules: bool = True,
        judge_golden: bool = False,
    ):
        self.judge = judge
        self.judge_rule_items = judge_rule_items
        self.question_rules = question_rules
        self.judge_golden = judge_golden

    def _judge_options(self, spec: TurnSpec) -> dict[str, Any]:
        """`judge_golden`: the turn's reference answer goes to the judge (as GraphIF's evaluator shows it).

        On GraphIF's sets the judge names the turns 'Round 0', 'Round 1', ..., as their questions do.
        """
        golden = spec.meta.get("golden_answer") if self.judge_golden else None
        options: dict[str, Any] = {"golden": golden} if golden is not None else {}
        if spec.meta.get("turn_names") == "rounds":
            options["rounds"] = True
        return options

    unjudged = no_judge(
        "this item needs a judge (judge='llm'); rules decide only items with a rule-checkable constraint"
    )

    def _items(self, spec: TurnSpec) -> Sequence[ChecklistItem]:
        return spec.checklist

    def _rule(self, item: ChecklistItem) -> Any:
        """The item's rule (a Constraint or a QuestionRule), or None when the judge must answer it."""
        if self.judge_rule_items:
            return None
        if item.constraint is not None and not item.constraint.judged:
            return item.constraint
        return _question_rule(item.question) if self.question_rules else None

    def _split(self, reply: str, spec: TurnSpec) -> tuple[dict[int, Verdict], dict[int, Verdict], list[int]]:
        strict, loose, asked = {}, {}, []
        for i, item in enumerate(spec.checklist):
            rule = self._rule(item)
            if rule is None:
                asked.append(i)
            elif isinstance(rule, QuestionRule):
                strict[i] = loose[i] = rule.check(reply)
            else:
                strict[i] = check(rule, reply)
                loose[i] = strict[i] if strict[i].label == "yes" else check(rule, reply, loose=True, as_is=strict[i])
        return strict, loose, asked

    def _merge(self, spec: TurnSpec, strict: dict[int, Verdict], loose: dict[int, Verdict]) -> Scores:
        n = range(len(spec.checklist))
        return Scores(
            [strict[i] for i in n],
            [loose[i] for i in n],
            [item.type for item in spec.checklist],
            [float(item.weight) for item in spec.checklist],
        )
