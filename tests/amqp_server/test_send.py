"""The official azure-servicebus SDK (aio and sync) sends over AMQP to serve_amqp, and
the broker holds every message with every field intact (#15)."""

from __future__ import annotations

import asyncio
import datetime as _dt
import uuid

import pytest
from azure.servicebus import ServiceBusClient as SyncClient
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

from aiosb import emulator
from aiosb.auth import DEV_KEY_NAME
from aiosb.message import MESSAGE_FIELDS

from .conftest import NAMESPACE, drain

AT = _dt.datetime.now(_dt.UTC).replace(microsecond=0) + _dt.timedelta(hours=1)
PROPS = {
    "text": "héllo",
    "int": -42,
    "float": 1.25,
    "yes": True,
    "id": uuid.UUID(int=7),
    "when": _dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=_dt.UTC),
    "nothing": None,
}
#: Every field of a Message, set, as the SDK names it; and what the broker must hold.
SDK_FIELDS = dict(
    message_id="mid-1", session_id="sess-1", partition_key="sess-1",
    time_to_live=_dt.timedelta(seconds=90), scheduled_enqueue_time_utc=AT,
    content_type="application/json", correlation_id="corr-1", subject="subj",
    reply_to="replies", reply_to_session_id="rsess", to="someone",
    application_properties=PROPS,
)
EXPECTED = dict(
    body=b'{"a": 1}', message_id="mid-1", session_id="sess-1", partition_key="sess-1",
    time_to_live=_dt.timedelta(seconds=90), scheduled_enqueue_time=AT,
    content_type="application/json", correlation_id="corr-1", subject="subj",
    reply_to="replies", reply_to_session_id="rsess", to="someone", application_properties=PROPS,
    amqp_extra=None,  # a message of the SDK's plain kind carries nothing more
)


def test_the_expectation_covers_every_field():
    assert set(EXPECTED) == set(MESSAGE_FIELDS)


def check_full(held):
    assert len(held) == 1
    for name, value in EXPECTED.items():
        assert getattr(held[0], name) == value, name
    assert held[0].state == "scheduled"


async def test_aio_sends_a_message_with_every_field(server):
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("sq") as sender:
            await sender.send_messages(ServiceBusMessage(b'{"a": 1}', **SDK_FIELDS))
    check_full(await drain("sq", peek=True))


def _sync_send(connection_string: str, entity: str, count: int) -> None:
    with SyncClient.from_connection_string(connection_string) as client:
        with client.get_queue_sender(entity) as sender:
            if entity == "sq":
                sender.send_messages(ServiceBusMessage(b'{"a": 1}', **SDK_FIELDS))
                return
            batch = sender.create_message_batch()
            for i in range(count):
                batch.add_message(ServiceBusMessage(f"m{i}", message_id=f"id{i}"))
            sender.send_messages(batch)


async def test_sync_sends_a_message_with_every_field_and_a_batch(server):
    await asyncio.to_thread(_sync_send, server.connection_string(), "sq", 1)
    check_full(await drain("sq", peek=True))
    await asyncio.to_thread(_sync_send, server.connection_string(), "q1", 100)
    held = await drain("q1")
    assert [m.body for m in held] == [f"m{i}".encode() for i in range(100)]
    assert [m.message_id for m in held] == [f"id{i}" for i in range(100)]


async def test_a_batch_of_100_is_one_transfer_of_100_messages(server):
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("q1") as sender:
            batch = await sender.create_message_batch()
            for i in range(100):
                batch.add_message(ServiceBusMessage(
                    f"body {i}", message_id=f"m{i}", subject=f"s{i}",
                    application_properties={"i": i},
                ))
            await sender.send_messages(batch)
            await sender.send_messages([ServiceBusMessage("x1"), ServiceBusMessage("x2")])
    held = await drain("q1")
    assert len(held) == 102
    for i, message in enumerate(held[:100]):
        assert (message.body, message.message_id, message.subject) == (
            f"body {i}".encode(), f"m{i}", f"s{i}")
        assert message.application_properties == {"i": i}
    assert [m.body for m in held[100:]] == [b"x1", b"x2"]
    assert held[0].sequence_number < held[99].sequence_number


async def test_sends_to_a_topic_reach_its_subscription(server):
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_topic_sender("t1") as sender:
            await sender.send_messages(ServiceBusMessage("to the topic", subject="t"))
            batch = await sender.create_message_batch()
            batch.add_message(ServiceBusMessage("in a batch"))
            await sender.send_messages(batch)
    held = await drain("t1/subscriptions/s1")
    assert [(m.body, m.subject) for m in held] == [(b"to the topic", "t"), (b"in a batch", None)]


async def test_the_link_advertises_the_namespace_message_size(server):
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("q1") as sender:
            batch = await sender.create_message_batch()
            assert batch.max_size_in_bytes == emulator.namespace(NAMESPACE).max_message_size
            assert sender._max_message_size_on_link == batch.max_size_in_bytes


async def test_a_message_over_the_size_limit_gets_the_sdk_size_error(server):
    limit = emulator.namespace(NAMESPACE).max_message_size
    async with ServiceBusClient.from_connection_string(
        server.connection_string(), retry_total=0
    ) as client:
        async with client.get_queue_sender("q1") as sender:
            with pytest.raises(MessageSizeExceededError):
                await sender.send_messages(ServiceBusMessage(b"x" * (limit + 1)))
            await sender.send_messages(ServiceBusMessage(b"x" * (limit // 2)))
    assert [len(m.body) for m in await drain("q1")] == [limit // 2]


async def test_a_wrong_key_is_refused_with_the_sdk_authentication_error(server):
    wrong = server.connection_string().replace("SharedAccessKey=", "SharedAccessKey=x")
    async with ServiceBusClient.from_connection_string(wrong, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            async with client.get_queue_sender("q1") as sender:
                await sender.send_messages(ServiceBusMessage("no"))
    assert await drain("q1") == []


async def test_a_key_without_send_rights_may_not_attach_a_sender(server):
    from aiosb.server.amqp.front_end import serve_amqp

    keys = {"listener": ("bGlzdGVu", frozenset({"Listen"}))}
    async with serve_amqp(namespace=NAMESPACE, keys=keys) as listen_only:
        assert "SharedAccessKeyName=listener;" in listen_only.connection_string()
        async with ServiceBusClient.from_connection_string(
            listen_only.connection_string(), retry_total=0
        ) as client:
            with pytest.raises(ServiceBusAuthorizationError) as raised:
                async with client.get_queue_sender("q1"):
                    pass  # the attach itself is refused
    assert "Send" in str(raised.value)
    assert DEV_KEY_NAME not in listen_only.connection_string()
    assert await drain("q1") == []


async def test_a_missing_entity_is_refused_at_its_token_as_service_bus_does(server):
    """Service Bus answers the put-token for an entity that does not exist with 404, which
    the Python SDK raises as its authentication error (#47); aiosb's own AMQP transport
    reads it as EntityNotFound (tests/amqp/test_errors.py)."""
    async with ServiceBusClient.from_connection_string(
        server.connection_string(), retry_total=0
    ) as client:
        with pytest.raises(ServiceBusAuthenticationError, match="client-error"):
            async with client.get_queue_sender("nosuch") as sender:
                await sender.send_messages(ServiceBusMessage("lost"))


async def test_a_sender_to_a_dead_letter_queue_is_refused(server):
    """A message cannot be sent to a dead-letter queue (it is dead-lettered from its
    entity): the attach is refused with the reason, and nothing reaches the entity."""
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        with pytest.raises(ServiceBusError, match="is a dead-letter queue"):
            async with client.get_queue_sender("q1/$DeadLetterQueue") as sender:
                await sender.send_messages(ServiceBusMessage(b"to-dlq"))
    assert await drain("q1", peek=True) == []
    assert await drain("q1/$deadletterqueue", peek=True) == []
