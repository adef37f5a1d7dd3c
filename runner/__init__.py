"""The run: playing episodes in envs and turning them into a run folder, and the commands that read run folders.

`envs/` holds the envs; everything that drives them lives here (nothing in `envs/` imports this room):
`rollout`/`arollout` play one episode through the env's wrappers (`async_wrappers`), `run`/`arun` many
(failed episodes recorded, resume, one concurrency knob) into an episodes file, whose readers are in
`rollout` too (`read_episodes`, `iter_records`, `StoredEpisodes`, `usage_totals`); `ray_executor` plays
them on Ray workers, `shards` combines a sharded run's files; each starts its event loop with
`ifgym.llm.loop.run_async` (uvloop's where installed).

One run, from `ifgym eval` to `summary.json`: `cli` composes the config and calls `evaluate.evaluate`,
which makes the run key and folder (`records`), claims the episodes file, builds the env, the policy
and one client per model role (`build`), chooses the seeds, audits an LLM judge before any episode
(`judge_gate`), starts `run.json` (`records.RunRecord`), plays the seeds (`rollout.run` or
`ray_executor.run_ray`; W&B through `tracking`) and hands the episodes file to `summarize.report_run`:
one pass over it (`report.RunTally`), the env's metrics, bootstrap intervals (`stats`), `summary.json`
and the plots (`report`), `run.json` finished, the results table printed. However the run ends
(finished, failed episodes, stopped early, Ctrl-C, SIGTERM) the summary and record are written first.

The other commands' bodies: `merge` (`ifgym merge`), `compare`, `rescore`, `training_data`
(`ifgym export`), `judge_gate.judge_audit` (`ifgym judge-audit`), `view` and `agreement`,
`flexbench_dimensions`. `ifgym train` (`ifgym.integrations.trl`) builds its envs and held-out runs
here too.
"""

from ifgym.lazy import lazy_submodules
from ifgym.runner.async_wrappers import async_reset, async_step
from ifgym.runner.rollout import (
    EpisodeLog,
    FailedEpisode,
    RunResult,
    arollout,
    arun,
    iter_records,
    read_episodes,
    rollout,
    run,
)

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "EpisodeLog",
    "FailedEpisode",
    "RunResult",
    "arollout",
    "arun",
    "async_reset",
    "async_step",
    "iter_records",
    "read_episodes",
    "rollout",
    "run",
]
