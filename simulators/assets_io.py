"""Loading and validating the simulator's seed assets: the topic bank and the user styles.

The JSON files ship as package data (`ifgym/simulators/assets/*.json`); a path may be given
instead to use another bank. Every entry is validated, and a bad one is reported with the file,
the entry index and the field, so a hand-edited bank fails loudly at load time rather than
half-way through an episode.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ifgym.errors import DataFormatError, UnknownNameError
from ifgym.files import not_a_folder

__all__ = [
    "STRUCTFLOWBENCH_DIR",
    "Style",
    "Topic",
    "load_styles",
    "load_topics",
    "packaged_or_path",
    "styles_from_json",
    "topics_from_json",
]

# StructFlowBench's dataset and structure templates ship unmodified (MIT): LICENSE and SOURCE (upstream
# repository and commit) are in the same folder.
STRUCTFLOWBENCH_DIR = Path(str(importlib.resources.files("ifgym.simulators") / "assets" / "structflowbench"))


def packaged_or_path(value: str | Path, packaged: Mapping[str, Path], what: str) -> Path:
    """The file `value` names: a packaged file by its name (a key of `packaged`), or a path to a file.

    A bare word that is neither a packaged name nor an existing file is an UnknownNameError with a
    did-you-mean; a folder is a ConfigError. `what` names the file in errors (e.g. "dataset").
    """
    text = str(value)
    if isinstance(value, str) and text in packaged:
        return packaged[text]
    path = Path(text).expanduser()
    bare_word = isinstance(value, str) and "/" not in text and "\\" not in text and path.suffix == ""
    if bare_word and not path.exists():
        raise UnknownNameError(f"{what} name", text, packaged)
    return not_a_folder(path, what)


@dataclass(frozen=True)
class Topic:
    """One entry of the topic bank: what the user asks about, and words that belong to it."""

    id: str
    title: str
    domain: str
    keywords: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The entry as it is stored in topics.json."""
        return {"id": self.id, "title": self.title, "domain": self.domain, "keywords": list(self.keywords)}


@dataclass(frozen=True)
class Style:
    """One user style: who the user is and how they write (used by the LLM renderer)."""

    id: str
    persona: str
    traits: tuple[str, ...]
    voice: str

    def to_json(self) -> dict[str, Any]:
        """The entry as it is stored in styles.json."""
        return {"id": self.id, "persona": self.persona, "traits": list(self.traits), "voice": self.voice}


def _text(entry: Mapping[str, Any], name: str, where: str) -> str:
    if name not in entry:
        raise DataFormatError(f"{where}: missing field {name!r}")
    value = entry[name]
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    return value.strip()


def _texts(entry: Mapping[str, Any], name: str, where: str) -> tuple[str, ...]:
    if name not in entry:
        raise DataFormatError(f"{where}: missing field {name!r}")
    value = entry[name]
    if not isinstance(value, list) or not value:
        raise DataFormatError(f"{where}: field {name!r} must be a non-empty list of strings, got {value!r}")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise DataFormatError(f"{where}: {name}[{i}] must be a non-empty string, got {item!r}")
        if item.strip() in out:
            raise DataFormatError(f"{where}: {name}[{i}] {item!r} appears twice")
        out.append(item.strip())
    return tuple(out)


def _entries(data: Any, source: str, fields: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    if not isinstance(data, list) or not data:
        raise DataFormatError(f"{source}: expected a non-empty JSON list of entries, got {type(data).__name__}")
    out = []
    for index, entry in enumerate(data):
        where = f"{source}: entry {index}"
        if not isinstance(entry, Mapping):
            raise DataFormatError(f"{where}: expected an object, got {type(entry).__name__}")
        extra = sorted(set(entry) - set(fields))
        if extra:
            raise DataFormatError(f"{where}: unknown field(s) {extra}; allowed: {list(fields)}")
        out.append((where, entry))
    return out


def _check_unique_ids(items: Sequence[Topic] | Sequence[Style], source: str) -> None:
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if item.id in seen:
            raise DataFormatError(f"{source}: entry {index}: id {item.id!r} already used by entry {seen[item.id]}")
        seen[item.id] = index


def topics_from_json(data: Any, source: str = "topics") -> tuple[Topic, ...]:
    """Validate parsed topics.json content (a list of objects) and build Topic objects."""
    topics = tuple(
        Topic(
            id=_text(entry, "id", where),
            title=_text(entry, "title", where),
            domain=_text(entry, "domain", where),
            keywords=_texts(entry, "keywords", where),
        )
        for where, entry in _entries(data, source, ("id", "title", "domain", "keywords"))
    )
    _check_unique_ids(topics, source)
    return topics


def styles_from_json(data: Any, source: str = "styles") -> tuple[Style, ...]:
    """Validate parsed styles.json content (a list of objects) and build Style objects."""
    styles = tuple(
        Style(
            id=_text(entry, "id", where),
            persona=_text(entry, "persona", where),
            traits=_texts(entry, "traits", where),
            voice=_text(entry, "voice", where),
        )
        for where, entry in _entries(data, source, ("id", "persona", "traits", "voice"))
    )
    _check_unique_ids(styles, source)
    return styles


def _read_json(path: str | Path | None, packaged: str) -> tuple[Any, str]:
    if path is None:
        resource = importlib.resources.files("ifgym.simulators") / "assets" / packaged
        source = f"ifgym/simulators/assets/{packaged}"
        try:
            text = resource.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataFormatError(
                f"{source} is missing from the installed package; reinstall ifgym or pass a path"
            ) from None
    else:
        source = str(path)
        try:
            text = not_a_folder(path, packaged.removesuffix(".json")).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataFormatError(f"{source}: no such file") from None
    try:
        return json.loads(text), source
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


@functools.lru_cache(maxsize=8)
def _load_topics(path: str | None) -> tuple[Topic, ...]:
    data, source = _read_json(path, "topics.json")
    return topics_from_json(data, source)


@functools.lru_cache(maxsize=8)
def _load_styles(path: str | None) -> tuple[Style, ...]:
    data, source = _read_json(path, "styles.json")
    return styles_from_json(data, source)


def load_topics(path: str | Path | None = None) -> tuple[Topic, ...]:
    """The topic bank: the packaged topics.json, or the file at `path`. Cached per path."""
    return _load_topics(None if path is None else str(path))


def load_styles(path: str | Path | None = None) -> tuple[Style, ...]:
    """The user styles: the packaged styles.json, or the file at `path`. Cached per path."""
    return _load_styles(None if path is None else str(path))
