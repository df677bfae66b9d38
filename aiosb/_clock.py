"""UTC time derived from the event loop clock.

Everything in aiosb that keeps time reads the running loop's clock, so that a test can
fast-forward it (``looptime``) through minutes of TTLs and lock durations in
milliseconds. Wall-clock UTC is derived from it: an anchor taken when the clock first
sees a loop, plus the loop time elapsed since. One clock serves the whole process, so
the emulator and the pairing runtime on one loop read the very same instant.
"""

from __future__ import annotations

import asyncio
import time
import weakref

__all__ = ["CLOCK", "LoopClock"]


class LoopClock:
    """UTC epoch seconds that follow the running loop's clock and never go backwards.

    A loop gets its anchor the first time the clock reads it. When a loop's own time
    jumps backwards (``looptime`` resets a loop to 0 when a test starts), UTC goes on
    from the last value given, so stored instants stay ordered.
    """

    def __init__(self) -> None:
        self._offsets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = (
            weakref.WeakKeyDictionary()
        )
        self._last = 0.0

    def now(self) -> float:
        """UTC epoch seconds now, by the running loop's clock."""
        loop = asyncio.get_running_loop()
        offset = self._offsets.get(loop)
        if offset is None:
            offset = self._offsets[loop] = max(time.time(), self._last) - loop.time()
        value = loop.time() + offset
        if value < self._last:
            self._offsets[loop] = offset + self._last - value
            value = self._last
        self._last = value
        return value

    def advance_to(self, utc: float) -> None:
        """Never read earlier than ``utc`` again (a timer fired at its deadline)."""
        if utc > self._last:
            self._last = utc

    def loop_time(self, utc: float) -> float:
        """The running loop's time at which the clock will read ``utc``."""
        loop = asyncio.get_running_loop()
        offset = self._offsets.get(loop)
        if offset is None:
            self.now()
            offset = self._offsets[loop]
        return utc - offset

    def reset(self) -> None:
        """Forget every anchor (between tests, with the emulator's reset)."""
        self._offsets.clear()
        self._last = 0.0


#: The process-wide clock.
CLOCK = LoopClock()
