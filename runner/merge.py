"""`ifgym merge`: a sharded run's shard files combined into its episodes file, then summarized as eval does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ifgym.runner.build import build_env
from ifgym.runner.evaluate import claim_run_folder
from ifgym.runner.summarize import ci_settings_of, report_run


def merge_runs(args: list[str]) -> int:
    """`ifgym merge RUN_FOLDER | SHARD_FILE...`: combine a run's shard files into its episodes file and report it.

    The episodes file gets one record per seed (`ifgym.runner.shards.combine`); the summary, plots
    and results table are written as `ifgym eval` writes them (`report_run`), from the config the
    shards recorded in their `run.shard-I-of-N.json`. Returns 1 when episodes failed, as eval does.
    """
    from ifgym.errors import ConfigError
    from ifgym.runner.records import RECORD_FILE, RunRecord
    from ifgym.runner.rollout import StoredEpisodes, failure_summary, latest_lines
    from ifgym.runner.shards import combine, shards_of

    if not args or any(a.startswith("-") for a in args):
        print("usage: ifgym merge RUN_FOLDER | SHARD_FILE.jsonl [SHARD_FILE.jsonl ...]", file=sys.stderr)
        return 2
    run_file, shards = shards_of([Path(a).expanduser().absolute() for a in args])  # as Hydra's run folders are
    folder = run_file.parent
    records = {}
    for shard, path in shards:
        record_path = shard.file(folder / RECORD_FILE)
        if not record_path.is_file():
            raise ConfigError(
                f"merge: {record_path.name} (the record {path.name}'s run wrote, with its config) is not in {folder}; "
                "copy it there with the shard file"
            )
        records[record_path] = json.loads(record_path.read_text(encoding="utf-8"))
    (first_path, first), *others = records.items()
    for path, other in others:
        if other["run_key"] != first["run_key"]:
            raise ConfigError(
                f"merge: {path.name} is a run of another configuration (run_key {other['run_key']}) than "
                f"{first_path.name} (run_key {first['run_key']}); merge only the shards of one run"
            )
    key, resolved = first["run_key"], first["config"]
    claim_run_folder(run_file)
    combined = combine(run_file, [p for _, p in shards], key)
    print(
        f"merged {len(shards)} shard files into {run_file}: {combined.finished} finished and {combined.failed} "
        f"failed episodes ({combined.added} lines from the shards)",
        file=sys.stderr,
    )
    # a seed's last line is its record; finished episodes are read from the file when summarized
    latest = {line.seed: line for line in latest_lines(run_file).values()}
    records_by_seed = [latest[seed] for seed in sorted(latest)]
    failed = [r.failed for r in records_by_seed if r.failed is not None]
    episodes = StoredEpisodes(run_file, [r.offset for r in records_by_seed if r.failed is None])
    if not episodes:
        raise ConfigError(f"merge: no finished episodes in {run_file}; rerun the shards to retry the failed ones")
    shard_summaries = [
        json.loads(p.read_text(encoding="utf-8"))
        for shard, _ in shards
        if (p := shard.file(folder / "summary.json")).is_file()
    ]
    env = build_env(resolved["env"], resolved["judge"], {})().unwrapped
    record = RunRecord(folder, config=resolved, key=key, command=["ifgym", "merge", *args])
    record.data["models"] = first.get("models", {})
    if first.get("policy_protocol"):
        record.data["policy_protocol"] = first["policy_protocol"]
    record.data["merged"] = [p.name for _, p in shards]
    record.write()
    judge = next((s["judge"] for s in shard_summaries if "judge" in s), {"kind": resolved["judge"]["kind"]})
    report_run(
        env,
        resolved,
        run_file,
        episodes,
        failure_summary(failed, len(records_by_seed)),
        worker_deaths=sum(s.get("executor", {}).get("worker_deaths", 0) for s in shard_summaries),
        judge_record=judge,
        record=record,
        roles=record.data["models"],
        ci_settings=ci_settings_of(resolved),
    )
    if failed:
        print(
            f"ifgym: error: {len(failed)} of {len(records_by_seed)} episodes failed (seeds "
            f"{', '.join(str(f.seed) for f in failed)}); rerun the shards (or the run) to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
