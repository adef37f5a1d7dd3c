"""FlexBench's SOPs: the files an agent follows (`Sop`, `load_sop`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError, DataFormatError, UnknownNameError, did_you_mean
from ifgym.files import not_a_folder, read_json_file

ASSETS = Path(__file__).parents[1] / "assets"
SOP_DIR = ASSETS / "sops"
PERSONAS_PATH = ASSETS / "personas.json"
LEVELS = ("poor", "general", "good")
SOP_SUFFIXES = (".md", ".json")
CALLER_SUFFIX = ".user.json"
_FRONT_KEYS = ("name", "title", "opening_line")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

Message = dict[str, str]


# ---------------------------------------------------------------------------------------------
# SOP files
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sop:
    """One SOP instruction: what the assistant is told (the system prompt) and what it says first."""

    name: str
    instruction: str
    opening_line: str
    title: str = ""
    path: Path | None = None


def sop_names() -> tuple[str, ...]:
    """Names of the SOPs that ship with ifgym."""
    json_sops = (p.stem for p in SOP_DIR.glob("*.json") if not p.name.endswith(CALLER_SUFFIX))
    return tuple(sorted(p.stem for p in SOP_DIR.glob("*.md")) + sorted(json_sops))


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].strip()
    return value


def _sop(name: str, title: str, instruction: str, opening: str, path: Path | None, where: str) -> Sop:
    if not instruction.strip():
        raise DataFormatError(f"{where}: the SOP has no instruction text; write the procedure the assistant follows")
    if not opening.strip():
        raise DataFormatError(
            f"{where}: the SOP has no opening line; add `opening_line: <what the assistant says first>`"
            ' (Markdown: in the front matter between --- lines; JSON: an "opening_line" field)'
        )
    if not _NAME_RE.match(name):
        raise DataFormatError(f"{where}: SOP name {name!r} must be letters, digits, '_', '-' or '.'")
    return Sop(name=name, instruction=instruction.strip(), opening_line=opening.strip(), title=title.strip(), path=path)


def parse_sop_markdown(text: str, *, name: str = "sop", path: Path | None = None) -> Sop:
    """Read a Markdown SOP: a `---` front matter block with `opening_line:` (and optional name/title), then the text."""
    where = str(path) if path else "SOP text"
    if not text.strip():
        raise DataFormatError(f"{where}: the SOP file is empty; write the instruction and an opening line")
    lines = text.strip().splitlines()
    fields: dict[str, str] = {}
    body_start = 0
    if lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is None:
            raise DataFormatError(f"{where}: the front matter opened with --- on line 1 is never closed by a --- line")
        for number, line in enumerate(lines[1:end], start=2):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, value = line.partition(":")
            key = key.strip()
            if not sep:
                raise DataFormatError(f"{where}:{number}: front matter lines are `key: value`, got {line!r}")
            if key not in _FRONT_KEYS:
                raise DataFormatError(
                    f"{where}:{number}: unknown front matter key {key!r}.{did_you_mean(key, _FRONT_KEYS)} "
                    f"Allowed: {', '.join(_FRONT_KEYS)}"
                )
            fields[key] = _unquote(value)
        body_start = end + 1
    body = "\n".join(lines[body_start:])
    return _sop(fields.get("name", name), fields.get("title", ""), body, fields.get("opening_line", ""), path, where)


def parse_sop_json(data: Any, *, name: str = "sop", path: Path | None = None) -> Sop:
    """Read a JSON SOP: `{"name", "title", "instruction", "opening_line"}` (name and title optional)."""
    where = str(path) if path else "SOP mapping"
    if not isinstance(data, Mapping):
        raise DataFormatError(f"{where}: a JSON SOP is an object with 'instruction' and 'opening_line'")
    allowed = ("name", "title", "instruction", "opening_line")
    for key in data:
        if key not in allowed:
            raise DataFormatError(f"{where}: unknown field {key!r}.{did_you_mean(key, allowed)} Allowed: {allowed}")
    for key in allowed:
        if key in data and not isinstance(data[key], str):
            raise DataFormatError(f"{where}: field {key!r} must be a string, got {type(data[key]).__name__}")
    return _sop(
        data.get("name", name),
        data.get("title", ""),
        data.get("instruction", ""),
        data.get("opening_line", ""),
        path,
        where,
    )


def load_sop(sop: str | Path | Sop | Mapping[str, Any]) -> Sop:
    """An SOP by shipped name (`"merchant_onboarding"`), by path to a `.md`/`.json` file, or from a mapping."""
    if isinstance(sop, Sop):
        return sop
    if isinstance(sop, Mapping):
        return parse_sop_json(sop)
    if not isinstance(sop, str | Path):
        raise ConfigError(f"sop must be a shipped SOP name, a path to a .md/.json file, or a mapping; got {sop!r}")
    text = str(sop)
    path = Path(text).expanduser()
    looks_like_name = isinstance(sop, str) and "/" not in text and "\\" not in text and path.suffix == ""
    if looks_like_name:
        for suffix in SOP_SUFFIXES:
            if (SOP_DIR / f"{text}{suffix}").is_file():
                path = SOP_DIR / f"{text}{suffix}"
                break
        else:
            raise UnknownNameError("SOP", text, sop_names())
    not_a_folder(path, "SOP file")
    if not path.is_file():
        raise ConfigError(
            f"SOP file {str(path)!r} does not exist; give a shipped name ({', '.join(sop_names())}) or a path"
        )
    if path.suffix not in SOP_SUFFIXES:
        raise DataFormatError(f"{path}: an SOP file must end in .md or .json, not {path.suffix!r}")
    if path.suffix == ".json":
        data = read_json_file(path, "SOP file", empty_hint="; write the instruction and an opening line")
        return parse_sop_json(data, name=path.stem, path=path)
    return parse_sop_markdown(path.read_text(encoding="utf-8"), name=path.stem, path=path)
