"""Pairing with primaries that are emulators reached over AMQP, through the official SDK:
two on one machine, paired with one secondary, keep separate backlog queues (PN-7) and
each syphon brings home only its own primary's messages (PN-17)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions, emulator

from .conftest import drain

# The official SDK times by the wall clock.
pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(60)]


async def test_two_emulator_primaries_on_one_host_keep_their_backlogs_apart():
    """PN-7, PN-13, PN-17: two ``aiosb serve`` AMQP listeners on one host, both
    ``sb://localhost:PORT``, are two primaries. Their backlog queues in the shared
    secondary are distinct, so a message one pairing parked goes home to its primary and
    the other pairing's syphon never takes it. (Both were named ``localhost`` and shared
    ``localhost/x-servicebus-transfer/{i}``; the syphon that waited first, the second
    pairing's here, took the message and sent it into the wrong primary.)"""
    pytest.importorskip("azure.servicebus")
    from aiosb.server.amqp import serve_amqp

    first_name, second_name = "names-amqp-p1", "names-amqp-p2"
    for name in (first_name, second_name):
        async with aiosb.connect(f"memory://{name}") as setup:
            await setup.create_queue("orders")
    options = PairedNamespaceOptions(
        backlog_queue_count=2,
        failover_interval=timedelta(0),
        ping_primary_interval=timedelta(seconds=1),
        syphon_retry_interval=timedelta(seconds=1),
        enable_syphon=True,
    )
    async with (
        serve_amqp(namespace=first_name) as one,
        serve_amqp(namespace=second_name) as two,
        aiosb.connect(one.connection_string(), operation_timeout=5) as p1,
        aiosb.connect(two.connection_string(), operation_timeout=5) as p2,
        aiosb.connect("memory://names-amqp-s", operation_timeout=5) as secondary,
    ):
        assert (p1.name, p2.name) == (f"localhost_{one.port}", f"localhost_{two.port}")
        # The second pairing's syphon is the first to wait on the secondary's queues.
        async with p2.pair(secondary, options) as second, p1.pair(secondary, options) as first:
            assert first.backlog_queues == [
                f"localhost_{one.port}/x-servicebus-transfer/{i}" for i in range(2)
            ]
            assert set(first.backlog_queues).isdisjoint(second.backlog_queues)
            with emulator.namespace(first_name).faults.fail("orders"):
                async with first.sender("orders") as sender:
                    await sender.send(Message("parked", message_id="m1"))
            assert first.stats.backlog_sends == 1
            async with asyncio.timeout(30):  # a ping lands, then a syphon moves it
                while first.stats.syphon_moved + second.stats.syphon_moved == 0:
                    await asyncio.sleep(0.1)
            assert (first.stats.syphon_moved, second.stats.syphon_moved) == (1, 0)
        async with (
            aiosb.connect(f"memory://{first_name}") as home,
            aiosb.connect(f"memory://{second_name}") as other,
        ):
            assert [m.message_id for m in await drain(home, "orders")] == ["m1"]
            assert await drain(other, "orders") == []
