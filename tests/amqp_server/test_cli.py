"""Issue 15: ``aiosb serve`` listens for AMQP 1.0 beside HTTP, prints the connection
string the official SDKs take, and both front ends share one broker (a message sent with
the official SDK over AMQP is received with aiosb over HTTP)."""

from __future__ import annotations

import pytest

import aiosb
from aiosb.emulator.process import ServerProcess

pytest.importorskip("azure.servicebus")


async def test_the_official_sdk_talks_to_aiosb_serve_by_its_connection_string():
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    with ServerProcess() as server:
        connection = server.amqp_connection_string
        assert connection.startswith("Endpoint=sb://localhost:")
        assert connection.endswith(";UseDevelopmentEmulator=true")
        async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
            await ns.create_queue("orders")
            async with ServiceBusClient.from_connection_string(connection) as client:
                async with client.get_queue_sender("orders") as sender:
                    await sender.send_messages(ServiceBusMessage(b"over amqp", subject="s"))
            async with ns.receiver("orders") as receiver:
                (got,) = await receiver.receive(max_messages=1, max_wait=5)
                await receiver.complete(got)
    assert (got.body, got.subject) == (b"over amqp", "s")
