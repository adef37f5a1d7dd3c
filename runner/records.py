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

import datetime as dt
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ifgym.runner.redaction import (
    clean_url,
    public_args,
    public_argv,
    public_command,
    redact_data,
    resume_line,
    resume_variables,
)
from ifgym.runner.redaction import public as public_config

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
    "public_command",
    "run_key",
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
    "policy._target_": None,  # a policy of your own (policy=custom)
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
    """Hash of what defines the episodes: the env, policy and judge settings, less operational LLM keys.

    A model server's host and port are not in it (a rerun after the server moved resumes); run.json
    records each invocation's servers.
    """

    def strip(node: Any) -> Any:
        if isinstance(node, Mapping):
            # an empty `extra` (request fields) is left out: runs from before the field keep their key; likewise
            # the API type and version at their defaults
            return {
                k: _without_address(v) if k == "base_url" else strip(v)
                for k, v in node.items()
                if k not in OPERATIONAL_LLM_KEYS
                and (k, v) not in (("extra", {}), ("api_type", "openai"))
                and not (k == "api_version" and v is None)
            }
        return node

    keep = _without_added_later({k: strip(cfg[k]) for k in ("env", "policy", "judge")})
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:12]


def _without_address(url: Any) -> Any:
    """A model server's URL as the run key sees it: its path (e.g. `/v1`), not where the server runs."""
    if not isinstance(url, str):
        return url
    return urlsplit(url).path


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

    # credentials are left out (a resume command gives them as `${oc.env:…}`): the same sweep, the same folder
    kept = sorted(clean_url(o) for o in overrides if defines(o))
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


def ifgym_record(path: Path) -> dict[str, Any] | None:
    """The run record (or summary) at `path` when ifgym wrote it (it names its ifgym version and run key), else None.

    A file that is missing is None too: check `path.exists()` to tell a foreign file from none.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    mark = data.get("run", data)  # a summary carries the reference to its run record
    if isinstance(mark, dict) and "ifgym_version" in mark and "run_key" in mark:
        return data
    return None


def stale_summary(summary_path: Path, session: Mapping[str, Any]) -> str | None:
    """Why the summary at `summary_path` is stale, when it is the ending of a session other than `session`.

    `session` is a run record's `pid` and `started`; None when there is no summary of ifgym's or it is that session's.
    """
    summary = ifgym_record(summary_path)
    if summary is None:
        return None
    reference = summary.get("run") or {}
    if reference.get("started") == session.get("started"):
        return None
    ending = (summary.get("ending") or {}).get("status", "finished")
    return (
        f"{summary_path} is stale: it tells the ending of an earlier session (started {reference.get('started')}: "
        f"{ending}, {summary.get('episodes')} episodes), not of the last one (pid {session.get('pid')}, started "
        f"{session.get('started')}), which ended before writing its own; the episodes file holds what was played"
    )


def record_notes(folder: Path, *, writer_alive: bool) -> list[str]:
    """What a reader must be told of a run folder's records: a run still going, or killed, and a stale summary.

    `writer_alive`: whether a process holds the run's episodes file (its writer lock).
    """
    record = ifgym_record(folder / RECORD_FILE)
    if record is None:
        return []
    notes = []
    session = {"pid": record.get("pid"), "started": record.get("started")}
    if record.get("status") == "running":
        if writer_alive:
            return [
                f"the run is still going (pid {session['pid']}, started {session['started']}): its summary is not final"
            ]
        notes.append(
            f"{folder / RECORD_FILE} says the run started {session['started']} (pid {session['pid']}) is running, "
            f"but no process holds its episodes: it was killed; resume with: "
            f"{resume_line(record.get('command') or '', record.get('command_env') or {})}"
        )
    stale = stale_summary(folder / "summary.json", session)
    if stale:
        notes.append(stale)
    return notes


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
            "command_env": resume_variables(command),  # what the command's `${oc.env:…}` read
            "cwd": os.getcwd(),
            "machine": machine(),
            "event_loop": event_loop_name(),  # uvloop, or asyncio's own where uvloop is not installed
            "models": {},
            "hydra": public_config(dict(hydra or {})),
            "config": public_config(dict(config)),
        }

    def start(self, clients: Mapping[str, Any]) -> None:
        """Record the run's models (once its clients exist) and where this invocation found them; write the file.

        A resumed run may reach its servers elsewhere (their address is not in the run key): `invocations`
        says where each invocation found them.
        """
        self.data["models"] = models(clients)
        servers = {role: m["host"] for role, m in self.data["models"].items() if m["host"]}
        this = {"started": self.data["started"], "servers": servers}
        self.data["invocations"] = [*self._earlier_invocations(), this]
        self.write()

    def _earlier_invocations(self) -> list[dict[str, Any]]:
        """The `invocations` of the run.json this one replaces (a file of the same run), else none."""
        try:
            old = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        if not isinstance(old, dict) or old.get("run_key") != self.data["run_key"]:
            return []
        earlier = old.get("invocations")
        return [i for i in earlier if isinstance(i, dict)] if isinstance(earlier, list) else []

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

    def resume(self) -> str:
        """The command that resumes the run, as recorded, and the variables it reads, named."""
        return resume_line(self.data["command"], self.data.get("command_env") or {})

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
        text = json.dumps(redact_data(self.data), indent=2, ensure_ascii=False, default=str)
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
