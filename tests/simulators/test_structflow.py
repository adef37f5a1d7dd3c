"""StructFlow dialogues: the packaged dataset, the offline and LLM generators, the user, and the env end to end.

The dataset tests read StructFlowBench's released file as it ships in the package (MIT, with its
LICENSE and SOURCE). The LLM generator runs against a CannedClient scripted per stage; the
end-to-end episode talks to a real OpenAI-compatible server on 127.0.0.1 (CannedServer) for both the
policy and the judge.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
from collections import Counter
from itertools import combinations
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf
from support.canned_server import CannedServer

import ifgym
from ifgym.core import unstated
from ifgym.core.constraints import Constraint, conflicts
from ifgym.core.structflow import STRUCTURAL_TYPES
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import CannedClient, LLMConfig, make_client
from ifgym.policies import ChatPolicy, ScriptedPolicy
from ifgym.runner.rollout import rollout
from ifgym.simulators.structflow import (
    DATASETS,
    GenerationError,
    LLMDialogueGenerator,
    StructFlowUser,
    TemplateDialogueGenerator,
    load_dataset,
    parse_dataset,
    parse_record,
)
from ifgym.simulators.structflow.flows import load_templates

# StructFlowBench's released file, as it ships in the package.
DATASET = DATASETS["structflowbench"]


@pytest.fixture(scope="session")
def dataset():
    """The packaged dataset's path."""
    return str(DATASET)


@pytest.fixture(scope="session")
def raw(dataset):
    """The packaged dataset's records, as parsed JSON."""
    return json.loads(Path(dataset).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The packaged dataset
# ---------------------------------------------------------------------------------------------


def test_all_155_dialogues_load_with_the_files_turns_and_items(dataset, raw):
    dialogues = load_dataset(dataset)
    assert len(dialogues) == len(raw) == 155
    for d, record in zip(dialogues, raw, strict=True):
        assert len(d.turns) == len(record["whole_conv"]) == d.flow.n_turns
        assert len(d.flow.edges) == len(record["structure"])
        for turn, conv in zip(d.turns, record["whole_conv"], strict=True):
            assert turn.prompt == conv["user prompt"] and turn.answer == conv["assistant answer"]
            assert [(i.type, i.question) for i in turn.checklist] == [
                (c["type"], c["content"]) for c in conv["constraints"]
            ]
    items = [i for d in dialogues for t in d.turns for i in t.checklist]
    assert len(items) == 1775  # every item of the file, none dropped
    structural = [i for i in items if i.kind == "structural"]
    assert {i.type for i in structural} == set(STRUCTURAL_TYPES) and all(i.weight == 2.0 for i in structural)
    assert all(i.weight == 1.0 and i.constraint is None for i in items if i.kind == "intra")
    assert Counter(d.user_type for d in dialogues) == {"professional": 80, "non-professional": 75}


def test_turns_are_positional_even_where_the_file_repeats_names(dataset, raw):
    # record 136 names its turns c1 c2 c3 c1 c2 c3; the benchmark's scripts go by position, so do we
    d = load_dataset(dataset)[136]
    assert [c["name"] for c in raw[136]["whole_conv"]][3] == "c1"
    spec = d.spec(3)
    assert spec.meta["turn_name"] == "c4" and spec.move == "unrelatedness"
    assert d.spec(4).meta["relation"] == "follow-up" and d.spec(4).meta["sources"] == ["c4"]


def mutate(raw, fn):
    record = copy.deepcopy(raw[0])
    fn(record)
    return record


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda r: r.pop("whole_conv"), r": field 'whole_conv' must be a non-empty list"),
        (lambda r: r["whole_conv"][1].update({"user prompt": "  "}), r"whole_conv\[1\]: field 'user prompt'"),
        (lambda r: r["whole_conv"][1].pop("constraints"), r"whole_conv\[1\]: missing field 'constraints'"),
        (
            lambda r: r["whole_conv"][0]["constraints"][1].update({"type": "Style constraint"}),
            r"whole_conv\[0\]\['constraints'\]\[1\]\['type'\]: 'Style constraint' is not .* "
            "Did you mean 'Style Constraint'",
        ),  # a type typo would silently weigh 0 in WCSR
        (
            lambda r: r["whole_conv"][0]["constraints"][0].pop("content"),
            r"whole_conv\[0\]\['constraints'\]\[0\]: missing field 'content'",
        ),
        (
            lambda r: r["whole_conv"][1]["constraints"][2].update({"type": "recall"}),
            "a 'recall' item, but the structure gives c2 the relation 'follow-up'",
        ),  # checklist and structure disagree
        (lambda r: r.update({"user_type": 2}), "field 'user_type' must be 0 or 1"),
        (
            lambda r: r["structure"][0].update({"source": ["c2"], "target": ["c1"]}),
            "field 'structure': edge 0 .*point backwards",
        ),
        (lambda r: r["whole_conv"][2].update({"assistant answer": 7}), "field 'assistant answer' must be a string"),
        (lambda r: r.pop("conv_task"), "missing field 'conv_task'"),
    ],
)
def test_malformed_records_name_the_record_and_field(raw, change, fragment):
    with pytest.raises(DataFormatError, match=r"^data\.json: record 0.*" + fragment):
        parse_record(mutate(raw, change), 0, "data.json")


def test_dataset_file_errors(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        load_dataset(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"whole_conv": [}')
    with pytest.raises(DataFormatError, match="invalid JSON at line 1"):
        load_dataset(bad)
    with pytest.raises(DataFormatError, match="non-empty JSON list"):
        parse_dataset({"whole_conv": []})


# ---------------------------------------------------------------------------------------------
# The offline generator
# ---------------------------------------------------------------------------------------------

GEN = TemplateDialogueGenerator()


def dialogue_key(d):
    return [(t.prompt, [(i.type, i.question) for i in t.checklist]) for t in d.turns]


def test_same_seed_same_dialogue_and_seeds_differ():
    assert dialogue_key(GEN.generate(np.random.default_rng(4))) == dialogue_key(GEN.generate(np.random.default_rng(4)))
    keys = {json.dumps(dialogue_key(GEN.generate(np.random.default_rng(s)))) for s in range(10)}
    assert len(keys) == 10


def test_generated_intra_items_are_rule_checkable_and_structure_matches_the_flow():
    for seed in range(40):
        d = GEN.generate(np.random.default_rng(seed))
        for k, turn in enumerate(d.turns):
            intra = [i for i in turn.checklist if i.kind == "intra"]
            assert intra and all(i.constraint is not None and not i.constraint.judged for i in intra)
            assert all(conflicts(a.constraint, b.constraint) is None for a, b in combinations(intra, 2))
            structural = [i.type for i in turn.checklist if i.kind == "structural"]
            relation = d.flow.relation_of(k)
            assert structural == ([relation] if relation not in (None, "unrelatedness") else [])
            # the user's words ask for every rule constraint of the turn
            assert all(any(p in turn.prompt for p in i.constraint.phrasings()) for i in intra), turn.prompt


def test_options_pin_the_parameters():
    d = GEN.generate(
        np.random.default_rng(0),
        {"template": "two-threads", "topic_id": "t0030", "task": "Casual Chat", "user_type": "professional"},
    )
    assert d.flow.id == "two-threads" and d.meta["topic_id"] == "t0030"
    assert d.task_name == "Casual Chat" and d.user_type == "professional"
    with pytest.raises(UnknownNameError, match="Did you mean 'topic_id'"):
        GEN.generate(np.random.default_rng(0), {"topic": "t0030"})
    with pytest.raises(UnknownNameError, match="Did you mean 'deep-dive'"):
        GEN.generate(np.random.default_rng(0), {"template": "deep-dvie"})


def test_refinement_changes_one_requirement_of_the_turn_before():
    changed = 0
    for seed in range(20):
        d = GEN.generate(np.random.default_rng(seed), {"template": "quick-fix"})
        before = {i.constraint for i in d.turns[0].checklist if i.constraint}
        after = {i.constraint for i in d.turns[1].checklist if i.constraint}
        assert len(before - after) <= 1 and len(after - before) <= 1 and len(after) >= len(before)
        if before != after:
            changed += 1
            (old,) = before - after
            (new,) = after - before
            assert old.group == new.group  # a modify stays within the requirement's group
    assert changed == 20


def test_refinement_wording_puts_the_new_requirement_before_the_old_one():
    for seed in range(20):
        d = GEN.generate(np.random.default_rng(seed), {"template": "quick-fix"})
        before, after = ({i.constraint for i in d.turns[k].checklist if i.constraint} for k in (0, 1))
        ((old,), (new,)) = (before - after, after - before)
        prompt = d.turns[1].prompt
        assert "instead of" not in prompt  # "instead of" wants a gerund; the phrasings are bare infinitives
        head, tail = prompt.split(" rather than ", 1)
        assert any(head.endswith(p) for p in new.phrasings()), prompt
        assert any(tail.startswith(p[:1].lower() + p[1:]) for p in old.phrasings()), prompt


def test_unrelated_turn_moves_topic_and_recall_comes_back():
    for seed in range(10):
        d = GEN.generate(np.random.default_rng(seed), {"template": "restart-and-recall"})
        first, unrelated, recall = (re.search(r"'(.*?)'", d.turns[k].plan).group(1) for k in (0, 1, 3))
        assert unrelated != first and recall == first


def test_voice_follows_the_user_type():
    pro = GEN.generate(np.random.default_rng(1), {"user_type": "professional"})
    casual = GEN.generate(np.random.default_rng(1), {"user_type": "non-professional"})
    assert pro.turns[0].prompt[0].isupper() and casual.turns[0].prompt[0].islower()


def test_generated_dialogue_round_trips_through_the_benchmark_format():
    d = GEN.generate(np.random.default_rng(9))
    back = parse_record(json.loads(json.dumps(d.to_json())), 0)
    assert back.flow.edges == d.flow.edges and back.user_type == d.user_type and back.task == d.task
    for a, b in zip(d.turns, back.turns, strict=True):
        assert [(i.type, i.question, i.kind, i.weight, i.constraint) for i in a.checklist] == [
            (i.type, i.question, i.kind, i.weight, i.constraint) for i in b.checklist
        ]


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"tasks": ["Poetry"]}, UnknownNameError, "task type"),  # not one of the seven task types
        ({"user_types": ["expert"]}, ConfigError, "user type"),
        ({"constraints_per_turn": (0, 2)}, ConfigError, "1 <= low <= high"),  # a turn needs a requirement
        ({"groups": ["emotion"]}, ConfigError, "rule-checkable groups only"),  # judged groups have no rule
        ({"topics": []}, ConfigError, "at least two topics"),
    ],
)
def test_generator_arguments_are_checked(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        TemplateDialogueGenerator(**kwargs)


# ---------------------------------------------------------------------------------------------
# The LLM generator
# ---------------------------------------------------------------------------------------------


def stage(messages):
    text = messages[1]["content"]
    if '"purpose"' in text:
        return "plan"
    if '"turns"' in text:
        return "prompts"
    assert "Kinds of requirements" in text
    return "checklist"


def attempt(messages):
    return (len(messages) - 2) // 2 + 1  # each re-ask appends the answer and the feedback


def count(messages):
    return int(re.search(r"exactly (\d+) entries", messages[1]["content"]).group(1))


def requirements(messages):
    """What the prompts stage asks each turn's user message to state (the sampled rule requirements)."""
    found = re.findall(r"^(c\d+): .*\n    requirements it must state: (.*)\.$", messages[1]["content"], re.MULTILINE)
    return dict(found)


def good(messages):
    n = count(messages) if stage(messages) != "checklist" else 0
    if stage(messages) == "plan":
        return json.dumps(
            {"purpose": "learn", "plan": [{"name": f"c{i}", "description": f"step {i}"} for i in range(1, n + 1)]}
        )
    if stage(messages) == "prompts":
        asks = requirements(messages)
        turns = [
            {"name": f"c{i}", "user prompt": f"Prompt {i}. {asks[f'c{i}']}.", "assistant answer": f"Answer {i}"}
            for i in range(1, n + 1)
        ]
        return json.dumps({"turns": turns})
    return json.dumps({"constraints": [{"type": "content", "content": "Does the reply stay on the subject?"}]})


def scripted(**overrides):
    def answer(messages):
        fn = overrides.get(stage(messages))
        out = fn(messages) if fn else None
        return out if out is not None else good(messages)

    return answer


PIN = {"template": "detour-and-return"}


def test_llm_pipeline_builds_a_full_dialogue():
    client = CannedClient(scripted(), role="user")
    gen = LLMDialogueGenerator(client)
    d = gen.generate(np.random.default_rng(0), PIN)
    assert d.flow.id == "detour-and-return" and d.source == "llm-generator" and d.purpose == "learn"
    assert [t.prompt.split(".")[0] for t in d.turns] == [f"Prompt {i}" for i in range(1, 5)]
    assert d.has_answers and [t.plan for t in d.turns] == [f"step {i}" for i in range(1, 5)]
    for k, turn in enumerate(d.turns):
        kinds = [(i.type, i.constraint is not None) for i in turn.checklist]
        rule = [i for i in turn.checklist if i.constraint is not None]
        assert rule and all(i.kind == "intra" for i in rule)  # sampled requirements stay rule-checked
        assert ("Content Constraint", False) in kinds  # the extracted item, type name normalized
        structural = [i.type for i in turn.checklist if i.kind == "structural"]
        assert structural == {1: ["follow-up"], 3: ["recall"]}.get(k, [])
    assert gen.stats == {"calls": 2 + 4, "retries": 0, "unstated": 0}  # plan, prompts, one checklist call per turn
    # the sampled rule requirements were given to the model to state in the user's words
    prompts_call = next(r for r in client.requests if stage(r) == "prompts")
    for turn in d.turns:
        for item in turn.checklist:
            if item.constraint is not None:
                assert item.constraint.describe().rstrip(".") in prompts_call[1]["content"]


def test_llm_pipeline_reads_messy_json_and_re_asks_unusable_answers():
    def plan(messages):
        if attempt(messages) == 1:
            return "Sure! Here is a plan, hope it helps."  # no JSON at all
        body = json.loads(good(messages))
        return f"Here you go:\n```json\n{json.dumps(body)}\n```\nAnything else?"  # fenced, with prose around

    def checklist(messages):
        if attempt(messages) == 1:
            return '{"constraints": [{"type": "Formatting Constraint", "content": "Is it in JSON?"}]}'
        return None

    client = CannedClient(scripted(plan=plan, checklist=checklist), role="user")
    gen = LLMDialogueGenerator(client)
    d = gen.generate(np.random.default_rng(1), PIN)
    assert len(d.turns) == 4
    assert gen.stats["retries"] == 1 + 4  # the prose plan, and the bad type at every turn
    feedback = [r[-1]["content"] for r in client.requests if stage(r) == "checklist" and attempt(r) == 2]
    assert feedback and all("'Formatting Constraint' is not one of the allowed types" in f for f in feedback)


def test_llm_pipeline_wants_one_item_per_kind():
    def checklist(messages):
        if attempt(messages) == 1:
            item = {"type": "Style Constraint", "content": "Is it formal?"}
            return json.dumps({"constraints": [item, {**item, "content": "Is it polite?"}]})
        return None

    client = CannedClient(scripted(checklist=checklist), role="user")
    LLMDialogueGenerator(client).generate(np.random.default_rng(2), PIN)
    feedback = [r[-1]["content"] for r in client.requests if stage(r) == "checklist" and attempt(r) == 2]
    assert len(feedback) == 4 and "two constraints of the kind 'Style Constraint'" in feedback[0]


def test_llm_pipeline_gives_up_after_bounded_retries():
    def prompts(messages):
        return json.dumps({"turns": [{"name": "c1", "user prompt": "x", "assistant answer": "y"}]})  # too few

    client = CannedClient(scripted(prompts=prompts), role="user")
    gen = LLMDialogueGenerator(client, max_retries=1)
    with pytest.raises(GenerationError, match=r"stage 'prompts': \"turns\" must have exactly 4 entries .* 2 call"):
        gen.generate(np.random.default_rng(0), PIN)
    assert gen.stats == {"calls": 1 + 2, "retries": 1, "unstated": 0}


def test_llm_pipeline_re_asks_prompts_that_leave_a_requirement_out():
    dropped = {}

    def prompts(messages):
        body = json.loads(good(messages))
        if attempt(messages) == 1:  # c2 asks for nothing it was told to state
            dropped["asks"] = requirements(messages)["c2"]
            body["turns"][1]["user prompt"] = "Prompt 2, tell me more."
        return json.dumps(body)

    client = CannedClient(scripted(prompts=prompts), role="user")
    gen = LLMDialogueGenerator(client)
    d = gen.generate(np.random.default_rng(0), PIN)
    assert gen.stats == {"calls": 2 + 1 + 4, "retries": 1, "unstated": 1}
    feedback = next(r[-1]["content"] for r in client.requests if stage(r) == "prompts" and attempt(r) == 2)
    assert "c2 does not state" in feedback and "c1 does not state" not in feedback
    assert dropped["asks"].split(";")[0] in feedback  # names the requirement left out
    assert dropped["asks"].split(";")[0] in d.turns[1].prompt  # the dialogue kept the answer that states it
    user = StructFlowUser(generator=LLMDialogueGenerator(CannedClient(scripted(prompts=prompts), role="user")))
    user.reset(np.random.default_rng(0), PIN)
    assert user.stats["unstated_prompts"] == 1 and user.stats["fallbacks"] == 0  # reported per episode


def test_llm_pipeline_gives_up_when_prompts_never_state_their_requirements():
    def prompts(messages):
        body = json.loads(good(messages))
        body["turns"][0]["user prompt"] = "Prompt 1."
        return json.dumps(body)

    client = CannedClient(scripted(prompts=prompts), role="user")
    gen = LLMDialogueGenerator(client, max_retries=1)
    with pytest.raises(GenerationError, match=r"stage 'prompts': every user prompt must state .* c1 does not state"):
        gen.generate(np.random.default_rng(0), PIN)
    assert gen.stats == {"calls": 1 + 2, "retries": 1, "unstated": 2}


def _catalog():
    """Every rule constraint the generators draw over 60 seeds, with the offline user's wordings of it."""
    seen = {}
    for seed in range(60):
        for turn in GEN.generate(np.random.default_rng(seed)).turns:
            for i in turn.checklist:
                if i.constraint is not None:
                    seen.setdefault(i.constraint, set()).add(turn.prompt)
    return seen


def test_every_sampled_requirement_is_found_in_its_own_wordings_and_not_in_others():
    catalog = _catalog()
    assert len({c.group for c in catalog}) == 9  # all rule groups were drawn
    for c, prompts in catalog.items():
        for text in (c.describe(), *c.phrasings(), *prompts):
            assert unstated(c, text) == [], (c, text)
        assert unstated(c, "Prompt 1. Please write a short essay about gardening for me.") != [], c


C_WORDS = Constraint("length.words", {"relation": "less_than", "n": 137})
C_KEYS = Constraint("keywords.exact_count", {"counts": {"hand drawn": 2, "server": 1}})
C_MARK = Constraint("punctuation.exclude", {"mark": ","})
C_LETTER = Constraint("start_with.letter", {"letter": "t"})


@pytest.mark.parametrize(
    "constraint, text, missing",
    [
        (
            C_WORDS,
            "keep it under a hundred and thirty-seven words",
            ["the number 137"],
        ),  # the number must be given exactly
        (C_WORDS, "keep it under 1370 words", ["the number 137"]),  # a longer number is another number
        (C_WORDS, "keep it short, 137 max", ["the unit (words)"]),  # a length needs its unit
        (C_KEYS, "say hand-drawn twice and server once", []),  # hyphen for space, counts as words
        (C_KEYS, "say hand drawn twice and servers once", ["the keyword “server”"]),  # a plural is another word
        (C_MARK, "avoid commas", []),  # a prose mark by its name
        (
            C_MARK,
            "no punctuation like that, please",
            ["the mark “,”"],
        ),  # a bare comma in the text is not the requirement
        (C_MARK, 'do not use "," at all', []),  # or quoted
        (C_LETTER, "start with the letter T", []),
        (C_LETTER, "start with the letter that opens the topic", ["the letter “T”"]),  # a t inside words does not count
        (Constraint("start_with.emoji", {"emoji": "\u2764\ufe0f"}), "open with \u2764 pls", []),  # variation selector
        (Constraint("format.json", {}), "answer in Json", []),
        (Constraint("case.lower", {}), "write it all in small letters", []),
        (Constraint("case.lower", {}), "write it all in capitals", ["the case (lower/small letters)"]),
    ],
)
def test_unstated_table(constraint, text, missing):
    assert unstated(constraint, text) == missing


def test_user_falls_back_to_the_offline_generator_for_the_same_draw():
    client = CannedClient(["I cannot help with that."], role="user")
    offline = TemplateDialogueGenerator()
    user = StructFlowUser(generator=LLMDialogueGenerator(client, max_retries=0), fallback=offline)
    turn = user.reset(np.random.default_rng(12))
    expected = offline.generate(np.random.default_rng(12))
    assert turn.text == expected.turns[0].prompt and dialogue_key(user.dialogue) == dialogue_key(expected)
    assert user.stats["fallbacks"] == 1 and user.stats["generation_calls"] == 1
    assert "stage 'plan'" in user.dialogue.meta["fallback_reason"]
    with pytest.raises(GenerationError):  # without a fallback the error surfaces
        StructFlowUser(generator=LLMDialogueGenerator(client, max_retries=0)).reset(np.random.default_rng(12))


def test_async_generation_awaits_the_client():
    user = StructFlowUser(generator=LLMDialogueGenerator(CannedClient(scripted(), role="user")))
    turn = asyncio.run(user.areset(np.random.default_rng(3), PIN))
    assert turn.text.startswith("Prompt 1.") and user.stats == {
        "turns": 4,
        "played": 1,
        "generated": 1,
        "fallbacks": 0,
        "generation_calls": 6,
        "unstated_prompts": 0,
    }


def all_yes(messages):
    """A judge that answers Yes to every numbered item it is asked about."""
    n = len(re.findall(r"<item \d+>", messages[-1]["content"]))
    return json.dumps({"results": [{"item": i, "judgement": "Yes"} for i in range(1, n + 1)]})


def test_llm_generated_dialogues_replay_with_their_reference_answers_by_default():
    # the pipeline writes a reference answer per turn: golden context, as the benchmark evaluates,
    # in the registered id and in its config file alike
    conf = OmegaConf.load(Path(ifgym.__file__).parent / "conf" / "env" / "structflow_llm.yaml")
    clients = {"user_llm": CannedClient(scripted(), role="user"), "judge_llm": CannedClient(all_yes, role="judge")}
    for env_id, kwargs in (("ifgym/StructFlow-LLM-v0", {}), (conf.id, {"generator": conf.generator})):
        env = gym.make(env_id, **kwargs, **clients).unwrapped
        assert env.context == conf.context == "golden", env_id
        env.reset(seed=0, options=PIN)
        obs, *_ = env.step("MY OWN REPLY")
        assert obs[-2] == {"role": "assistant", "content": "Answer 1"}
        assert env.episode.meta["dialogue"]["context"] == "golden"


# ---------------------------------------------------------------------------------------------
# The user and the env
# ---------------------------------------------------------------------------------------------


def test_replay_user_picks_dialogues_by_index_or_id(dataset, raw):
    user = StructFlowUser(dialogues=load_dataset(dataset))
    rng = np.random.default_rng(0)
    assert user.reset(rng, {"dialogue": 3}).text == raw[3]["whole_conv"][0]["user prompt"]
    assert user.reset(rng, {"dialogue": "sfb-004"}).text == raw[4]["whole_conv"][0]["user prompt"]
    played = [user.next([], [])]
    while played[-1] is not None:
        played.append(user.next([], []))
    assert len(played) == len(raw[4]["whole_conv"])  # the remaining turns, then None
    with pytest.raises(ConfigError, match="outside 0..154"):
        user.reset(rng, {"dialogue": 155})
    with pytest.raises(UnknownNameError, match="unknown dialogue id 'sfb-04'. Did you mean"):
        user.reset(rng, {"dialogue": "sfb-04"})
    with pytest.raises(UnknownNameError, match="Did you mean 'dialogue'"):
        user.reset(rng, {"dialog": 1})


def replay(dataset, **kwargs):
    """A replay env; unjudged (these tests are about the dialogue, not the scores) unless kwargs say otherwise."""
    return gym.make("ifgym/StructFlow-v0", dataset=dataset, **{"allow_unjudged": True, **kwargs}).unwrapped


def test_golden_context_keeps_the_datasets_answers_in_the_history(dataset, raw):
    env = replay(dataset)
    obs, info = env.reset(options={"dialogue": 0})
    assert info["relation"] is None and len(info["checklist"]) == 3
    obs, *_ = env.step("MY OWN REPLY")
    assert obs[-2] == {"role": "assistant", "content": raw[0]["whole_conv"][0]["assistant answer"]}
    assert obs[-1]["content"] == raw[0]["whole_conv"][1]["user prompt"]
    assert env.episode.turns[0].reply == "MY OWN REPLY"  # the record keeps what the policy said
    own = replay(dataset, context="own")
    own.reset(options={"dialogue": 0})
    obs, *_ = own.step("MY OWN REPLY")
    assert obs[-2]["content"] == "MY OWN REPLY"


def test_seed_k_plays_dialogue_k_mod_n_and_the_episode_records_it(dataset):
    env = replay(dataset)
    _, info = env.reset(seed=156)
    assert info["dialogue"] == "sfb-001" and env.episode.meta["dialogue"]["id"] == "sfb-001"
    assert env.episode.meta["dialogue"]["context"] == "golden"
    _, info = env.reset(seed=156, options={"dialogue": 7})  # an explicit choice wins
    assert info["dialogue"] == "sfb-007"


def test_replay_with_the_rules_judge_is_refused_unless_unjudged_on_purpose(dataset):
    # no StructFlowBench item is rule-checkable: judge="rules" would score nothing, silently
    with pytest.raises(ConfigError, match=r"judge='rules' would score nothing.*judge='llm'.*allow_unjudged=True"):
        gym.make("ifgym/StructFlow-v0", dataset=dataset)
    env = replay(dataset, allow_unjudged=True)  # asked for: items no rule decides stay unknown
    env.reset(options={"dialogue": 0})
    _, reward, _, _, info = env.step("reply")
    # "Is the response limited to 150 words?" is answered by a question rule; the other two need a judge
    assert [v["label"] for v in info["verdicts"]] == ["yes", "unknown", "unknown"]
    assert info["verdicts"][0]["source"] == "rule" and info["unknown"] == 2
    with pytest.raises(ConfigError, match="allow_unjudged must be True or False"):
        gym.make("ifgym/StructFlow-v0", dataset=dataset, allow_unjudged="yes")


def test_replay_of_rule_checkable_dialogues_needs_no_opt_in(tmp_path):
    # dialogues written by ifgym's offline generator carry their rules: the rules judge scores those items
    path = tmp_path / "generated.json"
    path.write_text(json.dumps([GEN.generate(np.random.default_rng(s)).to_json() for s in range(2)]))
    env = gym.make("ifgym/StructFlow-v0", dataset=str(path), context="own").unwrapped
    env.reset(options={"dialogue": 0})
    _, _, _, _, info = env.step("A short reply.")
    assert info["reward_defined"] is True and any(v["label"] != "unknown" for v in info["verdicts"])


@pytest.mark.parametrize(
    "choice, expected",
    [
        (3, "sfb-003"),
        (np.int64(3), "sfb-003"),  # an index drawn with numpy
        (np.uint8(3), "sfb-003"),
        ("sfb-005", "sfb-005"),
    ],
)
def test_dialogue_option_takes_any_integer(dataset, choice, expected):
    _, info = replay(dataset).reset(options={"dialogue": choice})
    assert info["dialogue"] == expected


@pytest.mark.parametrize("choice", [True, np.int64(155), 2.0])  # a bool is not an index; out of range; a float
def test_dialogue_option_rejects_non_indexes(dataset, choice):
    with pytest.raises((ConfigError, UnknownNameError)):
        replay(dataset).reset(options={"dialogue": choice})


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"context": "gold"}, UnknownNameError, "Did you mean 'golden'"),
        ({"generator": "llms"}, UnknownNameError, "Did you mean 'llm'"),
        ({"judge": "rule"}, UnknownNameError, "Did you mean 'rules'"),
        ({"context": "golden"}, ConfigError, "writes no reference answers"),  # offline dialogues have none
        ({"dataset": str(DATASET), "tasks": ["Casual Chat"]}, ConfigError, "apply only without it"),
        ({"reward": "wcsr"}, UnknownNameError, "reward mode"),
        ({"dataset": "/nonexistent/StructFlowBench.json"}, DataFormatError, "no such file"),
        ({"dataset": "structflowbnch"}, UnknownNameError, "Did you mean 'structflowbench'"),  # a misspelt name
        ({"dataset": str(DATASET.parent)}, ConfigError, "is a folder; give the file itself"),  # the folder
        ({"templates": "structflowbench2"}, UnknownNameError, "unknown structure templates name"),
    ],
)
def test_bad_env_arguments(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        gym.make("ifgym/StructFlow-v0", **kwargs)


def test_the_packaged_dataset_replays_by_name_and_ships_its_licence_and_source():
    env = gym.make("ifgym/StructFlow-v0", dataset="structflowbench", allow_unjudged=True).unwrapped
    obs, _ = env.reset(seed=0)
    by_path = gym.make("ifgym/StructFlow-v0", dataset=str(DATASET), allow_unjudged=True).unwrapped
    assert obs == by_path.reset(seed=0)[0]  # the name is the packaged file
    assert env.dataset == "structflowbench" and len(load_dataset("structflowbench")) == 155
    source = (DATASET.parent / "SOURCE").read_text()
    assert "MLGroupJLU/StructFlowBench" in source and "5a65141d21285c2519d82380eeb828c2d70a593d" in source
    assert (DATASET.parent / "LICENSE").read_text().startswith("MIT License")
    flows = load_templates("structflowbench")  # its template.json, by name too
    assert len(flows) == 14 and flows[0].id == "structflowbench-1"


def test_golden_context_needs_answers_in_the_file(tmp_path, raw):
    record = copy.deepcopy(raw[0])
    del record["whole_conv"][1]["assistant answer"]
    path = tmp_path / "no_answers.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(ConfigError, match="sfb-000 turn c2 has no 'assistant answer'"):
        gym.make("ifgym/StructFlow-v0", dataset=str(path), allow_unjudged=True)
    gym.make("ifgym/StructFlow-v0", dataset=str(path), context="own", allow_unjudged=True)  # own needs none


def test_patience_is_available_but_off_by_default():
    env = gym.make("ifgym/StructFlow-v0").unwrapped
    env.reset(seed=0)
    while True:  # an empty reply fails every rule item, yet the whole script plays out
        _, _, terminated, truncated, info = env.step("")
        if terminated or truncated:
            break
    assert info["done_reason"] == "script_end" and info["patience"] is None
    strict = gym.make("ifgym/StructFlow-v0", patience=1).unwrapped
    strict.reset(seed=0)
    _, _, terminated, _, info = strict.step("")
    assert terminated and info["done_reason"] == "patience" and len(strict.episode.turns) == 1


def test_generated_episode_scores_rule_items_and_leaves_structural_ones_to_the_judge():
    env = gym.make("ifgym/StructFlow-v0", render_mode="ansi").unwrapped
    episode = rollout(env, ScriptedPolicy(["A short reply."]), seed=5)
    for turn in episode.turns:
        for item, verdict in zip(turn.spec.checklist, turn.verdicts, strict=True):
            assert (verdict.label == "unknown") == (item.kind == "structural")
            assert verdict.source == ("none" if item.kind == "structural" else "rule")
    summary = env.summarize([episode])
    assert summary["unknown"] == sum(t.spec.checklist[-1].kind == "structural" for t in episode.turns)
    assert "[follow-up]" in env.render() or "[refinement]" in env.render() or "[expansion]" in env.render()


# ---------------------------------------------------------------------------------------------
# End to end through a real HTTP server
# ---------------------------------------------------------------------------------------------

JUDGE_MARK = "You check whether an AI assistant's reply meets a checklist"


def served(body):
    """Policy requests get a fixed reply; judge requests get No for item 1 and Yes for the rest."""
    messages = body["messages"]
    if not messages[0]["content"].startswith(JUDGE_MARK):
        return "POLICY REPLY about photosynthesis."
    n = len(re.findall(r"<item \d+>", messages[-1]["content"]))
    results = [{"item": i, "judgement": "No" if i == 1 else "yes", "reason": "ok"} for i in range(1, n + 1)]
    return "Here is my judgement:\n```json\n" + json.dumps({"results": results}) + "\n```"


def test_replay_episode_through_a_real_http_server(dataset, raw):
    with CannedServer(served) as server:
        config = {"base_url": server.base_url, "model": server.model, "api_key_env": None}
        judge_config = {**config, "max_tokens": 300}  # conf/judge/llm.yaml's cap, shared with EvolIF's judge
        # judge_rule_items: every item goes to the judge, the length questions too (the benchmark's way)
        env = gym.make(
            "ifgym/StructFlow-v0", dataset=dataset, judge="llm", judge_llm=judge_config, judge_rule_items=True
        )
        policy = ChatPolicy(make_client(LLMConfig(**config), "policy"))
        episode = rollout(env, policy, seed=0)
        bodies = list(server.requests)
    assert len(episode.turns) == 3 and episode.done_reason == "script_end"
    # dialogue 0: c1 has 3 intra items; c2 and c3 have 2 intra items and one structural item each
    assert [t.reward for t in episode.turns] == pytest.approx([2 / 3, 3 / 4, 3 / 4])
    assert all(v.source == "judge:canned-model" for t in episode.turns for v in t.verdicts)
    summary = env.unwrapped.summarize([episode])
    assert summary["CSR"] == pytest.approx(2 / 3) and summary["ISR"] == 0.0
    assert summary["WCSR"] == pytest.approx((2 / 3 + 3 / 4 + 3 / 4) / 3) and summary["DRFR"] == pytest.approx(6 / 9)
    assert summary["pass_rate/follow-up"] == 1.0 and summary["pass_rate/Quantity Format Constraint"] == 1 / 3
    assert summary["relation/summary/WCSR"] == pytest.approx(3 / 4)
    # the judge saw the golden history, the current request and the fenced reply, once per turn
    judge_calls = [b for b in bodies if b["messages"][0]["content"].startswith(JUDGE_MARK)]
    assert len(judge_calls) == 3 and len(bodies) == 6
    assert [b["max_tokens"] for b in judge_calls] == [128 + 96 * 3] * 3  # room for 3 entries, above the shared 300
    second = judge_calls[1]["messages"][1]["content"]
    golden = raw[0]["whole_conv"][0]["assistant answer"]
    assert golden[:60] in second.split("</history>")[0] and "POLICY REPLY" not in second.split("<reply>")[0]
    assert raw[0]["whole_conv"][1]["user prompt"] in second.split("<request>")[1]
    assert "<reply>\nPOLICY REPLY about photosynthesis.\n</reply>" in second


def test_a_generating_reset_says_which_models_play_and_shows_its_progress(caplog):
    # StructFlow-LLM's reset writes a whole dialogue with the user model (minutes on a CPU model): each call is
    # an INFO line, and the models are named when the env is made
    with CannedServer(lambda body: scripted()(body["messages"])) as server:
        config = {"base_url": server.base_url, "model": server.model, "api_key_env": None}
        with caplog.at_level(logging.INFO, logger="ifgym"):
            env = gym.make("ifgym/StructFlow-LLM-v0", user_llm=config, judge_llm=config)
            env.reset(seed=0, options=PIN)
        host = server.base_url.split("//")[1].split("/")[0]
    said = [r.getMessage() for r in caplog.records if r.name == "ifgym.llm.client"]
    assert said == [
        f"the user is played by canned-model (http {host})",
        f"the judge is played by canned-model (http {host})",
    ]
    steps = [r.getMessage() for r in caplog.records if r.name == "ifgym.simulators.structflow.llm_generator"]
    stages = ["plan", "prompts", *(f"checklist c{i}" for i in range(1, 5))]  # one checklist call per turn
    assert steps == [f"generating a StructFlow dialogue with canned-model: {s}, call 1" for s in stages]
