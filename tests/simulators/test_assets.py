"""Validation of the seed assets shipped in ifgym.simulators/assets (topics.json, styles.json).

Each check is a small function that returns a list of problems (empty = fine). The checks run on the
shipped files and, table-driven, on hand-made bad records, so a check that could never fail is caught.
"""

import importlib.resources
import json
import re
from collections import Counter

import pysbd
import pytest

MIN_COUNT = 300
KEYWORD_RE = re.compile(r"^[a-z]+(?:[ -][a-z]+)*$")  # lowercase letters, single spaces/hyphens inside
TOPIC_FIELDS = ("id", "title", "domain", "keywords")
STYLE_FIELDS = ("id", "persona", "traits", "voice")
SEGMENTER = pysbd.Segmenter(language="en", clean=False)


def load_asset(name: str) -> list[dict]:
    path = importlib.resources.files("ifgym.simulators") / "assets" / name
    return json.loads(path.read_text(encoding="utf-8"))


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and value.strip() == value and value != ""


def id_problems(records: list[dict], prefix: str) -> list[str]:
    """Ids must be unique, zero-padded to four digits and sequential from 1."""
    problems = []
    ids = [r.get("id") for r in records]
    for dup, n in Counter(ids).items():
        if n > 1:
            problems.append(f"id {dup!r} used {n} times")
    for i, rid in enumerate(ids, start=1):
        if rid != f"{prefix}{i:04d}":
            problems.append(f"record {i} has id {rid!r}, expected {prefix}{i:04d}")
    return problems


def topic_problems(topic: dict) -> list[str]:
    """Problems with one topic record."""
    problems = [
        f"field {f!r} missing or not a clean non-empty string"
        for f in TOPIC_FIELDS[:3]
        if not _nonempty_str(topic.get(f))
    ]
    if set(topic) != set(TOPIC_FIELDS):
        problems.append(f"fields {sorted(topic)} != {sorted(TOPIC_FIELDS)}")
    keywords = topic.get("keywords")
    if not isinstance(keywords, list):
        return [*problems, "keywords is not a list"]
    if not 8 <= len(keywords) <= 12:
        problems.append(f"{len(keywords)} keywords, expected 8 to 12")
    for kw in keywords:
        if not isinstance(kw, str) or not KEYWORD_RE.match(kw):
            problems.append(f"bad keyword {kw!r}")
    for kw, n in Counter(keywords).items():
        if n > 1:
            problems.append(f"keyword {kw!r} repeated")
    return problems


def style_problems(style: dict) -> list[str]:
    """Problems with one style record."""
    problems = [
        f"field {f!r} missing or not a clean non-empty string"
        for f in ("id", "persona", "voice")
        if not _nonempty_str(style.get(f))
    ]
    if set(style) != set(STYLE_FIELDS):
        problems.append(f"fields {sorted(style)} != {sorted(STYLE_FIELDS)}")
    traits = style.get("traits")
    if not isinstance(traits, list):
        return [*problems, "traits is not a list"]
    if not 2 <= len(traits) <= 4:
        problems.append(f"{len(traits)} traits, expected 2 to 4")
    if not all(_nonempty_str(t) for t in traits):
        problems.append("empty or padded trait")
    if len(set(traits)) != len(traits):
        problems.append("repeated trait")
    voice = style.get("voice")
    if isinstance(voice, str) and voice:
        if not voice.endswith("."):
            problems.append("voice is not a finished sentence")
        if len(SEGMENTER.segment(voice)) > 2:
            problems.append("voice has more than two sentences")
    return problems


def duplicate_problems(values: list[str], what: str) -> list[str]:
    """Case-insensitive duplicates among values."""
    return [f"{what} {v!r} appears {n} times" for v, n in Counter(v.lower() for v in values).items() if n > 1]


GOOD_TOPIC = {
    "id": "t0001",
    "title": "Plan a picnic",
    "domain": "cooking",
    "keywords": ["sandwiches", "blanket", "basket", "fruit", "park", "weather", "drinks", "ice-cream"],
}
GOOD_STYLE = {"id": "s0001", "persona": "baker", "traits": ["warm", "chatty"], "voice": "Talks about bread."}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, None),  # the baseline record is clean
        ({"title": ""}, "'title'"),  # empty title
        ({"domain": " cooking"}, "'domain'"),  # padded value slipped through a hand edit
        ({"keywords": GOOD_TOPIC["keywords"][:7]}, "7 keywords"),  # below the 8 minimum
        ({"keywords": GOOD_TOPIC["keywords"] + list("abcde")}, "13 keywords"),  # above the 12 maximum
        ({"keywords": ["Park", *GOOD_TOPIC["keywords"][1:]]}, "bad keyword 'Park'"),  # uppercase
        ({"keywords": ["big  park", *GOOD_TOPIC["keywords"][1:]]}, "bad keyword"),  # double space
        ({"keywords": ["park's", *GOOD_TOPIC["keywords"][1:]]}, "bad keyword"),  # apostrophe
        ({"keywords": ["vitamin-c2", *GOOD_TOPIC["keywords"][1:]]}, "bad keyword"),  # digit
        ({"keywords": ["-park", *GOOD_TOPIC["keywords"][1:]]}, "bad keyword"),  # leading hyphen
        ({"keywords": ["park", *GOOD_TOPIC["keywords"][1:], "park"]}, "repeated"),  # duplicate keyword
        ({"keywords": "park, basket"}, "not a list"),  # a string instead of a list
        ({"extra": 1}, "fields"),  # unexpected field
    ],
)
def test_topic_check_catches(change, expected):
    problems = topic_problems({**GOOD_TOPIC, **change})
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, None),  # the baseline record is clean
        ({"persona": ""}, "'persona'"),  # empty persona
        ({"voice": "Talks about bread"}, "finished sentence"),  # truncated voice text
        ({"voice": "Talks. About. Bread."}, "more than two sentences"),  # voice should stay short
        ({"traits": ["warm"]}, "1 traits"),  # below the 2 minimum
        ({"traits": ["a", "b", "c", "d", "e"]}, "5 traits"),  # above the 4 maximum
        ({"traits": ["warm", "warm"]}, "repeated trait"),  # duplicate trait
        ({"traits": ["warm", ""]}, "empty"),  # empty trait
        ({"traits": "warm"}, "not a list"),  # a string instead of a list
    ],
)
def test_style_check_catches(change, expected):
    problems = style_problems({**GOOD_STYLE, **change})
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        (["t0001", "t0002"], []),  # sequential, padded
        (["t0001", "t0001"], ["used 2 times", "expected t0002"]),  # duplicate
        (["t1", "t0002"], ["expected t0001"]),  # not zero-padded
        (["t0001", "t0003"], ["expected t0002"]),  # gap in the sequence
    ],
)
def test_id_check_catches(ids, expected):
    problems = id_problems([{"id": i} for i in ids], "t")
    assert len(problems) == len(expected)
    for want in expected:
        assert any(want in p for p in problems), problems


def test_duplicate_check_is_case_insensitive():
    assert duplicate_problems(["Plan a picnic", "plan a PICNIC", "Other"], "title") == [
        "title 'plan a picnic' appears 2 times"
    ]


def test_topics_asset():
    topics = load_asset("topics.json")
    assert isinstance(topics, list)
    assert len(topics) >= MIN_COUNT
    problems = id_problems(topics, "t") + duplicate_problems([t["title"] for t in topics], "title")
    for topic in topics:
        problems += [f"{topic.get('id')}: {p}" for p in topic_problems(topic)]
    assert problems == []
    assert len({t["domain"] for t in topics}) >= 16


def test_styles_asset():
    styles = load_asset("styles.json")
    assert isinstance(styles, list)
    assert len(styles) >= MIN_COUNT
    problems = id_problems(styles, "s")
    problems += duplicate_problems([f"{s['persona']} / {s['voice']}" for s in styles], "persona+voice")
    for style in styles:
        problems += [f"{style.get('id')}: {p}" for p in style_problems(style)]
    assert problems == []
