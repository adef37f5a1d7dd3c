"""The run's loop: the young-generation threshold it holds while it runs, and how it ends its tasks together."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from ifgym.llm.loop import YOUNG_GC_THRESHOLD, run_async, young_gc_threshold


@pytest.fixture(autouse=True)
def default_thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


async def threshold_inside():
    await asyncio.sleep(0)
    return gc.get_threshold()


def test_a_run_collects_the_young_generation_less_often_and_puts_the_setting_back():
    assert run_async(threshold_inside()) == (YOUNG_GC_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_the_setting_is_put_back_when_the_run_fails():
    async def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_async(fails())
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_the_process_already_has_is_kept():
    gc.set_threshold(50_000, 20, 30)
    assert run_async(threshold_inside()) == (50_000, 20, 30)
    assert gc.get_threshold() == (50_000, 20, 30)


def test_overlapping_blocks_in_threads_put_back_the_setting_from_before_the_first():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with young_gc_threshold():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with young_gc_threshold():
            second_in.set()
            first_out.wait(5)
            seen["after the first left"] = gc.get_threshold()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen["after the first left"] == (YOUNG_GC_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_gather_or_cancel_ends_the_others_when_one_fails():
    from ifgym.llm.loop import gather_or_cancel

    ended = []

    async def waits():
        try:
            await asyncio.sleep(60)
        finally:
            ended.append("waiting one")

    async def fails():
        await asyncio.sleep(0)
        raise ValueError("stop")

    async def main():
        with pytest.raises(ValueError, match="stop"):
            await gather_or_cancel([waits(), fails()])
        return ended

    assert run_async(main()) == ["waiting one"]  # ended before the gather raised, not left running
    assert run_async(gather_or_cancel(threshold_inside() for _ in range(2))) == [(YOUNG_GC_THRESHOLD, 10, 10)] * 2
