"""Renderers: the template renderer's determinism, variety and coverage, what each `restate` states,
the rule check of stated key values, and the LLM renderer's generate → check → regenerate → fall back
loop, driven by a canned user model."""

import asyncio
import json
import re

import numpy as np
import pytest
from support.canned_user import all_yes, call_kind, requirement_count, scripted_user_model

from ifgym.core import Verdict, unstated
from ifgym.core.catalog import NATURAL_QUOTATION_PAIRS
from ifgym.core.constraints import REGISTRY, Constraint
from ifgym.core.sampling import forbidden_tokens
from ifgym.errors import ConfigError
from ifgym.llm import CannedClient
from ifgym.simulators.assets_io import Style, Topic, load_topics
from ifgym.simulators.evolif import EvolIFTracker, EvolIFUser
from ifgym.simulators.evolif.render import (
    LLMRenderer,
    RenderRequest,
    TemplateRenderer,
    parse_checklist,
)

TOPIC = Topic("t1", "Explain how tides work", "science", ("moon", "gravity", "ocean", "tide table"))
STYLE = Style("s1", "retired sailor", ("chatty", "uses sea metaphors"), "Rambles a little and loves the sea.")
WORDS = Constraint("length.words", {"relation": "less_than", "n": 120})
JSON_FMT = Constraint("format.json", {})
FORBID = Constraint("forbidden.words", {"words": ["moon"]})
UPPER = Constraint("case.upper", {})


def request(move="continue", change=None, constraints=(WORDS, JSON_FMT), old=None, new=None, turn=3, style=STYLE, **kw):
    return RenderRequest(
        topic=TOPIC,
        move=move,
        change=change,
        constraints=tuple(constraints),
        old=old,
        new=new,
        turn=turn,
        style=style,
        forbidden_tokens=forbidden_tokens(constraints),
        **kw,
    )


def mentioned(constraint, text):
    return any(p.lower() in text.lower() for p in constraint.phrasings())


def tracker_requests(seed, n):
    tracker = EvolIFTracker(load_topics())
    steps = [tracker.reset(np.random.default_rng(seed))] + [tracker.step() for _ in range(n - 1)]
    return [
        RenderRequest(
            s.topic,
            s.move,
            s.change,
            s.constraints,
            s.old,
            s.new,
            s.turn,
            STYLE,
            (),
            (),
            forbidden_tokens(s.constraints),
        )
        for s in steps
    ]


# ---------------------------------------------------------------------------------------------
# Template renderer


def test_template_is_deterministic_given_the_rng():
    r = TemplateRenderer()
    reqs = tracker_requests(0, 40)
    a = [r.render(q, np.random.default_rng(1)).text for q in reqs]
    b = [r.render(q, np.random.default_rng(1)).text for q in reqs]
    assert a == b


@pytest.mark.parametrize("restate", ["change", "all"])
def test_template_wording_varies_with_the_seed(restate):
    r = TemplateRenderer(restate)
    q = request(change="add", constraints=(WORDS, UPPER), new=UPPER)
    texts = {r.render(q, np.random.default_rng(seed)).text for seed in range(30)}
    assert len(texts) >= 12


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_restate_all_states_every_live_constraint_on_every_turn(seed):
    r = TemplateRenderer("all")
    rng = np.random.default_rng(seed)
    for q in tracker_requests(seed, 120):
        text = r.render(q, rng).text
        for c in q.constraints:
            assert mentioned(c, text), (c, text)


# Values that identify a constraint in a message (quoted as the template quotes them). The “ ” pair is
# left out: the template quotes every keyword with it.
def key_values(c):
    p = c.params
    if c.id.endswith(".keyword"):
        return [p["keyword"]]
    if c.id.endswith(".emoji"):
        return [p["emoji"]]
    if c.id.endswith(".letter"):
        return [f"“{p['letter'].upper()}”"]
    if c.id.endswith(".quotation"):
        return [m for m in (p["left"], p["right"]) if m not in "“”"]
    if c.group == "punctuation":
        return [f"“{p['mark']}”"]
    if c.id == "keywords.exact_count":
        return list(p["counts"])
    if c.id == "forbidden.words":
        return list(p["words"])
    if c.group == "bullets":
        return ["bullet"]
    if c.group == "length":
        return [f" {p['n']} ", f" {_NUMBER.get(p['n'], p['n'])} {c.id.split('.')[1][:-1]}"]
    return []


_NUMBER = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def appears(value, text):
    if value[:1].isalnum():  # a word: whole words only ("tide" is not in "tidewater")
        return re.search(rf"(?<![^\W_]){re.escape(value.lower())}(?![^\W_])", text.lower()) is not None
    return value in text


@pytest.mark.parametrize("seed", range(12))
def test_change_only_never_restates_an_unchanged_live_constraint(seed):
    # A later turn states the change and nothing else: no live constraint the turn does not touch may
    # reappear, by phrasing or by its keyword, emoji or value (unless the changed rule or the topic cue
    # on a return carries the same value).
    r = TemplateRenderer()
    rng = np.random.default_rng(seed)
    checked = 0
    for q in tracker_requests(seed, 150):
        text = r.render(q, rng).text
        if q.move == "new_topic":
            continue
        touched = [c for c in (q.old, q.new) if c is not None]
        allowed = " ".join(text for c in touched for text in c.phrasings()) + " " + q.topic.title
        for c in q.constraints:
            if c in touched:
                continue
            assert not mentioned(c, text), (c, text)
            for value in key_values(c):
                assert not appears(value, text) or appears(value, allowed), (value, c, text)
            checked += 1
    assert checked > 200  # the episodes do keep unchanged live constraints around


@pytest.mark.parametrize("seed", range(6))
def test_change_only_states_exactly_the_change(seed):
    r = TemplateRenderer()
    rng = np.random.default_rng(seed)
    for q in tracker_requests(seed, 120):
        text = r.render(q, rng).text
        if q.move == "new_topic":  # the topic request and its first constraints
            assert _title_in(q, text) and all(mentioned(c, text) for c in q.constraints), text
        elif q.change == "remove":  # which rule is dropped
            assert mentioned(q.old, text) and any(w in text for w in ("no longer", "Drop", "Forget")), text
        elif q.change == "modify":  # from the old value to the new one
            assert mentioned(q.old, text) and mentioned(q.new, text), text
        elif q.change == "add":
            assert mentioned(q.new, text), text
        if q.move == "continue":
            assert not _title_in(q, text), text  # no topic request on the same topic
        if q.new is not None and q.move != "new_topic":
            assert unstated(q.new, text, q.old) == [], text  # the fallback passes the LLM user's own check


def _title_in(q, text):
    return q.topic.title.strip().rstrip(".?!") in text


def test_return_cues_the_topic_and_does_not_restate_its_restored_constraints():
    restored = (WORDS, JSON_FMT, FORBID)
    q = request(move="return", change="add", constraints=(*restored, UPPER), new=UPPER, turn=9)
    for seed in range(20):
        text = TemplateRenderer().render(q, np.random.default_rng(seed)).text
        assert "Explain how tides work" in text and mentioned(UPPER, text)
        assert not any(mentioned(c, text) for c in restored), text
        assert "moon" not in text and "JSON" not in text and "120" not in text
        full = TemplateRenderer("all").render(q, np.random.default_rng(seed)).text
        assert all(mentioned(c, full) for c in (*restored, UPPER))  # the easier variant restates them


def test_return_with_a_modify_names_old_and_new_values_only():
    new = Constraint("length.words", {"relation": "more_than", "n": 200})
    q = request(move="return", change="modify", constraints=(new, JSON_FMT), old=WORDS, new=new, turn=7)
    for seed in range(10):
        text = TemplateRenderer().render(q, np.random.default_rng(seed)).text
        assert mentioned(WORDS, text) and mentioned(new, text) and not mentioned(JSON_FMT, text)


@pytest.mark.parametrize(
    ("req", "expect"),
    [
        # the first turn asks for content about the topic by title
        (request(move="new_topic", turn=1), ["Explain how tides work"]),
        # a later new topic names the new title too
        (request(move="new_topic", turn=9), ["Explain how tides work"]),
        # returning names the earlier topic
        (request(move="return"), ["Explain how tides work"]),
    ],
)
def test_moves_name_the_topic(req, expect):
    r = TemplateRenderer()
    for seed in range(10):
        text = r.render(req, np.random.default_rng(seed)).text
        assert all(e in text for e in expect), text


@pytest.mark.parametrize("restate", ["change", "all"])
def test_move_wordings_differ_between_moves(restate):
    r = TemplateRenderer(restate)
    by_move = {
        m: {r.render(request(move=m, turn=t), np.random.default_rng(s)).text.split("\n")[0] for s in range(40)}
        for m, t in (("new_topic", 1), ("new_topic", 5), ("continue", 5), ("return", 5))
    }
    openings = list(by_move.values())
    for i in range(len(openings)):
        for j in range(i + 1, len(openings)):
            assert not (openings[i] & openings[j])
    assert all(len(v) >= 3 for v in by_move.values())  # several phrasings per move


@pytest.mark.parametrize("restate", ["change", "all"])
def test_removal_and_modification_notes_mention_what_changed(restate):
    r = TemplateRenderer(restate)
    for seed in range(15):
        removed = r.render(request(change="remove", constraints=(WORDS,), old=UPPER), np.random.default_rng(seed)).text
        assert mentioned(UPPER, removed)
        assert any(w in removed for w in ("no longer", "Drop", "Forget"))
        new = Constraint("length.words", {"relation": "more_than", "n": 200})
        modified = r.render(
            request(change="modify", constraints=(new,), old=WORDS, new=new), np.random.default_rng(seed)
        )
        assert mentioned(WORDS, modified.text) and mentioned(new, modified.text)
        assert any(w in modified.text for w in ("instead", "rather than"))
        added = r.render(request(change="add", constraints=(WORDS, UPPER), new=UPPER), np.random.default_rng(seed))
        assert mentioned(UPPER, added.text)


def test_focus_word_is_never_a_forbidden_one():
    # restate="all"'s continue openings may name a topic keyword as a focus; a forbidden one must not be chosen
    r = TemplateRenderer("all")
    q = request(constraints=(FORBID,))
    for seed in range(60):
        text = r.render(q, np.random.default_rng(seed)).text
        assert "moon" not in text.replace("“moon”", "")


def test_every_registered_id_has_its_own_phrasings():
    samples = {
        "start_with.letter": {"letter": "b"},
        "start_with.emoji": {"emoji": "🚀"},
        "start_with.keyword": {"keyword": "tide"},
        "start_with.quotation": {"left": "《", "right": "》"},
        "end_with.letter": {"letter": "e"},
        "end_with.emoji": {"emoji": "🌟"},
        "end_with.keyword": {"keyword": "ocean"},
        "end_with.quotation": {"left": "[", "right": "]"},
        "case.upper_ratio": {"percent": 40},
        "punctuation.include": {"mark": "!"},
        "punctuation.exclude": {"mark": ","},
        "bullets.count": {"n": 4},
        "keywords.exact_count": {"counts": {"moon": 2, "tide table": 1}},
        "forbidden.words": {"words": ["ocean", "gravity"]},
        "emotion.tone": {"emotion": "excited"},
        "style.register": {"style": "passive voice"},
        "reader_age.audience": {"age": "senior"},
        **{cid: {"relation": "exactly", "n": 1} for cid in REGISTRY if cid.startswith("length.")},
    }
    for cid in REGISTRY:
        c = Constraint(cid, samples.get(cid, {}))
        options = c.phrasings()
        assert len(set(options)) >= 3, cid  # the describe() fallback would give only one
        assert all(o[:1].islower() and not o.lower().startswith(("don't", "do not", "never")) for o in options)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"relation": "exactly", "n": 1}, "exactly one paragraph"),  # singular unit
        ({"relation": "less_than", "n": 3}, "three paragraphs"),  # small numbers spelled out
        ({"relation": "more_than", "n": 12}, "12 paragraphs"),  # larger numbers as digits
    ],
)
def test_length_wording(params, fragment):
    options = Constraint("length.paragraphs", params).phrasings()
    assert any(fragment in o for o in options)


# ---------------------------------------------------------------------------------------------
# LLM renderer with a canned user model. V0 is ifgym/EvolIF-v0's user (restates everything, checked by
# the model); the default is EvolIF's (states the change, key values checked by rule).

V0 = {"restate": "all", "checks": "model"}


def llm(fn, regenerations=3, **kw):
    client = CannedClient(fn, role="user")
    return LLMRenderer(client, regenerations=regenerations, **kw), client


def test_llm_draft_that_passes_is_used():
    renderer, client = llm(scripted_user_model(generate=lambda m: "Ahoy! Tell me how tides work, please."), **V0)
    result = renderer.render(request(), np.random.default_rng(0))
    assert result.text == "Ahoy! Tell me how tides work, please."
    assert (result.fallback, result.attempts) == (False, 1)
    assert [call_kind(m) for m in client.requests] == ["generate", "topic", "checklist"]
    assert renderer.stats["renders"] == 1 and renderer.stats["llm_calls"] == 3
    assert renderer.stats["regenerations"] == 0 and renderer.stats["llm_fallbacks"] == 0


def test_llm_regenerates_after_a_failed_constraint_check():
    answers = iter(['{"1": "yes", "2": "no"}', '{"1": "yes", "2": "yes"}'])
    renderer, client = llm(scripted_user_model(checklist=lambda m: next(answers)), **V0)
    result = renderer.render(request(), np.random.default_rng(0))
    assert (result.fallback, result.attempts) == (False, 2)
    assert renderer.stats["regenerations"] == 1 and renderer.stats["constraint_check_failures"] == 1
    second_prompt = [m for m in client.requests if call_kind(m) == "generate"][1][-1]["content"]
    assert "rejected" in second_prompt and JSON_FMT.describe() in second_prompt  # says what was missing


@pytest.mark.parametrize("k", [0, 1, 3])
def test_llm_falls_back_to_the_template_after_k_regenerations(k):
    renderer, client = llm(scripted_user_model(topic=lambda m: "no"), regenerations=k, **V0)
    result = renderer.render(request(), np.random.default_rng(5))
    template = TemplateRenderer("all").render(request(), np.random.default_rng(5)).text
    assert result.text == template and result.fallback and result.attempts == k + 1
    assert renderer.stats["llm_fallbacks"] == 1 and renderer.stats["regenerations"] == k
    assert renderer.stats["topic_check_failures"] == k + 1
    assert len(client.requests) == 2 * (k + 1)  # generate + topic check per draft; no checklist


@pytest.mark.parametrize(
    ("script", "stat"),
    [
        # an answer that is neither yes nor no is a failed check, not a pass
        ({"topic": lambda m: "Sure, it looks fine to me."}, "unparseable_checks"),
        # a checklist that is not JSON
        ({"checklist": lambda m: "all good"}, "unparseable_checks"),
        # a checklist missing an item
        ({"checklist": lambda m: '{"1": "yes"}'}, "unparseable_checks"),
        # a checklist with a value that is not yes/no
        ({"checklist": lambda m: '{"1": "yes", "2": "maybe"}'}, "unparseable_checks"),
        # an empty draft is rejected before any check
        ({"generate": lambda m: "   "}, "empty_generations"),
    ],
)
def test_llm_bad_answers_count_as_failed_checks(script, stat):
    renderer, _ = llm(scripted_user_model(**script), regenerations=1, **V0)
    result = renderer.render(request(), np.random.default_rng(0))
    assert result.fallback and renderer.stats[stat] == 2


def test_llm_without_constraints_skips_the_checklist():
    renderer, client = llm(scripted_user_model(), **V0)
    result = renderer.render(request(constraints=()), np.random.default_rng(0))
    assert not result.fallback
    assert [call_kind(m) for m in client.requests] == ["generate", "topic"]


def test_llm_v0_prompts_carry_style_topic_change_constraints_and_recent_history():
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}"} for i in range(10)]
    new = Constraint("case.upper", {})
    q = request(change="add", constraints=(WORDS, new), new=new, history=history, missed=(JSON_FMT.describe(),))
    renderer, client = llm(scripted_user_model(), **V0)
    renderer.render(q, np.random.default_rng(0))
    system, user = (m["content"] for m in client.requests[0])
    assert STYLE.persona in system and "Rambles a little" in system and "chatty" in system
    assert TOPIC.title in user and new.describe() in user and WORDS.describe() in user
    assert "message number 9" in user and "message number 6" in user and "message number 5" not in user
    assert "ignored" in user and JSON_FMT.describe() in user
    checklist = client.requests[2][-1]["content"]
    assert requirement_count(client.requests[2]) == 2 and new.describe() in checklist


@pytest.mark.parametrize("kw", [V0, {}])
def test_llm_async_matches_sync(kw):
    fn = scripted_user_model(checklist=lambda m: '{"1": "no", "2": "yes"}', topic=lambda m: "no")
    q = request(move="return", change="add", constraints=(WORDS, UPPER), new=UPPER)
    sync, _ = llm(fn, regenerations=2, **kw)
    asyn, _ = llm(fn, regenerations=2, **kw)
    a = sync.render(q, np.random.default_rng(3))
    b = asyncio.run(asyn.arender(q, np.random.default_rng(3)))
    assert a == b and sync.stats == asyn.stats and a.fallback


@pytest.mark.parametrize(
    ("persona", "expected"),
    [
        ("retired sailor", "You are a retired sailor."),  # article added
        ("engineer on night shifts", "You are an engineer on night shifts."),  # 'an' before a vowel
        ("A retired schoolteacher", "You are a retired schoolteacher."),  # article already there
    ],
)
def test_llm_persona_wording(persona, expected):
    renderer, client = llm(scripted_user_model())
    style = Style("s9", persona, ("terse",), "Short lines.")
    renderer.render(request(style=style), np.random.default_rng(0))
    assert expected in client.requests[0][0]["content"]


def test_llm_regenerations_must_be_a_count():
    with pytest.raises(ConfigError, match="regenerations must be an int >= 0"):
        LLMRenderer(CannedClient(["x"]), regenerations=-1)


def test_llm_generation_is_cleaned_of_labels_and_quotes():
    renderer, _ = llm(scripted_user_model(generate=lambda m: 'User: "Tell me about tides."'))
    assert renderer.render(request(), np.random.default_rng(0)).text == "Tell me about tides."


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ('{"1": "yes", "2": "no"}', 2, [True, False]),
        ('Here you go:\n```json\n{"1": "Yes", "2": "YES"}\n```', 2, [True, True]),  # fenced, any case
        ("{1: 'yes', 2: 'yes'}", 2, [True, True]),  # repaired (unquoted keys, single quotes)
        ('{"1": true, "2": false}', 2, [True, False]),  # booleans
        ('["yes", "no", "yes"]', 3, [True, False, True]),  # a list in order
        ('{"1": "yes"}', 2, None),  # item 2 missing
        ('{"1": "yes", "2": "perhaps"}', 2, None),  # not yes/no
        ("no idea", 1, None),  # not JSON at all
        ('["yes"]', 2, None),  # list of the wrong length
    ],
)
def test_parse_checklist(text, n, expected):
    assert parse_checklist(text, n) == expected


def test_adaptive_user_with_llm_renderer_counts_stats_and_passes_missed_requirements():
    client = CannedClient(scripted_user_model(topic=lambda m: "no"), role="user")
    user = EvolIFUser(renderer="llm", client=client, styles=[STYLE], regenerations=1, adaptive=True, **V0)
    first = user.reset(np.random.default_rng(0))
    assert first.spec.meta["fallback"] is True and first.spec.meta["renderer"] == "llm"
    verdicts = [Verdict("no", "missed")] * len(first.spec.constraints)
    user.next([{"role": "user", "content": first.text}, {"role": "assistant", "content": "reply"}], verdicts)
    assert user.stats["renders"] == 2 and user.stats["llm_fallbacks"] == 2 and user.stats["regenerations"] == 2
    last_generate = [m for m in client.requests if call_kind(m) == "generate"][-1][-1]["content"]
    assert "ignored" in last_generate and first.spec.constraints[0].describe() in last_generate
    user.reset(np.random.default_rng(1))
    assert user.stats["renders"] == 1  # counters are per episode


def test_checklist_example_is_valid_json():
    # the example in the checklist prompt must itself parse, or a literal model would copy garbage
    msgs = LLMRenderer.checklist_messages(request(), "text")
    example = msgs[-1]["content"].rsplit("e.g. ", 1)[1].rstrip(".")
    assert json.loads(example) == json.loads(all_yes(2))


# ---------------------------------------------------------------------------------------------
# EvolIF's user (the default): states only the change, key values checked by rule


KEYWORDS = Constraint("keywords.exact_count", {"counts": {"moon": 2, "tide table": 1}})


def test_llm_change_only_prompt_states_the_change_and_nothing_else():
    q = request(change="add", constraints=(WORDS, JSON_FMT, UPPER), new=UPPER)
    renderer, client = llm(scripted_user_model(generate=lambda m: "Also, write it all in uppercase please."))
    result = renderer.render(q, np.random.default_rng(0))
    assert not result.fallback
    prompt = client.requests[0][-1]["content"]
    assert UPPER.describe() in prompt and "remember" in prompt
    assert WORDS.describe() not in prompt and JSON_FMT.describe() not in prompt
    assert [call_kind(m) for m in client.requests] == ["generate"]  # same topic: a rule check, no model call


def test_llm_modify_prompt_names_old_and_new():
    new = Constraint("length.words", {"relation": "more_than", "n": 200})
    q = request(change="modify", constraints=(new, JSON_FMT), old=WORDS, new=new)
    renderer, client = llm(scripted_user_model(generate=lambda m: "Make it longer than 200 words now."))
    assert not renderer.render(q, np.random.default_rng(0)).fallback
    prompt = client.requests[0][-1]["content"]
    assert WORDS.describe() in prompt and new.describe() in prompt and JSON_FMT.describe() not in prompt


def test_llm_draft_missing_a_key_value_is_redrafted_with_the_reason():
    drafts = iter(["Please mention the moon a couple of times.", "Use “moon” exactly 2 times and “tide table” once."])
    q = request(change="add", constraints=(WORDS, KEYWORDS), new=KEYWORDS)
    renderer, client = llm(scripted_user_model(generate=lambda m: next(drafts)))
    result = renderer.render(q, np.random.default_rng(0))
    assert (result.fallback, result.attempts) == (False, 2)
    assert renderer.stats["constraint_check_failures"] == 1 and renderer.stats["llm_calls"] == 2
    second = client.requests[1][-1]["content"]
    assert "rejected" in second and "tide table" in second  # names the value it left out


@pytest.mark.parametrize(
    ("move", "turn", "checked"),
    [
        ("new_topic", 1, False),  # the first turn: nothing to switch from (EvolIF checks turn 0 by rule only)
        ("new_topic", 6, True),  # a new topic later on
        ("return", 6, True),  # back to an earlier topic
        ("continue", 6, False),  # same topic: no model call at all
    ],
)
def test_llm_topic_is_checked_by_the_model_only_when_the_topic_changes(move, turn, checked):
    q = request(move=move, turn=turn, change=None if move == "new_topic" else "add", constraints=(UPPER,), new=UPPER)
    renderer, client = llm(scripted_user_model(generate=lambda m: "About tides: write it in uppercase."))
    assert not renderer.render(q, np.random.default_rng(0)).fallback
    kinds = [call_kind(m) for m in client.requests]
    assert kinds == (["generate", "topic"] if checked else ["generate"])
    if checked:
        question = client.requests[1][-1]["content"]
        assert TOPIC.title in question and "generic reference" in question


def test_llm_topic_unrelated_draft_is_redrafted_then_falls_back_to_the_change_only_template():
    q = request(move="return", turn=8, change="add", constraints=(WORDS, UPPER), new=UPPER)
    renderer, client = llm(
        scripted_user_model(generate=lambda m: "Regarding the earlier topic: all caps.", topic=lambda m: "no"),
        regenerations=2,
    )
    result = renderer.render(q, np.random.default_rng(4))
    assert result.fallback and result.attempts == 3
    assert result.text == TemplateRenderer().render(q, np.random.default_rng(4)).text
    assert renderer.stats["topic_check_failures"] == 3 and renderer.stats["llm_fallbacks"] == 1
    assert not mentioned(WORDS, result.text)  # the fallback states only the change too


def test_llm_removal_needs_no_key_values():
    # EvolIF asks nothing of a removal's wording beyond the draft itself
    q = request(change="remove", constraints=(WORDS,), old=UPPER)
    renderer, client = llm(scripted_user_model(generate=lambda m: "Forget the capitals thing."))
    assert not renderer.render(q, np.random.default_rng(0)).fallback and len(client.requests) == 1


def test_user_is_response_independent_unless_adaptive():
    def play(adaptive, reply):
        client = CannedClient(scripted_user_model(generate=lambda m: "x"), role="user")
        user = EvolIFUser(renderer="llm", client=client, styles=[STYLE], regenerations=0, adaptive=adaptive)
        turn = user.reset(np.random.default_rng(2))
        history = [{"role": "user", "content": turn.text}]
        for _ in range(6):
            history.append({"role": "assistant", "content": reply})
            turn = user.next(list(history), [Verdict("no", "missed")] * len(turn.spec.constraints))
            history.append({"role": "user", "content": turn.text})
        return [m[-1]["content"] for m in client.requests if call_kind(m) == "generate"]

    quiet, loud = play(False, "SECRET REPLY ONE"), play(False, "another reply entirely")
    assert quiet == loud and not any("SECRET" in p or "ignored" in p for p in quiet)
    reacting = play(True, "SECRET REPLY ONE")
    assert reacting != quiet and any("SECRET REPLY ONE" in p for p in reacting)


# ---------------------------------------------------------------------------------------------
# unstated: the key values a message must contain


SAMPLES = {
    "start_with.letter": {"letter": "b"},
    "start_with.emoji": {"emoji": "🚀"},
    "start_with.keyword": {"keyword": "tide"},
    "start_with.quotation": {"left": "《", "right": "》"},
    "end_with.letter": {"letter": "a"},
    "end_with.emoji": {"emoji": "🌟"},
    "end_with.keyword": {"keyword": "ocean"},
    "end_with.quotation": {"left": "[", "right": "]"},
    "case.upper_ratio": {"percent": 40},
    "punctuation.include": {"mark": "!"},
    "punctuation.exclude": {"mark": ","},
    "bullets.count": {"n": 4},
    "keywords.exact_count": {"counts": {"moon": 2, "tide table": 1}},
    "forbidden.words": {"words": ["ocean", "gravity"]},
    "emotion.tone": {"emotion": "excited"},
    "style.register": {"style": "passive voice"},
    "reader_age.audience": {"age": "senior"},
    "length.words": {"relation": "less_than", "n": 1200},
    "length.sentences": {"relation": "exactly", "n": 3},
    "length.paragraphs": {"relation": "more_than", "n": 2},
    "length.characters": {"relation": "less_than", "n": 800},
}


@pytest.mark.parametrize("cid", sorted(REGISTRY))
def test_every_id_has_key_values_and_every_template_phrasing_states_them(cid):
    c = Constraint(cid, SAMPLES.get(cid, {}))
    assert unstated(c, "Please write it again."), cid  # a message without the values states nothing
    for clause in c.phrasings():
        assert unstated(c, _sentence_of(clause)) == [], clause


def _sentence_of(clause):
    return clause[:1].upper() + clause[1:] + "."


@pytest.mark.parametrize(
    ("constraint", "text", "ok"),
    [
        # letters must be named as letters: the article "a" is not the letter a
        (Constraint("end_with.letter", {"letter": "a"}), "End with a short line.", False),
        (Constraint("end_with.letter", {"letter": "a"}), "End on the letter a.", True),
        (Constraint("start_with.letter", {"letter": "T"}), "Begin with 'T'.", True),
        (Constraint("start_with.letter", {"letter": "T"}), "Begin with T please.", True),  # standing alone
        (Constraint("start_with.letter", {"letter": "T"}), "Tell me more.", False),  # only inside a word
        # keywords must start a word
        (Constraint("start_with.keyword", {"keyword": "art"}), "Start with a new line.", False),
        (Constraint("start_with.keyword", {"keyword": "art"}), "Begin with 'Art'.", True),
        # numbers as digits, with thousands separators, or as words
        (Constraint("length.words", {"relation": "less_than", "n": 1200}), "Under 1,200 words.", True),
        (Constraint("length.sentences", {"relation": "exactly", "n": 3}), "Exactly three sentences.", True),
        (Constraint("length.sentences", {"relation": "exactly", "n": 3}), "Exactly 13 sentences.", False),
        (Constraint("bullets.count", {"n": 4}), "Use some bullet points.", False),
        (Constraint("case.upper_ratio", {"percent": 40}), "About 40 percent capitals.", True),
        # formats, styles, tones: word starts ("formal" is not in "informal")
        (Constraint("format.json", {}), "Answer in json.", True),
        (Constraint("style.register", {"style": "formal"}), "Keep it informal.", False),
        (Constraint("style.register", {"style": "formal"}), "Write formally.", True),
        (Constraint("emotion.tone", {"emotion": "sad"}), "Sound sad.", True),
        (Constraint("reader_age.audience", {"age": "youth"}), "Aim it at teenagers.", True),
        (Constraint("reader_age.audience", {"age": "child"}), "Aim it at teenagers.", False),
        (Constraint("case.upper", {}), "ALL CAPS please.", True),
        (Constraint("case.lower", {}), "No capitals.", False),
        # quotation pairs need both marks; emoji exact
        (Constraint("start_with.quotation", {"left": "《", "right": "》"}), "Open with 《 please.", False),
        (Constraint("end_with.emoji", {"emoji": "🌟"}), "End with a star emoji.", False),
        # ASCII marks may be named
        (Constraint("punctuation.exclude", {"mark": ":"}), "No colons at all.", True),
    ],
)
def test_unstated_table(constraint, text, ok):
    assert (unstated(constraint, text) == []) is ok, unstated(constraint, text)


def test_unstated_on_a_modify_asks_only_for_what_changed():
    old = Constraint("keywords.exact_count", {"counts": {"moon": 2, "tide table": 1}})
    new = Constraint("keywords.exact_count", {"counts": {"moon": 3, "tide table": 1}})
    assert unstated(new, "Use moon three times now.", old) == []  # tide table is unchanged
    assert unstated(new, "Use moon three times now.") != []  # stated from scratch it needs both
    assert unstated(new, "Use moon more often.", old) == ["how often “moon” occurs (3 times)"]
    dropped = Constraint("forbidden.words", {"words": ["ocean"]})
    assert unstated(dropped, "You may say gravity again.", FORBID_TWO) == []  # nothing was added


FORBID_TWO = Constraint("forbidden.words", {"words": ["ocean", "gravity"]})


def test_quotation_pairs_in_the_pool_are_distinct_from_the_keyword_quotes():
    # key_values() above leaves out the “ ” pair only; every other pair identifies its constraint
    assert sum(pair == ("“", "”") for pair in NATURAL_QUOTATION_PAIRS) == 1
