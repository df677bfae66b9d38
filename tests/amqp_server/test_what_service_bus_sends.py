"""What Service Bus sends and answers over AMQP that the official SDK's own live tests
(azure-servicebus 7.15, its sdist's ``tests/``) check, each found missing or different
in aiosb serve (#47): delivery annotations, a put-token for a missing entity, a
receiver whose sessions do not match its entity's, a disposition after its link is
gone, a message with no body, batch delete's limits, and management replies past the
credit the SDK gives once."""

from __future__ import annotations

import asyncio
import datetime as _dt
import uuid

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError

import aiosb
from aiosb import emulator
from aiosb.message import Message
from aiosb.protocol import ReceiveRequest, Settlement
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import Described, UInt, ULong
from aiosb.server.amqp.front_end import serve_amqp

from .conftest import NAMESPACE, drain
from .test_hostile import _receiver

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


async def test_a_token_for_an_entity_that_does_not_exist_is_refused_with_404(server):
    """Service Bus answers a put-token whose audience names no entity with 404, and the
    SDK raises ServiceBusAuthenticationError from the link's open (#47; the SDK's
    test_sb_client_bad_entity and test_session_connection_failure_is_idempotent)."""
    async with ServiceBusClient.from_connection_string(
            server.connection_string(), retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            async with client.get_queue_sender("nosuch") as sender:
                await sender.send_messages(ServiceBusMessage("lost"))
        with pytest.raises(ServiceBusAuthenticationError):
            async with client.get_queue_receiver("nosuch"):
                pass
        async with client.get_queue_sender("q1") as sender:  # one that exists still is
            await sender.send_messages(ServiceBusMessage("kept"))
    assert [m.body for m in await drain("q1")] == [b"kept"]


async def test_a_receiver_whose_sessions_do_not_match_its_entity_is_refused_at_attach(server):
    """A receiver without a session on a session-enabled queue, and a session receiver
    on a queue without sessions, are refused when they attach (amqp:not-allowed), as
    Service Bus refuses them, not at their first receive (#47; the SDK's
    test_session_by_session_client_conn_str_receive_handler_peeklock and
    test_queue_by_queue_client_conn_str_receive_handler_with_stop...)."""
    await emulator.namespace(NAMESPACE).send("sq", [Message(b"s", session_id="a")])
    async with ServiceBusClient.from_connection_string(
            server.connection_string(), retry_total=0) as client:
        with pytest.raises(ServiceBusError, match="requires sessions"):
            await client.get_queue_receiver("sq", max_wait_time=5)._open_with_retry()
        with pytest.raises(ServiceBusError, match="is not session-enabled"):
            await client.get_queue_receiver("q1", session_id="a")._open_with_retry()
        with pytest.raises(ServiceBusError, match="is not session-enabled"):
            await client.get_queue_receiver(
                "q1", session_id=NEXT_AVAILABLE_SESSION)._open_with_retry()
        async with client.get_queue_receiver("sq", session_id="a") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            await receiver.complete_message(got)
        async with client.get_queue_receiver("sq", sub_queue="deadletter") as receiver:
            assert await receiver.receive_messages(max_wait_time=0.5) == []


async def test_a_disposition_for_a_detached_links_delivery_settles_nothing(server):
    """The deliveries of a link end with it (AMQP 1.0 2.6.1): a disposition the client
    sends after detaching the link is not applied, and the message stays locked, for
    its lock to end or a settlement by lock token (what the SDK falls back to: had the
    disposition been applied, that fallback met 410 for a message in fact completed)
    (#47)."""
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"kept")])
    raw = await _receiver(server, 0, credit=1)
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.TRANSFER:
            pass
    delivery_id, tag = got[1][1], got[1][2]
    raw.send(0, p.performative(p.DETACH, UInt(0), True))
    async with asyncio.timeout(10):
        while (await raw.read())[0] != p.DETACH:
            pass
    raw.send(0, p.performative(p.DISPOSITION, True, UInt(delivery_id), None, True,
                                Described(ULong(0x24), [])))  # accepted, settled
    raw.send(1, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000)))
    async with asyncio.timeout(10):  # answered once the disposition was acted on
        while (await raw.read())[0] != p.BEGIN:
            pass
    [left] = await drain("q1", peek=True)
    assert left.body == b"kept"
    await emulator.namespace(NAMESPACE).settle("q1", Settlement(
        "complete", [str(uuid.UUID(bytes_le=tag))]))  # the lock is the client's still
    assert await drain("q1", peek=True) == []
    raw.writer.close()


async def _batch_delete(receiver, count: int, before: _dt.datetime | None = None,
                        **more) -> tuple[int, dict, str]:
    """A com.microsoft:batch-delete-messages request on ``receiver``'s $management link
    (the Python SDK has no such method: .NET's DeleteMessagesAsync and the JavaScript
    beta's deleteMessages send it, tests/test_js_client.py); its status, body and
    description."""
    from azure.servicebus._pyamqp import types

    body: dict = {"message-count": {"TYPE": types.AMQPTypes.int, "VALUE": count}}
    body["enqueued-time-utc"] = before or _dt.datetime.now(_dt.UTC)
    body.update(more)

    def answer(status, message, description, **_):
        return status, message.value or {}, description.decode()

    return await receiver._mgmt_request_response_with_retry(
        b"com.microsoft:batch-delete-messages", body, answer)


async def test_a_batch_delete_takes_at_most_the_tiers_limit():
    """Service Bus deletes at most 500 messages a batch-delete request, 4,000 on premium;
    more is refused with the limit said, as is a count below 1 (#47)."""
    async with aiosb.connect("memory://bdpremium", tier="premium") as ns:
        await ns.create_queue("q")
        await ns.create_queue("sq", requires_session=True)
    await emulator.namespace("bdpremium").send("q", [Message(b"%d" % n) for n in range(3)])
    async with serve_amqp(namespace="bdpremium") as running:
        async with ServiceBusClient.from_connection_string(
                running.connection_string(), retry_total=0) as client:
            async with client.get_queue_receiver("q") as receiver:
                status, body, _ = await _batch_delete(receiver, 4000)
                assert (status, body) == (200, {b"message-count": 3})
                status, _, _ = await _batch_delete(receiver, 4000)
                assert status == 204  # none left: the SDKs read 0
                for count in (4001, 0):
                    status, _, said = await _batch_delete(receiver, count)
                    assert status == 400 and "from 1 to 4000" in said
            await emulator.namespace("bdpremium").send("sq", [
                Message(b"a", session_id="a"), Message(b"b", session_id="b")])
            async with client.get_queue_receiver("sq", session_id="a") as receiver:
                status, body, _ = await _batch_delete(receiver, 10, **{"session-id": "a"})
                assert (status, body) == (200, {b"message-count": 1})
            await emulator.namespace("bdpremium").send("q", [Message(b"dead")])
            async with client.get_queue_receiver("q") as receiver:
                [got] = await receiver.receive_messages(max_wait_time=5)
                await receiver.dead_letter_message(got, reason="r")
            async with client.get_queue_receiver(
                    "q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
                status, body, _ = await _batch_delete(receiver, 10)
                assert (status, body) == (200, {b"message-count": 1})
    assert [m.session_id for m in await drain_of("bdpremium", "sq")] == ["b"]
    assert await drain_of("bdpremium", "q") == []
    assert await drain_of("bdpremium", "q", "deadletter") == []


async def drain_of(namespace: str, path: str, sub_queue: str | None = None) -> list:
    """What ``path`` (or its ``sub_queue``) of ``namespace`` holds, peeked."""
    return await emulator.namespace(namespace).receive(path, ReceiveRequest(
        mode="receive_and_delete", max_messages=100, max_wait=0, peek=True,
        sub_queue=sub_queue))


async def test_a_message_sent_with_no_body_comes_back_with_none(server):
    """A message with no body section (the SDK's ServiceBusMessage(body=None)) is received
    and peeked with none, as Service Bus keeps it, not with an empty data section; one
    with an empty data section keeps that, and a reader without AMQP (HTTP, aiosb's
    Message) sees an empty body either way (#47; the SDK's
    test_queue_send_and_receive_empty_body... checks ``message.body is None``)."""
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("q1") as sender:
            await sender.send_messages([ServiceBusMessage(body=None, subject="none"),
                                        ServiceBusMessage(body=b"", subject="empty")])
        [none, empty] = await drain("q1", peek=True)
        assert (none.body, empty.body) == (b"", b"")
        async with client.get_queue_receiver("q1") as receiver:
            peeked = await receiver.peek_messages(2)
            got = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
            for messages in (peeked, got):
                assert [m.subject for m in messages] == ["none", "empty"]
                assert messages[0].body is None
                assert list(messages[1].body) == [b""]
                assert b"x-opt-aiosb-no-body" not in (
                    messages[0].raw_amqp_message.annotations or {})
            for message in got:
                await receiver.complete_message(message)


@pytest.mark.timeout(180)
async def test_management_requests_past_the_credit_the_sdk_gave_once_are_answered(server):
    """The Python SDK gives its $management reply link 10,000 credit at attach and never
    more (pyamqp's ManagementLink); Service Bus answers on. Held for credit, its
    10,001st request on one receiver went unanswered, and it waited its 60 s (#47: the
    intermittent unanswered requests of Microsoft's full test run, which a long-lived
    receiver settling or renewing by lock token meets too)."""
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"x")])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [first] = await receiver.peek_messages(1)
            for _ in range(10_010):
                async with asyncio.timeout(10):
                    [again] = await receiver.peek_messages(
                        1, sequence_number=first.sequence_number)
            assert again.sequence_number == first.sequence_number


async def test_the_sdk_settles_through_management_once_its_link_is_detached(server):
    """The SDK's test_queue_message_settle_through_mgmt_link_due_to_broken_receiver_link:
    the receiver's link detached under it, complete_message settles by lock token on
    $management, which finds the message still locked (#47)."""
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"Test")])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver("q1") as receiver:
            [got] = await receiver.receive_messages(max_wait_time=5)
            await receiver._handler._link.detach()
            await receiver.complete_message(got)
    assert await drain("q1", peek=True) == []


async def test_a_reply_link_whose_client_takes_its_credit_back_is_held_again(server):
    """Answering past the credit is for a client that gave credit once and went quiet
    (the SDK); a client whose flow then gives its reply link no credit has stopped the
    link (AMQP 1.0 2.6.7): its next reply waits for credit again, and comes with it
    (#47)."""
    from .test_hostile import Raw

    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    for handle, receiving in ((0, False), (1, True)):
        raw.send(0, p.performative(
            p.ATTACH, f"c{handle}", UInt(handle), receiving, None, None,
            Described(ULong(0x28), ["$cbs"]), Described(ULong(0x29), ["$cbs"]),
            None, None, None if receiving else UInt(0)))

    def flow(credit: int, delivery_count: int) -> None:
        raw.send(0, p.performative(p.FLOW, UInt(0), UInt(5000), UInt(0), UInt(5000),
                                   UInt(1), UInt(delivery_count), UInt(credit)))

    def request(n: int) -> None:  # an amqp-value of null: answered with a 400
        raw.send(0, p.performative(p.TRANSFER, UInt(0), UInt(n), b"%d" % n, UInt(0), True),
                 bytes.fromhex("00537740"))

    async def replies(within: float) -> int:
        count = 0
        try:
            async with asyncio.timeout(within):
                while True:
                    code, fields = await raw.read()
                    count += code == p.TRANSFER and fields[0] == 1
        except TimeoutError:
            return count

    flow(1, 0)
    request(0)
    request(1)  # past the credit given once: answered (the SDK's case)
    assert await replies(1.0) == 2
    flow(0, 2)  # the client takes the credit back
    request(2)
    assert await replies(0.5) == 0
    flow(1, 2)
    assert await replies(1.0) == 1
    raw.writer.close()


async def test_a_fault_on_management_does_not_hold_up_tokens_or_links(server):
    """A put-token and an attach ask whether their entity exists (404, not-found,
    sessions that do not match) from the broker's entity table, not through a
    management operation: a delay injected on q1's management does not hold up a
    client that only sends and receives (#47)."""
    faults = emulator.namespace(NAMESPACE).faults
    with faults.delay("q1", 60, operations=["manage"]):
        async with ServiceBusClient.from_connection_string(
                server.connection_string()) as client, asyncio.timeout(20):
            async with client.get_queue_sender("q1") as sender:
                await sender.send_messages(ServiceBusMessage(b"on time"))
            async with client.get_queue_receiver(
                    "q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
                [got] = await receiver.receive_messages(max_wait_time=5)
    assert b"".join(got.body) == b"on time"


async def test_what_a_received_and_deleted_or_active_message_leaves_unsaid(server):
    """As Service Bus sends them (#47: Microsoft's backcompat tests compare the encoded
    size and count the annotations): a delivery with no lock has an empty delivery
    tag (so the SDK gives no lock token, where 16 zero bytes read as 00000000-...); an
    active message carries no ``x-opt-message-state`` (the SDK reads its absence as
    active), a deferred one does."""
    from azure.servicebus import ServiceBusMessageState

    await emulator.namespace(NAMESPACE).send("q1", [Message(b"a"), Message(b"b")])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_receiver(
                "q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [gone] = await receiver.receive_messages(max_wait_time=5)
        assert gone.lock_token is None
        assert gone.raw_amqp_message.delivery_annotations == {}
        assert b"x-opt-message-state" not in gone.raw_amqp_message.annotations
        assert gone.state == ServiceBusMessageState.ACTIVE
        async with client.get_queue_receiver("q1") as receiver:
            [locked] = await receiver.receive_messages(max_wait_time=5)
            assert b"x-opt-message-state" not in locked.raw_amqp_message.annotations
            await receiver.defer_message(locked)
            [deferred] = await receiver.peek_messages(1, sequence_number=locked.sequence_number)
            assert deferred.state == ServiceBusMessageState.DEFERRED
            await receiver.complete_message((await receiver.receive_deferred_messages(
                [locked.sequence_number]))[0])

    await emulator.namespace(NAMESPACE).send("q1", [Message(b"c")])
    raw = await _receiver(server, 1, credit=1)  # received and deleted: settled, no lock
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.TRANSFER:
            pass
    assert got[1][2] == b""  # the delivery tag
    raw.writer.close()


async def test_a_partition_key_sent_as_a_binary_is_taken_as_its_text(server):
    """The Python SDK's synchronous sender can write ``x-opt-partition-key`` as a
    binary (Microsoft's test_session_by_session_client_conn_str_receive_handler_
    peeklock), and Service Bus takes it as the text its UTF-8 spells (#47); a binary
    that is not UTF-8 is refused, saying so."""
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("sq") as sender:
            message = ServiceBusMessage("keyed", session_id="s1")
            message.raw_amqp_message.annotations[b"x-opt-partition-key"] = b"s1"
            await sender.send_messages(message)
            bad = ServiceBusMessage("keyed", session_id="s1")
            bad.raw_amqp_message.annotations[b"x-opt-partition-key"] = b"\xff"
            with pytest.raises(ServiceBusError, match="not UTF-8"):
                await sender.send_messages(bad)
        async with client.get_queue_receiver("sq", session_id="s1") as receiver:
            [kept] = await receiver.receive_messages(max_wait_time=5)
            await receiver.complete_message(kept)
    assert (str(kept), kept.partition_key, kept.session_id) == ("keyed", "s1", "s1")
