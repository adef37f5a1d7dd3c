"""Checklist questions a rule decides: which wordings are read, and the verdicts on known replies."""

from __future__ import annotations

import pytest

from ifgym.core import ChecklistItem, TurnSpec
from ifgym.llm import CannedClient
from ifgym.rewards.questions import question_rule
from ifgym.rewards.structflow import ChecklistJudge, StructFlowScorer

TEN = "One two three four five six seven eight nine ten."  # 10 words, 1 sentence
STATE = "A state-of-the-art, well-known tool."  # 4 words as a reader counts them (hyphenated words are one)


@pytest.mark.parametrize(
    ("question", "reply", "label"),
    [
        ("Is the response limited to 10 words?", TEN, "yes"),  # "limited to N": at most N
        ("Is the response limited to 9 words?", TEN, "no"),
        ("Is the response limited to no more than 10 words?", TEN, "yes"),
        ("Is the response under 10 words?", TEN, "no"),  # "under N": fewer than N
        ("Is the response at least 10 words long?", TEN, "yes"),
        ("Is the response more than 10 words?", TEN, "no"),
        ("Is the response exactly ten words long?", TEN, "yes"),  # a number written as a word
        ("Is the response limited to 4 words?", STATE, "yes"),  # hyphenated words count once
        ("Is the response limited to 1 sentence?", TEN + " Eleven.", "no"),  # two sentences (pysbd)
        ("Is the response exactly three paragraphs long?", "a\n\nb\n\nc", "yes"),
        ("Does the response include the keyword 'pigment'?", "Plants have pigments.", "yes"),  # a plural is fine
        ("Does the response include the keyword 'Republic'?", "A Republican view.", "no"),  # whole words only
        ("Does the response include the keywords 'ATP', 'glucose', and 'oxygen'?", "ATP and glucose.", "no"),
        ("Does the response include the keywords 'ATP' and 'glucose'?", "atp makes GLUCOSE", "yes"),  # any case
        ("Does the response include the keyword 'calvin cycle'?", "The Calvin  cycle runs.", "yes"),  # phrases
        ("Does the response avoid using the word 'canvas'?", "Oil on canvas.", "no"),
        ("Does the response refrain from using the word 'techno'?", "Technology moves on.", "yes"),
        ("Does the response avoid explicitly mentioning the word 'Renaissance'", "The renaissance!", "no"),
        ("Does the response start with 'In summary'?", '"In summary, yes."', "yes"),  # quote marks ignored
        ("Does the response start with 'In summary'?", "In summarizing, yes.", "no"),  # whole words
        ("Does the response start with 'Heart health foods include...'?", "Heart health foods include fish.", "yes"),
        ("Does the response end with 'Thank you'?", "That is all. Thank you!", "yes"),
    ],
)
def test_rule_verdicts_on_known_replies(question, reply, label):
    rule = question_rule(question)
    assert rule is not None, question
    verdict = rule.check(reply)
    assert (verdict.label, verdict.source) == (label, "rule"), verdict.reason


@pytest.mark.parametrize(
    "question",
    [
        "Is the response limited to about 150 words?",  # approximate: a judge's call
        "Is the response around 200 words?",
        "Is the response limited to no more than 150 words per field?",  # per part, not the whole reply
        "Does the response include the word 'civilization' at least twice?",  # a count the form does not read
        "Does the response include specific keywords such as 'classical', 'rock', 'jazz', etc.?",
        "Is the summary limited to no more than 50 words?",  # not about the response as a whole
        "Does the response focus on the history of jazz?",
        "Is the c2 conversation a follow-up of c1 conversation?",
        "",
    ],
)
def test_other_wordings_are_left_to_the_judge(question):
    assert question_rule(question) is None


def test_the_scorer_answers_rule_questions_itself_and_asks_the_judge_the_rest():
    items = (
        ChecklistItem("q1", "Is the response limited to 5 words?", "Quantity Format Constraint"),
        ChecklistItem("q2", "Does the response focus on dogs?", "Content Constraint"),
    )
    client = CannedClient(['{"results": [{"item": 1, "judgement": "Yes"}]}'], role="judge")
    scores = StructFlowScorer(ChecklistJudge(client)).score(TEN, TurnSpec(checklist=items), [])
    assert [v.label for v in scores.strict] == ["no", "yes"]
    assert scores.strict[0].source == "rule" and "10 words" in scores.strict[0].reason
    assert "<item 1>Does the response focus on dogs?</item>" in client.requests[0][-1]["content"]
    assert "limited to 5 words" not in client.requests[0][-1]["content"]
    # the benchmark's way: the judge answers both
    client = CannedClient(['{"results": [{"item": 1, "judgement": "Yes"}, {"item": 2, "judgement": "Yes"}]}'])
    scores = StructFlowScorer(ChecklistJudge(client), judge_rule_items=True).score(TEN, TurnSpec(checklist=items))
    assert [v.label for v in scores.strict] == ["yes", "yes"]
