"""Which event loop a coroutine runs on, for the tests that check every entry point uses `ifgym.llm.loop`'s."""

from __future__ import annotations

import asyncio
import gc


def running_loop() -> tuple[str, int]:
    """(the running loop's library: "uvloop" or "asyncio", as `event_loop_name` says it; the young GC threshold)."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0], gc.get_threshold()[0]
