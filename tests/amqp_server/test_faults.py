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
