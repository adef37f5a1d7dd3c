"""Score one reply against its turn's spec: rules where they can, a judge where not.

Every env's scorer has the same two methods, `score(reply, spec, history)` and `ascore(...)`, and
returns `Scores`: one verdict per item (strict and loose), each item's label (its constraint
group, or its checklist type) and weight. The env turns those into reward and patience.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ifgym.core import TurnSpec, Verdict
from ifgym.core.constraints import Constraint
from ifgym.errors import UnknownNameError
from ifgym.rewards.checks import SEMANTICS, check

if TYPE_CHECKING:
    from ifgym.rewards.evolif_judge import EvolIFJudge

NO_JUDGE = Verdict("unknown", "judged constraint but no judge configured (use judge='llm')", "none")


@dataclass(frozen=True)
class Scores:
    """Strict and loose verdicts, one per scored item, with each item's label and weight (same order)."""

    strict: list[Verdict]
    loose: list[Verdict]
    labels: list[str]
    weights: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.weights:
            object.__setattr__(self, "weights", [1.0] * len(self.strict))
        if not len(self.strict) == len(self.loose) == len(self.labels) == len(self.weights):
            raise ValueError("Scores needs one strict verdict, loose verdict, label and weight per item")


class TurnScorer(Protocol):
    """What an env needs from its scorer. `reset` is called at every env reset (per-episode state)."""

    def reset(self) -> None: ...

    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores: ...

    async def ascore(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores: ...


class Scorer:
    """Scores a turn's constraints: rule checkers for rule constraints, one batched judge call for judged ones.

    `semantics` picks whose reading the rules apply (see `ifgym.rewards.check`): "ifgym" gives
    strict and loose verdicts; "evolif" gives EvolIF's evaluator's verdict, which then fills both
    the strict and the loose list (EvolIF has one reading).
    """

    def __init__(self, judge: EvolIFJudge | None = None, semantics: str = "ifgym"):
        if semantics not in SEMANTICS:
            raise UnknownNameError("checker semantics", semantics, SEMANTICS)
        self.judge = judge
        self.semantics = semantics

    def reset(self) -> None:
        """Nothing to forget: each turn is scored on its own."""

    def _rules(self, reply: str, constraints: Sequence[Constraint]) -> tuple[dict[int, Verdict], dict[int, Verdict]]:
        strict, loose = {}, {}
        for i, c in enumerate(constraints):
            if c.judged:
                continue
            if self.semantics == "evolif":
                strict[i] = loose[i] = check(c, reply, semantics="evolif")
            else:
                strict[i] = check(c, reply)
                loose[i] = strict[i] if strict[i].label == "yes" else check(c, reply, loose=True)
        return strict, loose

    @staticmethod
    def _merge(constraints: Sequence[Constraint], strict: dict, loose: dict, idx: list[int], judged) -> Scores:
        for i, v in zip(idx, judged, strict=True):
            strict[i] = loose[i] = v
        n = range(len(constraints))
        return Scores([strict[i] for i in n], [loose[i] for i in n], [c.group for c in constraints])

    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores:
        """Verdicts for `reply` on `spec.constraints`; `history` is the dialogue before it (judge context)."""
        constraints = spec.constraints
        strict, loose = self._rules(reply, constraints)
        idx = [i for i, c in enumerate(constraints) if c.judged]
        judged: Sequence[Verdict] = []
        if idx:
            items = [constraints[i] for i in idx]
            judged = self.judge.judge(reply, items, history) if self.judge else [NO_JUDGE] * len(idx)
        return self._merge(constraints, strict, loose, idx, judged)

    async def ascore(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores:
        """Async twin of `score` (the judge call is awaited)."""
        constraints = spec.constraints
        strict, loose = self._rules(reply, constraints)
        idx = [i for i, c in enumerate(constraints) if c.judged]
        judged: Sequence[Verdict] = []
        if idx:
            items = [constraints[i] for i in idx]
            judged = await self.judge.ajudge(reply, items, history) if self.judge else [NO_JUDGE] * len(idx)
        return self._merge(constraints, strict, loose, idx, judged)
