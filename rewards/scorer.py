"""Score one reply against its turn's spec: rules where they can, a judge where not.

Every env's scorer has the same two methods, `score(reply, spec, history)` and the awaited
`ascore(...)`, and returns `Scores`: one verdict per item (strict and loose), each item's group
(its constraint group, or its checklist type) and weight. The env turns those into reward and
patience.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ifgym.core import TurnSpec, Verdict
from ifgym.llm.conversation import Steps, awaits_blocking, steps_of, twin


@dataclass(frozen=True)
class Scores:
    """Strict and loose verdicts, one per scored item, with each item's group and weight (same order)."""

    strict: list[Verdict]
    loose: list[Verdict]
    groups: list[str]  # each item's group (an EvolIF constraint group, a StructFlow item type, a FlexBench dimension)
    weights: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.weights:
            object.__setattr__(self, "weights", [1.0] * len(self.strict))
        if not len(self.strict) == len(self.loose) == len(self.groups) == len(self.weights):
            raise ValueError("Scores needs one strict verdict, loose verdict, group and weight per item")


class TurnScorer(Protocol):
    """What an env needs from its scorer. `reset` is called at every env reset (per-episode state).

    ifgym's scorers write `score` once with `ifgym.llm.conversation.twin`, which gives `ascore` too.
    A scorer of your own may subclass this and write only `score`: its `ascore` then runs `score`
    in a worker thread (so a blocking judge call keeps the event loop free for other episodes).
    """

    def reset(self) -> None: ...

    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores: ...

    ascore = awaits_blocking("score", in_thread=True)


def no_judge(reason: str) -> Verdict:
    """The verdict on an item only a judge can decide when no judge is configured: unknown, source "none"."""
    return Verdict("unknown", reason, "none")


class RulesThenJudgeScorer:
    """The shape every checklist scorer shares: rules decide what they can, one judge call the rest.

    A subclass says which items there are and which a rule decides (`_items`, `_split`), and each
    item's group and weight (`_merge`); the judge (or `unjudged`, when there is none) answers the
    items a rule cannot, in one call per turn.
    """

    judge: Any = None
    unjudged: Verdict = no_judge("this item needs a judge (judge='llm')")

    def reset(self) -> None:
        """Nothing to forget: each turn is scored on its own."""

    def _items(self, spec: TurnSpec) -> Sequence[Any]:
        raise NotImplementedError

    def _split(self, reply: str, spec: TurnSpec) -> tuple[dict[int, Verdict], dict[int, Verdict], list[int]]:
        """Rule verdicts (strict, loose) by item index, and the indices left to the judge."""
        raise NotImplementedError

    def _merge(self, spec: TurnSpec, strict: dict[int, Verdict], loose: dict[int, Verdict]) -> Scores:
        raise NotImplementedError

    def _judge_options(self, spec: TurnSpec) -> dict[str, Any]:
        """More keyword arguments for the judge's call on this turn (none by default)."""
        return {}

    def _judge_history(self, history: list[dict] | None) -> list[dict] | None:
        """The part of `history` the judge is shown (all of it by default)."""
        return history

    @twin
    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Steps[Scores]:
        """Verdicts for `reply` on the spec's items; `history` is the dialogue before it (judge context).

        `ascore` awaits the judge's call.
        """
        strict, loose, asked = self._split(reply, spec)
        if asked:
            items = [self._items(spec)[i] for i in asked]
            options = self._judge_options(spec)
            if self.judge:
                judged = yield from steps_of(self.judge, "judge", reply, items, self._judge_history(history), **options)
            else:
                judged = [self.unjudged] * len(asked)
            for i, v in zip(asked, judged, strict=True):
                strict[i] = loose[i] = v
        return self._merge(spec, strict, loose)
