"""The event loop of ifgym's blocking entry points: uvloop's where it is installed, else asyncio's own.

uvloop (the optional extra `uvloop`, which `make` installs; it does not build on Windows) runs the same
coroutines on libuv: a model call costs a little less CPU on it, a whole turn no measurable difference
(`benchmarks/runner.py --only transport`). Every
blocking entry point that awaits model calls (the runner's `run`, `run_ray` and `ifgym rescore`, the judge
audit, the TRL episodes of `integrations`) starts its loop with `run_async`, and `run.json` records which
loop a run used (`event_loop_name`). It lives beside the model client so that every room can use it.

While a loop of `run_async` runs, the young generation of the garbage collector is collected after
20,000 new objects instead of 700: a turn allocates thousands that die within it (requests, answers,
verdicts), and at 700 the collector ran about every 25 turns and cost 0.15 ms a turn with HTTP,
0.03 ms at 20,000 (`benchmarks/runner.py`'s in-process row at 64, gc callbacks timing each collection).
The setting is the process's: it is raised when the first such loop starts and put back when the last ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The new-loop function of uvloop when uvloop can be imported; None (asyncio's default loop) when not."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def event_loop_name() -> str:
    """The loop `run_async` starts in this process: "uvloop", or "asyncio" where uvloop is not installed."""
    return "asyncio" if loop_factory() is None else "uvloop"


# New objects between two collections of the young generation while a run's loop runs (Python's default: 700).
YOUNG_GC_THRESHOLD = 20_000

_gc_lock = threading.Lock()
_gc_users = 0
_gc_before: tuple[int, ...] = ()


@contextlib.contextmanager
def young_gc_threshold(threshold: int = YOUNG_GC_THRESHOLD) -> Iterator[None]:
    """Collect the young generation after `threshold` new objects (at least) inside the block.

    Blocks may nest and run in several threads at once: the first to enter raises the process's threshold,
    the last to leave puts back what it was.
    """
    global _gc_users, _gc_before
    with _gc_lock:
        if _gc_users == 0:
            _gc_before = gc.get_threshold()
            gc.set_threshold(max(threshold, _gc_before[0]), *_gc_before[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_before)


async def gather_or_cancel(aws: Iterable[Awaitable[T]]) -> list[T]:
    """`asyncio.gather` of `aws` that ends them all with it.

    When one fails (a run's stop) or the gather is cancelled (Ctrl-C), the others are cancelled and waited
    for, so none runs on past the run's end (a Ray share's stream past its instance's shutdown).
    """
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on a new loop of `loop_factory` (as `asyncio.run` does: Ctrl-C cancels it)."""
    with young_gc_threshold(), asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
