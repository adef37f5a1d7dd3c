"""How to reach a model: `LLMConfig`, its field checks, and the generation settings of one call."""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ifgym.errors import ConfigError, did_you_mean
from ifgym.llm.models import EMBEDDED_MODELS

# Generation settings a single call may override; everything else is fixed per client.
GEN_KEYS = ("temperature", "top_p", "max_tokens", "seed")
# Which API a served model speaks: OpenAI's routes, or Azure OpenAI's (a deployment per model, api-version, api-key).
API_TYPES = ("openai", "azure")
# Sent when no API key is configured: local OpenAI-compatible servers ignore the key.
PLACEHOLDER_API_KEY = "not-needed-for-local-servers"


def _is_base_url(v: object) -> bool:
    """An absolute http(s) URL with a host, nothing a request line or a header could be split by, no fragment."""
    if not isinstance(v, str) or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in v) or "#" in v:
        return False
    try:
        parts = urllib.parse.urlsplit(v)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# name -> (is the value acceptable?, what is expected). One table for config fields and overrides.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "base_url": (
        lambda v: v is None or _is_base_url(v),
        "None (embedded model) or an http(s) URL such as 'http://127.0.0.1:8000/v1' (a host; no space, line break "
        "or #fragment)",
    ),
    "api_type": (lambda v: v in API_TYPES, "'openai' (any OpenAI-compatible server) or 'azure' (Azure OpenAI)"),
    "api_version": (
        lambda v: v is None or (isinstance(v, str) and v.strip() != ""),
        "None or Azure OpenAI's API version, e.g. '2024-10-21' (api_type=azure needs one)",
    ),
    "model": (lambda v: isinstance(v, str) and v.strip() != "", "a non-empty model name"),
    "api_key_env": (
        lambda v: v is None or (isinstance(v, str) and v.strip() != ""),
        "None or the name of an environment variable (e.g. 'OPENAI_API_KEY')",
    ),
    "temperature": (lambda v: _is_number(v) and v >= 0, "a number >= 0"),
    "top_p": (lambda v: v is None or (_is_number(v) and 0 < v <= 1), "None or a number in (0, 1]"),
    "max_tokens": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "seed": (lambda v: v is None or _is_int(v), "None or an integer"),
    "timeout": (lambda v: _is_number(v) and v > 0, "a number of seconds > 0"),
    "max_retries": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "concurrency": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "max_reply_chars": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "long_reply": (lambda v: v in ("truncate", "fail"), "'truncate' (cut and count it) or 'fail' (the episode fails)"),
    "embedded_model": (
        lambda v: isinstance(v, str) and v.strip() != "",
        f"one of {', '.join(EMBEDDED_MODELS)} or a path to a .gguf file",
    ),
    "n_ctx": (lambda v: _is_int(v) and v >= 64, "an integer >= 64"),
    "n_threads": (lambda v: v is None or (_is_int(v) and v >= 1), "None or an integer >= 1"),
    "extra": (lambda v: isinstance(v, Mapping), "a mapping of extra request fields"),
    "headers": (
        lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "a mapping of HTTP header names to string values",
    ),
}


def check_field(name: str, value: object, where: str = "LLMConfig") -> None:
    """Raise ConfigError naming the field (`where.name`), what it must be and the value given, unless it fits.

    A URL is shown without its `user:password@` and its query (either may hold a key).
    """
    ok, expected = _CHECKS[name]
    if not ok(value):
        shown = url_without_credentials(value) if name == "base_url" and isinstance(value, str) else value
        raise ConfigError(f"{where}.{name} must be {expected}; got {shown!r}")


def url_without_credentials(url: str) -> str:
    """`url` without its `user:password@` and its query (either may hold a key), for messages."""
    url = re.split(r"[?#]", url, maxsplit=1)[0]
    return re.sub(r"^([^:/]*://)[^/]*@", r"\1", url)


@dataclass
class LLMConfig:
    """How to reach a model. No base_url → the embedded llama.cpp backend.

    A served model is reached through the `openai` SDK (llm/served.py), and only at `base_url`: ifgym reads
    no `OPENAI_BASE_URL`. `api_type="azure"` speaks Azure OpenAI (`base_url` the resource's endpoint,
    `model` the deployment, `api_version` required). The API key is never stored here: `api_key_env`
    names the environment variable that holds it. `timeout` (seconds to wait for an answer; connecting
    has its own, shorter limit) and `max_retries` are the SDK's; a request whose answer timed out is not
    sent again (the server is likely still busy with it). `extra` is sent as additional request fields
    (served: the SDK's `extra_body`; embedded: keyword arguments of `Llama.create_chat_completion`, e.g.
    `top_k`). `headers` are sent with every request (a gateway's key, say; they win over ifgym's own);
    run records show their names, never their values.
    A reply longer than `max_reply_chars` is cut there and counted (`long_reply="truncate"`) or raises
    ReplyTooLongError (`"fail"`).
    """

    base_url: str | None = None
    model: str = "qwen2.5-coder-1.5b-instruct"
    api_key_env: str | None = "OPENAI_API_KEY"
    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int = 512
    seed: int | None = None
    timeout: float = 60.0
    max_retries: int = 4
    concurrency: int = 4
    max_reply_chars: int = 100_000
    long_reply: str = "truncate"
    # embedded backend only
    embedded_model: str = "qwen2.5-coder-1.5b"  # or "smollm2-135m" (fast, weak; for tests), or a .gguf path
    n_ctx: int = 8192
    n_threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    api_type: str = "openai"
    api_version: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check_field(f.name, getattr(self, f.name))
        clash = sorted(set(self.extra) & {*GEN_KEYS, "model", "messages"})
        if clash:
            raise ConfigError(f"LLMConfig.extra must not set {', '.join(clash)}: use the field(s) of that name")
        if self.api_type == "azure" and (self.base_url is None or self.api_version is None):
            raise ConfigError(
                "LLMConfig.api_type='azure' needs base_url (the resource's endpoint, e.g. "
                "'https://NAME.openai.azure.com') and api_version (e.g. '2024-10-21')"
            )


LLM_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(LLMConfig))


def config_from_mapping(data: Mapping[str, Any], where: str | None = None) -> LLMConfig:
    """Build an LLMConfig from a mapping (YAML, Hydra, kwargs); unknown keys and bad values → ConfigError.

    `where` is the mapping's key in the user's config (e.g. `policy.llm`): errors name `policy.llm.base_url`.
    """
    data = dict(data)
    for key in data:
        if key not in LLM_CONFIG_FIELDS:
            raise ConfigError(
                f"unknown {where or 'LLMConfig'} field {key!r}.{did_you_mean(str(key), LLM_CONFIG_FIELDS)} "
                f"Allowed: {', '.join(LLM_CONFIG_FIELDS)}"
            )
        if key in _CHECKS and not (key == "concurrency" and data[key] is None):
            check_field(key, data[key], where or "LLMConfig")
    for key in ("extra", "headers"):
        if isinstance(data.get(key), Mapping):
            data[key] = dict(data[key])  # e.g. an OmegaConf DictConfig
    if "concurrency" in data and data["concurrency"] is None:  # null: the caller's default (ifgym eval: the run's)
        del data["concurrency"]
    return LLMConfig(**data)


# A per-call override only (not a config field): ask for the first answer tokens' top alternatives.
LOGPROB_KEY = "top_logprobs"


def gen_params(config: LLMConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Merge config values and per-call overrides into one call's generation settings (None dropped).

    `top_logprobs=N` (1-20) asks for the log-probabilities of each answer token's N likeliest
    alternatives, as OpenAI's API asks (`logprobs: true, top_logprobs: N`; `Completion.top_logprobs`).
    """
    allowed = (*GEN_KEYS, LOGPROB_KEY)
    for key, value in overrides.items():
        if key not in allowed:
            raise ConfigError(
                f"unknown generation override {key!r}.{did_you_mean(key, allowed)} Allowed: {', '.join(allowed)}"
            )
        if key == LOGPROB_KEY:
            if value is not None and not (_is_int(value) and 1 <= value <= 20):
                raise ConfigError(f"top_logprobs must be None or an integer from 1 to 20, got {value!r}")
        else:
            check_field(key, value)
    params = {k: getattr(config, k) for k in GEN_KEYS} | dict(overrides)
    if params.get(LOGPROB_KEY) is not None:
        params["logprobs"] = True
    return {k: v for k, v in params.items() if v is not None}
