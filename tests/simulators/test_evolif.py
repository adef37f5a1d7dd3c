"""The EvolIF tracker (topic moves, per-topic instruction states, one change per turn), the
EvolIFUser around it, and the topic/style loaders it reads."""

import json
from itertools import combinations

import numpy as np
import pytest

from ifgym.core import Verdict
from ifgym.core.constraints import GROUPS, REGISTRY, RULE_GROUPS, conflicts
from ifgym.core.sampling import forbidden_tokens, required_tokens
from ifgym.errors import ConfigError, DataFormatError, IfgymError, UnknownNameError
from ifgym.simulators.assets_io import (
    Style,
    Topic,
    load_styles,
    load_topics,
    styles_from_json,
    topics_from_json,
)
from ifgym.simulators.evolif import EvolIFTracker, EvolIFUser, TrackerConfig

TOPICS = load_topics()
STYLES = (
    Style("s1", "night-shift nurse", ("terse", "practical"), "Writes short, direct messages."),
    Style("s2", "retired sailor", ("chatty",), "Rambles a little and uses sea metaphors."),
)


def run(seed, n, config=None, topics=TOPICS, topic_id=None):
    tracker = EvolIFTracker(topics, config)
    steps = [tracker.reset(np.random.default_rng(seed), topic_id)]
    for _ in range(n - 1):
        step = tracker.step()
        if step is None:
            break
        steps.append(step)
    return steps


def spec_key(step):
    return (step.topic.id, step.move, step.change, tuple(json.dumps(c.to_json()) for c in step.constraints))


def visits(steps):
    """Lengths of consecutive runs on one topic."""
    out = []
    for i, s in enumerate(steps):
        if i == 0 or s.move != "continue":
            out.append(0)
        out[-1] += 1
    return out


def tokens_of(words):
    return {t for w in words for t in w.lower().split()}


# ---------------------------------------------------------------------------------------------
# Invariants over long runs, one row per seed.


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7, 42, 1234, 99999])
def test_invariants_hold_over_a_long_run(seed):
    steps = run(seed, 250)
    assert len(steps) == 250  # the packaged bank is never exhausted in 250 turns
    states = {}  # topic id -> state as the tracker left it
    for i, step in enumerate(steps):
        live = step.constraints
        assert live, "the instruction state is never empty"
        groups = [c.group for c in live]
        assert len(groups) == len(set(groups)), "at most one constraint per group"
        for a, b in combinations(live, 2):
            assert conflicts(a, b) is None, (a, b)
        required = required_tokens(live)
        assert not (required & forbidden_tokens(live)), "forbidden and required keywords are disjoint"
        assert step.turn == i + 1
        if step.move == "new_topic":
            assert step.topic.id not in states, "a new topic is one not used before"
            assert len(live) == 1 and step.change is None
        else:
            before = states[step.topic.id]  # continue and return both start from the topic's state
            if step.move == "return":
                assert step.topic.id != steps[i - 1].topic.id
            check_one_change(before, step)
        states[step.topic.id] = live
    runs = visits(steps)
    assert all(length > 3 for length in runs[:-1]), f"switched after 3 or fewer turns: {runs}"


def check_one_change(before, step):
    old = {c.group: c for c in before}
    new = {c.group: c for c in step.constraints}
    if step.change == "add":
        assert set(new) - set(old) == {step.new.group} and len(new) == len(old) + 1
        assert step.old is None and new[step.new.group] == step.new
    elif step.change == "remove":
        assert set(old) - set(new) == {step.old.group} and len(new) == len(old) - 1
        assert step.new is None and old[step.old.group] == step.old
    elif step.change == "modify":
        assert set(new) == set(old)
        changed = [g for g in new if new[g] != old[g]]
        assert changed == [step.new.group] == [step.old.group]
        assert old[step.old.group] == step.old and new[step.new.group] == step.new
    else:
        raise AssertionError(f"a continue/return turn must carry one change, got {step.change!r}")
    for g in new:  # untouched groups keep their constraint
        if g != step.changed_group:
            assert new[g] == old[g]


def test_moves_changes_and_switch_rate_follow_the_weights():
    steps = [s for seed in range(12) for s in run(seed, 300)]
    moves = {m: sum(s.move == m for s in steps) for m in ("new_topic", "continue", "return")}
    changes = {c: sum(s.change == c for s in steps) for c in ("add", "remove", "modify")}
    assert all(moves.values()) and all(changes.values())
    # the first switch is always new (nothing to return to); after that return outweighs new 0.6:0.4
    switches = moves["new_topic"] - 12 + moves["return"]
    assert 0.5 < moves["return"] / switches < 0.7
    # after >3 turns the dialogue switches with p 0.8: mean visit length ~ 4 + 1/0.8 - 1 = 4.25
    lengths = [v for seed in range(12) for v in visits(run(seed, 300))[:-1]]
    assert 4.0 < np.mean(lengths) < 4.6
    # add outweighs modify outweighs remove (5:4:1 before re-weighting)
    assert changes["add"] > changes["remove"] and changes["modify"] > changes["remove"]


def test_return_restores_the_topic_state_then_changes_it():
    steps = run(5, 200)
    last = {}
    seen_return = 0
    for step in steps:
        if step.move == "return":
            seen_return += 1
            check_one_change(last[step.topic.id], step)
        last[step.topic.id] = step.constraints
    assert seen_return >= 5


# ---------------------------------------------------------------------------------------------
# Determinism.


def test_same_seed_same_specs_and_different_seed_differs():
    a = [spec_key(s) for s in run(11, 120)]
    b = [spec_key(s) for s in run(11, 120)]
    c = [spec_key(s) for s in run(12, 120)]
    assert a == b
    assert a != c


def test_reset_starts_over_on_the_same_tracker():
    tracker = EvolIFTracker(TOPICS)
    first = [spec_key(tracker.reset(np.random.default_rng(3)))] + [spec_key(tracker.step()) for _ in range(30)]
    again = [spec_key(tracker.reset(np.random.default_rng(3)))] + [spec_key(tracker.step()) for _ in range(30)]
    assert first == again


# ---------------------------------------------------------------------------------------------
# Configuration, one row per knob.


@pytest.mark.parametrize(
    ("config", "check"),
    [
        # rule-only play: judged groups never appear
        (TrackerConfig(groups=RULE_GROUPS), lambda s: all(c.group in RULE_GROUPS for c in s.constraints)),
        # a two-group subset
        (TrackerConfig(groups=("length", "case")), lambda s: {c.group for c in s.constraints} <= {"length", "case"}),
        # cap on live constraints
        (TrackerConfig(max_live=2), lambda s: len(s.constraints) <= 2),
        # modify only: the state stays at one constraint
        (TrackerConfig(change_weights={"modify": 1.0}), lambda s: s.change in (None, "modify")),
        # three constraints on a new topic
        (TrackerConfig(initial_constraints=3), lambda s: s.move != "new_topic" or len(s.constraints) == 3),
        # never switch
        (TrackerConfig(p_switch=0.0), lambda s: s.move != "return" and (s.turn == 1 or s.move == "continue")),
        # never return
        (TrackerConfig(p_new=1.0, p_return=0.0), lambda s: s.move != "return"),
    ],
)
def test_config_knobs(config, check):
    for seed in range(4):
        steps = run(seed, 120, config)
        assert all(check(s) for s in steps)


def test_switch_every_time_it_is_allowed():
    # p_switch 1: every visit lasts exactly switch_after + 1 turns
    steps = run(0, 100, TrackerConfig(p_switch=1.0, switch_after=2))
    assert set(visits(steps)[:-1]) == {3}


def test_only_returns_after_the_first_switch_when_p_new_is_zero():
    steps = run(0, 60, TrackerConfig(p_new=0.0, p_return=1.0, p_switch=1.0))
    assert sum(s.move == "new_topic" for s in steps) == 2  # the start and the first switch
    assert {s.topic.id for s in steps} == {steps[0].topic.id, steps[4].topic.id}


def test_sampled_params_stay_in_their_ranges():
    config = TrackerConfig(words=(40, 50), bullets=(3, 3), keyword_count=(2, 2), upper_ratio=(30, 40))
    seen = set()
    for seed in range(30):
        for step in run(seed, 60, config):
            for c in step.constraints:
                seen.add(c.id)
                p = c.params
                if c.id == "length.words":
                    assert 40 <= p["n"] <= 50 and p["relation"] != "exactly"
                elif c.id == "length.characters":
                    assert 200 <= p["n"] <= 1500 and p["relation"] != "exactly"
                elif c.id == "length.sentences":
                    assert 2 <= p["n"] <= 12
                elif c.id == "length.paragraphs":
                    assert 1 <= p["n"] <= 5
                elif c.id == "bullets.count":
                    assert p["n"] == 3
                elif c.id == "keywords.exact_count":
                    assert set(p["counts"].values()) == {2} and 1 <= len(p["counts"]) <= 3
                    assert set(p["counts"]) <= set(step.topic.keywords)
                elif c.id == "forbidden.words":
                    assert set(p["words"]) <= set(step.topic.keywords)
                elif c.id == "case.upper_ratio":
                    assert p["percent"] in (30, 35, 40)
                elif c.id in ("start_with.keyword", "end_with.keyword"):
                    assert p["keyword"] in step.topic.keywords
    assert seen == set(REGISTRY), f"never sampled: {set(REGISTRY) - seen}"


def test_forbidden_words_avoid_the_topic_title():
    # a user asking about sourdough would not forbid "sourdough"
    topic = Topic("t1", "Keeping a sourdough starter alive", "cooking", ("sourdough", "starter", "flour", "jar"))
    for seed in range(20):
        for step in run(seed, 40, TrackerConfig(groups=("forbidden", "length")), topics=[topic]):
            for c in step.constraints:
                if c.id == "forbidden.words":
                    assert set(c.params["words"]) <= {"flour", "jar"}


def test_required_keywords_never_share_a_word_with_forbidden_ones():
    # two-word keywords overlap single ones: "bread flour" contains "flour"
    topic = Topic("t1", "Baking", "cooking", ("flour", "bread flour", "rye", "oven", "crust", "rye crust"))
    config = TrackerConfig(groups=("keywords", "forbidden", "start_with", "end_with"))
    for seed in range(40):
        for step in run(seed, 30, config, topics=[topic, Topic("t2", "Other", "x", ("alpha", "beta"))]):
            assert not (required_tokens(step.constraints) & forbidden_tokens(step.constraints))


def test_modify_moves_a_parameter_or_changes_the_id_within_the_group():
    moved_same_id = moved_other_id = 0
    for seed in range(10):
        for step in run(seed, 150):
            if step.change == "modify":
                assert step.old != step.new and step.old.group == step.new.group
                if step.old.id == step.new.id:
                    moved_same_id += 1
                else:
                    moved_other_id += 1
    assert moved_same_id > 20 and moved_other_id > 20


def test_change_falls_back_to_a_possible_one():
    # only one group in play: add is impossible after the first turn and remove would empty the state,
    # so every change must be a modify even though add has weight 5
    steps = run(0, 30, TrackerConfig(groups=("format",)))
    assert {s.change for s in steps[1:] if s.move == "continue"} == {"modify"}


def test_a_single_topic_bank_is_exhausted_at_the_first_switch():
    topic = Topic("t1", "Only topic", "misc", ("alpha", "beta", "gamma"))
    tracker = EvolIFTracker([topic], TrackerConfig(p_switch=1.0))
    tracker.reset(np.random.default_rng(0))
    assert [tracker.step() is not None for _ in range(3)] == [True] * 3
    assert tracker.step() is None
    assert tracker.step() is None  # stays over


def test_fixed_first_topic_and_unknown_topic():
    steps = run(0, 40, topic_id="t0002")
    assert steps[0].topic.id == "t0002"
    assert sum(s.topic.id == "t0002" and s.move == "new_topic" for s in steps) == 1  # never drawn again as new
    with pytest.raises(UnknownNameError, match="unknown topic id 't002'. Did you mean"):
        EvolIFTracker(TOPICS).reset(np.random.default_rng(0), "t002")


def test_step_before_reset_is_an_error():
    with pytest.raises(IfgymError, match="before reset"):
        EvolIFTracker(TOPICS).step()


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"p_switch": 1.5}, ConfigError, "p_switch"),  # not a probability
        ({"p_new": 0.0, "p_return": 0.0}, ConfigError, r"p_new \+ p_return"),  # no way to switch
        ({"change_weights": {"ad": 1.0}}, UnknownNameError, "Did you mean 'add'"),  # typo in a change name
        ({"change_weights": {"add": -1.0}}, ConfigError, "change_weights"),  # negative weight
        ({"change_weights": {"add": 0.0}}, ConfigError, "positive weight"),  # all zero
        ({"groups": ("lenght",)}, UnknownNameError, "Did you mean 'length'"),  # typo in a group
        ({"groups": ()}, ConfigError, "at least one group"),  # empty subset
        ({"groups": ("case", "case")}, ConfigError, "twice"),  # duplicate group
        ({"max_live": 0}, ConfigError, "max_live"),  # a cap of zero
        ({"max_live": 1, "initial_constraints": 2}, ConfigError, "initial_constraints"),  # cap below start
        ({"words": (300, 30)}, ConfigError, "words"),  # reversed range
        ({"bullets": (0, 3)}, ConfigError, "bullets"),  # zero bullets
        ({"upper_ratio": (20, 120)}, ConfigError, "upper_ratio"),  # beyond 100%
        ({"exact_length_units": ("word",)}, UnknownNameError, "Did you mean 'words'"),  # singular unit
        ({"switch_after": -1}, ConfigError, "switch_after"),  # negative
        ({"switch_after": True}, ConfigError, "switch_after"),  # bool is not an int here
    ],
)
def test_bad_config_is_refused_with_a_clear_error(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        TrackerConfig(**kwargs)


def test_config_from_mapping_accepts_lists_and_refuses_unknown_keys():
    config = TrackerConfig.from_mapping({"words": [10, 20], "groups": ["length"]})  # as a Hydra node gives them
    assert config.words == (10, 20) and config.groups == ("length",)
    with pytest.raises(UnknownNameError, match="Did you mean 'p_switch'"):
        TrackerConfig.from_mapping({"p_swtich": 0.5})


def test_config_from_the_same_mapping_again_is_an_equal_config_of_its_own():
    # every env of a run builds its config from one mapping: the second is a copy of the first, not the first
    mapping = {"groups": ["case", "length"], "change_weights": {"add": 2, "remove": 1}, "words": (10, 20)}
    first, second = TrackerConfig.from_mapping(mapping), TrackerConfig.from_mapping(mapping)
    assert first == second == TrackerConfig(**mapping) and first is not second
    second.change_weights["add"] = 9.0  # one env's config changed by hand leaves the next env's alone
    assert first.change_weights["add"] == 2.0 and TrackerConfig.from_mapping(mapping).change_weights["add"] == 2.0


@pytest.mark.parametrize(
    ("good", "bad", "fragment"),
    [
        ({"words": (1, 5)}, {"words": (True, 5)}, "words"),  # a bool equals 1, yet is refused
        ({"switch_after": 1}, {"switch_after": True}, "switch_after"),
        ({"p_switch": 1}, {"p_switch": True}, "p_switch"),
    ],
)
def test_config_from_mapping_refuses_a_value_equal_to_one_it_accepted(good, bad, fragment):
    TrackerConfig.from_mapping(good)
    with pytest.raises(ConfigError, match=fragment):
        TrackerConfig.from_mapping(bad)


def test_state_is_bounded_by_the_topic_bank_not_the_dialogue_length():
    # what a turn costs is measured by benchmarks/run.py (turns 10 / 100 / 1000); here: nothing grows per turn
    tracker = EvolIFTracker(TOPICS)
    tracker.reset(np.random.default_rng(0))
    steps = 0
    while steps < 3300 and (step := tracker.step()) is not None:
        assert len(step.constraints) <= len(tracker.groups)
        steps += 1
    assert steps == 3300  # topics are revisited: a long dialogue never runs the tracker dry
    assert len(tracker._visited) <= len(TOPICS) and len(tracker._states) <= len(TOPICS)


# ---------------------------------------------------------------------------------------------
# EvolIFUser around the tracker.


def test_user_turns_carry_the_spec_and_json_meta():
    user = EvolIFUser(styles=STYLES)
    turn = user.reset(np.random.default_rng(0))
    history = [{"role": "user", "content": turn.text}]
    turns = [turn]
    for _ in range(20):
        history.append({"role": "assistant", "content": "ok"})
        turn = user.next(history, [Verdict("yes")] * len(turns[-1].spec.constraints))
        history.append({"role": "user", "content": turn.text})
        turns.append(turn)
    for t in turns:
        meta = json.loads(json.dumps(t.spec.to_json()))["meta"]  # JSON-serialisable
        assert meta["style_id"] in ("s1", "s2") and meta["renderer"] == "template"
        assert meta["topic_title"] == next(x.title for x in TOPICS if x.id == t.spec.topic)
        assert t.spec.move in ("new_topic", "continue", "return") and t.text
    assert turns[0].spec.meta["turn"] == 1 and turns[-1].spec.meta["turn"] == 21
    assert user.stats == {"renders": 21}
    assert user.system_prompt is None


def test_user_is_deterministic_and_options_fix_topic_and_style():
    def texts(seed, options=None):
        user = EvolIFUser(styles=STYLES)
        out = [user.reset(np.random.default_rng(seed), options)]
        out += [user.next([], []) for _ in range(15)]
        return [(t.text, t.spec.to_json()) for t in out]

    assert texts(4) == texts(4)
    assert texts(4) != texts(5)
    fixed = texts(4, {"topic_id": "t0010", "style_id": "s2"})
    assert fixed[0][1]["topic"] == "t0010" and fixed[0][1]["meta"]["style_id"] == "s2"


def test_specs_do_not_depend_on_the_renderer():
    # the renderer draws from its own stream, so template and LLM users share the script
    from support.canned_user import all_yes_user_model

    from ifgym.llm import CannedClient

    template = EvolIFUser(styles=STYLES)
    llm = EvolIFUser(renderer="llm", client=CannedClient(all_yes_user_model), styles=STYLES)
    a = [template.reset(np.random.default_rng(8)).spec] + [template.next([], []).spec for _ in range(12)]
    b = [llm.reset(np.random.default_rng(8)).spec] + [llm.next([], []).spec for _ in range(12)]
    strip = lambda s: {k: v for k, v in s.to_json().items() if k != "meta"}  # noqa: E731
    assert [strip(s) for s in a] == [strip(s) for s in b]


@pytest.mark.parametrize(
    ("make", "error", "fragment"),
    [
        (lambda: EvolIFUser(renderer="templates", styles=STYLES), UnknownNameError, "Did you mean 'template'"),
        (lambda: EvolIFUser(renderer="llm", styles=STYLES), ConfigError, "needs a client"),
        (lambda: EvolIFUser(styles=STYLES, tracker_config={"p_swich": 1}), UnknownNameError, "p_switch"),
        (
            lambda: EvolIFUser(styles=STYLES).reset(np.random.default_rng(0), {"topic": "t0001"}),
            UnknownNameError,
            "Did you mean 'topic_id'",
        ),
        (
            lambda: EvolIFUser(styles=STYLES).reset(np.random.default_rng(0), {"style_id": "s3"}),
            UnknownNameError,
            "style id 's3'",
        ),
        (lambda: EvolIFUser(styles=STYLES).next([], []), IfgymError, "before reset"),
    ],
)
def test_user_errors(make, error, fragment):
    with pytest.raises(error, match=fragment):
        make()


def test_user_reports_exhaustion_as_none():
    user = EvolIFUser(
        topics=[{"id": "t1", "title": "Only", "domain": "misc", "keywords": ["alpha", "beta"]}],
        styles=[s.to_json() for s in STYLES],
        tracker_config=TrackerConfig(p_switch=1.0),
    )
    user.reset(np.random.default_rng(0))
    assert [user.next([], []) is not None for _ in range(3)] == [True] * 3
    assert user.next([], []) is None


def test_async_twins_match_the_sync_methods():
    import asyncio

    async def arun():
        user = EvolIFUser(styles=STYLES)
        out = [await user.areset(np.random.default_rng(6))]
        out += [await user.anext([], []) for _ in range(10)]
        return [(t.text, t.spec.to_json()) for t in out]

    user = EvolIFUser(styles=STYLES)
    sync = [user.reset(np.random.default_rng(6))] + [user.next([], []) for _ in range(10)]
    assert asyncio.run(arun()) == [(t.text, t.spec.to_json()) for t in sync]


def test_packaged_banks_load_for_the_default_user():
    user = EvolIFUser()
    turn = user.reset(np.random.default_rng(0))
    assert turn.spec.meta["style_id"] in {s.id for s in load_styles()}
    assert len(load_topics()) >= 300 and len(load_styles()) >= 300


# ---------------------------------------------------------------------------------------------
# Asset loading and validation, one bad entry per row.

GOOD_TOPIC = {"id": "t1", "title": "A title", "domain": "cooking", "keywords": ["salt", "pepper"]}
GOOD_STYLE = {"id": "s1", "persona": "a baker", "traits": ["terse"], "voice": "Short lines."}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"id": "t1"}, "non-empty JSON list"),  # not a list
        ([], "non-empty JSON list"),  # empty bank
        (["t1"], "entry 0: expected an object"),  # entry is not an object
        ([{**GOOD_TOPIC, "title": ""}], "entry 0: field 'title'"),  # empty title
        ([{k: v for k, v in GOOD_TOPIC.items() if k != "domain"}], "entry 0: missing field 'domain'"),
        ([{**GOOD_TOPIC, "keywords": []}], "entry 0: field 'keywords'"),  # no keywords
        ([{**GOOD_TOPIC, "keywords": ["salt", 3]}], r"entry 0: keywords\[1\]"),  # not a string
        ([{**GOOD_TOPIC, "keywords": ["salt", "salt"]}], r"keywords\[1\] 'salt' appears twice"),
        ([GOOD_TOPIC, {**GOOD_TOPIC}], "entry 1: id 't1' already used by entry 0"),  # duplicate id
        ([{**GOOD_TOPIC, "tags": []}], "unknown field"),  # a field the format does not have
    ],
)
def test_bad_topics_name_the_entry_and_field(data, fragment):
    with pytest.raises(DataFormatError, match=fragment):
        topics_from_json(data, "topics.json")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([{**GOOD_STYLE, "voice": "  "}], "entry 0: field 'voice'"),  # blank voice
        ([{**GOOD_STYLE, "traits": "terse"}], "entry 0: field 'traits'"),  # a string, not a list
        ([GOOD_STYLE, {**GOOD_STYLE, "persona": "x"}], "id 's1' already used"),  # duplicate id
    ],
)
def test_bad_styles_name_the_entry_and_field(data, fragment):
    with pytest.raises(DataFormatError, match=fragment):
        styles_from_json(data, "styles.json")


def test_loading_from_a_path(tmp_path):
    good = tmp_path / "topics.json"
    good.write_text(json.dumps([GOOD_TOPIC]), encoding="utf-8")
    assert load_topics(good) == (Topic("t1", "A title", "cooking", ("salt", "pepper")),)
    assert load_topics(good) is load_topics(str(good))  # cached per path
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"broken.json: invalid JSON at line 1"):
        load_topics(broken)
    with pytest.raises(DataFormatError, match="no such file"):
        load_styles(tmp_path / "missing.json")


def test_every_group_is_reachable():
    groups = {c.group for seed in range(5) for s in run(seed, 200) for c in s.constraints}
    assert groups == set(GROUPS)
