"""Fixtures: an AMQP server on a free port in the test's loop, with a queue, a topic and
a subscription, and the broker behind it to check what arrived."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import aiosb
from aiosb import emulator
from aiosb.message import ReceivedMessage
from aiosb.protocol import ReceiveRequest
from aiosb.server.amqp.front_end import AmqpServer, serve_amqp

NAMESPACE = "amqpns"


@pytest.fixture
async def server() -> AsyncIterator[AmqpServer]:
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.create_queue("q1")
        await ns.create_queue("sq", requires_session=True)
        await ns.create_topic("t1")
        await ns.create_subscription("t1", "s1")
        async with serve_amqp(namespace=NAMESPACE) as running:
            yield running


async def drain(path: str, *, peek: bool = False, count: int = 1000) -> list[ReceivedMessage]:
    """Every message the broker holds on ``path`` (received and deleted, or peeked)."""
    ns = emulator.namespace(NAMESPACE)
    request = ReceiveRequest(mode="receive_and_delete", max_messages=count, max_wait=0,
                             peek=peek)
    return await ns.receive(path, request)
