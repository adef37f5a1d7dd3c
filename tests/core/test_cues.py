"""The catalog's cues and `unstated`: one check of a drafted user message for every user simulator.

EvolIF's LLM user (`simulators.evolif.render`) and the StructFlow generator each had their own check
until they shared this one; where they disagreed, the rows below say which answer won and why.
The tables each caller's tests pin stay in tests/simulators/test_render.py and test_structflow.py.
"""

import re

import pytest

from ifgym.core import REGISTRY, Constraint, ConstraintType, Cue, register, unstated
from ifgym.core.cues import number_cue

WORDS_137 = Constraint("length.words", {"relation": "less_than", "n": 137})
SERVER_ONCE = Constraint("keywords.exact_count", {"counts": {"server": 1}})
COMMA = Constraint("punctuation.exclude", {"mark": ","})
LETTER_T = Constraint("start_with.letter", {"letter": "t"})
LETTER_W = Constraint("start_with.letter", {"letter": "w"})
BULLETS_2 = Constraint("bullets.count", {"n": 2})


@pytest.mark.parametrize(
    ("constraint", "text", "missing"),
    [
        # the render check's labels win: EvolIF's LLM user already sent them to its model (golden fixtures)
        (WORDS_137, "keep it brief", ["the number 137"]),
        # a letter standing alone states it (render's answer; StructFlow asked for quotes or "letter")
        (LETTER_T, "Begin with T please.", []),
        # "letter is W" names the letter (StructFlow's answer; render missed it)
        (LETTER_W, "The first letter is W, please.", []),
        # a keyword is a whole word, as the checker counts it (StructFlow's; render took "servers")
        (SERVER_ONCE, "mention servers once", ["the keyword “server”"]),
        # a length needs its unit once the number is there (StructFlow's; render took the number alone) ...
        (WORDS_137, "keep it short, 137 max", ["the unit (words)"]),
        # ... and a missing number is reported once, not with its unit (render's feedback)
        (WORDS_137, "keep it short", ["the number 137"]),
        (BULLETS_2, "use 2 of them", ["bullet points"]),
        (Constraint("case.upper_ratio", {"percent": 40}), "make 40 of them capitals", ["a percentage (% or percent)"]),
        # a bare prose mark is not the requirement (StructFlow's; render took any comma in the text)
        (COMMA, "no punctuation like that, please", ["the mark “,”"]),
        # "small letters" names lowercase (StructFlow's; render only knew "lower")
        (Constraint("case.lower", {}), "write it all in small letters", []),
        # a format's name is a whole word (StructFlow's; render took "JSONL"); CSV also as comma-separated
        (Constraint("format.json", {}), "answer in JSONL", ["the format JSON"]),
        (Constraint("format.csv", {}), "a comma-separated table", []),
        # numbers thirteen to twenty in words (StructFlow's; render stopped at twelve)
        (Constraint("length.sentences", {"relation": "exactly", "n": 15}), "exactly fifteen sentences", []),
        # once/twice/thrice only say how often a keyword occurs (render's; StructFlow took "twice" for any 2)
        (BULLETS_2, "bullet points, twice", ["the number of bullet points (2)"]),
        (SERVER_ONCE, "say server once", []),
        # an emoji with or without its variation selector (StructFlow's; render wanted it exact)
        (Constraint("end_with.emoji", {"emoji": "\u2764\ufe0f"}), "end with \u2764", []),
        # 137,000 is not 137 (render's; StructFlow found 137 before the separator)
        (WORDS_137, "keep it under 137,000 words", ["the number 137"]),
    ],
)
def test_where_the_two_checks_disagreed(constraint, text, missing):
    assert unstated(constraint, text) == missing


def test_a_modify_asks_only_for_what_changed():
    old = Constraint("forbidden.words", {"words": ["ocean"]})
    new = Constraint("forbidden.words", {"words": ["ocean", "gravity"]})
    assert unstated(new, "Also avoid gravity.", old) == []
    assert unstated(new, "Also avoid gravity.") == ["the word “ocean”"]  # stated from scratch it needs both
    assert unstated(new, "Also avoid gravity.", LETTER_T) == ["the word “ocean”"]  # another id is no modify


@pytest.mark.parametrize(
    ("n", "text", "found"),
    [
        (1200, "under 1,200 words", True),  # thousands separators
        (1200, "under 1\u202f200 words", True),
        (1200, "under 11200 words", False),  # a longer number is another number
        (3, "3.5 pages", True),
        (5, "2.5 pages", False),  # a decimal's digits are not the number
        (0, "zero", True),
        (21, "twenty-one", False),  # words name numbers up to twenty only
    ],
)
def test_number_cue(n, text, found):
    assert (re.search(number_cue(n), text, re.IGNORECASE) is not None) is found


def test_a_type_without_cues_of_its_own_gets_its_param_values_or_its_name():
    @register
    class _YamlFormat(ConstraintType):
        id, group = "format.test_yaml_cues", "format"

        @classmethod
        def normalize(cls, params):
            return dict(params)

        @classmethod
        def describe(cls, params):
            return "Answer in YAML."

        @classmethod
        def sample(cls, rng, ctx):
            return {}

        @classmethod
        def check(cls, reply, params):
            raise NotImplementedError

    try:
        assert _YamlFormat.cues({}) == (Cue("the test yaml cues", r"(?<!\w)test[\s\-]+yaml[\s\-]+cues(?!\w)"),)
        assert unstated(Constraint("format.test_yaml_cues", {}), "in test-yaml cues please") == []
        assert [c.label for c in _YamlFormat.cues({"indent": 2, "relation": "exactly"})] == ["the number 2"]
    finally:
        del REGISTRY["format.test_yaml_cues"]
