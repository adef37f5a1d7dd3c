"""The scorer interface: one `score` gives the blocking and the awaited form, for ifgym's scorers and a user's own."""

from __future__ import annotations

import asyncio

from ifgym.core import ChecklistItem, TurnSpec, Verdict
from ifgym.rewards.ntm import NTMScorer
from ifgym.rewards.scorer import Scores, TurnScorer

ITEMS = (ChecklistItem("a", "Is it polite?", "tone"), ChecklistItem("b", "Does it greet?", "greeting"))
SPEC = TurnSpec(checklist=ITEMS)
HISTORY = [
    {"role": "user", "content": "first request"},
    {"role": "assistant", "content": "first answer"},
    {"role": "user", "content": "final request"},
]


class OwnScorer(TurnScorer):
    """A user's scorer that writes only `score`: the protocol's `ascore` runs it."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def reset(self) -> None:
        """Nothing per episode."""

    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores:
        """Yes when the reply is longer than one word."""
        self.seen.append(reply)
        verdict = Verdict("yes" if len(reply.split()) > 1 else "no", "", "rule")
        return Scores([verdict], [verdict], ["length"])


def test_a_scorer_with_only_score_gets_an_awaited_ascore():
    scorer = OwnScorer()
    assert asyncio.run(scorer.ascore("two words", SPEC)) == scorer.score("two words", SPEC)
    assert asyncio.run(scorer.ascore("one", SPEC)).strict[0].label == "no"
    assert scorer.seen == ["two words", "two words", "one"]


class PairJudge:
    """A judge of the user's own with a hand-written judge/ajudge pair: each says which form was called."""

    def __init__(self) -> None:
        self.histories: list[list[dict] | None] = []

    def judge(self, reply, items, history=None):
        self.histories.append(history)
        return [Verdict("yes", "blocking", "judge:pair") for _ in items]

    async def ajudge(self, reply, items, history=None):
        self.histories.append(history)
        return [Verdict("no", "awaited", "judge:pair") for _ in items]


def test_a_checklist_scorer_calls_its_judges_blocking_or_awaited_form_with_the_final_request():
    judge = PairJudge()
    scorer = NTMScorer(judge)
    blocking = scorer.score("reply", SPEC, HISTORY)
    awaited = asyncio.run(scorer.ascore("reply", SPEC, HISTORY))
    assert [v.reason for v in blocking.strict] == ["blocking", "blocking"]
    assert [v.reason for v in awaited.strict] == ["awaited", "awaited"]
    assert blocking.groups == awaited.groups == ["tone", "greeting"]
    # NTM's judge reads the final user request alone, in both forms
    assert judge.histories == [[HISTORY[-1]], [HISTORY[-1]]]


def test_without_a_judge_every_checkpoint_is_unknown_in_both_forms():
    scorer = NTMScorer()
    for scores in (scorer.score("reply", SPEC, HISTORY), asyncio.run(scorer.ascore("reply", SPEC, HISTORY))):
        assert [v.label for v in scores.strict] == ["unknown", "unknown"]
        assert scores.strict[0].source == "none"
