"""Context-Agent: the dialogue as a forest of topic trees; the model sees the active path in full, the rest summarized.

Every user turn becomes a node (content, embedding, parent, branch, summary) in the tree of its
topic. Per turn:

1. **Topic decision** (light model, skipped on the first turn), in one of two ways:
   - `topic_decision="summaries"` (ifgym's cheap default): one call over the trees' summaries;
     the new message *continues* the active topic, *switches* to another listed one, or *creates*
     a new tree.
   - `topic_decision="paths"` (the paper's, as its released code runs it): a yes/no question, "is
     the new message about the same core object as this thread, and does it depend on it?", asked
     of each leaf path of the current tree (the node summaries from the root to a leaf; leaves in
     order of creation), then of each leaf path of the other trees (in order of creation); the
     first *yes* continues the current tree or switches to that tree (at its thread's end); none
     *creates* a new tree.
2. **Retrieval**: within the active tree, the `top_k` nodes most similar to the new message (cosine
   of sentence embeddings of each node's message and reply; the paper's top 3).
3. **Heuristic filter**: the light model makes a **branch decision** only when the most similar
   node is similar enough (similarity > θ, default 0.6) and is a plausible place to go back to: a
   node *on another branch* (off the active path), or an *earlier point of this thread*, an
   ancestor of the active node other than its parent on the same branch. The active node (the
   thread's latest turn, the new node's default parent) and its parent are the latest turns of the
   thread, in the context in full anyway: a message close to them continues the thread, and no call
   is spent. The decision, shown the thread and every retrieved node, is to *continue* the current
   thread, *create* a branch from the most similar node, or *switch* to that node's branch (resume
   it at its latest node; for a node of the current branch, a switch back to it grows a branch from
   it, as *create*). Otherwise the thread continues. Each turn's decision log says which way the
   filter went (`"filter"`: below theta / latest turn / earlier point of this thread / other
   branch) and, with `top_k` > 1, what was retrieved (`"retrieved"`). With `retrieval=False` (the
   paper's "w/o retriever" ablation) nothing is embedded or retrieved: the thread continues
   (`"filter": "retrieval off"`), ifgym's choice: the paper's ablation keeps a heuristic branch
   decision, which it does not describe enough to reproduce. A retrieved node that is the active
   turn's parent counts as the latest turn, as in the paper's released code (its IsAncestor test
   counts the parent as an earlier point); `protocol()` says both.
4. **Context** for the base policy: the standing instructions (the env's system message, or else
   the base policy's own system prompt) and summaries of the other branches of the active tree
   and of the other topics in one system message, then the active path (root to the new node) in
   full.
5. **Node summary** (summary model) after the reply; then the node's content (message + reply)
   is embedded for later retrieval. A topic's summary is either updated in the same call
   (`topic_summary="running"`) or, as the paper does, its node summaries themselves, listed
   (`topic_summary="from_nodes"`: no call).

Without the tree (`tree=False`, the paper's "w/o tree" ablation) the turns form one linear
sequence: the context is the `k` earlier turns most similar to the new message, in full and in
dialogue order (k = 3 up to turn 15 and 5 after, the paper's 3 / 5 for dialogues of ≤ 15 / more
turns, chosen by the turns so far since a policy does not know the dialogue's length; or
`linear_k`); no topic decision, no summaries, no θ.

Documented defaults for malformed light-model output: an unreadable topic decision, or a switch
to a topic that does not exist, *continues* the active topic; an unreadable yes/no answer is *no*;
an unreadable branch decision *continues* the current thread; an unreadable summary becomes the
user's message cut to 30 words, and the topic summary stays as it was (a new topic takes the node
summary). Each case is counted in `stats`. Nothing is guessed beyond that.

Cost per turn: one base call; one summary call; the topic decision (not on the first turn): one
call, or one per leaf path asked until the first yes; a branch call only when the filter lets
the most similar node through. `tree=False`: the base call alone.
`protocol()` lists how the settings differ from the paper's (`PAPER_SETTINGS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ifgym.errors import ConfigError, DataFormatError
from ifgym.llm import Message, resolve_client
from ifgym.model_answers import json_object
from ifgym.policies.base import Policy
from ifgym.policies.embeddings import PAPER_EMBEDDER, Embedder, MiniLMEmbedder, is_paper_embedder, make_embedder
from ifgym.policies.wrapper import (
    LIGHT,
    BaseCall,
    EmbedCall,
    Exchange,
    LightCall,
    Turn,
    WrapperPolicy,
    check_choice,
    check_int,
    clip,
    split_transcript,
)

__all__ = [
    "BRANCH_DECISIONS",
    "PAPER_SETTINGS",
    "THETA",
    "TOPIC_DECISIONS",
    "ContextAgent",
    "Forest",
    "Node",
    "TopicTree",
]

THETA = 0.6
TOPIC_DECISIONS = ("continue", "switch", "create")
BRANCH_DECISIONS = ("continue", "create", "switch")
TOPIC_MODES = ("summaries", "paths")
TOPIC_SUMMARY_MODES = ("running", "from_nodes")
SUMMARY_WORDS = 30
# The Context-Agent paper's settings (the policy=context_agent_paper preset); protocol() names each difference.
PAPER_SETTINGS: dict[str, Any] = {
    "topic_decision": "paths",
    "topic_summary": "from_nodes",
    "top_k": 3,
    "theta": THETA,
    "tree": True,
    "retrieval": True,
}


def linear_k(turn: int) -> int:
    """Turns retrieved without the tree at this turn: the paper's 3 for dialogues of ≤ 15 turns, 5 above."""
    return 3 if turn <= 15 else 5


TOPIC_SYSTEM = """You keep track of the topics of a conversation. You get the topics so far (number and \
summary), which one is active, and the user's new message. Decide:
- "create" when the message is about something none of the listed topics covers;
- "switch" when it is about a listed topic other than the active one (give that topic's number);
- "continue" when it is about the active topic.
Answer with JSON only: {"decision": "<create|switch|continue>", "topic": <the topic number, for switch>}"""

PATH_SYSTEM = """You follow the threads of a conversation. You get one thread (the summaries of its turns, in \
order) and the user's new message. Answer "yes" only if both hold: the new message is about the same core object \
as the thread (the same device, trip, document, problem; a change of place or tool is a change of object), and it \
depends on the thread (it refers back to it, or carries it on). Otherwise answer "no".
Answer with JSON only: {"answer": "<yes|no>"}"""

BRANCH_SYSTEM = """Within one topic a conversation can branch: the user may go back to an earlier point and \
take it in another direction. Decide how the user's new message relates to the current thread:
- continue: it follows on from the latest turn of the current thread;
- create: it starts a new branch from the most similar earlier point shown (the first);
- switch: it resumes the other branch that this earlier point belongs to.
Answer with JSON only: {"decision": "continue|create|switch"}"""

SUMMARY_SYSTEM = f"""Summarize one exchange of a conversation in one sentence of at most {SUMMARY_WORDS} words, \
and update the summary of its topic (at most 50 words) so that it covers the exchange too.
Answer with JSON only: {{"summary": "<this exchange>", "topic_summary": "<the whole topic so far>"}}"""

NODE_SUMMARY_SYSTEM = f"""Summarize one exchange of a conversation in one sentence of at most {SUMMARY_WORDS} words: \
what the user asked for, with every requirement they set, and what was answered.
Answer with JSON only: {{"summary": "<this exchange>"}}"""


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


# ifgym's defaults of the paper's options: a record names them only when one differs
DEFAULT_OPTIONS: dict[str, Any] = {
    "topic_decision": "summaries",
    "topic_summary": "running",
    "top_k": 1,
    "tree": True,
    "retrieval": True,
    "linear_k": None,
}


class ContextAgent(WrapperPolicy):
    """Wrap a chat policy with Context-Agent: topic trees, branch decisions, active path + summaries as context.

    | argument | default | meaning |
    |---|---|---|
    | `base` | | the policy under test (e.g. `ChatPolicy(client)`) |
    | `light` | `None` | client for the decisions; an LLMConfig or mapping; `None` = the embedded model |
    | `summary` | `None` | client for the summaries; `None` = the light one |
    | `embedder` | `None` | object with `encode(texts)`, or a name for `make_embedder`; `None` = MiniLM (shipped) |
    | `theta` | `0.6` | similarity a retrieved node must exceed before the branch decision is asked |
    | `top_k` | `1` | nodes retrieved per turn for the branch decision (the paper: 3) |
    | `topic_decision` | `"summaries"` | one call over the topics' summaries; `"paths"`: the paper's yes/no per path |
    | `topic_summary` | `"running"` | updated with each node summary, or `"from_nodes"`: built from the node summaries |
    | `tree` | `True` | `False`: the paper's ablation without the tree (retrieval over a linear sequence) |
    | `retrieval` | `True` | `False`: the paper's ablation without the retriever (here the thread always continues) |
    | `linear_k` | `None` | turns retrieved when `tree=False`; `None` = 3 up to turn 15, 5 after (the paper's) |
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
        summary: Any = None,
        embedder: Embedder | str | None = None,
        theta: float = THETA,
        top_k: int = 1,
        topic_decision: str = "summaries",
        topic_summary: str = "running",
        tree: bool = True,
        retrieval: bool = True,
        linear_k: int | None = None,
        embed_chars: int = 1000,
        summary_chars: int = 1500,
    ):
        if embedder is None:
            embedder = MiniLMEmbedder()
        elif isinstance(embedder, str):
            embedder = make_embedder(embedder)
        elif not callable(getattr(embedder, "encode", None)):
            raise ConfigError(f"embedder must have encode(texts), or be 'minilm' / 'hashing'; got {embedder!r:.200}")
        light = resolve_client(light, LIGHT, name="light")
        summary = resolve_client(summary, LIGHT, name="summary") if summary is not None else None
        super().__init__(base, light, embedder=embedder, summary=summary)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not -1 <= theta <= 1:
            raise ConfigError(f"theta is a cosine similarity threshold in [-1, 1]; got {theta!r}")
        self.theta = float(theta)
        self.top_k = check_int("top_k", top_k, 1)
        self.topic_decision = check_choice("topic_decision", topic_decision, TOPIC_MODES)
        self.topic_summary = check_choice("topic_summary", topic_summary, TOPIC_SUMMARY_MODES)
        for name, value in (("tree", tree), ("retrieval", retrieval)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} is true or false; got {value!r}")
        self.tree, self.retrieval = tree, retrieval
        self.linear_k = None if linear_k is None else check_int("linear_k", linear_k, 1)
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

    @property
    def embedder_name(self) -> str:
        """The embedder's model name (its class name when it has none)."""
        return str(getattr(self.embedder, "name", None) or type(self.embedder).__name__)

    def describe(self) -> dict[str, Any]:
        """The wrapper's settings, for logs (the paper's options only when one differs from ifgym's defaults)."""
        out: dict[str, Any] = {
            "policy": "context_agent",
            "theta": self.theta,
            "embedder": type(self.embedder).__name__,
            "embed_chars": self.embed_chars,
            "summary_chars": self.summary_chars,
        }
        options = self._options()
        if options != {k: v for k, v in DEFAULT_OPTIONS.items() if k in options}:
            out.update(options, embedder_model=self.embedder_name)
        return out

    def _options(self) -> dict[str, Any]:
        return {
            "topic_decision": self.topic_decision,
            "topic_summary": self.topic_summary,
            "top_k": self.top_k,
            "tree": self.tree,
            "retrieval": self.retrieval,
            "linear_k": self.linear_k,
        }

    def protocol(self) -> dict[str, Any]:
        """The settings, and `deviations`: each way this wrapper differs from the Context-Agent paper's."""
        out: dict[str, Any] = {
            "name": "Context-Agent",
            "paper": "Context-Agent",
            "env": {},
            "embedder": self.embedder_name,
            "theta": self.theta,
            **self._options(),
        }
        deviations = ["prompts in ifgym's own words, not the paper's"]
        if not self.tree:
            k = f"k={self.linear_k}" if self.linear_k else "k=3 up to turn 15, 5 after (by the turns so far)"
            deviations.append(
                f"ablation without the tree (the paper's Table 4): the most similar earlier turns in full ({k}); "
                "no topic decision, no summaries, no θ"
            )
        else:
            if not self.retrieval:
                deviations.append(
                    "ablation without the retriever (the paper's Table 4): nothing retrieved and the thread always "
                    "continues (ifgym's choice); the paper's ablation keeps a heuristic branch decision"
                )
            else:
                deviations.append(
                    "the branch filter treats a retrieved node that is the active turn's parent like the latest turn "
                    "(no branch decision), as the paper's released code does; the paper's IsAncestor counts the parent "
                    "as an earlier point of the thread"
                )
            if self.topic_decision != "paths":
                deviations.append(
                    "topic decision in one call over the topics' summaries (topic_decision=summaries), not the "
                    "paper's yes/no question per leaf path and per other tree"
                )
            if self.topic_summary != "from_nodes":
                deviations.append(
                    "topic summaries updated with each exchange (topic_summary=running), not the node summaries listed"
                )
            if self.retrieval and self.top_k != PAPER_SETTINGS["top_k"]:
                deviations.append(f"top_k={self.top_k} retrieved nodes, not the paper's {PAPER_SETTINGS['top_k']}")
            if self.retrieval and self.theta != THETA:
                deviations.append(f"theta={self.theta}, not the paper's {THETA}")
        if self.tree:
            decide, summarize = (str(getattr(c, "model", None) or type(c).__name__) for c in (self.light, self.summary))
            deviations.append(
                f"decision model {decide}, summary model {summarize}; the paper's code decides with gemma3 12B and "
                "summarizes with gemma3 4B"
            )
        if (self.retrieval or not self.tree) and not is_paper_embedder(self.embedder):
            deviations.append(
                f"embedder {self.embedder_name}, not the paper's {PAPER_EMBEDDER}; θ={THETA} was calibrated for "
                "the paper's"
            )
        out["deviations"] = deviations
        return out

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
        if not self.tree:
            return (yield from self._linear_turn(system, t, current, log))

        if f.active_topic is None:
            log["topic"] = "create"
        elif self.topic_decision == "paths":
            log["topic"] = yield from self._topic_by_paths(current, log)
        else:
            log["topic"] = yield from self._topic_decision(current)
        if log["topic"] == "create":
            node = self._add_node(t, current, None, None)
        else:
            parent, branch = yield from self._fork(f.node(f.tree(f.active_topic).active), current, log)
            node = self._add_node(t, current, parent, branch)

        reply = yield BaseCall(self.context(system, node, current))
        node.reply = reply
        yield from self._summarize(node)
        if self.retrieval:
            node.embedding = (yield EmbedCall([self._content(node)]))[0]
        return reply

    def _linear_turn(self, system: list[Message], t: int, current: str, log: dict[str, Any]) -> Turn:
        """Without the tree: the k earlier turns most similar to the message, in full and in dialogue order."""
        f = self.forest
        k = self.linear_k or linear_k(t)
        earlier = [n for n in f.nodes if n.embedding is not None]
        retrieved: list[tuple[float, Node]] = []
        if earlier:
            query = (yield EmbedCall([current]))[0]
            ranked = sorted(((float(np.dot(query, n.embedding)), n) for n in earlier), key=lambda x: (-x[0], -x[1].id))
            retrieved = ranked[:k]
        log["retrieved"] = [{"node": n.id, "similarity": round(sim, 4)} for sim, n in retrieved]
        last = f.nodes[-1] if f.nodes else None
        node = self._add_node(t, current, last.id if last else None, last.branch if last else None)
        head = self.standing_instructions(system)
        out: list[Message] = [{"role": "system", "content": "\n\n".join(head)}] if head else []
        for n in sorted((n for _, n in retrieved), key=lambda n: n.id):
            out += [{"role": "user", "content": n.user}, {"role": "assistant", "content": n.reply}]
        out.append({"role": "user", "content": current})
        reply = yield BaseCall(out)
        node.reply = reply
        node.summary = _words(current, SUMMARY_WORDS)
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
            if self.retrieval or not self.tree:
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

    def leaves(self, tree: TopicTree) -> list[int]:
        """The ends of the tree's paths (nodes without children), in order of creation."""
        parents = {self.forest.node(n).parent for n in tree.nodes}
        return [n for n in tree.nodes if n not in parents]

    def _topic_by_paths(self, message: str, log: dict[str, Any]) -> Turn:
        """The paper's topic decision: each leaf path of the current tree, then of the others (first yes wins)."""
        f = self.forest
        current = f.tree(f.active_topic)
        asked: list[str] = []
        log["asked"] = asked
        for tree in [current, *(t for t in f.trees if t.id != current.id)]:
            for leaf in self.leaves(tree):
                asked.append(f"topic {tree.id} to turn {f.node(leaf).turn}")
                thread = [f"- turn {f.node(n).turn}: {f.node(n).summary}" for n in f.path(leaf)]
                if (yield from self._same_thread(["Thread (its turns, latest last):", *thread], message)):
                    if tree.id == current.id:
                        return "continue"
                    f.active_topic = tree.id
                    return "switch"
        return "create"

    def _same_thread(self, lines: list[str], message: str) -> Turn:
        prompt = "\n".join([*lines, f"New message:\n{message}"])
        out = yield LightCall([{"role": "system", "content": PATH_SYSTEM}, {"role": "user", "content": prompt}])
        data = json_object(out.text)
        answer = data.get("answer") if data is not None else out.text
        answer = answer.strip().strip(".!\"'").lower() if isinstance(answer, str) else None
        if answer not in ("yes", "no"):
            self.stats["topic_defaults"] += 1
            return False
        return answer == "yes"

    def _fork(self, active: Node, message: str, log: dict[str, Any]) -> Turn:
        """Where the new node goes in the active tree: (parent id, branch id); `active` is the thread's end."""
        f = self.forest
        tree = f.tree(f.active_topic)
        if not self.retrieval:
            log["filter"] = "retrieval off"
            log["branch"] = "continue"
            return active.id, active.branch
        query = (yield EmbedCall([message]))[0]
        embedded = [f.node(n) for n in tree.nodes if f.node(n).embedding is not None]
        # most similar first; ties go to the later node: the more recent mention
        ranked = sorted(((float(np.dot(query, n.embedding)), n) for n in embedded), key=lambda x: (-x[0], -x[1].id))
        ranked = ranked[: self.top_k]
        if self.top_k > 1:
            log["retrieved"] = [{"node": n.id, "similarity": round(sim, 4)} for sim, n in ranked]
        best_sim, best = ranked[0] if ranked else (None, None)
        log["fork"] = best.id if best is not None else None
        log["similarity"] = round(best_sim, 4) if best is not None else None
        parent = f.node(active.parent) if active.parent is not None else None
        if best is None:
            log["filter"] = "no candidate"
        elif best_sim <= self.theta:
            log["filter"] = "below theta"
        elif best.id == active.id or (parent is not None and best.id == parent.id and parent.branch == active.branch):
            log["filter"] = "latest turn"
        elif best.id in f.path(active.id):
            log["filter"] = "earlier point of this thread"
        else:
            log["filter"] = "other branch"
        if log["filter"] not in ("earlier point of this thread", "other branch"):
            log["branch"] = "continue"
            return active.id, active.branch
        self.stats["branch_calls"] += 1
        lines = ["Current thread (latest last):"]
        lines += [f"- turn {f.node(n).turn}: {f.node(n).summary}" for n in f.path(active.id)]
        lines.append("Earlier points (most similar first):" if len(ranked) > 1 else "Earlier point:")
        for sim, node in ranked:
            lines.append(f"- turn {node.turn} on branch {node.branch} (similarity {sim:.2f}): {node.summary}")
            lines.append(f"  what the user said there: {clip(node.user, 600)}")
        lines.append(f"New message:\n{message}")
        out = yield LightCall(
            [{"role": "system", "content": BRANCH_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]
        )
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
        if decision == "switch":  # back to an earlier point of this very branch: grow a branch from it
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
        exchange = f"User: {clip(node.user, self.summary_chars)}\nAssistant: {clip(node.reply, self.summary_chars)}"
        if self.topic_summary == "from_nodes":
            messages = [{"role": "system", "content": NODE_SUMMARY_SYSTEM}, {"role": "user", "content": exchange}]
        else:
            prompt = f"Topic summary so far: {tree.summary or '(new topic)'}\n{exchange}"
            messages = [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": prompt}]
        out = yield LightCall(messages, summary=True)
        data = json_object(out.text)
        summary = data.get("summary") if data is not None else None
        topic_summary = data.get("topic_summary") if data is not None else None
        if not isinstance(summary, str) or not summary.strip():
            self.stats["summary_defaults"] += 1
            summary = _words(node.user, SUMMARY_WORDS)
        node.summary = " ".join(summary.split())
        if self.topic_summary == "from_nodes":
            return
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
        if others and self.topic_summary == "from_nodes":  # each topic as its node summaries, listed once each
            memory.append("Other topics of this conversation:")
            for t in others:
                summaries = dict.fromkeys(f.node(n).summary for n in t.nodes if f.node(n).summary)
                memory.append(f"Topic {t.id}:")
                memory.extend(f"- {s}" for s in summaries)
        elif others:
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
