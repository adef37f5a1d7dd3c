"""FlexBench's user side: SOP files, caller files, personas, end detection, the scripted and LLM callers, leakage."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from support.paths import REPO
from support.prompts import prompt_kind

from ifgym.errors import BackendError, ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import CannedClient
from ifgym.simulators.flexbench import (
    LEVELS,
    SOP_DIR,
    LLMUser,
    ScriptedUser,
    assistant_closed,
    caller_sheet_for,
    load_caller_sheet,
    load_personas,
    load_sop,
    parse_end_check,
    sop_names,
    user_hung_up,
)

ROOT = REPO
GOOD_MD = "---\nname: mine\nopening_line: Hi, this is Sam from Acme.\n---\nAsk the caller's name. If they ask, help.\n"


# --- SOP files --------------------------------------------------------------------------------


def test_at_least_three_shipped_sops_with_branches_and_an_opening_line():
    names = sop_names()
    assert len(names) >= 3
    for name in names:
        sop = load_sop(name)
        assert len(sop.instruction.split()) >= 150, name
        assert sop.opening_line and sop.opening_line not in sop.instruction
        assert sop.instruction.count("If ") + sop.instruction.count(" if ") >= 2, name  # conditional branches
        assert caller_sheet_for(sop) is not None  # the offline caller can play every shipped SOP


@pytest.mark.parametrize(
    "filename, text, error, fragment",
    [
        ("a.md", "", DataFormatError, "empty"),  # empty file
        ("a.md", "  \n\n", DataFormatError, "empty"),  # only whitespace
        ("a.md", "Ask the caller's name.", DataFormatError, "no opening line"),  # no front matter at all
        ("a.md", "---\nname: x\n---\nAsk the name.", DataFormatError, "no opening line"),  # front matter without it
        ("a.md", "---\nopening_line:   \n---\nAsk.", DataFormatError, "no opening line"),  # blank opening line
        ("a.md", "---\nopening_line: Hi\nAsk the name.", DataFormatError, "never closed"),  # unclosed front matter
        ("a.md", "---\nopenng_line: Hi\n---\nAsk.", DataFormatError, "Did you mean 'opening_line'"),  # typo
        ("a.md", "---\nopening_line: Hi\n---\n", DataFormatError, "no instruction text"),  # no body
        ("a.md", "---\nopening line\n---\nAsk.", DataFormatError, "key: value"),  # not key: value
        ("a.txt", GOOD_MD, DataFormatError, "must end in .md or .json"),  # unknown format
        ("a.json", "", DataFormatError, "empty"),  # empty JSON
        ("a.json", "{oops", DataFormatError, "not valid JSON"),  # broken JSON
        ("a.json", '{"instruction": "Ask."}', DataFormatError, "no opening line"),  # JSON without opening line
        ("a.json", '{"instruction": "Ask.", "opening": "Hi"}', DataFormatError, "Did you mean 'opening_line'"),
        ("a.json", '{"instruction": 3, "opening_line": "Hi"}', DataFormatError, "must be a string"),
    ],
)
def test_bad_sop_files_give_one_clear_error(tmp_path, filename, text, error, fragment):
    path = tmp_path / filename
    path.write_text(text)
    with pytest.raises(error, match=fragment):
        load_sop(path)


@pytest.mark.parametrize(
    "source, error, fragment",
    [
        ("merchant_onbording", UnknownNameError, "Did you mean 'merchant_onboarding'"),  # typo in a shipped name
        ("/no/such/sop.md", ConfigError, "does not exist"),  # a path that is not there
        (42, ConfigError, "shipped SOP name"),  # not a name, path or mapping
    ],
)
def test_sop_lookup_errors(source, error, fragment):
    with pytest.raises(error, match=fragment):
        load_sop(source)


def test_user_written_sops_in_both_formats(tmp_path):
    md = tmp_path / "mine.md"
    md.write_text(GOOD_MD)
    sop = load_sop(str(md))
    assert (sop.name, sop.opening_line, sop.instruction) == (
        "mine",
        "Hi, this is Sam from Acme.",
        GOOD_MD.split("---\n")[2].strip(),
    )
    js = tmp_path / "other.json"
    js.write_text(json.dumps({"instruction": "Ask the name.", "opening_line": "Hello."}))
    assert load_sop(js).name == "other"  # the file name is the default name
    assert load_sop({"instruction": "Ask.", "opening_line": "Hi."}).opening_line == "Hi."


# --- caller files and personas -------------------------------------------------------------------


def sheet(**changes):
    data = {
        "goal": "Get it done.",
        "facts": [
            {
                "name": "in_charge",
                "label": "in charge",
                "values": {"yes": 1, "no": 1},
                "cues": ["in charge"],
                "answers": {"yes": ["Yes, that's me."], "no": ["No, not me."]},
            },
            {
                "name": "email",
                "label": "email",
                "values": ["a@b.c"],
                "when": {"in_charge": "yes"},
                "cues": ["e-?mail"],
                "answers": {"*": ["It's {email}."]},
            },
        ],
    }
    data.update(changes)
    return data


def fact_change(index, **changes):
    data = sheet()
    data["facts"][index].update(changes)
    return data


@pytest.mark.parametrize(
    "data, error, fragment",
    [
        (sheet(gaol="x"), DataFormatError, "Did you mean 'goal'"),  # typo in a field
        (fact_change(1, when={"platform": "x"}), UnknownNameError, "facts must be defined before"),  # later fact
        (fact_change(1, when={"in_charge": "maybe"}), UnknownNameError, "Allowed: no, yes"),  # no such value
        (fact_change(1, answers={"*": ["It's {emial}."]}), DataFormatError, "names no fact"),  # bad placeholder
        (fact_change(0, answers={"yes": ["Yes."]}), DataFormatError, "no lines for value"),  # value without lines
        (fact_change(0, cues=["("]), DataFormatError, "bad regular expression"),  # broken cue
        (fact_change(0, values={"yes": -1, "no": 1}), DataFormatError, "weights"),  # negative weight
        (fact_change(1, name="in_charge"), DataFormatError, "defined twice"),  # duplicate fact
        (fact_change(0, name="in charge"), DataFormatError, "identifier"),  # names are used as {placeholders}
    ],
)
def test_bad_caller_files(data, error, fragment):
    with pytest.raises(error, match=fragment):
        load_caller_sheet(data)


def test_shipped_personas_cover_three_levels_with_every_trait():
    profiles = load_personas()
    assert set(LEVELS) <= set(profiles)
    for p in profiles.values():
        assert p.communication_style and p.information_disclosure and p.problem_solving and p.catchphrases
    assert profiles["poor"].patience < profiles["general"].patience and profiles["good"].patience is None


@pytest.mark.parametrize(
    "entry, fragment",
    [
        (
            {"communication_style": "x", "information_disclosure": "x", "problem_solving": "x", "patience": 0},
            "patience",
        ),
        (
            {
                "communication_style": "x",
                "information_disclosure": "x",
                "problem_solving": "x",
                "deflect_probability": 2,
            },
            "probability",
        ),
        ({"communication_style": "x", "information_disclosure": "x"}, "problem_solving"),  # a trait missing
        (
            {"communication_style": "x", "information_disclosure": "x", "problem_solving": "x", "patiense": 2},
            "Did you mean 'patience'",
        ),
    ],
)
def test_bad_persona_files(entry, fragment):
    with pytest.raises(DataFormatError, match=fragment):
        load_personas({"poor": entry})


# --- end detection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, closed",
    [
        ("Thank you for your time, goodbye!", True),  # the plain farewell
        ("All set. Have a great day.", True),  # a wish at the end
        ("Thanks for calling Harbor Pay. Take care.", True),
        ("I'll let you go now.", True),
        ("Goodbye for now — and thanks?", False),  # ends with a question: the call goes on
        ("Thank you for your time. Could you confirm your email?", False),  # thanks mid-call
        ("Which platform do you use?", False),
        ("", False),  # an empty reply closes nothing
        ("Bye" + " filler" * 60, False),  # a farewell far from the end is not a close
        # near misses: farewell words inside an ordinary sentence, or the call still owes something
        ("Please take care to paste the API key from your dashboard into the plugin settings.", False),
        ("Take care of the plugin settings first.", False),  # 'take care of' the task is no goodbye
        ("Before ending the call I need to confirm your email address.", False),  # an obligation, not a close
        ("We'll end the call once the setup is done.", False),
        ("Bye the way, I'll email you the guide.", False),  # a typo of 'by the way'
        ("Have a great day! One more thing: I need to confirm your email first.", False),  # still owes a step
        # anchored farewells still close, with a name, an emoji or a courtesy line after them
        ("Thank you, goodbye, Dana!", True),
        ("Next step: I'll call back tomorrow. Thanks for your help. Take care 🙂", True),
        ("Thank you, goodbye! Feel free to call us back any time.", True),
    ],
)
def test_assistant_closing_rules(text, closed):
    assert assistant_closed(text) is closed


@pytest.mark.parametrize(
    "text, hung_up",
    [
        ("I don't have time for this. [hangs up]", True),  # explicit marker
        ("*hangs up*", True),
        ("Okay, thanks. Bye!", True),  # a farewell at the very end
        ("Goodbye.", True),
        ("I'm hanging up now.", True),
        ("Stop calling me.", True),
        ("Sorry, I've got to go.", True),
        ("Bye the way, which plan was it?", False),  # 'bye' not at the end
        ("Yes, go on.", False),
        ("", False),
        ("I have to go now, sorry.", True),  # leaving, at the end of the words
        ("I need to go check the dashboard, one sec.", False),  # goes to do something and comes back
        ("I have to go get the owner.", False),  # fetching someone is not hanging up
        ("Hang on, I need to go find that email.", False),
    ],
)
def test_user_hang_up_rules(text, hung_up):
    assert user_hung_up(text) is hung_up


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"user_hung_up": false, "assistant_closed": true, "helpful": true}', (False, True, True)),
        (
            'Sure: ```json\n{"user_hung_up": "no", "assistant_closed": "no", "helpful": "yes"}\n```',
            (False, False, True),
        ),
        ('{"user_hung_up": true', (True, None, None)),  # truncated JSON: what is readable counts
        ('{"helpful": "maybe"}', None),  # nothing readable
        ("The caller seems fine.", None),  # no JSON at all
    ],
)
def test_end_detector_parsing(text, expected):
    check = parse_end_check(text)
    assert (None if check is None else (check.user_hung_up, check.assistant_closed, check.helpful)) == expected


# --- the scripted caller --------------------------------------------------------------------------


def play(user, seed, agent_lines, options=None):
    turn = user.reset(np.random.default_rng(seed), options)
    texts = [turn.text]
    history = [{"role": "assistant", "content": user.sop.opening_line}, {"role": "user", "content": turn.text}]
    for line in agent_lines:
        history.append({"role": "assistant", "content": line})
        nxt = user.next(history, [])
        if nxt is None:
            texts.append(f"<end:{user.end_reason}>")
            break
        history.append({"role": "user", "content": nxt.text})
        texts.append(nxt.text)
    return dict(user.facts), texts


LINES = [
    "Am I speaking with the person in charge of the store's payment settings?",
    "Could you confirm the email address on the account?",
    "Which e-commerce platform does your store run on?",
    "Have you already chosen a fee plan in your dashboard?",
]


def test_same_seed_same_facts_and_same_user_turns():
    a = play(ScriptedUser("merchant_onboarding"), 5, LINES)
    b = play(ScriptedUser("merchant_onboarding"), 5, LINES)
    assert a == b
    others = {json.dumps(play(ScriptedUser("merchant_onboarding"), s, LINES)) for s in range(6)}
    assert len(others) > 1  # seeds change the facts and the phrasing


def test_the_caller_answers_from_its_facts_and_pinned_facts_win():
    user = ScriptedUser("merchant_onboarding", cooperativeness="good")
    facts, texts = play(user, 1, LINES, {"facts": {"in_charge": "yes", "platform": "WooCommerce"}})
    assert facts["in_charge"] == "yes" and facts["platform"] == "WooCommerce" and facts["owner_name"] is None
    assert facts["email"] in texts[2] and "WooCommerce" in texts[3]
    _, texts = play(user, 1, LINES, {"facts": {"in_charge": "no"}})
    assert any(line in texts[2] for line in ("not sure", "No idea"))  # a fact it does not have: it says so


def test_a_question_asked_again_is_answered_again():
    user = ScriptedUser("merchant_onboarding", cooperativeness="good")
    _, texts = play(user, 2, [LINES[0], LINES[0]], {"facts": {"in_charge": "yes"}})
    assert texts[2].startswith("As I said") or "As I said" in texts[2]


def test_a_poor_caller_loses_patience_on_unhelpful_turns_and_hangs_up():
    user = ScriptedUser("merchant_onboarding", cooperativeness="poor")
    _, texts = play(user, 3, ["Lovely weather today.", "Lovely weather today.", "Lovely weather today."])
    assert texts[-1] == "<end:user_lost_patience>" and len(texts) == 3  # patience 2: two unhelpful turns
    assert "[hangs up]" in user.final_message and user.stats["unhelpful_turns"] == 2


@pytest.mark.parametrize(
    "level, patience, expected_end",
    [
        ("good", "persona", None),  # a good caller never runs out
        ("general", "persona", "<end:user_lost_patience>"),  # 4 unhelpful turns
        ("poor", None, None),  # patience off
        ("good", 1, "<end:user_lost_patience>"),  # an explicit int applies to every persona
    ],
)
def test_patience_by_persona_and_override(level, patience, expected_end):
    user = ScriptedUser("merchant_onboarding", cooperativeness=level, patience=patience)
    _, texts = play(user, 4, ["Hmm."] * 6)
    assert (texts[-1] if texts[-1].startswith("<end:") else None) == expected_end


def test_the_call_ends_when_the_assistant_closes_it():
    user = ScriptedUser("station_lead")
    _, texts = play(user, 0, ["Thanks for your time, goodbye!"])
    assert texts[-1] == "<end:assistant_closed>" and user.end_reason == "assistant_closed"


def test_the_episode_meta_says_what_the_env_records():
    # a poor caller (patience 2) pinned to in_charge=no; two idle turns: one point left, then it hangs up
    user = ScriptedUser("merchant_onboarding", cooperativeness="poor")
    play(user, 0, ["Hmm."], {"facts": {"in_charge": "no"}})
    meta = user.episode_meta()
    assert (meta["cooperativeness"], meta["facts"]["in_charge"], meta["patience"]) == ("poor", "no", 1)
    assert meta["final_user_message"] is None  # the call goes on
    _, texts = play(user, 0, ["Hmm.", "Hmm."], {"facts": {"in_charge": "no"}})
    assert texts[-1] == "<end:user_lost_patience>" and user.episode_meta()["patience"] == 0
    assert "[hangs up]" in user.episode_meta()["final_user_message"]


def test_asking_a_deflected_question_again_costs_no_patience():
    # seed 5: the poor caller deflects the ID question ("Who did you say you were again?"); asking it
    # again word for word is the right move, not a wasted turn
    question = "Could you give me the last four digits of your associate ID?"
    user = ScriptedUser("station_lead", cooperativeness="poor")
    _, texts = play(user, 5, [question, question])
    assert user.stats["deflections"] == 1 and "unhelpful_turns" not in user.stats
    assert user.patience == 2 and any(ch.isdigit() for ch in texts[2])  # answered the second time


def test_asking_again_about_a_fact_the_caller_does_not_have_is_a_repeat():
    user = ScriptedUser("merchant_onboarding", cooperativeness="poor")
    _, texts = play(
        user, 0, ["What is their name?", "Sorry, what is their name again?"], {"facts": {"in_charge": "yes"}}
    )
    assert texts[2].startswith("As I said") and user.stats["unhelpful_turns"] == 1 and user.patience == 1


@pytest.mark.parametrize(
    "parts, facts, joined",
    [
        (["Look,", "And?"], {}, "Look, and?"),  # a lead-in ending in a comma goes on in lower case
        (["Look,", "I'm the owner."], {}, "Look, I'm the owner."),  # "I" keeps its capital
        (["Look,", "Shopify, that's what we use."], {"platform": "Shopify"}, "Look, Shopify, that's what we use."),
        (["Look,", "Dana Whitfield handles it."], {"owner": "Dana Whitfield"}, "Look, Dana Whitfield handles it."),
        (["Can we speed this up?", "And?"], {}, "Can we speed this up? And?"),  # a full sentence before: unchanged
    ],
)
def test_catchphrases_join_the_line_that_follows(parts, facts, joined):
    from ifgym.simulators.flexbench.callers import _join

    assert _join(parts, facts) == joined


def test_a_poor_caller_never_says_look_and_with_a_capital():
    lines = []
    for seed in range(30):
        _, texts = play(ScriptedUser("merchant_onboarding", cooperativeness="poor", patience=None), seed, ["Hmm."] * 4)
        lines += texts
    assert any(line.startswith("Look, ") for line in lines)  # the catchphrase did come up
    assert not any(re.search(r"Look, (?!I\b)[A-Z]", line) for line in lines), [x for x in lines if "Look, " in x]


def test_a_poor_caller_sometimes_deflects_first():
    deflected = 0
    for seed in range(10):
        user = ScriptedUser("station_lead", cooperativeness="poor")
        play(user, seed, ["Could you give me the last four digits of your associate ID?"])
        deflected += user.stats.get("deflections", 0)
    assert 0 < deflected < 10  # deflect_probability 0.5 in personas.json


@pytest.mark.parametrize(
    "kwargs, options, error, fragment",
    [
        ({"cooperativeness": "nice"}, None, UnknownNameError, "cooperativeness"),  # unknown level
        ({"patience": 0}, None, ConfigError, "patience"),
        ({}, {"mood": "x"}, UnknownNameError, "reset option"),  # unknown reset option
        ({}, {"facts": {"in_charg": "yes"}}, UnknownNameError, "Did you mean 'in_charge'"),  # pinned fact typo
        ({}, {"facts": {"in_charge": "maybe"}}, UnknownNameError, "value of fact"),  # pinned value not allowed
    ],
)
def test_bad_user_settings(kwargs, options, error, fragment):
    with pytest.raises(error, match=fragment):
        play(ScriptedUser("merchant_onboarding", **kwargs), 0, [], options)


def test_the_scripted_caller_needs_a_fact_sheet(tmp_path):
    path = tmp_path / "mine.md"
    path.write_text(GOOD_MD)
    with pytest.raises(ConfigError, match="needs a caller file with facts"):
        ScriptedUser(str(path))
    (tmp_path / "mine.user.json").write_text(json.dumps(sheet()))
    assert ScriptedUser(str(path)).sheet.facts[0].name == "in_charge"  # the companion file is found


# --- the LLM caller ---------------------------------------------------------------------------------


def llm_answers(caller_lines, detector="{}"):
    """A CannedClient standing in for the user model: caller lines in turn, a fixed end-detector answer."""
    lines = iter(caller_lines)

    def answer(messages):
        if prompt_kind(messages) == "caller.end":
            return detector
        if prompt_kind(messages) == "caller.speak":
            return next(lines)
        if prompt_kind(messages) == "caller.design":
            return json.dumps(
                {
                    "business_context": "A shop owner.",
                    "goal": "Get paid.",
                    "typical_questions": ["How long?"],
                    "catchphrases": ["Right."],
                }
            )
        raise AssertionError(messages[0]["content"][:60])

    return CannedClient(answer, role="user", model="user-model")


def run_llm(user, agent_lines, seed=0):
    turn = user.reset(np.random.default_rng(seed))
    history = [
        {"role": "system", "content": "SOP TEXT"},
        {"role": "assistant", "content": user.sop.opening_line},
        {"role": "user", "content": turn.text},
    ]
    for line in agent_lines:
        history.append({"role": "assistant", "content": line})
        nxt = user.next(history, [])
        if nxt is None:
            return history, user.end_reason
        history.append({"role": "user", "content": nxt.text})
    return history, None


def test_llm_caller_prompt_flips_roles_and_carries_persona_and_facts_not_the_sop():
    client = llm_answers(
        ['"Caller: Hello, who is this?"', "Yes, I'm the owner."],
        '{"user_hung_up": false, "assistant_closed": false, "helpful": true}',
    )
    user = LLMUser("merchant_onboarding", client=client, cooperativeness="general")
    history, end = run_llm(user, ["Am I speaking with the person in charge?"])
    assert end is None and history[2]["content"] == "Hello, who is this?"  # label and quotes stripped
    generation = [r for r in client.requests if "role-playing" in r[0]["content"]][-1]
    assert [m["role"] for m in generation] == ["system", "user", "assistant", "user"]  # agent = user role
    assert generation[1]["content"] == user.sop.opening_line
    system = generation[0]["content"]
    assert "Cooperativeness: general" in system and "Facts about your situation" in system
    assert user.sop.instruction[:60] not in json.dumps(client.requests) and "SOP TEXT" not in json.dumps(
        client.requests
    )


@pytest.mark.parametrize(
    "lines, detector, end",
    [
        (["Hi.", "Forget it. [hangs up]"], "{}", "user_hung_up"),  # keyword rule on the caller's words
        (["Hi.", "Okay."], '{"user_hung_up": true, "assistant_closed": false, "helpful": true}', "user_hung_up"),
        (["Hi.", "Okay."], '{"user_hung_up": false, "assistant_closed": true, "helpful": true}', "assistant_closed"),
        (["Hi.", "Okay."], "not json", None),  # unreadable detector: the call goes on
    ],
)
def test_llm_caller_end_detection(lines, detector, end):
    user = LLMUser("merchant_onboarding", client=llm_answers(lines, detector), cooperativeness="good")
    _, reason = run_llm(user, ["Which platform do you use?"])
    assert reason == end
    if detector == "not json":
        assert user.stats["end_check_unparsed"] == 1


def test_llm_caller_closing_rule_needs_no_model_call():
    client = llm_answers(["Hi."])
    user = LLMUser("merchant_onboarding", client=client)
    _, reason = run_llm(user, ["Thank you for your time, goodbye!"])
    assert reason == "assistant_closed" and len(client.requests) == 1  # only the first line was generated


def test_llm_caller_loses_patience_when_the_detector_says_unhelpful():
    unhelpful = '{"user_hung_up": false, "assistant_closed": false, "helpful": false}'
    user = LLMUser(
        "merchant_onboarding", client=llm_answers(["Hi.", "Hm.", "What?"], unhelpful), cooperativeness="poor"
    )
    _, reason = run_llm(user, ["Nice weather.", "Nice weather again."])
    assert reason == "user_lost_patience" and "[hangs up]" in user.final_message


def test_llm_caller_without_detector_counts_repeats_as_unhelpful():
    user = LLMUser(
        "merchant_onboarding",
        client=llm_answers(["Hi.", "Hm.", "What?", "Huh?"]),
        end_detector=False,
        cooperativeness="poor",
    )
    _, reason = run_llm(user, ["Same thing.", "Same thing.", "Same thing."])
    assert reason == "user_lost_patience"


def test_empty_generations_fall_back_to_a_persona_line():
    user = LLMUser(
        "merchant_onboarding", client=llm_answers(["", "  ", '""']), max_retries=1, cooperativeness="general"
    )
    turn = user.reset(np.random.default_rng(0))
    assert turn.text in load_personas()["general"].fillers and user.stats["fallbacks"] == 1


def test_llm_caller_infers_the_persona_delta_once_without_a_caller_file(tmp_path):
    path = tmp_path / "mine.md"
    path.write_text(GOOD_MD)
    client = llm_answers(["Hello?", "Hello again?"])
    user = LLMUser(str(path), client=client, end_detector=False)
    user.reset(np.random.default_rng(0))
    user.reset(np.random.default_rng(1))
    inference = [r for r in client.requests if "design callers" in r[0]["content"]]
    assert len(inference) == 1 and "Ask the caller's name." in inference[0][1]["content"]  # it reads the SOP
    assert user.persona.delta.goal == "Get paid."


def test_failed_persona_inference_is_a_clear_error(tmp_path):
    path = tmp_path / "mine.md"
    path.write_text(GOOD_MD)
    client = CannedClient(["not json"], role="user")
    with pytest.raises(BackendError, match="persona"):
        LLMUser(str(path), client=client).reset(np.random.default_rng(0))


def test_llm_caller_async_twins():
    client = llm_answers(["Hi.", "Yes."], '{"user_hung_up": false, "assistant_closed": false, "helpful": true}')
    user = LLMUser("merchant_onboarding", client=client)

    async def go():
        first = await user.areset(np.random.default_rng(0))
        history = [
            {"role": "assistant", "content": user.sop.opening_line},
            {"role": "user", "content": first.text},
            {"role": "assistant", "content": "Are you in charge?"},
        ]
        return first.text, (await user.anext(history, [])).text

    assert asyncio.run(go()) == ("Hi.", "Yes.")


# --- leakage resistance --------------------------------------------------------------------------------


def _imports(source: str, package: str) -> set[str]:
    """Absolute names of every module (and imported name) a module's source imports; relative imports resolved.

    `package` is the package the module lives in (e.g. "ifgym.simulators"): `from ..rewards import x`
    there is `ifgym.rewards.x`. Imports inside functions count too (ast.walk sees every node).
    """
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                if node.level - 1 > len(parts) - 1:
                    raise AssertionError(f"relative import beyond the top package: level {node.level} in {package}")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{module}" if module else base
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize(
    "source, leaks",
    [
        ("from ifgym.rewards import flexbench", True),  # absolute
        ("from ..rewards import flexbench", True),  # relative, two levels up from ifgym.simulators
        ("from ..rewards.flexbench import gate", True),
        ("from . import base", False),  # a sibling in simulators
        ("def f():\n    from ifgym.rewards.flexbench import load_dimensions", True),  # hidden in a function
        ("import ifgym.rewards.flexbench as dims", True),
        ("from ifgym.rewards import judge", False),  # another rewards module is no FlexBench leak
    ],
)
def test_the_import_scan_sees_relative_and_nested_imports(source, leaks):
    found = _imports(source, "ifgym.simulators")
    assert any(m.startswith("ifgym.rewards.flexbench") for m in found) is leaks, found


def test_no_simulator_module_imports_the_dimensions():
    for path in sorted((ROOT / "simulators").rglob("*.py")):
        leaks = {m for m in _imports(path.read_text(), "ifgym.simulators") if m.startswith("ifgym.rewards.flexbench")}
        assert not leaks, f"{path.name} imports {leaks}"
    user = sorted((ROOT / "simulators" / "flexbench").glob("*.py"))
    assert len(user) > 1
    for path in user:
        own = _imports(path.read_text(), "ifgym.simulators")
        assert not {m for m in own if m.startswith("ifgym.rewards")}  # the FlexBench user imports nothing from rewards
        assert "assets/flexbench" not in path.read_text()  # nor reads their files


def test_importing_the_user_side_does_not_load_the_evaluation_side():
    code = "import sys, ifgym.simulators.flexbench; print('ifgym.rewards.flexbench' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_user_assets_do_not_contain_dimension_text():
    from ifgym.rewards.flexbench import load_dimensions

    for name in sop_names():
        dims = load_dimensions(name)
        user_side = (SOP_DIR / f"{name}.user.json").read_text().lower()
        for d in dims.dimensions:
            assert d.criterion.lower() not in user_side
            assert d.precondition is None or d.precondition.lower() not in user_side
