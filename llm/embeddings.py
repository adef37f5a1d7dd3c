"""Sentence embeddings from an OpenAI-compatible server (`POST {base_url}/embeddings`), e.g. a served Qwen3-Embedding.

The request goes through the chat backend (`ServedBackend`: the `openai` SDK's `embeddings.create`):
the same credentials, proxy, retries and named errors. `EmbeddingClient.usage`
counts the requests, the inputs' tokens the server reported and the retries.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ifgym.errors import ConfigError
from ifgym.llm.config import LLMConfig, config_from_mapping
from ifgym.llm.conversation import Usage
from ifgym.llm.served import ServedBackend


class EmbeddingClient:
    """One OpenAI-compatible embeddings endpoint: `embed(texts)` answers one vector per text, in order.

    `config` is an LLMConfig (or a mapping of its fields) with a `base_url`; its `model`,
    `api_key_env`, `headers`, `timeout`, `max_retries` and `extra` apply as they do to chat calls.
    """

    def __init__(self, config: LLMConfig | Mapping[str, Any], config_key: str | None = None):
        config = config if isinstance(config, LLMConfig) else config_from_mapping(config, config_key)
        if not config.base_url:
            raise ConfigError(
                "an embeddings endpoint needs a base_url such as http://127.0.0.1:8000/v1 (an OpenAI-compatible "
                "server with POST /v1/embeddings)"
            )
        self.config = config
        self.usage = Usage()
        self._lock = threading.Lock()
        self._backend = ServedBackend(config, self._tally, config_key)

    def __reduce__(self) -> tuple[Any, ...]:  # a Ray worker gets its own connections, not this process's
        return (type(self), (self.config, self._backend.config_key))

    def __repr__(self) -> str:  # the host only: a base_url may carry credentials
        return f"EmbeddingClient(model={self.config.model!r}, host={self._backend.shown_url.split('/')[2]!r})"

    def _tally(self, update: Any) -> None:
        with self._lock:
            update(self.usage)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One embedding per text (the server's vectors as they come, not normalised)."""
        if not texts:
            return []
        rows = self._backend.embed(list(texts))
        with self._lock:
            self.usage.calls += 1
        return rows

    def close(self) -> None:
        """Close the connections."""
        self._backend.close()
