"""Context-Agent: the trees and branches it builds on a scripted dialogue, its context, its defaults, its embedders."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from support.canned_light import client, context_agent_light, from_body, play
from support.canned_server import CannedServer

from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import CannedClient
from ifgym.policies import ChatPolicy, ContextAgent, HashingEmbedder, MiniLMEmbedder, ScriptedPolicy
from ifgym.policies.context_agent import SUMMARY_SYSTEM

# Japan trip: cities, food, hotels; back to the cities (a branch from turn 1); a Python question
# (a new topic); back to the trip's hotels (a switch to the first branch).
JAPAN = [
    "Plan a trip to Japan: which cities in Japan should I visit?",
    "For the Japan trip, what food should I eat in Tokyo?",
    "For the Japan trip, which hotels in Kyoto fit a small budget?",
    "Back to which cities in Japan I should visit: add Osaka to the trip.",
    "Write a Python function that sorts a list of numbers.",
    "Japan trip again: cheaper hotels in Kyoto on a small budget?",
]
TOPICS = {
    JAPAN[1]: {"decision": "continue"},
    JAPAN[2]: {"decision": "continue"},
    JAPAN[3]: {"decision": "continue"},
    JAPAN[4]: {"decision": "create"},
    JAPAN[5]: {"decision": "switch", "topic": 1},
}
BRANCHES = {JAPAN[3]: {"decision": "create"}, JAPAN[5]: {"decision": "switch"}}


@pytest.fixture
def servers():
    with (
        CannedServer(replies=["OK."]) as base,
        CannedServer(replies=from_body(context_agent_light(TOPICS, BRANCHES))) as light,
    ):
        yield base, light


def run_japan(servers, **kwargs):
    base, light = servers
    policy = ContextAgent(
        ChatPolicy(client(base, "policy")), client(light, "light"), embedder=HashingEmbedder(), **kwargs
    )
    play(policy, JAPAN)
    return policy


def test_trees_and_branches_of_the_scripted_dialogue(servers):
    f = run_japan(servers).forest
    shape = [(n.id, n.topic, n.branch, n.parent) for n in f.nodes]
    assert shape == [
        (1, 1, 0, None),  # the trip starts topic 1
        (2, 1, 0, 1),  # food: the only candidate, turn 1, is below the threshold (0.37) and the thread's end
        (3, 1, 0, 2),  # hotels: the best candidate, turn 1 (0.40), is below the threshold
        (4, 1, 1, 1),  # back to the cities: turn 1 (0.67), an ancestor above the parent -> branch call -> create
        (5, 2, 0, None),  # Python: a new topic tree
        (6, 1, 0, 3),  # back to the hotels: turn 3 (0.67), off the active path -> branch call -> switch, below 3
    ]
    trip, python = f.trees
    assert trip.branches == {0: [1, 2, 3, 6], 1: [4]} and trip.forks == {0: None, 1: 1}
    assert (trip.active, python.branches, f.active_topic) == (6, {0: [5]}, 1)
    assert f.active_path() == [1, 2, 3, 6]
    decisions = [(d["turn"], d["topic"], d.get("branch"), d.get("fork")) for d in f.decisions]
    assert decisions == [
        (1, "create", None, None),
        (2, "continue", "continue", 1),
        (3, "continue", "continue", 1),
        (4, "continue", "create", 1),
        (5, "create", None, None),
        (6, "switch", "switch", 3),
    ]
    assert all(d["similarity"] > 0.6 for d in f.decisions if d.get("branch") in ("create", "switch"))
    assert [d.get("filter") for d in f.decisions] == [
        None,
        "below theta",
        "below theta",
        "earlier point of this thread",
        None,
        "other branch",
    ]
    assert json.loads(json.dumps(f.to_json()))["trees"][0]["branches"] == {"0": [1, 2, 3, 6], "1": [4]}


def test_a_switch_back_to_a_point_of_the_current_thread_grows_a_branch_from_it():
    # turn 4's candidate (turn 1) is an ancestor on the same branch: "switch" there means branching off
    light = context_agent_light(TOPICS, {JAPAN[3]: {"decision": "switch"}})
    policy = ContextAgent(ChatPolicy(CannedClient(["OK."])), CannedClient(light), embedder=HashingEmbedder())
    play(policy, JAPAN[:4])
    assert [(n.branch, n.parent) for n in policy.forest.nodes] == [(0, None), (0, 1), (0, 2), (1, 1)]
    assert policy.forest.decisions[3]["branch"] == "create"


def test_only_filtered_candidates_reach_the_branch_decision(servers):
    policy = run_japan(servers)
    _, light = servers
    kinds = [r["messages"][0]["content"].split(".")[0] for r in light.requests]
    assert policy.stats["branch_calls"] == 2
    assert sum("can branch" in k for k in kinds) == 2
    assert policy.stats == {"topic_defaults": 0, "branch_calls": 2, "branch_defaults": 0, "summary_defaults": 0}


def test_context_is_the_active_path_in_full_plus_summaries_of_the_rest(servers):
    base, _ = servers
    run_japan(servers)
    sent = base.requests[-1]["messages"]  # turn 6
    assert [m["role"] for m in sent] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [m["content"] for m in sent if m["role"] == "user"] == [JAPAN[0], JAPAN[1], JAPAN[2], JAPAN[5]]
    memory = sent[0]["content"]
    assert "Another thread of this topic (branching off after turn 1):" in memory
    assert "- turn 4: summary: Back to which cities in" in memory
    assert "Other topics of this conversation:\n- summary: Write a Python function that" in memory
    # turn 5 (the Python topic) is summarized, never sent in full
    assert JAPAN[4] not in json.dumps(sent)


def test_the_first_turn_sends_the_message_alone_and_keeps_the_env_system_message():
    policy = ContextAgent(ChatPolicy(CannedClient(["hi"])), CannedClient(['{"summary": "s"}']), embedder="hashing")
    policy.act([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hello"}])
    assert policy.base.client.requests == [
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hello"}]
    ]
    assert policy.costs[0].calls == {"base": 1, "light": 1}  # no topic decision on the first turn


def test_the_policys_system_prompt_stays_with_the_summaries():
    light = context_agent_light(dict.fromkeys(["beta", "gamma"], {"decision": "create"}), {})
    base = ChatPolicy(CannedClient(["ok"]), system_prompt="You are a ship's cook.")
    policy = ContextAgent(base, CannedClient(light), embedder=HashingEmbedder())
    play(policy, ["alpha", "beta", "gamma"])
    first, _, third = base.client.requests
    assert first[0] == {"role": "system", "content": "You are a ship's cook."}
    # turn 3 carries the other topics' summaries in a system message: the policy's prompt is merged into it
    assert third[0]["role"] == "system" and third[0]["content"].startswith("You are a ship's cook.\n\n")
    assert "Other topics of this conversation" in third[0]["content"]
    # an env's own system message wins over the policy's, as it does for ChatPolicy itself
    policy.reset()
    base.client.requests.clear()
    policy.act([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "alpha"}])
    assert base.client.requests[0][0] == {"role": "system", "content": "Be kind."}


def test_episode_record_holds_the_forest_costs_and_counters(servers):
    policy = run_japan(servers)
    record = json.loads(json.dumps(policy.episode_record()))
    assert record["policy"] == {
        "policy": "context_agent",
        "theta": 0.6,
        "embedder": "HashingEmbedder",
        "embed_chars": 1000,
        "summary_chars": 1500,
    }
    assert record["forest"] == json.loads(json.dumps(policy.forest.to_json()))
    assert record["counters"] == policy.stats and len(record["costs"]) == 6


def test_costs_per_role_match_what_the_servers_counted(servers):
    base, light = servers
    policy = run_japan(servers)
    usage = policy.usage
    # per turn: a summary; from turn 2 a topic decision; two branch decisions in all
    assert usage["base_calls"] == len(base.requests) == 6
    assert usage["light_calls"] == len(light.requests) == 6 + 5 + 2
    words = [sum(len(m["content"].split()) for m in r["messages"]) for r in base.requests]
    assert [c.context_tokens for c in policy.costs] == words  # ACT counts exactly what the model was sent
    assert policy.cost_summary()["ACT"] == sum(words) / 6


# -- malformed light-model output -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic_answer", "expected_topic", "defaults"),
    [
        ("I think this is a new topic.", "continue", 1),  # no JSON
        ('{"decision": "maybe"}', "continue", 1),  # not a decision
        ('{"decision": "switch", "topic": 9}', "continue", 1),  # a topic that does not exist
        ('{"decision": "switch", "topic": 1}', "continue", 0),  # "switch" to the active topic: a continuation
        ('{"decision": "create"', "create", 0),  # cut off: repaired
    ],
)
def test_malformed_topic_decision_continues_the_active_topic(topic_answer, expected_topic, defaults):
    def light(messages):
        if messages[0]["content"] == SUMMARY_SYSTEM:
            return '{"summary": "s", "topic_summary": "t"}'
        return topic_answer

    policy = ContextAgent(ScriptedPolicy(["ok"]), CannedClient(light), embedder=HashingEmbedder())
    play(policy, ["alpha beta", "gamma delta"])
    assert policy.forest.decisions[1]["topic"] == expected_topic
    assert len(policy.forest.trees) == (2 if expected_topic == "create" else 1)
    assert policy.stats["topic_defaults"] == defaults


@pytest.mark.parametrize("branch_answer", ["new branch please", '{"decision": "fork"}', "[]"])
def test_malformed_branch_decision_continues_the_thread(branch_answer):
    def light(messages):
        system = messages[0]["content"]
        if system == SUMMARY_SYSTEM:
            return '{"summary": "s"}'
        if "can branch" in system:
            return branch_answer
        return '{"decision": "continue"}'

    policy = ContextAgent(ScriptedPolicy(["ok"]), CannedClient(light), embedder=HashingEmbedder(), theta=0.3)
    play(policy, ["red apples and pears", "blue sky at night", "green grass in spring", "red apples and pears again"])
    assert policy.forest.decisions[3]["branch"] == "continue"
    assert [(n.branch, n.parent) for n in policy.forest.nodes] == [(0, None), (0, 1), (0, 2), (0, 3)]
    assert policy.stats["branch_calls"] == 1 and policy.stats["branch_defaults"] == 1


@pytest.mark.parametrize(
    ("turns", "fork", "verdict", "calls"),
    [
        # the candidate is the active node's parent: the thread's latest turns are in the context anyway
        (["red apples and pears", "blue sky at night", "red apples and pears again"], 1, "latest turn", 0),
        # the candidate is the active node itself: the same
        (["red apples and pears", "red apples and pears again"], 1, "latest turn", 0),
        # one step further up: an earlier point of the thread, worth asking whether the user goes back there
        (
            ["red apples and pears", "blue sky at night", "green grass in spring", "red apples and pears again"],
            1,
            "earlier point of this thread",
            1,
        ),
    ],
)
def test_the_heuristic_filter_skips_the_latest_turns_of_the_thread(turns, fork, verdict, calls):
    light = context_agent_light({t: {"decision": "continue"} for t in turns}, {turns[-1]: {"decision": "create"}})
    policy = ContextAgent(ScriptedPolicy(["ok"]), CannedClient(light), embedder=HashingEmbedder(), theta=0.3)
    play(policy, turns)
    last = policy.forest.decisions[-1]
    assert (last["fork"], last["filter"], policy.stats["branch_calls"]) == (fork, verdict, calls)
    assert last["similarity"] > 0.3  # the threshold alone would have let it through
    assert last["branch"] == ("create" if calls else "continue")


@pytest.mark.parametrize(
    "summary_answer",
    ["Here is a summary: the user asked about apples.", '{"summary": ""}', '{"summary": 42}', '["s"]'],
)
def test_malformed_summary_falls_back_to_the_message_words(summary_answer):
    long_message = " ".join(f"w{i}" for i in range(40))
    policy = ContextAgent(ScriptedPolicy(["ok"]), CannedClient([summary_answer]), embedder=HashingEmbedder())
    policy.act([{"role": "user", "content": long_message}])
    node = policy.forest.nodes[0]
    assert node.summary == " ".join(f"w{i}" for i in range(30)) + " …"
    assert policy.forest.trees[0].summary == node.summary  # a new topic takes the node summary
    assert policy.stats["summary_defaults"] == 1


# -- episodes, async, settings --------------------------------------------------------------------


def test_async_matches_sync(servers):
    base, light = servers
    sync_forest = run_japan(servers).forest
    policy = ContextAgent(ChatPolicy(client(base, "policy")), client(light, "light"), embedder=HashingEmbedder())

    async def talk():
        messages = []
        for text in JAPAN:
            messages.append({"role": "user", "content": text})
            messages.append({"role": "assistant", "content": await policy.aact(messages)})

    asyncio.run(talk())
    assert [n.to_json() for n in policy.forest.nodes] == [n.to_json() for n in sync_forest.nodes]


def test_reset_and_stale_transcripts(servers):
    policy = run_japan(servers)
    with pytest.raises(DataFormatError, match="call reset"):
        policy.act([{"role": "user", "content": "hi"}])
    policy.reset()
    assert policy.forest.nodes == [] and policy.costs == []


def test_turns_answered_elsewhere_join_the_active_thread():
    light = CannedClient(lambda m: '{"decision": "continue"}' if "topics" in m[0]["content"] else '{"summary": "s"}')
    policy = ContextAgent(ChatPolicy(CannedClient(["mine"])), light, embedder=HashingEmbedder())
    transcript = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "golden"},
        {"role": "user", "content": "q2"},
    ]
    policy.act(transcript)
    assert [(n.turn, n.parent, n.reply) for n in policy.forest.nodes] == [(1, None, "golden"), (2, 1, "mine")]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"theta": 1.5}, ConfigError, r"theta is a cosine similarity threshold in \[-1, 1\]"),
        ({"theta": True}, ConfigError, "theta"),
        ({"embedder": "hash"}, UnknownNameError, "Did you mean 'hashing'"),
        ({"embedder": object()}, ConfigError, "embedder must have encode"),
    ],
)
def test_bad_settings_are_one_clear_error(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        ContextAgent(ScriptedPolicy(["x"]), CannedClient(["{}"]), **kwargs)


# -- embedders ------------------------------------------------------------------------------------


def test_hashing_embedder_is_deterministic_and_unit_length():
    e = HashingEmbedder()
    a, b = e.encode(["red apples", "red apples"]), HashingEmbedder().encode(["red apples"])
    assert a.shape == (2, 384) and np.allclose(a[0], b[0]) and np.isclose(np.linalg.norm(a[0]), 1)
    close, far = e.encode(["red apples and pears", "red apples", "blue sky at night"])[[1, 2]]
    assert float(e.encode(["red apples and pears"])[0] @ close) > 0.6 > float(close @ far)
    assert not e.encode([""]).any()  # no words: a zero row, not NaN


def test_minilm_embedder_loads_the_shipped_model_and_places_a_fork_point():
    embedder = MiniLMEmbedder()
    vectors = embedder.encode(["How do I bake sourdough bread?", "Tips for baking bread with a starter", "Tax rules"])
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    assert vectors[0] @ vectors[1] > 0.6 > vectors[0] @ vectors[2]
    # in a real dialogue, the fork candidate for a message about bread is the bread turn
    light = CannedClient(lambda m: '{"decision": "continue"}' if "topic" in m[0]["content"] else '{"summary": "s"}')
    policy = ContextAgent(ScriptedPolicy(["ok"]), light, embedder=embedder)
    play(policy, ["How do I bake sourdough bread?", "What are the tax rules for freelancers?", "More bread tips?"])
    assert policy.forest.decisions[2]["fork"] == 1
