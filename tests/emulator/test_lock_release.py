"""Issue 16: a settled message is let go of at once. The store's timeline keeps one entry
per receive for the end of its locks; once every message of that receive is settled,
the entry no longer holds them (before, they stayed until the entry came due or the
timeline was compacted at about 1,024 entries, so the garbage collector kept walking
them). Locks that are still held still end when they should."""

from __future__ import annotations

import asyncio
import datetime

import pytest

import aiosb
from aiosb import Message, emulator

pytestmark = pytest.mark.looptime


def _held_by_timeline(name: str) -> int:
    store = emulator.namespace(name)._entities["q"].fragments[0]
    return sum(len(entry[3]) for entry in store.timeline if isinstance(entry[3], list))


async def test_completed_messages_are_let_go_of_at_once():
    async with aiosb.connect("memory://release") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            for _ in range(3):
                await sender.send([Message(b"%d" % i) for i in range(100)])
                got = await receiver.receive(max_messages=100, max_wait=0)
                assert len(got) == 100 and _held_by_timeline("release") == 100
                await receiver.complete(got[:99])
                assert _held_by_timeline("release") == 100  # one is still locked
                await receiver.complete(got[99:])
                assert _held_by_timeline("release") == 0


async def test_a_lock_still_ends_after_the_rest_of_its_receive_is_settled():
    async with aiosb.connect("memory://release-lock") as ns:
        await ns.create_queue("q", lock_duration=datetime.timedelta(seconds=5))
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            await sender.send([Message(b"%d" % i) for i in range(10)])
            got = await receiver.receive(max_messages=10, max_wait=0)
            await receiver.complete(got[:5])
            await receiver.abandon(got[5])
            await receiver.defer(got[6])
            await receiver.renew_lock(got[7])
            await asyncio.sleep(20)  # every lock has ended
            again = await receiver.receive(max_messages=10, max_wait=0)
    assert sorted(m.body for m in again) == [b"5", b"7", b"8", b"9"]


async def test_a_lock_past_its_end_is_lost_even_before_the_timer_runs():
    """A settlement checks each lock's end itself: at or past it, the lock is lost even if
    the timer that ends it has not run yet, and nothing of the batch is settled."""
    async with aiosb.connect("memory://lock-end") as ns:
        await ns.create_queue("q", lock_duration=datetime.timedelta(seconds=30))
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            await sender.send([Message(b"%d" % i) for i in range(5)])
            got = await receiver.receive(max_messages=5, max_wait=0)
            broker = emulator.namespace("lock-end")
            until = got[0].locked_until_timestamp
            assert until is not None
            broker.now = lambda: until  # type: ignore[method-assign]  # the timer is late
            with pytest.raises(aiosb.errors.MessageLockLost):
                await receiver.complete(got)
            broker.now = lambda: until - 0.001  # type: ignore[method-assign]
            await receiver.complete(got)
            del broker.now
        assert (await ns.runtime_properties("q")).active_message_count == 0
