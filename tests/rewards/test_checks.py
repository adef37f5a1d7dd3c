"""`semantics="evolif"`: the verdicts EvolIF's released evaluator gives, edge case by edge case.

Each row: an EvolIF instruction (id, args), a reply, ifgym's strict verdict, EvolIF's verdict, and
why. The EvolIF verdicts were worked out by hand from EvolIF's check_following code (and confirmed
by running that code on these rows outside the repository); the strict column shows that ifgym's
own reading stays the stricter one where the two differ.
"""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import pytest
from support.texts import drawn_pairs

import ifgym  # noqa: F401
from ifgym.core import Constraint
from ifgym.core.constraints import REGISTRY
from ifgym.core.evolif import from_evolif
from ifgym.errors import UnknownNameError
from ifgym.rewards import SEMANTICS, EvolIFScorer, check
from ifgym.rewards.evolif.evaluator import _evolif_count

FENCED_MD_BULLETS = "```markdown\n- one\n- two\n```"

# (EvolIF id, args, reply, ifgym strict, EvolIF) — one edge case per row.
ROWS: list[tuple[str, Any, str, str, str]] = [
    # format: EvolIF strips one enclosing code fence first, whatever its language tag
    ("format", {"mode": "json"}, '```json\n{"a": 1}\n```', "no", "yes"),  # fenced JSON passes
    ("format", {"mode": "xml"}, "```xml\n<a><b/></a>\n```", "no", "yes"),  # fenced XML passes
    ("format", {"mode": "html"}, "```html\n<p>hi</p>\n```", "no", "yes"),  # fenced HTML passes
    ("format", {"mode": "csv"}, "```csv\na,b\n1,2\n```", "no", "yes"),  # fenced CSV passes
    ("format", {"mode": "markdown"}, "```markdown\nplain words\n```", "yes", "yes"),  # code to ifgym too
    ("format", {"mode": "json"}, '```\n{"a": 1}\n```', "no", "yes"),  # a fence without a tag too
    ("format", {"mode": "json"}, 'Here:\n```json\n{"a": 1}\n```', "no", "no"),  # text before the fence: not enclosing
    ("format", {"mode": "json"}, '{"x": NaN}', "no", "yes"),  # json.loads accepts NaN; ifgym refuses it
    ("format", {"mode": "csv"}, "Just one sentence, with a comma.", "no", "yes"),  # any single line is CSV
    ("format", {"mode": "csv"}, "a,b\n1,2,3", "no", "no"),  # rows of unequal width fail in both
    ("format", {"mode": "markdown"}, "No markup at all.", "no", "yes"),  # only ``` balance is checked
    ("format", {"mode": "markdown"}, "# T\n```\nopen fence", "no", "no"),  # an unclosed fence fails in both
    ("format", {"mode": "html"}, "Intro text <b>bold</b> outro", "no", "yes"),  # text outside tags is allowed
    ("format", {"mode": "html"}, "<p>a</br></p>", "yes", "no"),  # a closing void tag pops the stack
    ("format", {"mode": "html"}, "no tags here", "no", "no"),  # at least one tag in both
    # bullets: '*' and '-' lines over the raw reply
    ("countableItems", {"num": 2}, FENCED_MD_BULLETS, "no", "yes"),  # bullets inside a fenced block count
    ("countableItems", {"num": 0}, "No list here.", "yes", "yes"),  # num 0 = no bullet points, both semantics
    ("countableItems", {"num": 0}, "- one item", "no", "no"),  # num 0 with a bullet fails in both
    ("countableItems", {"num": 1}, "Intro\n---\nText", "no", "yes"),  # a '---' rule is a '-' line
    ("countableItems", {"num": 1}, "**Bold** heading\n* item", "yes", "yes"),  # '**' lines are not bullets
    ("countableItems", {"num": 2}, "+ a\n+ b", "yes", "no"),  # '+' bullets do not count for EvolIF
    # end with: punctuation stripped from the end, then a raw suffix test
    ("endwith", {"mode": "emoji", "value": "😀"}, "Great job 😀!", "no", "yes"),  # emoji then '!' ends with it
    ("endwith", {"mode": "keyword", "value": "kyoto"}, "We end in Kyoto 😀", "yes", "no"),  # keyword then emoji
    ("endwith", {"mode": "keyword", "value": "kyoto"}, "We end in Kyoto.", "yes", "yes"),  # trailing '.' stripped
    ("endwith", {"mode": "keyword", "value": "art"}, "the finest mozart", "no", "yes"),  # raw suffix, no word edge
    ("endwith", {"mode": "letter", "value": "e"}, "The café", "yes", "no"),  # EvolIF's last ASCII letter is 'f'
    # start with: edge whitespace and punctuation stripped, then a raw prefix test
    ("startwith", {"mode": "keyword", "value": "art"}, "Artists gather here.", "no", "yes"),  # raw prefix
    ("startwith", {"mode": "keyword", "value": "kyoto"}, "**Kyoto** is old.", "yes", "yes"),  # '**' stripped
    ("startwith", {"mode": "keyword", "value": "Kyoto\nTemples"}, "Kyoto\nTemples stand.", "yes", "yes"),
    ("startwith", {"mode": "keyword", "value": "Kyoto\nTemples"}, "Kyoto Temples stand.", "yes", "no"),  # verbatim
    ("startwith", {"mode": "letter", "value": "l"}, "Élan", "no", "yes"),  # EvolIF skips 'É'; ifgym folds it to 'e'
    ("startwith", {"mode": "quotation", "left": "《", "right": "》"}, "《Title》 text", "yes", "yes"),
    # length
    ("length", {"mode": "characters", "relation": "exactly", "number": 5}, " abc ", "no", "yes"),  # raw len()
    ("length", {"mode": "characters", "relation": "exactly", "number": 3}, " abc ", "yes", "no"),  # stripped: ifgym
    ("length", {"mode": "word", "relation": "more_than", "number": 0}, "hi", "yes", "yes"),  # more_than 0 accepted
    ("length", {"mode": "word", "relation": "more_than", "number": 0}, "", "no", "no"),  # an empty reply has no word
    ("length", {"mode": "paragraph", "relation": "exactly", "number": 2}, "a\n\n\nb", "yes", "yes"),
    ("length", {"mode": "sentence", "relation": "exactly", "number": 2}, "Dr. Smith left. He was tired.", "yes", "yes"),
    # keywords: \b for word-character keywords, plain substring otherwise; counts below 1 unchecked
    ("existence", {"tea": 0}, "tea for two", "no", "yes"),  # count 0: ifgym 'not at all', EvolIF skips it
    ("existence", {"well-known": 1}, "an unwell-known fact", "no", "yes"),  # hyphenated: substring for EvolIF
    ("existence", {"Mexican culture": 1}, "Mexican\nculture", "yes", "no"),  # phrase: whitespace verbatim
    ("forbidden", ["art"], "a party of artists", "yes", "yes"),  # whole word in both
    # case: ASCII letters only
    ("case", {"mode": "all_upper"}, "CAFé", "no", "yes"),  # é is not an ASCII letter
    ("case", {"mode": "all_upper"}, "123 !!!", "no", "yes"),  # no letters at all passes for EvolIF
    ("case", {"mode": "min_upper", "min": 50}, "12345", "no", "yes"),  # no letters: EvolIF passes
    ("case", {"mode": "min_upper", "min": 50}, "ABcd", "yes", "yes"),  # 50% exactly
    # punctuation: a substring test in both
    ("punctuation", {"mode": "must_include", "value": "……"}, "Well……", "yes", "yes"),
    ("punctuation", {"mode": "must_not_include", "value": ","}, "a, b", "no", "no"),
]


@pytest.mark.parametrize(("iid", "args", "reply", "strict", "evolif"), ROWS)
def test_semantics_table(iid: str, args: Any, reply: str, strict: str, evolif: str) -> None:
    constraint = from_evolif(iid, args)
    assert check(constraint, reply).label == strict
    verdict = check(constraint, reply, semantics="evolif")
    assert (verdict.label, verdict.source) == (evolif, "rule:evolif")
    assert verdict.reason.startswith("EvolIF: ")


def test_every_rule_id_has_an_evolif_reading() -> None:
    for cid, kind in REGISTRY.items():
        if not kind.judged:
            assert check(Constraint.from_json(_example(cid)), "Some reply.", semantics="evolif").source == "rule:evolif"


def _example(cid: str) -> dict[str, Any]:
    params: dict[str, dict[str, Any]] = {
        "start_with.letter": {"letter": "a"},
        "end_with.letter": {"letter": "a"},
        "start_with.emoji": {"emoji": "😀"},
        "end_with.emoji": {"emoji": "😀"},
        "start_with.keyword": {"keyword": "some"},
        "end_with.keyword": {"keyword": "reply"},
        "start_with.quotation": {"left": "(", "right": ")"},
        "end_with.quotation": {"left": "(", "right": ")"},
        "case.upper_ratio": {"percent": 10},
        "punctuation.include": {"mark": "!"},
        "punctuation.exclude": {"mark": "."},
        "bullets.count": {"n": 0},
        "keywords.exact_count": {"counts": {"reply": 1}},
        "forbidden.words": {"words": ["tea"]},
    }
    if cid.startswith("length."):
        return {"id": cid, "params": {"relation": "more_than", "n": 0}}
    return {"id": cid, "params": params.get(cid, {})}


@pytest.mark.parametrize(
    ("iid", "args"),
    [
        ("countableItems", {"num": 0}),  # no bullet points
        ("length", {"mode": "word", "relation": "more_than", "number": 0}),  # a non-empty reply
        ("length", {"mode": "characters", "relation": "exactly", "number": 0}),  # EvolIF accepts any number >= 0
        ("startwith", {"mode": "keyword", "value": "Kyoto\nTemples"}),  # a keyword with a newline
        ("endwith", {"mode": "keyword", "value": "see\nyou"}),
        ("existence", {"a": 1, "b": 2, "c": 3, "d": 1}),  # EvolIF's edits grow the set beyond three
        ("existence", {"tea": 0}),  # a count EvolIF does not check
    ],
)
def test_argument_shapes_evolif_accepts_are_read_and_round_trip(iid: str, args: Any) -> None:
    constraint = from_evolif(iid, args)
    assert Constraint.from_json(json.loads(json.dumps(constraint.to_json()))) == constraint
    assert constraint.describe().endswith(".")
    check(constraint, "A reply.")  # both semantics give a verdict
    check(constraint, "A reply.", semantics="evolif")


def test_num_zero_is_described_as_no_bullet_points() -> None:
    assert "not use any bullet points" in from_evolif("countableItems", {"num": 0}).describe()
    assert from_evolif("length", {"mode": "word", "relation": "more_than", "number": 0}).describe() == (
        "Write at least one word."
    )


def test_bad_semantics_names_the_choices_and_evolif_has_no_loose() -> None:
    constraint = from_evolif("format", {"mode": "json"})
    with pytest.raises(UnknownNameError, match="Did you mean 'evolif'"):
        check(constraint, "{}", semantics="evolf")
    with pytest.raises(ValueError, match="one reading"):
        check(constraint, "{}", loose=True, semantics="evolif")
    assert SEMANTICS == ("ifgym", "evolif")
    with pytest.raises(UnknownNameError):
        EvolIFScorer(semantics="EvolIF")


def test_env_scores_with_evolif_semantics_and_records_it(tmp_path) -> None:
    script = tmp_path / "dialogue.jsonl"
    turns = [
        {"turn": 1, "active_topic": 7, "user_query": "Give JSON.", "instructions": [
            {"id": "format", "args": {"mode": "json"}, "description": ""},
            {"id": "countableItems", "args": {"num": 0}, "description": ""}]},
        {"turn": 2, "active_topic": 7, "user_query": "Longer.", "instructions": [
            {"id": "format", "args": {"mode": "json"}, "description": ""},
            {"id": "length", "args": {"mode": "characters", "relation": "more_than", "number": 0}, "description": ""}]},
    ]  # fmt: skip
    script.write_text("\n".join(json.dumps(t) for t in turns) + "\n", encoding="utf-8")
    fenced = '```json\n{"a": 1}\n```'
    results = {}
    for semantics in SEMANTICS:
        env = gym.make("ifgym/EvolIF-v1", script=str(script), patience=None, checker_semantics=semantics)
        env.reset(seed=0)
        _, reward, _, _, info = env.step(fenced)
        episode = env.unwrapped.episode
        assert episode.meta["checker_semantics"] == semantics
        results[semantics] = (
            reward,
            [v["label"] for v in info["verdicts"]],
            [v["label"] for v in info["loose_verdicts"]],
        )
    # ifgym: a fenced reply is not JSON (strict), loose strips the fence; EvolIF: yes, one reading in both lists
    assert results["ifgym"] == (0.5, ["no", "yes"], ["yes", "yes"])
    assert results["evolif"] == (1.0, ["yes", "yes"], ["yes", "yes"])
    with pytest.raises(UnknownNameError, match="checker_semantics"):
        gym.make("ifgym/EvolIF-v1", checker_semantics="paper")


def test_cli_key_scores_with_evolif_semantics_and_the_summary_says_so(tmp_path, capsys) -> None:
    from ifgym.cli import main

    out = tmp_path / "run" / "episodes.jsonl"
    args = ["eval", "policy=scripted", "episodes=1", "env.max_turns=2", "progress=false", "plots=false"]
    assert main([*args, "env.checker_semantics=evolif", f"output={out}"]) == 0
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["checker_semantics"] == "evolif" and summary["loose"] == {}  # one reading: no loose column
    assert "checker semantics: evolif" in capsys.readouterr().out
    episode = json.loads(out.read_text().splitlines()[0])
    assert episode["meta"]["checker_semantics"] == "evolif"
    assert {v["source"] for t in episode["turns"] for v in t["verdicts"]} == {"rule:evolif"}


def test_evolif_keyword_counts_without_a_pattern_agree_with_its_pattern() -> None:
    # a keyword absent from ASCII text (any case) is counted 0 without compiling a pattern: the same count
    pieces = ["ab", "AB", "Ab", "ba", "a", "b", "_", " ", "  ", "\n", "-", ".", "c"]
    keywords = ["ab", "AB", "ba", "a b", "ab ba", "a-b", "abc", "b."]
    met = 0
    for text, keyword in drawn_pairs(5, pieces, keywords, 3000, 12):
        pattern = r"\b" + re.escape(keyword) + r"\b" if re.fullmatch(r"\w+", keyword) else re.escape(keyword)
        want = len(re.findall(pattern, text, re.IGNORECASE))
        met += want > 0
        assert _evolif_count(text, keyword) == want, (text, keyword)
    assert met > 150
