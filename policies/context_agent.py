"""Context-Agent: the dialogue as a forest of topic trees; the model sees the active path in full, the rest summarized.

Every user turn becomes a node (content, embedding, parent, branch, summary) in the tree of its
topic. Per turn:

1. **Topic decision** (light model, skipped on the first turn): over the trees' summaries, the new
   message *continues* the active topic, *switches* to another listed one, or *creates* a new tree.
2. **Fork point**: within the active tree, the node most similar to the new message (cosine of
   sentence embeddings).
3. **Heuristic filter**: the light model makes a **branch decision** only when that node is
   similar enough (similarity > θ, default 0.6) and is a plausible place to go back to: a node
   *on another branch* (off the active path), or an *earlier point of this thread*, an ancestor
   of the active node other than its parent. The active node (the thread's latest turn, the new
   node's default parent) and its parent are the latest turns of the thread, in the context in
   full anyway: a message close to them continues the thread, and no call is spent. (The filter
   goes by position on the active path, not by branch id: a fork point the active branch grew
   from is an ancestor, not "another branch".) The decision is to *continue* the current thread,
   *create* a branch from that node, or *switch* to that node's branch (resume it at its latest
   node; for a node of the current thread, whose branch is this one, a switch back to it grows a
   branch from it, as *create*). Otherwise the thread continues. Each turn's decision log says
   which way the filter went (`"filter"`: below theta / latest turn / earlier point of this
   thread / other branch).
4. **Context** for the base policy: the standing instructions (the env's system message, or else
   the base policy's own system prompt) and summaries of the other branches of the active tree
   and of the other topics in one system message, then the active path (root to the new node) in
   full.
5. **Node summary** (light model) after the reply, with the topic's updated summary; then the
   node's content (message + reply) is embedded for later fork points.

Documented defaults for malformed light-model output: an unreadable topic decision, or a switch
to a topic that does not exist, *continues* the active topic; an unreadable branch decision
*continues* the current thread; an unreadable summary becomes the user's message cut to 30 words,
and the topic summary stays as it was (a new topic takes the node summary). Each case is counted
in `stats`. Nothing is guessed beyond that.

Cost per turn: one base call, one summary call, one topic call (not on the first turn) and a
branch call only when the filter lets a candidate through.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ifgym.answers import json_object
from ifgym.errors import ConfigError, DataFormatError
from ifgym.llm import Message, resolve_client
from ifgym.policies.base import Policy
from ifgym.policies.embeddings import Embedder, MiniLMEmbedder, make_embedder
from ifgym.policies.wrapper import (
    LIGHT,
    BaseCall,
    EmbedCall,
    Exchange,
    LightCall,
    Turn,
    WrapperPolicy,
    check_int,
    clip,
    split_transcript,
)

__all__ = ["BRANCH_DECISIONS", "THETA", "TOPIC_DECISIONS", "ContextAgent", "Forest", "Node", "TopicTree"]

THETA = 0.6
TOPIC_DECISIONS = ("continue", "switch", "create")
BRANCH_DECISIONS = ("continue", "create", "switch")
SUMMARY_WORDS = 30

TOPIC_SYSTEM = """You keep track of the topics of a conversation. You get the topics so far (number and \
summary), which one is active, and the user's new message. Decide:
- "create" when the message is about something none of the listed topics covers;
- "switch" when it is about a listed topic other than the active one (give that topic's number);
- "continue" when it is about the active topic.
Answer with JSON only: {"decision": "<create|switch|continue>", "topic": <the topic number, for switch>}"""

BRANCH_SYSTEM = """Within one topic a conversation can branch: the user may go back to an earlier point and \
take it in another direction. Decide how the user's new message relates to the current thread:
- continue: it follows on from the latest turn of the current thread;
- create: it starts a new branch from the earlier point shown;
- switch: it resumes the other branch that the earlier point belongs to.
Answer with JSON only: {"decision": "continue|create|switch"}"""

SUMMARY_SYSTEM = f"""Summarize one exchange of a conversation in one sentence of at most {SUMMARY_WORDS} words, \
and update the summary of its topic (at most 50 words) so that it covers the exchange too.
Answer with JSON only: {{"summary": "<this exchange>", "topic_summary": "<the whole topic so far>"}}"""


@dataclass
class Node:
    """One turn in a topic tree."""

    id: int  # 1-based, in order of creation
    turn: int  # 1-based turn of the dialogue
    topic: int
    branch: int  # branch id within the topic's tree
    parent: int | None
    user: str
    reply: str = ""
    summary: str = ""
    embedding: np.ndarray | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs (the embedding left out)."""
        return {
            "id": self.id,
            "turn": self.turn,
            "topic": self.topic,
            "branch": self.branch,
            "parent": self.parent,
            "user": self.user,
            "reply": self.reply,
            "summary": self.summary,
        }


@dataclass
class TopicTree:
    """A topic: its root node, branches (id -> node ids in order), fork points, summary and active leaf."""

    id: int
    root: int
    summary: str = ""
    branches: dict[int, list[int]] = field(default_factory=dict)
    forks: dict[int, int | None] = field(default_factory=dict)  # branch -> the node it grew from
    active: int = 0  # node id where the topic's thread currently ends

    @property
    def nodes(self) -> list[int]:
        """Every node id of the tree, in order of creation."""
        return sorted(n for ids in self.branches.values() for n in ids)

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {
            "id": self.id,
            "root": self.root,
            "summary": self.summary,
            "branches": {str(b): list(ids) for b, ids in self.branches.items()},
            "forks": {str(b): f for b, f in self.forks.items()},
            "active": self.active,
        }


@dataclass
class Forest:
    """Every topic tree of the dialogue, the active topic, and the decision taken at each turn."""

    nodes: list[Node] = field(default_factory=list)
    trees: list[TopicTree] = field(default_factory=list)
    active_topic: int | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def node(self, node_id: int) -> Node:
        """The node with this id."""
        return self.nodes[node_id - 1]

    def tree(self, topic: int) -> TopicTree:
        """The tree of this topic id."""
        return self.trees[topic - 1]

    def path(self, node_id: int | None) -> list[int]:
        """Node ids from the root of its tree down to `node_id` (empty for None)."""
        out: list[int] = []
        while node_id is not None:
            out.append(node_id)
            node_id = self.node(node_id).parent
        return out[::-1]

    def active_path(self) -> list[int]:
        """The path to the active topic's active node."""
        if self.active_topic is None:
            return []
        return self.path(self.tree(self.active_topic).active)

    def to_json(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict."""
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "trees": [t.to_json() for t in self.trees],
            "active_topic": self.active_topic,
            "decisions": [dict(d) for d in self.decisions],
        }


def _words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def _decision(data: dict[str, Any] | None, allowed: Sequence[str]) -> str | None:
    value = data.get("decision") if data is not None else None
    value = value.strip().lower() if isinstance(value, str) else None
    return value if value in allowed else None


class ContextAgent(WrapperPolicy):
    """Wrap a chat policy with Context-Agent: topic trees, branch decisions, active path + summaries as context.

    | argument | default | meaning |
    |---|---|---|
    | `base` | | the policy under test (e.g. `ChatPolicy(client)`) |
    | `light` | `None` | client for the decisions and summaries; an LLMConfig or mapping; `None` = the embedded model |
    | `embedder` | `None` | object with `encode(texts)`, or `"minilm"` / `"hashing"`; `None` = MiniLM (shipped model) |
    | `theta` | `0.6` | similarity a fork candidate must exceed before the branch decision is asked |
    | `embed_chars` | `1000` | a node's content (message + reply) is cut to this length before embedding |
    | `summary_chars` | `1500` | the reply is cut to this length in the summary prompt |

    After an episode, `forest` holds the trees (`forest.to_json()`), `costs` the per-turn costs and
    `stats` the counters of defaults taken.
    """

    def __init__(
        self,
        base: Policy,
        light: Any = None,
        *,
        embedder: Embedder | str | None = None,
        theta: float = THETA,
        embed_chars: int = 1000,
        summary_chars: int = 1500,
    ):
        if embedder is None:
            embedder = MiniLMEmbedder()
        elif isinstance(embedder, str):
            embedder = make_embedder(embedder)
        elif not callable(getattr(embedder, "encode", None)):
            raise ConfigError(f"embedder must have encode(texts), or be 'minilm' / 'hashing'; got {embedder!r:.200}")
        super().__init__(base, resolve_client(light, LIGHT, name="light"), embedder=embedder)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not -1 <= theta <= 1:
            raise ConfigError(f"theta is a cosine similarity threshold in [-1, 1]; got {theta!r}")
        self.theta = float(theta)
        self.embed_chars = check_int("embed_chars", embed_chars, 1)
        self.summary_chars = check_int("summary_chars", summary_chars, 1)
        self._reset_state()

    def _reset_state(self) -> None:
        self.forest = Forest()
        self.stats: dict[str, int] = {
            "topic_defaults": 0,
            "branch_calls": 0,
            "branch_defaults": 0,
            "summary_defaults": 0,
        }

    def describe(self) -> dict[str, Any]:
        """The wrapper's settings, for logs."""
        return {
            "policy": "context_agent",
            "theta": self.theta,
            "embedder": type(self.embedder).__name__,
            "embed_chars": self.embed_chars,
            "summary_chars": self.summary_chars,
        }

    def episode_record(self) -> dict[str, Any]:
        """Settings, per-turn costs, counters, and the topic forest (`forest.to_json()`)."""
        return {**super().episode_record(), "forest": self.forest.to_json()}

    # -- one turn -------------------------------------------------------------------------------

    def _turn(self, messages: list[Message]) -> Turn:
        system, exchanges, current = split_transcript(messages)
        yield from self._catch_up(exchanges)
        f = self.forest
        t = len(exchanges) + 1
        log: dict[str, Any] = {"turn": t}
        f.decisions.append(log)

        if f.active_topic is None:
            log["topic"] = "create"
        else:
            log["topic"] = yield from self._topic_decision(current)
        query = (yield EmbedCall([current]))[0]
        if log["topic"] == "create":
            node = self._add_node(t, current, None, None)
        else:
            parent, branch = yield from self._fork(query, current, log)
            node = self._add_node(t, current, parent, branch)

        reply = yield BaseCall(self.context(system, node, current))
        node.reply = reply
        yield from self._summarize(node)
        node.embedding = (yield EmbedCall([self._content(node)]))[0]
        return reply

    def _catch_up(self, exchanges: list[Exchange]) -> Turn:
        """Keep the nodes in step with the transcript; turns answered without this wrapper continue the thread."""
        f = self.forest
        if len(exchanges) < len(f.nodes):
            raise DataFormatError(
                f"ContextAgent has seen {len(f.nodes)} turns but this transcript has {len(exchanges)} earlier ones; "
                "call reset() before a new episode"
            )
        for ex in exchanges[len(f.nodes) :]:
            if f.active_topic is None:
                node = self._add_node(ex.turn, ex.user, None, None)
            else:
                leaf = f.node(f.tree(f.active_topic).active)
                node = self._add_node(ex.turn, ex.user, leaf.id, leaf.branch)
            node.reply = ex.assistant
            node.summary = _words(ex.user, SUMMARY_WORDS)
            node.embedding = (yield EmbedCall([self._content(node)]))[0]
        for node in f.nodes:  # the transcript is the truth: an env may keep other answers than ours
            ex = exchanges[node.turn - 1]
            node.user, node.reply = ex.user, ex.assistant

    def _topic_decision(self, message: str) -> Turn:
        f = self.forest
        lines = ["Topics so far:"]
        for tree in f.trees:
            mark = " (active)" if tree.id == f.active_topic else ""
            lines.append(f"- topic {tree.id}{mark}: {tree.summary or '(no summary yet)'}")
        lines.append(f"New message:\n{message}")
        out = yield LightCall(
            [{"role": "system", "content": TOPIC_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]
        )
        data = json_object(out.text)
        decision = _decision(data, TOPIC_DECISIONS)
        if decision == "switch":
            target = data.get("topic")
            if isinstance(target, str) and target.strip().isdigit():
                target = int(target)
            known = isinstance(target, int) and not isinstance(target, bool) and 1 <= target <= len(f.trees)
            if not known:
                decision = None
            elif target != f.active_topic:
                f.active_topic = target
            else:
                decision = "continue"  # a "switch" to the active topic is a continuation
        if decision is None:
            self.stats["topic_defaults"] += 1
            decision = "continue"
        return decision

    def _fork(self, query: np.ndarray, message: str, log: dict[str, Any]) -> Turn:
        """Where the new node goes in the active tree: (parent id, branch id)."""
        f = self.forest
        tree = f.tree(f.active_topic)
        active = f.node(tree.active)
        best, best_sim = None, -math.inf
        for node_id in tree.nodes:
            node = f.node(node_id)
            if node.embedding is None:
                continue
            sim = float(np.dot(query, node.embedding))
            if sim >= best_sim:  # ties go to the later node: the more recent mention
                best, best_sim = node, sim
        log["fork"] = best.id if best is not None else None
        log["similarity"] = round(best_sim, 4) if best is not None else None
        if best is None:
            log["filter"] = "no candidate"
        elif best_sim <= self.theta:
            log["filter"] = "below theta"
        elif best.id in (active.id, active.parent):
            log["filter"] = "latest turn"
        elif best.id in f.path(active.id):
            log["filter"] = "earlier point of this thread"
        else:
            log["filter"] = "other branch"
        if log["filter"] not in ("earlier point of this thread", "other branch"):
            log["branch"] = "continue"
            return active.id, active.branch
        self.stats["branch_calls"] += 1
        thread = [f"- turn {f.node(n).turn}: {f.node(n).summary}" for n in f.path(active.id)]
        prompt = "\n".join(
            [
                "Current thread (latest last):",
                *thread,
                f"Earlier point (similarity {best_sim:.2f}), turn {best.turn} on branch {best.branch}: {best.summary}",
                f"What the user said there: {clip(best.user, 600)}",
                f"New message:\n{message}",
            ]
        )
        out = yield LightCall([{"role": "system", "content": BRANCH_SYSTEM}, {"role": "user", "content": prompt}])
        decision = _decision(json_object(out.text), BRANCH_DECISIONS)
        if decision is None:
            self.stats["branch_defaults"] += 1
            decision = "continue"
        log["branch"] = decision
        if decision == "create":
            return self._branch_from(tree, best), max(tree.branches)
        if decision == "switch" and best.branch != active.branch:
            leaf = tree.branches[best.branch][-1]
            return leaf, best.branch
        if decision == "switch":  # back to an earlier point of this very thread: grow a branch from it
            log["branch"] = "create"
            return self._branch_from(tree, best), max(tree.branches)
        return active.id, active.branch

    @staticmethod
    def _branch_from(tree: TopicTree, fork: Node) -> int:
        """Open a new branch in `tree` growing from `fork`; returns the fork's id (the new node's parent)."""
        branch = max(tree.branches) + 1
        tree.branches[branch] = []
        tree.forks[branch] = fork.id
        return fork.id

    def _add_node(self, turn: int, user: str, parent: int | None, branch: int | None) -> Node:
        f = self.forest
        node_id = len(f.nodes) + 1
        if parent is None:  # a new topic tree
            tree = TopicTree(id=len(f.trees) + 1, root=node_id, branches={0: []}, forks={0: None})
            f.trees.append(tree)
            f.active_topic = tree.id
            branch = 0
        tree = f.tree(f.active_topic)
        node = Node(node_id, turn, tree.id, branch, parent, user)
        f.nodes.append(node)
        tree.branches[branch].append(node_id)
        tree.active = node_id
        return node

    def _summarize(self, node: Node) -> Turn:
        tree = self.forest.tree(node.topic)
        prompt = (
            f"Topic summary so far: {tree.summary or '(new topic)'}\n"
            f"User: {clip(node.user, self.summary_chars)}\n"
            f"Assistant: {clip(node.reply, self.summary_chars)}"
        )
        out = yield LightCall([{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": prompt}])
        data = json_object(out.text)
        summary = data.get("summary") if data is not None else None
        topic_summary = data.get("topic_summary") if data is not None else None
        if not isinstance(summary, str) or not summary.strip():
            self.stats["summary_defaults"] += 1
            summary = _words(node.user, SUMMARY_WORDS)
        node.summary = " ".join(summary.split())
        if isinstance(topic_summary, str) and topic_summary.strip():
            tree.summary = " ".join(topic_summary.split())
        elif not tree.summary:
            tree.summary = node.summary

    def _content(self, node: Node) -> str:
        return clip(f"{node.user}\n{node.reply}", self.embed_chars)

    # -- the context ----------------------------------------------------------------------------

    def context(self, system: list[Message], node: Node, current: str) -> list[Message]:
        """The messages the base policy gets: system (+ summaries of the rest), the active path, the message."""
        f = self.forest
        path = f.path(node.parent)
        tree = f.tree(node.topic)
        on_path = set(path) | {node.id}
        memory: list[str] = []
        for branch, ids in tree.branches.items():
            rest = [i for i in ids if i not in on_path]
            if not rest:
                continue
            fork = tree.forks.get(branch)
            where = f"branching off after turn {f.node(fork).turn}" if fork is not None else "the start of this topic"
            memory.append(f"Another thread of this topic ({where}):")
            memory.extend(f"- turn {f.node(i).turn}: {f.node(i).summary}" for i in rest)
        others = [t for t in f.trees if t.id != tree.id]
        if others:
            memory.append("Other topics of this conversation:")
            memory.extend(f"- {t.summary or '(no summary)'}" for t in others)
        head = self.standing_instructions(system)
        if memory:
            head.append(
                "Summaries of earlier parts of this conversation that are not shown in full:\n" + "\n".join(memory)
            )
        out: list[Message] = [{"role": "system", "content": "\n\n".join(head)}] if head else []
        for node_id in path:
            n = f.node(node_id)
            out.append({"role": "user", "content": n.user})
            out.append({"role": "assistant", "content": n.reply})
        out.append({"role": "user", "content": current})
        return out
