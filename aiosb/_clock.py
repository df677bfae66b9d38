"""UTC time derived from the event loop clock.

Everything in aiosb that keeps time reads the running loop's clock, so that a test can
fast-forward it (``looptime``) through minutes of TTLs and lock durations in
milliseconds. Wall-clock UTC is derived from it: an anchor taken when a clock first sees
a loop, plus the loop time elapsed since.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["LoopClock"]


class LoopClock:
    """UTC epoch seconds that follow the running loop's clock and never go backwards.

    A clock re-anchors when it is first used on another loop, and when the loop's own
    time jumps backwards (``looptime`` resets a loop to 0 when a test starts): UTC then
    goes on from the last value it gave, so stored instants stay ordered.
    """

    __slots__ = ("_last", "_loop", "_offset")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._offset = 0.0
        self._last = 0.0

    def now(self) -> float:
        """UTC epoch seconds now, by the running loop's clock."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._offset = max(time.time(), self._last) - loop.time()
        value = loop.time() + self._offset
        if value < self._last:
            self._offset += self._last - value
            value = self._last
        self._last = value
        return value

    def advance_to(self, utc: float) -> None:
        """Never read earlier than ``utc`` again (a timer fired at its deadline)."""
        if utc > self._last:
            self._last = utc

    def loop_time(self, utc: float) -> float:
        """The loop time at which the clock will read ``utc`` (for ``loop.call_at``)."""
        return utc - self._offset
