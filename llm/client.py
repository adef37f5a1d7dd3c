"""`LLMClient`, the one client for every model call, and `make_client`.

A client serves one role (policy, user, judge): its own concurrency limit and usage counter. It
validates and cleans the messages, sends them to its backend (a served model through the `openai`
SDK, llm/served.py, or the embedded model), and counts, cleans
and cuts the reply into a Completion; every call is also counted in the running episode's usage.
With a `cache` (llm/cache.py) a call made before is answered from it and counted as a cache hit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ifgym.errors import ConfigError, NoChoicesError, ReplyTooLongError
from ifgym.llm.cache import CallCache
from ifgym.llm.config import LLMConfig, config_from_mapping, gen_params
from ifgym.llm.conversation import (
    _EPISODE_USAGE,
    ChatClient,
    Completion,
    Message,
    Usage,
    clean_surrogates,
    read_top_logprobs,
    validate_messages,
)
from ifgym.llm.embedded import EmbeddedBackend, embedded_extra


class LLMClient:
    """A chat model for one role (policy, user or judge): sync + async, concurrency limit, usage.

    With `config.base_url` it talks to an OpenAI-compatible server through the `openai` SDK
    (llm/served.py: the SDK's retries, except for a request that timed out); without it, it runs
    the embedded llama.cpp model in process, and a `model` named without a `base_url` is refused
    (no served model is silently replaced by the embedded one). Every failure is a BackendError that names the fix;
    `config_key` is where the settings were given (e.g. `policy.llm`), so a message names
    `policy.llm.timeout` rather than `timeout`. With `cache` (a CallCache), calls it holds are
    answered from it (`usage.cache_hits`) and new ones stored.
    """

    def __init__(
        self,
        config: LLMConfig,
        role: str = "policy",
        config_key: str | None = None,
        cache: CallCache | None = None,
    ):
        if not isinstance(config, LLMConfig):
            raise ConfigError(f"LLMClient needs an LLMConfig (or use make_client with a mapping); got {config!r}")
        if not isinstance(role, str) or not role.strip():
            raise ConfigError(f"role must be a non-empty string such as 'policy', 'user' or 'judge'; got {role!r}")
        if cache is not None and not isinstance(cache, CallCache):
            raise ConfigError(f"cache must be a CallCache (ifgym.llm.CallCache(folder)) or None; got {cache!r}")
        self.config = config
        self.role = role
        self.config_key = config_key
        self.cache = cache
        self.usage = Usage()
        self._usage_lock = threading.Lock()
        self._sync_limit = threading.BoundedSemaphore(config.concurrency)
        # asyncio primitives belong to one event loop: one semaphore (and SDK client) per loop.
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[asyncio.Semaphore, Any]]
        self._per_loop = weakref.WeakKeyDictionary()
        self._per_loop_lock = threading.Lock()
        self._last_loop: tuple[weakref.ref[asyncio.AbstractEventLoop], tuple[asyncio.Semaphore, Any]] | None = None
        self._embedded: EmbeddedBackend | None = None
        self._http: Any = None  # a ServedBackend (llm/served.py, which imports the SDK) for a served model
        self._extra = dict(config.extra)
        if config.base_url is None:
            if config.model != LLMConfig.model:
                model, url = _key(config_key, "model"), _key(config_key, "base_url")
                raise ConfigError(
                    f"{model}={config.model!r} names a served model but {url} is not set: set "
                    f"{url}=http://HOST:PORT/v1 (ifgym reads no OPENAI_BASE_URL), or leave {model} unset for the "
                    f"embedded model ({_key(config_key, 'embedded_model')})"
                )
            self._extra = embedded_extra(self._extra, config_key)  # checked now, not at the first call
            self._embedded = EmbeddedBackend(config.embedded_model, n_ctx=config.n_ctx, n_threads=config.n_threads)
            self.model = self._embedded.name
        else:
            from ifgym.llm.served import ServedBackend

            self._http = ServedBackend(config, self._tally, config_key)
            self.model = config.model

    def __deepcopy__(self, memo: dict) -> LLMClient:
        # A client is a handle on a shared resource (server, model, usage counter); gym.make deep-copies
        # env kwargs, and every copy must keep talking through the same client.
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (e.g. into a Ray worker) as its settings: the copy has its own connections, limits and usage
        return (LLMClient, (self.config, self.role, self.config_key, self.cache))

    def __repr__(self) -> str:  # the endpoint's host only: a base_url may carry user:password@ or ?key=
        return f"LLMClient(role={self.role!r}, {model_place(self)})"

    @property
    def backend(self) -> str:
        """'http' or 'embedded'."""
        return "embedded" if self._embedded is not None else "http"

    def describe(self) -> dict[str, Any]:
        """Return the configuration for logging: every LLMConfig field plus role and backend, never a key."""
        cfg = dataclasses.asdict(self.config)
        return {"role": self.role, "backend": self.backend, **cfg, "model": self.model}

    # -- public calls ---------------------------------------------------------------------------

    def chat(self, messages: list[Message], **overrides: Any) -> Completion:
        """One chat completion; `overrides` may set temperature, top_p, max_tokens, seed."""
        msgs = self._clean(validate_messages(messages))
        params = gen_params(self.config, overrides)
        key, hit = self._cached(msgs, params)
        if hit is not None:
            return hit
        with self._sync_limit:
            if self._embedded is not None:
                out = self._embedded.create_chat_completion(msgs, **params, **self._extra)
                return self._store(key, self._from_embedded(out))
            return self._store(key, self._from_server(self._http.chat(msgs, params)))

    async def achat(self, messages: list[Message], **overrides: Any) -> Completion:
        """Async twin of chat; at most `config.concurrency` calls of this client run at once per loop."""
        msgs = self._clean(validate_messages(messages))
        params = gen_params(self.config, overrides)
        key, hit = self._cached(msgs, params)
        if hit is not None:
            return hit
        sem, aclient = self._loop_state()
        async with sem:
            if self._embedded is not None:
                out = await asyncio.to_thread(self._embedded.create_chat_completion, msgs, **params, **self._extra)
                return self._store(key, self._from_embedded(out))
            return self._store(key, self._from_server(await self._http.achat(aclient, msgs, params)))

    def check_server(self) -> str | None:
        """Ask the server once whether it answers and serves the model (before a run); a note, or None.

        Raises a BackendError (or ConfigError) naming the setting to change; a model left unset is
        filled from a server that lists exactly one (the note says so). The embedded backend: None.
        """
        if self._http is None:
            return None
        try:
            model, note = self._http.check()
        finally:
            self._http.close()  # the check's connection and loop thread; a sync call opens them again
        if model != self.config.model:
            self.config = dataclasses.replace(self.config, model=model)
            self._http.config = self.config
            self.model = model
        return note

    def count_tokens(self, messages: list[Message]) -> int | None:
        """Prompt tokens of `messages` for this client's model, or None where no tokenizer is at hand.

        Embedded backend: llama.cpp's tokenizer over the model's chat template (the count its
        completions report). HTTP: None. The OpenAI API has no tokenizer endpoint, so a server's
        count is the `usage.prompt_tokens` of each response (`Completion.prompt_tokens`); callers use
        that and fall back to an estimate only when a response carried no usage.
        """
        msgs = validate_messages(messages)
        if self._embedded is None:
            return None
        return self._embedded.count_tokens(msgs)

    def close(self) -> None:
        """Close the sync calls' SDK client (async ones close with their event loop)."""
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _cached(self, msgs: list[Message], params: dict[str, Any]) -> tuple[str | None, Completion | None]:
        """The cache entry this call is stored under (None: not cached) and its stored answer, counted as a hit."""
        if self.cache is None:
            return None, None
        if self.config.base_url:  # the endpoint's host and port, never its credentials
            where = urllib.parse.urlsplit(self.config.base_url)
            host = f"{where.hostname}" + (f":{where.port}" if where.port else "")
        else:
            host = f"embedded:{self.config.embedded_model}"
        key = self.cache.key(self.model, host, msgs, {**params, **self.config.extra})
        hit = self.cache.get(key) if key is not None else None
        if hit is not None:
            self._tally(lambda u: u.bump(cache_hits=1))
        return key, hit

    def _store(self, key: str | None, completion: Completion) -> Completion:
        if key is not None:
            self.cache.put(key, completion)
        return completion

    def _clean(self, msgs: list[Message]) -> list[Message]:
        """`msgs` with lone surrogates replaced (they cannot be sent as UTF-8); each cleaned one is counted.

        `msgs` are validate_messages' own copies, changed in place.
        """
        for m in msgs:
            content, n = clean_surrogates(m["content"])
            if n:
                m["content"] = content
                self._tally(lambda u: u.bump(cleaned=1))
        return msgs

    def _tally(self, update: Callable[[Usage], None]) -> None:
        """Apply `update` to this client's usage and to the running episode's usage of this role."""
        episode = _EPISODE_USAGE.get()
        with self._usage_lock:
            update(self.usage)
            if episode is not None:
                role = episode.get(self.role)  # not setdefault: that would build a Usage every call
                if role is None:
                    role = episode[self.role] = Usage()
                update(role)

    def _count(self, prompt: int | None, completion: int | None) -> None:
        self._tally(lambda u: u.add_reported(prompt, completion))

    def _reply(self, text: str, prompt: int | None, completion: int | None, **fields: Any) -> Completion:
        """The Completion of one answered call: counted, surrogates cleaned, cut at `max_reply_chars`."""
        text, cleaned = clean_surrogates(text)
        truncated = len(text) > self.config.max_reply_chars
        if truncated and self.config.long_reply == "fail":
            self._count(prompt, completion)
            raise ReplyTooLongError(
                f"{self.role} model {self.model!r} replied {len(text):,} characters, more than max_reply_chars="
                f"{self.config.max_reply_chars:,}; raise max_reply_chars, lower max_tokens, or set "
                "long_reply=truncate to cut such replies (counted in usage)"
            )
        if truncated:
            text = text[: self.config.max_reply_chars]
        self._count(prompt, completion)
        stopped = fields.get("finish_reason") == "length"  # cut at max_tokens by the model server
        if cleaned or truncated or stopped:
            self._tally(
                lambda u: u.bump(cleaned=int(bool(cleaned)), truncated=int(truncated), max_tokens_stops=int(stopped))
            )
        reported = prompt is not None or completion is not None
        return Completion(
            text, prompt or 0, completion or 0, usage_reported=reported, cleaned=cleaned, truncated=truncated, **fields
        )

    def _from_server(self, reply: Any) -> Completion:
        return self._reply(
            reply.text,
            reply.prompt_tokens,
            reply.completion_tokens,
            model=reply.model,
            finish_reason=reply.finish_reason,
            retries=reply.retries,
            top_logprobs=reply.top_logprobs,
        )

    def _from_embedded(self, out: Mapping[str, Any]) -> Completion:
        choices = out.get("choices") or []
        if not choices:
            raise NoChoicesError(f"embedded model {self.model!r} returned no choices")
        usage = out.get("usage") or {}
        choice = choices[0]
        text = (choice.get("message") or {}).get("content") or ""
        return self._reply(
            text,
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            model=self.model,
            finish_reason=choice.get("finish_reason"),
            top_logprobs=read_top_logprobs(choice),
        )

    def _loop_state(self) -> tuple[asyncio.Semaphore, Any]:
        loop = asyncio.get_running_loop()
        last = self._last_loop  # (weakref to a loop, its state) of the latest call: nearly always this one's
        if last is not None and last[0]() is loop:
            return last[1]
        with self._per_loop_lock:
            state = self._per_loop.get(loop)
            if state is None:
                aclient = self._http.connections() if self._http is not None else None
                state = (asyncio.Semaphore(self.config.concurrency), aclient)
                self._per_loop[loop] = state
        self._last_loop = (weakref.ref(loop), state)
        return state


def make_client(
    config: LLMConfig | Mapping[str, Any],
    role: str = "policy",
    config_key: str | None = None,
    cache: CallCache | None = None,
) -> LLMClient:
    """Build an LLMClient from an LLMConfig or a mapping of its fields (unknown keys → ConfigError), with `cache`."""
    if isinstance(config, LLMConfig):
        return LLMClient(config, role, config_key, cache)
    if isinstance(config, Mapping):
        return LLMClient(config_from_mapping(config, config_key), role, config_key, cache)
    raise ConfigError(f"make_client needs an LLMConfig or a mapping of its fields; got {config!r}")


def _key(config_key: str | None, name: str) -> str:
    return f"`{config_key}.{name}`" if config_key else f"`{name}`"


logger = logging.getLogger(__name__)
_announced: set[tuple[str, str, str]] = set()  # (role, model, where) said once per process
_announced_lock = threading.Lock()


def model_place(client: Any) -> str:
    """Which model a client calls and where, without credentials: 'M (embedded)' or 'M (http HOST:PORT)'."""
    model = getattr(client, "model", None) or type(client).__name__
    backend = getattr(client, "backend", None)
    if backend == "embedded":
        return f"{model} (embedded)"
    url = getattr(getattr(client, "config", None), "base_url", None)
    parts = urlsplit(url) if url else None
    host = f"{parts.hostname}{f':{parts.port}' if parts.port else ''}" if parts and parts.hostname else None
    return f"{model} ({backend} {host})" if backend and host else str(model)


def announce(client: Any, role: str) -> None:
    """Say once per process which model plays `role` (logger `ifgym.llm.client`).

    The embedded model gets a WARNING (shown without any logging set-up): its first call loads it and
    every call runs on this machine's CPU, so an env's first `reset` can take minutes. A served model
    gets an INFO line.
    """
    where = model_place(client)
    key = (role, str(getattr(client, "model", "")), where)
    with _announced_lock:
        if key in _announced:
            return
        _announced.add(key)
    if getattr(client, "backend", None) == "embedded":
        logger.warning(
            "the %s is played by the embedded model %s, on this CPU: it loads at the first call, and a reset "
            "that generates text can take minutes (set %s_llm to a served model to go faster; logging at INFO "
            "shows each generation step)",
            role,
            where,
            role,
        )
    else:
        logger.info("the %s is played by %s", role, where)


def check_servers(clients: Iterable[Any]) -> list[str]:
    """Check each LLMClient's server once, in order, before a run (`LLMClient.check_server`); the notes to show.

    The first unusable server raises, naming its setting; other clients (test doubles) are skipped.
    """
    notes = []
    for client in clients:
        note = client.check_server() if isinstance(client, LLMClient) else None
        if note:
            notes.append(f"{client.role} model server: {note}")
    return notes


def resolve_client(
    client: ChatClient | LLMConfig | Mapping[str, Any] | None, role: str, *, name: str = ""
) -> ChatClient:
    """A client as given, or one built for `role` from an LLMConfig, a mapping of its fields, or None (embedded).

    `name` is the argument's name in the error (default `<role>_llm`, as the envs call their clients). A
    client built here is announced once (`announce`): which model plays the role, and where.
    """
    if client is None or isinstance(client, (LLMConfig, Mapping)):
        built = make_client(LLMConfig() if client is None else client, role)
        announce(built, role)
        return built
    if hasattr(client, "chat") and hasattr(client, "achat"):
        return client
    raise ConfigError(
        f"{name or role + '_llm'} must be an LLMConfig, a mapping of its fields, a client with chat/achat, or None "
        f"(the embedded model); got {client!r:.200}"
    )
