"""The composite env (StructFlow structure × EvolIF constraints × persona): determinism, the flow ↔ tracker
mapping, each axis off reducing to its single-axis user, and a persona that never sees verdicts or checklists.

Policies here are scripted stand-ins for a model; the LLM user is a canned model behind a real HTTP server.
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from support.canned_server import CannedServer
from support.canned_user import scripted_user_model
from support.paths import REPO

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.simulators.composite import _BURIED, _CONTEXT, _EXPLICIT, TalkStyle, TalkStyleMix, persona_words

ENVIRONMENTS_PAGE = REPO / "docs" / "environments.md"
NEUTRAL = {"level": "general", "verbosity": "terse", "hedging": "none", "clarity": "plain"}
# c1 -> c2 follow-up, c3 unrelated, c4 recalls c1 (another topic by then), c5 refines c4
DETOUR = [
    {
        "id": "detour",
        "description": "follow up, switch topic, recall the first answer, refine it",
        "structure": [
            {"source": "c1", "target": "c2", "relation": "follow-up"},
            {"source": "c2", "target": "c3", "relation": "unrelatedness"},
            {"source": "c1", "target": "c4", "relation": "recall"},
            {"source": "c4", "target": "c5", "relation": "refinement"},
        ],
    }
]


def play(env: gym.Env, seed: int, reply=lambda obs: "A short reply.", options=None) -> tuple[list[str], list]:
    """The user's words and the turn specs of one episode, the policy answering with `reply(obs)`."""
    obs, _ = env.reset(seed=seed, options=options)
    texts = [obs[-1]["content"]]
    done = False
    while not done:
        obs, _, term, trunc, _ = env.step(reply(obs))
        done = term or trunc
        if not done:
            texts.append(obs[-1]["content"])
    return texts, [t.spec for t in env.unwrapped.episode.turns]


def test_template_env_is_deterministic_and_seeds_differ():
    a = gym.make("ifgym/Composite-v0", min_turns=8)
    b = gym.make("ifgym/Composite-v0", min_turns=8)
    first, specs = play(a, 11)
    again, specs_again = play(b, 11)
    assert first == again and [s.to_json() for s in specs] == [s.to_json() for s in specs_again]
    assert play(a, 12)[0] != first


@pytest.mark.parametrize("axes", [{}, {"structure": False}, {"constraints": False}, {"persona": False}])
def test_check_env(axes):
    env = gym.make("ifgym/Composite-v0", min_turns=4, max_turns=6, **axes)
    check_env(env.unwrapped)


def test_unrelated_is_a_new_topic_and_recall_returns_with_its_rules_stated_only_as_the_change():
    env = gym.make("ifgym/Composite-v0", templates=DETOUR, persona=False, patience=None)
    texts, specs = play(env, 3)
    moves = [s.meta["tracker_move"] for s in specs]
    relations = [s.meta["relation"] for s in specs]
    assert relations == [None, "follow-up", "unrelatedness", "recall", "refinement"]
    assert moves == ["new_topic", "continue", "new_topic", "return", "continue"]
    c1, c2, c3, c4, c5 = specs
    assert c2.topic == c1.topic and c3.topic != c1.topic and c4.topic == c1.topic and c5.topic == c1.topic
    # the recall restores c2's state (the topic's state as it was left) and makes exactly one change to it
    before, after = set(c2.constraints), set(c4.constraints)
    old = {json.dumps(c4.meta["old"], sort_keys=True)} if c4.meta["old"] else set()
    new = {json.dumps(c4.meta["new"], sort_keys=True)} if c4.meta["new"] else set()
    as_json = {json.dumps(c.to_json(), sort_keys=True) for c in before}
    assert {json.dumps(c.to_json(), sort_keys=True) for c in after} == (as_json - old) | new
    assert c4.change in ("add", "remove", "modify")
    # only the change is stated: no phrasing of a restored, unchanged rule appears in the recall turn
    restored = [c for c in before & after]
    assert restored, "seed 3 must restore at least one rule for this test to mean something"
    for c in restored:
        assert not any(p.lower() in texts[3].lower() for p in c.phrasings()), c
    # the refinement modifies a rule of the recalled topic
    assert c5.change == "modify" and c5.meta["old"] in [c.to_json() for c in c4.constraints]
    # each structural relation adds its item after the constraint items; unrelatedness adds none
    assert [i.type for i in c4.checklist if i.kind == "structural"] == ["recall"]
    assert [i.kind for i in c3.checklist] == ["intra"] * len(c3.constraints)


@pytest.mark.parametrize("seed", [0, 7])
def test_structure_off_is_evolifs_script(seed):
    composite = gym.make("ifgym/Composite-v0", structure=False, persona=False, max_turns=12, patience=None)
    evolif = gym.make("ifgym/EvolIF-v1", max_turns=12, patience=None)
    texts, specs = play(composite, seed)
    evolif_texts, evolif_specs = play(evolif, seed)
    assert texts == evolif_texts
    assert [s.constraints for s in specs] == [s.constraints for s in evolif_specs]
    assert [(s.topic, s.move, s.change) for s in specs] == [(s.topic, s.move, s.change) for s in evolif_specs]


@pytest.mark.parametrize("seed", [0, 4])
def test_constraints_off_is_structflows_dialogue(seed):
    composite = gym.make("ifgym/Composite-v0", constraints=False, persona=False, patience=None)
    structflow = gym.make("ifgym/StructFlow-v0")
    texts, specs = play(composite, seed)
    sf_texts, sf_specs = play(structflow, seed)
    assert texts == sf_texts
    assert [s.checklist for s in specs] == [s.checklist for s in sf_specs]
    # StructFlow's own rules are the turn's constraints, so EvolIF's metrics measure them
    assert [s.constraints for s in specs] == [
        tuple(i.constraint for i in s.checklist if i.constraint) for s in sf_specs
    ]


def test_persona_off_is_neutral_and_persona_on_only_adds_words_around_them():
    off, _ = play(gym.make("ifgym/Composite-v0", persona=False, templates=DETOUR, patience=None), 5)
    on, _ = play(gym.make("ifgym/Composite-v0", templates=DETOUR, patience=None), 5, options={"persona": {**NEUTRAL}})
    assert len(on) == len(off)
    for neutral, worded in zip(off, on, strict=True):
        assert neutral in worded  # a terse, direct, plain-spoken persona leaves the turn's words intact
    verbose, _ = play(
        gym.make("ifgym/Composite-v0", templates=DETOUR, patience=None),
        5,
        options={"persona": {"level": "poor", "verbosity": "verbose", "hedging": "none", "clarity": "plain"}},
    )
    assert all(any(c in text for c in _CONTEXT) for text in verbose)


def test_persona_words_known_inputs():
    rng = np.random.default_rng(0)
    state = dict(rng.bit_generator.state)
    assert persona_words(None, "Write about tea.", "Also use JSON.", rng) == "Write about tea. Also use JSON."
    assert rng.bit_generator.state == state  # the neutral user draws nothing
    buried = persona_words(TalkStyle("general", "terse", "none", "buried"), "Write about tea.", "Also use JSON.", rng)
    assert buried.startswith("Write about tea.") and buried.endswith("also use JSON.")
    assert any(buried.endswith(b.format(c="also use JSON.")) for b in _BURIED)
    explicit = persona_words(TalkStyle("good", "terse", "none", "explicit"), "Write about tea.", "Also use JSON.", rng)
    assert any(e.format(c="also use JSON.") in explicit for e in _EXPLICIT)
    assert explicit.index("Write about tea.") < explicit.index("also use JSON.")
    hedged = persona_words(TalkStyle("general", "terse", "some", "plain"), "Write about tea.", None, rng)
    assert hedged.endswith("write about tea.") and hedged != "write about tea."


def test_persona_mix_draws_only_what_it_allows_and_rejects_unknown_names():
    mix = TalkStyleMix.from_mapping({"levels": {"poor": 1}, "clarity": ["buried", "explicit"], "hedging": "heavy"})
    drawn = {mix.draw(np.random.default_rng(s)) for s in range(30)}
    assert {p.level for p in drawn} == {"poor"} and {p.hedging for p in drawn} == {"heavy"}
    assert {p.clarity for p in drawn} == {"buried", "explicit"}
    with pytest.raises(UnknownNameError, match="levels"):
        TalkStyleMix.from_mapping({"levels": {"rude": 1}})
    with pytest.raises(UnknownNameError, match="persona_mix field"):
        TalkStyleMix.from_mapping({"level": ["poor"]})


def _fails_everything(obs) -> str:
    return "no"


def _tries(obs) -> str:
    quoted = re.findall(r"“([^”]{1,30})”", obs[-1]["content"])
    return "- " + "\n- ".join(quoted or ["answer"])


@pytest.mark.parametrize("seed", [1, 2])
def test_the_user_never_depends_on_verdicts_or_replies(seed):
    env = gym.make("ifgym/Composite-v0", min_turns=8, patience=None)
    a, _ = play(env, seed, _fails_everything)
    b, _ = play(env, seed, _tries)
    assert a == b
    verdicts = [v.label for t in env.unwrapped.episode.turns for v in t.verdicts]
    assert "yes" in verdicts and "no" in verdicts  # the two policies did get different verdicts


def test_llm_user_speaks_as_the_persona_never_sees_checklists_or_verdicts_and_falls_back():
    # a canned user model that writes each prompt's instruction lines back (so it states every value)
    def user_model(body):
        return scripted_user_model(
            generate=lambda m: " ".join(line[2:] for line in m[-1]["content"].splitlines() if line.startswith("- "))
        )(body["messages"])

    with CannedServer(user_model) as server:
        env = gym.make(
            "ifgym/Composite-LLM-v0",
            judge="rules",
            user_llm={"base_url": server.base_url, "model": server.model, "api_key_env": None},
            templates=DETOUR,
            patience=None,
        )
        texts, specs = play(env, 2, _fails_everything, options={"persona": {"level": "poor"}})
        sent = json.dumps(server.requests)
        stats = env.unwrapped.user.stats
    assert env.unwrapped.env_name == "ifgym/Composite-LLM-v0"
    assert len(texts) == 5 and stats["renders"] == 5 and stats["llm_fallbacks"] == 0
    system = server.requests[0]["messages"][0]["content"]
    assert "impatient, uncooperative user" in system
    assert "Refer back explicitly to its answer to message 1" in sent  # the recall is asked for
    for spec in specs:
        for item in spec.checklist:
            assert item.question not in sent  # no checklist item reaches the user model
    reasons = [v.reason for t in env.unwrapped.episode.turns for v in t.verdicts]
    assert reasons and not any(r in sent for r in reasons)  # nor any verdict


def test_llm_user_falls_back_to_the_template_when_a_draft_omits_the_values():
    with CannedServer(lambda body: "Sure, whatever you like.") as server:
        env = gym.make(
            "ifgym/Composite-LLM-v0",
            judge="rules",
            user_llm={"base_url": server.base_url, "model": server.model, "api_key_env": None},
            templates=DETOUR,
            regenerations=1,
            patience=None,
        )
        texts, specs = play(env, 2)
    fallbacks = [s.meta["fallback"] for s in specs]
    assert fallbacks[0] and fallbacks[2]  # a new topic states its rules: the canned draft never does
    assert env.unwrapped.user.stats["llm_fallbacks"] == sum(fallbacks)
    template, _ = play(gym.make("ifgym/Composite-v0", templates=DETOUR, patience=None), 2)
    assert texts[0] == template[0]


def test_judge_rules_says_what_goes_unscored_and_metrics_cover_every_table():
    env = gym.make("ifgym/Composite-v0", templates=DETOUR, patience=None)
    play(env, 3, _tries)
    protocol = env.unwrapped.protocol()
    assert protocol["unscored"] and "judge=llm" in protocol["unscored"][0]
    episode = env.unwrapped.episode
    structural = [
        v for t in episode.turns for i, v in zip(t.spec.checklist, t.verdicts, strict=True) if i.kind == "structural"
    ]
    assert structural and all(v.label == "unknown" for v in structural)
    m = env.unwrapped.summarize([episode])
    assert m["checklist_unknown"] == len(structural) and m["unknown"] == 0  # constraints are all rule-decided
    for key in ("CSR", "ISR", "EDR_len", "REC", "DRFR", "WCSR", "checklist/ISR"):
        assert key in m
    assert any(k.startswith("relation_group/recall/") for k in m)
    level = episode.meta["persona"]["level"]
    assert m[f"persona/{level}/episodes"] == 1.0


def test_axes_misuse_is_refused_with_a_clear_error():
    with pytest.raises(ConfigError, match="nothing to score"):
        gym.make("ifgym/Composite-v0", structure=False, constraints=False)
    with pytest.raises(ConfigError, match="judged groups"):
        gym.make("ifgym/Composite-v0", tracker={"groups": ["length", "emotion"]})
    with pytest.raises(ConfigError, match="persona axis"):
        gym.make("ifgym/Composite-v0", persona=False).reset(seed=0, options={"persona": {"level": "poor"}})
    with pytest.raises(ConfigError, match="structflow_llm"):
        gym.make("ifgym/Composite-LLM-v0", constraints=False, judge="rules", user_llm={"base_url": "http://x"})


def test_the_docs_example_registers_a_new_composite_task():
    text = ENVIRONMENTS_PAGE.read_text(encoding="utf-8")
    block = text.split("<!-- composite-example -->", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) <= 20
    scope: dict = {}
    exec(compile(block, "docs composite example", "exec"), scope)  # noqa: S102 (the docs' own code)
    episode = scope["episode"]
    assert episode.env_id == "mylab/PickyEditors-v0" and episode.meta["persona"]["level"] == "poor"
    assert {i.type for t in episode.turns for i in t.spec.checklist if i.kind == "structural"} <= {"refinement"}
    assert {c.group for t in episode.turns for c in t.spec.constraints} <= {"length", "format", "forbidden"}


def test_a_config_file_describes_a_composite_task(tmp_path):
    from ifgym.cli import main

    out = tmp_path / "run" / "episodes.jsonl"
    code = main(
        [
            "eval",
            "env=composite_editors",
            "policy=scripted",
            "episodes=2",
            f"output={out}",
            "progress=false",
            "plots=false",
        ]
    )
    assert code == 0
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 2
    for e in episodes:
        templates = set(e["meta"]["structure"]["template"].split("+"))
        assert templates <= {"draft-revise-recall", "revise-and-sum-up"}
        assert e["meta"]["persona"]["level"] in ("poor", "general")
        groups = {c["id"].split(".")[0] for t in e["turns"] for c in t["spec"]["constraints"]}
        assert groups <= {"length", "format", "forbidden", "keywords", "start_with"}
    assert {e["env_id"] for e in episodes} == {"ifgym/Composite-v0"}
    assert all(e["meta"]["composite"]["min_turns"] == 10 and len(e["turns"]) >= 1 for e in episodes)
