"""Context-Agent as its paper runs it: top-k retrieval and θ, the topic decision per path, the ablations, the
remote embedder, call counts per turn, and `ifgym eval env=ntm policy=context_agent_paper` over canned servers.
"""

from __future__ import annotations

import json
import math
import pickle
import re

import numpy as np
import pytest
from support.canned_judges import gold_or
from support.canned_light import client, context_agent_paper_light, from_body, play, thread_end
from support.canned_server import CannedServer
from support.paths import DATA

from ifgym.cli import main
from ifgym.errors import ConfigError, NotFoundError
from ifgym.llm import CannedClient
from ifgym.policies import ChatPolicy, ContextAgent, HashingEmbedder
from ifgym.policies.context_agent import BRANCH_SYSTEM, PAPER_SETTINGS, PATH_SYSTEM, Forest, Node, TopicTree
from ifgym.policies.embeddings import RemoteEmbedder, make_embedder

PAPER = {k: v for k, v in PAPER_SETTINGS.items() if k not in ("tree", "retrieval")}
DIM = 16


def unit(*pairs: tuple[int, float]) -> np.ndarray:
    """A DIM-vector with the given (index, value) entries, the last filling it to unit length."""
    v = np.zeros(DIM, dtype=np.float32)
    for i, x in pairs:
        v[i] = x
    return v


class VectorEmbedder:
    """Hand-made vectors: a node's content (message + reply) by its message, a bare message by itself.

    A node's vector is cos = c against the query direction e0 (`[c, sqrt(1 - c²)]` on axes 0 and
    its own axis); a message embedded alone (a retrieval query) gets its own axis, so it is near
    nothing unless `queries` gives it a vector. `calls` counts the encode calls.
    """

    name = "hand-made"

    def __init__(self, cosines: dict[str, float], queries: dict[str, np.ndarray]):
        self.cosines, self.queries, self.calls = cosines, queries, 0
        self.axes: dict[str, int] = {}

    def _axis(self, text: str) -> int:
        return self.axes.setdefault(text, 1 + len(self.axes))

    def encode(self, texts):
        self.calls += 1
        rows = []
        for text in texts:
            message = text.split("\n", 1)[0]
            if "\n" in text:  # a node's content
                c = self.cosines.get(message, 0.0)
                rows.append(unit((0, c), (self._axis(message), math.sqrt(1 - c * c))))
            else:
                rows.append(self.queries.get(text, unit((self._axis("query " + text), 1.0))))
        return np.stack(rows)


def reply_of(_messages):
    return "OK."


# --- retrieval: top 3 by cosine, θ, the filter ------------------------------------------------------

TURNS = ["alpha one", "beta two", "gamma three", "delta four", "epsilon five"]
QUERY = "back to something"


def paper_agent(light, embedder, **kwargs):
    settings = {**PAPER, **kwargs}
    return ContextAgent(ChatPolicy(CannedClient(reply_of)), light, embedder=embedder, **settings)


@pytest.mark.parametrize(
    ("theta", "calls", "parent"),
    [
        # the most similar node, turn 1 (0.9), is an earlier point of the thread above θ: one branch decision,
        # shown the thread and all three retrieved nodes; "create" grows a branch from turn 1
        (0.6, 1, 1),
        # θ = 0.95: turn 1 is not similar enough; no call, the thread continues
        (0.95, 0, 5),
    ],
)
def test_top_3_retrieval_with_theta_on_hand_made_vectors(theta, calls, parent):
    # turn 4 (0.3) is fourth and is not retrieved; turn 5 (0.5) is the thread's end
    cosines = dict(zip(TURNS, [0.9, 0.7, 0.65, 0.3, 0.5], strict=True))
    embedder = VectorEmbedder(cosines, {QUERY: unit((0, 1.0))})
    light = CannedClient(context_agent_paper_light(branches={QUERY: {"decision": "create"}}))
    policy = paper_agent(light, embedder, theta=theta)
    play(policy, [*TURNS, QUERY])
    log = policy.forest.decisions[-1]
    top3 = [(1, 0.9), (2, 0.7), (3, 0.65)]
    assert [(r["node"], r["similarity"]) for r in log["retrieved"]] == [(n, pytest.approx(x)) for n, x in top3]
    assert (log["fork"], log["similarity"]) == (1, pytest.approx(0.9))
    assert log["filter"] == ("earlier point of this thread" if calls else "below theta")
    branch_prompts = [m[-1]["content"] for m in light.requests if m[0]["content"] == BRANCH_SYSTEM]
    assert len(branch_prompts) == policy.stats["branch_calls"] == calls
    if calls:
        listed = [int(t) for t in re.findall(r"^- turn (\d+) on branch", branch_prompts[0], re.MULTILINE)]
        assert listed == [1, 2, 3]  # every retrieved node, most similar first
        assert "Current thread (latest last):\n- turn 1: summary: alpha one" in branch_prompts[0]
    node = policy.forest.nodes[-1]
    assert (node.parent, node.branch) == ((1, 1) if calls else (5, 0))
    assert node.parent == parent
    assert policy.protocol()["theta"] == theta
    assert (f"theta={theta}, not the paper's 0.6" in policy.protocol()["deviations"]) == (theta != 0.6)


@pytest.mark.parametrize(
    ("cosines", "verdict"),
    [
        ([0.55, 0.3, 0.2, 0.95, 0.99], "latest turn"),  # the thread's end is the most similar
        ([0.9, 0.3, 0.2, 0.95, 0.5], "latest turn"),  # its parent is, though turn 1 (0.9) is an earlier point
        ([0.59, 0.3, 0.2, 0.5, 0.4], "below theta"),
    ],
)
def test_the_most_similar_node_decides_whether_the_branch_decision_is_asked(cosines, verdict):
    embedder = VectorEmbedder(dict(zip(TURNS, cosines, strict=True)), {QUERY: unit((0, 1.0))})
    light = CannedClient(context_agent_paper_light())
    policy = paper_agent(light, embedder)
    play(policy, [*TURNS, QUERY])
    log = policy.forest.decisions[-1]
    assert (log["filter"], log["branch"], policy.stats["branch_calls"]) == (verdict, "continue", 0)
    assert policy.forest.nodes[-1].parent == 5


# --- the topic decision: leaf paths of the current tree, then the other trees, then a new tree ------------


def prebuilt_forest() -> Forest:
    """Topic 1 has two leaf paths (1-2-6, the active one, and 1-4); topics 2 (turn 3) and 3 (turn 5) one each."""
    f = Forest()
    shape = [(1, 1, 0, None), (2, 1, 0, 1), (3, 2, 0, None), (4, 1, 1, 1), (5, 3, 0, None), (6, 1, 0, 2)]
    for turn, topic, branch, parent in shape:
        f.nodes.append(Node(turn, turn, topic, branch, parent, f"message {turn}", summary=f"s{turn}"))
    f.trees = [
        TopicTree(1, root=1, branches={0: [1, 2, 6], 1: [4]}, forks={0: None, 1: 1}, active=6),
        TopicTree(2, root=3, branches={0: [3]}, forks={0: None}, active=3),
        TopicTree(3, root=5, branches={0: [5]}, forks={0: None}, active=5),
    ]
    f.active_topic = 1
    return f


def transcript(new: str) -> list[dict[str, str]]:
    messages = []
    for turn in range(1, 7):
        messages += [{"role": "user", "content": f"message {turn}"}, {"role": "assistant", "content": f"reply {turn}"}]
    return [*messages, {"role": "user", "content": new}]


ALL_PATHS = ["topic 1 to turn 4", "topic 1 to turn 6", "topic 2 to turn 3", "topic 3 to turn 5"]


@pytest.mark.parametrize(
    ("yes", "topic", "parent", "asked"),
    [
        # the current tree's leaf paths in order of creation (1-4, then 1-2-6); a yes on either continues the
        # current tree at its thread's end (turn 6), as the paper's code does
        ({4}, "continue", 6, ALL_PATHS[:1]),
        ({6}, "continue", 6, ALL_PATHS[:2]),
        # then the other trees' leaf paths, in order of creation: a yes switches to that tree at its thread's end
        ({3}, "switch", 3, ALL_PATHS[:3]),
        ({5}, "switch", 5, ALL_PATHS),
        # none matches: a new tree
        (set(), "create", None, ALL_PATHS),
    ],
)
def test_topic_decision_walks_the_leaf_paths_then_the_other_trees(yes, topic, parent, asked):
    new = "the new message"
    with (
        CannedServer(replies=from_body(context_agent_paper_light({new: yes}))) as light,
        CannedServer(replies=from_body(context_agent_paper_light())) as summarizer,
        CannedServer(replies=["OK."]) as base,
    ):
        policy = ContextAgent(
            ChatPolicy(client(base, "policy")),
            client(light, "light"),
            summary=client(summarizer, "summary"),
            embedder=HashingEmbedder(),
            **PAPER,
            retrieval=False,
        )
        policy.forest = prebuilt_forest()
        policy.act(transcript(new))
    log = policy.forest.decisions[-1]
    assert (log["topic"], log["asked"]) == (topic, asked)
    assert log.get("filter") == (None if topic == "create" else "retrieval off")  # a new tree has no branch to pick
    node = policy.forest.nodes[-1]
    assert (node.parent, node.branch) == (parent, 0)
    assert node.topic == {"continue": 1, "switch": {3: 2, 5: 3}.get(parent), "create": 4}[topic]
    # every question went to the light model, with the path it names: the node summaries from the root
    shown = [r["messages"][-1]["content"] for r in light.requests]
    assert all(r["messages"][0]["content"] == PATH_SYSTEM for r in light.requests)
    assert [thread_end(p) for p in shown] == [4, 6, 3, 5][: len(asked)]
    assert shown[0].startswith("Thread (its turns, latest last):\n- turn 1: s1\n- turn 4: s4\nNew message:")
    # the summary model wrote the node summary, nothing else (the other topics are shown as their node summaries)
    assert len(summarizer.requests) == 1
    assert policy.costs[-1].calls == {"base": 1, "light": len(asked) + 1}
    system = base.requests[-1]["messages"][0]["content"]
    others = [t for t in (1, 2, 3) if t != node.topic]
    assert all(f"Topic {t}:" in system for t in others) and ("- s5" in system) == (3 in others)


def test_an_unreadable_yes_no_is_a_no_and_counted():
    light = CannedClient(lambda m: "maybe" if m[0]["content"] == PATH_SYSTEM else '{"summary": "s"}')
    policy = ContextAgent(
        ChatPolicy(CannedClient(reply_of)), light, embedder=HashingEmbedder(), **PAPER, retrieval=False
    )
    play(policy, ["first", "second"])
    assert policy.forest.decisions[1]["topic"] == "create" and policy.stats["topic_defaults"] == 1


# --- the paper's ablations ---------------------------------------------------------------------------


def test_without_the_tree_the_context_is_the_k_most_similar_earlier_turns():
    turns = [f"apples and pears number {i}" if i % 2 else f"unrelated words {i}" for i in range(1, 18)]
    base = CannedClient(reply_of)
    light = CannedClient(["never asked"])
    policy = ContextAgent(ChatPolicy(base), light, embedder=HashingEmbedder(), **PAPER, tree=False)
    play(policy, turns)
    assert light.requests == []  # no topic decision, no summaries
    sent_users = [[m["content"] for m in r if m["role"] == "user"] for r in base.requests]
    assert [len(u) - 1 for u in sent_users] == [0, 1, 2, *([3] * 12), 5, 5]  # k = 3 up to turn 15, 5 after
    turn16 = policy.forest.decisions[15]["retrieved"]
    picked = [t["node"] for t in turn16]
    assert sent_users[15][:-1] == [turns[n - 1] for n in sorted(picked)]  # in dialogue order, in full
    assert all(turns[n - 1].startswith("unrelated") for n in picked)  # turn 16 is "unrelated words 16"
    assert [c.calls for c in policy.costs] == [{"base": 1, "light": 0}] * 17
    protocol = policy.protocol()
    assert protocol["tree"] is False and any("ablation without the tree" in d for d in protocol["deviations"])


def test_linear_k_overrides_the_papers_rule():
    base = CannedClient(reply_of)
    policy = ContextAgent(ChatPolicy(base), CannedClient(["x"]), embedder=HashingEmbedder(), tree=False, linear_k=1)
    play(policy, ["a b", "c d", "a b again"])
    assert [m["content"] for m in base.requests[-1] if m["role"] == "user"] == ["a b", "a b again"]


def test_without_retrieval_nothing_is_embedded_and_the_heuristic_decides():
    embedder = VectorEmbedder({}, {})
    light = CannedClient(context_agent_paper_light())
    policy = paper_agent(light, embedder, retrieval=False)
    play(policy, [*TURNS, QUERY])
    assert embedder.calls == 0 and policy.stats["branch_calls"] == 0
    assert [n.parent for n in policy.forest.nodes] == [None, 1, 2, 3, 4, 5]  # each turn continues the thread
    assert {d.get("filter") for d in policy.forest.decisions[1:]} == {"retrieval off"}
    (said,) = [d for d in policy.protocol()["deviations"] if "ablation without the retriever" in d]
    assert "always continues (ifgym's choice)" in said and "keeps a heuristic branch decision" in said
    assert not any("IsAncestor" in d for d in policy.protocol()["deviations"])  # no retrieval: no branch filter


# --- the embedder by name, and a served one ------------------------------------------------------------


def hashing_vector(text: str) -> list[float]:
    return HashingEmbedder().encode([text])[0].tolist()


def test_remote_embedder_over_a_canned_embeddings_route():
    with CannedServer(embed=lambda t: [2 * x for x in hashing_vector(t)], model="Qwen3-Embedding-0.6B") as srv:
        embedder = make_embedder(srv.base_url, "Qwen3-Embedding-0.6B")
        rows = embedder.encode(["red apples", "blue sky"])
        assert isinstance(embedder, RemoteEmbedder) and embedder.name == "Qwen3-Embedding-0.6B"
        assert np.allclose(rows, HashingEmbedder().encode(["red apples", "blue sky"]), atol=1e-6)  # normalised
        sent = {"model": "Qwen3-Embedding-0.6B", "input": ["red apples", "blue sky"], "encoding_format": "float"}
        assert srv.embedding_requests == [sent]
        # a Ray worker gets a copy that opens its own connections
        assert np.allclose(pickle.loads(pickle.dumps(embedder)).encode(["red apples"]), rows[:1], atol=1e-6)
        # the paper's embedder: no warning about θ in the protocol
        policy = ContextAgent(ChatPolicy(CannedClient(reply_of)), CannedClient(["{}"]), embedder=embedder, **PAPER)
        assert not any(d.startswith("embedder ") for d in policy.protocol()["deviations"])
        with pytest.raises(NotFoundError, match="does not serve model 'other'"):
            make_embedder(srv.base_url, "other").encode(["x"])
    with CannedServer() as no_route:  # a chat-only server: the route is a 404
        with pytest.raises(NotFoundError):
            make_embedder(no_route.base_url, "canned-model").encode(["x"])


def test_a_served_embedder_places_the_same_forks_as_the_local_one():
    dialogue = ["red apples and pears", "blue sky at night", "green grass in spring", "red apples and pears again"]
    forests = []
    with CannedServer(embed=hashing_vector) as srv:
        for embedder in (HashingEmbedder(), make_embedder(srv.base_url, "canned-model")):
            light = CannedClient(context_agent_paper_light())
            policy = paper_agent(light, embedder, theta=0.3)
            play(policy, dialogue)
            forests.append(policy.forest.decisions)
        assert len(srv.embedding_requests) == 4 + 3  # each node's content, and each query after the first turn
    assert forests[0] == forests[1] and forests[0][-1]["filter"] == "earlier point of this thread"


@pytest.mark.parametrize(
    ("name", "model", "fragment"),
    [
        ("http://127.0.0.1:9/v1", None, "needs the model it serves"),
        ("minilm", "Qwen3-Embedding-0.6B", "names the model of an embeddings endpoint"),
    ],
)
def test_embedder_settings_errors(name, model, fragment):
    with pytest.raises(ConfigError, match=fragment):
        make_embedder(name, model)


def test_another_embedder_than_the_papers_is_named_with_theta():
    policy = ContextAgent(ChatPolicy(CannedClient(reply_of)), CannedClient(["{}"]), embedder="hashing", **PAPER)
    protocol = policy.protocol()
    assert (
        "embedder hashing, not the paper's Qwen3-Embedding-0.6B; θ=0.6 was calibrated for the paper's"
        in (protocol["deviations"])
    )
    assert protocol["embedder"] == "hashing" and protocol["top_k"] == 3 and protocol["topic_decision"] == "paths"


# --- `ifgym eval env=ntm policy=context_agent_paper` ------------------------------------------------------


def checklist_judge(messages):
    """Yes to every checkpoint the judge is asked about."""
    n = messages[-1]["content"].count("<item ")
    return json.dumps({"results": [{"item": i + 1, "judgement": "Yes"} for i in range(n)]})


def test_eval_ntm_with_the_paper_preset_writes_tcr_act_and_the_policy_protocol(tmp_path, capsys):
    out = tmp_path / "run" / "episodes.jsonl"
    with (
        CannedServer(replies=["Here is the plan so far."]) as base,
        CannedServer(replies=from_body(context_agent_paper_light())) as light,
        CannedServer(replies=gold_or(checklist_judge)) as judge,
        CannedServer(embed=hashing_vector, model="Qwen3-Embedding-0.6B") as embeddings,
    ):
        code = main(
            [
                "eval",
                "env=ntm",
                f"env.dataset={DATA / 'ntm' / 'made_up.jsonl'}",
                "policy=context_agent_paper",
                f"policy.llm.base_url={base.base_url}",
                "policy.llm.model=canned-model",
                f"policy.light_llm.base_url={light.base_url}",
                "policy.light_llm.model=canned-model",
                f"policy.context_agent.embedder={embeddings.base_url}",
                "policy.context_agent.embedder_model=Qwen3-Embedding-0.6B",
                "judge=llm",
                f"judge.llm.base_url={judge.base_url}",
                "judge.llm.model=canned-model",
                "episodes=2",
                f"output={out}",
                "progress=false",
                "plots=false",
                "ci=false",
            ]
        )
        assert code == 0
    summary = json.loads((out.parent / "summary.json").read_text())
    strict = summary["strict"]
    assert strict["TCR"] == 1.0 and {"ACT/10", "ACT/15", "TCR/10", "TCR/15"} <= set(strict)
    protocol = summary["policy_protocol"]
    assert (protocol["paper"], protocol["embedder"], protocol["theta"], protocol["top_k"]) == (
        "Context-Agent",
        "Qwen3-Embedding-0.6B",
        0.6,
        3,
    )
    assert protocol["deviations"] == [
        "prompts in ifgym's own words, not the paper's",
        "the branch filter treats a retrieved node that is the active turn's parent like the latest turn (no branch "
        "decision), as the paper's released code does; the paper's IsAncestor counts the parent as an earlier point "
        "of the thread",
        "decision model canned-model, summary model canned-model; the paper's code decides with gemma3 12B and "
        "summarizes with gemma3 4B",
    ]
    printed = capsys.readouterr().out
    assert "policy: Context-Agent (embedder=Qwen3-Embedding-0.6B, theta=0.6, topic_decision=paths" in printed
    assert "not Context-Agent's setup:\n  - prompts in ifgym's own words" in printed
    # the light model had every decision and summary (summary_llm null = light_llm); the base one call per turn
    assert len(base.requests) == 10 + 15
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    costs = [c for e in episodes for c in e["meta"]["policy_trace"]["costs"]]
    assert sum(c["calls"]["light"] for c in costs) == len(light.requests)
    # every turn: one node summary; from turn 2 one yes/no question (every thread answers yes: one tree)
    assert [c["calls"]["light"] for c in episodes[0]["meta"]["policy_trace"]["costs"]] == [1] + [2] * 9
    assert summary["usage"]["light"]["calls"] == len(light.requests) and "summary" not in summary["usage"]


@pytest.mark.parametrize(
    ("overrides", "light", "summary"),
    [
        ([], "http://127.0.0.1:9/v1", None),  # both left: the model under test, one light client
        (["policy.light_llm.base_url=http://127.0.0.1:10/v1"], "http://127.0.0.1:10/v1", None),  # summaries follow
        (["policy.summary_llm.base_url=http://127.0.0.1:11/v1"], "http://127.0.0.1:11/v1", None),  # decisions follow
        (
            ["policy.light_llm.base_url=http://127.0.0.1:10/v1", "policy.summary_llm.base_url=http://127.0.0.1:11/v1"],
            "http://127.0.0.1:10/v1",
            "http://127.0.0.1:11/v1",
        ),
    ],
)
def test_the_decision_and_summary_models_each_default_to_the_other(overrides, light, summary):
    from omegaconf import OmegaConf

    from ifgym.cli import compose
    from ifgym.runner.build import build_policy

    preset = [
        "policy=context_agent_paper",
        "policy.context_agent.embedder=hashing",
        "policy.llm.base_url=http://127.0.0.1:9/v1",
    ]
    cfg = OmegaConf.to_container(compose([*preset, *overrides]), resolve=True)
    clients: dict = {}
    policy = build_policy(cfg["policy"], clients)()
    assert clients["light"].config.base_url == light and policy.light is clients["light"]
    if summary is None:
        assert "summary" not in clients and policy.summary is policy.light
    else:
        assert clients["summary"].config.base_url == summary and policy.summary is clients["summary"]
    assert (policy.top_k, policy.topic_decision, policy.topic_summary) == (3, "paths", "from_nodes")
