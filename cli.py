"""`ifgym` command line: parsing and dispatch only; what the commands do lives in `ifgym.runner`.

`eval` is a Hydra app (`hydra.main` over the config groups in ifgym/conf: env, policy, judge,
logger) and takes Hydra's own flags: `-m/--multirun` sweeps (basic sweeper; each job its own run
folder; `SweepSummary` writes a table across jobs at the end), `--cfg`, `--info`,
`--config-dir`/`--config-name`, `hydra.run.dir=`/`hydra.sweep.dir=`. Each job is one
`ifgym.runner.evaluate.evaluate` (the episodes, resuming into its folder, the results table, the run
record, summary and plots, W&B when `logger=wandb`). The other commands dispatch to their runner
modules (`merge`, `compare`, `rescore`, `training_data`, `judge_gate`, `view`, `flexbench_dimensions`).
Mistakes in the config end in one `ifgym: error:` line. Nothing imports this module but the `ifgym`
console script (`tests/test_imports.py`).
Exit status (`EXIT_*`): 0 finished, 1 finished with failed episodes (or failed sweep jobs), 2 usage
or configuration error, 3 stopped early, 130 Ctrl-C, 143 SIGTERM; every ending but 2 writes the
run's summary.json and run.json status first.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from ifgym.conf.schema import check_schema
from ifgym.runner.redaction import public, public_yaml_file, redacting_streams, remember_config, remember_overrides

USAGE_TEMPLATE = """usage: ifgym <command> [args]   (ifgym <command> --help: that command; ifgym --version)

commands:
  eval [FLAGS] [KEY=VALUE ...]  evaluate a policy in an env (Hydra overrides, e.g. env.max_turns=10
                             policy=openai policy.llm.base_url=http://127.0.0.1:8000/v1 policy.llm.model=M
                             judge=llm logger=wandb episodes=20). Hydra's flags: -m/--multirun (sweep,
                             e.g. -m env.patience=2,3), --cfg [job|hydra|all], --info, -cd/--config-dir DIR
                             and -cn/--config-name NAME (your own configs), hydra.run.dir=… hydra.sweep.dir=…
  reproduce PAPER [KEY=VALUE ...]  every row of a paper's main table(s) (method, baselines, ablations) as one
                             resumable sweep with the settings the paper shares across them, then the table in the
                             paper's layout with its published numbers: PAPER = graphif, context_agent (NTM), evolif,
                             structflow, flexbench; overrides for every row (policy.llm.base_url=URL policy.llm.model=M
                             judge.llm.base_url=URL judge.llm.model=J env.dataset=PATH episodes=N); repeats=N (mean ± SD
                             over sampling seeds), shard=I/N, out=FOLDER, smoke=true (the embedded small model in every
                             role, a few short episodes, labelled a smoke run); EvolIF: patiences=1,3,5
  train [FLAGS] [KEY=VALUE ...]  GRPO (TRL) on an env's prompts with ifgym's turn reward, then ifgym eval of
                             the model before and after on held-out seeds (env/judge/logger groups as in eval,
                             plus trainer=…; e.g. trainer=smoke, trainer.model=PATH, trainer.grpo.max_steps=50;
                             trainer.rollout=episode: GRPO over whole episodes played in the env).
                             Writes metrics.jsonl, model/, eval_before/, eval_after/, train_summary.json
  judge-audit [KEY=VALUE ...]  measure an LLM judge on ifgym's gold set (accuracy, yes-rate on negatives,
                             kappa, injection flips, unknowns, calls, time) and write the report as JSON:
                             judge.llm.base_url=URL judge.llm.model=M judge.mode=MODE suites=evolif,structflow
                             (structflow_real: real replies with StructFlowBench's GPT-4o verdicts, split=dev|test|all)
                             set=short|full (short by default: a screen; full before reporting a judge)
                             out=judge_audit.json (no base_url: the embedded model);
                             judge.mode=probability calibrate=dev: fit judge.threshold on the dev split first
  compare RUN_A RUN_B [KEY=VALUE ...]  pair two runs' episodes by seed: each metric's difference B - A with
                             a paired bootstrap interval and a permutation-test p-value (resamples=, seed=,
                             level=, out=FILE.json, plot=FILE.png: the runs side by side; beside out= by default)
  merge RUN_FOLDER | SHARD_FILES...  combine the shard files of a run (eval shard=I/N wrote
                             episodes.shard-I-of-N.jsonl) into its episodes.jsonl, one record per seed, and write its
                             summary and plots as eval does; shards of another configuration are refused
  rescore RUN [KEY=VALUE ...]  judge a run's replies again without calling the policy, into a new run folder:
                             judge=rules|llm judge.KEY=VALUE checker_semantics=ifgym|evolif out=FOLDER cache=DIR
  export SCHEMA EPISODES... OUT [KEY=VALUE ...]  training data from episodes JSONL files, one schema:
                             prompts (GRPO/PPO rows for ifgym.rewards.trl.TurnReward), sft (passing turns;
                             min_reward=1.0), preferences (DPO pairs of replies to the same prompt; margin=0.1
                             pairs=all|best_worst), turns (one row per turn with verdicts); JSON Lines
  view RUN [RUN_B] [--serve]  write report.html into RUN's folder (one run, or two side by side by seed): results
                             with intervals, plots, judge audit, transcripts; --serve serves it on 127.0.0.1 to label
                             a sample of the judge's verdicts into labels.jsonl (--port N --idle-seconds S --sample N);
                             a folder of runs (view runs/): runs.html, every run below it, sortable, opening each
  agreement RUN [resamples= level= seed=]  the judge against the human labels of RUN (labels.jsonl): kappa,
                             accuracy and yes-rate on the human's negatives per group with bootstrap intervals,
                             written to summary.json and to the run's W&B run when it has one
  flexbench-dimensions SOP OUT [KEY=VALUE ...]  build an SOP's FlexBench dimension file with a model
                             (KEY=VALUE: LLM settings, e.g. base_url=http://127.0.0.1:8000/v1 model=M;
                             pipeline=paper runs the FlexBench paper's appendix B stages)

config groups (options are the YAML files in ifgym/conf/<group>/):
{groups}
policy wrappers: policy={{truncation, graphif, context_agent, self_refine}} wrap policy.base=chat|scripted|transformers
               (chat uses policy.llm) or your own (policy.base._target_=pkg.Name); graphif and context_agent
               call a light model at policy.light_llm
               policy=graphif_paper, context_agent_paper: each paper's settings (Context-Agent's summaries at
               policy.summary_llm)
your own policy: policy=custom policy._target_=pkg.module.Name policy.ARG=VALUE (docs/plugins.md)
a task package's env (its ifgym.tasks entry point): env.id=NS/Name-vN (env=plugin) +env.ARG=VALUE
"""


GROUPS = ("env", "policy", "judge", "logger")
TRAIN_GROUP = "trainer"  # `ifgym train` has the env, judge and logger groups too
COMMANDS = (
    "eval",
    "reproduce",
    "train",
    "judge-audit",
    "compare",
    "merge",
    "rescore",
    "export",
    "flexbench-dimensions",
    "view",
    "agreement",
)


def group_options(group: str, config_dir: str | None = None) -> list[str]:
    """The options of a config group: the YAML files in ifgym/conf/<group>/ (and in `config_dir`/<group>/)."""
    from importlib.resources import files

    folders = [files("ifgym.conf") / group]
    if config_dir:
        folders.append(Path(config_dir) / group)
    return sorted(
        {p.name.removesuffix(".yaml") for f in folders if f.is_dir() for p in f.iterdir() if p.name.endswith(".yaml")}
    )


def option_lines() -> list[str]:
    """`group={option, …}` per config group, from the YAML files on disk (`--help` and the README show these)."""
    return [f"{group}={{{', '.join(group_options(group))}}}" for group in (*GROUPS, TRAIN_GROUP)]


def usage() -> str:
    """The help text, listing each config group's options as they are on disk (never stale)."""
    return USAGE_TEMPLATE.format(groups="\n".join(f"  {line}" for line in option_lines()))


def command_help(command: str) -> str:
    """`ifgym COMMAND --help`: that command's entry of the help text (eval and train add the groups and keys)."""
    text = usage()
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"  {command} ")), None)
    if start is None:  # a command the help text does not describe: all of it
        return text
    end = start + 1
    while end < len(lines) and lines[end].startswith("       "):  # its continuation lines
        end += 1
    out = [f"usage: ifgym {lines[start].strip()}", *lines[start + 1 : end]]
    if command in ("eval", "train"):
        groups = text[text.index("config groups") :]
        out += ["", groups.rstrip(), "", "keys:", config_help(command)]
    return "\n".join(out)


def _compose(overrides: list[str], config_dir: str | None = None, config_name: str | None = None):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from ifgym.conf.schema import register_configs

    register_configs()
    overrides = with_package_env(overrides)
    if config_dir:  # as --config-dir does: the folder's configs come before ifgym's
        overrides = [*overrides, f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"]
    with initialize_config_module(config_module="ifgym.conf", version_base="1.3"):
        return hydra_compose(config_name=config_name or "config", overrides=overrides)


def compose(overrides: list[str], *, config_dir: str | None = None, config_name: str | None = None):
    """The eval config with overrides applied (as `ifgym eval` composes it); any mistake raises one ConfigError."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.errors import ConfigError

    try:
        cfg = _compose(overrides, config_dir, config_name)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc, overrides, config_dir, config_name)) from None
    check_schema(cfg, overrides)
    return cfg


PACKAGE_ENV = "env=plugin"  # the env preset of an installed task package's id: the id alone


def with_package_env(args: Sequence[str]) -> list[str]:
    """`args` with `env=plugin` first when `env.id=` names an id outside ifgym/ and no env preset is chosen.

    Another package's env takes arguments of its own: the default preset's (EvolIF's) would be refused.
    """
    args = list(args)
    ids = [a.partition("=")[2] for a in args if a.lstrip("+").startswith("env.id=")]
    chosen = any(a.lstrip("+~").split("=", 1)[0] == "env" for a in args)
    if ids and not chosen and not any(i.startswith("ifgym/") or "," in i for i in ids):
        args.insert(0, PACKAGE_ENV)
    return args


def _flat_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return []
    keys = []
    for k, v in node.items():
        keys.append(prefix + k)
        keys.extend(_flat_keys(v, prefix + k + "."))
    return keys


def _explain(
    exc: Exception, overrides: Sequence[str], config_dir: str | None = None, config_name: str | None = None
) -> str:
    """Name the override at fault, with the closest real key, for a failed composition."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.errors import did_you_mean

    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if exc.__cause__ is not None:  # Hydra wraps the reason (e.g. "could not be converted to Integer")
        message += f": {str(exc.__cause__).splitlines()[0]}"
    generic = f"{message} — see `ifgym eval --help` for the config groups and keys"
    unreadable = _unreadable_override(overrides)
    if unreadable is not None:
        return unreadable
    choices = [o for o in overrides if o.split("=", 1)[0] in (*GROUPS, TRAIN_GROUP)]
    for item in choices:
        group, option = item.split("=", 1)
        options = group_options(group, config_dir)
        if "," not in option and option not in options:  # a sweep (a,b) is checked per job
            return f"unknown {group} option {option!r}.{did_you_mean(option, options)} Options: {', '.join(options)}"
    try:  # the keys that exist once the chosen group options are in
        single = [o for o in choices if "," not in o]
        known = _flat_keys(OmegaConf.to_container(_compose(single, config_dir, config_name)))
    except (HydraException, OmegaConfBaseException):
        return generic
    for item in overrides:
        key = item.lstrip("+~").split("=", 1)[0]
        if key.startswith("hydra.") or key in ("hydra", "-m", "--multirun"):  # Hydra's own keys: not the config's
            continue
        if "=" in item and key not in known and key not in (*GROUPS, TRAIN_GROUP):
            if key.startswith("env.") and not item.startswith("+"):  # env keys are the env's arguments
                env_keys = [k for k in known if k.startswith("env.")]
                close = did_you_mean(key, env_keys)
                return (
                    f"{key!r} is not in the env's config.{close} If it is an argument of the env that its YAML "
                    f"leaves out, add it with '+{item}'"
                )
            return f"unknown config key {key!r} in override {item!r}.{did_you_mean(key, known)} ({message})"
    return generic


def _unreadable_override(overrides: Sequence[str]) -> str | None:
    """The first override Hydra's grammar cannot read, named, with its value quoted as Hydra reads it; None if all read.

    An unquoted value may not hold `=`, `?`, spaces and other characters of the grammar (a URL's query string);
    quoted, it may: single quotes keep the shell from removing Hydra's double quotes.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for item in overrides:
        try:
            parser.parse_override(item)
        except HydraException as exc:
            key, _, value = item.partition("=")
            quoted = f"'{key}=\"{value}\"'" if '"' not in value else f"\"{key}='{value}'\""
            reason = str(exc).splitlines()[0]
            return (
                f"the override {item!r} cannot be read ({reason}): a value with =, ?, spaces or brackets in it must be "
                f"quoted for Hydra, and the quotes kept from the shell: {quoted}"
            )
    return None


def _judge_config(overrides: list[str]) -> dict[str, Any]:
    """The judge group's config, resolved, composed from `overrides` as `ifgym eval` composes it."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose(overrides).judge, resolve=True)


def config_help(command: str = "eval") -> str:
    """Every typed config key of `command` (eval or train) with its help text (the dataclasses in ifgym.conf.schema)."""
    from dataclasses import MISSING, fields, is_dataclass

    from ifgym.conf.schema import EvalConf, LLMConf, TrainConf

    lines = []

    def walk(schema: Any, prefix: str) -> None:
        for f in fields(schema):
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            if is_dataclass(default) and not isinstance(default, LLMConf):
                walk(type(default), f"{prefix}{f.name}.")
            elif "help" in f.metadata:
                lines.append(f"  {prefix + f.name:<28} {f.metadata['help']}")

    walk(TrainConf if command == "train" else EvalConf, "")
    lines.append("\nLLM settings (under policy.llm, policy.light_llm, judge.llm and env.*_llm):")
    walk(LLMConf, "*.")
    return "\n".join(lines)


class JobFailed:
    """What a sweep job returns when it stopped on an ifgym error (the sweep goes on with the next job)."""

    def __init__(self, error: str):
        self.error = error


class RunFolders(Callback):
    """Hydra callback: before Hydra makes a run's (or a sweep's) folder, note which of its folders already exist.

    A run that stops on a config error leaves its folder empty; `_drop_if_empty` then removes the
    folders this invocation made, and only those: never one the user made (`mkdir -p work/mydir &&
    cd work/mydir && ifgym eval … hydra.run.dir=$PWD/run` keeps `mydir`).
    """

    existed: set[Path] | None = None  # this invocation's note (None: nothing noted, so nothing above a run is removed)

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        RunFolders.note(config, "hydra.run.dir")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        RunFolders.note(config, "hydra.sweep.dir")

    @staticmethod
    def note(config: Any, key: str) -> None:
        """Record the folder at `key` of the Hydra config, what it holds, and each of its parents that exists now."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            folder = Path(str(OmegaConf.select(config, key))).resolve()
        except (OmegaConfBaseException, OSError, ValueError):
            return  # Hydra reports the same error when it makes the folder
        held = set(folder.iterdir()) if folder.is_dir() else set()
        RunFolders.existed = {p for p in (folder, *folder.parents) if p.is_dir()} | held


def _drop_if_empty(folder: Path) -> None:
    """Remove what a failed run wrote before its first episode, when that is all it wrote, and the folders it made.

    Only what this invocation made goes (`RunFolders` noted what existed before): a folder the user
    made keeps everything it held, and the working directory and those above it always stay.
    """
    written_first = re.compile(r"\.hydra|run(\.shard-\d+-of-\d+)?\.json")  # a shard's record too
    existed = RunFolders.existed
    folder = folder.resolve()
    if existed is None or not folder.is_dir():
        return
    made = [p for p in folder.iterdir() if p not in existed]
    if not all(written_first.fullmatch(p.name) for p in made):
        return  # episodes were written: nothing is dropped
    for path in made:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    kept = existed | {Path.cwd().resolve(), *Path.cwd().resolve().parents}
    while folder not in kept and folder.is_dir() and not any(folder.iterdir()):  # e.g. ./runs, made for this run
        folder.rmdir()
        folder = folder.parent


def _job(cfg: Any, *, command: Sequence[str], failures: list[Any]) -> dict[str, Any] | JobFailed:
    """The Hydra task: one evaluation in Hydra's output directory.

    An ifgym error does not escape (Hydra would print its own report around it): it is kept in
    `failures` for `run_eval` to report, and in a sweep the next job still runs.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ifgym.errors import IfgymError

    hc = HydraConfig.get()
    folder = Path(hc.runtime.output_dir)
    sweep = hc.mode == RunMode.MULTIRUN
    remember_config(cfg)
    if sweep:  # Hydra's basic sweeper saved the sweep's config and overrides as given
        public_yaml_file(Path(hc.sweep.dir) / "multirun.yaml")
    job = {
        "mode": hc.mode.name,
        "job_num": hc.job.num if sweep else None,
        "sweep_dir": str(Path(hc.sweep.dir).resolve()) if sweep else None,
        "overrides": list(hc.overrides.task),
        "config_name": hc.job.config_name,
    }
    from ifgym.runner.evaluate import evaluate

    try:
        # Hydra's record, unless the user asked Hydra to write it itself (hydra.output_subdir=…): then it is rewritten
        record = hydra_record(cfg) if hc.output_subdir is None else None
        for path in (folder / str(hc.output_subdir)).glob("*.yaml") if record is None else ():
            public_yaml_file(path)
        return evaluate(cfg, folder, command=command, job=job, hydra_record=record)
    except IfgymError as exc:
        _drop_if_empty(folder)
        if sweep:
            label = " ".join(hc.overrides.task)
            print(f"ifgym: error: sweep job #{hc.job.num} ({label}): {exc}", file=sys.stderr)
            failures.append(label)
        else:
            failures.append(exc)
        return JobFailed(str(exc))


def hydra_record(cfg: Any) -> dict[str, Any]:
    """Hydra's record of the job (what Hydra writes to `.hydra/` unless told not to), for ifgym to write."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    hc = HydraConfig.get()
    return {
        "config.yaml": OmegaConf.to_container(cfg, resolve=False, enum_to_str=True),
        "hydra.yaml": {"hydra": OmegaConf.to_container(hc, resolve=False, enum_to_str=True)},
        "overrides.yaml": list(hc.overrides.task),
    }


class SweepSummary(Callback):
    """Hydra callback: after a sweep, a table of every job's headline metrics (with intervals) as text and CSV.

    Writes `sweep.csv`, `sweep.md` and `sweep.png` (each headline metric per job, with its interval)
    into the sweep folder and prints the table. Jobs report through `on_job_end`, in the same process
    (Hydra's basic launcher).
    """

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self.jobs = []

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        if job_return.hydra_cfg.hydra.mode != RunMode.MULTIRUN:
            return
        if job_return.status == JobStatus.FAILED:  # not an ifgym error (those return JobFailed): Hydra reports it
            value: Any = {"error": "an unexpected exception (its traceback follows the sweep)"}
        else:
            value = job_return.return_value
            if isinstance(value, JobFailed):
                value = {"error": value.error}
        self.jobs.append(
            {
                "job": job_return.hydra_cfg.hydra.job.num,
                "overrides": public(list(job_return.overrides)),
                "folder": job_return.hydra_cfg.hydra.runtime.output_dir,
                "summary": value,
            }
        )

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from ifgym.runner.report import write_sweep

        if not self.jobs:
            return
        files = write_sweep(self.jobs, Path(str(config.hydra.sweep.dir)))
        print("\n" + files.pop("table_text"))
        for name, path in files.items():
            print(f"{name}: {path}")


CFG_CHOICES = ("job", "hydra", "all")


def _hydra_flags(args: Sequence[str], command: str = "eval") -> tuple[list[str], Any]:
    """`args` checked by Hydra's own parser (a bad flag is one ConfigError); a bare `--cfg` means `--cfg job`."""
    from hydra._internal.utils import get_args_parser

    from ifgym.errors import ConfigError

    args = list(args)
    for i, arg in enumerate(args):
        if arg in ("--cfg", "-c") and (i + 1 == len(args) or args[i + 1] not in CFG_CHOICES):
            args.insert(i + 1, "job")
            break
    parser = get_args_parser()
    parser.prog = f"ifgym {command}"

    def refuse(message: str) -> None:
        raise ConfigError(f"{message} (see `ifgym {command} --help` for Hydra's flags and the config keys)")

    parser.error = refuse  # type: ignore[method-assign]
    return args, parser.parse_args(args)


def run_eval(args: Sequence[str]) -> int:
    """`ifgym eval [FLAGS] [KEY=VALUE ...]` through Hydra's app machinery (`hydra.main`), with ifgym's errors.

    Hydra's errors are raised (not printed and exited) so that they become one ConfigError naming
    the override at fault; in a sweep a failing job is reported and the others still run. Returns
    the exit status: 0, or 1 when sweep jobs or episodes failed; a single run stopped early or
    interrupted raises (RunStoppedError, RunInterrupted) for `main` to give 3, 130 or 143.
    """
    return _hydra_app("eval", "config", _job, args)


def run_train(args: Sequence[str]) -> int:
    """`ifgym train [FLAGS] [KEY=VALUE ...]`: `ifgym.integrations.trl.train` as a Hydra app (config `train`)."""
    return _hydra_app("train", "train", _train_job, args)


def _hydra_app(command: str, config_name: str, job: Callable[..., Any], args: Sequence[str]) -> int:
    from unittest import mock

    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.conf.schema import register_configs
    from ifgym.errors import ConfigError

    args = with_package_env(args)
    args, parsed = _hydra_flags(args, command)
    register_configs()
    # every credential on the command line is known before Hydra prints (`--cfg`, a sweep's launch lines) or saves it
    remember_overrides(parsed.overrides)
    if parsed.cfg or parsed.info:  # the config Hydra prints: headers and URLs of config files too
        try:
            remember_config(_compose(parsed.overrides, parsed.config_dir, parsed.config_name or config_name))
        except (HydraException, OmegaConfBaseException):
            pass  # Hydra reports the same error
    failures: list[Any] = []  # a single run's exception, or the labels of the sweep jobs that failed
    line = ["ifgym", command, *args]

    failed_episodes: list[str] = []  # runs that finished with failed episodes (exit status 1)

    def task(cfg: Any) -> Any:
        out = job(cfg, command=line, failures=failures)
        failed = out.get("failures", {}) if isinstance(out, dict) else {}
        if failed.get("episodes"):
            failed_episodes.append(f"{failed['episodes']} of {failed['of']} in {out['output']}")
        return out

    app = hydra.main(config_path="pkg://ifgym.conf", config_name=config_name, version_base="1.3")(task)
    RunFolders.existed = None  # noted afresh by this invocation's Hydra callback
    # Hydra reads its arguments from sys.argv; HYDRA_FULL_ERROR makes it raise instead of printing a traceback
    raise_errors = mock.patch.dict(os.environ, {"HYDRA_FULL_ERROR": "1"})
    try:
        with mock.patch.object(sys, "argv", [f"ifgym {command}", *args]), raise_errors:
            app()
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(
            _explain(exc, parsed.overrides, parsed.config_dir, parsed.config_name or config_name)
        ) from None
    if len(failures) == 1 and isinstance(failures[0], Exception):  # a single run's error, for main to report
        raise failures[0]
    if failures:
        print(f"ifgym: error: {len(failures)} sweep job(s) failed: {'; '.join(failures)}", file=sys.stderr)
        return EXIT_FAILED_EPISODES
    if failed_episodes:
        print(
            f"ifgym: error: episodes failed ({'; '.join(failed_episodes)}); their errors are in the episodes file "
            "and summary.json; rerun the same command to retry them",
            file=sys.stderr,
        )
        return EXIT_FAILED_EPISODES
    return EXIT_FINISHED


def _train_job(cfg: Any, *, command: Sequence[str], failures: list[Any]) -> dict[str, Any] | JobFailed:
    """The Hydra task of `ifgym train`: one training run in Hydra's output directory."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from ifgym.errors import IfgymError

    folder = Path(HydraConfig.get().runtime.output_dir)
    remember_config(cfg)
    try:
        check_schema(cfg, list(HydraConfig.get().overrides.task))
        from ifgym.integrations.trl import train
        from ifgym.runner.evaluate import write_hydra_record

        folder.mkdir(parents=True, exist_ok=True)
        write_hydra_record(folder, hydra_record(cfg))
        return train(OmegaConf.to_container(cfg, resolve=True), folder)
    except IfgymError as exc:
        failures.append(exc)
        return JobFailed(str(exc))


# exit statuses of the ifgym command (README "Run folders": endings)
EXIT_FINISHED = 0  # every episode finished
EXIT_FAILED_EPISODES = 1  # finished with failed episodes, or sweep jobs that failed
EXIT_USAGE = 2  # a usage or configuration error: nothing ran
EXIT_STOPPED = 3  # stopped early (max_failure_rate): summary.json says which seeds were never played
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report 128 + 2
EXIT_TERMINATED = 143  # SIGTERM, as shells report 128 + 15


def _emit(text: str) -> int:
    """Print `text` to standard output; a reader that closed the pipe early (`| head`) is no error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # what is left unflushed would fail again at exit: standard output goes nowhere from here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit status (`EXIT_*`)."""
    with redacting_streams():  # what ifgym, Hydra and the libraries print: no credential of the run
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    from ifgym.errors import IfgymError, RunInterrupted, RunStoppedError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        return _emit(usage())
    if argv[0] in ("-V", "--version"):
        from ifgym import __version__

        return _emit(f"ifgym {__version__}")
    command, rest = argv[0], argv[1:]
    if command in COMMANDS and ("-h" in rest or "--help" in rest):  # every command takes --help
        return _emit(command_help(command))
    try:
        if command == "eval":
            return run_eval(rest)
        if command == "train":
            return run_train(rest)
        if command == "reproduce":
            from ifgym.runner.reproduce import reproduce

            return reproduce(rest, compose)
        if command == "export":
            from ifgym.runner.training_data import export_data

            return export_data(rest)
        if command == "flexbench-dimensions":
            from ifgym.runner.flexbench_dimensions import flexbench_dimensions

            return flexbench_dimensions(rest)
        if command == "judge-audit":
            from ifgym.runner.judge_gate import judge_audit

            return judge_audit(rest, _judge_config)
        if command == "compare":
            from ifgym.runner.compare import compare_runs

            return compare_runs(rest)
        if command == "merge":
            from ifgym.runner.merge import merge_runs

            return merge_runs(rest)
        if command == "rescore":
            from ifgym.runner.rescore import rescore_run

            return rescore_run(rest, lambda kind: _judge_config([f"judge={kind}"]))
        if command == "view":
            from ifgym.runner.view import view_command

            return view_command(rest)
        if command == "agreement":
            from ifgym.runner.view import agreement_command

            return agreement_command(rest)
        from ifgym.errors import did_you_mean

        print(
            f"ifgym: error: unknown command {command!r}.{did_you_mean(command, COMMANDS)} "
            f"Commands: {', '.join(COMMANDS)} (see ifgym --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except RunStoppedError as exc:  # its summary and record are written; the message says how to resume
        print(f"ifgym: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except IfgymError as exc:
        print(f"ifgym: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # one line, no traceback
        if isinstance(exc, RunInterrupted):
            print(f"ifgym: {exc}", file=sys.stderr)
            return EXIT_TERMINATED if exc.signal_name == "SIGTERM" else EXIT_INTERRUPTED
        print("ifgym: interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # Hydra's --hydra-help and friends exit; a console entry point returns
        return exc.code if isinstance(exc.code, int) else 0


if __name__ == "__main__":
    # `python -m ifgym.cli`: run the imported module's main, whose classes Hydra's callbacks instantiate
    # (`ifgym.cli.RunFolders`), not this __main__ copy's
    from ifgym.cli import main as imported_main

    sys.exit(imported_main())
