"""Canned judges for the audit and eval tests: answer functions `messages -> str` for CannedClient/CannedServer.

They stand in for judge models whose behaviour is known exactly:

- `oracle`: answers every prompt of the three judges (blind EvolIF, rating EvolIF, StructFlow
  checklist, FlexBench dimensions) with the gold set's answer (for the real suite's replies, the
  benchmark's GPT-4o verdict), quoting the reply when asked for evidence, and ignores injected
  text: a perfect judge.
- `yes_sayer`: answers yes / 10 / the first label to everything: the failure the audit must catch.
- `gold_or(other)`: `oracle` for the gold set's prompts (the audit before an eval), `other` for the rest.
"""

from __future__ import annotations

import json
import re
from typing import Any

from support.prompts import prompt_kind

from ifgym.rewards.audit import AXIS_CONSTRAINTS, load_gold, probes

GOLD = load_gold()
# the real suite's reference verdicts: reply -> question -> "yes"/"no"
REAL = {
    p.reply: {c.question: g.gold for c, g in zip(p.payload, p.items, strict=True)}
    for p in probes("structflow_real", split="all")
}


class NotGold(KeyError):
    """The prompt is about a reply that is not in the gold set."""


REPLY_RE = re.compile(r"<reply>\n(.*)\n</reply>", re.DOTALL)


def _reply(messages: list[dict[str, str]]) -> str:
    m = REPLY_RE.search(messages[-1]["content"]) or REPLY_RE.search(messages[1]["content"])
    return m.group(1) if m else ""


def _text_labels(reply: str) -> dict[str, str]:
    for t in GOLD["evolif"]["texts"]:
        if reply.startswith(t["text"]):  # an injected text starts with the clean one
            return t["labels"]
    raise NotGold(f"not a gold text: {reply[:60]!r}")


def _blind(messages: list[dict[str, str]]) -> str:
    labels = _text_labels(_reply(messages))
    keys = re.findall(r'"(\w+)"', messages[-1]["content"].rsplit("Return only", 1)[1])
    # an axis the gold text is not labelled on: the audit never asks one, so any label is fine
    return json.dumps({axis: labels.get(axis, "neutral") for axis in keys})


def _rating(messages: list[dict[str, str]]) -> str:
    """A perfect rating judge: 9 when the required label is the text's gold label, else 2."""
    content = messages[-1]["content"]
    labels = _text_labels(_reply(messages))
    requirements = re.findall(r"<item \d+>(.*?)</item>", content)
    scores = []
    for i, requirement in enumerate(requirements, 1):
        fits = any(_describes(requirement, axis, label) for axis, label in labels.items() if axis in AXIS_CONSTRAINTS)
        scores.append({"item": i, "score": 9 if fits else 2})
    return json.dumps({"scores": scores})


def _describes(requirement: str, axis: str, label: str) -> bool:
    from ifgym.core.constraints import Constraint

    cid, param, suffix = AXIS_CONSTRAINTS[axis]
    return Constraint(cid, {param: label + suffix}).describe() == requirement


def _gold_answers(suite: str, reply: str) -> dict[str, str]:
    """The gold answer of each question (structflow, the real suite's included) or dimension (flexbench) for a reply."""
    if suite == "structflow" and reply in REAL:
        return REAL[reply]
    answers: dict[str, str] = {}
    for probe in probes(suite):
        if probe.reply == reply or (reply.startswith(probe.reply) and "+injection" not in probe.case):
            keys = probe.payload if suite == "structflow" else None
            if suite == "structflow":
                for item, gold in zip(keys, probe.items, strict=True):
                    answers.setdefault(item.question, gold.gold)
            else:
                for gold in probe.items:
                    answers.setdefault(gold.key.split("/")[1].split("+")[0], gold.gold)
            if probe.reply == reply:
                break
    if not answers:
        raise NotGold(f"not a gold {suite} reply: {reply[:60]!r}")
    return answers


def _checklist(messages: list[dict[str, str]], say_yes: bool = False) -> str:
    content = messages[-1]["content"]
    reply = _reply(messages)
    questions = re.findall(r"<item \d+>(.*?)</item>", content)
    gold = {} if say_yes else _gold_answers("structflow", reply)
    results = []
    for i, q in enumerate(questions, 1):
        answer = "yes" if say_yes else gold[q]
        results.append({"item": i, "evidence": reply[:30] if answer == "yes" else "", "judgement": answer.title()})
    return json.dumps({"results": results})


def _dimensions(messages: list[dict[str, str]], say_yes: bool = False) -> str:
    content = messages[-1]["content"]
    agent = re.findall(r"\] AGENT: (.*)", content)
    reply = agent[-1] if agent else ""
    n = len(re.findall(r"<item \d+>", content))
    gold = {} if say_yes else _gold_answers("flexbench", reply)
    items = []
    for i in range(1, n + 1):
        label = "yes" if say_yes else gold[f"d{i}"]
        items.append({"item": i, "evidence": reply[:30] if label == "yes" else "", "label": label})
    return json.dumps({"items": items})


def judge_kind(messages: list[dict[str, str]]) -> str | None:
    """Which ifgym judge asks ("blind", "rating", "checklist", "dimensions"), None for any other prompt."""
    kind = prompt_kind(messages)
    return kind.removeprefix("judge.") if kind and kind.startswith("judge.") else None


def _known_kind(messages: list[dict[str, str]]) -> str:
    kind = judge_kind(messages)
    if kind is None:
        raise AssertionError(f"not a judge prompt of ifgym's: {messages[0]['content'][:80]!r}")
    return kind


def oracle(messages: list[dict[str, str]]) -> str:
    """Answer any judge prompt of the gold set perfectly (see the module docstring)."""
    answer = {"blind": _blind, "rating": _rating, "checklist": _checklist, "dimensions": _dimensions}
    return answer[_known_kind(messages)](messages)


def yes_sayer(messages: list[dict[str, str]]) -> str:
    """Say yes to everything: score 10, Yes, label yes; blind questions get each axis's first label."""
    kind = _known_kind(messages)
    if kind == "blind":
        keys = re.findall(r'"(\w+)"', messages[-1]["content"].rsplit("Return only", 1)[1])
        first = {"emotion": "happy", "reader_age": "child", "register": "formal", "voice": "active"}
        return json.dumps({k: first[k] for k in keys})
    if kind == "dimensions":
        return _dimensions(messages, say_yes=True)
    if kind == "checklist":
        return _checklist(messages, say_yes=True)
    n = len(re.findall(r"<item \d+>", messages[-1]["content"]))
    return json.dumps({"scores": [{"item": i, "score": 10} for i in range(1, n + 1)]})


def gold_or(other: Any) -> Any:
    """An answer function: the oracle's answer for prompts about gold-set replies, `other(messages)` otherwise.

    Works for CannedClient (given the messages) and CannedServer (given the request body).
    """

    def answer(given: Any) -> str:
        messages = given["messages"] if isinstance(given, dict) else given
        if judge_kind(messages) is None:
            return other(messages)
        try:
            return oracle(messages)
        except NotGold:
            return other(messages)

    return answer
