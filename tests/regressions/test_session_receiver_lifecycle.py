"""C/D: client session receiver: concurrent first use, close under faults."""

import asyncio
from datetime import timedelta

import pytest

from aiosb import NEXT_AVAILABLE_SESSION, Message

pytestmark = pytest.mark.looptime


async def test_concurrent_first_use_locks_two_sessions(ns, broker):
    await ns.create_queue("sq", requires_session=True, lock_duration=timedelta(seconds=60))
    async with ns.sender("sq") as s:
        await s.send([Message(b"a", session_id="a"), Message(b"b", session_id="b")])
    r = ns.receiver("sq", session_id=NEXT_AVAILABLE_SESSION)
    broker.faults.delay("sq", 0.1)  # any latency (an AMQP round trip) opens the race
    await asyncio.gather(r.receive(max_wait=0), r.receive(max_wait=0))
    await r.aclose()
    e = broker._entities["sq"]
    held = [sid for sid, s in e.sessions.items() if s.lock is not None]
    assert held == [], f"sessions still locked after close: {held}, listeners={e.listeners}"


async def test_concurrent_first_use_named_session_fails(ns, broker):
    await ns.create_queue("sq", requires_session=True)
    async with ns.sender("sq") as s:
        await s.send([Message(b"a", session_id="a")])
    r = ns.receiver("sq", session_id="a")
    broker.faults.delay("sq", 0.1)
    # two concurrent calls on one receiver: the second accept collides with the first
    await asyncio.gather(r.peek(), r.receive(max_wait=0))
    await r.aclose()


async def test_close_hangs_with_timeout_fault(ns, broker):
    await ns.create_queue("sq", requires_session=True)
    async with ns.sender("sq") as s:
        await s.send([Message(b"a", session_id="a")])
    r = ns.receiver("sq", session_id="a")
    await r.receive(max_wait=0)
    broker.faults.fail("sq", kind="timeout", operations=["receive"])
    # a close should not hang forever (operation_timeout is 10 s)
    async with asyncio.timeout(60):
        await r.aclose()
