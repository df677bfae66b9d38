"""Conformance: partitioned entities (partitioned-entities.md, PT-1 to PT-19).

A message's fragment is read from its sequence number, whose high bits carry the
fragment index (as Service Bus numbers them); tests find which fragment a key lands on
by sending a message with that key, never by recomputing the hash.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.emulator import FRAGMENT_SHIFT
from aiosb.transport import ReceiveRequest

pytestmark = pytest.mark.looptime


def fragment(msg: aiosb.ReceivedMessage) -> int:
    return msg.sequence_number >> FRAGMENT_SHIFT


async def drain(ns: aiosb.Namespace, entity: str, **kw) -> list[aiosb.ReceivedMessage]:
    """Receive and complete everything there is now."""
    out = []
    async with ns.receiver(entity, **kw) as receiver:
        while batch := await receiver.receive(max_messages=100, max_wait=0):
            await receiver.complete(batch)
            out += batch
    return out


async def home_of(ns: aiosb.Namespace, entity: str, key: str) -> int:
    """The fragment a message with partition key ``key`` goes to (sent, read, removed)."""
    async with ns.sender(entity) as sender:
        await sender.send(Message(b"probe", partition_key=key))
    (probe,) = await drain(ns, entity)
    return fragment(probe)


async def test_fragment_counts_by_tier(ns):
    """PT-4: 16 fragments on standard, each with its own sequence numbers."""
    await ns.create_queue("p", enable_partitioning=True)
    await ns.create_queue("plain")
    props = await ns.runtime_properties("p")
    assert (props.fragment_count, props.available_fragments) == (16, 16)
    assert (await ns.runtime_properties("plain")).fragment_count == 1
    async with ns.sender("plain") as sender:
        await sender.send([Message(b"a"), Message(b"b")])
    assert [m.sequence_number for m in await drain(ns, "plain")] == [1, 2]


async def test_premium_entities_are_always_partitioned_in_two():
    """PT-4: on premium, partitioning is always on, with 2 fragments."""
    async with aiosb.connect("memory://premiumparts", tier="premium") as ns:
        queue = await ns.create_queue("q")
        assert queue.enable_partitioning is True
        assert queue.max_size_in_megabytes == 1024  # not multiplied on premium
        assert (await ns.runtime_properties("q")).fragment_count == 2
        async with ns.sender("q") as sender:
            for i in range(8):
                await sender.send(Message(b"x", partition_key=f"k{i}"))
        assert {fragment(m) for m in await drain(ns, "q")} == {0, 1}


async def test_partitioning_cannot_be_changed_after_creation(ns):
    """PT-3."""
    await ns.create_queue("q", enable_partitioning=True)
    with pytest.raises(errors.InvalidOperation, match="enable_partitioning"):
        await ns.update_queue("q", enable_partitioning=False)
    assert (await ns.get_queue("q")).enable_partitioning is True


async def test_a_partition_key_pins_every_message_to_one_fragment(ns):
    """PT-7, PT-9: the same key always hashes to the same fragment; keys spread."""
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender:
        for i in range(40):
            await sender.send(Message(str(i).encode(), partition_key=f"key{i % 8}"))
    received = await drain(ns, "p")
    homes: dict[str, set[int]] = {}
    for msg in received:
        homes.setdefault(msg.partition_key, set()).add(fragment(msg))
    assert len(received) == 40
    assert all(len(frags) == 1 for frags in homes.values())  # each key: one fragment
    assert len(set().union(*homes.values())) > 1  # and keys spread over fragments
    for key, frags in homes.items():  # order is kept within a key's fragment
        bodies = [
            int(m.body)
            for m in sorted(received, key=lambda m: m.sequence_number)
            if m.partition_key == key
        ]
        assert bodies == sorted(bodies), key
        assert frags == {await home_of(ns, "p", key)}  # stable: the same again later


async def test_message_id_is_the_key_only_with_duplicate_detection(ns):
    """PT-8: with duplicate detection, copies of a message meet in one fragment and are
    dropped; without it, MessageId is no key and copies are separate messages."""
    await ns.create_queue("dedup", enable_partitioning=True, requires_duplicate_detection=True)
    await ns.create_queue("plain", enable_partitioning=True)
    for entity in ("dedup", "plain"):
        async with ns.sender(entity) as sender:
            for _ in range(5):
                await sender.send(Message(b"same", message_id="order-1"))
    assert len(await drain(ns, "dedup")) == 1
    copies = await drain(ns, "plain")
    assert len(copies) == 5
    assert len({fragment(m) for m in copies}) > 1  # round robin, not pinned


async def test_keyed_send_to_a_down_fragment_fails_and_never_moves(ns, broker, reconnect):
    """PT-9: the pinned message fails with PartitionUnavailable (retryable), retried by
    the client until its operation timeout; it is never stored elsewhere."""
    await ns.create_queue("p", enable_partitioning=True)
    home = await home_of(ns, "p", "customer-7")
    other = "x"
    while await home_of(ns, "p", other) == home:
        other += "x"
    loop = asyncio.get_running_loop()
    async with reconnect(operation_timeout=2, retry_backoff=0.1) as short:
        async with short.sender("p") as sender:
            with broker.faults.fail_fragment("p", home):
                start = loop.time()
                with pytest.raises(errors.OperationTimeout) as info:
                    await sender.send(Message(b"pinned", partition_key="customer-7"))
                assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
                assert info.value.__cause__.retryable is True
                # retried until the timeout; over the SDK in real time the retry in flight
                # at the deadline takes a moment to be cancelled
                assert 1 < loop.time() - start < 2.5
                assert (await short.runtime_properties("p")).active_message_count == 0
                await sender.send(Message(b"elsewhere", partition_key=other))
            await sender.send(Message(b"after heal", partition_key="customer-7"))
    got = {m.body: fragment(m) for m in await drain(ns, "p")}
    assert got == {b"elsewhere": got[b"elsewhere"], b"after heal": home}
    assert got[b"elsewhere"] != home


async def test_a_retried_keyed_send_succeeds_when_its_fragment_heals(ns, broker):
    """PT-9: retryable means the client's retries carry it through a short outage."""
    await ns.create_queue("p", enable_partitioning=True)
    home = await home_of(ns, "p", "k")
    fault = broker.faults.fail_fragment("p", home)
    asyncio.get_running_loop().call_later(1.0, fault.heal)
    async with ns.sender("p") as sender:
        await sender.send(Message(b"late", partition_key="k"))
    (msg,) = await drain(ns, "p")
    assert fragment(msg) == home


async def test_keyless_sends_go_round_the_down_fragment(ns, broker):
    """PT-10: keyless messages go round robin and skip a fragment that is down, so the
    sends succeed while any fragment is up."""
    await ns.create_queue("p", enable_partitioning=True)
    with broker.faults.fail_fragment("p", 3, operations=["send"]):
        async with ns.sender("p") as sender:
            for i in range(64):
                await sender.send(Message(str(i).encode()))
    received = await drain(ns, "p")
    frags = {fragment(m) for m in received}
    assert len(received) == 64
    assert 3 not in frags
    assert len(frags) >= 8


async def test_every_fragment_down_fails_keyless_sends_too(ns, broker, reconnect):
    await ns.create_queue("p", enable_partitioning=True)
    faults = [broker.faults.fail_fragment("p", i, operations=["send"]) for i in range(16)]
    async with reconnect(operation_timeout=1, retry_backoff=0.1) as short:
        async with short.sender("p") as sender:
            with pytest.raises(errors.OperationTimeout) as info:
                await sender.send(Message(b"nowhere"))
    assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
    for fault in faults:
        fault.heal()
    assert (await ns.runtime_properties("p")).active_message_count == 0


async def test_receive_gathers_from_the_fragments_that_are_up(ns, broker):
    """PT-1, PT-12: a receive takes from any fragment; one fragment down hides only its
    own messages, which come back when it heals."""
    await ns.create_queue("p", enable_partitioning=True)
    down_home = await home_of(ns, "p", "k0")
    async with ns.sender("p") as sender:
        for i in range(32):
            await sender.send(Message(str(i).encode(), partition_key=f"k{i}"))
    held = broker.faults.fail_fragment("p", down_home, operations=["receive"])
    got = await drain(ns, "p")
    assert got and all(fragment(m) != down_home for m in got)
    held.heal()
    rest = await drain(ns, "p")
    assert {fragment(m) for m in rest} == {down_home}
    assert sorted(int(m.body) for m in got + rest) == list(range(32))


async def test_long_poll_wakes_for_a_message_on_any_fragment(ns):
    """PT-12."""
    await ns.create_queue("p", enable_partitioning=True)
    loop = asyncio.get_running_loop()
    async with ns.receiver("p") as receiver, ns.sender("p") as sender:
        loop.call_later(
            3,
            lambda: asyncio.ensure_future(sender.send(Message(b"late", partition_key="anything"))),
        )
        start = loop.time()
        (msg,) = await receiver.receive(max_wait=60)
        assert loop.time() - start == pytest.approx(3)
        assert msg.body == b"late"
        await receiver.complete(msg)


async def test_peek_may_return_fewer_and_the_client_peek_loops(ns):
    """PT-13: one peek answers from one fragment; Receiver.peek asks until it has n."""
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender:
        for i in range(48):  # keyless: round robin over the fragments
            await sender.send(Message(str(i).encode()))
    raw = await ns.transport.receive("p", ReceiveRequest(peek=True, max_messages=48))
    assert 0 < len(raw) < 48
    assert len({fragment(m) for m in raw}) == 1
    async with ns.receiver("p") as receiver:
        peeked = await receiver.peek(48)
        assert len(peeked) == 48
        assert all(m.lock_token is None for m in peeked)
        assert len({m.sequence_number for m in peeked}) == 48
        assert await receiver.peek(1) == []  # nothing left after the last one
    assert (await ns.runtime_properties("p")).active_message_count == 48


async def test_peek_stops_at_the_response_size_limit(ns):
    """PT-13: a peek answer stays within one response (256 KB on standard)."""
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        for _ in range(4):
            await sender.send(Message(b"x" * 100_000))
    raw = await ns.transport.receive("q", ReceiveRequest(peek=True, max_messages=4))
    assert len(raw) == 2
    async with ns.receiver("q") as receiver:
        assert len(await receiver.peek(4)) == 4


async def test_runtime_counts_add_up_over_fragments_and_report_limited_availability(ns, broker):
    """PT-14: counts are summed over the fragments; a fragment down shows."""
    await ns.create_queue("p", enable_partitioning=True, max_delivery_count=1)
    async with ns.sender("p") as sender:
        for i in range(20):
            await sender.send(Message(b"x", partition_key=f"k{i}"))
        await sender.schedule(Message(b"later"), datetime.now(UTC) + timedelta(hours=1))
    async with ns.receiver("p") as receiver:
        batch = await receiver.receive(max_messages=3, max_wait=0)
        for msg in batch:
            await receiver.abandon(msg)  # max_delivery_count 1: dead-lettered
    props = await ns.runtime_properties("p")
    assert (props.active_message_count, props.scheduled_message_count) == (17, 1)
    assert props.dead_letter_message_count == 3
    with broker.faults.fail_fragment("p", 5):
        props = await ns.runtime_properties("p")
        assert (props.fragment_count, props.available_fragments) == (16, 15)
        assert props.active_message_count == 17  # still counted


async def test_management_changes_fail_while_a_fragment_is_down(ns, broker, reconnect):
    """PT-14: update and delete act on every fragment, so one down makes them fail;
    reading the description still works."""
    await ns.create_queue("p", enable_partitioning=True)
    async with reconnect(operation_timeout=1, retry_backoff=0.1) as short:
        with broker.faults.fail_fragment("p", 0, operations=["manage"]):
            with pytest.raises(errors.OperationTimeout) as info:
                await short.update_queue("p", max_delivery_count=3)
            assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
            with pytest.raises(errors.OperationTimeout):
                await short.delete_queue("p")
            assert (await short.get_queue("p")).max_delivery_count == 10
        assert (await short.update_queue("p", max_delivery_count=3)).max_delivery_count == 3


async def test_settling_needs_the_fragment_of_the_message(ns, broker, reconnect):
    """A lock held on a fragment that went down cannot be settled until it heals; the
    messages of the other fragments settle normally."""
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender:
        for i in range(16):
            await sender.send(Message(b"x", partition_key=f"k{i}"))
    async with reconnect(operation_timeout=1, retry_backoff=0.1) as short:
        async with short.receiver("p") as receiver:
            batch = await receiver.receive(max_messages=16, max_wait=0)
            assert len(batch) == 16
            down = fragment(batch[0])
            with broker.faults.fail_fragment("p", down, operations=["receive"]):
                with pytest.raises(errors.OperationTimeout) as info:
                    await receiver.complete(batch[0])
                assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
                await receiver.complete([m for m in batch if fragment(m) != down])
            await receiver.complete([m for m in batch if fragment(m) == down])
    assert (await ns.runtime_properties("p")).active_message_count == 0


async def test_deferred_and_scheduled_messages_are_found_by_their_fragment(ns):
    """Sequence numbers name their fragment: receive_deferred and cancel_scheduled work
    across fragments."""
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender:
        for i in range(6):
            await sender.send(Message(str(i).encode(), partition_key=f"k{i}"))
        at = datetime.now(UTC) + timedelta(minutes=5)
        seqs = await sender.schedule(
            [Message(b"s1", partition_key="a"), Message(b"s2", partition_key="b")], at
        )
        await sender.cancel_scheduled(seqs)
    async with ns.receiver("p") as receiver:
        batch = await receiver.receive(max_messages=6, max_wait=0)
        assert len({fragment(m) for m in batch}) > 1
        for msg in batch:
            await receiver.defer(msg)
        again = await receiver.receive_deferred([m.sequence_number for m in batch])
        assert sorted(m.body for m in again) == sorted(m.body for m in batch)
        await receiver.complete(again)
    props = await ns.runtime_properties("p")
    assert (props.active_message_count, props.scheduled_message_count) == (0, 0)


async def test_dead_letters_stay_in_their_fragment_and_the_dlq_gathers(ns):
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender:
        for i in range(10):
            await sender.send(Message(b"x", partition_key=f"k{i}"))
    async with ns.receiver("p") as receiver:
        batch = await receiver.receive(max_messages=10, max_wait=0)
        for msg in batch:
            await receiver.dead_letter(msg, reason="bad")
    dead = await drain(ns, "p", sub_queue="deadletter")
    assert sorted(map(fragment, dead)) == sorted(map(fragment, batch))
    assert all(m.dead_letter_reason == "bad" for m in dead)


async def test_partitioned_topic_fans_out_in_the_same_fragment(ns, broker):
    """PT-2: subscriptions of a partitioned topic share its fragments (and faults)."""
    await ns.create_topic("t", enable_partitioning=True)
    await ns.create_subscription("t", "a")
    await ns.create_subscription("t", "b")
    async with ns.sender("t") as sender:
        for i in range(8):
            await sender.send(Message(str(i).encode(), partition_key=f"k{i}"))
    a = await drain(ns, "t/subscriptions/a")
    b = await drain(ns, "t/subscriptions/b")
    assert sorted((m.body, fragment(m)) for m in a) == sorted((m.body, fragment(m)) for m in b)
    with pytest.raises(errors.InvalidArgument, match="topic or queue"):
        broker.faults.fail_fragment("t/subscriptions/a", 0)


async def test_auto_forwarding_keeps_the_partition_key(ns):
    """PT-19: forwarded from, to and between partitioned entities, a message lands in
    the destination fragment its key names there."""
    await ns.create_queue("dest", enable_partitioning=True)
    await ns.create_queue("src", enable_partitioning=True, forward_to="dest")
    await ns.create_queue("plain-src", forward_to="dest")
    home = await home_of(ns, "dest", "tenant-42")
    for source in ("src", "plain-src"):
        async with ns.sender(source) as sender:
            await sender.send(Message(source.encode(), partition_key="tenant-42"))
    moved = await drain(ns, "dest")
    assert sorted(m.body for m in moved) == [b"plain-src", b"src"]
    assert {fragment(m) for m in moved} == {home}


async def test_fail_fragment_rejects_bad_input(ns, broker):
    await ns.create_queue("plain")
    await ns.create_queue("p", enable_partitioning=True)
    with pytest.raises(errors.InvalidArgument, match="not partitioned"):
        broker.faults.fail_fragment("plain", 0)
    for index in (-1, 16, "3", True):
        with pytest.raises(errors.InvalidArgument, match="between 0 and 15"):
            broker.faults.fail_fragment("p", index)
    with pytest.raises(errors.EntityNotFound):
        broker.faults.fail_fragment("missing", 0)
    with pytest.raises(errors.InvalidArgument, match="kind"):
        broker.faults.fail_fragment("p", 0, kind="meltdown")
    assert broker.faults.active == []


async def test_a_timeout_fragment_fault_hangs_only_what_needs_that_fragment(ns, broker, reconnect):
    await ns.create_queue("p", enable_partitioning=True)
    home = await home_of(ns, "p", "slow")
    async with reconnect(operation_timeout=5, retry_backoff=0.1) as short:
        async with short.sender("p") as sender:
            with broker.faults.fail_fragment("p", home, kind="timeout"):
                with pytest.raises(errors.OperationTimeout):
                    await sender.send(Message(b"x", partition_key="slow"))
                await sender.send(Message(b"keyless"))  # goes elsewhere at once
    assert [m.body for m in await drain(ns, "p")] == [b"keyless"]
