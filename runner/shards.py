"""Sharded runs: shard `I/N` plays the seeds at positions I, I+N, I+2N … into files of its own.

A shard writes `episodes.shard-I-of-N.jsonl` beside the run's episodes file (and its record and
summary as `run.shard-I-of-N.json`, `summary.shard-I-of-N.json`), so shards running at once, on
one machine or many, never share a writer. `combine` folds shard files into the run's episodes
file: one record per seed (a finished episode beats a failed one), every attempt's line kept byte
for byte so usage still adds up; lines of another configuration (run_key) are refused. Shards that
overlap (both played a seed) merge when their episodes agree on content (`episode_content`: the
turns, replies, verdicts, rewards, ending); what the episode cost (calls, tokens, retries, wall
time) may differ. Two finished episodes of one seed that differ in content are an error, never a
silent pick. `ifgym merge` calls
it, and so does the next unsharded run into the folder (the shards' seeds count as done).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ifgym.errors import ConfigError, DataFormatError
from ifgym.runner.rollout import _lock, read_lines

__all__ = [
    "Combined",
    "Shard",
    "combine",
    "episode_content",
    "finished_seeds",
    "run_file_of",
    "shard_files",
    "shards_of",
]

_TAG = re.compile(r"\.shard-(\d+)-of-(\d+)$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: the seeds at positions index, index+count, … of a run's seed list."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: object) -> Shard:
        """`"I/N"` (as in `shard=0/4`) as a Shard; anything else is a ConfigError saying what is expected."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not match or not int(match[1]) < int(match[2]):
            raise ConfigError(
                f"shard must be I/N with 0 <= I < N (shard=0/4 is the first of four shards), got {text!r}"
            )
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def tag(self) -> str:
        """`shard-I-of-N`, the part of its files' names that says which shard wrote them."""
        return f"shard-{self.index}-of-{self.count}"

    def seeds(self, seeds: Sequence[int]) -> list[int]:
        """The seeds of a run that are this shard's: those whose position mod `count` is `index`."""
        return list(seeds)[self.index :: self.count]

    def file(self, path: Path) -> Path:
        """The shard's own version of a run file: `episodes.jsonl` -> `episodes.shard-I-of-N.jsonl`."""
        return path.with_name(f"{path.stem}.{self.tag}{path.suffix}")


def _shard_of(path: Path) -> Shard | None:
    match = _TAG.search(path.stem)
    return Shard(int(match[1]), int(match[2])) if match and int(match[1]) < int(match[2]) else None


def run_file_of(shard_file: Path) -> Path:
    """The run's episodes file a shard file belongs to (`e.shard-0-of-2.jsonl` -> `e.jsonl`), beside it."""
    return shard_file.with_name(_TAG.sub("", shard_file.stem) + shard_file.suffix)


def shard_files(run_file: Path) -> list[tuple[Shard, Path]]:
    """The shard files beside `run_file` (of any shard count), in order of count, then index."""
    found = []
    for path in run_file.parent.glob(f"{glob.escape(run_file.stem)}.shard-*-of-*{glob.escape(run_file.suffix)}"):
        shard = _shard_of(path)
        if shard is not None and run_file_of(path) == run_file:
            found.append((shard, path))
    return sorted(found, key=lambda item: (item[0].count, item[0].index))


def shards_of(paths: Sequence[Path]) -> tuple[Path, list[tuple[Shard, Path]]]:
    """The run file and shard files that `ifgym merge` was given: a run folder, or shard files of one run folder."""
    if not paths:
        raise ConfigError("merge: give a run folder, or the shard files (NAME.shard-I-of-N.jsonl) of one run")
    if len(paths) == 1 and paths[0].is_dir():
        folder = paths[0]
        runs = {run_file_of(p) for p in folder.glob("*.shard-*-of-*.jsonl") if _shard_of(p)}
        if not runs:
            raise ConfigError(f"merge: no shard files (NAME.shard-I-of-N.jsonl) in {folder}; run with shard=I/N first")
        if len(runs) > 1:
            names = ", ".join(sorted(p.name for p in runs))
            raise ConfigError(f"merge: {folder} holds the shards of several episodes files ({names}); give the files")
        run_file = runs.pop()
        return run_file, shard_files(run_file)
    chosen = []
    for path in paths:
        shard = _shard_of(path)
        if path.is_dir() or shard is None or path.suffix != ".jsonl":
            raise ConfigError(
                f"merge: {path} is not a shard file (NAME.shard-I-of-N.jsonl, written by a run with shard=I/N); "
                "give a run folder or shard files"
            )
        if not path.is_file():
            raise ConfigError(f"merge: {path} does not exist")
        chosen.append((shard, path))
    runs = {run_file_of(p) for _, p in chosen}
    if len(runs) > 1:
        raise ConfigError(
            f"merge: the shard files belong to different episodes files ({', '.join(sorted(map(str, runs)))}); put "
            "one run's shard files (with their run.shard-I-of-N.json records) in one folder and merge that"
        )
    return runs.pop(), sorted(chosen, key=lambda item: (item[0].count, item[0].index))


@dataclass(frozen=True, slots=True)
class _Line:
    source: int  # index of the file it is in
    number: int  # line number, for messages
    offset: int
    size: int
    failed: bool
    digest: bytes  # of the line's bytes: equal lines are one record seen twice
    content: bytes  # of what the episode is (`episode_content`): equal for two plays of one deterministic dialogue


# what an episode record says about its cost, not its dialogue: the calls, tokens and retries of each model
# client (`usage`), the policy's (`policy_usage`), and the policy's per-turn calls, tokens and wall time
COST_META = ("usage", "policy_usage")
COST_TRACE = ("costs",)


def episode_content(record: dict[str, Any]) -> dict[str, Any]:
    """An episode record without its cost: `meta.usage`, `meta.policy_usage` and `meta.policy_trace.costs` left out.

    Two plays of a seed by a deterministic model give the same content (the same turns, replies,
    verdicts, rewards and ending) while their wall-clock seconds, and the retries a flaky server
    caused, differ.
    """
    meta = {k: v for k, v in (record.get("meta") or {}).items() if k not in COST_META}
    if isinstance(meta.get("policy_trace"), dict):
        meta["policy_trace"] = {k: v for k, v in meta["policy_trace"].items() if k not in COST_TRACE}
    return {**record, "meta": meta}


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()


def _head(data: dict[str, Any], raw: bytes) -> tuple[Any, bool, Any, bytes, bytes]:
    failed = bool(data.get("failed"))
    content = b"" if failed else _digest(json.dumps(episode_content(data), sort_keys=True).encode())
    return data["seed"], failed, (data.get("meta") or {}).get("run_key"), raw.rstrip(b"\n"), content


def _scan(path: Path, source: int, run_key: str) -> Iterator[tuple[int, _Line]]:
    """(seed, line) of every record in an episodes file; a cut-off last line (an interrupted write) is skipped."""
    for number, start, (seed, failed, key, body, content) in read_lines(path, _head):
        if key != run_key:
            raise ConfigError(
                f"{path}:{number} holds an episode of another configuration (run_key {key}; this run is "
                f"{run_key}). Only shards of one run combine: the same env, policy and judge settings"
            )
        if not isinstance(seed, int):
            raise DataFormatError(f"{path}:{number}: an episode without a seed cannot be merged; remove that line")
        yield seed, _Line(source, number, start, len(body), failed, _digest(body), content)


def finished_seeds(paths: Iterable[Path], run_key: str) -> set[int]:
    """The seeds with a finished episode in any of `paths` (files of `run_key`; missing files are empty)."""
    return {
        seed
        for source, path in enumerate(paths)
        if path.exists()
        for seed, line in _scan(path, source, run_key)
        if not line.failed
    }


@dataclass(frozen=True)
class Combined:
    """What `combine` did: the run file, the seeds it now holds (finished, failed), and the lines it took in."""

    path: Path
    finished: int
    failed: int
    added: int


def _plan(lines: list[_Line], seed: int, paths: Sequence[Path]) -> list[_Line]:
    """A seed's lines in the combined file: each distinct attempt, then its record (the last finished one).

    Finished episodes of the seed must agree on content (they may differ in cost: every one is
    kept, its calls were made); the last one is the record.
    """
    distinct: dict[bytes, _Line] = {}
    for line in lines:
        distinct.setdefault(line.digest, line)
    finished = [line for line in distinct.values() if not line.failed]
    different: dict[bytes, _Line] = {}
    for line in finished:
        different.setdefault(line.content, line)
    if len(different) > 1:
        where = " and ".join(f"{paths[line.source]}:{line.number}" for line in different.values())
        raise ConfigError(
            f"seed {seed} has two different finished episodes ({where}): shards that overlap, played by a model "
            "that does not answer the same twice. Keep the one you want (delete the other line) and merge again"
        )
    record = finished[-1] if finished else list(distinct.values())[-1]
    return [line for line in distinct.values() if line is not record] + [record]


def combine(run_file: Path, shards: Sequence[Path], run_key: str) -> Combined:
    """Fold `shards` into `run_file`: per seed (ascending), its distinct failed attempts, then its record.

    Lines are copied byte for byte, so the result is what one unsharded run would have written, in
    seed order. Every file is locked while it is read (a shard still being written is refused), and
    `run_file` is replaced atomically, only when a shard brings a line it lacks. Raises ConfigError
    for a line of another run_key, or for two finished episodes of one seed that differ in content
    (not only in cost: see `episode_content`).
    """
    paths = [run_file, *(p for p in shards if p.resolve() != run_file.resolve())]
    with ExitStack() as stack:
        for path in paths:
            stack.callback(_lock(path).close)
        by_seed: dict[int, list[_Line]] = {}
        for source, path in enumerate(paths):
            if path.exists():
                for seed, line in _scan(path, source, run_key):
                    by_seed.setdefault(seed, []).append(line)
        plan = {seed: _plan(by_seed[seed], seed, paths) for seed in sorted(by_seed)}
        added = sum(line.source != 0 for lines in plan.values() for line in lines)
        if added:
            files = [stack.enter_context(p.open("rb")) if p.exists() else None for p in paths]
            _write(run_file, plan.values(), files)
    records = [lines[-1] for lines in plan.values()]
    return Combined(run_file, sum(not r.failed for r in records), sum(r.failed for r in records), added)


def _write(run_file: Path, plan: Iterable[list[_Line]], files: list[BinaryIO | None]) -> None:
    tmp = run_file.with_name(f".{run_file.name}.combining")
    with tmp.open("wb") as out:
        for lines in plan:
            for line in lines:
                f = files[line.source]
                assert f is not None  # a line comes from a file that exists
                f.seek(line.offset)
                out.write(f.read(line.size) + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, run_file)
