"""The embedded backend: a llama.cpp model in this process, loaded once and shared by every client.

`llama_cpp` is imported on the first call, never at import time.
"""

from __future__ import annotations

import atexit
import importlib.util
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.errors import BackendError, ConfigError
from ifgym.llm.config import check_field
from ifgym.llm.conversation import Message
from ifgym.llm.models import EMBEDDED_MODELS, QWEN_NAME, resolve_embedded_model

LLAMA_CPP_INSTALL = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON '
    '-DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AVX_VNNI=OFF" '
    "pip install --no-cache-dir llama-cpp-python==0.3.36"
)

# Prompt positions are evaluated in chunks of this many, aligned on multiples of it (see `_evaluate_prompt`).
CHUNK = 64


@dataclass
class _Loaded:
    """A loaded model, its lock and how many leading positions of its cache may be reused.

    The lock: a llama.cpp context must not be used from two threads at once. `whole`: the positions
    evaluated as whole aligned chunks, the only ones a later prompt reuses (`_evaluate_prompt`).
    """

    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    whole: int = 0


# One loaded model per (file, n_ctx) per process, shared by every client.
_LLAMAS: dict[tuple[str, int], _Loaded] = {}
_LLAMAS_LOCK = threading.Lock()


def _close_llamas() -> None:
    """Free loaded models at exit, while llama_cpp's module globals still exist.

    Left to the garbage collector during interpreter teardown, Llama.__del__ fails noisily.
    """
    with _LLAMAS_LOCK:
        for loaded in _LLAMAS.values():
            with loaded.lock:
                loaded.llama.close()
        _LLAMAS.clear()


def _require_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise BackendError(f"the embedded backend needs llama-cpp-python; install it with:\n  {LLAMA_CPP_INSTALL}")


# Request fields (`extra`) llama.cpp's chat completion takes, and the OpenAI-compatible servers' names it
# calls otherwise (vLLM's repetition_penalty is llama.cpp's repeat_penalty).
EXTRA_FIELDS = frozenset(
    {"top_k", "min_p", "typical_p", "stop", "presence_penalty", "frequency_penalty", "repeat_penalty", "tfs_z"}
    | {"mirostat_mode", "mirostat_tau", "mirostat_eta", "response_format", "grammar", "logit_bias"}
)
EXTRA_ALIASES = {"repetition_penalty": "repeat_penalty"}


def embedded_extra(extra: dict[str, Any], config_key: str | None = None) -> dict[str, Any]:
    """`extra` request fields as llama.cpp takes them; an unknown one is a ConfigError naming the ones it takes."""
    out = {EXTRA_ALIASES.get(k, k): v for k, v in extra.items()}
    unknown = sorted(set(out) - EXTRA_FIELDS)
    if unknown:
        where = f"{config_key}.extra" if config_key else "extra"
        raise ConfigError(
            f"{where}: the embedded model (llama.cpp) takes no request field {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(EXTRA_FIELDS | set(EXTRA_ALIASES)))} (or give the role a base_url)"
        )
    return out


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
        check_field("n_ctx", n_ctx)
        check_field("n_threads", n_threads)
        self.embedded_model = embedded_model
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.cache_dir = cache_dir
        self._slot: _Loaded | None = None

    @property
    def name(self) -> str:
        """A short model name for logs and verdict sources."""
        known = self.embedded_model in EMBEDDED_MODELS
        return self.embedded_model if known else Path(self.embedded_model).stem

    def load(self) -> Any:
        """Resolve the model file and load it (once per process); returns the llama_cpp.Llama."""
        return self._loaded().llama

    def _loaded(self) -> _Loaded:
        if self._slot is None:
            path = resolve_embedded_model(self.embedded_model, self.cache_dir).resolve()
            key = (str(path), self.n_ctx)
            with _LLAMAS_LOCK:
                if key not in _LLAMAS:
                    if not _LLAMAS:
                        atexit.register(_close_llamas)
                    _LLAMAS[key] = _Loaded(self._load_llama(path))
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

    def _prompt_tokens(self, llama: Any, messages: list[Message]) -> list[int]:
        """The tokens of `messages` through the model's chat template, ready for the assistant's answer."""
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            text = "".join(m["content"] + "\n" for m in messages)
            return llama.tokenize(text.encode(), add_bos=True)
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def token_text(token: int) -> str:
            return llama._model.token_get_text(token) if token != -1 else ""

        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=token_text(llama.token_eos()),
            bos_token=token_text(llama.token_bos()),
            add_generation_prompt=True,
        )
        rendered = formatter(messages=messages)
        return llama.tokenize(rendered.prompt.encode(), add_bos=not rendered.added_special, special=True)

    def first_token_logprobs(self, messages: list[Message], top: int) -> dict[str, Any]:
        """The answer's first token and its `top` likeliest alternatives, as an OpenAI-shaped completion.

        llama.cpp's own completion returns log-probabilities only for a model loaded with
        `logits_all` (a logits row per context position: gigabytes at this n_ctx); one row is all a
        yes/no verdict needs, so the prompt is evaluated (`_evaluate_prompt`, then its last token
        alone) and that position's logits are read.
        """
        import numpy as np

        loaded = self._loaded()
        llama = loaded.llama
        with loaded.lock:
            tokens = self._prompt_tokens(llama, messages)
            self._evaluate_prompt(loaded, tokens)
            llama.eval(tokens[-1:])
            logits = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),)).astype(np.float64)
            shifted = logits - logits.max()
            logprobs = shifted - np.log(np.exp(shifted).sum())
            best = np.argsort(-logprobs)[:top]
            pieces = [(llama.detokenize([int(t)]).decode("utf-8", "replace"), float(logprobs[t])) for t in best]
        alternatives = [{"token": tok, "logprob": lp} for tok, lp in pieces]
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": pieces[0][0]},
                    "finish_reason": "length",
                    "logprobs": {"content": [{**alternatives[0], "top_logprobs": alternatives}]},
                }
            ],
            "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1},
        }

    def _evaluate_prompt(self, loaded: _Loaded, tokens: list[int]) -> None:
        """Evaluate all of `tokens` but the last so that no number depends on what the model was asked before.

        llama.cpp's kernels give a position slightly different numbers when it is evaluated in a
        batch of another size or alignment (measured on Qwen2.5-Coder-1.5B Q4_K_M: logits up to 0.5
        apart, enough to flip a greedy token). Reusing whatever prefix the last call left in the
        cache, as llama.cpp does, made a reply depend on the calls before it, so on the order in
        which concurrent episodes reached the model. Here a position is always evaluated in its
        aligned chunk of `CHUNK` (from a multiple of it) with the same prompt tokens before it,
        only whole chunks are reused, and the last token is evaluated alone by the caller.
        """
        llama, head = loaded.llama, len(tokens) - 1
        if len(tokens) >= self.n_ctx:
            raise BackendError(
                f"embedded model {self.name!r}: the prompt has {len(tokens)} tokens, more than its context "
                f"holds with an answer; raise n_ctx (now {self.n_ctx})"
            )
        reusable = min(llama.n_tokens, loaded.whole, head)
        keep = 0
        while keep < reusable and llama.input_ids[keep] == tokens[keep]:
            keep += 1
        keep -= keep % CHUNK
        loaded.whole = keep  # what follows is rewritten now; an error part-way leaves it unused
        llama.n_tokens = keep
        for start in range(keep, head, CHUNK):
            llama.eval(tokens[start : min(start + CHUNK, head)])
        loaded.whole = head - head % CHUNK

    def count_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens of `messages` as this model would see them: its chat template, then its tokenizer.

        The template is the one stored in the gguf (what llama.cpp applies to chats); a model file
        without one falls back to the sum of the contents' tokens.
        """
        loaded = self._loaded()
        llama = loaded.llama
        with loaded.lock:
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
        """Run one chat completion; returns llama.cpp's OpenAI-shaped response dict.

        With `top_logprobs=N` only the first answer token is produced, with its N likeliest
        alternatives (`first_token_logprobs`).
        """
        top = extra.pop("top_logprobs", None)
        extra.pop("logprobs", None)
        if top is not None:
            return self.first_token_logprobs(messages, int(top))
        loaded = self._loaded()
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens, **extra}
        if top_p is not None:
            kwargs["top_p"] = top_p
        if seed is not None:
            kwargs["seed"] = seed
        with loaded.lock:
            # all but the last prompt token, so that llama.cpp's prefix match leaves that one to evaluate
            self._evaluate_prompt(loaded, self._prompt_tokens(loaded.llama, messages))
            try:
                return loaded.llama.create_chat_completion(messages=messages, **kwargs)
            except ValueError as exc:  # llama_cpp reports prompt-too-long and friends as ValueError
                raise BackendError(
                    f"embedded model {self.name!r} failed: {exc}. If the prompt is too long, raise n_ctx "
                    f"(now {self.n_ctx})."
                ) from exc
