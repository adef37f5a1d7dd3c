"""EvolIF's scorer: a turn's live constraints, rule checkers for the rule ones, one judge call for the judged ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ifgym.core import TurnSpec, Verdict
from ifgym.core.constraints import Constraint
from ifgym.errors import UnknownNameError
from ifgym.rewards.checks import SEMANTICS, check
from ifgym.rewards.scorer import RulesThenJudgeScorer, Scores, no_judge

if TYPE_CHECKING:
    from ifgym.rewards.evolif.judge import EvolIFJudge

__all__ = ["EvolIFScorer"]


class EvolIFScorer(RulesThenJudgeScorer):
    """Scores a turn's constraints: rule checkers for rule constraints, one batched judge call for judged ones.

    `semantics` picks whose reading the rules apply (see `ifgym.rewards.check`): "ifgym" gives
    strict and loose verdicts; "evolif" gives EvolIF's evaluator's verdict, which then fills both
    the strict and the loose list (EvolIF has one reading).
    """

    unjudged = no_judge("judged constraint but no judge configured (use judge='llm')")

    def __init__(self, judge: EvolIFJudge | None = None, semantics: str = "ifgym"):
        if semantics not in SEMANTICS:
            raise UnknownNameError("checker semantics", semantics, SEMANTICS)
        self.judge = judge
        self.semantics = semantics

    def _items(self, spec: TurnSpec) -> Sequence[Constraint]:
        return spec.constraints

    def _split(self, reply: str, spec: TurnSpec) -> tuple[dict[int, Verdict], dict[int, Verdict], list[int]]:
        strict, loose, asked = {}, {}, []
        for i, c in enumerate(spec.constraints):
            if c.judged:
                asked.append(i)
                continue
            if self.semantics == "evolif":
                strict[i] = loose[i] = check(c, reply, semantics="evolif")
            else:
                strict[i] = check(c, reply)
                loose[i] = strict[i] if strict[i].label == "yes" else check(c, reply, loose=True, as_is=strict[i])
        return strict, loose, asked

    def _merge(self, spec: TurnSpec, strict: dict[int, Verdict], loose: dict[int, Verdict]) -> Scores:
        n = range(len(spec.constraints))
        return Scores([strict[i] for i in n], [loose[i] for i in n], [c.group for c in spec.constraints])
