"""E: a scheduled message on a topic keeps the topic's sequence number in each
subscription (keep_seq), which the subscription's own counter hands out too."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message

pytestmark = pytest.mark.looptime


@pytest.mark.parametrize("partitioned", [False, True])
async def test_scheduled_topic_message_collides_with_subscription_seq(ns, broker, partitioned):
    await ns.create_topic("t", enable_partitioning=partitioned)
    await ns.create_subscription("t", "s")
    async with ns.sender("t") as snd:
        now = datetime.fromtimestamp(broker.clock.now(), UTC)
        await snd.schedule(Message(b"scheduled", partition_key="k"), now + timedelta(seconds=5))
        # the topic's scheduled message took the topic's seq 1; the subscription's own
        # counter still starts at 1
        await snd.send(Message(b"direct", partition_key="k"))
    await asyncio.sleep(10)
    async with ns.receiver("t/subscriptions/s") as r:
        got = await r.receive(max_messages=10, max_wait=0)
        bodies = sorted(m.body for m in got)
        seqs = [m.sequence_number for m in got]
        assert bodies == [b"direct", b"scheduled"], (bodies, seqs)
        assert len(set(seqs)) == 2, seqs
