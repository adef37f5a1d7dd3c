"""What every policy wrapper shares: calling the wrapped policy and a light model, and counting the cost.

A wrapper (Truncation, GraphIF, ContextAgent) answers a turn by calling the policy it wraps (the
*base*, the model under test) and, for its own bookkeeping, a *light* model client (and a *summary*
client for summaries, the light one unless given). Each turn is
written once, as a generator that yields the requests it needs (`LightCall`, `BaseCall`, `EmbedCall`:
what a wrapper asks for, which the accounting reads) and receives their results. `act` is written
once with `ifgym.llm.conversation.twin`: each request becomes the Steps that serve it (`_serve`: a
`Call` to a client or the embedder, or the base policy's own steps) and are counted, so `act` makes
every call blocking and `aact` awaits each; the sync and async paths cannot drift apart.

Accounting (per turn, in `policy.costs`): calls, prompt and completion tokens per role (`base`,
`light`), the context tokens sent to the model under test (`context_tokens`), the prompt tokens of
base calls that revise a draft (`rewrite_tokens`) and wall time. Token counts are the backend's
own (`usage` of an HTTP server, llama.cpp's tokenizer for the embedded model); a call whose
response carried no usage is counted with the client's `count_tokens` where it has one, else in
whitespace words, and flagged in `estimated_calls`.

**ACT** (average context tokens) is defined here, once, for every policy: the mean over turns of
the prompt tokens of the base calls that produce the answer from the dialogue (`BaseCall` with
`rewrite=False`): the transcript, truncated window or tree context the model under test is given.
A call that revises a draft the model already wrote (GraphIF's rewrite, `rewrite=True`) is a
second pass over the answer, not dialogue context: its prompt tokens go to `rewrite_tokens`, and
into the base role's prompt tokens like every call. Light-model tokens are never context tokens.

Per episode: `reset()` clears `costs`, and `episode_usage` (what rollouts store in
`episode.meta["policy_usage"]`) counts from there; `usage` keeps the lifetime totals.
`episode_record()` is what an episode leaves to inspect (`episode.meta["policy_trace"]`): the
settings, the per-turn costs and the counters of defaults taken (`stats`), plus each wrapper's
own structure (GraphIF's graph, Context-Agent's forest).

Standing instructions: a wrapper that writes its own system message for a base call (GraphIF's
rewrite, Context-Agent's summaries) puts into it what the base policy would have used for the
transcript: the env's system messages, or else the base policy's own `system_prompt`. So a
`ChatPolicy(system_prompt=...)` keeps its prompt in every call, as it does unwrapped.
"""

from __future__ import annotations

import asyncio
import functools
import time
from abc import abstractmethod
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import Completion, Message, validate_messages
from ifgym.llm.conversation import Call, Steps, steps_of, twin, word_count
from ifgym.policies.base import Policy

BASE, LIGHT = "base", "light"
ROLES = (BASE, LIGHT)


# ---------------------------------------------------------------------------------------------
# What a turn asks for
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LightCall:
    """A call to the light model; the turn receives the Completion.

    `summary=True` sends it to the wrapper's summary model (the light model unless one was given);
    both count in the light role's cost.
    """

    messages: list[Message]
    summary: bool = False


@dataclass(frozen=True)
class BaseCall:
    """A call to the wrapped policy; the turn receives the reply string.

    `rewrite=True` marks a call that revises a draft rather than answering from the dialogue: its
    prompt tokens count as `rewrite_tokens`, not as context tokens (see ACT above).
    """

    messages: list[Message]
    rewrite: bool = False


@dataclass(frozen=True)
class EmbedCall:
    """Embed texts; the turn receives an (n, dim) float array (rows L2-normalised)."""

    texts: list[str]


Request = LightCall | BaseCall | EmbedCall
Turn = Generator[Request, Any, str]


# ---------------------------------------------------------------------------------------------
# Cost records
# ---------------------------------------------------------------------------------------------


def _zeros() -> dict[str, int]:
    return dict.fromkeys(ROLES, 0)


@dataclass
class TurnCost:
    """What one turn cost: calls and tokens per role, context and rewrite tokens sent to the base, wall time.

    `seconds` is the wall time of the policy's `act`/`aact` for the turn: its model calls and
    bookkeeping, nothing of the env or the scoring.
    """

    turn: int
    calls: dict[str, int] = field(default_factory=_zeros)
    prompt_tokens: dict[str, int] = field(default_factory=_zeros)
    completion_tokens: dict[str, int] = field(default_factory=_zeros)
    context_tokens: int = 0
    rewrite_tokens: int = 0
    estimated_calls: int = 0
    seconds: float = 0.0

    @property
    def total_calls(self) -> int:
        """Model calls of every role this turn."""
        return sum(self.calls.values())

    def to_json(self) -> dict[str, Any]:
        """A plain dict for logs."""
        return {
            "turn": self.turn,
            "calls": dict(self.calls),
            "prompt_tokens": dict(self.prompt_tokens),
            "completion_tokens": dict(self.completion_tokens),
            "context_tokens": self.context_tokens,
            "rewrite_tokens": self.rewrite_tokens,
            "estimated_calls": self.estimated_calls,
            "seconds": self.seconds,
        }


def cost_summary(costs: Sequence[TurnCost]) -> dict[str, float]:
    """Per-turn means over `costs`: calls (all and per role), tokens per role, ACT, rewrite tokens, seconds.

    `ACT` is the mean context tokens sent to the model under test per turn (see the module
    docstring); `rewrite_tokens_per_turn` the mean prompt tokens of draft revisions. An empty
    list gives NaN means (no turn, no average), never zeros that look like a measurement.
    """
    n = len(costs)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / n if n else float("nan")

    out: dict[str, float] = {"turns": n, "calls_per_turn": mean([c.total_calls for c in costs])}
    for role in ROLES:
        out[f"{role}_calls_per_turn"] = mean([c.calls[role] for c in costs])
        out[f"{role}_prompt_tokens_per_turn"] = mean([c.prompt_tokens[role] for c in costs])
        out[f"{role}_completion_tokens_per_turn"] = mean([c.completion_tokens[role] for c in costs])
    out["ACT"] = mean([c.context_tokens for c in costs])
    out["rewrite_tokens_per_turn"] = mean([c.rewrite_tokens for c in costs])
    out["seconds_per_turn"] = mean([c.seconds for c in costs])
    out["estimated_calls"] = sum(c.estimated_calls for c in costs)
    return out


def check_int(name: str, value: object, minimum: int) -> int:
    """Return `value` if it is an int >= minimum, else raise ConfigError quoting it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return value


def check_choice(name: str, value: object, allowed: Sequence[str]) -> str:
    """Return `value` if it is one of `allowed`, else raise UnknownNameError with a suggestion."""
    if value not in allowed:
        raise UnknownNameError(name, str(value), allowed)
    return str(value)


# ---------------------------------------------------------------------------------------------
# The wrapper base class
# ---------------------------------------------------------------------------------------------


class WrapperPolicy(Policy):
    """A policy around another policy (`base`), with an optional light model and per-turn cost records.

    Subclasses implement `_turn(messages)` (a generator of requests, returning the reply) and
    `_reset_state()`. `costs` holds this episode's TurnCost records, `episode_usage` their totals;
    `usage` holds lifetime totals; `stats` the counters of defaults taken (none here).
    """

    def __init__(self, base: Policy, light: Any = None, *, embedder: Any = None, summary: Any = None):
        if not (hasattr(base, "act") and hasattr(base, "aact") and hasattr(base, "reset")):
            raise ConfigError(
                f"{type(self).__name__} wraps a policy (e.g. ChatPolicy(client)) with act/aact/reset; got {base!r:.200}"
            )
        self.base = base
        self.light = light
        self.summary = summary if summary is not None else light
        self.embedder = embedder
        self.costs: list[TurnCost] = []
        self.stats: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._cost: TurnCost | None = None

    # -- episode state --------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the episode: the base policy's state, this wrapper's state and the per-turn costs."""
        self.base.reset()
        self.costs = []
        self._reset_state()

    @abstractmethod
    def _reset_state(self) -> None:
        """Clear the subclass's per-episode state."""

    @abstractmethod
    def _turn(self, messages: list[Message]) -> Turn:
        """Yield the calls this turn needs and return the reply."""

    # -- acting ---------------------------------------------------------------------------------

    def _begin(self, messages: list[Message]) -> list[Message]:
        msgs = validate_messages(messages)
        if msgs[-1]["role"] != "user":
            raise DataFormatError(
                f"{type(self).__name__} answers a transcript that ends with a user message; "
                f"the last message has role {msgs[-1]['role']!r}"
            )
        self._cost = TurnCost(turn=len(self.costs))
        return msgs

    def _end(self, started: float) -> None:
        cost, self._cost = self._cost, None
        cost.seconds = time.perf_counter() - started
        self.costs.append(cost)
        _add_cost(self._totals, cost)

    @twin
    def act(self, messages: list[Message]) -> Steps[str]:
        """Answer the transcript: this turn's requests served one after the other (`aact` awaits each call)."""
        msgs = self._begin(messages)
        started = time.perf_counter()
        reply = yield from self._serving(self._turn(msgs))
        self._end(started)
        return reply

    def _serving(self, turn: Turn) -> Steps[str]:
        """The turn as Steps: each request it yields served (`_serve`) and the result sent back in."""
        try:
            request = next(turn)
        except StopIteration as done:
            return done.value
        while True:
            answer = yield from self._serve(request)
            try:
                request = turn.send(answer)
            except StopIteration as done:
                return done.value

    def _serve(self, request: Request) -> Steps[Any]:
        """The Steps that answer one request of a turn, counted in this turn's cost."""
        if isinstance(request, LightCall):
            client = self._light_client(request)
            completion = yield Call(client.chat, client.achat, (request.messages,))
            return self._count_light(client, request.messages, completion)
        if isinstance(request, BaseCall):
            before = getattr(self.base, "last", None)
            reply = yield from steps_of(self.base, "act", request.messages)
            return self._count_base(request, reply, before)
        # sentence-transformers is CPU-bound: awaited, it runs in a worker thread to keep the event loop free
        return (yield Call(self._embed, functools.partial(asyncio.to_thread, self._embed), (request.texts,)))

    def _light_client(self, request: LightCall) -> Any:
        client = self.summary if request.summary else self.light
        if client is None:
            raise ConfigError(f"{type(self).__name__} has no {'summary' if request.summary else 'light'} model client")
        return client

    def _embed(self, texts: list[str]) -> Any:
        if self.embedder is None:
            raise ConfigError(f"{type(self).__name__} has no embedder")
        return self.embedder.encode(texts)

    # -- counting -------------------------------------------------------------------------------

    def _count(self, role: str, prompt: int, completion: int, estimated: bool) -> None:
        cost = self._cost
        cost.calls[role] += 1
        cost.prompt_tokens[role] += prompt
        cost.completion_tokens[role] += completion
        cost.estimated_calls += int(estimated)

    def _count_light(self, client: Any, messages: list[Message], out: Completion) -> Completion:
        if getattr(out, "usage_reported", True):
            self._count(LIGHT, out.prompt_tokens, out.completion_tokens, False)
        else:
            prompt = _tokens_or_none(client, messages)
            self._count(LIGHT, prompt if prompt is not None else word_count(messages), len(out.text.split()), True)
        return out

    def _count_base(self, request: BaseCall, reply: str, before: Any) -> str:
        messages = request.messages
        if not isinstance(reply, str):
            raise ConfigError(f"the wrapped policy must return a string; got {type(reply).__name__}")
        last = getattr(self.base, "last", None)
        if isinstance(last, Completion) and last is not before and last.usage_reported:
            prompt, completion, estimated = last.prompt_tokens, last.completion_tokens, False
        else:  # a policy without completions (ScriptedPolicy) or a response without usage
            counted = _tokens_or_none(getattr(self.base, "client", None), messages)
            prompt = counted if counted is not None else word_count(messages)
            completion, estimated = len(reply.split()), True
        self._count(BASE, prompt, completion, estimated)
        if request.rewrite:
            self._cost.rewrite_tokens += prompt
        else:
            self._cost.context_tokens += prompt
        return reply

    # -- standing instructions ------------------------------------------------------------------

    def standing_instructions(self, system: list[Message]) -> list[str]:
        """What the base policy would stand by for this transcript: the env's system texts, else its own prompt.

        For system messages a wrapper writes itself; the rule is ChatPolicy's (an env's own
        system message wins over the policy's `system_prompt`).
        """
        texts = [m["content"] for m in system if m["content"].strip()]
        own = getattr(self.base, "system_prompt", None)
        if not texts and isinstance(own, str) and own.strip():
            texts = [own]
        return texts

    # -- reports --------------------------------------------------------------------------------

    def cost_summary(self) -> dict[str, float]:
        """Per-turn means over this episode so far (see `cost_summary`)."""
        return cost_summary(self.costs)

    @property
    def usage(self) -> dict[str, int]:
        """Lifetime totals of this wrapper: all calls and tokens, then per role, context and rewrite tokens, turns."""
        return _usage_dict(self._totals)

    @property
    def episode_usage(self) -> dict[str, int]:
        """The same totals as `usage`, counted since the last `reset()` (this episode's)."""
        totals: dict[str, int] = {}
        for cost in self.costs:
            _add_cost(totals, cost)
        return _usage_dict(totals)

    def describe(self) -> dict[str, Any]:
        """The wrapper's settings, for logs."""
        return {"policy": type(self).__name__}

    def protocol(self) -> dict[str, Any]:
        """The setup as the results table names it: `name`, the `paper` it follows, `deviations`, `env`.

        `deviations` lists in words each way the setup differs from that paper's; `env` holds the
        env settings the paper's runs use (e.g. `{"context": "own"}`), which the report compares
        with the env's protocol; any other key is a setting (a plain value), shown beside the name.
        `ifgym eval` keeps it in run.json and the summary as `policy_protocol`, printed under the
        env's protocol lines. A wrapper that follows no paper keeps this default.
        """
        return {
            "name": str(self.describe().get("policy", type(self).__name__)),
            "paper": None,
            "deviations": [],
            "env": {},
        }

    def episode_record(self) -> dict[str, Any]:
        """What this episode leaves to inspect: settings, per-turn costs, counters of defaults taken (plain JSON)."""
        return {
            "policy": self.describe(),
            "costs": [c.to_json() for c in self.costs],
            "counters": dict(self.stats),
        }


# (index into a cost's per-role counts, role, the totals' key): the keys made once, not per turn
_PER_ROLE_KEYS = tuple(
    (i, role, f"{role}_{kind}")
    for role in ROLES
    for i, kind in enumerate(("calls", "prompt_tokens", "completion_tokens"))
)


def _add_cost(totals: dict[str, int], cost: TurnCost) -> None:
    per_role = (cost.calls, cost.prompt_tokens, cost.completion_tokens)
    for i, role, key in _PER_ROLE_KEYS:
        totals[key] = totals.get(key, 0) + per_role[i][role]
    for key, value in (
        ("context_tokens", cost.context_tokens),
        ("rewrite_tokens", cost.rewrite_tokens),
        ("missing_usage", cost.estimated_calls),
        ("turns", 1),
    ):
        totals[key] = totals.get(key, 0) + value


def _usage_dict(t: Mapping[str, int]) -> dict[str, int]:
    out = {
        "calls": sum(t.get(f"{r}_calls", 0) for r in ROLES),
        "prompt_tokens": sum(t.get(f"{r}_prompt_tokens", 0) for r in ROLES),
        "completion_tokens": sum(t.get(f"{r}_completion_tokens", 0) for r in ROLES),
        "missing_usage": t.get("missing_usage", 0),
    }
    for role in ROLES:
        for kind in ("calls", "prompt_tokens", "completion_tokens"):
            out[f"{role}_{kind}"] = t.get(f"{role}_{kind}", 0)
    out["context_tokens"] = t.get("context_tokens", 0)
    out["rewrite_tokens"] = t.get("rewrite_tokens", 0)
    out["turns"] = t.get("turns", 0)
    return out


def _tokens_or_none(client: Any, messages: list[Message]) -> int | None:
    counter = getattr(client, "count_tokens", None)
    return counter(messages) if callable(counter) else None


# ---------------------------------------------------------------------------------------------
# Transcript helpers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """One earlier turn of the transcript: the user's message and the answer kept for it."""

    turn: int  # 1-based
    user: str
    assistant: str


def split_transcript(messages: list[Message]) -> tuple[list[Message], list[Exchange], str]:
    """(system messages, earlier exchanges, current user message) of a transcript ending with a user turn.

    A turn is a user message with the assistant messages after it (joined when there are several;
    empty when there are none).
    """
    system = [m for m in messages if m["role"] == "system"]
    exchanges: list[Exchange] = []
    users: list[str] = []
    answers: list[list[str]] = []
    for m in messages:
        if m["role"] == "user":
            users.append(m["content"])
            answers.append([])
        elif m["role"] == "assistant" and users:
            answers[-1].append(m["content"])
    for i, (user, said) in enumerate(zip(users[:-1], answers[:-1], strict=True), start=1):
        exchanges.append(Exchange(i, user, "\n\n".join(said)))
    return system, exchanges, users[-1]


def clip(text: str, chars: int) -> str:
    """`text` cut to at most `chars` characters, marking the cut."""
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    return text if len(text) <= chars else text[: max(chars - 1, 0)].rstrip() + "…"
