"""Run records: what identifies a run, where its folder is, and what the folder says about the run.

A run is identified by `run_key`, a hash of what defines its episodes (the env, policy and judge
settings; not how many episodes, where they go, how they are logged or how the calls are made), so
re-running the same command resumes into the same folder: `runs/<env>-<run_key>/` by default
(Hydra's `hydra.run.dir`; a sweep's jobs go to `hydra.sweep.dir/<job number>/`, by default
`runs/sweep-<hash of the sweep's overrides>/`).

`RunRecord` writes `run.json` into the run folder: the resolved config with secrets removed, the
ifgym version and git revision (when ifgym runs from a checkout), each role's model and endpoint
(host only), start and end time (UTC), the machine (CPU, cores, GPU, platform, Python), the event loop, the
command line, the Hydra job (mode, job number, sweep folder), the writing process's id and the run's
status: `running`, then how it ended (`ENDINGS`), or `failed` on an error.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "ENDINGS",
    "OPERATIONAL_LLM_KEYS",
    "RECORD_FILE",
    "RunRecord",
    "default_run_dir",
    "endpoint_host",
    "git_revision",
    "machine",
    "public_args",
    "public_argv",
    "public_config",
    "run_key",
    "scrub_hydra_files",
    "run_name",
    "sweep_name",
]

RECORD_FILE = "run.json"
# how a run can end, as run.json's status and summary.json's `ending` say (`failed` is an error instead)
ENDINGS = ("finished", "finished_with_failures", "stopped_early", "interrupted")
# LLM settings that change how a run is carried out, not what its episodes are: a resumed run may change them.
OPERATIONAL_LLM_KEYS = ("timeout", "max_retries", "concurrency", "n_threads", "api_key_env", "headers")
# Top-level eval keys that do not define a run's episodes (how many, where, how they are reported).
OPERATIONAL_KEYS = (
    "episodes",
    "seed",
    "concurrency",
    "output",
    "plots",
    "progress",
    "logger",
    "ci",
    "executor",
    "retry_failed",
    "max_failure_rate",
    "episode_timeout",
    "shard",
    "cache",
    "cache_nondeterministic",
)
SECRET_KEYS = ("api_key", "apikey", "token", "password", "secret")


# Settings added after runs were made, at the value that keeps the earlier behaviour: left out of the run key
# at that value, so a run from before the setting keeps its key (and its folder) and resumes into it.
KEYS_ADDED_LATER = {
    "env.pipeline": "ifgym",  # FlexBench's paper preset (issue 20)
    "env.metrics": "ifgym",
    "env.min_mean_constraints": None,
    "env.lengths": None,  # NTM: only the dialogues of these lengths  # EvolIF's trivial-dialogue filter (issue 20)
    "policy.context_agent.embedder_model": None,  # Context-Agent's paper preset (issue 19)
    "policy.context_agent.top_k": 1,
    "policy.context_agent.topic_decision": "summaries",
    "policy.context_agent.topic_summary": "running",
    "policy.context_agent.tree": True,
    "policy.context_agent.retrieval": True,
    "policy.context_agent.linear_k": None,
    "policy.graphif.graph_prompt": True,  # GraphIF's paper preset and Self-Refine (issue 19)
    "policy.graphif.summary": False,
    "policy.graphif.rewrite_format": "json",
    "policy.self_refine": {"rounds": 1},
    "env.judge_golden": False,
    "judge.threshold": None,  # probability mode's P(yes) threshold (issue 25)
}


def _without_added_later(keep: dict[str, Any]) -> dict[str, Any]:
    """`keep` less the settings of `KEYS_ADDED_LATER` at their earlier value, and an unset summary model."""
    for dotted, earlier in KEYS_ADDED_LATER.items():
        *path, name = dotted.split(".")
        node = keep
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and name in node and node[name] == earlier:
            del node[name]
    policy = keep.get("policy")
    if isinstance(policy, dict) and "summary_llm" in policy:
        # before summary_llm, summaries went to light_llm: one equal to it (or of another policy) changes nothing
        if policy.get("kind") != "context_agent" or policy["summary_llm"] == policy.get("light_llm"):
            del policy["summary_llm"]
    return keep


def run_key(cfg: Mapping[str, Any]) -> str:
    """Hash of what defines the episodes: the env, policy and judge settings, less operational LLM keys."""

    def strip(node: Any) -> Any:
        if isinstance(node, Mapping):
            # an empty `extra` (request fields) is left out: runs from before the field keep their key
            return {
                k: strip(v) for k, v in node.items() if k not in OPERATIONAL_LLM_KEYS and not (k == "extra" and v == {})
            }
        return node

    keep = _without_added_later({k: strip(cfg[k]) for k in ("env", "policy", "judge")})
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:12]


def run_name(cfg: Mapping[str, Any]) -> str:
    """`<env name>-<run_key>`, e.g. `EvolIF-v0-3f2a9c0d1b2e`: the default run folder's name."""
    return f"{str(cfg['env']['id']).split('/')[-1]}-{run_key(cfg)}"


def default_run_dir(cfg: Mapping[str, Any]) -> Path:
    """Where a run goes unless told otherwise: the folder of `output=` if given, else `runs/<run_name>`."""
    if cfg.get("output"):
        return Path(str(cfg["output"])).expanduser().parent
    return Path("runs") / run_name(cfg)


def sweep_name(config_name: str, overrides: Sequence[str]) -> str:
    """`sweep-<hash>` of a sweep's primary config name and its overrides, so a re-run resumes into the same folder.

    Overrides of keys that do not define episodes (`episodes=`, `progress=` …) are left out unless
    they are swept (a sweep over them defines the jobs), as they are left out of `run_key`.
    """

    def defines(item: str) -> bool:
        key = item.lstrip("+~").split("=", 1)[0]
        swept = "," in item.split("=", 1)[-1] or "(" in item.split("=", 1)[-1]
        top = key.split(".")[0]
        return swept or (top not in OPERATIONAL_KEYS and key.split(".")[-1] not in OPERATIONAL_LLM_KEYS)

    kept = sorted(o for o in overrides if defines(o))
    digest = hashlib.sha256(json.dumps([config_name, kept]).encode()).hexdigest()[:12]
    return f"sweep-{digest}"


def endpoint_host(url: str | None) -> str | None:
    """The host (and port) of a model endpoint, without credentials, path or query; None for None."""
    if not url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a number: the host alone (the client reports the bad URL)
        port = None
    return parts.hostname + (f":{port}" if port else "") if parts.hostname else None


# where a URL starts (`scheme://`): a text is cut before each, so one URL's parts never reach into the next
_URL_START = re.compile(r"(?=\b[A-Za-z][A-Za-z0-9+.-]*://)")


def _clean_url(value: str) -> str:
    """A text with every URL in it cut of `user:password@`, and http(s) URLs of `?query` and `#fragment`.

    Works on any text, not only a whole URL: an override (`key=URL`) or Hydra's comma-joined
    overrides (`a=http://host:1,b=…`), which no URL parser reads. It never parses a port. A URL's
    host part runs to its first `/`, `?` or `#`; everything in it up to its last `@` goes (as a
    URL parser would read it, so a password with a raw `@` goes whole).
    """
    pieces = _URL_START.split(value)
    return pieces[0] + "".join(_clean_piece(piece) for piece in pieces[1:])


def _clean_piece(piece: str) -> str:
    """One `scheme://…` piece of a text (no other URL in it): without credentials, and for http(s) a query."""
    scheme, _, rest = piece.partition("://")
    url, tail = re.match(r"(\S*)(.*)", rest, re.DOTALL).groups()  # type: ignore[union-attr]
    host, path = re.match(r"([^/?#]*)(.*)", url, re.DOTALL).groups()  # type: ignore[union-attr]
    host = host.rpartition("@")[2]
    if scheme.lower() in ("http", "https"):
        path = re.split(r"[?#]", path, maxsplit=1)[0]
    return f"{scheme}://{host}{path}{tail}"


def _secret(key: str) -> bool:
    """A key that would hold a secret value (`api_key`, `wandb_token` …); `api_key_env` only names a variable."""
    key = key.lower()
    return any(key == s or key.endswith(f"_{s}") for s in SECRET_KEYS)


HIDDEN = "<hidden>"  # what a header's value, or a secret override's, is shown as
# `KEY=` of an override, alone or in Hydra's comma-joined list of them (`+policy.llm.headers.X-Key=…`)
_OVERRIDE_KEY = re.compile(r"(?:^|,)\s*[+~]*([A-Za-z_][\w.\-/@]*)=")


def _clean_overrides(text: str) -> str:
    """`text` with the value of an override of a secret-looking key, or of an HTTP header, hidden (to its end).

    In Hydra's comma-joined overrides (`hydra.job.override_dirname`) what follows such a value goes too:
    where it ends cannot be told for sure, and nothing of the secret may stay.
    """
    for match in _OVERRIDE_KEY.finditer(text):
        parts = match[1].lower().split(".")
        if _secret(parts[-1]) or "headers" in parts:
            return text[: match.end()] + HIDDEN
    return text


def public_config(config: Any) -> Any:
    """The config as it may be shown and stored: secret-looking keys dropped, credentials cut from URLs.

    API keys never live in the config (they come from environment variables); this is a second guard.
    HTTP headers (`headers`, which may carry a gateway's key) keep their names, their values hidden;
    an override (`key=value`) of a secret-looking key or a header has its value hidden.
    """
    if isinstance(config, Mapping):
        return {
            k: _hidden_headers(v) if str(k).lower() == "headers" else public_config(v)
            for k, v in config.items()
            if not _secret(str(k))
        }
    if isinstance(config, list | tuple):
        return [public_config(v) for v in config]
    if isinstance(config, str):
        return _clean_url(_clean_overrides(config))
    return config


def _hidden_headers(headers: Any) -> Any:
    """Header names kept, values hidden (`{"X-Key": "<hidden>"}`); anything but a mapping is hidden whole."""
    if isinstance(headers, Mapping):
        return {name: HIDDEN for name in headers}
    return HIDDEN if headers else headers


def scrub_hydra_files(folder: str | Path) -> None:
    """Rewrite Hydra's own records in `folder` (`.hydra/*.yaml`, a sweep's `multirun.yaml`) as `public_config`.

    Hydra saves the command's overrides verbatim before the job starts; a URL with user:password@ or a
    `?key=` query given on the command line would otherwise stay on disk beside the cleaned run.json.
    """
    import yaml

    folder = Path(folder)
    for path in [*folder.glob(".hydra/*.yaml"), *folder.glob("multirun.yaml")]:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        clean = public_config(data)
        if clean != data:
            path.write_text(yaml.safe_dump(clean, sort_keys=False, allow_unicode=True), encoding="utf-8")


def public_args(argv: Sequence[str]) -> list[str]:
    """Command-line arguments with credentials cut from any URL in them, and secret or header overrides hidden."""
    return [_clean_url(_clean_overrides(arg)) for arg in argv]


@contextlib.contextmanager
def public_argv() -> Iterator[None]:
    """A block in which `sys.argv` reads as `public_args` shows it, for libraries that record it (W&B's metadata)."""
    argv, sys.argv = sys.argv, public_args(sys.argv)
    try:
        yield
    finally:
        sys.argv = argv


def public_command(argv: Sequence[str]) -> str:
    """The command line as a shell string, as `public_args` shows it."""
    return shlex.join(public_args(argv))


@functools.cache
def git_revision() -> dict[str, Any] | None:
    """The git commit of the ifgym source and whether it has uncommitted changes; None outside a checkout."""
    if shutil.which("git") is None:
        return None
    source = Path(__file__).resolve().parents[1]  # the package root

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != source:  # ifgym installed inside someone else's repository
        return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)} if commit else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    """GPU names as nvidia-smi lists them; [] without an NVIDIA driver (ifgym's embedded model runs on CPU)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


@functools.cache
def machine() -> dict[str, Any]:
    """The machine a run ran on: CPU model and cores, GPUs, OS, Python."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "gpus": _gpus(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def models(clients: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each role's model, backend and endpoint host, from the run's clients (`describe()`)."""
    out = {}
    for role, client in clients.items():
        described = client.describe()
        out[role] = {
            "model": described.get("model"),
            "backend": described.get("backend"),
            "host": endpoint_host(described.get("base_url")),
        }
    return out


class RunRecord:
    """`run.json` of one run folder (`name`: a shard's is `run.shard-I-of-N.json`), written at start, end or failure."""

    def __init__(
        self,
        folder: Path,
        *,
        config: Mapping[str, Any],
        key: str,
        command: Sequence[str],
        hydra: Mapping[str, Any] | None = None,
        name: str = RECORD_FILE,
    ):
        from ifgym.llm.loop import event_loop_name
        from ifgym.version import __version__

        self.path = Path(folder) / name
        self.data: dict[str, Any] = {
            "run_key": key,
            "status": "running",
            "pid": os.getpid(),
            "started": _now(),
            "finished": None,
            "ifgym_version": __version__,
            "git": git_revision(),
            "command": public_command(command),
            "cwd": os.getcwd(),
            "machine": machine(),
            "event_loop": event_loop_name(),  # uvloop, or asyncio's own where uvloop is not installed
            "models": {},
            "hydra": public_config(dict(hydra or {})),
            "config": public_config(dict(config)),
        }

    def start(self, clients: Mapping[str, Any]) -> None:
        """Record the run's models (once its clients exist) and write the file."""
        self.data["models"] = models(clients)
        self.write()

    def stale_run(self) -> dict[str, Any] | None:
        """The pid and start of the run the existing file says is `running`, or None.

        Asked once this process holds the episodes file's writer lock: that run's process is gone
        (killed, e.g. by kill -9), since a live one would still hold the lock.
        """
        try:
            old = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(old, dict) or old.get("status") != "running":
            return None
        return {"pid": old.get("pid"), "started": old.get("started")}

    def finish(self, status: str = "finished", **facts: Any) -> None:
        """Mark how the run ended (a status of `ENDINGS`), with `facts` (e.g. episodes=…), and write the file."""
        if status not in ENDINGS:
            raise ValueError(f"unknown run ending {status!r}; one of {', '.join(ENDINGS)}")
        self.data.update(status=status, finished=_now(), error=None, **facts)
        self.write()

    def fail(self, error: BaseException) -> None:
        """Mark the run failed with the error's message, and write the file."""
        self.data.update(status="failed", finished=_now(), error=f"{type(error).__name__}: {error}")
        self.write()

    def summary_reference(self) -> dict[str, Any]:
        """What `summary.json` says about the run it belongs to."""
        return {
            "run_key": self.data["run_key"],
            "record": self.path.name,
            "started": self.data["started"],
            "ifgym_version": self.data["ifgym_version"],
            "git_commit": (self.data["git"] or {}).get("commit"),
        }

    def write(self) -> None:
        """Write run.json atomically (a reader never sees half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
