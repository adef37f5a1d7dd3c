"""A policy of your own, driven as ifgym drives its own: any callable `messages -> str`, or an object with `act`/`aact`.

`ifgym eval policy=custom policy._target_=pkg.module.Name` builds the object (Hydra's `instantiate`, in
`ifgym.runner.build`) and wraps it here, so the rollouts, the wrappers (`policy.base._target_=…`) and the
records see a `Policy`: `act` and `aact` (the one the object lacks runs the other: in a worker thread, or
on an event loop of its own), `reset` when the object has one, usage it reports or else counted here
(calls, with no token counts: `missing_usage`), and a protocol that names the object's class.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from typing import Any

from ifgym.errors import ConfigError
from ifgym.llm import Message, Usage, validate_messages
from ifgym.llm.conversation import Call, Steps, twin
from ifgym.llm.loop import run_async
from ifgym.policies.base import Policy


def qualified_name(obj: Any) -> str:
    """`module.Name` of a class or function; of an instance, its class's (a partial names its function)."""
    if isinstance(obj, functools.partial):
        obj = obj.func
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        obj = type(obj)
    return f"{obj.__module__}.{obj.__qualname__}"


class PluggedPolicy(Policy):
    """A policy of your own as an ifgym `Policy`: `target` is a callable `messages -> str` or has `act`/`aact`.

    `name` is what the results table calls it (by default the target's `module.Name`). The target's
    `reset()`, `usage` and `episode_usage`, `episode_record()` and `protocol()` are used when it has them.
    """

    def __init__(self, target: Any, name: str | None = None):
        blocking, awaited = getattr(target, "act", None), getattr(target, "aact", None)
        if blocking is None and awaited is None:
            if not callable(target):
                raise ConfigError(
                    f"a policy of your own is a callable messages -> str or an object with act(messages) or "
                    f"aact(messages); got {type(target).__name__} {target!r:.200}"
                )
            if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(type(target).__call__):
                awaited = target
            else:
                blocking = target
        self.target = target
        self.name = name or qualified_name(target)
        self._blocking = blocking or (lambda messages: run_async(awaited(messages)))
        self._awaited = awaited or functools.partial(asyncio.to_thread, blocking)
        self._usage = Usage()
        self._episode = Usage()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PluggedPolicy({self.target!r:.200})"

    def reset(self) -> None:
        """The target's own reset (when it has one), and this episode's counts from zero."""
        reset = getattr(self.target, "reset", None)
        if callable(reset):
            reset()
        with self._lock:
            self._episode = Usage()

    @twin
    def act(self, messages: list[Message]) -> Steps[str]:
        """The target's reply to the transcript (its `aact` when awaited, if it has one)."""
        msgs = validate_messages(messages)
        reply = yield Call(self._blocking, self._awaited, (msgs,))
        if not isinstance(reply, str):
            raise ConfigError(f"the policy {self.name} must return a string reply; it returned {type(reply).__name__}")
        with self._lock:  # no token counts of its own: counted as calls whose usage is missing
            self._usage.add_missing()
            self._episode.add_missing()
        return reply

    @property
    def usage(self) -> dict[str, int]:
        """The target's own `usage` when it has one, else the calls counted here."""
        own = getattr(self.target, "usage", None)
        if isinstance(own, dict):
            return dict(own)
        with self._lock:
            return self._usage.to_json()

    @property
    def episode_usage(self) -> dict[str, int] | None:
        """The target's own `episode_usage` when it has one, else this episode's calls counted here."""
        own = getattr(self.target, "episode_usage", None)
        if isinstance(own, dict):
            return dict(own)
        if isinstance(getattr(self.target, "usage", None), dict):
            return None  # its lifetime totals are what it reports
        with self._lock:
            return self._episode.to_json()

    @property
    def episode_record(self) -> Any:
        """The target's own `episode_record` (what an episode leaves to inspect), or None when it has none."""
        return getattr(self.target, "episode_record", None)

    def protocol(self) -> dict[str, Any]:
        """The results table's policy line: the target's class (its own `protocol()` when it has one)."""
        own = getattr(self.target, "protocol", None)
        out = {"name": self.name, "paper": None, "deviations": [], "env": {}}
        return {**out, **own()} if callable(own) else out
