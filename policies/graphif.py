"""GraphIF: model how each request depends on earlier turns as a relation graph, and rewrite the reply to fit it.

Per user turn:

1. **Extraction** (light model). The relations between the request and earlier turns: a
   *global constraint* (a rule for the rest of the conversation, set, changed or dropped now), a
   *context-anchored* link (the request relies on earlier content), *modify* (an earlier answer is
   to be changed), *summary* (earlier turns are to be summarized), a *new topic* (or a return to
   an earlier one), each located at the earlier turn(s) it links to. Three ways to extract:

   - `"fast"` (default): one structured call returns the intention and every relation with its
     turns: identification and location together (the paper's *w/o agent* ablation);
   - `"loop"`: the paper's agent loop: an intention call, then one call to identify the next
     relation (or *done*) given the notebook of what is already extracted, and one call to locate
     each identified relation: two light calls plus two per relation found;
   - `"single"`: the paper's single-shot ablation: one call that lists relations without the
     definitions, the intention or the step-by-step guidance.

2. **State.** A notebook of what was extracted per turn; the global constraints in force, each
   with an id the light model is shown; a topic pointer (a new topic, or back to an earlier one);
   the relation graph (nodes = turns, labelled directed edges from a turn to the earlier turns it
   depends on), kept in `policy.graph` for inspection after an episode.

   Conflicts are explicit: a rule relation may name the rule in force it updates, contradicts or
   drops (`"replaces": <rule id>`), and that rule is retired (the latest wins). Only when it names
   none (or an id not in force) does an "update" or "remove" fall back to the rules with exactly
   the same aspect (a "remove" also to the rules set at the turns it gives); an "add" that names no
   rule retires nothing, so two rules about one aspect ("use bullets", "bold the key terms") both
   stand. The same rule said again changes nothing.

   What the light model is shown: the topics (labels and turns), the rules in force with their
   ids, and the earlier turns of the current topic plus the turns that set the rules. The loop
   moves the pointer as soon as it finds a new topic or a return, so its later calls are shown the
   returned-to topic's turns. A one-call extraction (fast, single) cannot move the pointer between
   calls, so it is also shown the other topics' turns (in a section of their own): on a return turn
   it sees the material the loop sees after its move.

3. **Answer.** The base policy answers the full transcript (the initial reply). When something
   binds the turn (a global constraint in force, or a link to earlier content: context-anchored,
   modify, summary, a return to a topic), the *graph prompt* (per relation: its definition, how it
   binds this answer, the linked turns' content) and the initial reply go back to the base policy,
   which returns the rewrite as JSON `{"reply": ...}`. Retiring or dropping a rule binds nothing by
   itself. The rewrite call carries the standing instructions (the env's system message, or else
   the base policy's own system prompt); its prompt tokens are counted as rewrite tokens, not as
   context tokens (ACT: see `ifgym.policies.wrapper`).

4. **Summary** (`summary=True`, the released code's per-turn call). After the reply, the light model
   writes a one- or two-sentence summary of the exchange (the request and the final reply), kept on
   the turn's node; the light model's later views show it beside the user's words in place of the
   clipped answer.

The paper's Table 3 ablations are switches: `extraction="fast"` is *w/o agent* (one extraction
call instead of the loop) and `graph_prompt=False` is *w/o graph prompt* (relations still
extracted and the reply still rewritten, but the rewrite is shown "only relevant dialogue content
without semantic relation explanations": the linked turns' content, no relation titles,
definitions, bindings, rule texts or intention). `explain_relations=False` (definitions dropped, linked content kept)
and `extraction="single"` are ifgym's own ablations. `protocol()` names the variant ("GraphIF",
"GraphIF w/o agent (fast)", "GraphIF w/o graph prompt") and lists every way the run differs from
the paper's setup, for the results table.

Documented defaults for malformed light-model output: an extraction answer without a JSON object
holding a `"relations"` list yields no relations (the turn continues the current topic; rules in
force still bind; counted in `stats["extraction_failures"]`); a relation with an unknown type or
no valid turn is dropped (`stats["dropped_relations"]`); in the loop, an unreadable identification
ends the loop, and so does a location that adds nothing new (a type may come again with other turns
or another rule, as in the released code) or a type located in vain twice; a `"replaces"` id that
names no rule in force is ignored (the aspect fallback applies; `stats["unknown_rule_ids"]`). A
rewrite without a usable `"reply"` string falls back to the initial reply
(`stats["rewrite_fallbacks"]`); so does a final-response rewrite
(`rewrite_format="final_response"`) without its "Final response:" section. A summary answer
without a usable `"summary"` string leaves the node without one (`stats["summary_failures"]`).

Cost per turn: `"fast"` makes 1 light call, 1 base call, and 1 more base call only when something
binds (at most 3); `"loop"` makes 2 + 2 per relation light calls plus 2 base calls (rewrite
`"always"`, as in the paper); `summary=True` adds 1 light call (the paper's preset: 5 calls on a
turn with no relation, 7 with one, 9 with two).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ifgym.errors import ConfigError, DataFormatError
from ifgym.llm import Message, resolve_client
from ifgym.model_answers import item_number, json_object
from ifgym.policies.base import Policy
from ifgym.policies.wrapper import (
    LIGHT,
    BaseCall,
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
    "DEFINITIONS",
    "EDGE_KINDS",
    "EXTRACTIONS",
    "PAPER_SAMPLING",
    "REWRITES",
    "REWRITE_FORMATS",
    "Edge",
    "GlobalRule",
    "GraphIF",
    "Relation",
    "RelationGraph",
    "TopicInfo",
    "TurnNode",
]

# The kinds of GraphIF's edges (a turn's relation to earlier ones); not StructFlow's relations (ifgym.core.structflow).
EDGE_KINDS = ("global_constraint", "context_anchored", "modify", "summary", "new_topic")
EXTRACTIONS = ("fast", "loop", "single")
LINKED_KINDS = ("context_anchored", "modify", "summary")  # relations located at earlier turns whose content binds
REWRITES = ("when_bound", "always", "never")
REWRITE_FORMATS = ("json", "final_response")
FINAL_RESPONSE = "Final response:"
# GraphIF's own sampling settings (its released code's, for every call), compared in `GraphIF.protocol()`;
# top_k and repetition_penalty are extra request fields (vLLM's names).
PAPER_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "max_tokens": 2048}
# How the agent loop (extraction="loop") works apart from GraphIF's released code, whatever the settings.
LOOP_DIFFERENCES = (
    "intention: the call sees the light model's view (topics, rules in force, earlier turns); the released code's "
    "sees the request alone",
    "identification: at most max_steps calls a turn; the released code sets no cap (both stop at done, or at a "
    "location that adds nothing new)",
    "global constraint: a location call states the rule (its words, aspect, the rule it replaces) and a replaced "
    "rule is retired; the released code makes no call (the whole request is the rule) and keeps every rule, its "
    "rewrite prompt saying the later of two conflicting rules wins",
    "new topic: one location call (a new topic, or a turn of the earlier one) and the loop goes on; the released "
    "code confirms it with a second call, asks which earlier topic in a third when there are any, and ends the loop",
)
PROMPTS = "prompts in ifgym's own words, not the released code's"
REWRITE_DIFFERENCE = (
    "rewrite prompt: per relation its definition, how it binds the answer and the linked turns, with the env's "
    "standing instructions; the released code's gives the linked turns and the requests that set global "
    "constraints, and asks for English only"
)
NO_SYSTEM_PROMPT = (
    "the answering call has no system prompt unless the env sets one; the released code's has a generic "
    "helpful-assistant one (policy.system_prompt=...)"
)
SUMMARY_DIFFERENCE = (
    "summaries: the light model's views show each earlier turn's summary in place of its answer; the released code "
    "shows the current topic's turns in full and the summaries only in the notebook, for the turns already linked"
)
RULE_ACTIONS = ("add", "update", "remove")
DONE = "done"

DEFINITIONS = {
    "global_constraint": (
        "a rule the user sets for the rest of the conversation (language, length, format, tone, a word to "
        "use or avoid, ...); it holds for every later answer until the user changes or drops it"
    ),
    "context_anchored": (
        "the request relies on content of an earlier turn (something named, listed or decided there), and "
        "the answer must stay consistent with that content"
    ),
    "modify": (
        "the request asks to change an earlier answer (shorten, extend, reformat, correct, restyle it); that "
        "answer is the material to change"
    ),
    "summary": "the request asks to summarize, combine or recap what several earlier turns said",
    "new_topic": "the request starts a new subject, or goes back to a subject that was left earlier",
}
# How each relation binds the current answer, when the light model gave no words of its own.
BINDINGS = {
    "global_constraint": "the answer must follow this rule",
    "context_anchored": "the answer must build on the linked content and agree with it",
    "modify": "the answer is the linked answer changed as asked; keep what the user did not ask to change",
    "summary": "the answer must summarize the linked turns faithfully: leave out nothing important, add nothing",
    "new_topic": "the answer continues the earlier topic and must agree with what was said there",
}
TITLES = {
    "global_constraint": "Global constraint",
    "context_anchored": "Context-anchored",
    "modify": "Modify",
    "summary": "Summary",
    "new_topic": "Back to an earlier topic",
}
# Relations applied first: the topic pointer moves before rules and links are read.
_ORDER = {kind: i for i, kind in enumerate(("new_topic", "global_constraint", "context_anchored", "modify", "summary"))}


# ---------------------------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Relation:
    """One relation of the current request, as extracted (turn numbers are 1-based)."""

    kind: str
    turns: tuple[int, ...] = ()
    binds: str = ""  # what the relation requires of this answer, in the light model's words
    rule: str = ""  # global_constraint: the rule
    aspect: str = ""  # global_constraint: what the rule is about (the fallback when no rule id is named)
    action: str = "add"  # global_constraint: add | update | remove
    label: str = ""  # new_topic: a short label for a new topic
    replaces: int | None = None  # global_constraint: id of the rule in force it updates, contradicts or drops

    def note(self) -> str:
        """One notebook line."""
        if self.kind == "global_constraint":
            named = f" (replaces rule {self.replaces})" if self.replaces is not None else ""
            return f"global_constraint: {self.action} rule [{self.aspect}] {self.rule}".rstrip() + named
        if self.kind == "new_topic":
            where = f"back to turn {self.turns[0]}" if self.turns else f"new topic {self.label!r}"
            return f"new_topic: {where}"
        turns = ", ".join(map(str, self.turns))
        return f"{self.kind}: turns {turns}" + (f" ({self.binds})" if self.binds else "")

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {
            "kind": self.kind,
            "turns": list(self.turns),
            "binds": self.binds,
            "rule": self.rule,
            "aspect": self.aspect,
            "action": self.action,
            "label": self.label,
            "replaces": self.replaces,
        }


@dataclass(frozen=True)
class Edge:
    """A labelled directed edge: turn `source` depends on the earlier turn `target` through `relation`."""

    source: int
    target: int
    relation: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {"source": self.source, "target": self.target, "relation": self.relation, "note": self.note}


@dataclass(frozen=True)
class GlobalRule:
    """A global constraint: its id (1, 2, ... per episode), its words, what it is about, the turn that set it."""

    text: str
    aspect: str
    turn: int
    id: int = 0

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {"id": self.id, "text": self.text, "aspect": self.aspect, "turn": self.turn}


@dataclass
class TopicInfo:
    """A topic of the dialogue and the turns spent on it."""

    id: int
    label: str
    turns: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {"id": self.id, "label": self.label, "turns": list(self.turns)}


@dataclass
class TurnNode:
    """A node of the graph: one user turn, its topic, intention, relations found and final reply."""

    turn: int
    topic: int
    user: str
    reply: str = ""
    intention: str = ""
    relations: list[Relation] = field(default_factory=list)
    rewritten: bool = False
    summary: str = ""  # the light model's summary of the exchange (summary=True)

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {
            "turn": self.turn,
            "topic": self.topic,
            "user": self.user,
            "reply": self.reply,
            "intention": self.intention,
            "relations": [r.to_json() for r in self.relations],
            "rewritten": self.rewritten,
            "summary": self.summary,
        }


@dataclass
class RelationGraph:
    """The dialogue as GraphIF sees it: turn nodes, labelled edges, topics, rules in force, the pointer."""

    nodes: list[TurnNode] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    topics: list[TopicInfo] = field(default_factory=list)
    rules: list[GlobalRule] = field(default_factory=list)  # in force now
    retired: list[tuple[GlobalRule, int, str]] = field(default_factory=list)  # (rule, at turn, "replaced"/"dropped")
    pointer: int | None = None  # id of the current topic
    notebook: dict[int, list[str]] = field(default_factory=dict)  # turn -> what was extracted

    def edges_from(self, turn: int) -> list[Edge]:
        """The edges leaving `turn` (what it depends on)."""
        return [e for e in self.edges if e.source == turn]

    def topic_of(self, turn: int) -> int:
        """The topic id of a turn."""
        return self.nodes[turn - 1].topic

    def to_json(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict."""
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "edges": [e.to_json() for e in self.edges],
            "topics": [t.to_json() for t in self.topics],
            "rules": [r.to_json() for r in self.rules],
            "retired": [{"rule": r.to_json(), "turn": turn, "why": why} for r, turn, why in self.retired],
            "pointer": self.pointer,
            "notebook": {str(k): list(v) for k, v in self.notebook.items()},
        }

    def to_dot(self) -> str:
        """Graphviz source: one node per turn (grouped by topic), one labelled arrow per edge."""
        lines = ["digraph dialogue {", "  rankdir=LR;"]
        for topic in self.topics:
            lines.append(f'  subgraph cluster_{topic.id} {{ label="{_dot(topic.label)}";')
            for turn in topic.turns:
                lines.append(f'    t{turn} [label="turn {turn}\\n{_dot(clip(self.nodes[turn - 1].user, 40))}"];')
            lines.append("  }")
        for e in self.edges:
            lines.append(f'  t{e.source} -> t{e.target} [label="{e.relation}"];')
        lines.append("}")
        return "\n".join(lines)


def _dot(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


# ---------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------


def _definitions() -> str:
    return "\n".join(f"- {kind}: {DEFINITIONS[kind]}." for kind in EDGE_KINDS)


FAST_SYSTEM = """You map how the user's latest request in a conversation depends on earlier turns.
Answer each question in order; every "yes" is one relation, located at the earlier turn numbers it links to.
1. global_constraint: does the latest request set, change or drop a rule meant for later answers too \
("from now on", "for the rest of our chat", "always", "stop doing")? Give the rule in a few words, what it is \
about ("aspect": language, length, format, tone, keyword, ...) and "action": "add" (a new rule), "update" (it \
changes a rule in force) or "remove" (it drops one). When it changes, contradicts or drops a rule in force, \
give that rule's number in "replaces" (null otherwise: a rule that can hold together with the others). Rules \
already in force stay in force: report one only when this request changes or drops it.
2. context_anchored: does it rely on something said in an earlier turn ("those", "it", "the plan above")? \
Give those turns and what the answer must keep consistent.
3. modify: does it ask to change an earlier answer (shorter, longer, another format, corrected)? Give that turn.
4. summary: does it ask to summarize or recap earlier turns? Give every turn to cover.
5. new_topic: does it start a new subject ("return_to": null, a short "label"), or go back to a subject left \
earlier ("return_to": a turn of that topic)?
Use only turn numbers shown below.

Answer with JSON only, with one object in "relations" per "yes" (leave out the types answered "no"):
{"intention": "<what the user wants now, one sentence>",
 "relations": [
  {"type": "global_constraint", "rule": "<the rule>", "aspect": "<aspect>", "action": "<add|update|remove>", \
"replaces": <number of the rule in force it changes or drops, or null>},
  {"type": "<context_anchored|modify|summary>", "turns": [<earlier turns>], "binds": "<what the answer must do>"},
  {"type": "new_topic", "return_to": <a turn number or null>, "label": "<short topic name>"}]}"""

SINGLE_SYSTEM = """List the relations between the user's latest request and earlier turns of the conversation.
Types: global_constraint, context_anchored, modify, summary, new_topic.
Answer with JSON only: {"relations": [{"type": "<type>", "turns": [<turn numbers>], "rule": "<for \
global_constraint>", "aspect": "<for global_constraint>", "action": "add|update|remove", "replaces": <for \
global_constraint: the number of a rule in force it changes or drops, or null>, "return_to": <for new_topic: a \
turn or null>, "label": "<for new_topic>"}]}"""

INTENTION_SYSTEM = """Read the conversation and say in one sentence what the user wants in the latest request.
Answer with JSON only: {"intention": "<one sentence>"}"""

IDENTIFY_SYSTEM = f"""You extract, one at a time, the relations between the user's latest request and earlier \
turns of a conversation. The notebook lists what was already extracted for this request.
Pick the most important relation that applies and is not in the notebook yet, or "done" when none is left.

Relation types:
{_definitions()}
- done: nothing more to extract.

Answer with JSON only: {{"action": "<relation type or done>"}}"""

LOCATE_SCHEMAS = {
    "global_constraint": (
        '{"rule": "<the rule in a few words>", "aspect": "<what it is about: language, length, format, ...>", '
        '"action": "add|update|remove", '
        '"replaces": <the number of the rule in force it changes, contradicts or drops, or null>}'
    ),
    "context_anchored": '{"turns": [<earlier turn numbers>], "binds": "<what this means for the answer>"}',
    "modify": '{"turns": [<the turn whose answer is to change>], "binds": "<what to change>"}',
    "summary": '{"turns": [<every turn to summarize>], "binds": "<what the summary must cover>"}',
    "new_topic": '{"return_to": <a turn of the earlier topic, or null for a new subject>, "label": "<short topic>"}',
}


def locate_system(kind: str) -> str:
    """The system prompt of the loop's location call for one relation type."""
    return (
        f"The user's latest request has this relation to earlier turns of the conversation.\n"
        f"{kind}: {DEFINITIONS[kind]}.\n"
        f"Locate it: which earlier turns are involved, and how it binds the answer. Use only turn numbers shown.\n"
        f"Answer with JSON only: {LOCATE_SCHEMAS[kind]}"
    )


# What the rewrite is given besides the request: the graph prompt, or (w/o graph prompt) the linked turns alone
_GRAPH = "the relation graph, which says how earlier turns of the conversation bind this answer"
_CONTENT_ONLY = "the earlier turns of the conversation shown with it"

REWRITE_SYSTEM = f"""You revise a draft answer so that it meets the user's request and every requirement in \
{_GRAPH}. Keep what the draft already does right; change only what a requirement needs.
Answer with JSON only: {{"reply": "<the complete revised answer>"}}"""

# The paper's rewrite: a check of the draft against each requirement, then the answer in its own section.
FINAL_RESPONSE_SYSTEM = f"""You revise a draft answer so that it meets the user's request and every requirement \
in {_GRAPH}. First check the draft against each requirement in a few lines; keep what it already does \
right and change only what a requirement needs. Then write the line "{FINAL_RESPONSE}" and, after it, the \
complete revised answer exactly as the user should see it, with nothing after it."""

SUMMARY_SYSTEM = """Write a one- or two-sentence summary of one turn of a conversation (the user's request and \
the assistant's answer): what was asked, what was answered, and any rule the user set for later answers.
Answer with JSON only: {"summary": "<one or two sentences>"}"""


# ---------------------------------------------------------------------------------------------
# Reading the light model's answers
# ---------------------------------------------------------------------------------------------


def _turn_numbers(value: Any, limit: int) -> tuple[int, ...] | None:
    """Turn numbers in 1..limit from a list (or a single value); None when any entry is unreadable."""
    items = value if isinstance(value, list) else [] if value is None else [value]
    out: set[int] = set()
    for item in items:
        number = item_number(item, r"(?:turn\s*)?#?")
        if number is None:
            return None
        if not 1 <= number <= limit:
            return None  # a turn that does not exist (or the current one): the location is wrong
        out.add(number)
    return tuple(sorted(out))


def _same_rule(rule: GlobalRule, rel: Relation) -> bool:
    """Tell whether `rel` restates `rule` (same aspect, same words up to case and punctuation)."""
    words = lambda text: re.findall(r"\w+", text.lower())  # noqa: E731
    return rule.aspect == rel.aspect and words(rule.text) == words(rel.rule)


def _text(value: Any) -> str:
    """A string value with its whitespace tidied; "" for a non-string or an unfilled "<placeholder>"."""
    if not isinstance(value, str) or re.fullmatch(r"\s*<[^<>]*>\s*", value):
        return ""
    return " ".join(value.split())


def _rule_id(value: Any) -> int | None:
    """A rule number from 3, 3.0, "3", "rule 3", "R3" or "#3"; None for anything else (null included)."""
    return item_number(value, r"(?:rule\s*)?[#r]?")


def _kind(value: Any) -> str:
    return re.sub(r"[\s-]+", "_", value.strip().lower()) if isinstance(value, str) else ""


def read_relation(data: Mapping[str, Any], kind: str, turn: int) -> Relation | None:
    """A Relation of type `kind` from one JSON object of the light model, or None when it is not usable.

    `turn` is the current turn (1-based): located turns must be earlier ones.
    """
    if kind not in EDGE_KINDS:
        return None
    earlier = turn - 1
    if kind == "new_topic":
        back = data.get("return_to")
        turns = _turn_numbers(back, earlier) if back is not None else ()
        if turns is None or len(turns) > 1:
            return None
        return Relation(kind, turns, label=_text(data.get("label")))
    if kind == "global_constraint":
        action = _kind(data.get("action")) or "add"
        action = action if action in RULE_ACTIONS else "add"
        rule, aspect = _text(data.get("rule")), _text(data.get("aspect")).lower()
        turns = _turn_numbers(data.get("turns"), earlier) or ()
        if action != "remove" and not rule:
            return None
        replaces = _rule_id(data.get("replaces"))
        if action == "remove" and not (aspect or rule or turns or replaces is not None):
            return None
        return Relation(kind, turns, _text(data.get("binds")), rule, aspect or rule.lower(), action, replaces=replaces)
    turns = _turn_numbers(data.get("turns"), earlier)
    if not turns:
        return None
    return Relation(kind, turns, _text(data.get("binds")))


def read_relations(data: Mapping[str, Any] | None, turn: int) -> tuple[list[Relation], int]:
    """(usable relations, how many were dropped) from a fast/single extraction answer."""
    if data is None:
        return [], 0
    items = data.get("relations")
    if not isinstance(items, list):
        return [], 0
    found: list[Relation] = []
    dropped = 0
    for item in items:
        rel = read_relation(item, _kind(item.get("type")), turn) if isinstance(item, Mapping) else None
        if rel is None:
            dropped += 1
        elif rel not in found:
            found.append(rel)
    return found, dropped


def final_response(text: str) -> str | None:
    """The answer after the last "Final response:" line of a final-response rewrite; None without one.

    The released code's heading ("## FINAL-RESPONSE") is read too.
    """
    found = list(
        re.finditer(r"^[#*\s]*final[ _-]response\s*[:：]?[*\s]*:?[*]*[ \t]*", text, re.IGNORECASE | re.MULTILINE)
    )
    if not found:
        return None
    reply = text[found[-1].end() :].strip()
    return reply or None


# ---------------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------------


class GraphIF(WrapperPolicy):
    """Wrap a chat policy with GraphIF: relation extraction (light model), a graph prompt, a rewrite.

    | argument | default | meaning |
    |---|---|---|
    | `base` | | the policy under test (e.g. `ChatPolicy(client)`) |
    | `light` | `None` | client for extraction calls; an LLMConfig or mapping; `None` = the embedded model |
    | `extraction` | `"fast"` | `"fast"` (one structured call), `"loop"` (the paper's loop), `"single"` (ablation) |
    | `explain_relations` | `True` | `False` = ablation: no relation definitions (the rest stays) |
    | `graph_prompt` | `True` | `False` = the paper's w/o-graph-prompt ablation: linked turns only, no explanations |
    | `summary` | `False` | `True` = a light call per turn summarizing the exchange (the released code's) |
    | `rewrite` | `None` | `"when_bound"`, `"always"`, `"never"`; `None`: `"always"` for the loop, else `"when_bound"` |
    | `rewrite_format` | `"json"` | `"json"` (`{"reply": ...}`) or `"final_response"` (a check, then the answer) |
    | `max_steps` | `6` | most identification calls per turn in the loop |
    | `view_chars` | `300` | earlier answers are cut to this length in the light model's view |
    | `linked_chars` | `2000` | linked turns' content is cut to this length in the graph prompt |

    After an episode, `graph` holds the relation graph (`graph.to_json()`, `graph.to_dot()`),
    `costs` the per-turn costs and `stats` the parse counters.
    """

    def __init__(
        self,
        base: Policy,
        light: Any = None,
        *,
        extraction: str = "fast",
        explain_relations: bool = True,
        graph_prompt: bool = True,
        summary: bool = False,
        rewrite: str | None = None,
        rewrite_format: str = "json",
        max_steps: int = 6,
        view_chars: int = 300,
        linked_chars: int = 2000,
    ):
        super().__init__(base, resolve_client(light, LIGHT, name="light"))
        self.extraction = check_choice("GraphIF extraction", extraction, EXTRACTIONS)
        for name, value in (
            ("explain_relations", explain_relations),
            ("graph_prompt", graph_prompt),
            ("summary", summary),
        ):
            if not isinstance(value, bool):
                raise ConfigError(f"GraphIF {name} must be True or False; got {value!r}")
        self.explain_relations = explain_relations
        self.use_graph_prompt = graph_prompt
        self.summary = summary
        if rewrite is None:
            rewrite = "always" if extraction == "loop" else "when_bound"
        self.rewrite = check_choice("GraphIF rewrite", rewrite, REWRITES)
        self.rewrite_format = check_choice("GraphIF rewrite_format", rewrite_format, REWRITE_FORMATS)
        self.max_steps = check_int("max_steps", max_steps, 1)
        self.view_chars = check_int("view_chars", view_chars, 1)
        self.linked_chars = check_int("linked_chars", linked_chars, 1)
        self._reset_state()

    def _reset_state(self) -> None:
        self.graph = RelationGraph()
        self.stats: dict[str, int] = {
            "extraction_failures": 0,
            "dropped_relations": 0,
            "rewrites": 0,
            "rewrite_fallbacks": 0,
            "rewrites_skipped": 0,
            "unknown_rule_ids": 0,
            "summary_failures": 0,
        }

    def describe(self) -> dict[str, Any]:
        """The wrapper's settings, for logs."""
        return {
            "policy": "graphif",
            "extraction": self.extraction,
            "explain_relations": self.explain_relations,
            "graph_prompt": self.use_graph_prompt,
            "summary": self.summary,
            "rewrite": self.rewrite,
            "rewrite_format": self.rewrite_format,
            "max_steps": self.max_steps,
            "view_chars": self.view_chars,
            "linked_chars": self.linked_chars,
        }

    def variant(self) -> str:
        """The name of this setup in GraphIF's Table 3: the full method or one of its ablations."""
        if self.extraction == "fast":
            return "GraphIF w/o agent (fast)"
        if self.extraction == "single":
            return "GraphIF single call (ifgym ablation)"
        return "GraphIF" if self.use_graph_prompt else "GraphIF w/o graph prompt"

    def protocol(self) -> dict[str, Any]:
        """The variant's name and each way this setup differs from GraphIF's paper and released code, in words.

        The results table prints them: the prompts' wording, the settings that differ, what no setting
        removes (how ifgym's loop, views and rewrite prompt work apart from the released code's), then
        the answering call's system prompt, the models and the sampling.
        """
        deviations = [PROMPTS]
        if self.extraction == "fast":
            deviations.append(
                "extraction=fast: one structured extraction call, the paper's w/o-agent ablation (Table 3), not its "
                "agent loop (extraction=loop)"
            )
        elif self.extraction == "single":
            deviations.append("extraction=single: ifgym's single-call ablation, in no table of the paper")
        if not self.use_graph_prompt:
            deviations.append("graph_prompt=false: the paper's w/o-graph-prompt ablation (Table 3)")
        if not self.explain_relations:
            deviations.append("explain_relations=false: ifgym's ablation (relation definitions left out)")
        if not self.summary:
            deviations.append("summary=false: no per-turn summary call (the released code makes one)")
        if self.rewrite != "always":
            deviations.append(f"rewrite={self.rewrite}: the paper rewrites every reply")
        if self.rewrite_format != "final_response":
            deviations.append(
                "rewrite_format=json: the rewrite answers in JSON, not in the paper's final-response section"
            )
        if self.extraction == "loop":
            deviations += LOOP_DIFFERENCES
        if self.summary:
            deviations.append(SUMMARY_DIFFERENCE)
        if self.rewrite != "never":
            deviations.append(REWRITE_DIFFERENCE)
        if getattr(self.base, "system_prompt", None) is None:
            deviations.append(NO_SYSTEM_PROMPT)
        deviations += self._model_deviations()
        return {
            "name": self.variant(),
            "paper": "GraphIF",
            "deviations": deviations,
            # what GraphIF's replay of its sets sets on the env side: the model's own replies as history,
            # and the reference answer shown to the checklist judge
            "env": {"context": "own", "judge_golden": True},
        }

    def _model_deviations(self) -> list[str]:
        """The light model against the backbone, and the backbone's sampling against the paper's."""
        base = getattr(getattr(self.base, "client", None), "config", None)
        light = getattr(self.light, "config", None)
        out = []
        if base is not None and light is not None and (light.base_url, light.model) != (base.base_url, base.model):
            where = light.base_url or "embedded"
            out.append(
                f"light model {light.model} ({where}) is not the backbone {base.model}: the paper uses one model"
            )
        if base is not None:
            used = {
                "temperature": base.temperature,
                "top_p": base.top_p,
                "top_k": base.extra.get("top_k"),
                "repetition_penalty": base.extra.get("repetition_penalty"),
                "max_tokens": base.max_tokens,
            }
            differ = [k for k, v in PAPER_SAMPLING.items() if used[k] != v]
            if differ:
                said = ", ".join(f"{k}={used[k]}" for k in differ)
                paper = ", ".join(f"{k}={PAPER_SAMPLING[k]}" for k in differ)
                out.append(
                    f"sampling {said}: the released code's is {paper} (top_k and repetition_penalty as "
                    "policy.llm.extra fields, vLLM's names)"
                )
        return out

    def episode_record(self) -> dict[str, Any]:
        """Settings, per-turn costs, counters, and the relation graph (`graph.to_json()`)."""
        return {**super().episode_record(), "graph": self.graph.to_json()}

    # -- one turn -------------------------------------------------------------------------------

    def _turn(self, messages: list[Message]) -> Turn:
        system, exchanges, current = split_transcript(messages)
        t = len(exchanges) + 1
        self._catch_up(exchanges)
        node = TurnNode(turn=t, topic=0, user=current)
        new_edges: list[Edge] = []
        if self.extraction == "loop":
            yield from self._loop(node, exchanges, new_edges)
        else:
            system_prompt = FAST_SYSTEM if self.extraction == "fast" else SINGLE_SYSTEM
            view = self._view(exchanges, node, other_topics=True)  # one call: the pointer cannot move first
            out = yield LightCall([{"role": "system", "content": system_prompt}, {"role": "user", "content": view}])
            data = json_object(out.text)
            if data is None or not isinstance(data.get("relations"), list):
                self.stats["extraction_failures"] += 1
            if data is not None and self.extraction == "fast":
                node.intention = _text(data.get("intention"))
            relations, dropped = read_relations(data, t)
            self.stats["dropped_relations"] += dropped
            for rel in sorted(relations, key=lambda r: _ORDER[r.kind]):
                self._apply(rel, node, new_edges)
        self._close_node(node, new_edges)

        initial = yield BaseCall(messages)
        node.reply = yield from self._rewrite(node, exchanges, new_edges, system, initial)
        if self.summary:
            yield from self._summarize(node)
        return node.reply

    def _rewrite(
        self, node: TurnNode, exchanges: list[Exchange], new_edges: list[Edge], system: list[Message], initial: str
    ) -> Turn:
        """The final reply: the initial one, or its rewrite against the graph prompt."""
        # what binds this answer: a rule in force, or a link to earlier content (a retired rule binds nothing)
        bound = bool(self.graph.rules) or any(e.relation != "global_constraint" for e in new_edges)
        if self.rewrite == "never" or (self.rewrite == "when_bound" and not bound):
            self.stats["rewrites_skipped"] += 1
            return initial
        prompt = self.graph_prompt(node, exchanges, new_edges)
        standing = "\n\n".join(self.standing_instructions(system))
        request = (f"Standing instructions:\n{standing}\n\n" if standing else "") + f"User's request:\n{node.user}"
        final = self.rewrite_format == "final_response"
        out = yield BaseCall(
            [
                {"role": "system", "content": self.rewrite_system()},
                {"role": "user", "content": f"{request}\n\n{prompt}\n\nDraft answer:\n{initial}"},
            ],
            rewrite=True,
        )
        self.stats["rewrites"] += 1
        if final:
            reply = final_response(out)
        else:
            data = json_object(out)
            reply = data.get("reply") if data is not None else None
        if not isinstance(reply, str) or not reply.strip():
            self.stats["rewrite_fallbacks"] += 1
            return initial
        node.rewritten = True
        return reply

    def _summarize(self, node: TurnNode) -> Turn:
        """The per-turn summary call: the exchange in a sentence or two, kept on the node."""
        exchange = f"User (turn {node.turn}):\n{node.user}\n\nAssistant:\n{node.reply}"
        out = yield LightCall([{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": exchange}])
        data = json_object(out.text)
        node.summary = _text(data.get("summary")) if data is not None else ""
        if not node.summary:
            self.stats["summary_failures"] += 1
        return node.summary

    def _loop(self, node: TurnNode, exchanges: list[Exchange], new_edges: list[Edge]) -> Turn:
        """The paper's agent loop: intention, then identify one relation at a time and locate it."""
        t = node.turn
        out = yield LightCall(
            [{"role": "system", "content": INTENTION_SYSTEM}, {"role": "user", "content": self._view(exchanges, node)}]
        )
        data = json_object(out.text)
        node.intention = _text(data.get("intention")) if data is not None else ""
        unlocated: set[str] = set()
        notebook = self.graph.notebook.setdefault(t, [])
        for _ in range(self.max_steps):
            out = yield LightCall(
                [
                    {"role": "system", "content": IDENTIFY_SYSTEM},
                    {"role": "user", "content": self._view(exchanges, node, notebook=notebook)},
                ]
            )
            data = json_object(out.text)
            action = _kind(data.get("action")) if data is not None else ""
            if action not in EDGE_KINDS:
                if action != DONE:
                    self.stats["extraction_failures"] += 1
                break
            out = yield LightCall(
                [
                    {"role": "system", "content": locate_system(action)},
                    {"role": "user", "content": self._view(exchanges, node, notebook=notebook)},
                ]
            )
            data = json_object(out.text)
            rel = read_relation(data, action, t) if data is not None else None
            if rel is None:
                self.stats["dropped_relations"] += 1
                if action in unlocated:  # asked for again and still not located: nothing more to learn
                    break
                unlocated.add(action)
                notebook.append(f"{action}: could not be located")
                continue
            # a type may come again (another earlier turn it links to, another rule); as in the released
            # code, the loop ends when a location adds nothing new
            if rel.kind in LINKED_KINDS:
                linked = {e.target for e in new_edges if e.relation == rel.kind}
                rel = replace(rel, turns=tuple(k for k in rel.turns if k not in linked))
                if not rel.turns:
                    break
            elif rel in node.relations:
                break
            g = self.graph
            before = ([r.id for r in g.rules], len(g.retired), g.pointer)
            self._apply(rel, node, new_edges)  # at once: a topic move changes what the next step is shown
            if rel.kind not in LINKED_KINDS and ([r.id for r in g.rules], len(g.retired), g.pointer) == before:
                if rel.kind == "new_topic" and action not in unlocated:  # the topic it names is the current one:
                    unlocated.add(action)  # a misjudged change of topic; the released code then asks again
                    notebook.append("new_topic: the request stays on the current topic")
                    continue
                break

    # -- state updates --------------------------------------------------------------------------

    def _catch_up(self, exchanges: list[Exchange]) -> None:
        """Keep the nodes in step with the transcript (it is the truth: an env may rewrite answers)."""
        g = self.graph
        if len(exchanges) < len(g.nodes):
            raise DataFormatError(
                f"GraphIF has seen {len(g.nodes)} turns but this transcript has {len(exchanges)} earlier ones; "
                "call reset() before a new episode"
            )
        for ex in exchanges[len(g.nodes) :]:  # turns answered without this wrapper: same topic, no relations
            node = TurnNode(turn=ex.turn, topic=0, user=ex.user)
            self._close_node(node, [])
        for node, ex in zip(g.nodes, exchanges, strict=False):
            node.user, node.reply = ex.user, ex.assistant

    def _new_topic(self, label: str, first_message: str) -> int:
        g = self.graph
        topic = TopicInfo(len(g.topics) + 1, label or clip(first_message, 48))
        g.topics.append(topic)
        g.pointer = topic.id
        return topic.id

    def _apply(self, rel: Relation, node: TurnNode, new_edges: list[Edge]) -> None:
        g = self.graph
        t = node.turn
        if rel.kind == "new_topic":
            if rel.turns:
                back = rel.turns[0]
                topic = g.topic_of(back)
                if topic == g.pointer:
                    return  # "back" to the topic we are on: nothing moves
                g.pointer = topic
                label = g.topics[topic - 1].label
                new_edges.append(Edge(t, back, "new_topic", f"returns to topic {label!r}"))
            else:
                self._new_topic(rel.label, node.user)
        elif rel.kind == "global_constraint":
            self._apply_rule(rel, t, new_edges)
        else:
            new_edges.extend(Edge(t, k, rel.kind, rel.binds) for k in rel.turns)
        node.relations.append(rel)
        g.notebook.setdefault(t, [])
        if rel.note() not in g.notebook[t]:
            g.notebook[t].append(rel.note())

    def _apply_rule(self, rel: Relation, t: int, new_edges: list[Edge]) -> None:
        g = self.graph
        if rel.action != "remove" and any(_same_rule(r, rel) for r in g.rules):
            return  # a rule already in force, said again (or re-reported): nothing changes
        named = next((r for r in g.rules if r.id == rel.replaces), None) if rel.replaces is not None else None
        if rel.replaces is not None and named is None:
            self.stats["unknown_rule_ids"] += 1
        if named is not None:  # the light model said which rule this one changes, contradicts or drops
            retire = [named]
        elif rel.action in ("update", "remove"):  # it named none: the same aspect (or, to remove, the turns given)
            retire = [r for r in g.rules if r.aspect == rel.aspect or (rel.action == "remove" and r.turn in rel.turns)]
        else:  # a new rule that names none holds together with the others
            retire = []
        for old in retire:
            g.rules.remove(old)
            why = "dropped" if rel.action == "remove" else "replaced"
            g.retired.append((old, t, why))
            if old.turn != t:
                new_edges.append(Edge(t, old.turn, "global_constraint", f"{why}: {old.text}"))
        if rel.action != "remove":
            g.rules.append(GlobalRule(rel.rule, rel.aspect, t, id=1 + len(g.rules) + len(g.retired)))

    def _close_node(self, node: TurnNode, new_edges: list[Edge]) -> None:
        """Put the node on its topic, link it to the rules in force, and add it and its edges to the graph."""
        g = self.graph
        if g.pointer is None:
            label = next((r.label for r in node.relations if r.kind == "new_topic" and not r.turns), "")
            self._new_topic(label, node.user)
        node.topic = g.pointer
        g.topics[node.topic - 1].turns.append(node.turn)
        linked = {(e.target, e.relation) for e in new_edges}
        for rule in g.rules:
            if rule.turn < node.turn and (rule.turn, "global_constraint") not in linked:
                new_edges.append(Edge(node.turn, rule.turn, "global_constraint", rule.text))
                linked.add((rule.turn, "global_constraint"))
        g.nodes.append(node)
        g.edges.extend(new_edges)

    # -- prompts --------------------------------------------------------------------------------

    def _view(
        self,
        exchanges: list[Exchange],
        node: TurnNode,
        notebook: Sequence[str] | None = None,
        *,
        other_topics: bool = False,
    ) -> str:
        """What the light model is shown: topics, rules in force (with ids), the current topic's turns, the request.

        `other_topics=True` (one-call extraction) adds the other topics' turns, so a return to one
        of them can be located in the same call.
        """
        g = self.graph
        lines: list[str] = []
        if g.topics:
            lines.append("Topics so far (* = the current one):")
            for topic in g.topics:
                mark = "*" if topic.id == g.pointer else " "
                turns = ", ".join(map(str, topic.turns))
                lines.append(f"{mark} topic {topic.id} {topic.label!r}: turns {turns}")
        if g.rules:
            lines.append("Rules in force (set earlier, still binding):")
            lines.extend(f"- [rule {r.id}, turn {r.turn}, aspect {r.aspect}] {r.text}" for r in g.rules)
        shown = sorted(
            {n.turn for n in g.nodes if n.topic == g.pointer} | {r.turn for r in g.rules if r.turn < node.turn}
        )
        rest = sorted({n.turn for n in g.nodes} - set(shown)) if other_topics else []
        for heading, turns in (
            ("Earlier turns (the current topic, and where the rules were set):", shown),
            ("Turns of the other topics (the request may go back to one of them):", rest),
        ):
            if turns:
                lines.append(heading)
            for turn in turns:
                ex, summary = exchanges[turn - 1], g.nodes[turn - 1].summary
                lines.append(f"[turn {turn}] user: {clip(ex.user, 4 * self.view_chars)}")
                if summary:  # the per-turn summary call's (summary=True) stands for the answer
                    lines.append(f"[turn {turn}] summary: {clip(summary, self.view_chars)}")
                else:
                    lines.append(f"[turn {turn}] assistant: {clip(ex.assistant, self.view_chars)}")
        if not exchanges:
            lines.append("There are no earlier turns: this is the first request.")
        if notebook is not None:
            lines.append("Notebook (extracted so far for this request):")
            lines.extend(f"- {entry}" for entry in notebook or ["(nothing yet)"])
        lines.append(f"Current request (turn {node.turn}):\n{node.user}")
        return "\n".join(lines)

    def rewrite_system(self) -> str:
        """The rewrite call's system message: the graph's wording, or (w/o graph prompt) the linked turns'."""
        system = FINAL_RESPONSE_SYSTEM if self.rewrite_format == "final_response" else REWRITE_SYSTEM
        return system if self.use_graph_prompt else system.replace(_GRAPH, _CONTENT_ONLY)

    def graph_prompt(self, node: TurnNode, exchanges: list[Exchange], new_edges: Sequence[Edge]) -> str:
        """The relation graph of this turn in words: per relation its definition, what it binds, the linked content.

        Without the graph prompt (the paper's ablation: "only relevant dialogue content without
        semantic relation explanations"), the linked turns' content alone, in turn order: no
        relation titles, definitions, bindings, rule texts or intention.
        """
        g = self.graph
        if not self.use_graph_prompt:
            return self._linked_content(node, exchanges, new_edges)
        items: list[list[str]] = []
        seen: set[int] = set()

        def linked(turn: int) -> list[str]:
            if turn in seen:
                return [f"Turn {turn}: shown above."]
            seen.add(turn)
            ex = exchanges[turn - 1]
            return [
                f"Turn {turn}, user: {clip(ex.user, self.linked_chars)}",
                f"Turn {turn}, assistant: {clip(ex.assistant, self.linked_chars)}",
            ]

        def item(kind: str, title: str, binds: str, turns: Sequence[int]) -> None:
            lines = [title]
            if self.explain_relations:  # False: ifgym's ablation, the definitions alone left out
                lines.append(f"What it means: {DEFINITIONS[kind]}.")
            lines.append(f"How it binds this answer: {binds or BINDINGS[kind]}.")
            for turn in turns:
                lines.extend(linked(turn))
            items.append(lines)

        for rule in g.rules:
            where = "set in this request" if rule.turn == node.turn else f"set at turn {rule.turn}"
            binds = f"{BINDINGS['global_constraint']}: {rule.text}"
            turns = [rule.turn] if rule.turn < node.turn else []
            item("global_constraint", f"{TITLES['global_constraint']} ({where})", binds, turns)
        by_kind: dict[tuple[str, str], list[int]] = {}
        for e in new_edges:
            if e.relation != "global_constraint":
                by_kind.setdefault((e.relation, e.note), []).append(e.target)
        for (kind, note), turns in by_kind.items():
            arrow = ", ".join(map(str, sorted(turns)))
            binds = "" if kind == "new_topic" else note
            item(kind, f"{TITLES[kind]} (turn {node.turn} -> turn {arrow})", binds, sorted(turns))
        head = [f"Relation graph for this request (turn {node.turn})."]
        if node.intention:
            head.append(f"The user's intention: {node.intention}")
        if not items:
            head.append("No earlier turn binds this answer.")
        body = [
            "\n".join(f"   {line}" if i else f"{n}. {line}" for i, line in enumerate(lines))
            for n, lines in enumerate(items, 1)
        ]
        return "\n".join(head) + ("\n\n" + "\n\n".join(body) if body else "")

    def _linked_content(self, node: TurnNode, exchanges: list[Exchange], new_edges: Sequence[Edge]) -> str:
        """The w/o-graph-prompt ablation's prompt: the content of the turns this request links to, nothing else."""
        turns = sorted(
            {r.turn for r in self.graph.rules if r.turn < node.turn}
            | {e.target for e in new_edges if e.relation != "global_constraint" and e.target < node.turn}
        )
        if not turns:
            return f"Relevant earlier dialogue content for this request (turn {node.turn}): none."
        lines = [f"Relevant earlier dialogue content for this request (turn {node.turn}):"]
        for turn in turns:
            ex = exchanges[turn - 1]
            lines += [
                f"Turn {turn}, user: {clip(ex.user, self.linked_chars)}",
                f"Turn {turn}, assistant: {clip(ex.assistant, self.linked_chars)}",
            ]
        return "\n".join(lines)
