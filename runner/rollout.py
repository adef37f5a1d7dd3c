"""Run policies in envs: one episode, or many concurrently with a JSONL log that resumes.

Concurrency is asyncio: every episode has its own env and policy, and awaits the model calls of
its turn; the clients' per-role semaphores bound the load. Episodes of different lengths never
wait for each other. Each finished episode is appended to the output at once (by the log's own
writer thread, in order: the event loop never waits on the disk), so an interrupted run loses at
most the episodes in flight, and re-running into the same file skips finished ones.
Memory stays flat: the run keeps per seed only where its line starts (and a failed episode's short
record), a resume reads each line's seed and status, and `RunResult.episodes` reads the episodes
back from the file when they are used.

An episode that raises (a model error after its retries, a bad reply, a bug in a wrapper, its
deadline passed) does not take the run down: it is written as a failed-episode line
(`"failed": true`, the error's type and message, the turns it reached) and the run goes on. A rerun
into the same file retries failed seeds (`retry_failed`); a seed's last line is its record, so
nothing is counted twice. A run stops early once more than `max_failure_rate` of the episodes it
has attempted have failed (after `STOP_MIN_ATTEMPTS` of them, or sooner when its failures already
exceed that share of all it has to play): `RunStoppedError`, naming the commonest error. Failures
already in the file count for nothing until they are retried, so a healthy rerun finishes them all.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import functools
import json
import os
import threading
import traceback
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, overload

import gymnasium as gym
from tqdm.auto import tqdm

from ifgym.core import Episode
from ifgym.core.turns import json_line, read_json_line
from ifgym.errors import ConfigError, DataFormatError, EpisodeTimeoutError, RunStoppedError
from ifgym.files import not_a_folder
from ifgym.llm.conversation import Call, Steps, arun_steps, count_episode_usage, run_steps
from ifgym.llm.loop import gather_or_cancel, run_async
from ifgym.runner.async_wrappers import async_reset, async_step
from ifgym.runner.redaction import redact, redact_json_line

T = TypeVar("T")


def _finish(env: gym.Env, policy: Any) -> Episode:
    episode = env.unwrapped.episode
    episode.meta["policy_usage"] = _policy_usage(policy)
    record = getattr(policy, "episode_record", None)
    if callable(record):  # wrappers: per-turn costs, their graph/forest, counters of defaults taken
        episode.meta["policy_trace"] = record()
    return episode


def _policy_usage(policy: Any) -> dict[str, Any]:
    # this episode's numbers (counted since reset); a policy without them gives its lifetime totals
    usage = getattr(policy, "episode_usage", None)
    return dict(usage if usage is not None else getattr(policy, "usage", {}))


def rollout(env: gym.Env, policy: Any, *, seed: int | None = None, options: dict | None = None) -> Episode:
    """Play one episode to its end with `policy` (anything with reset() and act(messages) -> str)."""
    return run_steps(_episode(env, policy, seed, options))


async def arollout(env: gym.Env, policy: Any, *, seed: int | None = None, options: dict | None = None) -> Episode:
    """`rollout` with the policy's `aact` and the env's `astep` awaited, through every wrapper of `env`.

    A wrapper that cannot be applied asynchronously raises AsyncWrapperError (see `async_wrappers`).
    """
    return await arun_steps(_episode(env, policy, seed, options))


def _episode(env: gym.Env, policy: Any, seed: int | None, options: dict | None) -> Steps[Episode]:
    """One episode, written once: `rollout` makes each call blocking, `arollout` awaits it."""

    # the policy's act and aact are looked up when called: a policy may have only the one its driver calls
    def act(messages: list) -> Any:
        return policy.act(messages)

    def aact(messages: list) -> Any:
        return policy.aact(messages)

    areset, astep = functools.partial(async_reset, env), functools.partial(async_step, env)
    policy.reset()
    obs, _ = yield Call(env.reset, areset, kwargs={"seed": seed, "options": options})
    while True:
        action = yield Call(act, aact, (obs,))
        obs, _, terminated, truncated, _ = yield Call(env.step, astep, (action,))
        if terminated or truncated:
            return _finish(env, policy)


# --- failed episodes -------------------------------------------------------------------------------

MESSAGE_CHARS = 2000


@dataclass
class FailedEpisode:
    """An episode that raised instead of finishing: one JSONL line with `"failed": true`.

    `turns` is the number of turns it completed, `error` its exception's type, message (secrets
    redacted, cut at 2,000 characters), the innermost frame it was raised at, and the HTTP status
    a model server answered (`status`, only when there was one).
    """

    episode_id: str
    env_id: str
    seed: int | None
    error: dict[str, Any]
    turns: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    failed = True

    @classmethod
    def from_exception(cls, exc: BaseException, *, env: Any, policy: Any, seed: int | None) -> FailedEpisode:
        base = getattr(env, "unwrapped", None)
        episode = getattr(base, "episode", None)
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
        message = redact(str(exc) or repr(exc))
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS] + f" … [{len(message) - MESSAGE_CHARS} more characters]"
        error: dict[str, Any] = {"type": type(exc).__name__, "message": message, "at": where}
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            error["status"] = status
        return cls(
            episode_id="",
            env_id=getattr(getattr(base, "spec", None), "id", None) or type(base).__name__,
            seed=seed,
            error=error,
            turns=len(episode.turns) if episode is not None else 0,
            meta={"policy_usage": _policy_usage(policy)} if policy is not None else {},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "env_id": self.env_id,
            "seed": self.seed,
            "failed": True,
            "error": self.error,
            "turns": self.turns,
            "meta": self.meta,
        }

    def to_jsonl(self) -> str:
        return json_line(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FailedEpisode:
        return cls(
            episode_id=data["episode_id"],
            env_id=data["env_id"],
            seed=data.get("seed"),
            error=dict(data["error"]),
            turns=int(data.get("turns", 0)),
            meta=dict(data.get("meta", {})),
        )


Record = Episode | FailedEpisode


def record_from_json(data: dict[str, Any]) -> Record:
    """An episodes-file line as an Episode, or a FailedEpisode when it says `"failed": true`."""
    return FailedEpisode.from_json(data) if data.get("failed") else Episode.from_json(data)


def read_lines(path: str | Path, parse: Callable[[dict[str, Any], bytes], T]) -> Iterator[tuple[int, int, T]]:
    """(line number, byte offset, `parse(object, raw line)`) for every line of an episodes file, one at a time.

    A cut-off last line (an interrupted write) is ignored; any other unreadable line (bad JSON, or
    `parse` failing on it with KeyError/TypeError/ValueError/AttributeError) is a DataFormatError.
    """
    path = not_a_folder(path, "episodes file")
    if not path.exists():
        return
    with path.open("rb") as f:
        offset = 0
        for number, line in enumerate(f, 1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                value = parse(read_json_line(line), line)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                if not line.endswith(b"\n"):  # the tail of an interrupted append (only the last line lacks one)
                    return
                where = f"{path}:{number}"
                raise DataFormatError(f"{where}: not an episode record ({exc}); fix or remove that line") from exc
            yield number, start, value


def _read_lines(path: str | Path, parse: Callable[[dict[str, Any]], T]) -> Iterator[tuple[int, T]]:
    """(byte offset, `parse` of the line's object) for every line of an episodes file (see `read_lines`)."""
    return ((offset, value) for _, offset, value in read_lines(path, lambda data, _raw: parse(data)))


def iter_records(path: str | Path) -> Iterator[Record]:
    """Every line of an episodes file in order, one at a time. A cut-off last line (an interrupted write) is ignored."""
    return (record for _, record in _read_lines(path, record_from_json))


@dataclass(frozen=True, slots=True)
class LineRef:
    """What a log keeps of one episode's line instead of the episode: where the line starts, and whose it is.

    `failed` is a failed-episode line's record (small: no turns); None for a finished episode.
    """

    offset: int
    seed: int | None
    run_key: str | None
    failed: FailedEpisode | None = None


def _line_head(data: dict[str, Any]) -> tuple[tuple[str, str], LineRef]:
    # only the fields that say whose line it is: a finished episode's turns are left unread
    meta = data.get("meta") or {}
    run_key = meta.get("run_key")
    failed = FailedEpisode.from_json(data) if data.get("failed") else None
    return (run_key or data["env_id"], data["episode_id"]), LineRef(-1, data.get("seed"), run_key, failed)


def latest_lines(path: str | Path) -> dict[tuple[str, str], LineRef]:
    """Each episode's last line in an episodes file (a retried seed's success replaces its failure), in file order.

    Keyed by (run key, episode id): a run's episode ids name its seeds; episodes played outside a
    run (`rollout`) are told apart by their env id instead. Finished episodes are not built: each
    entry holds the line's offset (read it with `StoredEpisodes`).
    """
    out: dict[tuple[str, str], LineRef] = {}
    for offset, (key, head) in _read_lines(path, _line_head):
        out.pop(key, None)
        out[key] = replace(head, offset=offset)
    return out


class StoredEpisodes(Sequence[Episode]):
    """Finished episodes of an episodes file, given by their lines' offsets; each is read from the file when used.

    Iterating reads them one at a time, in the given order, so a run of any size is summarized in
    flat memory; `list(...)` materialises them for a caller that wants them all.
    """

    def __init__(self, path: str | Path, offsets: Iterable[int]):
        self.path = Path(path)
        self._offsets = array("q", offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> Episode: ...

    @overload
    def __getitem__(self, index: slice) -> StoredEpisodes: ...

    def __getitem__(self, index: int | slice) -> Episode | StoredEpisodes:
        if isinstance(index, slice):
            return StoredEpisodes(self.path, self._offsets[index])
        with self.path.open("rb") as f:
            return self._read(f, self._offsets[index])

    def __iter__(self) -> Iterator[Episode]:
        if not self._offsets:  # nothing to read (the file may not exist)
            return
        with self.path.open("rb") as f:
            for offset in self._offsets:
                yield self._read(f, offset)

    def __repr__(self) -> str:
        return f"StoredEpisodes({str(self.path)!r}, {len(self)} episodes)"

    def _read(self, f: Any, offset: int) -> Episode:
        f.seek(offset)
        line = f.readline()
        try:
            return Episode.from_json(read_json_line(line))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataFormatError(
                f"{self.path} at byte {offset}: not a finished episode ({exc}); was the file changed during the run?"
            ) from exc


def stored_episodes(path: str | Path) -> StoredEpisodes:
    """The finished episodes of a JSONL file, each its last record, in file order, read when used; no failed lines."""
    return StoredEpisodes(path, [line.offset for line in latest_lines(path).values() if line.failed is None])


def read_episodes(path: str | Path) -> list[Episode]:
    """The finished episodes of a JSONL file, each its last record; failed-episode lines are left out."""
    return list(stored_episodes(path))


def _usage_of(data: dict[str, Any]) -> tuple[str | None, dict[str, dict[str, int]]]:
    meta = data.get("meta") or {}
    return meta.get("run_key"), meta.get("usage", {})


def usage_totals(path: str | Path, run_key: str) -> dict[str, dict[str, int]]:
    """Every call the run's records in `path` made, by role: one pass over the file, retried attempts included.

    Summed from each record's `meta["usage"]`, so a resumed run, a run on Ray workers and the
    episodes that failed (and were retried) are all counted.
    """
    totals: dict[str, dict[str, int]] = {}
    for _, (key, usage) in _read_lines(path, _usage_of):
        if key != run_key:
            continue
        for role, counts in usage.items():
            role_total = totals.setdefault(role, {})
            for name, n in counts.items():
                role_total[name] = role_total.get(name, 0) + n
    return totals


@dataclass
class _Claim:
    """An output file's writer lock held by `claim_output`, lent to one user (a log, a combine) at a time."""

    handle: Any
    in_use: bool = False


class _Lent:
    """A claimed lock lent out by `_lock`: closing it gives it back to the claim, which keeps holding it."""

    def __init__(self, claim: _Claim):
        self._claim = claim
        claim.in_use = True
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._claim.in_use = False


_claims: dict[Path, _Claim] = {}  # output files this process has claimed (`claim_output`), by resolved path


@contextmanager
def claim_output(path: str | Path) -> Iterator[Path]:
    """Hold `path`'s writer lock for the block; refuse (ConfigError naming the holder) when another writer has it.

    A caller that writes records beside the episodes file (the CLI's `run.json` and `summary.json`)
    claims it first, so a refused second writer touches none of them; a run (`arun`, `EpisodeLog`,
    `shards.combine`) inside the block uses the claim. When nothing was written to `path`, the lock
    file is removed again.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(f".{path.name}.lock")
    before = lock_path.read_bytes() if lock_path.exists() else None
    written = _stamp(path)
    handle = _flock(path)  # never lent: a second claim, even in this process, is refused
    key = path.resolve()
    _claims[key] = _Claim(handle)
    try:
        yield path
    finally:
        del _claims[key]
        if before is None and (not path.exists() or _stamp(path) == written):
            lock_path.unlink(missing_ok=True)  # nothing written: no lock file left behind (removed while held)
        elif before is not None:  # the lock file as it was (the pid in it is only read while it is held)
            handle.seek(0)
            handle.truncate()
            handle.write(before.decode("utf-8", "replace"))
            handle.flush()
        handle.close()


def _stamp(path: Path) -> tuple[int, int] | None:
    """A file's size and modification time (None when missing): whether it was written to since."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _lock(path: Path) -> Any:
    """Hold an exclusive lock on `path`'s lock file for this writer; refuse when another process holds it.

    A path this process claimed (`claim_output`) is lent from the claim, to one user at a time.
    """
    claim = _claims.get(Path(path).resolve())
    if claim is not None and not claim.in_use:
        return _Lent(claim)
    return _flock(path)


def writer_alive(path: str | Path) -> bool:
    """Whether a process holds `path`'s writer lock now (a run writing it); asked without changing a byte."""
    import fcntl

    lock_path = Path(path).with_name(f".{Path(path).name}.lock")
    try:
        handle = lock_path.open("rb")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _flock(path: Path) -> Any:
    """The lock file's handle, flock-ed for this writer alone; ConfigError naming the holder when it is taken."""
    import fcntl

    lock_path = path.with_name(f".{path.name}.lock")
    handle = lock_path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"{path} is being written by another ifgym run ({owner}); wait for it to finish, or give this run its "
            "own output (shards: one file each)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


def _drop_partial_tail(path: Path) -> None:
    """End the file on a fresh line: a last line that lacks only its newline gets it, a cut-off one goes."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        if _complete_tail(f):
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            return
        # find the last newline from the end, a block at a time (the file can be large)
        end = f.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            cut = block.rfind(b"\n")
            if cut >= 0:
                f.truncate(pos + cut + 1)
                return
        f.truncate(0)


def _complete_tail(f: Any) -> bool:
    """Whether the last line of the open file `f` (which lacks its newline) is a whole episode record."""
    end = f.seek(0, os.SEEK_END)
    pos = end
    tail = b""
    while pos > 0 and b"\n" not in tail:
        step = min(65536, pos)
        pos -= step
        f.seek(pos)
        tail = f.read(step) + tail
    line = tail.rpartition(b"\n")[2]
    try:
        _line_head(read_json_line(line))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return False
    return True


# Lines an EpisodeLog lets wait for its thread: past this, `append` waits for the disk (episodes that finish
# faster than the disk syncs them, e.g. a scripted policy's, would otherwise pile up in memory: 1,575 lines
# waiting, 86 MB peak for 2,000 ten-turn episodes against 64 MB with a hundred or so)
PENDING_LINES = 64


_checked: dict[Path, tuple[Any, dict[tuple[str, str], LineRef]]] = {}  # the last file checked, as it was read


def check_episodes_file(path: str | Path, run_key: str) -> dict[tuple[str, str], LineRef]:
    """Refuse an episodes file that is not this run's: a line that is no episode record, or another run key.

    Reads the file only: a refused run leaves it as it was (DataFormatError or ConfigError, naming the fix).
    Returns its `latest_lines`; asked again for the file unchanged (size and time), it does not read it again.
    """
    path = Path(path)
    stamp = _stamp(path)
    kept = _checked.get(path)
    by_id = kept[1] if kept is not None and stamp is not None and kept[0] == stamp else latest_lines(path)
    _checked.clear()
    _checked[path] = (stamp, by_id)
    other = {line.run_key for line in by_id.values()} - {run_key}
    if other:
        raise ConfigError(
            f"{path} holds episodes of another configuration (run_key {sorted(map(str, other))}, this "
            f"run is {run_key}); write to a new output path or delete that file"
        )
    return by_id


class EpisodeLog:
    """Append-only JSONL of finished and failed episodes for one run (identified by `run_key`).

    One writer at a time: the log holds a lock on the file until `close()`; a second writer (another
    process, or another log in this one) is refused with a ConfigError. Lines are written and synced
    to disk (fsync) in order by the log's own thread, so the event loop never waits on the disk (an
    fsync took 7 to 12 ms here, with every episode in flight stalled behind it). The thread keeps the
    file open and writes every line waiting for it at once, then syncs them with one fsync (a group
    commit); a file removed or replaced under it is a failed write. `close()` waits for every line, and
    a write that failed is raised by the next `append` or by `close()`; nothing is written after it, so
    a line it tore is the file's last. At most `PENDING_LINES` lines wait for the thread: an `append`
    past that waits for the disk.
    """

    def __init__(self, path: str | Path, run_key: str):
        self.path = Path(path)
        self.run_key = run_key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.path)
        self._thread: threading.Thread | None = None
        self._file: Any = None  # opened by the thread at its first write, kept open until `close()`
        self._cond = threading.Condition()  # guards the fields below, shared with the thread
        self._lines: list[bytes] = []  # appended, not yet taken by the thread
        self._unwritten = 0  # appended, not yet written (those the thread is writing included)
        self._closing = False
        self._error: BaseException | None = None  # a failed write, until `append` or `close` raises it
        self._write_failed = False
        try:
            self._load(run_key)
        except BaseException:
            self.close()
            raise
        self._end = self.path.stat().st_size if self.path.exists() else 0  # where the next line starts
        self._thread = threading.Thread(target=self._write_lines, name="ifgym-episode-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # a log never closed still writes its lines before the interpreter exits

    def close(self) -> None:
        """Wait for the lines still being written, then release the file for other writers."""
        thread, self._thread = self._thread, None
        try:
            if thread is not None:
                atexit.unregister(self.close)
                with self._cond:
                    self._closing = True
                    self._cond.notify()
                thread.join()
                self._raise_failed_write()
        finally:
            if not self._lock.closed:
                self._lock.close()

    def _raise_failed_write(self) -> None:
        """Raise the error of a write that failed, once."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _write_lines(self) -> None:
        """The log's thread: write every waiting line at once, sync them, until `close()` (then close the file)."""
        try:
            while True:
                with self._cond:
                    while not self._lines and not self._closing:
                        self._cond.wait()
                    lines, self._lines = self._lines, []
                if not lines:  # closing, and every line written
                    return
                error = None
                if not self._write_failed:  # nothing after a line that failed: a torn line may only be the file's last
                    try:
                        self._write(lines)
                    except BaseException as exc:
                        self._write_failed = True
                        error = exc
                with self._cond:
                    self._unwritten -= len(lines)
                    if error is not None:
                        self._error = error
                    self._cond.notify_all()
        finally:
            if self._file is not None:
                self._file.close()

    def _write(self, lines: list[bytes]) -> None:
        """Write `lines` at the end of the file and fsync it; a file removed or replaced since it was opened fails."""
        if self._file is None:
            self._file = self.path.open("ab", buffering=0)  # a folder removed under the run fails here
        data = memoryview(b"".join(lines))
        while data:
            data = data[self._file.write(data) :]
        os.fsync(self._file.fileno())
        opened = os.fstat(self._file.fileno())
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            raise FileNotFoundError(
                errno.ENOENT,
                "the episodes file was removed or replaced during the run; the lines written since are not in it",
                str(self.path),
            )

    def _load(self, run_key: str) -> None:
        by_id = check_episodes_file(self.path, run_key)  # before the file is touched: a refused run changes nothing
        _drop_partial_tail(self.path)  # only a last line: a cut-off one is not in `by_id`, a whole one keeps its offset
        # one run: one line per seed, its last; a finished episode's line is kept as its offset only
        self.latest: dict[int | None, LineRef] = {line.seed: line for line in by_id.values()}

    @property
    def done(self) -> StoredEpisodes:
        """The finished episodes in the file, one per seed (read from the file as they are used)."""
        return StoredEpisodes(self.path, [line.offset for line in self.latest.values() if line.failed is None])

    def append(self, record: Record) -> int:
        """Append `record` as one line (written and synced by the log's thread); returns the offset it starts at."""
        if self._thread is None:
            raise RuntimeError(f"the episode log {self.path} is closed")
        self._raise_failed_write()
        line = (redact_json_line(record.to_jsonl()) + "\n").encode("utf-8")
        with self._cond:
            # the only writer (the lock), in order (one thread): the line starts where the last one ended
            offset, self._end = self._end, self._end + len(line)
            self._lines.append(line)
            self._unwritten += 1
            self._cond.notify()
            while self._unwritten > PENDING_LINES:  # the disk is behind: wait for it rather than hold every line
                self._cond.wait()
        failed = record if isinstance(record, FailedEpisode) else None
        self.latest.pop(record.seed, None)
        self.latest[record.seed] = LineRef(offset, record.seed, record.meta.get("run_key"), failed)
        return offset


@dataclass
class RunResult:
    """What a run produced: its finished episodes and failed episodes, by seed (those of the file included).

    With an output file, `episodes` is a `StoredEpisodes`: a sequence that reads each episode from
    the file when it is used, so a run never holds its episodes; without one it is a list.
    """

    episodes: Sequence[Episode]
    failed: list[FailedEpisode]
    worker_deaths: int = 0  # Ray executor: workers that died (their episodes were redone)

    def __repr__(self) -> str:
        # counts, not every episode: asyncio.run formats the repr of its main task's result when it
        # restores the SIGINT handler (for 256 four-turn episodes in a list, 0.3 s of CPU per run)
        counts = f"{len(self.episodes)} episodes, {len(self.failed)} failed"
        return f"RunResult({counts}, worker_deaths={self.worker_deaths})"

    @property
    def failures(self) -> dict[str, Any]:
        """Failed episodes counted by error type and HTTP status, with example messages (the summary's `failures`)."""
        return failure_summary(self.failed, len(self.episodes) + len(self.failed))


# Distinct example messages kept per error type in a run's failure summary.
EXAMPLES_PER_TYPE = 3


def failure_summary(failed: Sequence[FailedEpisode], total: int) -> dict[str, Any]:
    """Failed episodes counted, commonest first: `{"episodes", "of", "by_type", "by_status", "examples", "seeds"}`.

    `by_type` is {error type: count}; `by_status` {HTTP status (a string, as JSON keys are): count} over
    the failures a server answered with a status; `examples` {error type: up to three distinct messages}.
    """
    counts = Counter(f.error["type"] for f in failed)
    statuses = Counter(str(f.error["status"]) for f in failed if f.error.get("status") is not None)
    examples: dict[str, list[str]] = {}
    for f in failed:
        kept = examples.setdefault(f.error["type"], [])
        if len(kept) < EXAMPLES_PER_TYPE and f.error["message"] not in kept:
            kept.append(f.error["message"])
    return {
        "episodes": len(failed),
        "of": total,
        "by_type": dict(counts.most_common()),
        "by_status": dict(statuses.most_common()),
        "examples": {t: examples[t] for t, _ in counts.most_common()},
        "seeds": sorted(f.seed for f in failed if f.seed is not None),
    }


async def play(
    make_env: Callable[[], gym.Env],
    make_policy: Callable[[], Any],
    seed: int,
    *,
    run_key: str = "run",
    episode_timeout: float | None = None,
    spare_envs: list[gym.Env] | None = None,
) -> Record:
    """One seed's episode, or its FailedEpisode when anything in it raises (or it passes `episode_timeout` s).

    The record's `meta["usage"]` holds the calls, tokens and retries of every model client the
    episode used, by role (its policy's, user's and judge's). `spare_envs`: envs whose episodes
    finished; the episode takes one (its reset starts the dialogue anew, as gymnasium's envs are made to
    be used) rather than making an env, and gives its env back when it finishes. A failed episode's env
    is dropped. A new env per episode cost 0.045-0.057 ms a turn of a 4-turn EvolIF episode here (hot).
    """
    with count_episode_usage() as usage:
        record = await _play(make_env, make_policy, seed, episode_timeout, spare_envs)
    record.episode_id = f"{run_key}-seed{seed}"
    record.meta["run_key"] = run_key
    record.meta["usage"] = {role: u.to_json() for role, u in usage.items()}
    return record


async def _play(
    make_env: Callable[[], gym.Env],
    make_policy: Callable[[], Any],
    seed: int,
    episode_timeout: float | None,
    spare_envs: list[gym.Env] | None,
) -> Record:
    env = policy = None
    try:
        env = spare_envs.pop() if spare_envs else make_env()
        policy = make_policy()
        if episode_timeout is None:
            record: Record = await arollout(env, policy, seed=seed)
        else:
            deadline = asyncio.timeout(episode_timeout)  # in the episode's own task: wait_for made one more
            try:
                async with deadline:
                    record = await arollout(env, policy, seed=seed)
            except TimeoutError:
                if not deadline.expired():  # the episode's own TimeoutError, not its deadline
                    raise
                raise EpisodeTimeoutError(
                    f"the episode did not finish within episode_timeout={episode_timeout}s; raise episode_timeout "
                    "or check the model servers' load"
                ) from None
    except Exception as exc:  # one episode's failure is recorded, never the run's
        record = FailedEpisode.from_exception(exc, env=env, policy=policy, seed=seed)
    else:  # the run's file names each episode's task (`ifgym.core.tasks.task_of` reads it back)
        record.meta.setdefault("task", env.unwrapped.task.name)
        if spare_envs is not None:
            spare_envs.append(env)
    return record


# the stop rule judges a share of at least this many attempted episodes (fewer when the run plays fewer)
STOP_MIN_ATTEMPTS = 20


SEED_SCAN_FACTOR = 20  # a seed filter may look at this many seeds per episode asked for (plus 100) before giving up


@dataclass(frozen=True)
class SeedSelection:
    """A run's seeds: `seeds` to play, in order, and the `skipped` ones the env's filter passed over on the way."""

    seeds: list[int]
    skipped: list[int]


def select_seeds(env: Any, first: int, count: int) -> SeedSelection:
    """The `count` seeds a run plays: `first`, `first + 1`, … that the env keeps (its `keeps_seed`, if it has one).

    The one place a run's seeds are chosen (`ifgym eval`, its shards, resumes and `ifgym merge` all call it
    with the same settings, so they agree): an env without a filter plays `first .. first + count - 1`. A
    filtered seed costs nothing (the env decides without a model call); `skipped` lists them in order.
    """
    keeps = getattr(env, "keeps_seed", None)
    if keeps is None:
        return SeedSelection(list(range(first, first + count)), [])
    seeds: list[int] = []
    skipped: list[int] = []
    seed, limit = first, first + SEED_SCAN_FACTOR * count + 100
    while len(seeds) < count:
        if seed >= limit:
            raise ConfigError(
                f"the env's seed filter kept only {len(seeds)} of the {seed - first} seeds from {first} on, "
                f"short of episodes={count}; loosen it (env.min_mean_constraints) or ask for fewer episodes"
            )
        (seeds if keeps(seed) else skipped).append(seed)
        seed += 1
    return SeedSelection(seeds, skipped)


def file_result(path: str | Path, seeds: Sequence[int]) -> tuple[RunResult, list[int]]:
    """What the episodes file `path` holds for `seeds` (each seed's last line), and the seeds it has no line for.

    The result's episodes are read from the file when used, in the order of `seeds`, as a run's are:
    a run that stopped or was interrupted is summarized from it.
    """
    latest = {line.seed: line for line in latest_lines(path).values()}
    finished = [latest[s].offset for s in seeds if s in latest and latest[s].failed is None]
    failed = [line.failed for s in seeds if s in latest and (line := latest[s]).failed is not None]
    return RunResult(StoredEpisodes(path, finished), failed), [s for s in seeds if s not in latest]


class Recorder:
    """The driver's side of a run: writes each record once, counts failures, stops when too many fail."""

    def __init__(
        self,
        seeds: Sequence[int],
        *,
        output: str | Path | None,
        run_key: str,
        retry_failed: bool,
        max_failure_rate: float,
        progress: bool,
        on_episode: Callable[[Episode], None] | None,
    ):
        if len(set(seeds)) != len(seeds):
            raise ConfigError("seeds must be distinct: each seed names one episode of the run")
        if not 0 <= max_failure_rate <= 1:
            raise ConfigError(f"max_failure_rate must be in [0, 1], got {max_failure_rate!r}")
        self.seeds = list(seeds)
        self.log = EpisodeLog(output, run_key) if output is not None else None
        wanted = set(self.seeds)
        # per seed only what the result needs: a finished episode's line offset (the Episode itself when there is
        # no log to read it back from), a failed episode's small record
        self.finished: dict[int, int | Episode] = {}
        self.failures: dict[int, FailedEpisode] = {}
        for seed, line in self.log.latest.items() if self.log else ():
            if seed in wanted:
                if line.failed is None:
                    self.finished[seed] = line.offset
                else:
                    self.failures[seed] = line.failed
        self.todo = [s for s in self.seeds if s not in self.finished and (retry_failed or s not in self.failures)]
        self._todo = set(self.todo)
        self.max_failure_rate = max_failure_rate
        # what this invocation played: the stop rule judges these, never failures in the file not yet retried
        self.attempted = 0
        self.attempt_failures: list[FailedEpisode] = []
        self.on_episode = on_episode
        self.bar = tqdm(
            total=len(self.seeds), initial=len(self.seeds) - len(self.todo), desc="episodes", disable=not progress
        )

    def failed(self) -> list[FailedEpisode]:
        return list(self.failures.values())

    def record(self, record: Record) -> None:
        """Write one record (a seed not of this run, or already finished, is refused); stop when too many failed."""
        if record.seed not in self._todo:
            raise RuntimeError(f"seed {record.seed} is not one this run plays")
        if record.seed in self.finished:
            return  # delivered twice (a redone share): the first one stands
        offset = self.log.append(record) if self.log else None
        self.attempted += 1
        if isinstance(record, FailedEpisode):
            # made in a worker (Ray) that may not know the run's credentials: its message is redacted here too
            record.error["message"] = redact(record.error["message"])
            self.failures[record.seed] = record
            self.attempt_failures.append(record)
        else:
            self.failures.pop(record.seed, None)
            self.finished[record.seed] = record if offset is None else offset
            if self.on_episode:
                self.on_episode(record)
        self.bar.update(1)
        self.check_failure_rate()

    def check_failure_rate(self) -> None:
        """Raise RunStoppedError when this run's failures exceed `max_failure_rate` while seeds are left to play.

        Judged on the episodes this invocation attempted, once `STOP_MIN_ATTEMPTS` of them (or all it
        plays, if fewer) are in; sooner when its failures already exceed that share of everything it
        plays (the run could no longer end under the limit). Failures read from the file count only
        once they are retried here, so a rerun after many failures is not stopped by them.
        """
        failed, attempted, planned = len(self.attempt_failures), self.attempted, len(self.todo)
        if not failed or attempted >= planned:  # nothing failed, or nothing is left to spare
            return
        if failed > self.max_failure_rate * planned:
            share = f"{failed} of the {planned} episodes this run plays have failed"
        elif attempted >= min(STOP_MIN_ATTEMPTS, planned) and failed > self.max_failure_rate * attempted:
            share = f"{failed} of the {attempted} episodes this run attempted failed"
        else:
            return
        summary = failure_summary(self.attempt_failures, attempted)
        commonest, count = next(iter(summary["by_type"].items()))
        raise RunStoppedError(
            f"stopped early: {share}, more than max_failure_rate={self.max_failure_rate}. Commonest error: "
            f"{commonest} ({count} episode{'' if count == 1 else 's'}): {summary['examples'][commonest][0]}. "
            "Finished and failed episodes are kept"
            + (f" in {self.log.path}; rerun into it to retry the failed ones" if self.log else "")
        )

    def result(self) -> RunResult:
        finished = [self.finished[s] for s in self.seeds if s in self.finished]
        return RunResult(
            episodes=StoredEpisodes(self.log.path, finished) if self.log else finished,  # type: ignore[arg-type]
            failed=[self.failures[s] for s in self.seeds if s in self.failures],
        )

    def close(self) -> None:
        self.bar.close()
        if self.log:
            self.log.close()


def check_run_settings(concurrency: int, episode_timeout: float | None) -> None:
    """Refuse a run's concurrency or per-episode deadline that no executor can honour, before anything starts."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1 (a whole number of episodes in flight), got {concurrency!r}")
    if episode_timeout is not None and not episode_timeout > 0:
        raise ConfigError(f"episode_timeout must be > 0 seconds (or null for none), got {episode_timeout!r}")


async def arun(
    make_env: Callable[[], gym.Env],
    make_policy: Callable[[], Any],
    seeds: Sequence[int],
    *,
    output: str | Path | None = None,
    run_key: str = "run",
    concurrency: int = 4,
    progress: bool = True,
    on_episode: Callable[[Episode], None] | None = None,
    retry_failed: bool = True,
    max_failure_rate: float = 0.2,
    episode_timeout: float | None = None,
) -> RunResult:
    """Run one episode per seed, `concurrency` at a time; returns the run's finished and failed episodes, by seed.

    With `output`, each episode is appended as it finishes or fails; seeds already finished in the
    file (same `run_key`) are skipped, and failed ones are run again when `retry_failed`. Raises
    RunStoppedError once more than `max_failure_rate` of the episodes it attempted have failed (see
    `Recorder.check_failure_rate`); what it wrote stays in the file (`file_result` reads it back).
    """
    check_run_settings(concurrency, episode_timeout)
    recorder = Recorder(
        seeds,
        output=output,
        run_key=run_key,
        retry_failed=retry_failed,
        max_failure_rate=max_failure_rate,
        progress=progress,
        on_episode=on_episode,
    )
    queue: asyncio.Queue[int] = asyncio.Queue()
    for s in recorder.todo:
        queue.put_nowait(s)

    async def worker() -> None:
        spare: list[gym.Env] = []  # the env of the worker's last finished episode plays its next
        while not queue.empty():
            seed = queue.get_nowait()
            record = await play(
                make_env, make_policy, seed, run_key=run_key, episode_timeout=episode_timeout, spare_envs=spare
            )
            recorder.record(record)

    try:  # a stop (or an interrupt) cancels the episodes in flight
        await gather_or_cancel(worker() for _ in range(min(concurrency, len(recorder.todo))))
    finally:
        recorder.close()
    return recorder.result()


def run(
    make_env: Callable[[], gym.Env], make_policy: Callable[[], Any], seeds: Iterable[int], **kwargs: Any
) -> RunResult:
    """Blocking wrapper around `arun` for scripts and the CLI (on uvloop's loop where installed: `run_async`)."""
    return run_async(arun(make_env, make_policy, list(seeds), **kwargs))
