"""A: receive_deferred across a fragment 'timeout' fault uses the `now` from before the
wait: locks handed out already expired (or a session lock lost during the wait)."""

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message, errors
from aiosb.emulator import FRAGMENT_SHIFT

pytestmark = pytest.mark.looptime


async def test_deferred_after_timeout_fault_gets_expired_lock(ns, broker):
    await ns.create_queue("p", enable_partitioning=True, lock_duration=timedelta(seconds=5))
    async with ns.sender("p") as s:
        await s.send(Message(b"x", partition_key="k"))
    async with ns.receiver("p") as r:
        (m,) = await r.receive(max_wait=0)
        await r.defer(m)
        frag = m.sequence_number >> FRAGMENT_SHIFT
        fault = broker.faults.fail_fragment("p", frag, kind="timeout", operations=["receive"])
        loop = asyncio.get_running_loop()
        loop.call_later(8, fault.heal)  # healed after more than the lock duration
        (d,) = await r.receive_deferred(m.sequence_number)
        now = broker.clock.now()
        # the fresh lock should run lock_duration from now
        assert d.locked_until_timestamp > now, (d.locked_until_timestamp, now)
        await r.complete(d)  # MessageLockLost today


async def test_session_deferred_after_timeout_fault_session_lock_lost(ns, broker):
    await ns.create_queue(
        "sp", enable_partitioning=True, requires_session=True, lock_duration=timedelta(seconds=5)
    )
    async with ns.sender("sp") as s:
        await s.send(Message(b"x", session_id="s"))
    async with ns.receiver("sp", session_id="s") as r:
        (m,) = await r.receive(max_wait=0)
        await r.defer(m)
        frag = m.sequence_number >> FRAGMENT_SHIFT
        fault = broker.faults.fail_fragment("sp", frag, kind="timeout", operations=["receive"])
        asyncio.get_running_loop().call_later(8, fault.heal)
        # the session lock expired during the wait (5 s): this must be SessionLockLost,
        # not a message handed out under a lock nobody holds
        with pytest.raises(errors.SessionLockLost):
            await r.receive_deferred(m.sequence_number)
    # and the message must still be deferred (not stuck locked / delivery count bumped)
    props = await ns.runtime_properties("sp")
    assert props.deferred_message_count == 1
