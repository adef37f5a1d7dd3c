"""A cache of model calls on disk, so re-running or re-scoring the same work costs no calls.

`CallCache(folder)` keeps one SQLite file (`folder/calls.sqlite`): each answered call is stored
under a hash of what decides its answer (the model name, the endpoint's host, the messages and
the generation settings, the request's extra fields), and the same call later is answered from
it. Only deterministic calls are cached (temperature 0: the model's greedy answer) unless
`nondeterministic=True`, which also replays sampled answers (a re-run then repeats the first
run's samples instead of drawing new ones). Every role's client (`LLMClient.cache`) goes through
it; a call answered from the cache is counted in usage as `cache_hits`, not as a call.

SQLite (Python's own) serves several processes at once (Ray workers, shards): writes take the
file's lock for a moment, and a reader never sees half an entry.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError
from ifgym.llm.conversation import Completion, Message

CACHE_FILE = "calls.sqlite"
# Completion fields kept per entry: the answer and what it cost when it was made.
_STORED = (
    "text",
    "prompt_tokens",
    "completion_tokens",
    "model",
    "finish_reason",
    "usage_reported",
    "cleaned",
    "truncated",
    "top_logprobs",
)


class CallCache:
    """Model calls and their answers in `folder/calls.sqlite`, keyed by model, host, messages and settings."""

    def __init__(self, folder: str | Path, *, nondeterministic: bool = False):
        folder = Path(folder).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"cache={folder} is a file; give a folder for the call cache (it holds {CACHE_FILE})")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(folder / CACHE_FILE, timeout=30, check_same_thread=False)
            with self._db:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, answer TEXT NOT NULL)")
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(
                f"cache={folder}: cannot open the call cache there ({exc}); give a writable folder"
            ) from None
        self.folder = folder
        self.nondeterministic = nondeterministic
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (into a Ray worker) as its folder: the copy opens the same file
        return (_reopen, (str(self.folder), self.nondeterministic))

    def __repr__(self) -> str:
        return f"CallCache({str(self.folder)!r}, nondeterministic={self.nondeterministic})"

    def key(self, model: str, host: str | None, messages: list[Message], params: Mapping[str, Any]) -> str | None:
        """The entry a call is stored under, or None when it is not cached (sampled, without `nondeterministic`)."""
        if not self.nondeterministic and params.get("temperature", 0) != 0:
            return None
        what = {"model": model, "host": host, "messages": messages, "params": dict(params)}
        return hashlib.sha256(json.dumps(what, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def get(self, key: str) -> Completion | None:
        """The stored answer of the call `key` names, or None."""
        with self._lock:
            row = self._db.execute("SELECT answer FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        stored = json.loads(row[0])
        if stored.get("top_logprobs") is not None:  # JSON lists back to the tuples a Completion holds
            stored["top_logprobs"] = tuple(tuple((t, float(p)) for t, p in alts) for alts in stored["top_logprobs"])
        return Completion(**stored)

    def put(self, key: str, completion: Completion) -> None:
        """Store a call's answer (a later identical call gets it)."""
        answer = json.dumps({name: getattr(completion, name) for name in _STORED}, ensure_ascii=False)
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO calls (key, answer) VALUES (?, ?)", (key, answer))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()


def _reopen(folder: str, nondeterministic: bool) -> CallCache:
    return CallCache(folder, nondeterministic=nondeterministic)
