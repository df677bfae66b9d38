"""UTC time derived from the event loop clock.

Everything in aiosb that keeps time reads the running loop's clock, so that a test can
fast-forward it (``looptime``) through minutes of TTLs and lock durations in
milliseconds. Wall-clock UTC is derived from it: an anchor taken when the clock first
sees a loop, plus the loop time elapsed since. One clock serves the whole process, so
the emulator and the pairing runtime on one loop read the very same instant.

The clock never reads ahead of the loop's time (issue 33): nothing moves it but the
loop, so a timer that fires reads the time the loop says, and whatever it ends (a lock,
a schedule) is rechecked against that, never taken as the time.

:func:`within` is the one deadline for an operation, the client's and the server's:
the operation runs at once, and a timer is armed only if it waits.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Generic, TypeVar, cast

__all__ = ["CLOCK", "TIMER_RESOLUTION", "LoopClock", "within"]

T = TypeVar("T")

#: Seconds: the coarsest resolution of a loop's timers (uvloop keeps whole milliseconds,
#: and runs a timer due in under half of one at once). A timer armed again after firing
#: before its time waits at least this, or it would come round again and again.
TIMER_RESOLUTION = 0.001


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
        #: Each loop's offset as first taken (:meth:`lead` measures from it).
        self._anchors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = (
            weakref.WeakKeyDictionary()
        )
        self._last = 0.0
        #: The loop last read and its offset, as one tuple (read and replaced whole, so
        #: that a loop in another thread never pairs its loop with this one's offset):
        #: nearly every read is of the same loop, and a weak dictionary's lookup costs
        #: more than the rest of a read (#16).
        self._cached: tuple[weakref.ref[asyncio.AbstractEventLoop], float] | None = None

    def now(self) -> float:
        """UTC epoch seconds now, by the running loop's clock."""
        loop = asyncio.get_running_loop()
        cached = self._cached
        if cached is not None and cached[0]() is loop:
            offset = cached[1]
        else:
            known = self._offsets.get(loop)
            if known is None:
                known = self._offsets[loop] = self._anchors[loop] = self._anchor(loop)
            offset = known
            self._cached = (weakref.ref(loop), offset)
        value = loop.time() + offset
        if value < self._last:
            offset = self._offsets[loop] = offset + self._last - value
            self._cached = (weakref.ref(loop), offset)
            value = self._last
        self._last = value
        return value

    def _anchor(self, loop: asyncio.AbstractEventLoop) -> float:
        """The offset from ``loop``'s time to UTC. A loop whose time is the monotonic
        clock's, or lags it (uvloop's is the time its iteration began, in whole
        milliseconds), is anchored to the monotonic clock itself: anchored to its own
        lagging time, the clock would read ahead of real time by that lag for good."""
        at = loop.time()  # first: a loop reading monotonic() reads it no later than we do
        wall, monotonic = time.time(), time.monotonic()
        base = monotonic if 0.0 <= monotonic - at < 1.0 else at
        return max(wall, self._last) - base

    def latest(self) -> float:
        """The latest instant the clock has given, on any loop (0.0 if none since
        :meth:`reset`): on real loops, never later than real time."""
        return self._last

    def lead(self) -> float:
        """How far the clock reads ahead of the running loop's own time, from where it
        was anchored: 0.0 unless that loop's time went backwards, or another loop's
        read a later instant (the clock never goes back). Nothing else moves it."""
        loop = asyncio.get_running_loop()
        value = self.now()
        return value - loop.time() - self._anchors[loop]

    def loop_time(self, utc: float) -> float:
        """The running loop's time from which on the clock reads ``utc`` or later (not
        a float's rounding before it: a timer armed for it finds its time come)."""
        loop = asyncio.get_running_loop()
        offset = self._offsets.get(loop)
        if offset is None:
            self.now()
            offset = self._offsets[loop]
        at = utc - offset
        while at + offset < utc:  # a step each moves both sums: at most a few
            at += max(math.ulp(utc), math.ulp(at))
        return at

    def reset(self) -> None:
        """Forget every anchor (between tests, with the emulator's reset)."""
        self._offsets.clear()
        self._anchors.clear()
        self._last = 0.0
        self._cached = None


#: The process-wide clock.
CLOCK = LoopClock()


async def within(deadline: float | None, work: Awaitable[T]) -> T:
    """``await work`` under a deadline (loop time; ``None``: none), as
    ``async with asyncio.timeout_at(deadline): return await work`` does, with one
    difference: the work runs at once up to its first wait, and the timer is armed only
    if it waits. Most operations on an emulator (a send, a settlement, a receive that
    finds messages) never wait, and arming and cancelling a timer costs more than many
    of them (#16: S-3, S-7). An operation that waits goes on under the timer, with
    cancellation thrown into it as ``await`` would.

    Raises:
        TimeoutError: The deadline came while the work waited.
    """
    if deadline is None:
        return await work
    if not isinstance(work, Coroutine):  # a future, or another awaitable: as it is
        async with asyncio.timeout_at(deadline):
            return await work
    try:
        pending = work.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    async with asyncio.timeout_at(deadline):
        return await _Resumed(work, pending)


class _Resumed(Generic[T]):
    """Awaiting it goes on with ``coro``, which ran up to its first wait (on
    ``pending``): what the awaiting task sends or throws in goes on to ``coro``, as
    ``await coro`` would have done from the start."""

    __slots__ = ("coro", "pending")

    def __init__(self, coro: Coroutine[Any, Any, T], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    def __await__(self) -> Generator[Any, None, T]:
        coro, pending = self.coro, self.pending
        while True:
            try:
                yield pending
            except BaseException as exc:  # cancellation (the timer), closing
                try:
                    pending = coro.throw(exc)
                except StopIteration as done:
                    return cast(T, done.value)
            else:
                # From here on ``yield from`` hands every resumption to ``coro`` itself,
                # in C: a network operation waits several times, and a Python step per
                # wait cost more than the timer it saves (S-3).
                return (yield from coro.__await__())
