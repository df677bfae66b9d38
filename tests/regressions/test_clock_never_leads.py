"""Issue 33: renewing a session lock while a receive waits in that session moved the
whole server's clock ahead by the renewal, for good (the wait's timer was armed for the
lock's first end and, when it fired, advanced the clock to the lock's end as renewed).
The clock must read the loop's time and nothing else: never ahead of it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message, errors
from aiosb._clock import CLOCK

pytestmark = pytest.mark.looptime

LOCK = 30.0


def lead(anchor: float) -> float:
    """How far the clock reads ahead of the loop's own time since ``anchor``."""
    return CLOCK.now() - asyncio.get_running_loop().time() - anchor


async def test_renewing_a_session_while_a_receive_waits_in_it_moves_no_clock(ns):
    await ns.create_queue("sq", requires_session=True, lock_duration=timedelta(seconds=LOCK))
    anchor = CLOCK.now() - asyncio.get_running_loop().time()
    async with ns.sender("sq") as sender:
        await sender.send(Message(b"first", session_id="s"))
    async with ns.receiver("sq", session_id="s") as receiver:
        (msg,) = await receiver.receive(max_wait=0)

        async def renew_twice() -> None:
            for _ in range(2):
                await asyncio.sleep(LOCK * 0.5)
                await receiver.session.renew_lock()

        renewing = asyncio.create_task(renew_twice())
        # Waits across the lock's first end (30 s), renewed at 15 s and 30 s: the
        # session is still held when the receive gives up empty-handed at 40 s.
        assert await receiver.receive(max_wait=40) == []
        await renewing
        assert lead(anchor) == pytest.approx(0.0, abs=1e-5)
        await receiver.complete(msg)  # still held by the wall clock: so by ours
    # A message sent now is stamped with the loop's time, not the renewal's.
    async with ns.sender("sq") as sender:
        await sender.send(Message(b"later", session_id="s"))
    async with ns.receiver("sq", session_id="s") as receiver:
        (later,) = await receiver.receive(max_wait=0)
        stamped = later.enqueued_time.timestamp()
        assert stamped - asyncio.get_running_loop().time() - anchor == pytest.approx(
            0.0, abs=1e-3
        )
        await receiver.complete(later)


async def test_a_waiting_receive_still_learns_its_session_lock_ended(ns):
    await ns.create_queue("sq", requires_session=True, lock_duration=timedelta(seconds=LOCK))
    loop = asyncio.get_running_loop()
    anchor = CLOCK.now() - loop.time()
    async with ns.receiver("sq", session_id="idle") as receiver:
        await asyncio.sleep(LOCK * 0.5)
        await receiver.session.renew_lock()  # now held until 45 s
        start = loop.time()
        with pytest.raises(errors.SessionLockLost):
            await receiver.receive(max_wait=None)
        assert loop.time() - start == pytest.approx(LOCK, abs=1e-3)
    assert lead(anchor) == pytest.approx(0.0, abs=1e-5)


@pytest.mark.timeout(20)
async def test_a_wait_shorter_than_the_loop_can_tell_ends_the_receive(ns):
    """A deadline a hair past the loop's time (max_wait=1e-300 at loop time 0.0) fires
    at once, with the loop's time still before it: the wait took that for the session
    lock's end and looked again, for ever (found by the property test). Which timer
    fired is now known from what was armed."""
    await ns.create_queue("sq", requires_session=True, lock_duration=timedelta(seconds=LOCK))
    async with ns.receiver("sq", session_id="s") as receiver:
        async with asyncio.timeout(5):
            assert await receiver.receive(max_wait=1e-300) == []
            assert await receiver.receive(max_wait=1e-9) == []
