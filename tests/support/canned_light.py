"""Scripted light models for the policy wrappers: they answer GraphIF's and Context-Agent's prompts from a script.

They tell the prompts apart by the wrappers' own system prompts, read what the wrapper shows them
(the current turn, the notebook, the new message) and answer from the script, so a test checks
what the wrapper does with correct answers, and that it showed the model what it needed. Use them
with CannedClient (a function of the messages) or CannedServer (wrap with `from_body`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ifgym.policies.context_agent import (
    BRANCH_SYSTEM,
    NODE_SUMMARY_SYSTEM,
    PATH_SYSTEM,
    SUMMARY_SYSTEM,
    TOPIC_SYSTEM,
)
from ifgym.policies.graphif import FAST_SYSTEM, IDENTIFY_SYSTEM, INTENTION_SYSTEM, SINGLE_SYSTEM
from ifgym.policies.graphif import SUMMARY_SYSTEM as TURN_SUMMARY_SYSTEM

Messages = list[dict[str, str]]
LOCATE_OPENING = "The user's latest request has this relation"


def from_body(fn: Callable[[Messages], str]) -> Callable[[dict[str, Any]], str]:
    """Adapt a messages -> text function to CannedServer's request-body -> text."""
    return lambda body: fn(body["messages"])


def current_turn(prompt: str) -> int:
    """The turn number GraphIF's view names as the current request."""
    return int(re.search(r"Current request \(turn (\d+)\):", prompt).group(1))


def notebook_of(prompt: str) -> str:
    """The notebook block of a GraphIF loop prompt."""
    return prompt.split("Notebook (extracted so far for this request):\n", 1)[1].split("\nCurrent request", 1)[0]


def graphif_light(truth: Mapping[int, Sequence[Mapping[str, Any]]]) -> Callable[[Messages], str]:
    """A light model that knows the relations of each turn (`truth[turn]`, in the fast answer's format).

    Fast/single extraction: all of them at once. Loop: the intention; then, one at a time, the
    first relation whose type is not yet in the notebook the wrapper shows (so a wrapper that
    forgets its notebook loops on the first relation); then the located fields of the asked type.
    The per-turn summary call gets "summary of turn N".
    """

    def answer(messages: Messages) -> str:
        system, prompt = messages[0]["content"], messages[-1]["content"]
        if system == TURN_SUMMARY_SYSTEM:  # the per-turn summary call (summary=True): names the turn it summarizes
            summarized = re.search(r"User \(turn (\d+)\):", prompt).group(1)
            return json.dumps({"summary": f"summary of turn {summarized}"})
        turn = current_turn(prompt)
        relations = list(truth.get(turn, []))
        if system in (FAST_SYSTEM, SINGLE_SYSTEM):
            return json.dumps({"intention": f"what the user wants at turn {turn}", "relations": relations})
        if system == INTENTION_SYSTEM:
            return json.dumps({"intention": f"what the user wants at turn {turn}"})
        if system == IDENTIFY_SYSTEM:
            notebook = notebook_of(prompt)
            for rel in relations:
                if f"- {rel['type']}:" not in notebook:
                    return json.dumps({"action": rel["type"]})
            return json.dumps({"action": "done"})
        if system.startswith(LOCATE_OPENING):
            kind = system.splitlines()[1].split(":")[0]
            rel = next(r for r in relations if r["type"] == kind)
            return json.dumps({k: v for k, v in rel.items() if k != "type"})
        raise AssertionError(f"not a GraphIF prompt: {system[:80]!r}")

    return answer


def new_message(prompt: str) -> str:
    """The new user message in a Context-Agent topic or branch prompt."""
    return prompt.split("New message:\n", 1)[1]


def context_agent_light(
    topics: Mapping[str, Mapping[str, Any]], branches: Mapping[str, Mapping[str, Any]]
) -> Callable[[Messages], str]:
    """A light model with scripted topic and branch decisions, keyed by the new message.

    A message not in the script gets an answer no parser accepts, so an unexpected call shows up
    as a default taken (counted in the wrapper's stats) rather than as a silent right answer.
    Summaries are "summary: <first five words>"; the topic summary keeps the first one.
    """

    def answer(messages: Messages) -> str:
        system, prompt = messages[0]["content"], messages[-1]["content"]
        if system == TOPIC_SYSTEM:
            decision = topics.get(new_message(prompt))
            return json.dumps(decision) if decision is not None else "(unscripted topic call)"
        if system == BRANCH_SYSTEM:
            decision = branches.get(new_message(prompt))
            return json.dumps(decision) if decision is not None else "(unscripted branch call)"
        if system == SUMMARY_SYSTEM:
            so_far = prompt.split("\n", 1)[0].removeprefix("Topic summary so far: ")
            user = prompt.split("User: ", 1)[1].split("\nAssistant: ", 1)[0]
            summary = "summary: " + " ".join(user.split()[:5])
            return json.dumps({"summary": summary, "topic_summary": summary if so_far == "(new topic)" else so_far})
        raise AssertionError(f"not a Context-Agent prompt: {system[:80]!r}")

    return answer


def thread_end(prompt: str) -> int:
    """The turn a Context-Agent yes/no question's thread ends with (its last `- turn N:` line)."""
    return int(re.findall(r"^- turn (\d+):", prompt.split("New message:\n", 1)[0], re.MULTILINE)[-1])


def context_agent_paper_light(
    same: Mapping[str, Sequence[int]] | None = None, branches: Mapping[str, Mapping[str, Any]] | None = None
) -> Callable[[Messages], str]:
    """A light and summary model for Context-Agent's paper settings (topic_decision=paths, topic_summary=from_nodes).

    The yes/no question: "yes" when the thread shown ends at a turn in `same[new message]`; without
    `same`, every thread is the same (one tree, each turn continues the first path asked). Branch
    decisions come from `branches` (by new message; else "continue"). Node summaries are
    "summary: <first five words>". A scripted message missing from `same` gets an answer no parser
    accepts (a default taken, counted).
    """

    def answer(messages: Messages) -> str:
        system, prompt = messages[0]["content"], messages[-1]["content"]
        if system == PATH_SYSTEM:
            if same is None:
                return json.dumps({"answer": "yes"})
            ends = same.get(new_message(prompt))
            if ends is None:
                return "(unscripted yes/no call)"
            return json.dumps({"answer": "yes" if thread_end(prompt) in ends else "no"})
        if system == BRANCH_SYSTEM:
            return json.dumps((branches or {}).get(new_message(prompt), {"decision": "continue"}))
        if system == NODE_SUMMARY_SYSTEM:
            user = prompt.split("User: ", 1)[1].split("\nAssistant: ", 1)[0]
            return json.dumps({"summary": "summary: " + " ".join(user.split()[:5])})
        raise AssertionError(f"not a Context-Agent paper prompt: {system[:80]!r}")

    return answer


# ---------------------------------------------------------------------------------------------
# Hand-written dialogues with hand-labelled relation graphs, and a light model that reads the prompt
# ---------------------------------------------------------------------------------------------


class Dialogue:
    """A hand-written dialogue: (user, assistant) turns, the topics, and the hand-labelled graph edges.

    `edges` are (relation, source turn, target turn); a return to an earlier topic is labelled at
    that topic's latest turn, and `edge_keys` scores it by the topic it returns to, so any turn of
    that topic counts.
    """

    def __init__(
        self,
        name: str,
        turns: Sequence[tuple[str, str]],
        topics: Sequence[Sequence[int]],
        edges: Sequence[tuple[str, int, int]],
    ):
        self.name = name
        self.turns = list(turns)
        self.topics = [list(t) for t in topics]
        self.edges = list(edges)
        self.answers = dict(self.turns)

    @property
    def users(self) -> list[str]:
        """The user messages, in order."""
        return [user for user, _ in self.turns]

    def gold(self) -> set[tuple[str, int, str]]:
        """The hand-labelled edges as scoring keys."""
        return edge_keys(self.edges, self.topics)


def _rules_binding(rules: Mapping[int, Sequence[int]], last: int) -> list[tuple[str, int, int]]:
    """global_constraint edges from each turn to every rule in force there; rules: set-at turn -> [turns in force]."""
    return [("global_constraint", t, start) for start, live in rules.items() for t in live if t <= last]


HOUSEPLANTS = Dialogue(
    "houseplants",
    [
        (
            "For the rest of our chat, answer in French. Which houseplants do well in a dark flat?",
            "Snake plant, ZZ plant and pothos all cope with low light.",
        ),
        ("Which of those needs the least water?", "The ZZ plant needs the least water: once a month is enough."),
        ("How often should I repot it?", "Repot the ZZ plant every two to three years, in spring."),
        ("What soil mix suits it after repotting?", "Use a cactus mix with extra perlite."),
        ("Is pothos safe for cats?", "No: pothos is mildly toxic to cats."),
        (
            "Summarize what you told me in turns 2 to 5.",
            "ZZ: water monthly, repot every few years in cactus mix; pothos is toxic to cats.",
        ),
        ("Different topic: help me plan three days in Lisbon.", "Day one Alfama, day two Belém, day three Sintra."),
        ("What should I eat there?", "Try pastéis de nata and grilled sardines."),
        ("Back to the houseplants: make that summary shorter.", "ZZ: water monthly; pothos is toxic."),
        ("From now on answer in English instead.", "Understood, English from here on."),
    ],
    topics=[[1, 2, 3, 4, 5, 6, 9, 10], [7, 8]],
    edges=[
        *_rules_binding({1: range(2, 11)}, 10),  # the French rule binds turns 2-9; turn 10 replaces it
        ("context_anchored", 2, 1),  # "those": the plants of turn 1
        ("context_anchored", 3, 2),  # "it": the plant chosen in turn 2
        ("context_anchored", 4, 3),  # after the repotting of turn 3
        ("context_anchored", 5, 1),  # pothos was named in turn 1
        ("summary", 6, 2),
        ("summary", 6, 3),
        ("summary", 6, 4),
        ("summary", 6, 5),
        ("context_anchored", 8, 7),  # "there": Lisbon
        ("new_topic", 9, 6),  # back to the plants
        ("modify", 9, 6),  # "that summary"
    ],
)

NEWSLETTER = Dialogue(
    "newsletter",
    [
        (
            "Help me write a newsletter for my bakery. From now on, use bullet points.",
            "• Fresh rye every Friday • Cinnamon buns are back",
        ),
        ("Also, from now on, bold the key terms.", "• **Fresh rye** every Friday • **Cinnamon buns** are back"),
        ("Write a short note announcing our new sourdough.", "• **Sourdough** arrives on Saturday, baked overnight"),
        ("Shorten that note.", "• **Sourdough** on Saturday"),
        ("For the rest of our chat, write every answer in Spanish.", "• **Pan de masa madre** el sábado"),
        ("Switch the output language to German from now on.", "• **Sauerteigbrot** am Samstag"),
        ("You no longer need to bold the key terms.", "• Sauerteigbrot am Samstag"),
        ("Write a closing line for the newsletter.", "• Danke für Ihren Besuch!"),
    ],
    topics=[[1, 2, 3, 4, 5, 6, 7, 8]],
    edges=[
        # bullets (turn 1) bind to the end; bold (turn 2) until turn 7 drops it; Spanish (turn 5) until
        # German (turn 6) replaces it; a second format rule does not retire the first
        *_rules_binding({1: range(2, 9), 2: range(3, 8), 5: [6], 6: [7, 8]}, 8),
        ("modify", 4, 3),  # "that note"
        ("context_anchored", 8, 1),  # the newsletter of turn 1
    ],
)

DIALOGUES = (HOUSEPLANTS, NEWSLETTER)


def edge_keys(edges: Any, topics: Sequence[Sequence[int]]) -> set[tuple[str, int, str]]:
    """Scoring keys of graph edges: (relation, source, target); a return is keyed by its target's topic.

    `edges` are (relation, source, target) tuples or Edge-like objects / dicts with those fields.
    """
    keys = set()
    for e in edges:
        if isinstance(e, Mapping):
            relation, source, target = e["relation"], e["source"], e["target"]
        elif isinstance(e, tuple):
            relation, source, target = e
        else:
            relation, source, target = e.relation, e.source, e.target
        where = f"turn {target}"
        if relation == "new_topic":
            where = next((f"topic {i}" for i, turns in enumerate(topics, 1) if target in turns), where)
        keys.add((relation, source, where))
    return keys


def prf(found: set, gold: set) -> tuple[float, float, float]:
    """Precision, recall and F1 of `found` against `gold` (1.0 when both are empty)."""
    hit = len(found & gold)
    precision = hit / len(found) if found else float(not gold)
    recall = hit / len(gold) if gold else float(not found)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def scripted_base(dialogues: Sequence[Dialogue] = DIALOGUES) -> Callable[[Messages], str]:
    """The model under test for the hand-written dialogues: the scripted answer to the last user message.

    A GraphIF rewrite gets the same answer back as JSON, so the transcript is the scripted one
    whatever the wrapper does.
    """
    from ifgym.policies.graphif import REWRITE_SYSTEM

    answers = {user: answer for d in dialogues for user, answer in d.turns}

    def answer(messages: Messages) -> str:
        if messages[0]["content"] == REWRITE_SYSTEM:
            request = messages[-1]["content"].split("User's request:\n", 1)[1].split("\n\n", 1)[0]
            return json.dumps({"reply": answers[request]})
        return answers[messages[-1]["content"]]

    return answer


# The reading stand-in: cue phrases and word overlap over what the GraphIF view shows, nothing else.
_STOP = set(
    "what which with that this those these there then than from your about should would could into also more "
    "every make write help please answer give tell want need does have well turn turns after them they their "
    "other some when where while here just like".split()
)
_ANAPHORA = re.compile(r"\b(those|these|it|that|them|there|this)\b", re.IGNORECASE)
_RULE_CUE = re.compile(r"from now on|for the rest of our chat|no longer|stop \w+ing", re.IGNORECASE)
_NEW_CUE = re.compile(r"^(different topic|new topic|something else)\b[:,.]?", re.IGNORECASE)
_RETURN_CUE = re.compile(r"^(?:back to|going back to|returning to) ([^:.]+)[:.]?", re.IGNORECASE)
_SUMMARY_CUE = re.compile(r"\b(summari[sz]e|recap)\b", re.IGNORECASE)
_MODIFY_CUE = re.compile(r"\b(shorten|shorter|longer|lengthen|rewrite|rephrase|expand)\b", re.IGNORECASE)
_MODIFY_WORDS = {"shorten", "shorter", "longer", "lengthen", "rewrite", "rephrase", "expand", "make"}
_LANGUAGES = {"french", "english", "spanish", "german", "italian", "portuguese"}
_FORMAT = {"bullet", "bullets", "bold", "table", "list", "json", "markdown", "heading", "headings"}
_VIEW_TOPIC = re.compile(r"^([* ]) topic (\d+) '(.*)': turns ([\d, ]*)$", re.MULTILINE)
_VIEW_RULE = re.compile(r"^- \[rule (\d+), turn (\d+), aspect ([^\]]*)\] (.*)$", re.MULTILINE)
_VIEW_TURN = re.compile(r"^\[turn (\d+)\] (user|assistant): (.*)$", re.MULTILINE)
_VIEW_CURRENT = re.compile(r"Current request \(turn (\d+)\):\n(.*)", re.DOTALL)


def _stems(text: str) -> set[str]:
    """Content words cut to five letters (so "plants" meets "plant" and "summary" meets "summarize")."""
    return {w[:5] for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in _STOP}


def _aspect(rule: str) -> str:
    words = set(re.findall(r"[a-z]+", rule.lower()))
    if words & _LANGUAGES:
        return "output language" if "output" in words else "language"
    return "format" if words & _FORMAT else "style"


def read_view(prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """(intention, relations) from what a GraphIF view shows: cue phrases and word overlap, nothing else.

    A rule-based stand-in for a light model: if the wrapper leaves a turn out of the view, the
    relation that needs it cannot be located, and the extraction is wrong.
    """
    m = _VIEW_CURRENT.search(prompt)
    turn, text = int(m.group(1)), m.group(2).strip()
    view = prompt[: m.start()]
    shown: dict[int, dict[str, str]] = {}
    for t, role, content in _VIEW_TURN.findall(view):
        shown.setdefault(int(t), {})[role] = content
    topics = [
        (mark == "*", int(i), label, [int(x) for x in ts.split(",") if x.strip()])
        for mark, i, label, ts in _VIEW_TOPIC.findall(view)
    ]
    rules = [(int(i), int(t), aspect, words) for i, t, aspect, words in _VIEW_RULE.findall(view)]
    current_turns = next((ts for cur, _, _, ts in topics if cur), [])

    relations: list[dict[str, Any]] = []
    sentences = re.split(r"(?<=[.!?])\s+", text)
    rule_sentences = [s for s in sentences if _RULE_CUE.search(s)]
    rest = " ".join(s for s in sentences if s not in rule_sentences)

    new = _NEW_CUE.match(rest)
    back = _RETURN_CUE.match(rest)
    if turn == 1 or new:
        rest = rest[new.end() :] if new else rest
        label = " ".join([w for w in re.findall(r"[A-Za-z]+", rest) if w.lower()[:5] in _stems(w)][:4])
        relations.append({"type": "new_topic", "return_to": None, "label": label.lower()})
    elif back:
        rest = rest[back.end() :]
        wanted = _stems(back.group(1))
        best = None
        for current, _, label, turns in topics:
            if current or not turns:
                continue
            words = _stems(label) | {s for t in turns for s in _stems(" ".join(shown.get(t, {}).values()))}
            if wanted & words and (best is None or turns[-1] > best):
                best = turns[-1]
        if best is not None:
            relations.append({"type": "new_topic", "return_to": best, "label": ""})

    for sentence in rule_sentences:
        rule = " ".join(_RULE_CUE.sub("", sentence).split()).strip(" ,.").removeprefix("Also").strip(" ,.")
        rule = re.sub(r"^(you )?need to ", "", rule, flags=re.IGNORECASE)
        aspect = _aspect(rule)
        if re.search(r"no longer|stop", sentence, re.IGNORECASE):
            target = max(rules, key=lambda r: len(_stems(r[3]) & _stems(rule)), default=None)
            relations.append(
                {
                    "type": "global_constraint",
                    "rule": rule,
                    "aspect": aspect,
                    "action": "remove",
                    "replaces": target[0] if target else None,
                }
            )
            continue
        # one language at a time: a new language replaces the old; a second format rule adds to the first
        clash = [r for r in rules if "language" in r[2] and "language" in aspect]
        relations.append(
            {
                "type": "global_constraint",
                "rule": rule,
                "aspect": aspect,
                "action": "update" if clash else "add",
                "replaces": clash[-1][0] if clash else None,
            }
        )

    def latest_sharing(words: set[str]) -> int | None:
        hits = [t for t, said in shown.items() if t < turn and words & _stems(" ".join(said.values()))]
        return max(hits) if hits else None

    if _SUMMARY_CUE.search(rest):
        span = re.search(r"turns? (\d+) (?:to|-) (\d+)", rest)
        turns = list(range(int(span.group(1)), int(span.group(2)) + 1)) if span else sorted(current_turns)
        relations.append({"type": "summary", "turns": turns, "binds": "cover those turns"})
    elif _MODIFY_CUE.search(rest):
        words = {w[:5] for w in re.findall(r"[a-z]+", rest.lower()) if w not in _MODIFY_WORDS} & _stems(rest)
        users = {t: said.get("user", "") for t, said in shown.items() if t < turn}
        hits = [t for t, user in users.items() if words & _stems(user)]
        if hits:
            relations.append({"type": "modify", "turns": [max(hits)], "binds": "change that answer as asked"})
    elif rest.strip() and turn > 1 and not new and not back:
        target = latest_sharing(_stems(rest))
        if target is None and _ANAPHORA.search(rest):
            earlier = [t for t in shown if t < turn]
            target = max(earlier) if earlier else None
        if target is not None:
            relations.append({"type": "context_anchored", "turns": [target], "binds": "build on that turn"})
    return f"what the user asks at turn {turn}", relations


_ORDER = ("new_topic", "global_constraint", "summary", "modify", "context_anchored")


def reading_light(messages: Messages) -> str:
    """A light model for GraphIF that answers every prompt (fast, single, loop) from `read_view` of what it is shown."""
    system, prompt = messages[0]["content"], messages[-1]["content"]
    intention, relations = read_view(prompt)
    relations.sort(key=lambda r: _ORDER.index(r["type"]))
    if system in (FAST_SYSTEM, SINGLE_SYSTEM):
        return json.dumps({"intention": intention, "relations": relations})
    if system == INTENTION_SYSTEM:
        return json.dumps({"intention": intention})
    if system == IDENTIFY_SYSTEM:
        notebook = notebook_of(prompt)
        nxt = next((r["type"] for r in relations if f"- {r['type']}:" not in notebook), "done")
        return json.dumps({"action": nxt})
    if system.startswith(LOCATE_OPENING):
        kind = system.splitlines()[1].split(":")[0]
        rel = next((r for r in relations if r["type"] == kind), None)
        return json.dumps({k: v for k, v in rel.items() if k != "type"}) if rel else "I cannot find it."
    raise AssertionError(f"not a GraphIF prompt: {system[:80]!r}")


def client(srv, role):
    """A real HTTP client for a CannedServer, no retries (the server's answers are the test's script)."""
    from ifgym.llm import make_client

    return make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": None, "max_retries": 0}, role)


def play(policy, turns):
    """Talk to the policy turn by turn, keeping its replies in the transcript."""
    messages = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": policy.act(messages)})
    return messages
