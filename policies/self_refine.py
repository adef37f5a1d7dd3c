"""Self-Refine (Madaan et al., 2023) as a policy wrapper: draft, critique the draft, revise it.

Per user turn the wrapped policy (the model under test, nothing else) is called:

1. **Draft**: the transcript as is (its prompt tokens are the turn's context tokens, ACT).
2. **Feedback**: the conversation, the draft, and the request to check the draft against every
   requirement of the conversation: this request's and the standing ones set in earlier turns
   (format, length, language, words to use or avoid, ...), listing each one it misses. A feedback
   whose last line is `ALL REQUIREMENTS MET` ends the turn with the draft.
3. **Revision**: the conversation, the draft and the feedback; the answer is the revised reply.

Steps 2-3 repeat up to `rounds` times (default 1: at most 3 calls per turn, 2 when the first
feedback finds nothing to fix). Feedback and revision are passes over a draft the model already
wrote: their prompt tokens are rewrite tokens, not context tokens (see `ifgym.policies.wrapper`).
An empty revision keeps the draft (`stats["revision_fallbacks"]`). GraphIF's paper compares
against Self-Refine; it is here so that the comparison runs on the same footing.
"""

from __future__ import annotations

from typing import Any

from ifgym.llm import Message
from ifgym.policies.base import Policy
from ifgym.policies.wrapper import BaseCall, Turn, WrapperPolicy, check_int, split_transcript

__all__ = ["FEEDBACK_SYSTEM", "REVISE_SYSTEM", "SelfRefine"]

MET = "ALL REQUIREMENTS MET"

FEEDBACK_SYSTEM = f"""You review a draft answer to the last request of a conversation. List every requirement \
the answer must meet: what the last request asks, and the rules set in earlier turns that still hold (format, \
length, language, tone, words to use or avoid, ...). For each requirement say whether the draft meets it and, \
when it does not, what to change. End with the line "{MET}" when the draft meets every requirement."""

REVISE_SYSTEM = """You revise a draft answer to the last request of a conversation using the feedback on it. \
Fix every problem the feedback names and keep what the draft already does right. Write only the revised \
answer, exactly as the user should see it."""


def _conversation(messages: list[Message]) -> str:
    """The transcript in words: standing instructions, earlier turns, the last request."""
    system, exchanges, current = split_transcript(messages)
    lines = [f"System: {m['content']}" for m in system if m["content"].strip()]
    for ex in exchanges:
        lines += [f"[turn {ex.turn}] User: {ex.user}", f"[turn {ex.turn}] Assistant: {ex.assistant}"]
    lines.append(f"[turn {len(exchanges) + 1}] User (the last request): {current}")
    return "\n".join(lines)


def all_met(feedback: str) -> bool:
    """Tell whether the feedback's last non-empty line says every requirement is met."""
    lines = [line.strip().strip("*#.` ").upper() for line in feedback.splitlines() if line.strip()]
    return bool(lines) and lines[-1] == MET


class SelfRefine(WrapperPolicy):
    """Answer with the wrapped policy, then let it critique its draft against the conversation and revise.

    | argument | default | meaning |
    |---|---|---|
    | `base` | | the policy under test (e.g. `ChatPolicy(client)`) |
    | `rounds` | `1` | most feedback-and-revision rounds per turn |

    Calls per turn: 1 + 2 per round, fewer when a feedback finds every requirement met; all of them
    go to the model under test (no light model). `costs` holds them per turn, `stats` counts
    `revisions`, `stopped_early` (a feedback with nothing to fix) and `revision_fallbacks`.
    """

    def __init__(self, base: Policy, *, rounds: int = 1):
        super().__init__(base)
        self.rounds = check_int("SelfRefine rounds", rounds, 1)
        self._reset_state()

    def _reset_state(self) -> None:
        self.stats = {"revisions": 0, "stopped_early": 0, "revision_fallbacks": 0}

    def _turn(self, messages: list[Message]) -> Turn:
        reply = yield BaseCall(messages)
        conversation = _conversation(messages)
        for _ in range(self.rounds):
            feedback = yield BaseCall(
                [
                    {"role": "system", "content": FEEDBACK_SYSTEM},
                    {"role": "user", "content": f"Conversation:\n{conversation}\n\nDraft answer:\n{reply}"},
                ],
                rewrite=True,
            )
            if all_met(feedback):
                self.stats["stopped_early"] += 1
                break
            revised = yield BaseCall(
                [
                    {"role": "system", "content": REVISE_SYSTEM},
                    {
                        "role": "user",
                        "content": f"Conversation:\n{conversation}\n\nDraft answer:\n{reply}\n\nFeedback:\n{feedback}",
                    },
                ],
                rewrite=True,
            )
            self.stats["revisions"] += 1
            if not revised.strip():
                self.stats["revision_fallbacks"] += 1
                break
            reply = revised
        return reply

    def __repr__(self) -> str:
        return f"SelfRefine(base={self.base!r}, rounds={self.rounds!r})"

    def describe(self) -> dict[str, Any]:
        """The wrapper's settings, for logs."""
        return {"policy": "self_refine", "rounds": self.rounds}

    def protocol(self) -> dict[str, Any]:
        """Self-Refine as GraphIF's paper's baseline: one model drafts, critiques and revises."""
        return {
            "name": f"Self-Refine ({self.rounds} round{'s' if self.rounds != 1 else ''})",
            "paper": None,
            "deviations": [],
            "env": {},
        }
