"""The official SDK's request/response operations against serve_amqp's ``$management``
nodes: peek, schedule and cancel, renew lock, deferred receive, settlement by lock token
after the link is gone (#15)."""

from __future__ import annotations

import datetime as _dt

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusError

from aiosb import emulator
from aiosb.message import Message
from aiosb.protocol import Settlement

from .conftest import NAMESPACE, drain


async def put(path: str, *messages: Message) -> None:
    await emulator.namespace(NAMESPACE).send(path, list(messages))


async def test_peek_browses_from_a_sequence_number(server):
    await put("q1", Message(b"a"), Message(b"b"), Message(b"c"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            first = await receiver.peek_messages(max_message_count=2)
            assert [b"".join(m.body) for m in first] == [b"a", b"b"]
            rest = await receiver.peek_messages(max_message_count=5)
            assert [b"".join(m.body) for m in rest] == [b"c"]
            again = await receiver.peek_messages(5, sequence_number=first[1].sequence_number)
            assert [m.sequence_number for m in again] == [first[1].sequence_number,
                                                           rest[0].sequence_number]
    assert len(await drain("q1", peek=True)) == 3  # nothing was locked or taken


async def test_schedule_and_cancel(server):
    at = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("q1") as sender:
            one, two = await sender.schedule_messages(
                [ServiceBusMessage(b"later", message_id="s1"), ServiceBusMessage(b"never")], at)
            await sender.cancel_scheduled_messages(two)
    [held] = await drain("q1", peek=True)
    assert (held.sequence_number, held.state, held.body, held.message_id) == (
        one, "scheduled", b"later", "s1")
    assert abs(held.scheduled_enqueue_time.timestamp() - at.timestamp()) < 0.01


async def test_renew_lock_and_defer_then_receive_deferred(server):
    await put("q1", Message(b"x"))
    ns = emulator.namespace(NAMESPACE)
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            until = await receiver.renew_message_lock(got)
            assert until.timestamp() > ns.now() + 50  # the queue's lock duration is 60 s
            await receiver.defer_message(got)
            [again] = await receiver.receive_deferred_messages([got.sequence_number])
            assert b"".join(again.body) == b"x" and again.lock_token is not None
            await ns.settle("q1", Settlement("complete", [str(again.lock_token)]))
            with pytest.raises(MessageLockLostError):  # completed behind the SDK's back
                await receiver.renew_message_lock(again)
    assert await drain("q1", peek=True) == []


async def test_receive_deferred_in_receive_and_delete_mode(server):
    await put("q1", Message(b"d"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            await receiver.defer_message(got)
        async with client.get_queue_receiver(
            "q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as taker:
            [again] = await taker.receive_deferred_messages([got.sequence_number])
            assert b"".join(again.body) == b"d"
    assert await drain("q1", peek=True) == []


async def test_an_unknown_sequence_number_is_an_error_the_sdk_raises(server):
    # retry_total=0: the SDK retries a message-not-found three times, with its back-off
    async with ServiceBusClient.from_connection_string(server.connection_string(),
                                                       retry_total=0) as client:
        async with client.get_queue_receiver("q1") as receiver:
            with pytest.raises(ServiceBusError):
                await receiver.receive_deferred_messages([12345])


async def test_the_dead_letter_queue_has_its_management_operations(server):
    """A dead-letter receiver's token is for ``{entity}/$DeadLetterQueue``, and its
    ``$management`` node is ``{entity}/$DeadLetterQueue/$management``: peek, lock
    renewal and deferred receives there are authorized by that token (they were refused
    as unauthorized: no token matched the entity's own node)."""
    await put("q1", Message(b"a"), Message(b"b"))
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            for msg in await receiver.receive_messages(max_message_count=2, max_wait_time=5):
                await receiver.dead_letter_message(msg, reason="bad")
        async with client.get_queue_receiver(
            "q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dlq:
            peeked = await dlq.peek_messages(5)
            assert sorted(b"".join(m.body) for m in peeked) == [b"a", b"b"]
            [first] = await dlq.receive_messages(max_message_count=1, max_wait_time=5)
            assert (await dlq.renew_message_lock(first)) > _dt.datetime.now(_dt.UTC)
            await dlq.defer_message(first)
            [deferred] = await dlq.receive_deferred_messages([first.sequence_number])
            await dlq.complete_message(deferred)
    assert [m.body for m in await drain("q1/$deadletterqueue", peek=True)] == (
        [b"b"] if b"".join(first.body) == b"a" else [b"a"]
    )
