"""The loop clock read from loops in two threads at once (the bridge's loop beside the
caller's, or a fast-forwarded test loop beside a real one): each thread's reads follow
its own loop, and neither is ever given the other's offset (#16: the clock remembers
the loop it last read, and must do so as one value)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from aiosb._clock import LoopClock

SHIFT = 1e6  # a loop whose clock starts near 0 (as looptime's) beside one on monotonic()


class _ShiftedLoop(asyncio.SelectorEventLoop):
    def time(self) -> float:
        return super().time() - SHIFT


@pytest.mark.timeout(30)
def test_two_threads_reading_the_clock_never_get_each_others_offset():
    clock = LoopClock()
    bad: list[float] = []
    stop = time.monotonic() + 1.0

    async def hammer() -> None:
        while time.monotonic() < stop and not bad:
            value = clock.now()
            if abs(value - time.time()) > 100:
                bad.append(value - time.time())

    def run(loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.run_until_complete(hammer())
        finally:
            loop.close()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0001)  # switch threads often: where a torn read would show
    try:
        threads = [threading.Thread(target=run, args=(loop,))
                   for loop in (_ShiftedLoop(), asyncio.new_event_loop())]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert bad == []
