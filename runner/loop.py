"""The runner's event loop: uvloop's where it is installed, else asyncio's own.

uvloop (the optional extra `uvloop`, which `make` installs; it does not build on Windows) runs the same
coroutines on libuv: a model call costs a little less CPU on it, a whole turn no measurable difference
(`benchmarks/runner.py --only transport`). Every
blocking entry point of the runner (`run`, `run_ray`, `ifgym rescore`) starts its loop with `run_async`,
and `run.json` records which loop a run used (`event_loop_name`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
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


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on a new loop of `loop_factory` (as `asyncio.run` does: Ctrl-C cancels it)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
