"""The broker's public operations for tools (#49, item 6): what the explorer and
``GET /metrics`` read and do, as methods of :class:`~aiosb.emulator.EmulatorNamespace`
rather than reaches into its private members: :meth:`take` (a receive by sequence
numbers of messages that are not deferred, the dead-letter queue's included),
:meth:`entity_statuses`, :meth:`session_statuses` and :meth:`description`."""

from __future__ import annotations

import pytest

import aiosb
from aiosb import emulator, errors
from aiosb.message import Message
from aiosb.protocol import ReceiveRequest, SessionRequest

pytestmark = pytest.mark.timeout(30)


async def _dead_letters(client: aiosb.Namespace, path: str, count: int) -> list[int]:
    """Send ``count`` messages to queue ``path`` and dead-letter them all; their
    numbers in the dead-letter queue."""
    async with client.sender(path) as sender:
        await sender.send([Message(b"m%d" % i) for i in range(count)])
    async with client.receiver(path) as receiver:
        for m in await receiver.receive(max_messages=count, max_wait=0):
            await receiver.dead_letter(m, reason="test")
    async with client.receiver(path, sub_queue="deadletter") as dead:
        return [m.sequence_number for m in await dead.peek(count)]


async def test_take_locks_the_chosen_dead_letters_and_touches_no_other():
    """#49: the explorer's resubmit takes chosen dead letters by number through the
    broker: those named are locked, no other is (their delivery counts stay), a number
    with no such message (gone, locked, never there) is passed over."""
    async with aiosb.connect("memory://takes") as client:
        await client.create_queue("q")
        seqs = await _dead_letters(client, "q", 5)
        ns = emulator.namespace("takes")
        got = await ns.take("q", [seqs[3], seqs[1], 10**9], sub_queue="deadletter")
        assert sorted(m.sequence_number for m in got) == [seqs[1], seqs[3]]
        assert all(m.lock_token and m.delivery_count == 2 for m in got)
        again = await ns.take("q", [seqs[1], seqs[2]], sub_queue="deadletter")
        assert [m.sequence_number for m in again] == [seqs[2]]  # seqs[1] is locked
        async with client.receiver("q", sub_queue="deadletter") as dead:
            left = {m.sequence_number: m.delivery_count for m in await dead.peek(10)}
        assert left == {seqs[0]: 1, seqs[1]: 2, seqs[2]: 2, seqs[3]: 2, seqs[4]: 1}
        gone = await ns.take("q", [seqs[0]], sub_queue="deadletter",
                             mode="receive_and_delete")
        assert [m.sequence_number for m in gone] == [seqs[0]]
        assert await ns.take("q", [seqs[0]], sub_queue="deadletter") == []


async def test_a_clients_receive_by_number_still_takes_deferred_messages_only():
    """A client's receive by sequence numbers stays Service Bus's receive-deferred:
    a dead letter that was not deferred is not found; take finds it, and a deferred
    one too."""
    async with aiosb.connect("memory://deferred-only") as client:
        await client.create_queue("q")
        seqs = await _dead_letters(client, "q", 2)
        ns = emulator.namespace("deferred-only")
        with pytest.raises(errors.MessageNotFound):
            await ns.receive("q", ReceiveRequest(sub_queue="deadletter",
                                                 sequence_numbers=[seqs[0]], max_wait=0))
        async with client.receiver("q", sub_queue="deadletter") as dead:
            (first,) = await dead.receive(max_messages=1, max_wait=0)
            await dead.defer(first)
        got = await ns.take("q", seqs, sub_queue="deadletter")
        assert sorted(m.sequence_number for m in got) == seqs


async def test_take_meets_a_fragment_fault_as_a_receive_does():
    """A dead letter in a fragment that is down is not quietly passed over: the
    fragment's fault applies, as to any receive that needs that fragment."""
    async with aiosb.connect("memory://take-fragments") as client:
        await client.create_queue("p", enable_partitioning=True)
        seqs = await _dead_letters(client, "p", 3)
        ns = emulator.namespace("take-fragments")
        fragment = seqs[0] >> emulator.FRAGMENT_SHIFT
        with ns.faults.fail_fragment("p", fragment):
            with pytest.raises(errors.PartitionUnavailable):
                await ns.take("p", [seqs[0]], sub_queue="deadletter")
        assert [m.sequence_number for m in await ns.take(
            "p", [seqs[0]], sub_queue="deadletter")] == [seqs[0]]


async def test_entity_statuses_read_every_entity_in_passing():
    """Kinds, descriptions, counts and sequence numbers given out, in path order; read
    under a fault that stops every management operation, and without counting as an
    access (``accessed_at_utc`` stays)."""
    async with aiosb.connect("memory://statuses") as client:
        await client.create_queue("b")
        await client.create_topic("a")
        await client.create_subscription("a", "s")
        await _dead_letters(client, "b", 3)
        ns = emulator.namespace("statuses")
        before = {s.path: s for s in ns.entity_statuses()}
        with ns.faults.fail(operations=["manage", "receive", "send"]):
            read = ns.entity_statuses()
        assert [(s.path, s.kind) for s in read] == [
            ("a", "topic"), ("a/subscriptions/s", "subscription"), ("b", "queue")]
        queue = read[2]
        assert queue.counts.dead_letter_message_count == 3
        assert queue.counts.active_message_count == 0
        assert queue.numbered == 6  # three sent, three dead-letter copies
        assert queue.description.name == "b"
        assert read[1].description.topic_name == "a"
        assert queue.counts.accessed_at_utc == before["b"].counts.accessed_at_utc
        await client.delete_queue("b")
        assert [s.path for s in ns.entity_statuses()] == ["a", "a/subscriptions/s"]


async def test_session_statuses_read_sessions_without_taking_a_lock():
    """Each listed session's state, lock and messages; reading them locks none (a
    receiver may accept the session after)."""
    async with aiosb.connect("memory://session-statuses") as client:
        await client.create_queue("sq", requires_session=True)
        transport = client.transport
        await transport.send("sq", [Message(b"x", session_id="a"),
                                    Message(b"y", session_id="a"),
                                    Message(b"z", session_id="b")])
        held = await transport.session("sq", SessionRequest("accept", "b", max_wait=0))
        await transport.session("sq", SessionRequest("set_state", "b", held.lock, b"s"))
        ns = emulator.namespace("session-statuses")
        read = await ns.session_statuses("sq")
        assert [(s.session_id, s.state, s.locked, s.message_count) for s in read] == [
            ("a", None, False, 2), ("b", b"s", True, 1)]
        accepted = await transport.session("sq", SessionRequest("accept", "a", max_wait=0))
        assert accepted.lock
        await client.create_queue("plain")
        with pytest.raises(errors.InvalidOperation, match="not session-enabled"):
            await ns.session_statuses("plain")


async def test_description_is_read_without_a_management_operation():
    """As :meth:`lookup`: no fault applies; an unknown path is EntityNotFound."""
    async with aiosb.connect("memory://described") as client:
        await client.create_topic("t")
        await client.create_subscription("t", "s")
        ns = emulator.namespace("described")
        with ns.faults.fail(operations=["manage"]):
            described = ns.description("T/Subscriptions/S")
        assert (described.name, described.topic_name) == ("s", "t")
        with pytest.raises(errors.EntityNotFound):
            ns.description("nowhere")
