"""The constraint catalog: every rule id on a table of replies, params validation, conflicts, loose checks."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from support.texts import drawn_pairs

from ifgym.core import Verdict, catalog
from ifgym.core.constraints import (
    CONFLICTS,
    GROUPS,
    JUDGED_GROUPS,
    REGISTRY,
    RULE_GROUPS,
    Constraint,
    ConstraintType,
    conflicts,
    constraint_type,
    count_keyword,
    ids_in_group,
    keyword_pattern,
    may_contain,
    register,
)
from ifgym.errors import ActionError, ConstraintParamsError, JudgeRequiredError, UnknownNameError
from ifgym.rewards.checks import check, loose_variants

FENCED_JSON = '```json\n{"city": "Lima", "people": 10}\n```'
HTML_DOC = "<!DOCTYPE html>\n<html><body><h1>Title</h1><p>One<br>two</p><img src='a.png'/></body></html>"

# (id, params, reply, expected label) — one edge case per row, with why.
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # --- start_with.letter
    ("start_with.letter", {"letter": "a"}, "Apples are red.", "yes"),  # plain first letter, other case
    ("start_with.letter", {"letter": "A"}, '  "**apple** pie"', "yes"),  # spaces, quote, bold markers skipped
    ("start_with.letter", {"letter": "w"}, "2024 was a year.", "yes"),  # digits are not letters
    ("start_with.letter", {"letter": "e"}, "Élan vital", "yes"),  # accent folded to its base letter
    ("start_with.letter", {"letter": "b"}, "Apples are red.", "no"),  # wrong letter
    ("start_with.letter", {"letter": "a"}, "", "no"),  # empty reply has no first letter
    ("start_with.letter", {"letter": "a"}, "123 !!! 😀", "no"),  # no letter at all
    ("start_with.letter", {"letter": "a"}, "Жар apple", "no"),  # first letter is Cyrillic, not a later Latin one
    # --- end_with.letter
    ("end_with.letter", {"letter": "y"}, "It is sunny! 😀", "yes"),  # trailing punctuation and emoji skipped
    ("end_with.letter", {"letter": "d"}, "the end**\n\n", "yes"),  # trailing Markdown and whitespace skipped
    ("end_with.letter", {"letter": "i"}, "a ligature: ﬁ", "yes"),  # NFKD: 'ﬁ' ends with 'i'
    ("end_with.letter", {"letter": "y"}, "Sunny day.", "yes"),  # plain
    ("end_with.letter", {"letter": "y"}, "Sunny days.", "no"),  # wrong last letter
    ("end_with.letter", {"letter": "y"}, "   ", "no"),  # whitespace only
    # --- start_with.emoji
    ("start_with.emoji", {"emoji": "😀"}, "😀 Hello", "yes"),  # plain
    ("start_with.emoji", {"emoji": "❤️"}, "❤ love", "yes"),  # variation selector ignored (param has VS16)
    ("start_with.emoji", {"emoji": "❤"}, "❤️ love", "yes"),  # variation selector ignored (reply has VS16)
    ("start_with.emoji", {"emoji": "👍"}, "## 👍🏽 good", "yes"),  # heading marker skipped, skin tone ignored
    ("start_with.emoji", {"emoji": "#️⃣"}, "#️⃣ tag", "yes"),  # keycap emoji starting with '#' is not a marker
    ("start_with.emoji", {"emoji": "👨"}, "👨\u200d👩\u200d👧 family", "no"),  # ZWJ family is not the man emoji
    ("start_with.emoji", {"emoji": "👨\u200d👩\u200d👧"}, "\ufeff👨\u200d👩\u200d👧 family", "yes"),  # whole ZWJ seq
    ("start_with.emoji", {"emoji": "😀"}, "Hello 😀", "no"),  # emoji later, not first
    ("start_with.emoji", {"emoji": "😀"}, "😃 Hello", "no"),  # a different emoji
    ("start_with.emoji", {"emoji": "😀"}, "", "no"),  # empty reply
    # --- end_with.emoji
    ("end_with.emoji", {"emoji": "🤩"}, "great 🤩\n", "yes"),  # trailing newline skipped
    ("end_with.emoji", {"emoji": "🤩"}, "**great 🤩**", "yes"),  # closing bold markers skipped
    ("end_with.emoji", {"emoji": "🇫🇷"}, "Vive la France 🇫🇷", "yes"),  # flag (two regional indicators)
    ("end_with.emoji", {"emoji": "🤩"}, "great 🤩.", "no"),  # a period after the emoji: it is not last
    ("end_with.emoji", {"emoji": "🤩"}, "🤩 great", "no"),  # emoji first, not last
    # --- start_with.keyword
    ("start_with.keyword", {"keyword": "compatibility"}, "**Compatibility** matters", "yes"),  # case, bold
    ("start_with.keyword", {"keyword": "compatibility"}, "Compatibility's role", "yes"),  # apostrophe ends word
    ("start_with.keyword", {"keyword": "pros and cons"}, "Pros and\ncons: many", "yes"),  # phrase over a line
    ("start_with.keyword", {"keyword": "compatibility"}, "Compatibilityx", "no"),  # not the whole word
    ("start_with.keyword", {"keyword": "art"}, "Artists paint.", "no"),  # a prefix is not the word (EvolIF: yes)
    ("start_with.keyword", {"keyword": "compatibility"}, "# Title\nCompatibility", "no"),  # first word is Title
    ("start_with.keyword", {"keyword": "compatibility"}, "", "no"),  # empty reply
    # --- end_with.keyword
    ("end_with.keyword", {"keyword": "barber"}, "see the Barber.", "yes"),  # case and final period
    ("end_with.keyword", {"keyword": "barber"}, "ask the barber 🤠\n", "yes"),  # emoji/newline after word skipped
    ("end_with.keyword", {"keyword": "barber"}, "the barbers", "no"),  # plural is another word
    ("end_with.keyword", {"keyword": "barber"}, "a barber shop", "no"),  # keyword not at the end
    # --- start_with.quotation
    ("start_with.quotation", {"left": "《", "right": "》"}, "《Title》 then text", "yes"),  # CJK pair
    ("start_with.quotation", {"left": '"', "right": '"'}, ' "Quote" said', "yes"),  # same mark twice
    ("start_with.quotation", {"left": '"', "right": '"'}, '"Unclosed quote', "no"),  # same mark only once
    ("start_with.quotation", {"left": "「", "right": "」"}, "Text 「quoted」", "no"),  # does not start with it
    ("start_with.quotation", {"left": "[", "right": "]"}, "[no close", "no"),  # never closed
    # --- end_with.quotation
    ("end_with.quotation", {"left": "“", "right": "”"}, "He said “go.”\n", "yes"),  # trailing newline stripped
    ("end_with.quotation", {"left": '"', "right": '"'}, 'x y"', "no"),  # closing mark without an opener
    ("end_with.quotation", {"left": "〈", "right": "〉"}, "〈a〉 more", "no"),  # does not end with the mark
    # --- format.json
    ("format.json", {}, '{"a": [1, 2]}', "yes"),  # object
    ("format.json", {}, "\n  [1, 2, 3]  \n", "yes"),  # surrounding whitespace allowed
    ("format.json", {}, FENCED_JSON, "no"),  # a code fence is not JSON (loose strips it)
    ("format.json", {}, 'Here you go: {"a": 1}', "no"),  # prose around it
    ("format.json", {}, "{'a': 1}", "no"),  # single quotes are not JSON
    ("format.json", {}, '{"a": NaN}', "no"),  # NaN is a Python extension, not JSON
    ("format.json", {}, "", "no"),  # empty reply
    # --- format.html
    ("format.html", {}, HTML_DOC, "yes"),  # doctype, void <br>, self-closing <img/>
    ("format.html", {}, "<div><!-- note --><p>Hi</p></div>", "yes"),  # comment allowed
    ("format.html", {}, "<P>Upper case tags</P>", "yes"),  # tag names are case-insensitive
    ("format.html", {}, "Here is HTML: <p>Hi</p>", "no"),  # bare prose outside elements
    ("format.html", {}, "<ul><li>a</ul>", "no"),  # implicit </li> refused
    ("format.html", {}, "<div><p>a</div></p>", "no"),  # crossed tags
    ("format.html", {}, "<div><p>a</p>", "no"),  # never closed
    ("format.html", {}, "<note><to>x</to></note>", "no"),  # only non-HTML tags (that is XML)
    ("format.html", {}, "Just words.", "no"),  # no tags at all
    # --- format.xml
    ("format.xml", {}, '<?xml version="1.0"?>\n<a><b/></a>\n', "yes"),  # declaration + trailing newline
    ("format.xml", {}, "  <note><to>Tove</to></note>", "yes"),  # leading whitespace stripped
    ("format.xml", {}, "<a><b></a>", "no"),  # mismatched tag
    ("format.xml", {}, "<a/><b/>", "no"),  # two roots
    ("format.xml", {}, "Result: <a/>", "no"),  # prose before the root
    # --- format.csv
    ("format.csv", {}, "name,age\nAna,31\n", "yes"),  # header + row, trailing newline
    ("format.csv", {}, 'name,quote\nAna,"Hi, there"', "yes"),  # quoted comma stays in one column
    ("format.csv", {}, "a,b,c", "no"),  # single line (EvolIF: yes)
    ("format.csv", {}, "a\nb\nc", "no"),  # one column
    ("format.csv", {}, "a,b\n1,2,3", "no"),  # ragged rows
    ("format.csv", {}, "a,b\n\n1,2", "no"),  # blank line inside the table
    ("format.csv", {}, 'a,"b\n1,2', "no"),  # unterminated quote
    # --- format.markdown
    ("format.markdown", {}, "# Title\n\nSome **bold** text.", "yes"),  # heading + strong
    ("format.markdown", {}, "- one\n- two", "yes"),  # a list
    ("format.markdown", {}, "| a | b |\n|---|---|\n| 1 | 2 |", "yes"),  # a table
    ("format.markdown", {}, "See [docs](https://example.com).", "yes"),  # a link
    ("format.markdown", {}, "```python\nprint(1)\n```", "yes"),  # a closed fence
    ("format.markdown", {}, "Just plain prose here. Nothing else.", "no"),  # valid but not Markdown-formatted
    ("format.markdown", {}, "# T\n```py\ncode\n", "no"),  # unclosed fence (EvolIF's only check)
    ("format.markdown", {}, "", "no"),  # empty reply
    # --- case.upper / case.lower
    ("case.upper", {}, "HELLO WORLD 123!", "yes"),  # digits and punctuation ignored
    ("case.upper", {}, "ÉTÉ À PARIS", "yes"),  # accented capitals
    ("case.upper", {}, "HELLO world", "no"),  # lowercase letters
    ("case.upper", {}, "CAFé", "no"),  # a non-ASCII lowercase letter counts (EvolIF: yes)
    ("case.upper", {}, "123 !!", "no"),  # no letters at all
    ("case.lower", {}, "hello world\n", "yes"),  # plain
    ("case.lower", {}, "你好 world", "yes"),  # uncased CJK ignored
    ("case.lower", {}, "hello World", "no"),  # one capital
    ("case.lower", {}, "", "no"),  # empty reply
    # --- case.upper_ratio
    ("case.upper_ratio", {"percent": 50}, "ABcd", "yes"),  # exactly 50%
    ("case.upper_ratio", {"percent": 47}, "ABcd", "yes"),  # 50% is within +3 of 47 (inclusive bound)
    ("case.upper_ratio", {"percent": 46}, "ABcd", "no"),  # 4 points off
    ("case.upper_ratio", {"percent": 0}, "all lower", "yes"),  # 0% allowed
    ("case.upper_ratio", {"percent": 100}, "ALL UPPER", "yes"),  # 100% allowed
    ("case.upper_ratio", {"percent": 10}, "1234", "no"),  # no letters: no share to measure
    # --- punctuation.include
    ("punctuation.include", {"mark": "!"}, "Wow!", "yes"),  # present
    ("punctuation.include", {"mark": "……"}, "wait……", "yes"),  # two-character CJK ellipsis
    ("punctuation.include", {"mark": ";"}, "No semicolons here.", "no"),  # absent
    ("punctuation.include", {"mark": "!"}, "Wow！", "no"),  # full-width '！' is another mark
    # --- punctuation.exclude
    ("punctuation.exclude", {"mark": ","}, "No commas here.", "yes"),  # absent
    ("punctuation.exclude", {"mark": ","}, "Chinese comma，only", "yes"),  # '，' is not ','
    ("punctuation.exclude", {"mark": "."}, "costs 3.5 now", "no"),  # a decimal point is a period
    ("punctuation.exclude", {"mark": ":"}, "see https://x.org", "no"),  # inside a URL still counts
    ("punctuation.exclude", {"mark": "."}, "", "yes"),  # empty reply has none
    # --- bullets.count
    ("bullets.count", {"n": 2}, "- one\n* two", "yes"),  # both markers
    ("bullets.count", {"n": 3}, "- a\n  - nested\n+ plus", "yes"),  # nested and '+' count
    ("bullets.count", {"n": 1}, "**bold**\n- only bullet\n---\n* * *", "yes"),  # bold and rules are not bullets
    ("bullets.count", {"n": 1}, "- real\n```\n- in code\n```", "yes"),  # lines in a code fence skipped
    ("bullets.count", {"n": 2}, "-no space\n- one\n-\n- two", "yes"),  # marker needs a space and text
    ("bullets.count", {"n": 2}, "- one\n- two\n- three", "no"),  # too many
    ("bullets.count", {"n": 1}, "1. numbered item", "no"),  # numbered items are not bullets
    ("bullets.count", {"n": 1}, "", "no"),  # empty reply
    # --- length.words
    ("length.words", {"relation": "less_than", "n": 3}, "one two", "yes"),  # 2 < 3
    ("length.words", {"relation": "less_than", "n": 2}, "one two", "no"),  # strict: 2 is not < 2
    ("length.words", {"relation": "exactly", "n": 3}, "don't stop", "yes"),  # don't = 2 \w+ runs
    ("length.words", {"relation": "more_than", "n": 1}, "one, two", "yes"),  # punctuation is not a word
    ("length.words", {"relation": "exactly", "n": 2}, "naïve café", "yes"),  # unicode letters are word chars
    ("length.words", {"relation": "more_than", "n": 1}, "", "no"),  # empty reply has 0 words
    # --- length.paragraphs
    ("length.paragraphs", {"relation": "exactly", "n": 2}, "a\nstill a\n\nb", "yes"),  # single newline joins
    ("length.paragraphs", {"relation": "exactly", "n": 2}, "a\n \t\nb\n\n\n", "yes"),  # whitespace-only line splits
    ("length.paragraphs", {"relation": "exactly", "n": 2}, "a\r\n\r\nb", "yes"),  # Windows newlines
    ("length.paragraphs", {"relation": "more_than", "n": 1}, "one block", "no"),  # 1 is not > 1
    ("length.paragraphs", {"relation": "less_than", "n": 1}, "", "yes"),  # empty reply: 0 paragraphs
    # --- length.characters
    ("length.characters", {"relation": "exactly", "n": 5}, "  hello \n", "yes"),  # surrounding space stripped
    ("length.characters", {"relation": "exactly", "n": 3}, "a b", "yes"),  # inner space counts
    ("length.characters", {"relation": "exactly", "n": 2}, "😀é", "yes"),  # code points, not bytes
    ("length.characters", {"relation": "less_than", "n": 5}, "hello", "no"),  # 5 is not < 5
    # --- length.sentences
    ("length.sentences", {"relation": "exactly", "n": 2}, "Dr. Smith went home. He was tired.", "yes"),  # abbr
    ("length.sentences", {"relation": "exactly", "n": 2}, "It costs 3.5 dollars. Cheap!", "yes"),  # decimal
    ("length.sentences", {"relation": "exactly", "n": 1}, "No final stop", "yes"),  # no punctuation: 1
    ("length.sentences", {"relation": "exactly", "n": 2}, "Hi there. 🎉\n\nBye.", "yes"),  # emoji-only segment
    ("length.sentences", {"relation": "exactly", "n": 3}, "One.\n\nTwo. Three.", "yes"),  # across paragraphs
    ("length.sentences", {"relation": "more_than", "n": 1}, "Only one sentence.", "no"),  # 1 is not > 1
    ("length.sentences", {"relation": "less_than", "n": 1}, "", "yes"),  # empty: 0 sentences, no fallback to 1
    # --- keywords.exact_count
    ("keywords.exact_count", {"counts": {"Mexican": 2}}, "mexican MEXICAN Mexicans", "yes"),  # case; plural differs
    ("keywords.exact_count", {"counts": {"art": 1}}, "art party smart art-deco", "no"),  # 'art-deco' is art too
    ("keywords.exact_count", {"counts": {"art": 2}}, "art party smart art-deco", "yes"),  # whole words only
    ("keywords.exact_count", {"counts": {"pros and cons": 1}}, "the pros  and\ncons", "yes"),  # phrase, spacing
    ("keywords.exact_count", {"counts": {"a b": 1, "tea": 2}}, "a b tea tea", "yes"),  # two keywords
    ("keywords.exact_count", {"counts": {"a b": 1, "tea": 2}}, "a b tea", "no"),  # one of them short
    ("keywords.exact_count", {"counts": {"tea": 1}}, "tea tea", "no"),  # too many
    ("keywords.exact_count", {"counts": {"tea": 1}}, "", "no"),  # empty reply
    # --- forbidden.words
    ("forbidden.words", {"words": ["design"]}, "Designer goods.", "yes"),  # whole word: 'Designer' is fine
    ("forbidden.words", {"words": ["design"]}, "The DESIGN.", "no"),  # case-insensitive
    ("forbidden.words", {"words": ["pros and cons"]}, "weighing pros and cons", "no"),  # phrase
    ("forbidden.words", {"words": ["pros and cons"]}, "pros, and cons", "yes"),  # phrase broken by a comma
    ("forbidden.words", {"words": ["a", "b"]}, "", "yes"),  # empty reply has nothing forbidden
]


@pytest.mark.parametrize(("cid", "params", "reply", "expected"), CASES)
def test_rule_cases(cid: str, params: dict[str, Any], reply: str, expected: str) -> None:
    verdict = check(Constraint(cid, params), reply)
    assert verdict.label == expected, verdict.reason
    assert verdict.source == "rule"
    assert verdict.reason  # every verdict says what was measured


def test_every_rule_id_has_yes_and_no_cases() -> None:
    rule_ids = {cid for cid, kind in REGISTRY.items() if not kind.judged}
    for cid in rule_ids:
        labels = {expected for case_id, _, _, expected in CASES if case_id == cid}
        assert labels == {"yes", "no"}, f"{cid} needs both a passing and a failing row"


# Reasons are read by researchers: they must state what was measured and what was required.
REASONS = [
    ("length.words", {"relation": "less_than", "n": 2}, "one two three", "3 words; required less than 2"),
    ("bullets.count", {"n": 1}, "- a\n- b", "2 bullet points; required exactly 1"),
    ("case.upper_ratio", {"percent": 50}, "ABCd", "75.0% uppercase (3 of 4 letters)"),
    ("keywords.exact_count", {"counts": {"tea": 2}}, "tea", "'tea' 1x (required 2)"),
    ("forbidden.words", {"words": ["tea", "cake"]}, "tea cake tea", "'tea' 2x, 'cake' 1x"),
    ("format.csv", {}, "a,b\n1,2,3", "row 2 has 3 columns, row 1 has 2"),
    ("format.html", {}, "<div><p>a</div>", "</div> on line 1 does not close <p>"),
    ("start_with.letter", {"letter": "b"}, "Apple", "first letter is 'A'; required 'b'"),
    ("punctuation.exclude", {"mark": ","}, "a, b, c", "',' occurs 2 times"),
]


@pytest.mark.parametrize(("cid", "params", "reply", "fragment"), REASONS)
def test_reasons_say_what_was_measured(cid: str, params: dict[str, Any], reply: str, fragment: str) -> None:
    assert fragment in check(Constraint(cid, params), reply).reason


# ---------------------------------------------------------------------------------------------
# Loose checking

# (id, params, reply, strict label, loose label, variant named in the loose reason)
LOOSE = [
    ("format.json", {}, FENCED_JSON, "no", "yes", "as is, code fence removed"),  # fence around JSON
    ("format.json", {}, 'Here is the JSON:\n{"a": 1}', "no", "yes", "first line removed"),  # intro line
    (
        "format.json",
        {},
        'Sure!\n```json\n{"a": 1}\n```\nHope this helps.',
        "no",
        "yes",
        "first and last lines removed, code fence",
    ),
    ("format.json", {}, '{"a": 1}\nLet me know!', "no", "yes", "last line removed"),  # closing chatter
    ("format.csv", {}, "```\na,b\n1,2\n```", "no", "yes", "code fence removed"),  # fenced CSV
    ("format.json", {}, "not json\nat all\nreally", "no", "no", "no variant passed"),  # nothing helps
    ("start_with.letter", {"letter": "z"}, "Sure, here it is:\nZebras run.", "no", "yes", "first line removed"),
    ("case.lower", {}, "HERE IT IS\nall lower", "no", "yes", "first line removed"),  # framing line removed
    ("forbidden.words", {"words": ["design"]}, "design", "no", "no", "no variant passed"),  # no empty variant
    ("length.words", {"relation": "less_than", "n": 5}, "one two", "yes", "yes", "as is"),  # strict pass stays
]


@pytest.mark.parametrize(("cid", "params", "reply", "strict", "loose", "variant"), LOOSE)
def test_loose(cid: str, params: dict[str, Any], reply: str, strict: str, loose: str, variant: str) -> None:
    constraint = Constraint(cid, params)
    assert check(constraint, reply).label == strict
    verdict = check(constraint, reply, loose=True)
    assert verdict.label == loose, verdict.reason
    assert variant in verdict.reason


def test_loose_variants_are_distinct_and_non_empty() -> None:
    variants = loose_variants('Intro\n```json\n{"a": 1}\n```\nOutro')
    names = [name for name, _ in variants]
    assert names[0] == "as is"
    assert "first and last lines removed, code fence removed" in names
    texts = [text for _, text in variants]
    assert len(texts) == len(set(texts))
    assert all(text.strip() for text in texts)
    assert loose_variants("one line") == [("as is", "one line")]  # removing its only line would leave ""
    assert loose_variants("") == [("as is", "")]  # an empty reply is still checked once


# ---------------------------------------------------------------------------------------------
# Params validation, unknown ids, registry shape

# (id, bad params, text the error must contain) — the field name and the offending value.
BAD_PARAMS = [
    ("start_with.letter", {"letter": "ab"}, "'letter'"),  # two letters
    ("start_with.letter", {"letter": "é"}, "'letter'"),  # not ASCII
    ("start_with.letter", {"letter": 1}, "'letter'"),  # wrong type
    ("start_with.letter", {}, "missing param 'letter'"),  # missing
    ("start_with.letter", {"letter": "a", "lettre": "b"}, "Did you mean 'letter'"),  # typo'd extra field
    ("end_with.emoji", {"emoji": "smile"}, "'emoji'"),  # a word is not an emoji
    ("end_with.emoji", {"emoji": "😀😀"}, "'emoji'"),  # two emoji
    ("start_with.keyword", {"keyword": "  "}, "'keyword'"),  # blank
    ("start_with.keyword", {"keyword": "!!"}, "'keyword'"),  # no word characters
    ("start_with.quotation", {"left": "a", "right": "b"}, "'left'"),  # letters are not quotation marks
    ("end_with.quotation", {"left": "《"}, "missing param 'right'"),  # half a pair
    ("format.json", {"strict": True}, "unknown param 'strict'"),  # format types take no params
    ("case.upper", {"n": 1}, "unknown param 'n'"),  # case types take no params
    ("case.upper_ratio", {"percent": 101}, "'percent'"),  # out of range
    ("case.upper_ratio", {"percent": 50.5}, "'percent'"),  # not an int
    ("case.upper_ratio", {"percent": True}, "'percent'"),  # a bool is not a number here
    ("punctuation.include", {"mark": "a"}, "'mark'"),  # a letter is not a mark
    ("punctuation.include", {"mark": "!!!!"}, "'mark'"),  # too long
    ("punctuation.exclude", {"mark": "!"}, "'mark'"),  # only . , : can be excluded
    ("bullets.count", {"n": -1}, "'n'"),  # a negative count (0 is fine: no bullet points)
    ("length.words", {"relation": "more_than", "n": -1}, "'n'"),  # a negative count
    ("length.words", {"relation": "less_then", "n": 3}, "Did you mean 'less_than'"),  # bad relation
    ("length.words", {"relation": "less_than", "n": "3"}, "'n'"),  # a string count
    ("length.sentences", {"relation": "exactly"}, "missing param 'n'"),  # missing n
    ("keywords.exact_count", {"counts": {}}, "'counts'"),  # no keywords
    ("keywords.exact_count", {"counts": {"tea": -1}}, "counts['tea']"),  # count below 0
    ("keywords.exact_count", {"counts": {"Tea": 1, "tea ": 2}}, "repeated"),  # duplicate after folding
    ("keywords.exact_count", {"counts": ["tea"]}, "'counts'"),  # a list is not a mapping
    ("forbidden.words", {"words": "design"}, "'words'"),  # a bare string is not a list
    ("forbidden.words", {"words": []}, "'words'"),  # empty
    ("forbidden.words", {"words": ["a", "A"]}, "repeated"),  # duplicate
    ("emotion.tone", {"emotion": "hapy"}, "Did you mean 'happy'"),  # typo
    ("style.register", {"style": "casual"}, "'style'"),  # not an allowed style
    ("reader_age.audience", {"reader_age": "child"}, "unknown param 'reader_age'"),  # EvolIF's arg name
]


@pytest.mark.parametrize(("cid", "params", "fragment"), BAD_PARAMS)
def test_bad_params(cid: str, params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConstraintParamsError) as info:
        Constraint(cid, params)
    message = str(info.value)
    assert fragment in message
    assert cid in message  # every message names the constraint id


def test_params_must_be_a_mapping() -> None:
    with pytest.raises(ConstraintParamsError, match="params must be a mapping"):
        Constraint("format.json", [])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cid", "suggestion"),
    [("length.word", "length.words"), ("format.jsn", "format.json"), ("startwith.letter", "start_with.letter")],
)
def test_unknown_id_suggests_the_closest(cid: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError, match=f"Did you mean '{suggestion}'"):
        Constraint(cid, {})
    with pytest.raises(UnknownNameError):
        constraint_type(cid)


def test_groups() -> None:
    assert GROUPS == RULE_GROUPS + JUDGED_GROUPS and len(GROUPS) == 12
    assert JUDGED_GROUPS == ("emotion", "style", "reader_age")
    assert ids_in_group("format") == ("format.json", "format.html", "format.xml", "format.csv", "format.markdown")
    assert ids_in_group("length") == ("length.words", "length.paragraphs", "length.characters", "length.sentences")
    assert {cid for group in GROUPS for cid in ids_in_group(group)} == set(REGISTRY)
    for group in GROUPS:
        assert all(REGISTRY[cid].judged == (group in JUDGED_GROUPS) for cid in ids_in_group(group))
    with pytest.raises(UnknownNameError, match="Did you mean 'format'"):
        ids_in_group("formats")


# ---------------------------------------------------------------------------------------------
# Every id: JSON round trip, equality, hashing, pickling, description; judged ones refuse rules.

EXAMPLES: dict[str, dict[str, Any]] = {
    "start_with.letter": {"letter": "Q"},
    "start_with.emoji": {"emoji": "🥳"},
    "start_with.keyword": {"keyword": "Mexican culture"},
    "start_with.quotation": {"left": "《", "right": "》"},
    "end_with.letter": {"letter": "d"},
    "end_with.emoji": {"emoji": "❤️"},
    "end_with.keyword": {"keyword": "barber"},
    "end_with.quotation": {"left": '"', "right": '"'},
    "format.json": {},
    "format.html": {},
    "format.xml": {},
    "format.csv": {},
    "format.markdown": {},
    "case.upper": {},
    "case.lower": {},
    "case.upper_ratio": {"percent": 46},
    "punctuation.include": {"mark": "……"},
    "punctuation.exclude": {"mark": ":"},
    "bullets.count": {"n": 13},
    "length.words": {"relation": "less_than", "n": 1200},
    "length.paragraphs": {"relation": "exactly", "n": 3},
    "length.characters": {"relation": "more_than", "n": 50},
    "length.sentences": {"relation": "exactly", "n": 4},
    "keywords.exact_count": {"counts": {"tourism": 6, "Mexican": 10, "pros and cons": 1}},
    "forbidden.words": {"words": ["design", "tradition", "pros and cons"]},
    "emotion.tone": {"emotion": "excited"},
    "style.register": {"style": "passive voice"},
    "reader_age.audience": {"age": "senior"},
}
# A word or value each description must mention, so the user hears the actual requirement.
MENTIONS = {
    "start_with.letter": "'Q'",
    "start_with.emoji": "🥳",
    "start_with.keyword": "Mexican culture",
    "start_with.quotation": "《",
    "end_with.letter": "'D'",
    "end_with.emoji": "❤️",
    "end_with.keyword": "barber",
    "end_with.quotation": '"',
    "format.json": "JSON",
    "format.html": "HTML",
    "format.xml": "XML",
    "format.csv": "CSV",
    "format.markdown": "Markdown",
    "case.upper": "capital",
    "case.lower": "lowercase",
    "case.upper_ratio": "46%",
    "punctuation.include": "……",
    "punctuation.exclude": "colon",
    "bullets.count": "13 bullet points",
    "length.words": "under 1200 words",
    "length.paragraphs": "exactly 3 paragraphs",
    "length.characters": "more than 50 characters",
    "length.sentences": "exactly 4 sentences",
    "keywords.exact_count": "'Mexican' exactly 10 times",
    "forbidden.words": "'tradition'",
    "emotion.tone": "excited",
    "style.register": "passive voice",
    "reader_age.audience": "older",
}


def test_examples_cover_the_registry() -> None:
    assert set(EXAMPLES) == set(REGISTRY) == set(MENTIONS)


@pytest.mark.parametrize("cid", sorted(EXAMPLES))
def test_round_trip_equality_and_description(cid: str) -> None:
    constraint = Constraint(cid, EXAMPLES[cid])
    data = json.loads(json.dumps(constraint.to_json()))
    again = Constraint.from_json(data)
    assert again == constraint and hash(again) == hash(constraint)
    assert again.to_json() == constraint.to_json()
    assert pickle.loads(pickle.dumps(constraint)) == constraint
    assert len({constraint, again}) == 1
    assert constraint.group == cid.split(".")[0]
    assert MENTIONS[cid] in constraint.describe()
    assert constraint.describe().endswith(".")


def test_canonical_params() -> None:
    words = Constraint("forbidden.words", {"words": [" design ", "pros  and cons"]})
    assert words.params == {"words": ("design", "pros  and cons")}  # tuple, stripped, inner spacing kept
    assert Constraint("start_with.letter", {"letter": "Q"}) == Constraint("start_with.letter", {"letter": "q"})
    assert Constraint("emotion.tone", {"emotion": " Happy"}).params == {"emotion": "happy"}
    assert Constraint("punctuation.exclude", {"mark": " , "}).params == {"mark": ","}
    assert Constraint("end_with.quotation", {"left": " 《", "right": "》 "}).params == {"left": "《", "right": "》"}
    counts = Constraint("keywords.exact_count", {"counts": {"b": 1, "a": 2}})
    assert list(counts.params["counts"]) == ["b", "a"]  # insertion order kept
    assert counts == Constraint("keywords.exact_count", {"counts": {"a": 2, "b": 1}})  # but order-free equality
    assert Constraint("length.words", {"relation": "exactly", "n": 3}) != Constraint(
        "length.words", {"relation": "exactly", "n": 4}
    )


@pytest.mark.parametrize("cid", [cid for cid, kind in REGISTRY.items() if kind.judged])
def test_judged_ids_need_a_judge(cid: str) -> None:
    constraint = Constraint(cid, EXAMPLES[cid])
    assert constraint.judged
    for loose in (False, True):
        with pytest.raises(JudgeRequiredError, match=cid):
            check(constraint, "Any reply.", loose=loose)


def test_check_refuses_non_string_replies() -> None:
    with pytest.raises(ActionError, match="reply must be a str"):
        check(Constraint("format.json", {}), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expects a Constraint"):
        check({"id": "format.json"}, "{}")  # type: ignore[arg-type]


def test_sentence_counting_never_guesses(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def segment(self, text: str) -> list[str]:
            raise RuntimeError("segmenter exploded")

    monkeypatch.setattr(catalog, "_segmenter", lambda: Broken())
    catalog._paragraph_sentences.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="segmenter exploded"):
            check(Constraint("length.sentences", {"relation": "exactly", "n": 1}), "A fresh sentence nobody counted.")
    finally:
        catalog._paragraph_sentences.cache_clear()


def test_count_keyword() -> None:
    assert count_keyword("C++ and c++ but not C", "C++") == 2  # keyword ending in a symbol
    assert count_keyword("e-mail, E-Mail, email", "e-mail") == 2  # hyphenated single word
    assert count_keyword("", "tea") == 0
    assert count_keyword("\u017ftar, STAR", "star") == 2  # case folding beyond ASCII: the long s is an s
    assert count_keyword("\u212ait", "kit") == 1  # and the Kelvin sign a k


def test_a_keyword_that_cannot_be_in_the_text_compiles_no_pattern() -> None:
    # a pattern costs about 0.15 ms to compile; a run meets a thousand keywords, most never in the reply
    assert not may_contain("A short reply about it.", "zebra crossing")
    assert not may_contain("A short reply about it.", "short story")  # every word must be there
    assert may_contain("A SHORT reply, story after story.", "short story")  # words apart, any case: maybe
    assert may_contain("caf\u00e9 au lait", "zebra")  # beyond ASCII, no cheap answer
    keyword_pattern.cache_clear()
    assert count_keyword("A short reply about it.", "zebra") == 0
    assert count_keyword("A short reply about it.", "shortest") == 0
    assert keyword_pattern.cache_info().currsize == 0
    assert count_keyword("Shortest paths, shortest.", "shortest") == 2
    assert keyword_pattern.cache_info().currsize == 1


def test_counting_without_a_pattern_agrees_with_the_pattern() -> None:
    # ASCII texts and keywords drawn from a few letters, so that most of them meet in some case
    pieces = ["ab", "AB", "Ab", "ba", "a", "b", "_", " ", "  ", "\n", "-", "+", ".", "c"]
    keywords = ["ab", "AB", "ba", "a b", "ab ba", "a-b", "c+", "_a", "b.", "abc"]
    met = 0
    for text, keyword in drawn_pairs(7, pieces, keywords, 3000, 12):
        want = len(keyword_pattern(keyword).findall(text))
        met += want > 0
        assert count_keyword(text, keyword) == want, (text, keyword)
    assert met > 150  # the keywords did meet the texts, in many ways


@pytest.mark.parametrize("cid", ["start_with.keyword", "end_with.keyword"])
def test_an_edge_keyword_checked_without_a_pattern_agrees_with_the_pattern(cid: str) -> None:
    kind = constraint_type(cid)
    pieces = ["tea", "TEA", "Tea", "te", "a", " ", "\n", "_", "-", "!", "*", '"', "cup"]
    met = 0
    for text, keyword in drawn_pairs(11, pieces, ["tea", "Tea cup", "te", "cup"], 2000, 8):
        want = kind._pattern(keyword).search(text.strip()) is not None
        met += want
        assert (kind.check(text, {"keyword": keyword}).label == "yes") == want, (text, keyword)
    assert met > 100  # the keyword was at the edge in some


# ---------------------------------------------------------------------------------------------
# register() refuses incomplete types at import time


class _Complete(ConstraintType):
    @classmethod
    def normalize(cls, params: Any) -> dict[str, Any]:
        return {}

    @classmethod
    def describe(cls, params: Any) -> str:
        return "x"

    @classmethod
    def check(cls, reply: str, params: Any) -> Verdict:
        return Verdict("yes", "x")

    @classmethod
    def sample(cls, rng: Any, ctx: Any) -> dict[str, Any]:
        return {}


def _variant(name: str, base: type, **attrs: Any) -> type:
    return type(name, (base,), attrs)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_variant("NoId", _Complete, group="format"), "must set the class vars"),  # id missing
        (_variant("BadGroup", _Complete, id="colour.red", group="colour"), "is not one of"),  # unknown group
        (_variant("BadPrefix", _Complete, id="length.x", group="format"), "group prefix"),  # id outside group
        (_variant("NoNormalize", ConstraintType, id="format.x", group="format"), "`normalize`"),  # nothing defined
        (
            _variant("NoCheck", ConstraintType, id="format.x", group="format", normalize=_Complete.normalize,
                     describe=_Complete.describe, sample=_Complete.sample),
            "must define the classmethod `check`",
        ),  # a rule type without its rule
        (
            _variant("NoSample", ConstraintType, id="format.x", group="format", normalize=_Complete.normalize,
                     describe=_Complete.describe, check=_Complete.check),
            "must define the classmethod `sample`",
        ),  # a type the simulators cannot draw
        (_variant("JudgedCheck", _Complete, id="emotion.x", group="emotion", judged=True), "must not define `check`"),
        (_variant("Twice", _Complete, id="format.json", group="format"), "registered twice"),  # id taken
    ],
)  # fmt: skip
def test_register_refuses_incomplete_types(cls: type, message: str) -> None:
    before = dict(REGISTRY)
    with pytest.raises((TypeError, ValueError), match=message):
        register(cls)
    assert REGISTRY == before


# ---------------------------------------------------------------------------------------------
# Conflicts

# (a, b, conflicting?) — why in the comment.
CONFLICT_CASES = [
    (("format.json", {}), ("bullets.count", {"n": 3}), True),  # JSON has no bullet lines
    (("format.markdown", {}), ("bullets.count", {"n": 3}), False),  # Markdown lists are bullets
    (("format.json", {}), ("start_with.quotation", {"left": "{", "right": "}"}), False),  # a JSON object
    (("format.json", {}), ("start_with.quotation", {"left": "《", "right": "》"}), True),  # JSON cannot open with 《
    (("format.json", {}), ("end_with.quotation", {"left": '"', "right": '"'}), False),  # a JSON string
    (("format.json", {}), ("end_with.emoji", {"emoji": "😀"}), True),  # JSON never ends with an emoji
    (("format.json", {}), ("start_with.letter", {"letter": "a"}), False),  # first letter inside a key is fine
    (("format.html", {}), ("start_with.quotation", {"left": "<", "right": ">"}), False),  # a tag is a <…>
    (("format.xml", {}), ("end_with.quotation", {"left": "(", "right": ")"}), True),  # XML ends with '>'
    (("format.html", {}), ("start_with.keyword", {"keyword": "hello"}), True),  # first word is a tag name
    (("format.csv", {}), ("punctuation.exclude", {"mark": ","}), True),  # CSV needs commas
    (("format.csv", {}), ("punctuation.exclude", {"mark": "."}), False),  # periods are optional
    (("format.csv", {}), ("length.paragraphs", {"relation": "exactly", "n": 2}), True),  # blank line breaks CSV
    (("format.csv", {}), ("length.paragraphs", {"relation": "exactly", "n": 1}), False),  # one block is fine
    (("format.json", {}), ("length.paragraphs", {"relation": "less_than", "n": 2}), False),  # one block
    (("keywords.exact_count", {"counts": {"design": 2}}), ("forbidden.words", {"words": ["Design"]}), True),
    (("keywords.exact_count", {"counts": {"design team": 2}}), ("forbidden.words", {"words": ["team"]}), True),
    (("keywords.exact_count", {"counts": {"designer": 2}}), ("forbidden.words", {"words": ["design"]}), False),
    (("start_with.keyword", {"keyword": "design"}), ("forbidden.words", {"words": ["design"]}), True),
    (("keywords.exact_count", {"counts": {"tea": 5}}), ("length.words", {"relation": "less_than", "n": 5}), True),
    (("keywords.exact_count", {"counts": {"tea": 4}}), ("length.words", {"relation": "less_than", "n": 5}), False),
    (("keywords.exact_count", {"counts": {"a b": 3}}), ("length.words", {"relation": "exactly", "n": 5}), True),
    (("case.upper", {}), ("case.lower", {}), True),  # same group
    (("case.upper", {}), ("start_with.letter", {"letter": "a"}), False),  # letters are case-insensitive
    (("emotion.tone", {"emotion": "sad"}), ("format.json", {}), False),  # judged vs rule: no rule
]


@pytest.mark.parametrize(("a", "b", "expected"), CONFLICT_CASES)
def test_conflicts(a: tuple[str, dict], b: tuple[str, dict], expected: bool) -> None:
    first, second = Constraint(*a), Constraint(*b)
    reason = conflicts(first, second)
    assert (reason is not None) == expected, reason
    assert conflicts(second, first) == reason  # symmetric, same words
    if reason:
        assert first.id in reason and second.id in reason


def test_conflicts_symmetric_over_all_examples() -> None:
    constraints = [Constraint(cid, params) for cid, params in EXAMPLES.items()]
    constraints += [Constraint(a[0], a[1]) for a, _, _ in CONFLICT_CASES] + [
        Constraint(*b) for _, b, _ in CONFLICT_CASES
    ]
    for a in constraints:
        assert conflicts(a, a) is not None  # a constraint and itself share a group
        for b in constraints:
            assert conflicts(a, b) == conflicts(b, a)


def test_conflict_rules_name_registered_ids() -> None:
    for rule in CONFLICTS:
        assert set(rule.left) <= set(REGISTRY) and set(rule.right) <= set(REGISTRY), rule
        assert rule.reason


def test_params_are_read_only_and_still_pickle():
    import pickle

    c = Constraint("length.words", {"relation": "less_than", "n": 50})
    with pytest.raises(TypeError, match="read-only"):
        c.params["n"] = -7  # would bypass validation and change what check() measures
    with pytest.raises(TypeError, match="read-only"):
        c.params.update(n=3)
    nested = Constraint("keywords.exact_count", {"counts": {"apple": 2}})
    with pytest.raises(TypeError, match="read-only"):
        nested.params["counts"]["apple"] = 9
    assert pickle.loads(pickle.dumps(nested)) == nested
    assert hash(pickle.loads(pickle.dumps(c))) == hash(c)


def test_from_json_reuses_a_built_constraint_but_never_across_json_types():
    data = {"id": "bullets.count", "params": {"n": 3}}
    first = Constraint.from_json(data)
    assert Constraint.from_json(json.loads(json.dumps(data))) is first  # read back: built once
    # True and 3.0 hash like 1 and 3: each is still validated on its own (and refused), every time
    for bad in ({"n": True}, {"n": 3.0}, {"n": 3.0}):
        with pytest.raises(ConstraintParamsError):
            Constraint.from_json({"id": "bullets.count", "params": bad})
    assert Constraint.from_json({"id": "bullets.count", "params": {"n": 1}}).params == {"n": 1}
    unhashable = {"id": "forbidden.words", "params": {"words": ["apple"], "extra": {1, 2}}}
    with pytest.raises(ConstraintParamsError):  # not JSON (a set): validated without the cache, refused
        Constraint.from_json(unhashable)
