"""`ifgym rescore RUN [KEY=VALUE ...]`: a run's replies judged again, by another judge or checker semantics.

The policy is not called: each recorded episode is stepped through a fresh env of the run's config
(with the new `judge=…` / `checker_semantics=…`) by its recorded replies, so the env's own turn loop,
scorer and rubric score them (`rescore_episode`). The user's turns are the recorded ones
(`TranscriptUser`), and the dialogue ends where it ended (`AsPlayed`): the transcript is scored as
played. Where the user's turns may depend on the replies, or the new verdicts would have run the
patience out at another turn, the record says so (`meta["rescore"]`, `run.json`, the summary).

The result is a run folder of its own (`episodes.jsonl`, `run.json` naming the source run and both
judges, `summary.json` and plots via `summarize.report_run`); re-running the command resumes into it. `plan`
and `rescore_episodes` do the rescoring; `rescore_run` (the command) wires the run's clients, judge audit,
record and report as `ifgym eval` does.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import Episode, UserTurn, Verdict
from ifgym.core.tasks import task_of
from ifgym.errors import ConfigError
from ifgym.llm.conversation import count_episode_usage
from ifgym.llm.loop import gather_or_cancel, run_async
from ifgym.rewards.rubric import Ending, Grade, Rubric
from ifgym.rewards.scorer import Scores
from ifgym.runner.rollout import FailedEpisode, Recorder, RunResult, StoredEpisodes, latest_lines
from ifgym.simulators.base import UserSimulator

__all__ = [
    "USAGE",
    "AsPlayed",
    "Plan",
    "TranscriptUser",
    "endings_that_differ",
    "judge_config",
    "judge_named",
    "plan",
    "rescore_episode",
    "rescore_episodes",
    "user_reacts",
]

USAGE = (
    "usage: ifgym rescore RUN_FOLDER | EPISODES.jsonl [judge=rules|llm judge.KEY=VALUE ... "
    "checker_semantics=ifgym|evolif out=FOLDER concurrency=N cache=DIR progress=false plots=false ci=false]"
)
# options besides judge.* overrides, and how each is read
OPTIONS: dict[str, Callable[[str], Any]] = {
    "judge": str,
    "checker_semantics": str,
    "out": str,
    "concurrency": int,
    "cache": str,
    "cache_nondeterministic": lambda v: v.lower() == "true",
    "progress": lambda v: v.lower() == "true",
    "plots": lambda v: v.lower() == "true",
    "ci": lambda v: v.lower() == "true",
    "max_failure_rate": float,
}
# endings a rubric decides (from the verdicts or the reply); the others are the user's
RUBRIC_ENDINGS = ("patience", "max_turns", "assistant_closed")


class TranscriptUser(UserSimulator):
    """A recorded episode's user: says its turns in order, and ends where it ended.

    `at` is the index of the turn being answered (set by `rescore_episode`); `episode_meta` gives
    what the recorded user contributed to the episode (its dialogue, persona, facts, last words)
    and the patience it had after that turn, so an env that reads them records them unchanged.
    """

    def __init__(self, episode: Episode):
        self.episode = episode
        self.at = 0
        self.task = task_of(episode)

    def _turn(self, index: int) -> UserTurn:
        turn = self.episode.turns[index]
        return UserTurn(turn.user, turn.spec)

    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """The recorded first turn."""
        self.at = 0
        return self._turn(0)

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The recorded turn after the one answered (None after the last)."""
        following = self.at + 1
        return self._turn(following) if following < len(self.episode.turns) else None

    @property
    def end_reason(self) -> str:
        """Why the recorded dialogue ended."""
        return self.episode.done_reason

    @property
    def stats(self) -> dict[str, int | float]:
        """The recorded user's counters (renders, fallbacks …): it is that user's dialogue."""
        return dict(self.episode.meta.get("user_stats") or {})

    @property
    def system_prompt(self) -> str | None:
        """The recorded system prompt."""
        return self.episode.system_prompt

    def episode_meta(self) -> dict[str, Any]:
        """What the recorded user contributed, as its task reads it back (a FlexBench caller: with its patience)."""
        return self.task.user_meta(self.episode, self.at)


class AsPlayed(Rubric):
    """A rubric that grades as `rubric` does but ends the dialogue where the recorded one ended.

    `would_end` notes where `rubric`'s own end rule disagrees with the recording: the first earlier turn
    at which it would have ended the dialogue, or its different decision at the last turn.
    """

    def __init__(self, rubric: Rubric, episode: Episode):
        self.rubric = rubric
        self.patience = rubric.patience
        self.episode = episode
        self.turn = 0
        self.would_end: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:  # what an env reads of its own rubric (FlexBench's `last` scores)
        rubric = self.__dict__.get("rubric")
        if rubric is None:
            raise AttributeError(name)
        return getattr(rubric, name)

    def reset(self) -> None:
        """Start the episode: the rubric's own reset."""
        self.rubric.reset()
        self.turn, self.would_end = 0, None

    def scores_turn(self, ending: Ending | None) -> bool:
        """Whether the rubric scores this turn."""
        return self.rubric.scores_turn(ending)

    def grade(self, scores: Scores | None) -> Grade:
        """The rubric's grade."""
        return self.rubric.grade(scores)

    def close(self, grade: Grade, ending: Ending) -> Grade:
        """The rubric's end-of-dialogue term."""
        return self.rubric.close(grade, ending)

    def end(self, reply: str, last_turn: bool) -> Ending | None:
        """The recorded ending at the recorded last turn, none before; the rubric's own decision is noted."""
        index, self.turn = self.turn, self.turn + 1
        own = self.rubric.end(reply, last_turn)
        recorded = self.episode.done_reason
        if index < len(self.episode.turns) - 1:
            if own is not None and self.would_end is None:
                self.would_end = {"turn": index, "reason": own.reason, "recorded": recorded}
            return None
        own_reason = own.reason if own is not None else None
        played_reason = recorded if recorded in RUBRIC_ENDINGS else None
        if own_reason != played_reason and self.would_end is None:
            self.would_end = {"turn": index, "reason": own_reason or "goes on", "recorded": recorded}
        return Ending(recorded, truncated=recorded == "max_turns")


async def rescore_episode(env: Any, episode: Episode) -> Episode:
    """`episode`'s replies scored by `env` (a fresh env of the run's config), its user's turns and ending kept.

    The env's scorer and rubric make the verdicts and rewards, its turn loop the record; the result
    keeps the recorded episode's meta (policy usage, user stats …) with what the env writes now on
    top (checker semantics, protocol, end-of-dialogue scores), and `meta["rescore"]` saying where the
    new verdicts would have ended the dialogue differently (`would_end`, None when they would not).
    """
    base = env.unwrapped
    if not episode.turns:
        raise ConfigError(f"episode {episode.episode_id} has no turns: nothing to score")
    user, rubric = TranscriptUser(episode), AsPlayed(base.rubric, episode)
    base.user, base.rubric = user, rubric
    await base.areset(seed=episode.seed)
    for index, turn in enumerate(episode.turns):
        user.at = index
        await base.astep(turn.reply)
    fresh = base.episode
    fresh.meta = {**episode.meta, **fresh.meta, "user_stats": user.stats}
    fresh.meta["rescore"] = {"source_episode_id": episode.episode_id, "would_end": rubric.would_end}
    return fresh


def user_reacts(env: Any) -> bool:
    """Whether the env's user may say something else after other replies (its turns depend on them)."""
    from ifgym.envs.composite import CompositeEnv
    from ifgym.envs.evolif import EvolIFEnv
    from ifgym.envs.structflow import StructFlowEnv

    base = env.unwrapped
    if isinstance(base, EvolIFEnv):  # the template user never sees the replies; an adaptive LLM user does
        return bool(base.settings.get("adaptive"))
    if isinstance(base, StructFlowEnv):  # replayed or pre-built dialogues: the turns are fixed before any reply
        return False
    if isinstance(base, CompositeEnv):  # templates fixed by the seed; an LLM user words each turn
        return base.settings["renderer"] != "template"
    return True  # FlexBench's caller answers the replies; an env not known here: say it may


def _source(arg: str) -> tuple[Path, dict[str, Any]]:
    """A finished run's episodes file and its record (run.json), from its folder or episodes file."""
    from ifgym.runner.records import RECORD_FILE

    path = Path(arg).expanduser().absolute()
    folder = path if path.is_dir() else path.parent
    record_path, summary_path = folder / RECORD_FILE, folder / "summary.json"
    if not record_path.is_file() or "config" not in json.loads(record_path.read_text(encoding="utf-8")):
        raise ConfigError(
            f"rescore: {folder} has no {RECORD_FILE} with the run's config; give the folder of a run `ifgym eval` wrote"
        )
    record = json.loads(record_path.read_text(encoding="utf-8"))
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    episodes = path if path.is_file() else folder / Path(summary.get("output") or "episodes.jsonl").name
    if not episodes.is_file():
        raise ConfigError(f"rescore: no episodes file {episodes}; give the run's folder or its episodes file")
    return episodes, record


def _options(args: Sequence[str]) -> tuple[str, dict[str, Any], list[str]]:
    positional = [a for a in args if "=" not in a]
    if len(positional) != 1:
        raise ConfigError(f"rescore takes one run (a folder or episodes file), got {len(positional)}. {USAGE}")
    options: dict[str, Any] = {}
    judge_keys: list[str] = []
    for item in (a for a in args if "=" in a):
        key, value = item.split("=", 1)
        key = key.removeprefix("env.") if key == "env.checker_semantics" else key
        if key.startswith("judge."):
            judge_keys.append(f"{key.removeprefix('judge.')}={value}")
            continue
        if key not in OPTIONS:
            from ifgym.errors import did_you_mean

            raise ConfigError(
                f"rescore: unknown option {key!r}.{did_you_mean(key, (*OPTIONS, 'judge.llm.base_url'))} "
                f"Options: {', '.join(OPTIONS)}, judge.KEY=VALUE (another judge's settings)"
            )
        try:
            options[key] = OPTIONS[key](value)
        except ValueError:
            raise ConfigError(f"rescore: {key}={value!r} is not a valid value") from None
    return positional[0], options, judge_keys


def judge_config(source: dict[str, Any], group: dict[str, Any] | None, overrides: list[str]) -> dict[str, Any]:
    """The new judge settings: the source run's, or `group` (the `judge=KIND` defaults), with `judge.*` overrides."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.conf.schema import JudgeConf

    base = copy.deepcopy(group if group is not None else source)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(JudgeConf), base, OmegaConf.from_dotlist(overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"rescore: judge settings: {str(exc).splitlines()[0]}") from None
    return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]


def judge_named(config: dict[str, Any], models: Mapping[str, Any], semantics: str) -> dict[str, Any]:
    """The judge a run's verdicts came from, as run.json names it: kind, mode, model and host, checker semantics."""
    judge = {"kind": config["kind"], "mode": config.get("mode"), "checker_semantics": semantics}
    if config["kind"] == "llm":
        judge.update(model=(models.get("judge") or {}).get("model"), host=(models.get("judge") or {}).get("host"))
    return judge


@dataclass
class Plan:
    """What a rescore does: the source run (episodes file, record), the new config, its key and folder."""

    source_file: Path
    source_record: dict[str, Any]
    resolved: dict[str, Any]
    key: str
    folder: Path
    seeds: dict[int, int]  # the source's finished episodes: seed -> its line's offset
    failed_seeds: list[int]  # the source's failed episodes (nothing to rescore)

    @property
    def source(self) -> dict[str, Any]:
        """Where the replies come from, as run.json and the summary name it."""
        key = self.source_record["run_key"]
        return {"folder": str(self.source_file.parent), "episodes": str(self.source_file), "run_key": key}


def plan(args: Sequence[str], judge_group: Callable[[str], dict[str, Any]]) -> Plan:
    """Read `ifgym rescore`'s arguments and the source run; `judge_group(kind)` composes a `judge=KIND` group."""
    from ifgym.runner.records import run_key

    arg, options, judge_keys = _options(args)
    source_file, source_record = _source(arg)
    source_config = source_record["config"]
    resolved = copy.deepcopy(source_config)
    kind = options.get("judge")
    group = judge_group(kind) if kind is not None and kind != source_config["judge"].get("kind") else None
    resolved["judge"] = judge_config(source_config["judge"], group, judge_keys)
    if "checker_semantics" in options:
        resolved["env"]["checker_semantics"] = options["checker_semantics"]
    for name in ("concurrency", "cache", "cache_nondeterministic", "progress", "plots", "ci", "max_failure_rate"):
        if name in options:
            resolved[name] = options[name]
    if resolved["concurrency"] < 1:
        raise ConfigError(f"rescore: concurrency must be >= 1, got {resolved['concurrency']}")
    source_key = source_record["run_key"]
    key = hashlib.sha256(json.dumps([source_key, run_key(resolved)]).encode()).hexdigest()[:12]
    folder = (
        Path(options["out"]).expanduser().absolute()
        if "out" in options
        else source_file.parent.with_name(f"{source_file.parent.name}-rescore-{key}")
    )
    if folder.resolve() == source_file.parent.resolve():
        raise ConfigError(f"rescore: out={folder} is the source run's folder; give the new run a folder of its own")
    latest = [line for line in latest_lines(source_file).values() if line.run_key == source_key]
    seeds = {line.seed: line.offset for line in latest if line.failed is None}
    if not seeds:
        raise ConfigError(f"rescore: no finished episodes of run {source_key} in {source_file}")
    failed = sorted(line.seed for line in latest if line.failed is not None)
    return Plan(source_file, source_record, resolved, key, folder, dict(sorted(seeds.items())), failed)


def rescore_episodes(plan: Plan, make_env: Callable[[], Any]) -> RunResult:
    """Rescore the plan's episodes into `folder/episodes.jsonl` (resuming), `concurrency` at a time."""
    resolved = plan.resolved
    recorder = Recorder(
        list(plan.seeds),
        output=plan.folder / "episodes.jsonl",
        run_key=plan.key,
        retry_failed=True,
        max_failure_rate=resolved["max_failure_rate"],
        progress=resolved["progress"],
        on_episode=None,
    )
    try:
        run_async(_rescore_all(make_env, plan.source_file, plan.seeds, recorder, plan.key, resolved["concurrency"]))
    finally:
        recorder.close()
    return recorder.result()


def endings_that_differ(episodes: Iterable[Episode]) -> list[int | None]:
    """The seeds whose new verdicts would have ended the dialogue at another turn (`meta.rescore.would_end`)."""
    return [e.seed for e in episodes if (e.meta.get("rescore") or {}).get("would_end")]


async def _rescore_all(
    make_env: Callable[[], Any],
    source: Path,
    offsets: Mapping[int, int],
    recorder: Recorder,
    key: str,
    concurrency: int,
) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for seed in recorder.todo:
        queue.put_nowait(seed)

    async def worker() -> None:
        while not queue.empty():
            seed = queue.get_nowait()
            episode = StoredEpisodes(source, [offsets[seed]])[0]
            recorder.record(await _rescore_one(make_env, episode, key))

    await gather_or_cancel(worker() for _ in range(min(concurrency, len(recorder.todo))))


async def _rescore_one(make_env: Callable[[], Any], episode: Episode, key: str) -> Episode | FailedEpisode:
    """One recorded episode rescored, or its FailedEpisode; `meta["usage"]` holds the calls rescoring made."""
    env = None
    with count_episode_usage() as usage:
        try:
            env = make_env()
            record: Episode | FailedEpisode = await rescore_episode(env, episode)
        except Exception as exc:  # one episode's failure is recorded, never the run's
            record = FailedEpisode.from_exception(exc, env=env, policy=None, seed=episode.seed)
    record.episode_id = f"{key}-seed{episode.seed}"
    record.meta["run_key"] = key
    record.meta["usage"] = {role: u.to_json() for role, u in usage.items()}
    if isinstance(record, Episode):
        record.meta["played_usage"] = episode.meta.get("usage", {})
        record.meta.setdefault("task", env.unwrapped.task.name)  # as a run's file names it
    return record


def rescore_run(args: list[str], judge_config: Callable[[str], dict[str, Any]]) -> int:
    """`ifgym rescore RUN [KEY=VALUE ...]`: RUN's replies judged again into a new run folder (this module).

    The env, judge clients, audit, run record and report are made as `ifgym eval` makes them; the policy is never
    built. `judge_config` composes a judge group's config (`judge=KIND`), as `ifgym eval` would. Returns 1 when
    episodes failed, as eval does.
    """
    from ifgym.errors import ConfigError
    from ifgym.runner.build import build_env, fill_request_limits, use_cache
    from ifgym.runner.judge_gate import audit_judge
    from ifgym.runner.records import RunRecord
    from ifgym.runner.report import write_summary
    from ifgym.runner.rollout import failure_summary
    from ifgym.runner.summarize import ci_settings_of, report_run

    job = plan(args, judge_config)
    resolved, source = job.resolved, job.source_record
    fill_request_limits(resolved, resolved["concurrency"])
    clients: dict[str, Any] = {}
    make_env = build_env(resolved["env"], resolved["judge"], clients)
    use_cache(clients, resolved)
    env = make_env()
    judge_record = audit_judge(env.unwrapped, resolved["judge"], progress=resolved["progress"])
    record = RunRecord(job.folder, config=resolved, key=job.key, command=["ifgym", "rescore", *args])
    if source.get("policy_protocol"):  # the replies are the source run's: so is the policy's setup
        record.data["policy_protocol"] = source["policy_protocol"]
    record.start(clients)
    semantics = (
        resolved["env"].get("checker_semantics", "ifgym"),
        source["config"]["env"].get("checker_semantics", "ifgym"),
    )
    notes = {
        "source": job.source,
        "source_judge": judge_named(source["config"]["judge"], source.get("models", {}), semantics[1]),
        "judge": judge_named(resolved["judge"], record.data["models"], semantics[0]),
        "user_reacts_to_replies": user_reacts(env),
        "scored_as_played": "the recorded user turns and endings are kept; the policy is not called",
        "source_failed_seeds": job.failed_seeds,
    }
    record.data["rescore"] = notes
    record.write()
    print(
        f"rescoring {len(job.seeds)} episodes of {job.source_file} (judge {resolved['judge']['kind']}, checker "
        f"semantics {semantics[0]}) into {job.folder}; the policy is not called"
        + (f"; {len(job.failed_seeds)} failed episodes of the source are not rescored" if job.failed_seeds else ""),
        file=sys.stderr,
    )
    try:
        result = rescore_episodes(job, make_env)
        if not result.episodes:
            kind, message = next(iter(result.failures["examples"].items()))
            raise ConfigError(f"rescore: every episode failed; commonest error: {kind}: {message}")
    except BaseException as exc:
        record.fail(exc)
        raise
    notes["ending_would_differ"] = differs = endings_that_differ(result.episodes)
    summary, _, _ = report_run(
        env.unwrapped,
        resolved,
        job.folder / "episodes.jsonl",
        result.episodes,
        failure_summary(result.failed, len(job.seeds)),
        worker_deaths=0,
        judge_record=judge_record,
        record=record,
        roles=clients,
        ci_settings=ci_settings_of(resolved),
    )
    summary["rescore"] = notes
    write_summary(summary, job.folder / "summary.json")
    if notes["user_reacts_to_replies"]:
        print("note: this env's user may answer other replies differently; the transcript is scored as played")
    if differs:
        print(
            f"note: in {len(differs)} episodes (seeds {', '.join(map(str, differs))}) the new verdicts would have "
            "ended the dialogue at another turn (meta.rescore.would_end); they are scored as played"
        )
    return 1 if result.failed else 0
