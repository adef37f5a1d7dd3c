"""The HTTP backend: an OpenAI-compatible server reached through the `openai` package.

The `openai` client retries 408/409/429/5xx and connection errors (honouring `retry-after`); every
request it sends is counted, so a call's retries reach the usage. Its transport is `httpx2` (whose
connection pool stays cheap with many connections kept alive; httpx's scans every connection for
each request), with as many connections kept alive as the client's concurrency. A call is posted as
plain JSON and its answer read as plain JSON: the SDK's request transformation and response models
cost more CPU than the rest of a call and nothing here needs them. Each failure becomes a named
BackendError that says what to fix: an HTML page from a proxy (HTMLReplyError), a body that is not
JSON (NonJSONReplyError), no choices (NoChoicesError), content null (NullContentError), an unknown
model (with the served models listed), a timeout, a refused connection or key, an HTTP status.
`openai` is imported on the first call, never at import time.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ifgym.errors import (
    BackendError,
    HTMLReplyError,
    NoChoicesError,
    NonJSONReplyError,
    NullContentError,
    did_you_mean,
)
from ifgym.llm.config import PLACEHOLDER_API_KEY, LLMConfig
from ifgym.llm.conversation import Message, Usage

# Where chat completions are posted, relative to base_url.
CHAT_PATH = "/chat/completions"

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


class HTTPBackend:
    """The OpenAI-compatible path of an LLMClient: requests, the openai clients, errors that name the fix.

    `tally` applies a usage update for the client that owns this backend (retries, and the tokens
    of a reply whose content is null). The sync connection pool is made on the first call; an
    async client belongs to one event loop, so the owner asks `async_client()` for one per loop.
    """

    def __init__(self, config: LLMConfig, tally: Tally):
        self.config = config
        self._tally = tally
        self._sync_http: Any = None
        self._sync_lock = threading.Lock()

    def async_client(self) -> Any:
        """A new `openai.AsyncOpenAI` whose requests are counted (one per event loop)."""
        import httpx2
        import openai

        hooks = {"request": [_acount_attempt]}
        return openai.AsyncOpenAI(**self._openai_kwargs(), http_client=httpx2.AsyncClient(**self._pool(hooks)))

    def close(self) -> None:
        """Close the sync connection pool (async pools close with their event loop)."""
        if self._sync_http is not None:
            self._sync_http.close()
            self._sync_http = None

    def _sync_client(self) -> Any:
        with self._sync_lock:  # several threads may make the first call at once
            if self._sync_http is None:
                import httpx2
                import openai

                hooks = {"request": [_count_attempt]}
                self._sync_http = openai.OpenAI(**self._openai_kwargs(), http_client=httpx2.Client(**self._pool(hooks)))
            return self._sync_http

    def _pool(self, hooks: dict[str, list[Any]]) -> dict[str, Any]:
        """Settings of an httpx2 client: one connection per concurrent call, kept alive; requests counted."""
        import httpx2

        n = self.config.concurrency
        return {
            "limits": httpx2.Limits(max_connections=n, max_keepalive_connections=n),
            "timeout": self.config.timeout,
            "follow_redirects": True,
            "event_hooks": hooks,
        }

    def _openai_kwargs(self) -> dict[str, Any]:
        return {
            "base_url": self.config.base_url,
            "api_key": api_key(self.config),
            "timeout": self.config.timeout,
            "max_retries": self.config.max_retries,
        }

    def _body(self, msgs: list[Message], params: Mapping[str, Any]) -> dict[str, Any]:
        """The request's JSON: model, messages, generation settings and `extra` (checked not to clash)."""
        return {"model": self.config.model, "messages": msgs, **params, **self.config.extra}

    def chat(self, msgs: list[Message], params: Mapping[str, Any]) -> ServerReply:
        """One chat completion over the sync connection pool."""
        import httpx2
        import openai

        client = self._sync_client()
        with _CountAttempts(self._tally) as attempts:
            try:
                resp = client.post(CHAT_PATH, body=self._body(msgs, params), cast_to=httpx2.Response)
            except openai.NotFoundError as exc:
                raise self._not_found(exc, self._list_models_sync(client)) from exc
            except openai.OpenAIError as exc:
                raise self._http_error(exc) from exc
        return self._from_response(resp, attempts.retries)

    async def achat(self, aclient: Any, msgs: list[Message], params: Mapping[str, Any]) -> ServerReply:
        """One chat completion through `aclient` (this loop's client from `async_client`)."""
        import httpx2
        import openai

        with _CountAttempts(self._tally) as attempts:
            try:
                resp = await aclient.post(CHAT_PATH, body=self._body(msgs, params), cast_to=httpx2.Response)
            except openai.NotFoundError as exc:
                raise self._not_found(exc, await self._list_models_async(aclient)) from exc
            except openai.OpenAIError as exc:
                raise self._http_error(exc) from exc
        return self._from_response(resp, attempts.retries)

    def _from_response(self, resp: Any, retries: int) -> ServerReply:
        """Read a 2xx answer's JSON body into a ServerReply; every unusable answer is a named error."""
        url, model = self.config.base_url, self.config.model
        data = self._json(resp)
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
        return ServerReply(text, prompt, completion, data.get("model") or model, choice.get("finish_reason"), retries)

    def _json(self, resp: Any) -> Any:
        """The body of `resp` parsed as JSON; a body that is not (an HTML page, plain text) is a named error."""
        url = self.config.base_url
        labelled_json = "json" in resp.headers.get("content-type", "").lower()
        try:
            return json.loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            body = resp.text
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

    def _list_models_sync(self, client: Any) -> list[str] | str:
        import openai

        try:
            return sorted(m.id for m in client.with_options(max_retries=0).models.list())
        except openai.OpenAIError as exc:
            return f"could not list models ({type(exc).__name__}: {exc})"

    async def _list_models_async(self, aclient: Any) -> list[str] | str:
        import openai

        try:
            return sorted([m.id async for m in aclient.with_options(max_retries=0).models.list()])
        except openai.OpenAIError as exc:
            return f"could not list models ({type(exc).__name__}: {exc})"

    def _not_found(self, exc: Exception, served: list[str] | str) -> BackendError:
        url, model = self.config.base_url, self.config.model
        if isinstance(served, list) and served:
            return BackendError(
                f"{url} does not serve model {model!r}.{did_you_mean(model, served)} "
                f"It serves: {', '.join(served)}. Set `model` to one of them."
            )
        return BackendError(
            f"{url} answered 404 for model {model!r} ({exc}); {served or 'it lists no models'}. "
            "Check `model` and that base_url ends with the API prefix (usually /v1)."
        )

    def _http_error(self, exc: Exception) -> BackendError:
        import openai

        url = self.config.base_url
        if isinstance(exc, openai.APITimeoutError):
            return BackendError(
                f"model server at {url} did not answer within {self.config.timeout}s "
                f"(after {self.config.max_retries} retries); raise `timeout` or check the server load"
            )
        if isinstance(exc, openai.APIConnectionError):
            return BackendError(
                f"cannot reach the model server at {url} ({exc}); is the server running? "
                "Check base_url (host, port, /v1 prefix)."
            )
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            env = self.config.api_key_env
            if env is None:
                fix = "set `api_key_env` to the name of an environment variable holding the key"
            elif env not in os.environ:
                fix = f"set the environment variable {env} (it is not set)"
            else:
                fix = f"check the key in the environment variable {env}"
            return BackendError(f"{url} rejected the request ({exc.status_code}: authentication); {fix}")
        if isinstance(exc, openai.APIStatusError) and _looks_like_html(exc.response.text):
            return HTMLReplyError(
                f"{url} answered HTTP {exc.status_code} with an HTML error page ({_html_title(exc.response.text)}) "
                f"(retried up to {self.config.max_retries} times where the status allows); a proxy or gateway in "
                "front of the model server is failing, or the server is down"
            )
        if isinstance(exc, openai.APIStatusError):
            return BackendError(
                f"{url} answered HTTP {exc.status_code} for model {self.config.model!r} "
                f"(retried up to {self.config.max_retries} times where the status allows): {exc.message}"
            )
        return BackendError(f"call to {url} failed: {type(exc).__name__}: {exc}")


# The HTTP requests of the call in progress (a counter per call, found through the context the call runs in).
_ATTEMPTS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("ifgym_http_attempts", default=None)


def _count_attempt(request: Any) -> None:
    box = _ATTEMPTS.get()
    if box is not None:
        box[0] += 1


async def _acount_attempt(request: Any) -> None:
    _count_attempt(request)


class _CountAttempts:
    """Counts the HTTP requests of one call; on exit adds the retries (requests - 1) to the client's usage."""

    def __init__(self, tally: Tally):
        self.tally = tally
        self.box = [0]
        self.retries = 0

    def __enter__(self) -> _CountAttempts:
        self.token = _ATTEMPTS.set(self.box)
        return self

    def __exit__(self, *exc: object) -> None:
        _ATTEMPTS.reset(self.token)
        self.retries = max(self.box[0] - 1, 0)
        if self.retries:
            self.tally(lambda u: u.bump(retries=self.retries))


def _looks_like_html(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html")) or "<html" in head


def _html_title(text: str) -> str:
    found = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    return f"title {found.group(1).strip()[:120]!r}" if found else f"starts {text.strip()[:80]!r}"
