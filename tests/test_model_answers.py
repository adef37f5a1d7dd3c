"""ifgym.model_answers: JSON found in messy model answers, tags defanged, numbered answers placed by one rule."""

from __future__ import annotations

import pytest

from ifgym.model_answers import (
    defang,
    extract_json,
    item_number,
    item_problems,
    json_object,
    leading_yes_no,
    place,
    yes_no,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),  # plain JSON
        ('Sure! Here it is:\n```json\n{"a": 1}\n```\nAnything else?', {"a": 1}),  # fenced, prose around
        ('The answer is {"a": 1} as asked.', {"a": 1}),  # braces inside prose
        ('{"a": "x", "b": [1, 2', {"a": "x", "b": [1, 2]}),  # cut off mid-answer: repaired
        ("{'a': 1,}", {"a": 1}),  # single quotes and a trailing comma: repaired
        ('```\n{"a": 1}\n```', {"a": 1}),  # a bare fence
        ('{"a": 1} and later {"b": 2}', None),  # two objects side by side: which one is meant? none
        ("[1, 2]", None),  # valid JSON but not an object
        ("no json here at all", None),  # prose only
        ("", None),  # nothing
        (None, None),  # not even text
    ],
)
def test_json_object(text, expected):
    assert json_object(text) == expected


@pytest.mark.parametrize(
    ("text", "accept", "expected"),
    [
        ('Here: ["yes", "no"] done', lambda d: isinstance(d, list), ["yes", "no"]),  # a list inside prose
        ('{"x": 1}', lambda d: isinstance(d, list), None),  # nothing accepted
        ('```json\n[1]\n``` then {"b": 2}', lambda d: isinstance(d, dict), {"b": 2}),  # the fence is not accepted
    ],
)
def test_extract_json_returns_the_first_value_accepted(text, accept, expected):
    assert extract_json(text, accept) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Bye </reply> now", "Bye [/reply] now"),  # a closing tag would end the block
        ("<REPLY>", "[REPLY]"),  # any case, case kept
        ("< / reply >", "[/reply]"),  # spaces inside the tag
        ("<item 3>do it</item>", "[item 3]do it[/item]"),  # attributes kept, in brackets
        ("<replying> and <b>bold</b>", "<replying> and <b>bold</b>"),  # other tags untouched
        ("a < b > c", "a < b > c"),  # comparisons untouched
    ],
)
def test_defang(text, expected):
    assert defang(text, ("reply", "item")) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), (3.0, 3), ("3", 3), ("item 3", 3), ("#3", 3), ("Question 3", 3), ("Q3", 3)]
    + [(True, None), (3.5, None), ("three", None), ("3a", None), (None, None), ([3], None)],
)
def test_item_number(value, expected):
    assert item_number(value) == expected


@pytest.mark.parametrize(
    ("answers", "items", "unplaced"),
    [
        ([(1, "a"), (2, "b")], {1: "a", 2: "b"}, 0),  # numbered
        ([(2, "b"), (1, "a")], {1: "a", 2: "b"}, 0),  # numbered, out of order: by number
        ([(None, "a"), (None, "b")], {1: "a", 2: "b"}, 0),  # unnumbered, exactly n: by position
        ([(None, "a")], {}, 1),  # unnumbered, one short: which item was skipped? none placed
        ([(None, "a"), (None, "b"), (None, "c")], {}, 3),  # unnumbered, one extra: none placed
        ([(2, "b"), (None, "a"), (None, "c")], {2: "b"}, 2),  # the numbered keep their number
        ([(1, "a"), (1, "z")], {1: "a"}, 0),  # the first answer to an item wins
        ([(None, None), (None, "b")], {2: "b"}, 0),  # an entry without its answer still counts as an entry
        ([(5, "e"), (None, "a")], {2: "a", 5: "e"}, 0),  # a number beyond n is kept (and reported as extra)
    ],
)
def test_place_by_number_else_by_position_only_when_the_count_is_exact(answers, items, unplaced):
    placed = place(answers, 2)
    assert placed.items == items and placed.unplaced == unplaced


def test_item_problems_name_what_to_fix():
    placed = place([(None, "a"), (None, "b"), (None, "c")], 2)
    problems = item_problems(placed, "answer")
    assert problems[0] == (
        "3 answers for 2 items, 3 of them without an item number, so they cannot be matched to items; give every "
        'entry its "item" number'
    )
    assert problems[1] == "no answer for item(s) 1, 2"
    assert item_problems(place([(1, 8), (3, 9)], 2), "score") == [
        "no score for item(s) 2",
        "item(s) 3 do not exist (there are 2)",
    ]
    assert item_problems(place([(1, "yes"), (2, "no")], 2), "label") == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Yes", "yes"),
        ("**No**", "no"),  # markdown around it
        ("No, it is too long", "no"),  # an explanation after a comma
        ("**No** - too long", "no"),
        ("yes.", "yes"),
        (True, "yes"),
        (False, "no"),
        ("No problem", None),  # not a No
        ("Not really", None),
        ("Yes and no", None),  # both
        ("yesterday", None),
        ("", None),
        (1, None),
    ],
)
def test_yes_no_reads_one_entry(value, expected):
    assert yes_no(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("yes", True),
        ("No.", False),
        ("**Yes** — it is about tides", True),  # markdown around the answer
        ("YES", True),
        ("Yes it does", True),  # the first word of a one-word answer decides
        ("yesterday", None),  # a word that merely starts with yes
        ("I think so", None),  # no verdict
        ("", None),
    ],
)
def test_leading_yes_no_reads_a_one_word_answer(text, expected):
    assert leading_yes_no(text) is expected
