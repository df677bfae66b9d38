"""UTC time derived from the event loop clock.

Everything in aiosb that keeps time reads the running loop's clock, so that a test can
fast-forward it (``looptime``) through minutes of TTLs and lock durations in
milliseconds. Wall-clock UTC is derived from it: an anchor taken when the clock first
sees a loop, plus the loop time elapsed since. One clock serves the whole process, so
the emulator and the pairing runtime on one loop read the very same instant.

:func:`within` is the one deadline for an operation, the client's and the server's:
the operation runs at once, and a timer is armed only if it waits.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Generic, TypeVar, cast

__all__ = ["CLOCK", "LoopClock", "within"]

T = TypeVar("T")


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
                known = self._offsets[loop] = max(time.time(), self._last) - loop.time()
            offset = known
            self._cached = (weakref.ref(loop), offset)
        value = loop.time() + offset
        if value < self._last:
            offset = self._offsets[loop] = offset + self._last - value
            self._cached = (weakref.ref(loop), offset)
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
