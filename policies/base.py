"""The model under test, seen from the env loop: chat messages in, one reply string out.

A policy never sees the turn's spec, the constraints, or the scorer: only the chat transcript a
deployed model would see. That is why this package imports nothing from simulators, rewards or envs.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ifgym.errors import ConfigError
from ifgym.llm import Message, Usage, validate_messages
from ifgym.llm.conversation import Call, Steps, awaits_blocking, twin

_T = TypeVar("_T")


class Policy(ABC):
    """A model under test: `act(messages) -> reply`, its awaited form `aact`, and usage totals.

    Subclasses implement `act`, either as a plain method (then `aact` runs it in a worker thread)
    or once as Steps with `ifgym.llm.conversation.twin`, which gives `act` and `aact` together (as
    `ChatPolicy` and the wrappers do). `reset` clears per-episode state (none by default).
    """

    def reset(self) -> None:  # noqa: B027 - an optional hook, not abstract: most policies are stateless
        """Forget per-episode state before a new episode (stateless policies need nothing)."""

    @abstractmethod
    def act(self, messages: list[Message]) -> str:
        """Return the assistant's reply to the transcript `messages` (ending with a user turn)."""

    aact = awaits_blocking("act", in_thread=True)

    @property
    @abstractmethod
    def usage(self) -> dict[str, int]:
        """Totals so far: calls, prompt_tokens, completion_tokens (and missing_usage)."""

    @property
    def episode_usage(self) -> dict[str, int] | None:
        """The same totals counted since the last `reset()`; None for a policy that keeps no such counters.

        Rollouts store this in `episode.meta["policy_usage"]` (falling back to `usage` when None).
        """
        return None


def _at_once(function: Callable[..., _T]) -> Callable[..., Awaitable[_T]]:
    """`function` as the awaited form of a Call whose work needs no I/O: awaiting it runs `function` at once."""

    async def awaited(*args: Any, **kwargs: Any) -> _T:
        return function(*args, **kwargs)

    return awaited


class ScriptedPolicy(Policy):
    """Test double standing for a model: replies from a list (cycled) or a function of the messages.

    `reset()` restarts the list from its first reply and the per-episode counts. Usage counts
    whitespace-separated words as tokens, so rollout code that reads usage has numbers to aggregate.
    """

    def __init__(self, replies: Sequence[str] | Callable[[list[Message]], str]):
        if isinstance(replies, str):
            raise ConfigError(f"ScriptedPolicy needs a list of replies, not one string; use [{replies!r:.60}]")
        if not callable(replies):
            replies = list(replies)
            if not replies or not all(isinstance(r, str) for r in replies):
                raise ConfigError(
                    f"ScriptedPolicy needs a non-empty list of strings or a function messages -> str; "
                    f"got {replies!r:.200}"
                )
        self._replies = replies
        self._next = 0
        self._usage = Usage()
        self._episode = Usage()
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Start the scripted replies again from the first one, and the episode's counts from zero."""
        with self._lock:
            self._next = 0
            self._episode = Usage()

    @twin
    def act(self, messages: list[Message]) -> Steps[str]:
        """Return the next scripted reply (no I/O: `aact` answers at once, no thread needed)."""
        # the reply function is the caller's: called as a Call, so whatever it raises reaches the caller as is
        return (yield Call(self._answer, _at_once(self._answer), (messages,)))

    def _answer(self, messages: list[Message]) -> str:
        msgs = validate_messages(messages)
        with self._lock:
            if callable(self._replies):
                reply = self._replies(msgs)
                if not isinstance(reply, str):
                    raise ConfigError(
                        f"ScriptedPolicy's reply function must return a string; got {type(reply).__name__}"
                    )
            else:
                reply = self._replies[self._next % len(self._replies)]
                self._next += 1
            for usage in (self._usage, self._episode):
                usage.add(sum(len(m["content"].split()) for m in msgs), len(reply.split()))
        return reply

    @property
    def usage(self) -> dict[str, int]:
        """Calls and word counts so far."""
        with self._lock:
            return self._usage.to_json()

    @property
    def episode_usage(self) -> dict[str, int]:
        """Calls and word counts since the last reset."""
        with self._lock:
            return self._episode.to_json()
