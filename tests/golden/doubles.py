"""The golden test's stand-ins: a policy under test, and one model server that plays every other model.

`stand_in` stands for the model under test: its reply is a function of the transcript alone, in one
of five shapes (prose, bullets, JSON, capitals, framed by the user's quoted words), so a rule-scored
turn passes some constraints and fails others. `ServerModel` answers every prompt ifgym sends to a
model (EvolIF's blind and rating judges, the StructFlow checklist judge, the FlexBench dimension
judge, the EvolIF user renderer and its checks, the StructFlow generator's three stages, the
FlexBench caller, its end detector and persona delta, GraphIF's and Context-Agent's light calls and
GraphIF's rewrite, and the base model under a wrapper). It tells the calls apart by the task their
system prompt sets (the prompts are pinned by the fixtures anyway) and draws every free choice from
a hash of the request, so the same request always gets the same answer, and different requests
different ones: yes and no, well-formed and malformed answers (a missing item, prose lines instead
of JSON, an unusable label) that the readers must re-ask or mark unknown.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

Messages = list[dict[str, str]]


def digest(value: Any) -> int:
    """A stable integer from any JSON-able value (the same on every machine and Python run)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)


def _words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


# --- the model under test ---------------------------------------------------------------------

_QUOTED = re.compile(r"[“\"']([^”\"'\n]{1,40})[”\"']")


def stand_in(messages: Messages) -> str:
    """A reply to the last user message, in one of five shapes chosen by the turn number."""
    user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    turn = sum(m["role"] == "user" for m in messages)
    quoted = _QUOTED.findall(user)
    body = f"Here is my answer about {_words(user, 6).rstrip('.,:;!?')}. " + " ".join(quoted)
    shape = turn % 5
    if shape == 0:
        return body.strip()
    if shape == 1:
        return "\n".join(f"- {part.strip()}" for part in body.split(".") if part.strip())
    if shape == 2:
        return json.dumps({"answer": body.strip(), "turn": turn})
    if shape == 3:
        return body.upper().strip()
    edge = quoted[0] if quoted else "Answer"
    return f"{edge} {body.strip()} {quoted[-1] if quoted else 'done'}"


# --- one server model for every other role ----------------------------------------------------


def _items(text: str) -> int:
    return len(re.findall(r"<item \d+>", text))


def _reply_block(text: str) -> str:
    m = re.search(r"<reply>\n(.*)\n</reply>", text, re.DOTALL)
    return m.group(1) if m else ""


def _blind(messages: Messages, h: int) -> str:
    first = messages[1]["content"]
    axes = re.findall(r"^- (\w+): .*? Labels: (.*)\.$", first, re.MULTILINE)
    answer = {}
    for i, (axis, options) in enumerate(axes):
        labels = [o.split(" (", 1)[0].strip() for o in options.split("; ")]
        answer[axis] = labels[(h >> (3 * i)) % len(labels)]
    if h % 9 == 0:  # unusable: a label outside the list, re-asked
        return json.dumps({axis: "bittersweet" for axis in answer})
    if h % 5 == 0:  # "Emotion: sad" lines instead of JSON
        return "\n".join(f"{axis.replace('_', ' ').title()}: {label}" for axis, label in answer.items())
    return json.dumps(answer)


def _rating(messages: Messages, h: int) -> str:
    n = _items(messages[1]["content"])
    scores = [{"item": i, "score": 1 + (h >> (4 * i)) % 10, "reason": f"reason {i}"} for i in range(1, n + 1)]
    if h % 11 == 0 and n > 1:  # an item left out: re-asked
        scores = scores[:-1]
    if h % 6 == 0:  # prose lines
        return "\n".join(f"Item {s['item']}: {s['score']}/10" for s in scores)
    return "```json\n" + json.dumps({"scores": scores}) + "\n```"


def _checklist(messages: Messages, h: int) -> str:
    first = messages[1]["content"]
    n = _items(first)
    evidence = '"evidence"' in messages[0]["content"]
    reply = _reply_block(first)
    results = []
    for i in range(1, n + 1):
        yes = (h >> i) % 3 != 0
        entry: dict[str, Any] = {"item": i}
        if evidence:
            quote = _words(reply, 4) if (h >> (i + 7)) % 4 else "words that are not in the reply"
            entry["evidence"] = quote if yes else ""
        entry["judgement"] = "Yes" if yes else "No"
        entry["reason"] = f"check {i}"
        results.append(entry)
    if h % 7 == 0 and n > 1:  # an item left out: re-asked
        results = results[1:]
    if h % 5 == 0 and not evidence:  # "1. Yes" lines
        return "\n".join(f"{r['item']}. {r['judgement']}" for r in results)
    return json.dumps({"results": results})


def _dimensions(messages: Messages, h: int) -> str:
    first = messages[1]["content"]
    n = _items(first)
    evidence = '"evidence"' in messages[0]["content"]
    agent = re.findall(r"\] AGENT: (.*)", first)
    quote = _words(agent[-1], 5) if agent else ""
    labels = ("yes", "no", "skipped", "unknown", "yes")
    items = []
    for i in range(1, n + 1):
        entry: dict[str, Any] = {"item": i, "label": labels[(h >> (2 * i)) % len(labels)]}
        if evidence:
            entry["evidence"] = quote if (h >> i) % 3 else "a quote from nowhere"
        items.append(entry)
    if h % 8 == 0:  # an unreadable label: unknown after the re-asks
        items[0]["label"] = "partly"
    return json.dumps({"items": items})


def _render(messages: Messages, h: int) -> str:
    prompt = messages[-1]["content"]
    asks = [line[2:] for line in prompt.splitlines() if line.startswith("- ")]
    numbered = [line.strip() for line in prompt.splitlines() if re.match(r"^\s+\d+\. ", line)]
    if h % 4 == 0 and "rejected" not in prompt:  # a draft that states nothing: regenerated
        return "User: Tell me more, please."
    return " ".join(asks[:4] + numbered)


def _render_check(messages: Messages, h: int) -> str:
    if "JSON" in messages[0]["content"]:  # checks="model": does the message ask for each requirement
        n = len(re.findall(r"^\d+\. ", messages[-1]["content"].split("Requirements:", 1)[1], re.MULTILINE))
        return json.dumps({str(i): "no" if h % 7 == 0 and i == n else "yes" for i in range(1, n + 1)})
    return "No." if h % 6 == 0 else "Yes, it does."


def _generator(messages: Messages, h: int) -> str:
    prompt = messages[1]["content"]
    if '"purpose"' in prompt:
        n = int(re.search(r"exactly (\d+) entries", prompt).group(1))
        plan = [{"name": f"c{i}", "description": f"step {i} of the plan"} for i in range(1, n + 1)]
        return json.dumps({"purpose": "to learn the subject step by step", "plan": plan})
    if '"turns"' in prompt:
        n = int(re.search(r"exactly (\d+) entries", prompt).group(1))
        asks = dict(re.findall(r"^(c\d+): .*\n    requirements it must state: (.*)\.$", prompt, re.MULTILINE))
        turns = [
            {
                "name": f"c{i}",
                "user prompt": f"Question {i} about the plan. {asks.get(f'c{i}', '')}.",
                "assistant answer": f"Reference answer {i}.",
            }
            for i in range(1, n + 1)
        ]
        return json.dumps({"turns": turns})
    kinds = ("Content Constraint", "Style Constraint", "Situation Constraint")
    kind = kinds[h % len(kinds)]
    return json.dumps({"constraints": [{"type": kind, "content": f"Does the reply meet requirement {h % 97}?"}]})


_CALLER_LINES = (
    "Hi. Who is this?",
    "Yes, that's me, I'm the owner.",
    "It's owner@example.com. We're on Shopify.",
    "We haven't picked a plan yet.",
    "Okay, thanks. Goodbye.",
)


def _caller(messages: Messages, h: int) -> str:
    spoken = sum(m["role"] == "assistant" for m in messages)  # the caller's own earlier lines
    return _CALLER_LINES[min(spoken, len(_CALLER_LINES) - 1)]


def _end_check(messages: Messages, h: int) -> str:
    if h % 10 == 0:
        return "The caller seems fine."  # unreadable: re-asked once, then no end and no patience change
    return json.dumps({"user_hung_up": False, "assistant_closed": False, "helpful": h % 4 != 0})


def _delta(messages: Messages, h: int) -> str:
    return json.dumps(
        {
            "business_context": "Runs a small business and is busy.",
            "goal": "Get the matter settled quickly.",
            "typical_questions": ["How long will this take?", "Is there a fee?"],
            "catchphrases": ["Let's be quick."],
        }
    )


def _graph_current(prompt: str) -> tuple[int, str]:
    m = re.search(r"Current request \(turn (\d+)\):\n(.*)", prompt, re.DOTALL)
    return (int(m.group(1)), m.group(2).strip()) if m else (1, prompt)


def _graph_relations(prompt: str, h: int) -> list[dict[str, Any]]:
    turn, text = _graph_current(prompt)
    if turn == 1:
        return [{"type": "new_topic", "return_to": None, "label": _words(text, 3).lower()}]
    earlier = list(range(1, turn))
    variant = h % 5
    if variant == 0:
        return [{"type": "context_anchored", "turns": [turn - 1], "binds": "build on the last answer"}]
    if variant == 1:
        rule = _words(text, 6)
        return [{"type": "global_constraint", "rule": rule, "aspect": "format", "action": "add", "replaces": None}]
    if variant == 2:
        return [
            {"type": "summary", "turns": earlier, "binds": "cover every earlier turn"},
            {"type": "modify", "turns": [turn - 1], "binds": "change that answer"},
        ]
    if variant == 3:
        return [{"type": "new_topic", "return_to": earlier[0], "label": ""}]
    return [{"type": "context_anchored", "turns": [turn + 3], "binds": "a turn that does not exist"}]


def _graphif(messages: Messages, h: int) -> str:
    system, prompt = messages[0]["content"], messages[-1]["content"]
    relations = _graph_relations(prompt, digest(_graph_current(prompt)))
    if system.startswith("You map how") or system.startswith("List the relations"):
        if h % 13 == 0:
            return "I could not find any relation."
        return json.dumps({"intention": "what the user wants now", "relations": relations})
    if system.startswith("Read the conversation"):
        return json.dumps({"intention": "what the user wants now"})
    if system.startswith("You extract, one at a time"):
        notebook = prompt.split("Current request", 1)[0]
        todo = [r["type"] for r in relations if f"- {r['type']}:" not in notebook]
        return json.dumps({"action": todo[0] if todo else "done"})
    kind = system.splitlines()[1].split(":")[0]  # a location call names its relation type
    rel = next((r for r in relations if r["type"] == kind), None)
    return json.dumps({k: v for k, v in rel.items() if k != "type"}) if rel else "Nothing to locate."


def _topics(messages: Messages, h: int) -> str:
    prompt = messages[-1]["content"]
    topics = [int(t) for t in re.findall(r"^- topic (\d+)", prompt, re.MULTILINE)]
    if not topics:
        return json.dumps({"decision": "create"})
    choice = h % 4
    if choice == 0:
        return json.dumps({"decision": "create"})
    if choice == 1 and len(topics) > 1:
        return json.dumps({"decision": "switch", "topic": topics[h % len(topics)]})
    if choice == 2:
        return "continue, I think"  # unreadable: the wrapper's default
    return json.dumps({"decision": "continue"})


def _branch(messages: Messages, h: int) -> str:
    return json.dumps({"decision": ("continue", "create", "switch")[h % 3]})


def _summary(messages: Messages, h: int) -> str:
    user = messages[-1]["content"].split("User: ", 1)[1].split("\nAssistant: ", 1)[0]
    if h % 7 == 0:
        return "{}"
    return json.dumps({"summary": "about " + _words(user, 5), "topic_summary": "the topic of " + _words(user, 3)})


def _rewrite(messages: Messages, h: int) -> str:
    system = messages[0]["content"]
    draft = messages[-1]["content"].rsplit("Draft answer:\n", 1)[1].split("\n\nFeedback:\n", 1)[0]
    if "Final response:" in system:  # GraphIF's final-response rewrite (rewrite_format="final_response")
        if h % 5 == 0:
            return "Every requirement is met."  # no section: the draft is kept
        return f"1. Checked against the graph.\nFinal response:\n{draft} (revised against the graph)"
    if "using the feedback" in system:  # Self-Refine's revision: the answer itself
        return f"{draft} (revised with the feedback)"
    if h % 5 == 0:
        return "Here is the revision."  # no JSON: the draft is kept
    return json.dumps({"reply": f"{draft} (revised against the graph)"})


def _turn_summary(messages: Messages, h: int) -> str:
    """GraphIF's per-turn summary call (summary=True)."""
    user = messages[-1]["content"].split(":\n", 1)[1].split("\n\nAssistant:\n", 1)[0]
    if h % 7 == 0:
        return "{}"  # no summary: counted, the answer stays in view
    return json.dumps({"summary": "the user asked about " + _words(user, 6)})


def _feedback(messages: Messages, h: int) -> str:
    """Self-Refine's critique: about every other draft meets everything (the turn stops early)."""
    if h % 2 == 0:
        return "Every requirement is met.\nALL REQUIREMENTS MET"
    return "The last request's format is not met: use a list."


def _base(messages: Messages, h: int) -> str:
    """The model under a wrapper: says how much context it got, then answers like the stand-in."""
    return f"[{len(messages)} messages] " + stand_in(messages)


# The task each system prompt sets (its opening words) -> the answer.
TASKS: tuple[tuple[str, Callable[[Messages, int], str]], ...] = (
    ("You classify pieces of writing", _blind),
    ("You are a strict, careful grader", _rating),
    ("You check whether an AI assistant's reply meets a checklist", _checklist),
    ("You audit call transcripts", _dimensions),
    ("You play the user in a conversation", _render),
    ("You review messages that a user wrote", _render_check),
    ("You review whether a user's message states", _render_check),
    ("You design realistic multi-turn conversations", _generator),
    ("You are role-playing a person", _caller),
    ("You watch phone calls", _end_check),
    ("You design callers", _delta),
    ("You map how the user's latest request", _graphif),
    ("List the relations between", _graphif),
    ("Read the conversation and say", _graphif),
    ("You extract, one at a time", _graphif),
    ("The user's latest request has this relation", _graphif),
    ("You keep track of the topics", _topics),
    ("Within one topic a conversation can branch", _branch),
    ("Summarize one exchange", _summary),
    ("Write a one- or two-sentence summary of one turn", _turn_summary),
    ("You review a draft answer", _feedback),
    ("You revise a draft answer", _rewrite),
)


JUDGES = (_blind, _rating, _checklist, _dimensions)


def server_model(body: dict[str, Any]) -> str:
    """Answer one chat request (a CannedServer reply function).

    A judge asked about some replies (one prompt in 13, by the hash of the first question) never
    answers usably, re-asks included, so its verdicts end unknown.
    """
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    h = digest(messages)
    for opening, answer in TASKS:
        if system.startswith(opening):
            if answer in JUDGES and digest(messages[:2]) % 13 == 0:
                return "I would rather not say."
            return answer(messages, h)
    return _base(messages, h)
