"""E: both messages of a subscription count, and their bytes go when they do."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message

pytestmark = pytest.mark.looptime


async def test_counts_and_bytes_after_collision(ns, broker):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    async with ns.sender("t") as snd:
        now = datetime.fromtimestamp(broker.clock.now(), UTC)
        await snd.schedule(Message(b"scheduled-longer-body"), now + timedelta(seconds=5))
        await snd.send(Message(b"direct"))
    await asyncio.sleep(10)
    props = await ns.runtime_properties("t/subscriptions/s")
    assert props.active_message_count == 2, props
    async with ns.receiver("t/subscriptions/s") as r:
        got = await r.receive(max_messages=10, max_wait=0)
        await r.complete(got)
    props = await ns.runtime_properties("t/subscriptions/s")
    assert props.size_in_bytes == 0, props
