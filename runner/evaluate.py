"""One evaluation (`ifgym eval`, and `ifgym train`'s held-out runs): a composed config in, a run folder out.

`evaluate` claims the episodes file, builds the env, policy and clients (`build`), audits an LLM judge
(`judge_gate`), plays the seeds (`rollout.run` or the Ray executor) and writes the summary, plots and
record (`summarize.report_run`), however the run ends (README "Every ending").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ifgym.conf.schema import check_schema
from ifgym.plotting import PLOT_INSTALL, can_plot
from ifgym.runner.build import (
    build_env,
    build_policy,
    check_model_servers,
    fill_request_limits,
    policy_protocol,
    use_cache,
)
from ifgym.runner.judge_gate import audit_judge
from ifgym.runner.records import run_key, stale_summary
from ifgym.runner.redaction import remember_config
from ifgym.runner.summarize import ci_settings_of, has_loose, report_run

# what a run writes beside its records at its end (plots, FlexBench's table, `ifgym view`'s page)
RUN_FILES = ("survival.png", "group_pass_rates.png", "flexbench_dimensions.csv", "flexbench_heatmap.png", "report.html")
HYDRA_MARK = "# written by ifgym: Hydra's record of the run, credentials removed\n"


def claim_run_folder(out: Path) -> None:
    """Summary and plots go beside the episodes file: refuse a folder whose summary belongs to another file."""
    from ifgym.errors import ConfigError

    if out.is_dir():
        raise ConfigError(f"output={out} is a folder; give the episodes file, e.g. output={out / 'episodes.jsonl'}")
    summary = out.parent / "summary.json"
    if summary.exists():
        try:
            owner = json.loads(summary.read_text(encoding="utf-8")).get("output")
        except (ValueError, AttributeError, UnicodeDecodeError):
            owner = None  # not ifgym's: `check_folder_is_ours` says so
        if owner is not None and Path(owner).resolve() != out.resolve():  # one file, however it was written
            raise ConfigError(
                f"{out.parent} already holds the summary and plots of {owner}; give this run its own folder "
                f"(e.g. output={out.parent / out.stem / 'episodes.jsonl'})"
            )


def check_folder_is_ours(out: Path, key: str, record_name: str, summary_name: str, hydra_dir: Path | None) -> None:
    """Refuse (ConfigError, nothing written) a folder whose records ifgym did not write, or another run's.

    Asked while holding the episodes file's lock, before any file is written: the run record, the
    summary and Hydra's record (`hydra_dir`) must be ifgym's (or missing), the record of this
    configuration (`key`), and the episodes file this run's.
    """
    from ifgym.errors import ConfigError
    from ifgym.runner.records import ifgym_record
    from ifgym.runner.rollout import check_episodes_file

    folder = out.parent
    fix = "give this run its own folder (hydra.run.dir=… or output=…), or move those files away"
    record_path = folder / record_name
    record = ifgym_record(record_path)
    if record_path.exists() and record is None:
        raise ConfigError(f"{record_path} was not written by ifgym (no run key and ifgym version in it); {fix}")
    if record is not None and record["run_key"] != key:
        raise ConfigError(
            f"{folder} holds the run record of another configuration (run_key {record['run_key']}, this run is "
            f"{key}); {fix}"
        )
    summary_path = folder / summary_name
    summary = ifgym_record(summary_path)
    if summary_path.exists() and summary is None:
        raise ConfigError(f"{summary_path} was not written by ifgym (no run reference in it); {fix}")
    if record is None and summary is None:  # the plots and page beside them are a run's of ifgym's, or not its at all
        written_later = [folder / name for name in RUN_FILES if (folder / name).exists()]
        if written_later:
            raise ConfigError(f"{written_later[0]} was not written by this run's records; {fix}")
    if hydra_dir is not None and record is None and (hydra_dir / ".hydra").is_dir():
        foreign = [
            p
            for p in (hydra_dir / ".hydra").iterdir()
            if not p.is_file() or not p.read_text(encoding="utf-8", errors="replace").startswith(HYDRA_MARK)
        ]
        if foreign:
            raise ConfigError(f"{hydra_dir / '.hydra'} holds files ifgym did not write ({foreign[0].name}); {fix}")
    check_episodes_file(out, key)


def write_hydra_record(folder: Path, files: dict[str, Any]) -> None:
    """Hydra's record of the run (`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`), credentials removed.

    Hydra is told not to write it (`hydra.output_subdir: null`): ifgym writes it once the run holds
    its folder, so a refused run leaves the folder as it was.
    """
    import yaml

    from ifgym.runner.redaction import public

    target = folder / ".hydra"
    target.mkdir(exist_ok=True)
    for name, data in files.items():
        text = HYDRA_MARK + yaml.safe_dump(public(data), sort_keys=False, allow_unicode=True)
        tmp = target / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target / name)


def evaluate(
    cfg: Any,
    run_dir: str | Path | None = None,
    *,
    command: Sequence[str] | None = None,
    job: dict[str, Any] | None = None,
    hydra_record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one evaluation for a composed config; returns the summary dict it also writes.

    The run folder is `run_dir` (Hydra's output directory under `ifgym eval`), else the folder of
    `output=`, else `runs/<env>-<run_key>/`. It receives `episodes.jsonl` (unless `output=` names
    another file), `run.json` (the run record), `summary.json` and the plots. `command` and `job`
    (the Hydra job: mode, number, sweep folder, overrides) go into the run record; `hydra_record`
    (file name -> content) is written into `run_dir/.hydra/` (`write_hydra_record`). Nothing is
    written into the folder until the run holds its episodes file's lock and has found the folder's
    files to be its own (`check_folder_is_ours`) and its judge fit (`audit_judge`): a refused run
    leaves every byte of the folder as it was.

    With `shard=I/N` the run plays its share of the seeds into `episodes.shard-I-of-N.jsonl` (with
    `run.` and `summary.shard-I-of-N.json`, no plots), skipping seeds finished in the folder's other
    episodes files; without it, shard files found beside the episodes file are combined into it
    first (`ifgym.runner.shards.combine`), so their seeds are not played again.
    """
    from omegaconf import OmegaConf

    from ifgym.errors import ConfigError
    from ifgym.runner.records import RECORD_FILE, RunRecord, default_run_dir
    from ifgym.runner.rollout import claim_output, select_seeds
    from ifgym.runner.shards import Shard, combine, finished_seeds, shard_files

    check_schema(cfg, (job or {}).get("overrides", ()))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    remember_config(resolved)  # its headers, keys and URLs' credentials never reach a file or the screen
    ci_settings_of(resolved)  # a bad interval setting fails now, not after the episodes
    key = run_key(resolved)
    if resolved["episodes"] < 1:
        raise ConfigError(f"episodes must be >= 1, got {resolved['episodes']}")
    if resolved["plots"] and not can_plot():  # said before any episode, not after the run
        raise ConfigError(
            f"plots=true (the default) draws with matplotlib, which is not installed: {PLOT_INSTALL}; or plots=false"
        )
    if (job or {}).get("mode") == "MULTIRUN" and resolved["output"]:
        raise ConfigError(
            f"output={resolved['output']} would give every job of the sweep the same episodes file; drop output= "
            "(each job writes episodes.jsonl in its own folder under hydra.sweep.dir)"
        )
    if any(o.startswith("shard=") and "," in o for o in (job or {}).get("overrides", ())):
        raise ConfigError(
            "shard= swept with -m would put each shard in a job folder of its own; run the shards as separate "
            "commands (the same overrides with shard=0/N … shard=N-1/N), then `ifgym merge` the run folder"
        )
    shard = Shard.parse(resolved["shard"]) if resolved["shard"] is not None else None
    folder = Path(run_dir) if run_dir is not None else default_run_dir(resolved)
    out = Path(resolved["output"]).expanduser() if resolved["output"] else folder / "episodes.jsonl"
    if resolved["concurrency"] < 1:
        raise ConfigError(f"concurrency must be >= 1, got {resolved['concurrency']}")
    run_file = out
    if shard is not None:
        out = shard.file(run_file)
        if not shard.seeds(range(resolved["episodes"])):  # a run plays `episodes` seeds, filtered or not
            raise ConfigError(
                f"shard={shard} has no seeds: episodes={resolved['episodes']} makes only {resolved['episodes']} "
                "shards; use fewer shards or more episodes"
            )
    record_name = shard.file(Path(RECORD_FILE)).name if shard else RECORD_FILE
    summary_name = shard.file(Path("summary.json")).name if shard else "summary.json"
    if resolved["logger"]["kind"] == "wandb":  # a missing W&B fails now, before any file is written
        from ifgym.runner.tracking import import_wandb

        import_wandb()
    # the episodes file's writer lock before anything is written: a second writer refused here (ConfigError
    # naming the first) leaves the first run's run.json, summary.json and episodes untouched
    with claim_output(out):
        claim_run_folder(out)
        check_folder_is_ours(out, key, record_name, summary_name, Path(run_dir) if hydra_record else None)
        if shard is None and shard_files(out):
            combined = combine(out, [p for _, p in shard_files(out)], key)
            print(
                f"combined the shard files into {out}: {combined.finished} finished and {combined.failed} failed "
                f"episodes ({combined.added} lines from the shards); their seeds are not played again",
                file=sys.stderr,
            )
        fill_request_limits(resolved, resolved["concurrency"])
        clients: dict[str, Any] = {}
        make_policy = build_policy(resolved["policy"], clients)
        make_env = build_env(resolved["env"], resolved["judge"], clients)
        check_model_servers(resolved, clients)  # a wrong URL, key or model ends the run here, before any call
        use_cache(clients, resolved)
        first_env = make_env().unwrapped
        # the run's seeds, after any filter of the env's (EvolIF's trivial dialogues): no model call decides them
        seeds = select_seeds(first_env, resolved["seed"], resolved["episodes"]).seeds
        if shard is not None:
            # seeds another shard (or the run itself) finished are done: no replays to merge later
            elsewhere = finished_seeds([run_file, *(p for _, p in shard_files(run_file) if p != out)], key)
            done = elsewhere - finished_seeds([out], key)
            seeds = [s for s in shard.seeds(seeds) if s not in done]
            if not seeds:
                print(
                    f"shard {shard}: every one of its seeds is finished in the run folder {out.parent}; nothing to play"
                )
                return {"output": str(out), "episodes": 0}
        judge_record = audit_judge(first_env, resolved["judge"], progress=resolved["progress"])

        record = RunRecord(
            out.parent, config=resolved, key=key, command=command or sys.argv, hydra=job, name=record_name
        )
        stale = record.stale_run()
        if stale is not None:  # we hold the lock, so the process that wrote "running" is gone
            print(
                f"ifgym: {record.path} says a run (pid {stale['pid']}, started {stale['started']}) is still running, "
                f"but nothing holds {out.name}: that process is gone (killed?); this run takes over and resumes it",
                file=sys.stderr,
            )
            record.data["took_over"] = stale
            summary_note = stale_summary(out.parent / summary_name, stale)
            if summary_note:
                print(f"ifgym: {summary_note}", file=sys.stderr)
        setup = policy_protocol(make_policy())  # a wrapper names its setup and its paper's differences
        if setup is not None:
            record.data["policy_protocol"] = setup
        if hydra_record and run_dir is not None:
            write_hydra_record(Path(run_dir), hydra_record)
        record.start(clients)
        if clients:  # said once, before a first reset that may load a model and generate for minutes
            from ifgym.llm.client import model_place

            print("models: " + ", ".join(f"{role} {model_place(c)}" for role, c in clients.items()), file=sys.stderr)
        if resolved["progress"] or clients:
            from ifgym.runner.report import count

            limits = ", ".join(f"{role} {c.config.concurrency}" for role, c in clients.items())
            print(
                f"concurrency: {count(resolved['concurrency'], 'episode')} at once"
                + (f"; requests in flight at most: {limits}" if limits else ""),
                file=sys.stderr,
            )
        return _play_and_report(
            resolved, make_env, make_policy, seeds, out, record, first_env, judge_record, clients, shard, job
        )


def _play_and_report(
    resolved: dict[str, Any],
    make_env: Callable[[], Any],
    make_policy: Callable[[], Any],
    seeds: list[int],
    out: Path,
    record: Any,
    first_env: Any,
    judge_record: dict[str, Any],
    clients: dict[str, Any],
    shard: Any,
    job: dict[str, Any] | None,
) -> dict[str, Any]:
    """Play the run's seeds and write its summary and record, however the run ends (README: "Every ending").

    Finished, or finished with failed episodes: returns the summary. Stopped early (RunStoppedError)
    or interrupted (Ctrl-C, SIGTERM: RunInterrupted): the summary of what the episodes file holds is
    written first, then the error is raised, naming the seeds never played and the command to resume.
    """
    from ifgym.errors import ConfigError, RunInterrupted, RunStoppedError
    from ifgym.runner.rollout import file_result, run

    ci_settings = ci_settings_of(resolved)
    logger = None
    signals: list[str] = []
    stopped: RunStoppedError | None = None
    interrupted = False
    try:
        with _sigterm_interrupts(signals):
            try:
                if resolved["logger"]["kind"] == "wandb":
                    logger = _wandb_logger(
                        resolved,
                        record.data["run_key"],
                        first_env.task.summarize,
                        out.parent,
                        job,
                        loose=has_loose(first_env),
                    )
                    if logger is not None:  # the W&B run's id, stored: `ifgym agreement` resumes it by id
                        record.data["wandb"] = logger.identity()
                        record.write()
                executor = resolved["executor"]
                if executor["kind"] not in ("local", "ray"):
                    raise ConfigError(f"executor.kind must be local or ray, got {executor['kind']!r}")
                if executor["kind"] == "ray":  # Ray is imported only when chosen
                    from functools import partial

                    from ifgym.runner.ray_executor import run_ray

                    runner: Callable[..., Any] = partial(
                        run_ray, num_workers=executor["num_workers"], address=executor["address"]
                    )
                else:
                    runner = run
                result = runner(
                    make_env,
                    make_policy,
                    seeds,
                    output=out,
                    run_key=record.data["run_key"],
                    concurrency=resolved["concurrency"],
                    progress=resolved["progress"],
                    on_episode=logger.log_episode if logger else None,
                    retry_failed=resolved["retry_failed"],
                    max_failure_rate=resolved["max_failure_rate"],
                    episode_timeout=resolved["episode_timeout"],
                )
                unplayed: list[int] = []
            except RunStoppedError as exc:  # what the file holds is summarized: the stop names what ended it
                stopped = exc
                result = None
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM: the episodes in flight were cancelled
                interrupted = True
                result = None
            held: list[str] = []
            while True:  # the summary: a second Ctrl-C (or SIGTERM) waits for it, a third stops without it
                try:
                    with _signals_held(held):
                        if result is None:
                            result, unplayed = file_result(out, seeds)
                        ending = _ending(
                            result, unplayed, stopped, signals if interrupted else None, record.data["command"]
                        )
                        if ending["resume"] and record.data.get("command_env"):  # what its `${oc.env:…}` read
                            ending["resume_env"] = record.data["command_env"]
                        summary, plots, charts = report_run(
                            first_env,
                            resolved,
                            out,
                            result.episodes,
                            result.failures,
                            worker_deaths=result.worker_deaths,
                            judge_record=judge_record,
                            record=record,
                            roles=clients,
                            ci_settings=ci_settings,
                            shard=shard,
                            ending=ending,
                        )
                    break
                except KeyboardInterrupt:
                    if held:  # one more after the held one: stop without the summary
                        raise
                    held.append("SIGINT")  # it came just before the signals were held: the summary still comes
            if held and not interrupted and stopped is None:  # the run had finished: its records say so
                interrupted = True
                ending = {**ending, "signal": "SIGTERM" if "SIGTERM" in held else "SIGINT"}
    except KeyboardInterrupt:  # interrupted again while the summary was being written: the record says so
        if record.data["status"] == "running":  # (a summary written before it stands, with its record)
            record.finish("interrupted", summary=None)
        signal_name = "SIGTERM" if signals else "SIGINT"
        raise RunInterrupted(
            f"interrupted ({signal_name}) while the summary was written: {record.path} says so; the episodes are in "
            f"{out}; resume with: {record.resume()}",
            signal_name,
        ) from None
    except BaseException as exc:
        record.fail(exc)
        raise
    if logger and not interrupted:
        files = [out, out.parent / record.data["summary"], record.path]
        logger.finish(result.episodes, summary, plots, charts=charts, files=files)
        if logger.settings["mode"] == "offline":
            print(f"W&B: offline run in {logger.run.dir}; upload it with `wandb sync {Path(logger.run.dir).parent}`")
    written = (
        f"wrote {out.parent / record.data['summary']} and {record.path.name} ({len(result.episodes)} finished, "
        f"{len(result.failed)} failed, {len(unplayed)} never played); resume with: {record.resume()}"
    )
    if stopped is not None:
        raise RunStoppedError(f"{stopped}. {written}")
    if interrupted:
        signal_name = ending["signal"]
        raise RunInterrupted(f"interrupted ({signal_name}): {written}", signal_name)
    return summary


def _ending(
    result: Any, unplayed: list[int], stopped: BaseException | None, signals: list[str] | None, command: str
) -> dict[str, Any]:
    """How a run ended, as summary.json's `ending` and run.json say it: status, why, seeds never played, resume."""
    if signals is not None:
        signal_name = "SIGTERM" if signals else "SIGINT"
        status, reason = "interrupted", f"{signal_name} ({'Ctrl-C' if signal_name == 'SIGINT' else 'terminated'})"
    elif stopped is not None:
        status, reason = "stopped_early", str(stopped)
    elif result.failed:
        status, reason = (
            "finished_with_failures",
            f"{len(result.failed)} of {len(result.failed) + len(result.episodes)} episodes failed",
        )
        if not result.episodes:
            kind, messages = next(iter(result.failures["examples"].items()))
            reason = f"every episode failed; commonest error: {kind}: {messages[0]}"
    else:
        status, reason = "finished", None
    ending: dict[str, Any] = {"status": status, "reason": reason, "unplayed_seeds": unplayed}
    ending["resume"] = command if status != "finished" else None
    if signals is not None:
        ending["signal"] = signal_name
    return ending


@contextmanager
def _signals_held(held: list[str]) -> Iterator[None]:
    """A block that Ctrl-C and SIGTERM do not interrupt the first time (noted in `held`); the next one does.

    In the main thread only (elsewhere the block runs as it is).
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def hold(signum: int, frame: Any) -> None:
        if held:
            raise KeyboardInterrupt
        held.append(signal.Signals(signum).name)
        # straight to the descriptor: the handler may run inside a write to sys.stderr (a reentrant call there fails)
        os.write(2, b"ifgym: writing the summary before stopping; interrupt again to stop without it\n")

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def _sigterm_interrupts(signals: list[str]) -> Iterator[None]:
    """A block in which SIGTERM ends the run as Ctrl-C does (noted in `signals`); in the main thread only."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        signals.append("SIGTERM")
        on_sigint = signal.getsignal(signal.SIGINT)
        if not callable(on_sigint):
            raise KeyboardInterrupt
        on_sigint(signal.SIGINT, frame)  # asyncio.run's cancels the run's task, then raises KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wandb_logger(
    resolved: dict[str, Any],
    key: str,
    summarize: Callable[..., Any],
    folder: Path,
    job: dict[str, Any] | None,
    *,
    loose: bool,
) -> Any:
    """The run's W&B logger (None when W&B is disabled); a sweep's jobs are grouped under the sweep's name."""
    from ifgym.runner.tracking import WandbLogger, resolve_settings

    job = job or {}
    sweep = Path(job["sweep_dir"]).name if job.get("mode") == "MULTIRUN" else None
    name = f"{sweep}-{job['job_num']}" if sweep else folder.name
    settings = resolve_settings(resolved["logger"], run_dir=folder, name=name, group=sweep)
    if settings["mode"] == "disabled":
        print("W&B: disabled (logger.mode or WANDB_MODE); nothing is logged to W&B")
        return None
    config = resolved | {"hydra": job} if job else resolved
    return WandbLogger(settings, config=config, run_key=key, summarize=summarize, loose=loose)
