"""The HTTP backend: an OpenAI-compatible chat API over `ifgym.llm.wire`.

A call is posted as JSON over a kept-alive connection (as many as the client's concurrency), its body
written and its answer read with orjson (json where orjson refuses what json reads: `json_body`,
`_json`). The transport is `wire`'s (HTTP/1.1 on asyncio's transports, parsed by httptools) because a
call's CPU is most of a fast run's: against a local server at concurrency 64 a bare aiohttp post took
nearly three times its CPU, and the openai SDK over httpx2 five to six times aiohttp's (request and response
objects, a connection pool walked twice per request; `python benchmarks/runner.py --only transport`).
Retries follow the openai client's rules, done with `tenacity` from the first failure on: connection
errors and 408/409/429/5xx (or whatever `x-should-retry` says) are sent again after `retry-after-ms` /
`retry-after` (up to 60 s) or an exponential backoff (0.5 s doubling to 8 s, up to 25% jitter), at most
`max_retries` times; every retry is counted in the usage. Unlike the openai client, a timed-out request
is not sent again: the server is most likely still generating the abandoned answer, and a copy would
queue behind it (see `retryable`). A sync call runs the same async path on the backend's own event loop
in a daemon thread.

Each failure becomes a named BackendError (its `status` the HTTP status, if any) that says what to
fix, naming the setting by its full key (`policy.llm.timeout`) when the client knows it: RateLimitError
(429), ServerError (5xx), BackendTimeoutError, AuthenticationError (401/403), UnreachableError
(refused, unknown host, closed before any byte), ConnectionDroppedError (closed mid-answer),
NotFoundError (404: an unknown model, listed against the served ones, or a base_url without /v1),
BadRequestError (400/413/422) and ContextLengthError (the messages vLLM, llama.cpp's server, OpenAI
and Ollama send for a conversation longer than the context window), an HTML page from a proxy
(HTMLReplyError), a body that is not JSON (NonJSONReplyError), no choices (NoChoicesError), content
null (NullContentError). `HTTPBackend.check` asks the server once, before a run, whether it answers
and serves the model. `httptools` is imported on the first call, never at import time.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import re
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson

from ifgym.errors import (
    AuthenticationError,
    BackendError,
    BackendTimeoutError,
    BadRequestError,
    ConfigError,
    ConnectionDroppedError,
    ContextLengthError,
    HTMLReplyError,
    NoChoicesError,
    NonJSONReplyError,
    NotFoundError,
    NullContentError,
    RateLimitError,
    ServerError,
    UnreachableError,
    did_you_mean,
)
from ifgym.llm import wire
from ifgym.llm.config import PLACEHOLDER_API_KEY, LLMConfig
from ifgym.llm.conversation import Message, Usage, read_top_logprobs
from ifgym.llm.loop import loop_factory

# Where chat completions and embeddings are posted, and the served models listed, relative to base_url.
CHAT_PATH = "/chat/completions"
EMBEDDINGS_PATH = "/embeddings"
MODELS_PATH = "/models"
# A server's retry-after is honoured up to this many seconds (longer: the client's own backoff).
MAX_RETRY_AFTER = 60.0
# The check before a run waits at most this long for the server's model list (or the timeout, if shorter).
CHECK_TIMEOUT = 5.0
# Error codes and types, and message phrases, by which servers say a request outgrew the context window:
# OpenAI (code context_length_exceeded, "maximum context length is N tokens"), vLLM ("maximum context
# length", "longer than the maximum model length"), llama.cpp's server (type exceed_context_size_error,
# "exceeds the available context size"), Ollama ("the input length exceeds the context length",
# "exceeded max context length"); also text-generation-inference ("inputs tokens + max_new_tokens must be <=").
CONTEXT_LENGTH_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
CONTEXT_LENGTH_PHRASES = re.compile(
    r"max(imum)? context length|context length exceeded|exceeds? the (available )?context (size|length|window)"
    r"|longer than the maximum model length|tokens \+ max_new_tokens must be <=",
    re.IGNORECASE,
)

# A model name left at LLMConfig's default (the embedded model's) was not chosen for a server.
UNSET_MODEL = LLMConfig.model

# Applies an update to the usage of the client making the call (and to the running episode's).
Tally = Callable[[Callable[[Usage], None]], None]


def api_key(config: LLMConfig) -> str:
    """The key from the environment variable `config.api_key_env` names, else a placeholder local servers ignore."""
    if config.api_key_env is None:
        return PLACEHOLDER_API_KEY
    return os.environ.get(config.api_key_env) or PLACEHOLDER_API_KEY


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP_PROXY / HTTPS_PROXY, NO_PROXY honoured), as httpx reads it."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname is None or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


class ServerReply(NamedTuple):
    """A server's answer to one call, before the client counts, cleans and cuts it (None: not reported)."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str
    finish_reason: str | None
    retries: int
    top_logprobs: tuple[tuple[tuple[str, float], ...], ...] | None = None


class StatusError(Exception):
    """A non-2xx answer (raised inside the retry loop; the caller turns it into a BackendError)."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes):
        super().__init__(f"HTTP {status}")
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def error_fields(self) -> dict[str, Any]:
        """The `error` object of a JSON body (message, type, code), {"message": …} for a string, else {}."""
        try:
            error = json.loads(self.body).get("error")
        except (ValueError, AttributeError):
            return {}
        return error if isinstance(error, dict) else {"message": error} if error else {}

    def detail(self) -> str:
        """The server's error message (`error.message` of a JSON body), else the body's start."""
        message = self.error_fields().get("message")
        return str(message) if message else self.text.strip()[:300] or "(empty body)"

    def context_length_exceeded(self) -> bool:
        """Whether the server said the request is longer than the model's context (its code, type or message)."""
        fields = self.error_fields()
        if {str(fields.get("code")), str(fields.get("type"))} & CONTEXT_LENGTH_CODES:
            return True
        return bool(CONTEXT_LENGTH_PHRASES.search(self.detail()))


def retryable(exc: BaseException) -> bool:
    """Whether a failed attempt is worth sending again: the openai client's rules, except for timeouts.

    A request that timed out is not sent again: the server is most likely still working on it (servers
    go on generating an abandoned answer), so a retry queues behind it and times out too; against a
    one-slot server every retry waits out a whole `timeout` (4 retries of 60 s: 5 minutes lost).
    """
    if isinstance(exc, StatusError):
        should = exc.headers.get("x-should-retry")
        if should in ("true", "false"):
            return should == "true"
        return exc.status in (408, 409, 429) or exc.status >= 500
    return isinstance(exc, (wire.Unreached, wire.DroppedMidAnswer))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asked to wait (`retry-after-ms`, or `retry-after` in seconds or as a date), if usable."""
    wait = None
    try:
        if "retry-after-ms" in headers:
            wait = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            value = headers["retry-after"]
            try:
                wait = float(value)
            except ValueError:
                wait = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None
    return wait if wait is not None and 0 < wait <= MAX_RETRY_AFTER else None


def backoff(exc: BaseException, failed: int) -> float:
    """Seconds to wait after `failed` attempts, the last ending in `exc`.

    The server's retry-after if usable, else 0.5 s doubling per attempt up to 8 s, less up to 25%.
    """
    hinted = retry_after(exc.headers) if isinstance(exc, StatusError) else None
    if hinted is not None:
        return hinted
    # jitter only spreads retries in time; it never reaches an episode's content, so it takes no seed
    return min(0.5 * 2 ** (failed - 1), 8.0) * (1 - 0.25 * random.random())


class Connections:
    """One event loop's connection pool for a backend: made on the first call, closed when the loop shuts down."""

    def __init__(self) -> None:
        self.pool: wire.Pool | None = None
        self._closer: Any = None  # an async generator the loop closes at shutdown (asyncio.run does)

    async def open(self, make: Callable[[], wire.Pool]) -> wire.Pool:
        if self.pool is None:
            self.pool = make()
            self._closer = _close_at_shutdown(self.pool)
            await self._closer.__anext__()
        return self.pool


def _stop_loop_thread(pid: int, loop: asyncio.AbstractEventLoop, thread: threading.Thread, conns: Connections) -> None:
    if pid != os.getpid() or loop.is_closed():  # a forked child does not own its parent's thread
        return
    if conns.pool is not None:
        asyncio.run_coroutine_threadsafe(conns.pool.close(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    if not thread.is_alive():
        loop.close()


async def _request(
    pool: wire.Pool, method: str, url: str, body: bytes | None = None, timeout: float | None = None
) -> tuple[bytes, str]:
    """One HTTP attempt: the body and content type of a 2xx answer; any other status raises StatusError.

    `timeout` (seconds) replaces the pool's for this attempt.
    """
    status, headers, content = await pool.request(method, url, body, timeout)
    if status >= 300:  # no redirect is followed: a 3xx is an answer to report, with its Location
        raise StatusError(status, headers, content)
    return content, headers.get("content-type", "")


async def _close_at_shutdown(pool: wire.Pool) -> Any:
    try:
        yield
    finally:
        await pool.close()


def json_body(payload: Mapping[str, Any]) -> bytes:
    """A request's JSON as UTF-8 bytes, by orjson (a fifth of json's CPU for a long conversation).

    What orjson refuses (keys that are not strings, an integer beyond 64 bits, a lone surrogate) json.dumps
    writes, as it did before; a NaN or infinite setting, which json wrote as a bare NaN no server reads,
    is written null.
    """
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload).encode()


class HTTPBackend:
    """The OpenAI-compatible path of an LLMClient: requests, retries, errors that name the fix.

    `tally` applies a usage update for the client that owns this backend (retries, and the tokens
    of a reply whose content is null). `config_key` is where the settings were given (e.g.
    `policy.llm` in `ifgym eval`): messages name `policy.llm.timeout`, not just `timeout`. A
    connection pool belongs to one event loop, so the owner asks `connections()` for one per loop;
    sync calls run on the backend's own loop thread.
    """

    def __init__(self, config: LLMConfig, tally: Tally, config_key: str | None = None):
        self.config = config
        self.config_key = config_key
        self._tally = tally
        # credentials in the URL (user:password@host) are sent as basic auth, never shown in a message
        self._url, self._basic = wire.split_credentials(config.base_url.rstrip("/"))
        self._thread: tuple[int, asyncio.AbstractEventLoop, Connections] | None = None
        self._thread_lock = threading.Lock()
        self._stop: weakref.finalize | None = None

    def setting(self, name: str) -> str:
        """The setting `name` as the user gives it, quoted: `policy.llm.timeout`, or `timeout` without a key."""
        return f"`{self.config_key}.{name}`" if self.config_key else f"`{name}`"

    def connections(self) -> Connections:
        """A new per-loop holder of this backend's connections (the pool opens on the first call)."""
        return Connections()

    def close(self) -> None:
        """Close the sync calls' connections and stop their loop thread (async pools close with their loop)."""
        with self._thread_lock:
            stop, self._stop, self._thread = self._stop, None, None
        if stop is not None:
            stop()

    def chat(self, msgs: list[Message], params: Mapping[str, Any]) -> ServerReply:
        """One chat completion, run on this backend's loop thread (the caller's context goes with it)."""
        loop, conns = self._loop_thread()
        return asyncio.run_coroutine_threadsafe(self.achat(conns, msgs, params), loop).result()

    def _loop_thread(self) -> tuple[asyncio.AbstractEventLoop, Connections]:
        with self._thread_lock:  # several threads may make the first call at once
            if self._thread is None or self._thread[0] != os.getpid():  # a forked child starts its own
                loop, conns = (loop_factory() or asyncio.new_event_loop)(), Connections()
                thread = threading.Thread(target=loop.run_forever, name="ifgym-http", daemon=True)
                thread.start()
                self._thread = (os.getpid(), loop, conns)
                # stopped by close(), or when the backend is collected, or at interpreter exit
                self._stop = weakref.finalize(self, _stop_loop_thread, os.getpid(), loop, thread, conns)
            return self._thread[1], self._thread[2]

    def _pool(self) -> wire.Pool:
        auth = self._basic or f"Bearer {api_key(self.config)}"
        try:
            return wire.Pool(
                self._url,
                headers={"Authorization": auth, "Content-Type": "application/json", **self.config.headers},
                limit=self.config.concurrency,
                timeout=self.config.timeout,
                proxy=env_proxy(self._url),  # looked up once per pool, not per request
            )
        except ValueError as exc:  # a header HTTP cannot carry, or a proxy that is not http://
            raise ConfigError(
                f"cannot send requests to {self._url}: {exc}; check {self.setting('headers')} and the proxy "
                "variables (HTTP_PROXY, HTTPS_PROXY, NO_PROXY)"
            ) from None

    def _body(self, msgs: list[Message], params: Mapping[str, Any]) -> bytes:
        """The request's JSON: model, messages, generation settings and `extra` (checked not to clash)."""
        return json_body({"model": self.config.model, "messages": msgs, **params, **self.config.extra})

    async def achat(self, conns: Connections, msgs: list[Message], params: Mapping[str, Any]) -> ServerReply:
        """One chat completion over `conns` (this loop's connections), retried as the module docstring says."""
        content, content_type, retries = await self._post(conns, CHAT_PATH, self._body(msgs, params))
        return self._from_response(content, content_type, retries)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of `texts` from the server's `/embeddings` route, run on this backend's loop thread."""
        loop, conns = self._loop_thread()
        return asyncio.run_coroutine_threadsafe(self.aembed(conns, texts), loop).result()

    async def aembed(self, conns: Connections, texts: list[str]) -> list[list[float]]:
        """Embeddings of `texts` (one row each, in order) over `conns`, retried as a chat call is."""
        body = json_body({"model": self.config.model, "input": texts, **self.config.extra})
        content, content_type, _ = await self._post(conns, EMBEDDINGS_PATH, body)
        data = self._json(content, content_type)
        rows = data.get("data") if isinstance(data, dict) else None
        ok = isinstance(rows, list) and len(rows) == len(texts)
        ok = ok and all(isinstance(r, dict) and isinstance(r.get("embedding"), list) for r in rows)
        if not ok:
            found = f"keys: {', '.join(sorted(data))}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            raise NoChoicesError(
                f"{self._url}{EMBEDDINGS_PATH} did not answer one embedding per input for model "
                f"{self.config.model!r} ({len(texts)} inputs; {found}); check that the server serves embeddings"
            )
        # OpenAI may answer out of order: each row names its input by `index`
        ordered = sorted(rows, key=lambda r: r.get("index", 0)) if all("index" in r for r in rows) else rows
        return [r["embedding"] for r in ordered]

    async def _post(self, conns: Connections, path: str, body: bytes) -> tuple[bytes, str, int]:
        """POST `body` to `path` under base_url: (content, content type, retries), every failure a named error."""
        pool = conns.pool or await conns.open(self._pool)
        try:  # most calls succeed at once: the retries' bookkeeping (tenacity: 0.3 ms a call) starts at a failure
            content, content_type = await _request(pool, "POST", self._url + path, body)
        except Exception as exc:
            return await self._after_failure(pool, path, body, exc)
        return content, content_type, 0

    async def _after_failure(self, pool: wire.Pool, path: str, body: bytes, first: Exception) -> tuple[bytes, str, int]:
        """`_post` once its first attempt raised `first`: the retries it allows, and the named error if none answers."""
        import tenacity

        attempts = 1

        async def attempt() -> tuple[bytes, str]:
            nonlocal attempts
            attempts += 1
            return await _request(pool, "POST", self._url + path, body)

        try:
            if not (self.config.max_retries and retryable(first)):
                raise first
            await asyncio.sleep(backoff(first, 1))
            content, content_type = await tenacity.AsyncRetrying(
                stop=tenacity.stop_after_attempt(self.config.max_retries),
                wait=lambda state: backoff(state.outcome.exception(), state.attempt_number + 1),
                retry=tenacity.retry_if_exception(retryable),
                reraise=True,
            )(attempt)
        except StatusError as exc:
            if exc.status == 404:
                raise self._not_found(exc, await self._list_models(pool)) from None
            raise self._status_error(exc) from None
        except TimeoutError as exc:
            retried = f"after {attempts - 1} retries"
            raise self._timed_out(f"did not answer within {self.config.timeout}s ({retried})") from exc
        except wire.DroppedMidAnswer as exc:
            raise ConnectionDroppedError(
                f"the model server at {self._url} dropped the connection in the middle of its answer "
                f"({type(exc).__name__}: {exc}; after {attempts - 1} retries); check the server log"
            ) from exc
        except wire.Unreached as exc:
            raise self._unreachable(exc, f"after {attempts - 1} retries") from exc
        except wire.WireError as exc:
            raise BackendError(f"call to {self._url} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            retries = max(attempts - 1, 0)
            if retries:
                self._tally(lambda u: u.bump(retries=retries))
        return content, content_type, retries

    def check(self) -> tuple[str, str | None]:
        """Ask the server, once and before a run, whether it serves the model; see `acheck`."""
        loop, conns = self._loop_thread()
        return asyncio.run_coroutine_threadsafe(self.acheck(conns), loop).result()

    async def acheck(self, conns: Connections) -> tuple[str, str | None]:
        """The model to ask for and a note (None: nothing to say), from one GET of /models (at most 5 s).

        Raises, naming the setting to change: UnreachableError (nothing answers), AuthenticationError
        (401/403), NotFoundError (base_url without the API prefix, or a model the server does not list),
        BackendTimeoutError, and ConfigError when no model was set and the server lists several. A model
        left unset (the embedded model's name, the default) is taken from a server that lists exactly one.
        A server without /models is allowed, with a note, once its chat route answers.
        """
        pool = await conns.open(self._pool)
        timeout = min(CHECK_TIMEOUT, self.config.timeout)
        url, model = self._url, self.config.model
        try:
            content, _ = await _request(pool, "GET", url + MODELS_PATH, timeout=timeout)
        except StatusError as exc:
            if exc.status in (401, 403):
                raise self._auth_error(exc.status) from None
            if exc.status == 404:
                return model, await self._check_chat_route(pool, timeout)
            why = f"HTTP {exc.status}: {exc.detail()}"
            return model, f"{url} did not list its models ({why}); model {model!r} unchecked"
        except TimeoutError:
            raise self._timed_out(f"did not list its models (GET {MODELS_PATH}) within {timeout}s") from None
        except wire.Unreached as exc:
            raise self._unreachable(exc, "checked before the run") from None
        except wire.WireError as exc:
            return model, f"{url} did not list its models ({type(exc).__name__}: {exc}); model {model!r} unchecked"
        try:
            listed = json.loads(content)["data"]
            served = sorted(str(m["id"]) for m in listed)
        except (ValueError, KeyError, TypeError) as exc:
            return model, f"{url}{MODELS_PATH} is not a model list ({type(exc).__name__}); model {model!r} unchecked"
        model, note = self._model_from(served)
        if any(isinstance(m, dict) and m.get("owned_by") == "llamacpp" for m in listed):
            slots = await self._slots_note(pool, timeout)
            note = "; ".join(n for n in (note, slots) if n) or None
        return model, note

    def _model_from(self, served: list[str]) -> tuple[str, str | None]:
        """The model to ask for among those a server lists, and a note; raises when it is not among them."""
        url, model = self._url, self.config.model
        if model in served:
            return model, None
        if not served:
            return model, f"{url} lists no models; model {model!r} unchecked"
        if model == UNSET_MODEL:
            if len(served) == 1:
                return served[0], (
                    f"{self.setting('model')} is not set and {url} serves one model: evaluating {served[0]!r} "
                    "(recorded in run.json)"
                )
            raise ConfigError(
                f"{self.setting('model')} is not set and {url} serves several models: {_listed(served)}; "
                f"set {self.setting('model')}=NAME"
            )
        raise NotFoundError(
            f"{url} does not serve model {model!r}.{did_you_mean(model, served)} It serves: {_listed(served)}; "
            f"set {self.setting('model')} to one of them"
        )

    async def _slots_note(self, pool: wire.Pool, timeout: float) -> str | None:
        """A note when a llama.cpp server has fewer slots (its /props) than this client's concurrency, else None.

        Requests past its slots wait in the server's queue, and that wait counts against `timeout`.
        """
        root = self._url.removesuffix("/v1")
        try:
            content, _ = await _request(pool, "GET", root + "/props", timeout=timeout)
            slots = json.loads(content)["total_slots"]
        except (wire.WireError, TimeoutError, StatusError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(slots, int) or slots >= self.config.concurrency:
            return None
        return (
            f"this llama.cpp server has {slots} slot(s) and {self.setting('concurrency')} is "
            f"{self.config.concurrency}: the other requests queue there, and the wait counts against "
            f"{self.setting('timeout')} ({self.config.timeout}s); set {self.setting('concurrency')}={slots} or start "
            f"the server with --parallel {self.config.concurrency}"
        )

    async def _check_chat_route(self, pool: wire.Pool, timeout: float) -> str:
        """A note for a server whose /models answered 404, once its chat route answers; else a NotFoundError."""
        url, model = self._url, self.config.model
        if not url.endswith("/v1"):  # the commonest mistake: the server's root instead of its API prefix
            try:
                await _request(pool, "GET", url + "/v1" + MODELS_PATH, timeout=timeout)
            except (wire.WireError, TimeoutError, StatusError):
                pass
            else:
                raise NotFoundError(
                    f"{url}{MODELS_PATH} answered 404 but {url}/v1{MODELS_PATH} answers: base_url lacks the API "
                    f"prefix; set {self.setting('base_url')}={url}/v1",
                    status=404,
                )
        # one token's request: 404 means no chat route here (or no such model); any other answer, a route
        probe = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        try:
            await _request(pool, "POST", url + CHAT_PATH, json.dumps(probe).encode(), timeout=timeout)
        except StatusError as exc:
            if exc.status == 404:
                raise NotFoundError(
                    f"{url} answered 404 to GET {MODELS_PATH} and to POST {CHAT_PATH} for model {model!r} "
                    f"({exc.detail()}); set {self.setting('base_url')} to the API root (usually ending in /v1) and "
                    f"check {self.setting('model')}",
                    status=404,
                ) from None
        except (wire.WireError, TimeoutError) as exc:
            return f"{url} does not list its models (404) and its chat route did not answer ({type(exc).__name__})"
        return f"{url} does not list its models (GET {MODELS_PATH}: 404); model {model!r} not checked"

    def _from_response(self, content: bytes, content_type: str, retries: int) -> ServerReply:
        """Read a 2xx answer's JSON body into a ServerReply; every unusable answer is a named error."""
        url, model = self._url, self.config.model
        data = self._json(content, content_type)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            found = f"keys: {', '.join(sorted(data))}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            raise NoChoicesError(
                f"{url} answered a completion without choices for model {model!r} ({found}); check the server log"
            )
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        choice = choices[0]
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        text = message.get("content")
        if text is None:
            self._tally(lambda u: u.add_reported(prompt, completion))
            refusal = message.get("refusal")
            raise NullContentError(
                f"{url} answered content null for model {model!r} (finish_reason {choice.get('finish_reason')!r}"
                + (f", refusal {refusal!r:.200}" if refusal else "")
                + "): no reply text to score; check the model's chat template and the server log"
            )
        if not isinstance(text, str):
            raise NonJSONReplyError(
                f"{url} answered content that is not text for model {model!r} ({type(text).__name__}: "
                f"{text!r:.200}); check that base_url is an OpenAI-compatible chat API"
            )
        return ServerReply(
            text,
            prompt,
            completion,
            data.get("model") or model,
            choice.get("finish_reason"),
            retries,
            read_top_logprobs(choice),
        )

    def _json(self, content: bytes, content_type: str) -> Any:
        """A body parsed as JSON (by orjson: an integer beyond 64 bits reads as a float); else a named error."""
        url = self._url
        labelled_json = "json" in content_type.lower()
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:  # what json reads and orjson refuses: NaN, UTF-16, a lone surrogate
            pass
        try:
            return json.loads(content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            body = content.decode("utf-8", "replace")
            reason = f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        if _looks_like_html(body):
            if labelled_json:
                raise HTMLReplyError(
                    f"{url} answered an HTML page labelled as JSON ({_html_title(body)}); a proxy or gateway in "
                    "front of the model server is failing"
                )
            raise HTMLReplyError(
                f"{url} answered an HTML page instead of a chat completion ({_html_title(body)}); a proxy or "
                "gateway in front of the model server is failing, or base_url points at a web page"
            )
        raise NonJSONReplyError(
            f"{url} answered a body that is not JSON ({reason}): {body[:200]!r}; check that base_url is an "
            "OpenAI-compatible API"
        )

    async def _list_models(self, pool: wire.Pool) -> list[str] | str:
        """The ids the server lists at /models (one attempt), or why they could not be listed."""
        try:
            content, _ = await _request(pool, "GET", self._url + MODELS_PATH)
            return sorted(str(m["id"]) for m in json.loads(content)["data"])
        except (wire.WireError, TimeoutError, StatusError, ValueError, KeyError, TypeError) as exc:
            return f"could not list models ({type(exc).__name__}: {exc})"

    def _not_found(self, exc: StatusError, served: list[str] | str) -> BackendError:
        url, model = self._url, self.config.model
        if isinstance(served, list) and served:
            return NotFoundError(
                f"{url} does not serve model {model!r}.{did_you_mean(model, served)} "
                f"It serves: {_listed(served)}. Set {self.setting('model')} to one of them.",
                status=404,
            )
        return NotFoundError(
            f"{url} answered 404 for model {model!r} ({exc.detail()}); {served or 'it lists no models'}. "
            f"Check {self.setting('model')} and that {self.setting('base_url')} ends with the API prefix "
            "(usually /v1).",
            status=404,
        )

    def _timed_out(self, what: str) -> BackendTimeoutError:
        return BackendTimeoutError(
            f"the model server at {self._url} {what}; not sent again (the server is likely still busy with it); "
            f"raise {self.setting('timeout')}, or lower {self.setting('concurrency')} (unset: the run's "
            "`concurrency`) for a server with few slots (llama.cpp's server has 1 unless started with --parallel N)"
        )

    def _unreachable(self, exc: BaseException, retried: str) -> UnreachableError:
        return UnreachableError(
            f"cannot reach the model server at {self._url} ({type(exc).__name__}: {exc}; {retried}); is the server "
            f"running? Check {self.setting('base_url')} (host, port, /v1 prefix)."
        )

    def _auth_error(self, status: int) -> AuthenticationError:
        env = self.config.api_key_env
        if env is None:
            fix = f"set {self.setting('api_key_env')} to the name of an environment variable holding the key"
        elif env not in os.environ:
            fix = f"set the environment variable {env} (it is not set; {self.setting('api_key_env')} names it)"
        else:
            fix = f"check the key in the environment variable {env} ({self.setting('api_key_env')} names it)"
        return AuthenticationError(f"{self._url} rejected the request ({status}: authentication); {fix}", status=status)

    def _status_error(self, exc: StatusError) -> BackendError:
        url, model, status = self._url, self.config.model, exc.status
        if status in (401, 403):
            return self._auth_error(status)
        if exc.context_length_exceeded():
            return ContextLengthError(
                f"{url} answered HTTP {status}: the conversation is longer than the context window of model {model!r} "
                f"({exc.detail()}); give the server a longer context (vLLM --max-model-len, llama.cpp -c, Ollama "
                f"num_ctx), lower {self.setting('max_tokens')}, or shorten the history (policy=truncation)",
                status=status,
            )
        if 300 <= status < 400:  # wire follows no redirect: one that moved the API is for the user to follow
            where = exc.headers.get("location")
            return BackendError(
                f"{url} answered HTTP {status}, a redirect{f' to {where}' if where else ''} (not followed); set "
                f"{self.setting('base_url')} to the address the API answers at",
                status=status,
            )
        retried = f"retried up to {self.config.max_retries} times where the status allows"
        if _looks_like_html(exc.text):
            return HTMLReplyError(
                f"{url} answered HTTP {status} with an HTML error page ({_html_title(exc.text)}) ({retried}); "
                "a proxy or gateway in front of the model server is failing, or the server is down",
                status=status,
            )
        answered = f"{url} answered HTTP {status} for model {model!r}"
        if status == 429:
            return RateLimitError(
                f"{answered} (rate limited; {retried}): {exc.detail()}; lower {self.setting('concurrency')} or the "
                f"run's `concurrency`, or raise {self.setting('max_retries')}",
                status=status,
            )
        if status >= 500:
            return ServerError(f"{answered} (server error; {retried}): {exc.detail()}", status=status)
        if status in (400, 413, 422):
            return BadRequestError(
                f"{answered} (bad request): {exc.detail()}; check the generation settings and {self.setting('extra')}",
                status=status,
            )
        return BackendError(f"{answered} ({retried}): {exc.detail()}", status=status)


def _listed(served: list[str], most: int = 20) -> str:
    """Served model ids joined with commas, the first `most` of them (OpenAI's list is long)."""
    shown = ", ".join(served[:most])
    return shown + (f" … and {len(served) - most} more" if len(served) > most else "")


def _looks_like_html(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html")) or "<html" in head


def _html_title(text: str) -> str:
    found = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    return f"title {found.group(1).strip()[:120]!r}" if found else f"starts {text.strip()[:80]!r}"
