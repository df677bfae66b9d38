"""Pairing two real namespaces over AMQP: ``aiosb.connect(connection_string)`` twice.

Runs when AIOSB_TEST_CONNECTION_STRING and AIOSB_TEST_SECONDARY_CONNECTION_STRING name
two namespaces kept for tests; the queue it creates is deleted afterwards.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions

PRIMARY = os.environ.get("AIOSB_TEST_CONNECTION_STRING")
SECONDARY = os.environ.get("AIOSB_TEST_SECONDARY_CONNECTION_STRING")

pytestmark = [
    pytest.mark.azure,
    pytest.mark.skipif(
        not (PRIMARY and SECONDARY),
        reason="set AIOSB_TEST_CONNECTION_STRING and AIOSB_TEST_SECONDARY_CONNECTION_STRING "
        "to pair two real namespaces",
    ),
]


async def test_a_pair_of_real_namespaces_sends_to_the_healthy_primary():
    queue = f"aiosb-live-{uuid.uuid4().hex[:8]}"
    options = PairedNamespaceOptions(
        backlog_queue_count=1,
        failover_interval=timedelta(seconds=20),
        ping_primary_interval=timedelta(seconds=20),
    )
    async with aiosb.connect(PRIMARY) as primary, aiosb.connect(SECONDARY) as secondary:
        await primary.create_queue(queue)
        try:
            async with primary.pair(secondary, options) as paired:
                assert paired.is_available(queue)
                async with paired.sender(queue) as sender:
                    await sender.send(Message(b"hello", message_id="live-1"))
            async with primary.receiver(queue) as receiver:
                (msg,) = await receiver.receive(max_wait=timedelta(seconds=30))
                assert (msg.body, msg.message_id) == (b"hello", "live-1")
                await receiver.complete(msg)
        finally:
            await primary.delete_queue(queue)
