"""What flows through a model call, whatever the backend: messages, completions, usage, conversations.

`Usage` and `count_episode_usage` count calls and tokens (per client, and per episode by role);
`converse`/`aconverse` drive a `Conversation` (one generator for sync and async use);
`CannedClient` is the test double every room can use in place of a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import re
import threading
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from ifgym.errors import DataFormatError, did_you_mean

Message = dict[str, str]

_T = TypeVar("_T")
_Request = TypeVar("_Request")
_Answer = TypeVar("_Answer")

# A conversation with a model, written once for sync and async use: a generator that yields the
# messages of each call, receives the model's text through send(), and returns its result.
Conversation = Generator[list[Message], str, _T]

ROLES_IN_MESSAGES = ("system", "user", "assistant")


@dataclass
class Usage:
    """Running totals for one client (one role).

    `missing_usage` counts calls whose response carried no token counts (counted as 0 tokens);
    `retries` the HTTP requests sent again after a failed attempt (llm/http.py's retry
    rules), failed calls included; `cleaned` the replies and messages whose lone surrogates
    were replaced; `truncated` the replies cut at `max_reply_chars`; `max_tokens_stops` the replies
    the model stopped because they reached `max_tokens` (finish_reason "length"): cut mid-answer;
    `cache_hits` the calls answered from the call cache (llm/cache.py) instead of the model, not
    counted in `calls` or tokens.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    missing_usage: int = 0
    retries: int = 0
    cleaned: int = 0
    truncated: int = 0
    max_tokens_stops: int = 0
    cache_hits: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one call and its tokens."""
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def add_missing(self) -> None:
        """Count one call whose response reported no usage."""
        self.calls += 1
        self.missing_usage += 1

    def add_reported(self, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Count one call from the token counts its response reported (both None: it reported none)."""
        if prompt_tokens is None and completion_tokens is None:
            self.add_missing()
        else:
            self.add(prompt_tokens or 0, completion_tokens or 0)

    def bump(self, **counts: int) -> None:
        """Add to the named counters, e.g. `bump(retries=2)`."""
        for name, n in counts.items():
            setattr(self, name, getattr(self, name) + n)

    def to_json(self) -> dict[str, int]:
        """Return the totals as a plain dict (for logs and `Policy.usage`); `cache_hits` only when there were any."""
        totals = {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "missing_usage": self.missing_usage,
            "retries": self.retries,
            "cleaned": self.cleaned,
            "truncated": self.truncated,
            "max_tokens_stops": self.max_tokens_stops,
        }
        if self.cache_hits:  # absent without a cache, so records of runs without one read as they always did
            totals["cache_hits"] = self.cache_hits
        return totals


@dataclass(frozen=True)
class Completion:
    """One chat completion: the text and what it cost.

    `usage_reported` is False when the backend sent no token counts (then both counts are 0 and
    callers that need a number use `count_tokens` or an estimate). `retries` counts the HTTP
    requests sent again for this call; `cleaned` is the number of lone surrogates replaced in the
    text (U+FFFD); `truncated` says the text was cut at `max_reply_chars`; `finish_reason` is the
    backend's ("stop", or "length" when the reply reached `max_tokens` and was cut there).
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""
    finish_reason: str | None = None
    usage_reported: bool = True
    retries: int = 0
    cleaned: int = 0
    truncated: bool = False
    # asked with top_logprobs=N: per answer token, its N likeliest alternatives as (token, log-probability)
    # pairs; None when not asked or when the backend sent none
    top_logprobs: tuple[tuple[tuple[str, float], ...], ...] | None = None


def read_top_logprobs(choice: Any) -> tuple[tuple[tuple[str, float], ...], ...] | None:
    """The `top_logprobs` of an OpenAI-shaped choice (`choice.logprobs.content[i].top_logprobs`), None if absent.

    A token without alternatives listed keeps its own (token, logprob) pair; entries that are not
    {token, logprob} objects are skipped.
    """
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    out = []
    for entry in content:
        if not isinstance(entry, dict):
            continue
        alternatives = entry.get("top_logprobs") or [entry]
        pairs = tuple(
            (str(a["token"]), float(a["logprob"]))
            for a in alternatives
            if isinstance(a, dict) and "token" in a and isinstance(a.get("logprob"), int | float)
        )
        out.append(pairs)
    return tuple(out) if any(out) else None


class ChatClient(Protocol):
    """What every room needs from a chat client: `LLMClient` and `CannedClient` both fit."""

    model: str
    usage: Usage

    def chat(self, messages: list[Message], **overrides: Any) -> Completion:
        """Return one completion; `overrides` may set temperature, top_p, max_tokens, seed."""
        ...

    async def achat(self, messages: list[Message], **overrides: Any) -> Completion:
        """Async twin of chat."""
        ...


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_surrogates(text: str) -> tuple[str, int]:
    """`text` with every lone surrogate (unencodable as UTF-8) replaced by U+FFFD, and how many were replaced."""
    if text.isascii():  # most text; a flag of the string, where the search reads every character
        return text, 0
    return _SURROGATE.subn("\ufffd", text)


# The usage of the episode in progress, by role (set by the runner around each episode; see count_episode_usage).
_EPISODE_USAGE: contextvars.ContextVar[dict[str, Usage] | None] = contextvars.ContextVar(
    "ifgym_episode_usage", default=None
)


@contextlib.contextmanager
def count_episode_usage() -> Iterator[dict[str, Usage]]:
    """Count every client call made inside the block (and in the tasks and threads it starts) by role.

    The runner wraps each episode in it, so an episode's record carries the calls, tokens and
    retries of its policy, user and judge, and a run's usage is the sum over its records.
    """
    usage: dict[str, Usage] = {}
    token = _EPISODE_USAGE.set(usage)
    try:
        yield usage
    finally:
        _EPISODE_USAGE.reset(token)


def word_count(messages: Sequence[Mapping[str, str]]) -> int:
    """Whitespace-separated words over the messages' contents: the token estimate of last resort."""
    return sum(len(str(m.get("content", "")).split()) for m in messages)


def validate_messages(messages: object) -> list[Message]:
    """Check a chat transcript and return it as a list of plain dicts.

    Raises DataFormatError naming the first bad message: the list must be non-empty and every
    item a mapping with `role` in system/user/assistant and a string `content`.
    """
    # `type(...) is` first: a list of dicts (every call's) skips the slower checks against the abstract classes
    listed = type(messages) is list or not isinstance(messages, (str, bytes)) and isinstance(messages, Sequence)
    if not listed or not messages:
        raise DataFormatError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r:.200}"
        )
    out: list[Message] = []
    for i, m in enumerate(messages):
        if type(m) is not dict and not isinstance(m, Mapping):
            raise DataFormatError(f"messages[{i}] must be a dict with 'role' and 'content', got {m!r:.200}")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES_IN_MESSAGES:
            raise DataFormatError(
                f"messages[{i}] has role {role!r}; allowed: {', '.join(ROLES_IN_MESSAGES)}."
                + did_you_mean(str(role), ROLES_IN_MESSAGES)
            )
        if not isinstance(content, str):
            raise DataFormatError(f"messages[{i}] content must be a string, got {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out


def converse(conversation: Generator[_Request, _Answer, _T], call: Callable[[_Request], _Answer]) -> _T:
    """Run `conversation` to its end with blocking calls and return its result.

    Each request it yields (for a `Conversation`, the messages of the next model call) goes to
    `call`, and the answer is sent back in. The call stays outside the `try`: a StopIteration
    escaping a client must propagate, not pass for the conversation's own end.
    """
    try:
        request = next(conversation)
    except StopIteration as done:
        return done.value
    while True:
        answer = call(request)
        try:
            request = conversation.send(answer)
        except StopIteration as done:
            return done.value


async def aconverse(
    conversation: Generator[_Request, _Answer, _T], acall: Callable[[_Request], Awaitable[_Answer]]
) -> _T:
    """Async twin of `converse`: each call is awaited (also kept outside the `try`, for the same reason)."""
    try:
        request = next(conversation)
    except StopIteration as done:
        return done.value
    while True:
        answer = await acall(request)
        try:
            request = conversation.send(answer)
        except StopIteration as done:
            return done.value


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})


class Call:
    """One thing a step needs from outside, in both forms: `blocking(*args, **kwargs)` or awaited `awaited(…)`.

    `Steps` yield Calls; `run_steps` makes each blocking, `arun_steps` awaits each, so a step is written
    once (see `twin`). `Call.of(obj, "score", …)` asks any object with `score` and `ascore`. A plain
    slotted class, not a dataclass: several are made every turn, and a frozen dataclass's init costs more.
    """

    __slots__ = ("args", "awaited", "blocking", "kwargs")

    def __init__(
        self,
        blocking: Callable[..., Any],
        awaited: Callable[..., Awaitable[Any]],
        args: tuple = (),
        kwargs: Mapping[str, Any] = _NO_KWARGS,
    ):
        self.blocking, self.awaited, self.args, self.kwargs = blocking, awaited, args, kwargs

    def __repr__(self) -> str:
        return f"Call({self.blocking!r}, {self.awaited!r}, {self.args!r}, {dict(self.kwargs)!r})"

    @classmethod
    def of(cls, obj: Any, name: str, *args: Any, **kwargs: Any) -> Call:
        """`obj.<name>(…)`, blocking, or `obj.a<name>(…)`, awaited.

        An object with only `<name>` (a duck-typed scorer, say) is awaited in a worker thread, as a protocol
        base's default does (`awaits_blocking`).
        """
        blocking = getattr(obj, name)
        awaited = getattr(obj, "a" + name, None) or functools.partial(asyncio.to_thread, blocking)
        return cls(blocking, awaited, args, kwargs)


# A step written once for sync and async use: a generator that yields the Calls it needs, receives each
# one's result through send(), and returns the step's result.
Steps = Generator[Call, Any, _T]


def run_steps(steps: Steps[_T]) -> _T:
    """Run `steps` to its end, each Call blocking."""
    return converse(steps, _blocking)


async def arun_steps(steps: Steps[_T]) -> _T:
    """Run `steps` to its end, each Call awaited."""
    return await aconverse(steps, _awaited)


def _blocking(call: Call) -> Any:
    return call.blocking(*call.args, **call.kwargs)


def _awaited(call: Call) -> Awaitable[Any]:
    return call.awaited(*call.args, **call.kwargs)  # the awaitable itself: no coroutine of its own per call


def asking(
    conversation: Generator[list[Message], Any, _T],
    ask: Callable[[list[Message]], Call],
    read: Callable[[Any], Any] | None = None,
) -> Steps[_T]:
    """A Conversation as Steps: each list of messages it yields becomes the Call `ask(messages)`.

    The Call's result (through `read`, e.g. taking a completion's text) is sent back in.
    """
    try:
        messages = next(conversation)
    except StopIteration as done:
        return done.value
    while True:
        answer = yield ask(messages)
        try:
            messages = conversation.send(answer if read is None else read(answer))
        except StopIteration as done:
            return done.value


def chat_call(client: ChatClient, **overrides: Any) -> Callable[[list[Message]], Call]:
    """`ask` for `asking`: each list of messages a chat call to `client` with `overrides`."""
    return lambda messages: Call(client.chat, client.achat, (messages,), overrides)


class twin:  # noqa: N801 - used as a decorator, like property
    """Write a method once, as `Steps`: the class gets `name` (each Call blocking) and `a<name>` (each awaited).

        class Judge:
            @twin
            def judge(self, reply):
                completion = yield Call(self.client.chat, self.client.achat, ([...],))
                return completion.text

    gives `judge(reply)` and `await ajudge(reply)`; `steps_of(obj, "judge", reply)` is the Steps themselves,
    for a step that calls another. A subclass that writes `judge` plainly (a blocking method) gets an
    `ajudge` that runs it at once, not the steps it replaced (one that waits on I/O holds the event
    loop meanwhile: write it with `twin`, or write `ajudge` too).
    """

    def __init__(self, steps: Callable[..., Steps[Any]]):
        if not inspect.isgeneratorfunction(steps):
            raise TypeError(f"@twin needs a generator function that yields Calls; {steps.__qualname__} is not one")
        self.steps = steps

    def __set_name__(self, owner: type, name: str) -> None:
        steps = self.steps

        @functools.wraps(steps)
        def blocking(obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            return run_steps(steps(obj, *args, **kwargs))

        @functools.wraps(steps)
        async def awaited(obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            if getattr(type(obj), name) is not blocking:  # a subclass wrote `name` plainly: that is the step now
                return getattr(obj, name)(*args, **kwargs)
            return await arun_steps(steps(obj, *args, **kwargs))

        awaited.__name__, awaited.__qualname__ = "a" + name, f"{owner.__qualname__}.a{name}"
        awaited.__doc__ = f"Async twin of `{name}` (the same steps, each call awaited)."
        blocking.__steps__ = awaited.__steps__ = steps  # type: ignore[attr-defined]
        # the signature read once: gymnasium's env checker reads `reset`'s on every env `gym.make` checks, and
        # inspect.signature would otherwise follow `__wrapped__` to the steps and parse them each time
        blocking.__signature__ = awaited.__signature__ = inspect.signature(steps)  # type: ignore[attr-defined]
        setattr(owner, name, blocking)
        setattr(owner, "a" + name, awaited)


def awaits_blocking(name: str, *, in_thread: bool = False) -> Callable[..., Awaitable[Any]]:
    """An awaited `a<name>` that runs the blocking `<name>`: a protocol base's default for plainly written subclasses.

    `in_thread`: in a worker thread (`asyncio.to_thread`), for a blocking form that may wait on I/O (a
    policy or a scorer of your own), so other episodes go on meanwhile. A subclass that writes `<name>`
    with `twin` gets its own `a<name>` (the same steps, each call awaited) in place of this one.
    """

    async def awaited(self: Any, *args: Any, **kwargs: Any) -> Any:
        blocking = getattr(self, name)
        if in_thread:
            return await asyncio.to_thread(blocking, *args, **kwargs)
        return blocking(*args, **kwargs)

    awaited.__name__ = awaited.__qualname__ = "a" + name
    where = "in a worker thread" if in_thread else "at once"
    awaited.__doc__ = (
        f"Awaited `{name}`: runs the blocking `{name}` {where} (a `{name}` written with `twin` replaces it)."
    )
    return awaited


def steps_of(obj: Any, name: str, *args: Any, **kwargs: Any) -> Steps[Any]:
    """The Steps of `obj.<name>(…)`: its own when it was written with `twin`, else one Call of `name`/`a<name>`.

    An instance's own `name` or `a<name>` (a spy set on it, say) is called, not passed by: one Call then.
    """
    steps = getattr(getattr(type(obj), name, None), "__steps__", None)
    if steps is not None and not _set_on(obj, name):
        return steps(obj, *args, **kwargs)
    return _one(Call.of(obj, name, *args, **kwargs))


def _one(call: Call) -> Steps[Any]:
    return (yield call)


def _set_on(obj: Any, name: str) -> bool:
    """Whether `obj` itself (not its class) holds `name` or `a<name>`."""
    own = getattr(obj, "__dict__", None)
    return bool(own) and (name in own or "a" + name in own)


class CannedClient:
    """Test double for LLMClient: answers from a list (cycled) or a function of the messages.

    Stands in for a model server in unit tests and dry runs; same interface as LLMClient.
    """

    def __init__(
        self,
        replies: Sequence[str] | Callable[[list[Message]], str],
        *,
        role: str = "policy",
        model: str = "canned",
    ):
        if isinstance(replies, str) or (not callable(replies) and not replies):
            raise ValueError("CannedClient needs a non-empty list of replies or a function messages -> str")
        self._replies = replies
        self._next = 0
        self._lock = threading.Lock()
        self.role = role
        self.model = model
        self.usage = Usage()
        self.requests: list[list[Message]] = []

    def chat(self, messages: list[Message], **overrides: Any) -> Completion:
        """Return the next canned reply."""
        with self._lock:
            self.requests.append([dict(m) for m in messages])
            if callable(self._replies):
                text = self._replies(messages)
            else:
                text = self._replies[self._next % len(self._replies)]
                self._next += 1
            prompt = word_count(messages)
            completion = len(text.split())
            self.usage.add(prompt, completion)
        return Completion(text, prompt, completion, self.model, "stop")

    def count_tokens(self, messages: list[Message]) -> int:
        """Whitespace words of the messages: the same unit this double reports as usage."""
        return word_count(validate_messages(messages))

    async def achat(self, messages: list[Message], **overrides: Any) -> Completion:
        """Async twin of chat (answers at once)."""
        await asyncio.sleep(0)
        return self.chat(messages, **overrides)

    def __deepcopy__(self, memo: dict) -> CannedClient:
        # A client is a handle on a shared resource (server, model, usage counter); gym.make deep-copies
        # env kwargs, and every copy must keep talking through the same client.
        return self

    def describe(self) -> dict[str, Any]:
        """Describe this client for logs."""
        return {"role": self.role, "backend": "canned", "model": self.model}
