"""What Service Bus sends and answers over AMQP that the official SDK's own live tests
(azure-servicebus 7.15, its sdist's ``tests/``) check, each found missing or different
in aiosb serve (#47): delivery annotations, a put-token for a missing entity, a
receiver whose sessions do not match its entity's, a disposition after its link is
gone, a message with no body."""

from __future__ import annotations

import uuid

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusMessage,
    ServiceBusReceiveMode,
)
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError

from aiosb import emulator
from aiosb.message import Message

from .conftest import NAMESPACE, drain

_LOCK_TOKEN = b"x-opt-lock-token"


async def test_a_locked_delivery_names_its_lock_token_in_its_delivery_annotations(server):
    """Service Bus puts ``x-opt-lock-token`` (a uuid) in each peek-lock delivery's
    delivery annotations, the lock token the delivery tag carries too; a deferred
    message received by sequence number carries it the same way (#47; the SDK's
    test_message_backcompat_peek_lock_databody and test_queue_by_queue_client_conn_str_
    receive_handler_peeklock check it)."""
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"a"), Message(b"b")])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            got = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
            assert len(got) == 2
            for message in got:
                notes = message.raw_amqp_message.delivery_annotations
                assert notes[_LOCK_TOKEN] == message.lock_token
                assert isinstance(message.lock_token, uuid.UUID)
            await receiver.defer_message(got[0])
            await receiver.complete_message(got[1])
            [deferred] = await receiver.receive_deferred_messages([got[0].sequence_number])
            notes = deferred.raw_amqp_message.delivery_annotations
            assert notes[_LOCK_TOKEN] == deferred.lock_token
            await receiver.complete_message(deferred)
    assert await drain("q1", peek=True) == []


async def test_a_delivery_without_a_lock_has_empty_delivery_annotations(server):
    """A receive-and-delete delivery holds no lock: its delivery annotations are an
    empty map, not absent (#47; the SDK's test_message_backcompat_receive_and_delete_
    databody checks ``== {}``)."""
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"gone")])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver(
                "q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            assert got.raw_amqp_message.delivery_annotations == {}
            assert got.lock_token is None


async def test_a_senders_delivery_annotations_are_kept_beside_the_lock_token(server):
    """What a sender put in delivery annotations comes back with ``x-opt-lock-token``
    added (#47; the SDK's test_queue_message_amqp_annotated_message... reads both)."""
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        message = ServiceBusMessage("body")
        message.raw_amqp_message.delivery_annotations = {b"delivery_annotations": 3}
        async with client.get_queue_sender("q1") as sender:
            await sender.send_messages(message)
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            notes = got.raw_amqp_message.delivery_annotations
            assert notes[b"delivery_annotations"] == 3
            assert notes[_LOCK_TOKEN] == got.lock_token
            await receiver.complete_message(got)
