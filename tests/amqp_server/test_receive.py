"""The official SDK receives over AMQP from serve_amqp: peek-lock deliveries whose tags
are lock tokens, each settlement (complete, abandon, dead-letter, defer) applied by the
broker and echoed, receive-and-delete, and the received fields (#15)."""

from __future__ import annotations

import asyncio
import datetime as _dt

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

import aiosb
from aiosb import emulator
from aiosb.message import Message
from aiosb.protocol import ReceiveRequest, Settlement

from .conftest import NAMESPACE, drain


async def put(path: str, *messages: Message) -> None:
    await emulator.namespace(NAMESPACE).send(path, list(messages))


async def test_peek_lock_receive_and_complete(server):
    sent = Message(b"body", message_id="m1", subject="s", content_type="text/plain",
                   correlation_id="c", to="t", reply_to="r",
                   time_to_live=_dt.timedelta(minutes=5),
                   application_properties={"k": "v", "n": 7, "f": 0.5})
    await put("q1", sent)
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_message_count=5, max_wait_time=5)
            assert b"".join(got.body) == b"body"
            assert (got.message_id, got.subject, got.content_type, got.correlation_id,
                    got.to, got.reply_to) == ("m1", "s", "text/plain", "c", "t", "r")
            assert got.time_to_live == _dt.timedelta(minutes=5)
            assert got.application_properties == {b"k": b"v", b"n": 7, b"f": 0.5}
            # The AMQP header counts the deliveries before this one: Service Bus writes
            # its count less one, which the Python SDK shows as it is (.NET adds 1).
            assert got.sequence_number >= 1 and got.delivery_count == 0
            assert got.locked_until_utc.timestamp() > emulator.namespace(NAMESPACE).now()
            await receiver.complete_message(got)
    assert await drain("q1", peek=True) == []


async def test_a_delivery_the_sdk_releases_is_not_counted(server):
    """Service Bus does not count a delivery the client releases (AMQP 1.0 3.4.4; the
    Service Bus team in Azure/amqpnetlite#342). With prefetch 0 the SDK releases each
    message that reaches its link's leftover credit between receive calls; counted as
    abandons, those deliveries dead-lettered a message the application saw once. Under
    max_delivery_count 2, one abandon and a few idle receive calls leave it where it was,
    counted once."""
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.create_queue("few", max_delivery_count=2)
    await put("few", Message(b"once"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("few") as receiver:
            [got] = await receiver.receive_messages(max_message_count=10, max_wait_time=5)
            await receiver.abandon_message(got)  # the credit left over takes it back
            for _ in range(3):
                await asyncio.sleep(0.3)
                await receiver.peek_messages(5)  # the SDK's connection runs meanwhile
            [again] = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert again.sequence_number == got.sequence_number
            assert again.delivery_count == 1  # one delivery before: the abandoned one
            await receiver.complete_message(again)
    assert await drain("few/$deadletterqueue", peek=True) == []
    assert await drain("few", peek=True) == []


async def test_released_returns_the_message_with_its_delivery_count_unchanged():
    """The broker's side of a release: the lock ends, the message is available again,
    and the delivery is not counted (an abandon counts it)."""
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.create_queue("rel")
    broker = emulator.namespace(NAMESPACE)
    await put("rel", Message(b"x"))
    for action, count in (("release", 0), ("abandon", 1)):
        [got] = await broker.receive("rel", ReceiveRequest(max_messages=1, max_wait=0))
        assert got.delivery_count == 1  # the release before this did not count
        await broker.settle("rel", Settlement(action, [got.lock_token]))
        [peeked] = await drain("rel", peek=True)
        assert (peeked.state, peeked.delivery_count) == ("active", count)


async def test_abandon_raises_the_delivery_count_and_dead_letter_moves_it(server):
    await put("q1", Message(b"again"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [first] = await receiver.receive_messages(max_wait_time=5)
            await receiver.abandon_message(first)
            [second] = await receiver.receive_messages(max_wait_time=5)
            assert second.sequence_number == first.sequence_number
            assert second.delivery_count == first.delivery_count + 1
            await receiver.dead_letter_message(second, reason="bad", error_description="why")
        async with client.get_queue_receiver(
            "q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dlq:
            [dead] = await dlq.receive_messages(max_wait_time=5)
            assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("bad", "why")
            await dlq.complete_message(dead)
    assert await drain("q1", peek=True) == []
    assert await drain("q1/$deadletterqueue", peek=True) == []


async def test_defer_leaves_the_message_deferred(server):
    await put("q1", Message(b"later"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            await receiver.defer_message(got)
    [held] = await drain("q1", peek=True)
    assert held.state == "deferred"


async def test_the_sdk_lock_token_is_the_broker_lock_token(server):
    await put("q1", Message(b"tok"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            await emulator.namespace(NAMESPACE).settle(
                "q1", Settlement("complete", [str(got.lock_token)]))
    assert await drain("q1", peek=True) == []


async def test_receive_and_delete_from_a_subscription(server):
    await put("t1", *[Message(f"m{i}") for i in range(30)])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_subscription_receiver(
            "t1", "s1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            got = []
            while len(got) < 30:
                got += await receiver.receive_messages(max_message_count=30, max_wait_time=5)
    assert [b"".join(m.body) for m in got] == [f"m{i}".encode() for i in range(30)]
    assert await drain("t1/subscriptions/s1", peek=True) == []


async def test_a_message_sent_over_amqp_comes_back_over_amqp(server):
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("q1") as sender:
            await sender.send_messages(ServiceBusMessage(
                "round", session_id=None, application_properties={"x": 1}))
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            assert (b"".join(got.body), got.application_properties) == (b"round", {b"x": 1})
            await receiver.complete_message(got)
