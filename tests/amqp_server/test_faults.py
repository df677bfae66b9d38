"""An injected fault reaches the official SDK as an error it retries (#15): a transient
fault and an outage of the entity (``unavailable``) fail the SDK's first attempt; the
SDK, with its own retries on, tries again and succeeds once the fault heals. With
retries off it raises the retryable class: ServiceBusServerBusyError for a transient
fault, MessagingEntityDisabledError for an outage."""

from __future__ import annotations

import asyncio

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    MessagingEntityDisabledError,
    ServiceBusServerBusyError,
)

from aiosb import emulator

from .conftest import NAMESPACE, drain

RAISED = {"transient": ServiceBusServerBusyError, "unavailable": MessagingEntityDisabledError}


@pytest.mark.parametrize("kind", ["transient", "unavailable"])
async def test_a_fault_is_raised_as_a_retryable_error(server, kind):
    faults = emulator.namespace(NAMESPACE).faults
    async with ServiceBusClient.from_connection_string(
        server.connection_string(), retry_total=0
    ) as client, client.get_queue_sender("q1") as sender:
        with faults.fail("q1", kind=kind, operations=["send"]):
            with pytest.raises(RAISED[kind]) as info:
                await sender.send_messages(ServiceBusMessage(b"no"))
    assert info.value._retryable  # what the SDK's own retry loop reads
    assert await drain("q1", peek=True) == []


@pytest.mark.parametrize("kind", ["transient", "unavailable"])
async def test_the_sdk_retries_a_fault_until_it_heals(server, kind):
    faults = emulator.namespace(NAMESPACE).faults
    async with ServiceBusClient.from_connection_string(
        server.connection_string(), retry_total=5, retry_backoff_factor=0.2
    ) as client, client.get_queue_sender("q1") as sender:
        fault = faults.fail("q1", kind=kind, operations=["send"])
        asyncio.get_running_loop().call_later(0.3, fault.heal)
        await sender.send_messages(ServiceBusMessage(b"yes"))
    [got] = await drain("q1")
    assert got.body == b"yes"


async def test_a_send_given_up_on_is_dropped_not_done_after_its_failure(server):
    """PN-6 / R-1 over AMQP: when aiosb's operation timeout gives up on a send, its
    transport closes the link and the server drops the transfer it had not done, so a
    send reported failed (and sent again, or to a backlog queue) never lands later as
    a duplicate; the next send opens a new link and goes through. (The server serves
    each link's transfers in a task of their own, which the detach cancels; it used to
    serve them inline, so a hung send stalled its whole connection too. That part has
    no test through the SDK: its connection sharing, the one way to put two senders on
    one connection, fails in both the sync and the aio client.)"""
    import aiosb
    from aiosb import errors
    from aiosb.transport.amqp import AmqpTransport

    faults = emulator.namespace(NAMESPACE).faults
    url = server.connection_string()
    async with aiosb.Namespace(AmqpTransport.from_url(url), url=url, operation_timeout=1) as ns:
        sender = ns.sender("q1")
        await sender.send(aiosb.Message(b"first"))  # the link is open
        fault = faults.fail("q1", kind="timeout", operations=["send"])
        with pytest.raises(errors.OperationTimeout):
            await sender.send(aiosb.Message(b"given up"))
        await asyncio.sleep(0.5)  # the fault heals after the sender gave up
        fault.heal()
        await asyncio.sleep(0.5)  # time for a transfer still held to be done, if it were
        await sender.send(aiosb.Message(b"after"))
    assert [m.body for m in await drain("q1")] == [b"first", b"after"]
