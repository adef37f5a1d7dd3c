"""Checklist questions a rule decides: which wordings are read, and the verdicts on known replies."""

from __future__ import annotations

import pytest

from ifgym.core import ChecklistItem, TurnSpec
from ifgym.llm import CannedClient
from ifgym.rewards.questions import question_rule
from ifgym.rewards.structflow.judge import ChecklistJudge
from ifgym.rewards.structflow.scorer import StructFlowScorer

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


JSON_FENCED = 'Here it is:\n```json\n{"a": 1}\n```\nEnjoy.'
TABLE = "| a | b |\n|---|---|\n| 1 | 2 |"
BULLETS = "Items:\n- one\n- two\n* three"
NUMBERED = "Steps:\n1. one\n2) two"
CHINESE = "\u5149\u5408\u4f5c\u7528\u662f\u690d\u7269\u7684\u8fc7\u7a0b\u3002"  # photosynthesis is a plant process
JAPANESE = "\u3053\u308c\u306f\u65e5\u672c\u8a9e\u3067\u3059\u3002"  # kana present


@pytest.mark.parametrize(
    ("question", "reply", "label"),
    [
        # length, other wordings
        ("Does the response have exactly 3 paragraphs?", "a\n\nb\n\nc", "yes"),
        ("Does the response contain at least 11 words?", TEN, "no"),
        ("Is the response provided in exactly four paragraphs?", "a\n\nb\n\nc", "no"),
        ("Is the response written in 2 paragraphs?", "a\n\nb", "yes"),  # "in N": exactly N
        ("Is the response written in a single paragraph?", "a\n\nb", "no"),
        ("Is the response limited to one paragraph?", "one block\nstill one", "yes"),
        ("Is the response 10 words or fewer?", TEN, "yes"),
        ("Is the response 11 words or more?", TEN, "no"),
        # keyword counts
        ("Does the response include the word 'civilization' at least twice?", "Civilization and civilizations.", "yes"),
        ("Does the response mention 'jazz' exactly 3 times?", "jazz, Jazz and more jazz", "yes"),
        ("Does the response use the word 'very' at most once?", "very very good", "no"),
        ("Does the response mention 'tea' 2 times?", "tea and teapot", "no"),  # whole words: teapot is not tea
        # formats
        ("Is the response in JSON format?", '{"a": [1, 2]}', "yes"),
        ("Is the response formatted in JSON for clarity?", JSON_FENCED, "yes"),  # a fenced block with prose around
        ("Is the response presented in JSON format?", '{"a": [1, 2', "no"),  # cut off: not JSON
        ("Is the response formatted in Markdown?", "# Title\nText", "yes"),
        ("Is the response in markdown format?", "```markdown\n# Cut off", "yes"),  # a fence left open still counts
        ("Is the response formatted in Markdown?", "Plain text only.", "no"),
        ("Is the response presented in a Markdown table format?", TABLE, "yes"),
        ("Does the response include a table?", "a | b\nno separator row", "no"),
        ("Is the response provided in bullet points?", BULLETS, "yes"),
        ("Does the response use bullet points?", "- just one", "no"),  # a list needs two lines
        ("Is the response formatted as a numbered list?", NUMBERED, "yes"),
        ("Is the response formatted as a numbered list?", BULLETS, "no"),
        # language
        ("Is the response written in English?", "The cat is on the mat.", "yes"),
        ("Is the response written in English?", "Le chat est sur le tapis.", "no"),  # Latin, but no English words
        ("Is the response in Chinese?", CHINESE, "yes"),
        ("Is the response written in Japanese?", CHINESE, "no"),  # Han alone: no kana
        ("Is the response written in Japanese?", JAPANESE, "yes"),
        ("Is the response written in Russian?", "The cat.", "no"),
        # case
        ("Is the response written entirely in lowercase letters?", "all lower here.", "yes"),
        ("Is the response written entirely in lowercase letters?", "Not all lower.", "no"),
        ("Is the response in all capital letters?", "ALL CAPS 123!", "yes"),
        ("Does the response use only uppercase letters?", "MOSTLY Caps", "no"),
    ],
)
def test_more_question_forms_on_known_replies(question, reply, label):
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
        "Does the response include the word 'civilization' about twice?",  # approximate counts: a judge's call
        "Is the response structured in a well-organized markdown format?",  # "well-organized" is a judgement
        "Is the response written in a simple, easy-to-understand language?",  # not a language's name
        "Is the response written in French?",  # a Latin-script language other than English: the judge's
        "Does the response use a table to compare the two options?",  # more than the format
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
