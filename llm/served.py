"""Served models through the `openai` SDK: one SDK client per event loop, named errors, the check before a run.

Every call to a served model is the SDK's: `AsyncOpenAI` (`AsyncAzureOpenAI` for `api_type="azure"`) over
its aiohttp transport (`DefaultAioHttpClient`), one client per event loop; blocking calls run the same
coroutines on the backend's own loop thread. What the SDK and its transport do, ifgym does not do again:
the HTTP, retries (connection errors and 408/409/429/5xx, or what `x-should-retry` says, at most
`max_retries` times, after `retry-after-ms` / `retry-after` up to two minutes or a backoff of 0.5 s
doubling to 8 s with jitter), timeouts, proxies (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`), TLS
(`SSL_CERT_FILE`, `SSL_CERT_DIR`), compressed answers, redirects and the limits on what an answer may be.

ifgym differs in one place, through the SDK's own rule that an `OpenAIError` raised while a request is
sent is passed on without a retry: a request whose answer did not come within `timeout` is not sent
again (the server is most likely still generating the abandoned answer, and a copy would queue behind
it), while one that could not connect (within `CONNECT_TIMEOUT`, or `timeout` if shorter) is.

What ifgym adds: each answer read into a `ServerReply` (text, finish reason, usage, log-probabilities,
the retries the SDK took, counted in the usage from the `x-stainless-retry-count` header of the last
request it sent), and each failure a named BackendError (its `status` the HTTP status, if any) that says
what to fix, naming the setting by its full key (`policy.llm.timeout`) when the client knows it:
RateLimitError (429), ServerError (5xx), BackendTimeoutError, AuthenticationError (401/403),
UnreachableError, ConnectionDroppedError (closed mid-answer), NotFoundError (404: an unknown model,
listed against the served ones, or a base_url without /v1), BadRequestError (400/413/422),
ContextLengthError (the messages vLLM, llama.cpp's server, OpenAI and Ollama send for a conversation
longer than the context window), HTMLReplyError (a proxy's page), NonJSONReplyError, NoChoicesError,
NullContentError. `ServedBackend.check` asks the server once, before a run, whether it answers and
serves the model, and reads a llama.cpp server's slots.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import importlib.util
import os
import re
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import aiohttp
import openai

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
from ifgym.llm.config import PLACEHOLDER_API_KEY, LLMConfig, url_without_credentials
from ifgym.llm.conversation import Message, Usage, read_top_logprobs
from ifgym.llm.loop import loop_factory

# Where chat completions are posted and the served models listed, relative to base_url (for messages).
CHAT_PATH = "/chat/completions"
EMBEDDINGS_PATH = "/embeddings"
MODELS_PATH = "/models"
# The longest wait for a connection: the SDK's default (or `timeout`, if shorter).
CONNECT_TIMEOUT = openai.DEFAULT_TIMEOUT.connect
# The check before a run waits at most this long for each answer (or the timeout, if shorter).
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
# The SDK's HTTP library, whose errors the transport raises: httpx (openai 2) or httpx2 (openai 3).
_HTTP_LIBRARIES = tuple(importlib.import_module(n) for n in ("httpx", "httpx2") if importlib.util.find_spec(n))
READ_TIMEOUTS = tuple(lib.ReadTimeout for lib in _HTTP_LIBRARIES)
READ_ERRORS = tuple(lib.ReadError for lib in _HTTP_LIBRARIES)
HTTP_ERRORS = tuple(lib.HTTPError for lib in _HTTP_LIBRARIES)
# The header in which the SDK tells the server how many times it has sent this request before.
RETRY_COUNT_HEADER = "x-stainless-retry-count"

# A model name left at LLMConfig's default (the embedded model's) was not chosen for a server.
UNSET_MODEL = LLMConfig.model

# Applies an update to the usage of the client making the call (and to the running episode's).
Tally = Callable[[Callable[[Usage], None]], None]


def api_key(config: LLMConfig) -> str:
    """The key from the environment variable `config.api_key_env` names, else a placeholder local servers ignore."""
    if config.api_key_env is None:
        return PLACEHOLDER_API_KEY
    return os.environ.get(config.api_key_env) or PLACEHOLDER_API_KEY


class ServerReply(NamedTuple):
    """A server's answer to one call, before the client counts, cleans and cuts it (None: not reported)."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str
    finish_reason: str | None
    retries: int
    top_logprobs: tuple[tuple[tuple[str, float], ...], ...] | None = None


class AnswerTimedOut(openai.APITimeoutError):
    """No answer within the timeout after the request was sent: the SDK passes it on without sending it again."""


class NoResendHTTPClient(openai.DefaultAioHttpClient):
    """The SDK's aiohttp client, except that a request whose answer timed out is not sent again (module docstring)."""

    async def send(self, request: Any, **kwargs: Any) -> Any:
        try:
            return await super().send(request, **kwargs)
        except READ_TIMEOUTS as exc:
            raise AnswerTimedOut(request=request) from exc


def retries_of(request: Any) -> int:
    """How many times the SDK had sent `request` before (its retry-count header), 0 when unknown."""
    value = request.headers.get(RETRY_COUNT_HEADER) if request is not None else None
    return int(value) if value and value.isdigit() else 0


class Connections:
    """One event loop's SDK client for a backend: made on the first call, closed when the loop shuts down."""

    def __init__(self) -> None:
        self.client: Any = None
        self._closer: Any = None  # an async generator the loop closes at shutdown (asyncio.run does)

    async def open(self, make: Callable[[], Any]) -> Any:
        if self.client is None:
            self.client = make()
            self._closer = _close_at_shutdown(self.client)
            await self._closer.__anext__()
        return self.client


async def _close_at_shutdown(client: Any) -> Any:
    try:
        yield
    finally:
        await client.close()


def _stop_loop_thread(pid: int, loop: asyncio.AbstractEventLoop, thread: threading.Thread, conns: Connections) -> None:
    if pid != os.getpid() or loop.is_closed():  # a forked child does not own its parent's thread
        return
    if conns.client is not None:
        asyncio.run_coroutine_threadsafe(conns.client.close(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    if not thread.is_alive():
        loop.close()


class ServedBackend:
    """The served-model path of an LLMClient (and of EmbeddingClient): SDK calls, named errors, the check.

    `tally` applies a usage update for the client that owns this backend (retries, and the tokens
    of a reply whose content is null). `config_key` is where the settings were given (e.g.
    `policy.llm` in `ifgym eval`): messages name `policy.llm.timeout`, not just `timeout`. An SDK
    client belongs to one event loop, so the owner asks `connections()` for one holder per loop;
    sync calls run on the backend's own loop thread.
    """

    def __init__(self, config: LLMConfig, tally: Tally, config_key: str | None = None):
        self.config = config
        self.config_key = config_key
        self._tally = tally
        self.url, self._basic = _split_credentials(config.base_url.rstrip("/"))
        self.shown_url = url_without_credentials(self.url)  # what messages show: no user:password@, no query
        self._thread: tuple[int, asyncio.AbstractEventLoop, Connections] | None = None
        self._thread_lock = threading.Lock()
        self._stop: weakref.finalize | None = None

    def setting(self, name: str) -> str:
        """The setting `name` as the user gives it, quoted: `policy.llm.timeout`, or `timeout` without a key."""
        return f"`{self.config_key}.{name}`" if self.config_key else f"`{name}`"

    def connections(self) -> Connections:
        """A new per-loop holder of this backend's SDK client (made on the first call)."""
        return Connections()

    def close(self) -> None:
        """Close the sync calls' client and stop their loop thread (async clients close with their loop)."""
        with self._thread_lock:
            stop, self._stop, self._thread = self._stop, None, None
        if stop is not None:
            stop()

    def _sdk_client(self) -> openai.AsyncOpenAI:
        """A new SDK client for this backend's server (one per event loop: its connections belong to the loop)."""
        config = self.config
        settings: dict[str, Any] = {
            "api_key": api_key(config),
            "timeout": openai.Timeout(config.timeout, connect=min(CONNECT_TIMEOUT, config.timeout)),
            "max_retries": config.max_retries,
            # credentials in the URL (user:password@host) go as basic auth; the configured headers win over it
            "default_headers": ({"Authorization": self._basic} if self._basic else {}) | dict(config.headers) or None,
            "http_client": NoResendHTTPClient(),
        }
        if config.api_type == "azure":  # the deployment (`model`) goes into each request's route
            return openai.AsyncAzureOpenAI(azure_endpoint=self.url, api_version=config.api_version, **settings)
        return openai.AsyncOpenAI(base_url=self.url, **settings)

    # -- calls ------------------------------------------------------------------------------------

    def _loop_thread(self) -> tuple[asyncio.AbstractEventLoop, Connections]:
        with self._thread_lock:  # several threads may make the first call at once
            if self._thread is None or self._thread[0] != os.getpid():  # a forked child starts its own
                loop, conns = (loop_factory() or asyncio.new_event_loop)(), Connections()
                thread = threading.Thread(target=loop.run_forever, name="ifgym-served", daemon=True)
                thread.start()
                self._thread = (os.getpid(), loop, conns)
                # stopped by close(), or when the backend is collected, or at interpreter exit
                self._stop = weakref.finalize(self, _stop_loop_thread, os.getpid(), loop, thread, conns)
            return self._thread[1], self._thread[2]

    def _run(self, make: Callable[[Connections], Any]) -> Any:
        """Run the coroutine `make(conns)` on this backend's loop thread (the caller's context goes with it)."""
        loop, conns = self._loop_thread()
        return asyncio.run_coroutine_threadsafe(make(conns), loop).result()

    def chat(self, msgs: list[Message], params: Mapping[str, Any]) -> ServerReply:
        """One chat completion, run on this backend's loop thread."""
        return self._run(lambda conns: self.achat(conns, msgs, params))

    async def achat(self, conns: Connections, msgs: list[Message], params: Mapping[str, Any]) -> ServerReply:
        """One chat completion through `conns` (this loop's SDK client); every failure a named error."""
        client = conns.client or await conns.open(self._sdk_client)
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=self.config.model, messages=msgs, **params, extra_body=self.config.extra or None
            )
        except Exception as exc:
            raise await self._named(exc, client) from _cause(exc)
        retries = raw.retries_taken
        if retries:
            self._tally(lambda u: u.bump(retries=retries))
        return self._from_answer(self._parsed(raw), retries)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of `texts`, run on this backend's loop thread."""
        return self._run(lambda conns: self.aembed(conns, texts))

    async def aembed(self, conns: Connections, texts: list[str]) -> list[list[float]]:
        """Embeddings of `texts` (one row each, in order) through `conns`, retried as a chat call is."""
        client = conns.client or await conns.open(self._sdk_client)
        try:
            raw = await client.embeddings.with_raw_response.create(
                model=self.config.model, input=texts, encoding_format="float", extra_body=self.config.extra or None
            )
        except Exception as exc:
            raise await self._named(exc, client) from _cause(exc)
        if raw.retries_taken:
            self._tally(lambda u: u.bump(retries=raw.retries_taken))
        answer = self._parsed(raw)
        rows = getattr(answer, "data", None)
        ok = isinstance(rows, list) and len(rows) == len(texts)
        ok = ok and all(isinstance(getattr(r, "embedding", None), list) for r in rows)
        if not ok:
            raise NoChoicesError(
                f"{self.shown_url}{EMBEDDINGS_PATH} did not answer one embedding per input for model "
                f"{self.config.model!r} ({len(texts)} inputs); check that the server serves embeddings"
            )
        # OpenAI may answer out of order: each row names its input by `index`
        if all(isinstance(getattr(r, "index", None), int) for r in rows):
            rows = sorted(rows, key=lambda r: r.index)
        return [r.embedding for r in rows]

    # -- reading answers --------------------------------------------------------------------------

    def _parsed(self, raw: Any) -> Any:
        """The SDK's typed answer of `raw`; a body that is not JSON (HTML from a proxy, say) is a named error."""
        labelled_json = "json" in raw.headers.get("content-type", "").lower()
        try:
            answer = raw.parse()
        except ValueError as exc:  # labelled JSON, but not JSON
            raise self._not_json(raw.http_response.text, labelled_json, str(exc)) from None
        if isinstance(answer, str):  # the SDK gives the text of an answer that is not JSON
            raise self._not_json(answer, labelled_json, "not JSON")
        return answer

    def _not_json(self, body: str, labelled_json: bool, reason: str) -> BackendError:
        url = self.shown_url
        if _looks_like_html(body):
            if labelled_json:
                return HTMLReplyError(
                    f"{url} answered an HTML page labelled as JSON ({_html_title(body)}); a proxy or gateway in "
                    "front of the model server is failing"
                )
            return HTMLReplyError(
                f"{url} answered an HTML page instead of a chat completion ({_html_title(body)}); a proxy or "
                "gateway in front of the model server is failing, or base_url points at a web page"
            )
        return NonJSONReplyError(
            f"{url} answered a body that is not JSON ({reason}): {body[:200]!r}; check that base_url is an "
            "OpenAI-compatible API"
        )

    def _from_answer(self, answer: Any, retries: int) -> ServerReply:
        """A ServerReply from the SDK's ChatCompletion; every unusable answer is a named error."""
        url, model = self.shown_url, self.config.model
        choices = getattr(answer, "choices", None)
        if not choices or not isinstance(choices, list) or getattr(choices[0], "message", None) is None:
            if isinstance(answer, openai.BaseModel):
                found = f"keys: {', '.join(sorted(answer.model_dump(exclude_unset=True)))}"
            else:
                found = f"a JSON {type(answer).__name__}"
            raise NoChoicesError(
                f"{url} answered a completion without choices for model {model!r} ({found}); check the server log"
            )
        usage = getattr(answer, "usage", None)
        prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        choice = choices[0]
        message = choice.message
        text = getattr(message, "content", None)
        if text is None:
            self._tally(lambda u: u.add_reported(prompt, completion))
            refusal = getattr(message, "refusal", None)
            raise NullContentError(
                f"{url} answered content null for model {model!r} (finish_reason "
                f"{getattr(choice, 'finish_reason', None)!r}"
                + (f", refusal {refusal!r:.200}" if refusal else "")
                + "): no reply text to score; check the model's chat template and the server log"
            )
        if not isinstance(text, str):
            raise NonJSONReplyError(
                f"{url} answered content that is not text for model {model!r} ({type(text).__name__}: "
                f"{text!r:.200}); check that base_url is an OpenAI-compatible chat API"
            )
        logprobs = getattr(choice, "logprobs", None)
        top = read_top_logprobs({"logprobs": logprobs.model_dump()}) if logprobs is not None else None
        return ServerReply(
            text,
            prompt if isinstance(prompt, int) else None,
            completion if isinstance(completion, int) else None,
            getattr(answer, "model", None) or model,
            getattr(choice, "finish_reason", None),
            retries,
            top,
        )

    # -- failures ---------------------------------------------------------------------------------

    async def _named(self, exc: Exception, client: Any) -> BackendError:
        """The named error of a failed call (its retries counted in the usage)."""
        request = getattr(exc, "request", None) if isinstance(exc, openai.APIError) else None
        retries = retries_of(request)
        if retries:
            self._tally(lambda u: u.bump(retries=retries))
        after = f"after {retries} retries"
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code == 404:
                return self._not_found(exc, await self._list_models(client))
            return self._status_error(exc)
        if isinstance(exc, AnswerTimedOut):
            return self._timed_out(f"did not answer within {self.config.timeout}s ({after})")
        causes = _causes(exc)
        if any(isinstance(c, (aiohttp.ClientPayloadError, *READ_ERRORS)) for c in causes):
            return ConnectionDroppedError(
                f"the model server at {self.shown_url} dropped the connection in the middle of its answer "
                f"({_root(exc)}; {after}); check the server log"
            )
        refused = (aiohttp.ClientResponseError, aiohttp.http_exceptions.HttpProcessingError)
        if any(isinstance(c, refused) for c in causes):
            return BackendError(
                f"{self.shown_url} answered what the HTTP client refuses ({_root(exc)}; {after}): an oversized or "
                "malformed answer; check the server, or a proxy in front of it"
            )
        if isinstance(exc, openai.APIConnectionError):
            return self._unreachable(_root(exc), after)
        if isinstance(exc, (openai.OpenAIError, aiohttp.ClientError, *HTTP_ERRORS)):
            return BackendError(f"call to {self.shown_url} failed: {_root(exc)}")
        raise exc

    async def _list_models(self, client: Any) -> list[str] | str:
        """The ids the server lists at /models (one attempt), or why they could not be listed."""
        try:
            page = await client.with_options(max_retries=0, timeout=CHECK_TIMEOUT).models.list()
            return sorted(str(m.id) for m in page.data)
        except Exception as exc:  # any failure is only said: the 404 is the error
            return f"could not list models ({type(exc).__name__}: {exc})"

    def _not_found(self, exc: openai.APIStatusError, served: list[str] | str) -> BackendError:
        url, model = self.shown_url, self.config.model
        if isinstance(served, list) and served:
            return NotFoundError(
                f"{url} does not serve model {model!r}.{did_you_mean(model, served)} "
                f"It serves: {_listed(served)}. Set {self.setting('model')} to one of them.",
                status=404,
            )
        return NotFoundError(
            f"{url} answered 404 for model {model!r} ({_detail(exc)}); {served or 'it lists no models'}. "
            f"Check {self.setting('model')} and that {self.setting('base_url')} ends with the API prefix "
            "(usually /v1).",
            status=404,
        )

    def _timed_out(self, what: str) -> BackendTimeoutError:
        return BackendTimeoutError(
            f"the model server at {self.shown_url} {what}; not sent again (the server is likely still busy with "
            f"it); raise {self.setting('timeout')}, or lower {self.setting('concurrency')} (unset: the run's "
            "`concurrency`) for a server with few slots (llama.cpp's server has 1 unless started with --parallel N)"
        )

    def _unreachable(self, why: str, retried: str) -> UnreachableError:
        return UnreachableError(
            f"cannot reach the model server at {self.shown_url} ({why}; {retried}); is the server running? Check "
            f"{self.setting('base_url')} (host, port, /v1 prefix)."
        )

    def _auth_error(self, status: int) -> AuthenticationError:
        env = self.config.api_key_env
        if env is None:
            fix = f"set {self.setting('api_key_env')} to the name of an environment variable holding the key"
        elif env not in os.environ:
            fix = f"set the environment variable {env} (it is not set; {self.setting('api_key_env')} names it)"
        else:
            fix = f"check the key in the environment variable {env} ({self.setting('api_key_env')} names it)"
        return AuthenticationError(
            f"{self.shown_url} rejected the request ({status}: authentication); {fix}", status=status
        )

    def _status_error(self, exc: openai.APIStatusError) -> BackendError:
        url, model, status = self.shown_url, self.config.model, exc.status_code
        if status in (401, 403):
            return self._auth_error(status)
        if _context_length_exceeded(exc):
            return ContextLengthError(
                f"{url} answered HTTP {status}: the conversation is longer than the context window of model {model!r} "
                f"({_detail(exc)}); give the server a longer context (vLLM --max-model-len, llama.cpp -c, Ollama "
                f"num_ctx), lower {self.setting('max_tokens')}, or shorten the history (policy=truncation)",
                status=status,
            )
        retried = f"retried up to {self.config.max_retries} times where the status allows"
        text = _body_text(exc)
        if _looks_like_html(text):
            return HTMLReplyError(
                f"{url} answered HTTP {status} with an HTML error page ({_html_title(text)}) ({retried}); "
                "a proxy or gateway in front of the model server is failing, or the server is down",
                status=status,
            )
        answered = f"{url} answered HTTP {status} for model {model!r}"
        if status == 429:
            return RateLimitError(
                f"{answered} (rate limited; {retried}): {_detail(exc)}; lower {self.setting('concurrency')} or the "
                f"run's `concurrency`, or raise {self.setting('max_retries')}",
                status=status,
            )
        if status >= 500:
            return ServerError(f"{answered} (server error; {retried}): {_detail(exc)}", status=status)
        if status in (400, 413, 422):
            return BadRequestError(
                f"{answered} (bad request): {_detail(exc)}; check the generation settings and {self.setting('extra')}",
                status=status,
            )
        return BackendError(f"{answered} ({retried}): {_detail(exc)}", status=status)

    # -- the check before a run -------------------------------------------------------------------

    def check(self) -> tuple[str, str | None]:
        """Ask the server, once and before a run, whether it serves the model; see `acheck`."""
        return self._run(self.acheck)

    async def acheck(self, conns: Connections) -> tuple[str, str | None]:
        """The model to ask for and a note (None: nothing to say), from one `models.list()` (at most 5 s).

        Raises, naming the setting to change: UnreachableError (nothing answers), AuthenticationError
        (401/403), NotFoundError (base_url without the API prefix, or a model the server does not list),
        BackendTimeoutError, and ConfigError when no model was set and the server lists several. A model
        left unset (the embedded model's name, the default) is taken from a server that lists exactly one.
        A server without /models is allowed, with a note, once its chat route answers. Azure lists its
        models, not the deployments `model` names: there only the answer is checked.
        """
        timeout = min(CHECK_TIMEOUT, self.config.timeout)
        client = (conns.client or await conns.open(self._sdk_client)).with_options(max_retries=0, timeout=timeout)
        url, model = self.shown_url, self.config.model
        try:
            page = await client.models.list()
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise self._auth_error(exc.status_code) from None
            if exc.status_code == 404:
                return model, await self._check_chat_route(client)
            return (
                model,
                f"{url} did not list its models (HTTP {exc.status_code}: {_detail(exc)}); model {model!r} unchecked",
            )
        except AnswerTimedOut:
            raise self._timed_out(f"did not list its models (GET {MODELS_PATH}) within {timeout}s") from None
        except openai.APIConnectionError as exc:
            raise self._unreachable(_root(exc), "checked before the run") from None
        except Exception as exc:  # an answer that is not a model list: said, not fatal
            return model, f"{url}{MODELS_PATH} is not a model list ({type(exc).__name__}); model {model!r} unchecked"
        listed = getattr(page, "data", None)
        if not isinstance(listed, list) or not all(isinstance(getattr(m, "id", None), str) for m in listed):
            return model, f"{url}{MODELS_PATH} is not a model list; model {model!r} unchecked"
        if self.config.api_type == "azure":
            return model, None
        model, note = self._model_from(sorted(m.id for m in listed))
        if any(getattr(m, "owned_by", None) == "llamacpp" for m in listed):
            slots = await self._slots_note(client)
            note = "; ".join(n for n in (note, slots) if n) or None
        return model, note

    def _model_from(self, served: list[str]) -> tuple[str, str | None]:
        """The model to ask for among those a server lists, and a note; raises when it is not among them."""
        url, model = self.shown_url, self.config.model
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

    async def _slots_note(self, client: Any) -> str | None:
        """A note when a llama.cpp server has fewer slots (its /props) than this client's concurrency, else None.

        Requests past its slots wait in the server's queue, and that wait counts against `timeout`.
        """
        try:
            props = await client.get(self.url.removesuffix("/v1") + "/props", cast_to=object)
            slots = props["total_slots"]
        except Exception:  # no /props: not llama.cpp's server after all, nothing to say
            return None
        if not isinstance(slots, int) or slots >= self.config.concurrency:
            return None
        return (
            f"this llama.cpp server has {slots} slot(s) and {self.setting('concurrency')} is "
            f"{self.config.concurrency}: the other requests queue there, and the wait counts against "
            f"{self.setting('timeout')} ({self.config.timeout}s); set {self.setting('concurrency')}={slots} or start "
            f"the server with --parallel {self.config.concurrency}"
        )

    async def _check_chat_route(self, client: Any) -> str:
        """A note for a server whose /models answered 404, once its chat route answers; else a NotFoundError."""
        url, model = self.shown_url, self.config.model
        if not self.url.endswith("/v1") and self.config.api_type == "openai":
            # the commonest mistake: the server's root instead of its API prefix
            try:
                await client.get(self.url + "/v1" + MODELS_PATH, cast_to=object)
            except Exception:  # the prefix does not help either: go on to the chat route
                pass
            else:
                raise NotFoundError(
                    f"{url}{MODELS_PATH} answered 404 but {url}/v1{MODELS_PATH} answers: base_url lacks the API "
                    f"prefix; set {self.setting('base_url')}={url}/v1",
                    status=404,
                )
        # one token's request: 404 means no chat route here (or no such model); any other answer, a route
        try:
            await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=1
            )
        except openai.APIStatusError as exc:
            if exc.status_code == 404:
                raise NotFoundError(
                    f"{url} answered 404 to GET {MODELS_PATH} and to POST {CHAT_PATH} for model {model!r} "
                    f"({_detail(exc)}); set {self.setting('base_url')} to the API root (usually ending in /v1) and "
                    f"check {self.setting('model')}",
                    status=404,
                ) from None
        except Exception as exc:  # no answer from the chat route either: said, the run's first call will tell
            return f"{url} does not list its models (404) and its chat route did not answer ({type(exc).__name__})"
        return f"{url} does not list its models (GET {MODELS_PATH}: 404); model {model!r} not checked"


def _split_credentials(url: str) -> tuple[str, str | None]:
    """`url` without its `user:password@`, and the Basic authorization header they make (None without them)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.netloc.rpartition("@")[2]
    pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), "Basic " + base64.b64encode(pair.encode()).decode()


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from, outermost first."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _root(exc: BaseException) -> str:
    """The innermost cause of `exc` as 'Type: message' (the transport's own words)."""
    root = _causes(exc)[-1]
    said = " ".join(str(root).split())  # one line, however the transport wrote it
    return f"{type(root).__name__}: {said:.300}" if said else type(root).__name__


def _cause(exc: BaseException) -> BaseException | None:
    """What a named error is raised from: the transport's error for a failure to connect or read, else nothing."""
    return exc if isinstance(exc, openai.APIConnectionError) else None


def _body_text(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text
    except Exception:  # a streamed body that was not read
        return ""


def _error_fields(exc: openai.APIStatusError) -> dict[str, Any]:
    """The `error` object of a JSON body (message, type, code), {"message": …} for a string, else {}."""
    body = exc.body
    if isinstance(body, dict):
        return body
    return {"message": body} if isinstance(body, str) and body and not _looks_like_html(body) else {}


def _detail(exc: openai.APIStatusError) -> str:
    """The server's error message (`error.message` of a JSON body), else the body's start."""
    message = _error_fields(exc).get("message")
    return str(message) if message else _body_text(exc).strip()[:300] or "(empty body)"


def _context_length_exceeded(exc: openai.APIStatusError) -> bool:
    """Whether the server said the request is longer than the model's context (its code, type or message)."""
    fields = _error_fields(exc)
    if {str(fields.get("code")), str(fields.get("type"))} & CONTEXT_LENGTH_CODES:
        return True
    return bool(CONTEXT_LENGTH_PHRASES.search(_detail(exc)))


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
