"""Reading and writing EvolIF's stored instructions: every id and mode, liberal input, clear errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ifgym.core.constraints import REGISTRY, Constraint
from ifgym.core.evolif import EVOLIF_IDS, from_evolif, from_evolif_instruction, to_evolif
from ifgym.errors import ConstraintParamsError, DataFormatError, UnknownNameError
from ifgym.rewards.checks import check

# (EvolIF id, EvolIF args, ifgym id, ifgym params) — canonical rows: they round-trip exactly.
ROWS: list[tuple[str, Any, str, dict[str, Any]]] = [
    ("startwith", {"mode": "letter", "value": "q"}, "start_with.letter", {"letter": "q"}),
    ("startwith", {"mode": "emoji", "value": "🤩"}, "start_with.emoji", {"emoji": "🤩"}),
    ("startwith", {"mode": "keyword", "value": "compatibility"}, "start_with.keyword", {"keyword": "compatibility"}),
    (
        "startwith",
        {"mode": "quotation", "left": '"', "right": '"'},
        "start_with.quotation",
        {"left": '"', "right": '"'},
    ),
    ("endwith", {"mode": "letter", "value": "d"}, "end_with.letter", {"letter": "d"}),
    ("endwith", {"mode": "emoji", "value": "🤠"}, "end_with.emoji", {"emoji": "🤠"}),
    ("endwith", {"mode": "keyword", "value": "barber"}, "end_with.keyword", {"keyword": "barber"}),
    (
        "endwith",
        {"mode": "quotation", "left": "〈", "right": "〉"},
        "end_with.quotation",
        {"left": "〈", "right": "〉"},
    ),
    ("format", {"mode": "json"}, "format.json", {}),
    ("format", {"mode": "html"}, "format.html", {}),
    ("format", {"mode": "xml"}, "format.xml", {}),
    ("format", {"mode": "csv"}, "format.csv", {}),
    ("format", {"mode": "markdown"}, "format.markdown", {}),
    ("countableItems", {"num": 13}, "bullets.count", {"n": 13}),
    (
        "length",
        {"mode": "word", "relation": "less_than", "number": 1200},
        "length.words",
        {"relation": "less_than", "n": 1200},
    ),
    (
        "length",
        {"mode": "paragraph", "relation": "exactly", "number": 3},
        "length.paragraphs",
        {"relation": "exactly", "n": 3},
    ),
    (
        "length",
        {"mode": "characters", "relation": "more_than", "number": 300},
        "length.characters",
        {"relation": "more_than", "n": 300},
    ),
    (
        "length",
        {"mode": "sentence", "relation": "less_than", "number": 8},
        "length.sentences",
        {"relation": "less_than", "n": 8},
    ),
    (
        "existence",
        {"tourism": 6, "Mexican": 10, "culture": 10},
        "keywords.exact_count",
        {"counts": {"tourism": 6, "Mexican": 10, "culture": 10}},
    ),
    ("existence", {"pros and cons": 2}, "keywords.exact_count", {"counts": {"pros and cons": 2}}),
    (
        "forbidden",
        ["design", "tradition", "pros and cons"],
        "forbidden.words",
        {"words": ("design", "tradition", "pros and cons")},
    ),
    ("case", {"mode": "all_upper"}, "case.upper", {}),
    ("case", {"mode": "all_lower"}, "case.lower", {}),
    ("case", {"mode": "min_upper", "min": 46}, "case.upper_ratio", {"percent": 46}),
    ("punctuation", {"mode": "must_include", "value": "……"}, "punctuation.include", {"mark": "……"}),
    ("punctuation", {"mode": "must_include", "value": "？"}, "punctuation.include", {"mark": "？"}),
    ("punctuation", {"mode": "must_not_include", "value": "."}, "punctuation.exclude", {"mark": "."}),
    ("punctuation", {"mode": "must_not_include", "value": ","}, "punctuation.exclude", {"mark": ","}),
    ("punctuation", {"mode": "must_not_include", "value": ":"}, "punctuation.exclude", {"mark": ":"}),
    ("emotion", {"emotion": "frustrated"}, "emotion.tone", {"emotion": "frustrated"}),
    ("reader_age", {"reader_age": "youth"}, "reader_age.audience", {"age": "youth"}),
    ("style", {"style": "active voice"}, "style.register", {"style": "active voice"}),
]


@pytest.mark.parametrize(("iid", "args", "cid", "params"), ROWS)
def test_rows_read_and_write_back(iid: str, args: Any, cid: str, params: dict[str, Any]) -> None:
    constraint = from_evolif(iid, args)
    assert constraint == Constraint(cid, params)
    assert constraint.params == params
    assert to_evolif(constraint) == (iid, args)
    assert from_evolif(*to_evolif(constraint)) == constraint


def test_rows_cover_every_evolif_id_and_mode() -> None:
    assert {iid for iid, *_ in ROWS} == set(EVOLIF_IDS)
    assert {cid for *_, cid, _ in ROWS} == set(REGISTRY)  # every ifgym id has an EvolIF form


# Liberal reading: what EvolIF files (or hand edits of them) contain beyond the canonical form.
LIBERAL = [
    ("endwith", {"mode": "letter", "value": "I"}, Constraint("end_with.letter", {"letter": "i"})),  # case folded
    ("countableItems", {"num": "13"}, Constraint("bullets.count", {"n": 13})),  # digit string
    ("countableItems", {"num": 13.0}, Constraint("bullets.count", {"n": 13})),  # integral float
    ("existence", {"tourism": "6"}, Constraint("keywords.exact_count", {"counts": {"tourism": 6}})),  # string count
    ("format", {"mode": "JSON"}, Constraint("format.json", {})),  # mode in capitals
    ("case", {"mode": "min_upper", "min": 30.0}, Constraint("case.upper_ratio", {"percent": 30})),  # float percent
    ("punctuation", {"mode": "must_include", "value": "."}, Constraint("punctuation.include", {"mark": "."})),  # any
    ("punctuation", {"mode": "must_include", "value": "——"}, Constraint("punctuation.include", {"mark": "——"})),
    ("emotion", {"emotion": "Happy"}, Constraint("emotion.tone", {"emotion": "happy"})),  # capitalised value
    ("forbidden", ("design",), Constraint("forbidden.words", {"words": ["design"]})),  # a tuple, not a list
]


@pytest.mark.parametrize(("iid", "args", "expected"), LIBERAL)
def test_liberal_reading(iid: str, args: Any, expected: Constraint) -> None:
    assert from_evolif(iid, args) == expected


# (id, args, text the error must contain) — the instruction id is always in the message too.
BAD = [
    ("startwith", {"mode": "leter", "value": "a"}, "Did you mean 'letter'"),  # typo'd mode
    ("startwith", {"mode": "letter"}, "missing arg 'value'"),  # value missing
    ("startwith", {"mode": "letter", "value": "ab"}, "bad arg 'value'"),  # our 'letter' field is their 'value'
    ("endwith", {"mode": "quotation", "left": "〈"}, "missing arg 'right'"),  # half a pair
    ("endwith", {"mode": "letter", "value": "a", "left": "("}, "unexpected arg 'left'"),  # stray arg
    ("format", {"mode": "yaml"}, "arg 'mode'"),  # unsupported format
    ("format", "json", "arg 'args'"),  # args must be a mapping
    ("countableItems", {"num": -1}, "bad arg 'num'"),  # a negative count (0 is fine: no bullet points)
    ("countableItems", {"number": 3}, "Did you mean 'num'"),  # wrong arg name
    ("length", {"mode": "words", "relation": "less_than", "number": 5}, "Did you mean 'word'"),  # ifgym's unit name
    ("length", {"mode": "word", "relation": "fewer", "number": 5}, "bad arg 'relation'"),  # bad relation
    ("length", {"mode": "word", "relation": "exactly", "number": "five"}, "bad arg 'number'"),  # not a number
    ("existence", {}, "bad arg 'args'"),  # no keywords
    ("existence", {"tourism": -1}, "bad arg 'tourism'"),  # a negative count: the keyword is the arg
    ("forbidden", "design", "arg 'args'"),  # a bare string
    ("case", {"mode": "min_upper"}, "missing arg 'min'"),  # ratio without its number
    ("case", {"mode": "min_upper", "min": 120}, "bad arg 'min'"),  # out of range
    ("punctuation", {"mode": "must_not_include", "value": "!"}, "bad arg 'value'"),  # only . , : are excluded
    ("punctuation", {"mode": "must_include", "value": "ab"}, "bad arg 'value'"),  # letters are not a mark
    ("emotion", {"emotion": "bored"}, "bad arg 'emotion'"),  # not an allowed emotion
    ("reader_age", {"age": "child"}, "unexpected arg 'age'"),  # ifgym's field name, not EvolIF's
    ("style", {"style": "poetic"}, "bad arg 'style'"),  # not an allowed style
]


@pytest.mark.parametrize(("iid", "args", "fragment"), BAD)
def test_bad_args_name_the_instruction_and_the_arg(iid: str, args: Any, fragment: str) -> None:
    with pytest.raises(ConstraintParamsError) as info:
        from_evolif(iid, args)
    assert fragment in str(info.value)
    assert repr(iid) in str(info.value)


@pytest.mark.parametrize(("iid", "suggestion"), [("startWith", "startwith"), ("countable_items", "countableItems")])
def test_unknown_ids_suggest_the_closest(iid: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError, match=f"Did you mean '{suggestion}'"):
        from_evolif(iid, {})


# Two turns as stored in an EvolIF dialogue file; `description` is unreliable and ignored.
DIALOGUE = [
    '{"turn": 2, "active_topic": 3479, "user_query": "...", "instructions": ['
    '{"id": "startwith", "args": {"mode": "quotation", "left": "\\"", "right": "\\""}, "description": ""}, '
    '{"id": "existence", "args": {"tourism": 6, "Mexican": 10, "culture": 10}, "description": ""}]}',
    '{"turn": 14, "active_topic": 3479, "user_query": "...", "instructions": ['
    '{"id": "case", "args": {"mode": "all_lower"}, "description": "The response must use all lowercase letters."}, '
    '{"id": "endwith", "args": {"mode": "letter", "value": "d"}, '
    '"description": "The response must use all lowercase letters."}]}',
]


def test_reads_stored_dialogue_turns() -> None:
    states = [[from_evolif_instruction(item) for item in json.loads(line)["instructions"]] for line in DIALOGUE]
    assert [c.id for c in states[0]] == ["start_with.quotation", "keywords.exact_count"]
    assert [c.id for c in states[1]] == ["case.lower", "end_with.letter"]  # description text played no part
    reply = "the road ahead looks good and kind"
    assert [check(c, reply).label for c in states[1]] == ["yes", "yes"]


def test_malformed_items_are_data_errors() -> None:
    with pytest.raises(DataFormatError, match="'id' and 'args'"):
        from_evolif_instruction({"id": "format"})
    with pytest.raises(DataFormatError):
        from_evolif_instruction(["format", {"mode": "json"}])  # type: ignore[arg-type]
