import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message

pytestmark = pytest.mark.looptime


async def test_schedule_on_partitioned_session_queue(ns, broker):
    await ns.create_queue("sp", enable_partitioning=True, requires_session=True)
    at = datetime.fromtimestamp(broker.clock.now(), UTC) + timedelta(seconds=10)
    async with ns.sender("sp") as s:
        seqs = await s.schedule(
            [Message(f"{i}".encode(), session_id=f"s{i}") for i in range(20)], at
        )
        await s.cancel_scheduled(seqs[:10])
        await s.send(Message(b"direct", session_id="s15"))
    p = await ns.runtime_properties("sp")
    assert (p.scheduled_message_count, p.active_message_count) == (10, 1)
    await asyncio.sleep(20)
    p = await ns.runtime_properties("sp")
    assert (p.scheduled_message_count, p.active_message_count) == (0, 11)
    for i in range(10, 20):
        async with ns.receiver("sp", session_id=f"s{i}") as r:
            got = await r.receive(max_messages=5, max_wait=0)
            assert [m.body for m in got if m.body != b"direct"] == [f"{i}".encode()]
            assert all(m.session_id == f"s{i}" for m in got)
            await r.complete(got)
    assert broker._entities["sp"].bytes == 0
    assert broker._entities["sp"].sessions == {}


async def test_schedule_on_partitioned_topic_session_sub(ns, broker):
    await ns.create_topic("t", enable_partitioning=True)
    await ns.create_subscription("t", "s", requires_session=True)
    await ns.create_subscription("t", "plain")
    at = datetime.fromtimestamp(broker.clock.now(), UTC) + timedelta(seconds=10)
    async with ns.sender("t") as s:
        await s.schedule([Message(b"x", session_id="a")], at)
    await asyncio.sleep(20)
    async with ns.receiver("t/subscriptions/s", session_id="a") as r:
        got = await r.receive(max_wait=0)
        assert len(got) == 1
        await r.complete(got)
