"""Which of ifgym's prompts a test double is answering, told by the code's own prompt constants (not by wording).

A double that matched phrases of a prompt would answer the wrong call, or none, once a prompt is reworded;
comparing the system message with the constant the code sends keeps the doubles in step with the code.
"""

from __future__ import annotations

from ifgym.rewards.evolif import judge as evolif_judge
from ifgym.rewards.flexbench import judges as flexbench_judges
from ifgym.rewards.structflow import judge as structflow
from ifgym.simulators.evolif import render
from ifgym.simulators.flexbench import callers, ending, personas

Messages = list[dict[str, str]]

# system prompt -> kind; a prompt with fields filled in is known by its fixed start
EXACT = {
    evolif_judge.BLIND_SYSTEM_PROMPT: "judge.blind",
    evolif_judge.SYSTEM_PROMPT: "judge.rating",
    structflow.SYSTEM_PROMPT: "judge.checklist",
    structflow.EVIDENCE_SYSTEM_PROMPT: "judge.checklist",
    flexbench_judges.JUDGE_SYSTEM: "judge.dimensions",
    flexbench_judges.JUDGE_EVIDENCE: "judge.dimensions",
    render.TOPIC_SYSTEM: "user.topic",
    render.CHECKLIST_SYSTEM: "user.checklist",
    ending.END_SYSTEM: "caller.end",
    personas.DELTA_SYSTEM: "caller.design",
}
TEMPLATES = {
    render.GENERATE_SYSTEM: "user.generate",
    callers.CALLER_SYSTEM: "caller.speak",
}


def prompt_kind(messages: Messages) -> str | None:
    """`judge.blind`, `judge.rating`, `judge.checklist`, `judge.dimensions`, `user.generate` … or None."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    if not system and messages and structflow.PAPER_TASK in messages[0]["content"]:
        return "judge.checklist"  # the paper-shaped checklist judge: one user message, its task after the material
    if system in EXACT:
        return EXACT[system]
    for template, kind in TEMPLATES.items():
        if system.startswith(template.split("{", 1)[0]):
            return kind
    return None


def known_kind(messages: Messages) -> str:
    """`prompt_kind`, or an AssertionError naming the prompt no double knows."""
    kind = prompt_kind(messages)
    if kind is None:
        raise AssertionError(f"not one of ifgym's prompts: {messages[0]['content'][:80]!r}")
    return kind
