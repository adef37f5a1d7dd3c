"""Reading the JSON files users point ifgym at, with errors that name the file and what is wrong.

A root module, so that ifgym.rewards and ifgym.simulators can both use it without importing each
other (the FlexBench caller must never import the evaluation side).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError, DataFormatError

__all__ = ["not_a_folder", "read_json_file"]


def not_a_folder(path: str | Path, what: str) -> Path:
    """`path` as a Path; a ConfigError naming `what` when it is a folder (a file was expected).

    Every reader of a user-given file calls it first, so a folder never ends in IsADirectoryError.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        example = f", e.g. {path / inside[0]}" if inside else ""
        raise ConfigError(f"{what} {str(path)!r} is a folder; give the file itself{example}")
    return path


def read_json_file(path: Path, what: str, *, empty_hint: str = "") -> Any:
    """The parsed content of the JSON file at `path`, which `what` names in errors (e.g. "caller file").

    A missing file is a ConfigError (the path given is wrong); an empty file or invalid JSON is a
    DataFormatError naming the file (its content is wrong). `empty_hint` follows the empty-file
    message, to say what the file should hold.
    """
    path = not_a_folder(path, what)
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    raw = path.read_text(encoding="utf-8")
    if not raw.strip():
        raise DataFormatError(f"{path}: the {what} is empty{empty_hint}")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}: not valid JSON ({exc})") from None
