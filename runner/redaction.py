r"""The run's credentials, and the one step that takes them out of everything ifgym stores, prints or logs.

A run's credentials are collected where they are given (`remember_overrides`: the command line,
before Hydra prints or saves anything; `remember_config`: each job's resolved config): the key in
the variable each `*.llm.api_key_env` names, every header value (`*.llm.headers`), a URL's
`user:password@` (each part, the pair, and the pair's HTTP Basic form) and its query values, and
the value of any secret-looking key. The values of secret-looking environment variables
(`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`) and `sk-…` keys are searched for too.

`redact(text)` replaces each of them, in every form it is written in (as given; escaped by Hydra
as in `-m` overrides, `http\://user\:pw@`; JSON, YAML and URL escaped), with `[redacted]`.
`public(data)` is what a config or record may show: secret-looking keys dropped, header values
`<hidden>`, URLs cut of `user:password@` (and http(s) ones of their query), then `redact`.
`public_args` is a command line that runs as given, with every credential in it replaced by an
environment-variable interpolation (`${oc.env:IFGYM_…}`) that `resume_variables` names.
`redacting_streams` applies `redact` to everything written to standard output and error.
A value shorter than `MIN_SEARCHED` characters is hidden where it is given but not searched for
in free text (it would blank ordinary words).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

__all__ = [
    "HIDDEN",
    "known",
    "REDACTED",
    "public",
    "public_args",
    "public_argv",
    "public_command",
    "public_yaml_file",
    "redact",
    "redact_data",
    "redact_json_line",
    "redacting_streams",
    "remember",
    "remember_config",
    "remember_overrides",
    "resume_line",
    "resume_variables",
]

HIDDEN = "<hidden>"  # a header's value, or a secret key's, where its name is shown
REDACTED = "[redacted]"  # a credential found in free text
MIN_SEARCHED = 6
SECRET_KEYS = ("api_key", "apikey", "token", "password", "secret")
SECRET_VARIABLE_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_KEY_PATTERNS = r"\bsk-[A-Za-z0-9_\-]{8,}|Bearer\s+[^\s\"'\\]+|api[_-]?key=[^&\s\"'\\]+"

_given: set[str] = set()  # this process's credentials, as given (every form is made from these)
_cache: dict[frozenset[str], Any] = {}


def secret_key(key: str) -> bool:
    """A key that would hold a secret value (`api_key`, `wandb_token` …); `api_key_env` only names a variable."""
    key = key.lower()
    return any(key == s or key.endswith(f"_{s}") for s in SECRET_KEYS)


def remember(*values: Any) -> None:
    """Add credentials (strings; empty ones and non-strings are ignored) to those `redact` takes out."""
    for value in values:
        if isinstance(value, str) and value:
            _given.add(value)
            if value != unquote(value):  # a percent-encoded password is sent decoded
                _given.add(unquote(value))


def _remember_url(text: str) -> None:
    """The credentials of every URL in `text`: user, password, the pair and its Basic form, query values."""
    for match in re.finditer(r"[A-Za-z][A-Za-z0-9+.-]*(?:\\?:)//(\S+)", text):
        rest = match[1].replace("\\:", ":").replace("\\=", "=")  # Hydra's escapes
        host = re.match(r"[^/?#]*", rest)[0]  # type: ignore[index]
        if "@" in host:
            userinfo = host.rpartition("@")[0]
            user, _, password = userinfo.partition(":")
            remember(userinfo, user, password)
            pair = f"{unquote(user)}:{unquote(password)}"
            remember(base64.b64encode(pair.encode()).decode())
        query = urlsplit("http://" + rest).query if "?" in rest else ""
        remember(*(value for _, value in parse_qsl(query, keep_blank_values=False)))


def _remember_node(node: Any, path: tuple[str, ...]) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            key = str(key)
            if key == "headers":
                _remember_leaves(value)
            elif key == "api_key_env" and isinstance(value, str):
                remember(os.environ.get(value))
            elif secret_key(key):
                _remember_leaves(value)
            else:
                _remember_node(value, (*path, key))
    elif isinstance(node, list | tuple):
        for value in node:
            _remember_node(value, path)
    elif isinstance(node, str) and "//" in node:
        _remember_url(node)


def _remember_leaves(node: Any) -> None:
    if isinstance(node, Mapping):
        for value in node.values():
            _remember_leaves(value)
    elif isinstance(node, list | tuple):
        for value in node:
            _remember_leaves(value)
    elif isinstance(node, str):
        if "//" in node:
            _remember_url(node)
        if not node.startswith("${"):  # an interpolation names where the value is, not the value
            remember(node)


def known() -> frozenset[str]:
    """The credentials this process was given (for a worker process to `remember` them too)."""
    return frozenset(_given)


def remember_config(config: Any) -> None:
    """Add the credentials of a (resolved) config: headers, keys from `api_key_env`'s variables, URLs' parts."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(config, DictConfig | ListConfig):
        config = OmegaConf.to_container(config, resolve=False)
    _remember_node(config, ())


def remember_overrides(overrides: Iterable[str]) -> None:
    """Add the credentials given in command-line overrides (sweeps and Hydra's quoting included)."""
    for item in overrides:
        _remember_url(item)  # as typed, whatever Hydra makes of it
        for value in _override_values(item):
            if isinstance(value, tuple):  # (key path, value): under a headers or secret key
                _remember_leaves(value[1])
            else:
                _remember_node(value, ())


def _override_values(item: str) -> list[Any]:
    """What one override gives, as config nodes (a sweep's every value); its raw text when Hydra cannot parse it."""
    key, eq, raw = item.partition("=")
    if not eq:
        return []
    parts = key.lstrip("+~").split(".")
    values: list[Any]
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        override = OverridesParser.create().parse_override(item)
        value = override.value()
        values = list(getattr(value, "list", None) or []) if override.is_sweep_override() else [value]
    except Exception:  # noqa: BLE001 - any text Hydra rejects is still searched as it is
        values = [raw]
    if "headers" in parts:
        return [("headers", {parts[-1]: v} if parts[-1] != "headers" else v) for v in values]
    if parts[-1] == "api_key_env":
        return [{"api_key_env": v} for v in values]
    if secret_key(parts[-1]):
        return [("secret", v) for v in values]
    return values


def _searched() -> frozenset[str]:
    """Every credential searched for now: those given, and secret-looking environment variables' values."""
    found = {v for v in _given if len(v) >= MIN_SEARCHED}
    for name, value in os.environ.items():
        if len(value) >= 8 and any(word in name.upper() for word in SECRET_VARIABLE_WORDS):
            found.add(value)
    return frozenset(found)


def _hydra_escaped(text: str) -> str:
    return re.sub(r"([\\()\[\]{}:=, \t])", r"\\\1", text)


def _forms(value: str) -> set[str]:
    """The ways `value` may be written: as is, Hydra-, URL-, JSON-, YAML- and repr-escaped, and those escaped again."""
    first = {value, _hydra_escaped(value), quote(value, safe=""), quote(value), quote_plus(value)}
    out = set(first)
    for form in first:
        out.add(json.dumps(form)[1:-1])
        out.add(json.dumps(form, ensure_ascii=False)[1:-1])
        out.add(form.replace("'", "''"))  # YAML's single-quoted style
        out.add(repr(form)[1:-1])
    return {f for f in out if f}


def _core(value: str) -> str:
    """The longest run of `value` that no escaping changes: every written form of it holds that run."""
    runs = re.findall(r"[A-Za-z0-9_.~-]+", value)
    return max(runs, key=len) if runs else value


def _pattern(values: frozenset[str]) -> tuple[tuple[str, ...], re.Pattern[str]] | None:
    """What to look for first, and one pattern for every written form of `values`; None for no value.

    First: each value's `_core` (or its forms, when a core is short); the pattern's forms longest first.
    """
    if values not in _cache:
        if len(_cache) > 8:  # a few sets are in use at a time (the run's, and with the environment's)
            _cache.clear()
        forms = sorted({f for v in values for f in _forms(v)}, key=len, reverse=True)
        cores = {_core(v) for v in values}
        first = tuple(cores if min(map(len, cores), default=0) >= 4 else forms)
        _cache[values] = (first, re.compile("|".join(re.escape(f) for f in forms))) if forms else None
    return _cache[values]


def _found(text: str, values: frozenset[str]) -> re.Pattern[str] | None:
    """The pattern of `values` when one of them may be in `text`, else None.

    A substring search per value: a regular expression of many alternatives scans a long text many times slower.
    """
    known = _pattern(values)
    if known is None or not any(part in text for part in known[0]):
        return None
    return known[1]


_KEY_SHAPES = re.compile(_KEY_PATTERNS, re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with every credential this process knows of, in any of its written forms, as `[redacted]`.

    Key-shaped text (`sk-…`, `Bearer …`, `api_key=…`) goes too, whether or not the key is known.
    """
    pattern = _found(text, _searched())
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    return _KEY_SHAPES.sub(REDACTED, text)


def redact_json_line(line: str) -> str:
    """One episodes-file line with the known credentials redacted, still valid JSON.

    Error messages in it were redacted where they were made (`redact`); here only the credentials the
    run was given are looked for (not the environment's), the cheap check every line gets.
    """
    pattern = _found(line, frozenset(v for v in _given if len(v) >= MIN_SEARCHED))
    if pattern is None:
        return line
    cut = pattern.sub(REDACTED, line)
    try:
        json.loads(cut)
        return cut
    except ValueError:  # a credential cut across an escape: redact the values, not the text
        return json.dumps(redact_data(json.loads(line)), ensure_ascii=False)


def redact_data(data: Any) -> Any:
    """JSON-like data with `redact` applied to every string in it (keys too); other values as they are."""
    if isinstance(data, Mapping):
        return {redact(k) if isinstance(k, str) else k: redact_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(v) for v in data]
    return redact(data) if isinstance(data, str) else data


# where a URL starts (`scheme://`, or Hydra's escaped `scheme\://`): a text is cut before each
_URL_START = re.compile(r"(?=\b[A-Za-z][A-Za-z0-9+.-]*\\?://)")


def clean_url(value: str) -> str:
    """A text with every URL in it cut of `user:password@`, and http(s) URLs of `?query` and `#fragment`.

    Works on any text, not only a whole URL (an override, Hydra's comma-joined overrides). A URL's
    host part runs to its first `/`, `?` or `#`; everything in it up to its last `@` goes.
    """
    pieces = _URL_START.split(value)
    return pieces[0] + "".join(_clean_piece(piece) for piece in pieces[1:])


def _clean_piece(piece: str) -> str:
    scheme, sep, rest = piece.partition("://")
    url, tail = re.match(r"(\S*)(.*)", rest, re.DOTALL).groups()  # type: ignore[union-attr]
    host, path = re.match(r"([^/?#]*)(.*)", url, re.DOTALL).groups()  # type: ignore[union-attr]
    host = host.rpartition("@")[2]
    if scheme.rstrip("\\").lower() in ("http", "https"):
        path = re.split(r"[?#]", path, maxsplit=1)[0]
    return f"{scheme}{sep}{host}{path}{tail}"


# `KEY=` of an override, alone or in Hydra's comma-joined list of them (`+policy.llm.headers.X-Key=…`)
_OVERRIDE_KEY = re.compile(r"(?:^|,)\s*[+~]*([A-Za-z_][\w.\-/@]*)=")


def _clean_overrides(text: str) -> str:
    """`text` with the value of an override of a secret-looking key, or of a header, hidden (to its end)."""
    for match in _OVERRIDE_KEY.finditer(text):
        parts = match[1].lower().split(".")
        if secret_key(parts[-1]) or "headers" in parts:
            return text[: match.end()] + HIDDEN
    return text


def public(config: Any) -> Any:
    """The config (or any record) as it may be shown and stored.

    Secret-looking keys dropped; headers keep their names, their values hidden; a string has its
    URLs cut of credentials, a secret or header override's value hidden, then `redact`.
    """
    if isinstance(config, Mapping):
        return {
            k: _hidden_headers(v) if str(k).lower() == "headers" else public(v)
            for k, v in config.items()
            if not secret_key(str(k))
        }
    if isinstance(config, list | tuple):
        return [public(v) for v in config]
    if isinstance(config, str):
        return redact(clean_url(_clean_overrides(config)))
    return config


def _hidden_headers(headers: Any) -> Any:
    if isinstance(headers, Mapping):
        return {name: HIDDEN for name in headers}
    return HIDDEN if headers else headers


def public_yaml_file(path: Path) -> None:
    """Rewrite a YAML file a library saved for ifgym (Hydra's sweep `multirun.yaml`) as `public` shows it."""
    import yaml

    if not path.is_file():
        return
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    clean = public(data)
    if clean != data:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(yaml.safe_dump(clean, sort_keys=False, allow_unicode=True), encoding="utf-8")
        tmp.replace(path)


# --- command lines that run as given ------------------------------------------------------------------


def _variable(*parts: str) -> str:
    return "IFGYM_" + re.sub(r"[^A-Za-z0-9]+", "_", "_".join(parts)).strip("_").upper()


def _interpolated(value: str, variable: str, needed: dict[str, str], what: str) -> str:
    if value.startswith("${"):  # already an interpolation: it names no credential
        return value
    needed[variable] = what
    return "${oc.env:" + variable + "}"


def _resume_arg(arg: str, needed: dict[str, str]) -> str:
    """One argument with each credential in it replaced by `${oc.env:IFGYM_…}` (noted in `needed`)."""
    key, eq, value = arg.partition("=")
    if not eq or arg.startswith("-"):
        return arg
    bare = key.lstrip("+~")
    parts = bare.split(".")
    if "headers" in parts and parts[-1] != "headers":  # +policy.llm.headers.X-Key=VALUE
        owner = ".".join(parts[: parts.index("headers")])
        what = f"the value of header {parts[-1]} of {owner}"
        return f"{key}={_interpolated(value, _variable(owner, 'header', parts[-1]), needed, what)}"
    if parts[-1] == "headers":  # +policy.llm.headers={X-Key:VALUE,…}
        owner = ".".join(parts[:-1])
        pairs = _header_pairs(value)
        if pairs is None:
            needed[_variable(owner, "headers")] = f"(give {bare} again: its values are not recorded)"
            return f"{key}={{}}"
        named = []
        for name, given in pairs:
            what = f"the value of header {name} of {owner}"
            named.append(f"{name}:{_interpolated(given, _variable(owner, 'header', name), needed, what)}")
        return f"{key}={{{','.join(named)}}}"
    if secret_key(parts[-1]):
        return f"{key}={_interpolated(value, _variable(bare), needed, f'the value of {bare}')}"

    def userinfo(match: re.Match[str]) -> str:
        return match[1] + _interpolated(match[2], _variable(bare, "userinfo"), needed, f"user:password of {bare}") + "@"

    value = re.sub(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s]+)@", userinfo, value)

    def query(match: re.Match[str]) -> str:
        name, given = match[2], match[3]
        what = f"the value of query parameter {name} of {bare}"
        return match[1] + name + "=" + _interpolated(given, _variable(bare, name), needed, what)

    if "://" in value:
        value = re.sub(r"""([?&])([^=&#\s'"]+)=([^&#\s,'"]*)""", query, value)
    return f"{key}={value}"


def _header_pairs(value: str) -> list[tuple[str, str]] | None:
    """`{Name:value,…}` as (name, value) pairs; None when it is not that shape."""
    if not (value.startswith("{") and value.endswith("}")):
        return None
    inner = value[1:-1].strip()
    if not inner:
        return []
    pairs = []
    for item in re.split(r",(?![^{]*})", inner):
        name, sep, v = item.partition(":")
        if not sep:
            return None
        pairs.append((name.strip(), v.strip().strip("'\"")))
    return pairs


def public_args(argv: Sequence[str]) -> list[str]:
    """A command line that runs as given, each credential in it an `${oc.env:IFGYM_…}` interpolation."""
    needed: dict[str, str] = {}
    return [redact(_resume_arg(arg, needed)) for arg in argv]


def resume_variables(argv: Sequence[str]) -> dict[str, str]:
    """The environment variables `public_args(argv)` reads, each with what it must hold."""
    needed: dict[str, str] = {}
    for arg in argv:
        _resume_arg(arg, needed)
    return needed


def resume_line(command: str, variables: Mapping[str, str]) -> str:
    """`command`, then what each variable it reads must hold (it runs as printed once they are set)."""
    if not variables:
        return command
    return f"{command}  (with {'; '.join(f'{name} set to {what}' for name, what in variables.items())})"


def public_command(argv: Sequence[str]) -> str:
    """`public_args` as a shell string."""
    return shlex.join(public_args(argv))


@contextlib.contextmanager
def public_argv() -> Iterator[None]:
    """A block in which `sys.argv` reads as `public_args` shows it, for libraries that record it (W&B's metadata)."""
    argv, sys.argv = sys.argv, public_args(sys.argv)
    try:
        yield
    finally:
        sys.argv = argv


class _RedactingStream:
    """A text stream that writes what it is given with `redact` applied (every other attribute is the stream's)."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacting_streams() -> Iterator[None]:
    """A block in which standard output and error pass through `redact` (Hydra's and the libraries' lines too)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _RedactingStream(out), _RedactingStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
