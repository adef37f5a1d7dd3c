"""Weights & Biases logging for `ifgym eval` (wandb, the `wandb` extra, is imported only when this logger is used).

Settings follow W&B's conventions: a value set in the config (`logger.project=…`) wins, else W&B's
environment variable (`WANDB_PROJECT`, `WANDB_ENTITY`, `WANDB_MODE`, `WANDB_DIR`, `WANDB_NAME`,
`WANDB_RUN_GROUP`, `WANDB_TAGS`), else ifgym's default: project `ifgym`, mode `online` when an API key
is configured (`WANDB_API_KEY` or a netrc entry for the W&B host) and `offline` otherwise, files in the
run folder, the run folder's name, and in a sweep the sweep as the group. `disabled` logs nothing.

A run logs: its config (secrets removed) and protocol; per-episode metrics as history
(`episode/…`, strict and `episode/loose/…`, with the policy's calls and tokens); as the run summary
the run's metrics with their bootstrap intervals (`strict/CSR`, `strict/CSR/ci_low` …), calls and
tokens per role (`usage/<role>/…`), the policy's cost figures and the judge with its audit's numbers
(`judge/mode`, `judge/audit/accuracy` …), never the last episode's values;
the survival curve and per-group pass rates as native charts (`wandb.plot.line`, `wandb.plot.bar`)
and as the PNGs; a transcript table with each turn's reward, patience, and verdict labels and
reasons, strict and loose; and the run's files (episodes, summary.json, run.json, plots and the task's
report files) as a versioned artifact of type `evaluation`, named after the run's settings
(`<env>-<run_key>`, as the default run folder), so each evaluation of the same settings is a new version.
The W&B run's id, project and entity are stored in run.json (`wandb`) and summary.json (`run.wandb`).
"""

from __future__ import annotations

import math
import netrc
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ifgym.core import Episode, TurnRecord
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.runner.records import RECORD_FILE, run_name
from ifgym.runner.redaction import public, public_argv

WANDB_INSTALL = "pip install 'ifgym[wandb]'  (wandb>=0.17,<0.32; make's set-up installs it)"
MODES = ("online", "offline", "disabled")
# W&B's own spellings of its modes (WANDB_MODE=dryrun is offline)
MODE_ALIASES = {"dryrun": "offline", "run": "online"}
ENV_VARS = {
    "project": "WANDB_PROJECT",
    "entity": "WANDB_ENTITY",
    "mode": "WANDB_MODE",
    "dir": "WANDB_DIR",
    "name": "WANDB_NAME",
    "group": "WANDB_RUN_GROUP",
    "tags": "WANDB_TAGS",
}
TRANSCRIPT_COLUMNS = (
    "episode_id",
    "seed",
    "turn",
    "user",
    "reply",
    "reward",
    "patience",
    "strict",
    "strict_reasons",
    "loose",
    "loose_reasons",
    "done_reason",
)


def api_key_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether W&B would find an API key: `WANDB_API_KEY`, or a netrc entry for the W&B host (`WANDB_BASE_URL`)."""
    if environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(environ.get("NETRC")).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_settings(
    settings: Mapping[str, Any],
    *,
    run_dir: Path,
    name: str,
    group: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> dict[str, Any]:
    """The W&B settings of a run: the config's value if set, else W&B's environment variable, else ifgym's default.

    `run_dir`, `name` and `group` are ifgym's defaults for `dir`, `name` and `group` (the run
    folder, its name, and the sweep in a sweep). `tags` from the environment are comma-separated.
    """
    defaults: dict[str, Any] = {
        "project": "ifgym",
        "entity": None,
        "mode": "online" if api_key_configured(environ) else "offline",
        "dir": str(run_dir),
        "name": name,
        "group": group,
        "tags": [],
    }
    out: dict[str, Any] = {}
    for key, default in defaults.items():
        value = settings.get(key)
        if value is None and environ.get(ENV_VARS[key]):
            value = environ[ENV_VARS[key]]
            if key == "tags":
                value = [t.strip() for t in value.split(",") if t.strip()]
        out[key] = default if value is None else value
    out["tags"] = [str(t) for t in out["tags"]]
    out["mode"] = MODE_ALIASES.get(str(out["mode"]), str(out["mode"]))
    if out["mode"] not in MODES:
        raise UnknownNameError("W&B mode (logger.mode or WANDB_MODE)", out["mode"], MODES)
    return out


def _flat(prefix: str, values: Mapping[str, Any]) -> dict[str, float]:
    """Numeric values of a (nested) mapping as `prefix/key/…` entries; NaN left out (W&B shows it as missing)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(_flat(f"{prefix}/{key}", value))
        elif isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value):
            out[f"{prefix}/{key}"] = value
    return out


def item_names(turn: TurnRecord) -> list[str]:
    """What each verdict of a turn is about: its checklist item ids, else its constraint ids."""
    names = [i.id for i in turn.spec.checklist] or [c.id for c in turn.spec.constraints]
    return names if len(names) == len(turn.verdicts) else [f"item {k + 1}" for k in range(len(turn.verdicts))]


def run_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The run's figures as W&B summary keys: metrics with intervals, episodes, usage, policy cost, failures."""
    out: dict[str, Any] = {"episodes": summary.get("episodes")}
    for mode in ("strict", "loose"):
        out.update(_flat(mode, summary.get(mode, {})))
        for metric, bounds in (summary.get("ci") or {}).get(mode, {}).items():
            if bounds:
                out[f"{mode}/{metric}/ci_low"], out[f"{mode}/{metric}/ci_high"] = bounds
    for role, usage in summary.get("usage", {}).items():
        out.update(_flat(f"usage/{role}", usage))
    out.update(_flat("policy_cost", summary.get("policy_cost") or {}))
    out.update(_flat("user_stats", summary.get("user_stats") or {}))
    failures = summary.get("failures") or {}  # failed episodes: how many, by error type and by HTTP status
    out.update(_flat("failures", {k: failures[k] for k in ("episodes", "by_type", "by_status") if k in failures}))
    judge = summary.get("judge") or {}  # which judge scored the run, in which mode, and its audit's numbers
    for key in ("kind", "model", "mode", "trust", "trusted_below_floor", "audit_skipped"):
        if key in judge:
            out[f"judge/{key}"] = judge[key]
    for key, value in (judge.get("audit") or {}).items():
        if value is None or isinstance(value, bool | int | float | str):
            out[f"judge/audit/{key}"] = value
    for key, value in (judge.get("real_audit") or {}).items():  # agreement with the benchmark's judge, real replies
        if value is None or isinstance(value, bool | int | float | str):
            out[f"judge/real_audit/{key}"] = value
    out.update(agreement_summary(summary.get("agreement") or {}))  # the judge against this run's human labels
    return out


def agreement_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """`ifgym agreement`'s result as W&B summary keys: `agreement/<group>/<figure>`, its `…/ci_low` and `…/ci_high`."""
    out: dict[str, Any] = {}
    for group, row in result.get("groups", {}).items():
        for figure, value in row.items():
            if figure != "ci" and value is not None:
                out[f"agreement/{group}/{figure}"] = value
        for figure, bounds in row.get("ci", {}).items():
            if bounds:
                out[f"agreement/{group}/{figure}/ci_low"], out[f"agreement/{group}/{figure}/ci_high"] = bounds
    return out


def import_wandb() -> Any:
    """The wandb module; a ConfigError naming the extra to install when it is missing."""
    try:
        import wandb
    except ImportError:
        raise ConfigError(f"logger=wandb needs Weights & Biases: {WANDB_INSTALL}") from None
    return wandb


def stored_run(folder: Path) -> dict[str, Any] | None:
    """The W&B run `ifgym eval logger=wandb` logged a run folder to, as its run.json stores it (`wandb`), or None."""
    import json

    record = folder / RECORD_FILE
    if not record.is_file():
        return None
    stored = json.loads(record.read_text(encoding="utf-8")).get("wandb")
    return stored if isinstance(stored, dict) and stored.get("id") else None


def log_agreement(folder: Path, result: Mapping[str, Any]) -> str | None:
    """Add `ifgym agreement`'s result to the summary of the run's W&B run (resumed by id); the W&B mode used.

    None when the folder's run.json stores no W&B run, or W&B is disabled (WANDB_MODE, or the run's
    logger.mode). The run is resumed in the project and entity run.json stores; the mode and folder are
    the run's settings (its `run.json` config's logger) as `resolve_settings` reads them.
    """
    import json
    import sys

    stored = stored_run(folder)
    if stored is None:
        if (folder / "wandb").is_dir():  # an older ifgym logged it, but stored no id to resume it by
            print(
                f"W&B: {folder / RECORD_FILE} stores no W&B run id (written by an older ifgym): the agreement is "
                "in summary.json only",
                file=sys.stderr,
            )
        return None
    record = folder / RECORD_FILE
    config = json.loads(record.read_text(encoding="utf-8")).get("config", {}) if record.exists() else {}
    settings = resolve_settings(config.get("logger") or {}, run_dir=folder, name=folder.name)
    if settings["mode"] == "disabled":
        return None
    wandb = import_wandb()

    with public_argv():  # `ifgym agreement` takes no credentials, but W&B's metadata never sees any
        run = wandb.init(
            id=stored["id"],
            resume="allow",
            project=stored.get("project") or settings["project"],
            entity=stored.get("entity") or settings["entity"],
            mode=settings["mode"],
            dir=settings["dir"],
            reinit="finish_previous",
        )
    run.summary.update(agreement_summary(result))
    run.finish()
    return settings["mode"]


class WandbLogger:
    """Logs one run to W&B: config, per-episode history, run summary, native charts, plots, transcripts, files."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        *,
        config: Mapping[str, Any],
        run_key: str,
        summarize: Callable[..., dict[str, float]],
        loose: bool = True,
    ):
        wandb = import_wandb()
        self._wandb = wandb
        self.settings = dict(settings)
        Path(self.settings["dir"]).mkdir(parents=True, exist_ok=True)
        # W&B records the program's arguments (`sys.argv`) in the run's metadata, which `wandb sync` uploads:
        # it reads them while the run starts, so they are shown to it as run.json shows them
        with public_argv():
            self.run = wandb.init(
                project=self.settings["project"],
                entity=self.settings["entity"],
                name=self.settings["name"],
                group=self.settings["group"],
                tags=self.settings["tags"],
                mode=self.settings["mode"],
                dir=self.settings["dir"],
                job_type="eval",
                config=public(dict(config)) | {"run_key": run_key},
                reinit="finish_previous",
            )
        # the run summary is the run's metrics (set in finish), never the last episode's values
        self.run.define_metric("episode/*", summary="none")
        self._summarize = summarize
        self._loose = loose
        # W&B allows letters, digits, `-`, `_` and `.` in an artifact's name
        self.artifact_name = re.sub(r"[^\w.-]", "-", run_name(config))
        self._logged: set[int | None] = set()
        self._step = 0

    def identity(self) -> dict[str, Any]:
        """What run.json and summary.json store of the W&B run: its id, project, entity, mode and address."""
        return {
            "id": self.run.id,
            "project": self.run.project,
            "entity": self.run.entity or None,
            "mode": self.settings["mode"],
            "url": self.run.url if self.settings["mode"] == "online" else None,
        }

    def log_episode(self, episode: Episode) -> None:
        """One episode's metrics (strict and loose), length and policy usage as one history step."""
        metrics = _flat("episode", self._summarize([episode]))
        if self._loose:
            metrics.update(_flat("episode/loose", self._summarize([episode], loose=True)))
        metrics.update(_flat("episode/policy", episode.meta.get("policy_usage", {})))
        metrics.update({"episode/seed": episode.seed, "episode/length": len(episode.turns)})
        self.run.log(metrics, step=self._step)
        self._logged.add(episode.seed)
        self._step += 1

    def finish(
        self,
        episodes: Sequence[Episode],
        summary: Mapping[str, Any],
        plots: Mapping[str, Path],
        *,
        charts: Mapping[str, Any] | None = None,
        files: Sequence[Path] = (),
    ) -> None:
        """Log what a resumed run played before, the summary, charts, plots, transcripts and artifact; close the run.

        `charts`: `report.chart_data` (survival curve, pass rates per group) for the native charts.
        `files`: the run's own files (episodes, summary.json, run.json), put in the artifact with `plots`.
        """
        wandb = self._wandb
        for episode in episodes:  # episodes finished in an earlier, interrupted session of this run
            if episode.seed not in self._logged:
                self.log_episode(episode)
        self.run.summary.update(run_summary(summary))
        if summary.get("protocol"):
            self.run.config.update({"protocol": summary["protocol"]}, allow_val_change=True)
        if summary.get("policy_protocol"):
            self.run.config.update({"policy_protocol": summary["policy_protocol"]}, allow_val_change=True)
        payload: dict[str, Any] = {"transcripts": self.transcripts(episodes)}
        charts = charts or {}
        if charts.get("survival"):
            table = wandb.Table(columns=["turn", "still going"], data=[list(p) for p in charts["survival"]])
            payload["charts/survival"] = wandb.plot.line(
                table, "turn", "still going", title="Survival: share of dialogues still going after each turn"
            )
        for mode, rates in charts.get("group_pass_rates", {}).items():
            table = wandb.Table(columns=["group", "pass rate"], data=[[g, r] for g, r in rates.items()])
            payload[f"charts/group_pass_rates_{mode}"] = wandb.plot.bar(
                table, "group", "pass rate", title=f"Pass rate per constraint group ({mode})"
            )
        # a task's report files beside the plots (FlexBench's dimension table) are in the artifact, not images
        payload.update(
            {f"plots/{name}": wandb.Image(str(path)) for name, path in plots.items() if path.suffix == ".png"}
        )
        self.run.log(payload, step=self._step)
        self.run.log_artifact(self.artifact(summary, [*files, *plots.values()]))
        self.run.finish()

    def artifact(self, summary: Mapping[str, Any], files: Sequence[Path]) -> Any:
        """The run's files as an `evaluation` artifact, its metadata the run's settings key and headline figures."""
        run = summary.get("run") or {}
        metadata: dict[str, Any] = {
            "run_key": run.get("run_key"),
            "env": run.get("env"),
            "policy": run.get("policy"),
            "judge": run.get("judge"),
            "episodes": summary.get("episodes"),
            "headline_metric": summary.get("headline_metric"),
        }
        metadata.update(_flat("strict", {k: v for k, v in (summary.get("strict") or {}).items() if "/" not in k}))
        artifact = self._wandb.Artifact(
            name=self.artifact_name,
            type="evaluation",
            description=f"ifgym eval of {run.get('env', '?')}: episodes, summary, record and report",
            metadata=metadata,
        )
        for path in dict.fromkeys(Path(p) for p in files):  # each file once, under its own name
            artifact.add_file(str(path), name=path.name)
        return artifact

    def transcripts(self, episodes: Sequence[Episode]) -> Any:
        """Every turn as a table row: words, reward, patience, each item's verdict and reason (strict and loose)."""
        table = self._wandb.Table(columns=list(TRANSCRIPT_COLUMNS))
        for ep in episodes:
            for k, t in enumerate(ep.turns):
                names = item_names(t)
                table.add_data(
                    ep.episode_id,
                    ep.seed,
                    t.index,
                    t.user,
                    t.reply,
                    t.reward,
                    t.patience,
                    "\n".join(f"{n}: {v.label}" for n, v in zip(names, t.verdicts, strict=True)),
                    "\n".join(f"{n}: {v.reason}" for n, v in zip(names, t.verdicts, strict=True)),
                    "\n".join(f"{n}: {v.label}" for n, v in zip(names, t.loose_verdicts, strict=False)),
                    "\n".join(f"{n}: {v.reason}" for n, v in zip(names, t.loose_verdicts, strict=False)),
                    ep.done_reason if k == len(ep.turns) - 1 else "",
                )
        return table
