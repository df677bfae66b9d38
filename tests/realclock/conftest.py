"""The real-clock suite (issue 33): the official Python SDK, sync and aio, against one
long-running ``aiosb serve`` process on the wall clock, with nothing fast-forwarded.

A fast-forwarded clock cannot show what only real time shows: the SDK times its lock
renewals and its waits by ``time.time()``, the server by its loop. Lock durations are
short (:data:`LOCK`, the least Service Bus allows) so that holding a lock for more than
two of them takes seconds.

After every test, :func:`server_clock_lead` checks the server's clock from outside: a
message sent is stamped (its enqueued time, by the server's clock) no later than the
test's own wall clock once the send has returned. The server's
clock, once ahead, stays ahead, so a scenario that moved it fails its own check.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import aiosb
from aiosb.server.process import ServerProcess

pytest.importorskip("azure.servicebus")

#: seconds: the lock duration of the suite's entities (Service Bus's least).
LOCK = 5.0
#: seconds: how far a stamp may read past the wall clock: the AMQP timestamp's
#: millisecond, and the two processes' reads of one system clock.
SKEW = 0.005
NAMESPACE = "sbemulatorns"

_names = itertools.count(1)


@pytest.fixture(scope="package")
def server() -> Iterator[ServerProcess]:
    """One ``aiosb serve`` for the whole suite, as a team's shared test server is."""
    with ServerProcess() as running:
        yield running


@pytest.fixture
def connection(server: ServerProcess) -> str:
    return server.amqp_connection_string


async def create_queue(server: ServerProcess, **properties: Any) -> str:
    """A new queue on the server (through aiosb over HTTP), its lock :data:`LOCK`."""
    name = f"rc{next(_names)}"
    properties.setdefault("lock_duration", timedelta(seconds=LOCK))
    async with aiosb.connect(f"{server.url}/{NAMESPACE}") as ns:
        await ns.create_queue(name, **properties)
    return name


def create_queue_sync(server: ServerProcess, **properties: Any) -> str:
    return asyncio.run(create_queue(server, **properties))


async def server_clock_lead(server: ServerProcess) -> float:
    """How far the server's clock read ahead of the wall clock: a message sent (over
    HTTP, the cheapest way in) is stamped with the server's time on arrival, which
    is no later than the wall clock once the send has returned."""
    async with aiosb.connect(f"{server.url}/{NAMESPACE}") as ns:
        if not await ns.queue_exists("clockprobe"):
            await ns.create_queue("clockprobe")
        async with ns.sender("clockprobe") as sender:
            await sender.send(aiosb.Message(b"what time is it"))
            sent = time.time()
        async with ns.receiver("clockprobe", mode="receive_and_delete") as receiver:
            (probe,) = await receiver.receive(max_messages=1, max_wait=10)
    return probe.enqueued_time.timestamp() - sent


@pytest.fixture(autouse=True)
def _clock_checked_after(server: ServerProcess) -> Iterator[None]:
    """After every test: the server's clock has not run ahead of real time."""
    yield
    lead = asyncio.run(server_clock_lead(server))
    assert lead <= SKEW, f"the server's clock reads {lead:.3f} s ahead of the wall clock"
