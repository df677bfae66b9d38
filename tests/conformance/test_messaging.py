"""Conformance: sending, receiving and settling, the same on every backend."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message, errors
from aiosb.message import PING_CONTENT_TYPE

pytestmark = pytest.mark.looptime


async def send(ns, entity, *bodies, **kw):
    async with ns.sender(entity) as sender:
        await sender.send([Message(b, **kw) for b in bodies])


async def test_send_receive_complete_round_trip_keeps_every_property(ns):
    await ns.create_queue("orders")
    sent = Message(
        b"payload",
        message_id="m-1",
        content_type="application/json",
        correlation_id="c-1",
        subject="order",
        reply_to="replies",
        reply_to_session_id="rs",
        to="shop",
        time_to_live=timedelta(minutes=5),
        application_properties={"n": 1, "s": "x", "f": 1.5, "b": True, "raw": b"\x00"},
    )
    async with ns.sender("orders") as sender:
        await sender.send(sent)
    async with ns.receiver("orders") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        assert msg.body == b"payload"
        assert msg.message_id == "m-1"
        assert msg.content_type == "application/json"
        assert (msg.correlation_id, msg.subject, msg.reply_to) == ("c-1", "order", "replies")
        assert (msg.reply_to_session_id, msg.to) == ("rs", "shop")
        assert msg.application_properties == sent.application_properties
        assert msg.time_to_live == timedelta(minutes=5)
        assert msg.delivery_count == 1
        assert msg.sequence_number >= 1
        assert msg.lock_token and msg.locked_until > msg.enqueued_time
        assert msg.expires_at == msg.enqueued_time + timedelta(minutes=5)
        await receiver.complete(msg)
        assert await receiver.receive(max_wait=0) == []
    assert (await ns.runtime_properties("orders")).active_message_count == 0


async def test_a_list_is_one_batch_received_in_order(ns):
    await ns.create_queue("q")
    await send(ns, "q", *[f"m{i}".encode() for i in range(50)])
    async with ns.receiver("q") as receiver:
        got = await receiver.receive(max_messages=100, max_wait=0)
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(50)]
        seqs = [m.sequence_number for m in got]
        assert seqs == sorted(seqs) and len(set(seqs)) == 50


async def test_concurrent_sends_on_one_sender_are_safe(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        await asyncio.gather(*(sender.send(Message(str(i))) for i in range(200)))
    async with ns.receiver("q", mode="receive_and_delete") as receiver:
        got = await receiver.receive(max_messages=500, max_wait=0)
    assert sorted(int(m.body) for m in got) == list(range(200))


async def test_sender_assigns_a_message_id_when_none_is_given(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"a", b"b")
    async with ns.receiver("q") as receiver:
        a, b = await receiver.receive(max_messages=2, max_wait=0)
    assert a.message_id and b.message_id and a.message_id != b.message_id


async def test_receive_and_delete_removes_at_once(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"x")
    async with ns.receiver("q", mode="receive_and_delete") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        assert msg.lock_token is None
        with pytest.raises(errors.InvalidOperation):
            await receiver.complete(msg)
    assert (await ns.runtime_properties("q")).active_message_count == 0


async def test_long_poll_wakes_the_moment_a_message_arrives(ns):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    async with ns.receiver("q") as receiver:
        start = loop.time()
        task = asyncio.create_task(receiver.receive(max_wait=timedelta(minutes=15)))
        await asyncio.sleep(7)
        await send(ns, "q", b"late")
        (msg,) = await task
        assert msg.body == b"late"
        assert loop.time() - start == pytest.approx(7)


async def test_long_poll_returns_empty_exactly_at_max_wait(ns):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    async with ns.receiver("q") as receiver:
        start = loop.time()
        assert await receiver.receive(max_wait=timedelta(minutes=15)) == []
        assert loop.time() - start == pytest.approx(900)


async def test_async_iteration_yields_messages_as_they_come(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"1", b"2", b"3")
    got = []
    async with ns.receiver("q", prefetch_count=2) as receiver:
        async for msg in receiver:
            got.append(msg.body)
            await receiver.complete(msg)
            if len(got) == 3:
                break
    assert got == [b"1", b"2", b"3"]


async def test_abandon_redelivers_with_a_higher_delivery_count_in_sequence_order(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"first", b"second")
    async with ns.receiver("q") as receiver:
        (first,) = await receiver.receive(max_wait=0)
        await receiver.abandon(first, properties_to_modify={"why": "busy"})
        (again,) = await receiver.receive(max_wait=0)
        assert again.body == b"first"
        assert again.delivery_count == 2
        assert again.application_properties == {"why": "busy"}
        assert again.lock_token != first.lock_token


async def test_max_delivery_count_dead_letters_with_its_reason(ns):
    await ns.create_queue("q", max_delivery_count=3)
    await send(ns, "q", b"poison")
    async with ns.receiver("q") as receiver:
        for _ in range(3):
            (msg,) = await receiver.receive(max_wait=0)
            await receiver.abandon(msg)
        assert await receiver.receive(max_wait=0) == []
    async with ns.receiver("q", sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive(max_wait=0)
        assert dead.body == b"poison"
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
        # The count carries over into the dead-letter queue, where this is delivery 4.
        assert dead.delivery_count == 4
        await dlq.complete(dead)


async def test_dead_letter_with_reason_and_description(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"bad")
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        await receiver.dead_letter(msg, reason="Invalid", description="no customer id")
    counts = await ns.runtime_properties("q")
    assert (counts.active_message_count, counts.dead_letter_message_count) == (0, 1)
    async with ns.receiver("q/$DeadLetterQueue") as dlq:
        (dead,) = await dlq.receive(max_wait=0)
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == (
            "Invalid",
            "no customer id",
        )
        assert dead.dead_letter_source == "q"
        with pytest.raises(errors.InvalidOperation):
            await dlq.dead_letter(dead, reason="again")


async def test_defer_then_receive_deferred_by_sequence_number(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"later", b"now")
    async with ns.receiver("q") as receiver:
        later, now = await receiver.receive(max_messages=2, max_wait=0)
        await receiver.defer(later)
        await receiver.complete(now)
        assert await receiver.receive(max_wait=0) == []
        assert (await ns.runtime_properties("q")).deferred_message_count == 1
        (back,) = await receiver.receive_deferred(later.sequence_number)
        assert back.body == b"later" and back.state == "deferred"
        await receiver.complete(back)
        with pytest.raises(errors.MessageNotFound):
            await receiver.receive_deferred(later.sequence_number)


async def test_lock_expiry_returns_the_message(ns):
    await ns.create_queue("q", lock_duration=timedelta(seconds=30))
    await send(ns, "q", b"x")
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        assert msg.locked_until == msg.enqueued_time + timedelta(seconds=30)
        await asyncio.sleep(29)
        assert await receiver.receive(max_wait=0) == []
        (again,) = await receiver.receive(max_wait=5)
        assert again.delivery_count == 2
        with pytest.raises(errors.MessageLockLost):
            await receiver.complete(msg)  # the stale lock
        await receiver.complete(again)


async def test_renew_lock_extends_it_by_the_lock_duration(ns):
    await ns.create_queue("q", lock_duration=timedelta(seconds=30))
    await send(ns, "q", b"x")
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        await asyncio.sleep(20)
        until = await receiver.renew_lock(msg)
        assert until == msg.enqueued_time + timedelta(seconds=50)
        assert msg.locked_until == until
        await asyncio.sleep(25)  # past the first lock, within the renewed one
        assert await receiver.receive(max_wait=0) == []
        await receiver.complete(msg)


async def test_settling_twice_or_with_a_foreign_message_fails_and_changes_nothing(ns):
    await ns.create_queue("a")
    await ns.create_queue("b")
    await send(ns, "a", b"x")
    await send(ns, "b", b"y")
    async with ns.receiver("a") as ra, ns.receiver("b") as rb:
        (x,) = await ra.receive(max_wait=0)
        (y,) = await rb.receive(max_wait=0)
        with pytest.raises(errors.InvalidOperation, match="received from 'b'"):
            await ra.complete(y)
        await ra.complete(x)
        with pytest.raises(errors.MessageLockLost):
            await ra.complete(x)
        forged = y
        forged.entity_path = "a"
        with pytest.raises(errors.MessageLockLost):
            await ra.complete(forged)
    assert (await ns.runtime_properties("b")).active_message_count == 1


async def test_peek_browses_without_locking_and_continues_where_it_stopped(ns):
    await ns.create_queue("q")
    await send(ns, "q", *[str(i).encode() for i in range(5)])
    async with ns.receiver("q") as receiver:
        first = await receiver.peek(3)
        assert [m.body for m in first] == [b"0", b"1", b"2"]
        assert all(m.lock_token is None for m in first)
        rest = await receiver.peek(10)
        assert [m.body for m in rest] == [b"3", b"4"]
        assert [m.body for m in await receiver.peek(2, from_sequence_number=1)] == [b"0", b"1"]
        got = await receiver.receive(max_messages=5, max_wait=0)
        assert len(got) == 5


async def test_a_peek_of_a_locked_message_carries_no_lock(ns):
    """A peek shows a message another receive holds, but not its lock (the server's
    batch answer drops the lock columns of a peek: #16)."""
    await ns.create_queue("q")
    await send(ns, "q", b"a", b"b")
    async with ns.receiver("q") as receiver:
        (held,) = await receiver.receive(max_messages=1, max_wait=5)
        assert held.lock_token is not None and held.locked_until_timestamp is not None
        peeked = await receiver.peek(2)
        assert [m.body for m in peeked] == [b"a", b"b"]
        assert [m.lock_token for m in peeked] == [None, None]
        assert [m.locked_until_timestamp for m in peeked] == [None, None]


async def test_message_over_256_kb_is_refused_and_nothing_is_sent(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        with pytest.raises(errors.MessageSizeExceeded, match="262144"):
            await sender.send([Message(b"ok"), Message(b"x" * (256 * 1024 + 1))])
        with pytest.raises(errors.MessageSizeExceeded, match="batch"):
            await sender.send([Message(b"x" * 200_000), Message(b"y" * 200_000)])
        await sender.send(Message(b"x" * (256 * 1024 - 100)))
    counts = await ns.runtime_properties("q")
    assert counts.active_message_count == 1


async def test_a_header_over_service_bus_limits_is_refused_and_nothing_is_sent(ns):
    """Service Bus's limits on every tier: an application property at most 32 KB, the
    whole header (properties and system properties) at most 64 KB. What Azure refuses
    is refused here, and a refused batch stores nothing."""
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        with pytest.raises(errors.MessageSizeExceeded, match=r"'big'.*32768"):
            await sender.send([Message(b"ok"), Message(b"x", application_properties={
                "big": "v" * (32 * 1024 + 1)})])
        with pytest.raises(errors.MessageSizeExceeded, match=r"header.*65536"):
            await sender.send(Message(b"x", application_properties={
                f"p{i}": "v" * (30 * 1024) for i in range(3)}))
        await sender.send(Message(b"x", application_properties={
            f"p{i}": "v" * (30 * 1024) for i in range(2)}))
    counts = await ns.runtime_properties("q")
    assert counts.active_message_count == 1


async def test_unknown_entity_raises_entity_not_found(ns):
    async with ns.sender("missing") as sender:
        with pytest.raises(errors.EntityNotFound, match="missing"):
            await sender.send(Message(b"x"))
    async with ns.receiver("missing") as receiver:
        with pytest.raises(errors.EntityNotFound):
            await receiver.receive(max_wait=0)


async def test_topic_fans_out_to_every_subscription(ns):
    await ns.create_topic("events")
    await ns.create_subscription("events", "audit")
    await ns.create_subscription("events", "billing")
    await send(ns, "events", b"e1", b"e2")
    for sub in ("audit", "billing"):
        async with ns.receiver(f"events/subscriptions/{sub}") as receiver:
            got = await receiver.receive(max_messages=10, max_wait=0)
            assert [m.body for m in got] == [b"e1", b"e2"]
            await receiver.complete(got)
    async with ns.receiver("events") as receiver:
        with pytest.raises(errors.InvalidOperation, match="subscriptions"):
            await receiver.receive(max_wait=0)


async def test_duplicate_detection_drops_copies_within_the_window_only(ns):
    await ns.create_queue(
        "q",
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=timedelta(minutes=1),
    )
    async with ns.sender("q") as sender:
        await sender.send([Message(b"1", message_id="a"), Message(b"2", message_id="a")])
        await sender.send(Message(b"3", message_id="a"))
        await asyncio.sleep(61)
        await sender.send(Message(b"4", message_id="a"))
    async with ns.receiver("q", mode="receive_and_delete") as receiver:
        got = await receiver.receive(max_messages=10, max_wait=0)
    assert [m.body for m in got] == [b"1", b"4"]


async def test_scheduled_message_appears_at_its_time_and_can_be_cancelled(ns):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    async with ns.sender("q") as sender, ns.receiver("q") as receiver:
        at = datetime.now(UTC) + timedelta(minutes=5)
        start = loop.time()
        keep = await sender.schedule(Message(b"keep"), at)
        drop = await sender.schedule(Message(b"drop"), at)
        counts = await ns.runtime_properties("q")
        assert counts.scheduled_message_count == 2
        await sender.cancel_scheduled(drop)
        with pytest.raises(errors.MessageNotFound):
            await sender.cancel_scheduled(drop)
        (msg,) = await receiver.receive(max_messages=5, max_wait=timedelta(minutes=10))
        assert msg.body == b"keep" and msg.sequence_number == keep
        assert loop.time() - start == pytest.approx(300, abs=1)
        assert msg.enqueued_time == pytest.approx(at, abs=timedelta(seconds=1))
        assert msg.scheduled_enqueue_time == at


async def test_a_message_with_a_scheduled_time_in_send_is_scheduled(ns):
    await ns.create_queue("q")
    at = datetime.now(UTC) + timedelta(minutes=1)
    await send(ns, "q", b"x", scheduled_enqueue_time=at)
    assert (await ns.runtime_properties("q")).scheduled_message_count == 1
    async with ns.receiver("q") as receiver:
        assert await receiver.receive(max_wait=30) == []
        assert len(await receiver.receive(max_wait=60)) == 1


async def test_auto_forwarding_moves_messages_to_the_destination(ns):
    await ns.create_queue("dest")
    await ns.create_queue("src", forward_to="dest")
    await send(ns, "src", b"x")
    assert (await ns.runtime_properties("src")).active_message_count == 0
    async with ns.receiver("dest") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        assert msg.body == b"x"


async def test_forwarding_to_a_missing_entity_is_refused_at_creation(ns):
    with pytest.raises(errors.EntityNotFound, match="nowhere"):
        await ns.create_queue("src", forward_to="nowhere")
    assert not await ns.queue_exists("src")


async def test_pings_are_accepted_but_never_delivered(ns):
    """PN-14, R-2: a broker never delivers a ping to a receiver."""
    await ns.create_queue("q")
    ping = Message(
        content_type=PING_CONTENT_TYPE, time_to_live=timedelta(seconds=1), session_id="ping-session"
    )
    async with ns.sender("q") as sender:
        await sender.send(ping)
        await sender.send([ping, Message(b"real")])
    async with ns.receiver("q") as receiver:
        got = await receiver.receive(max_messages=10, max_wait=1)
    assert [m.body for m in got] == [b"real"]


async def test_transaction_commits_all_sends_together_or_none(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        async with sender.transaction():
            await sender.send(Message(b"1"))
            await sender.send([Message(b"2"), Message(b"3")])
            assert (await ns.runtime_properties("q")).active_message_count == 0
        assert (await ns.runtime_properties("q")).active_message_count == 3
        with pytest.raises(RuntimeError):
            async with sender.transaction():
                await sender.send(Message(b"lost"))
                raise RuntimeError("rolled back")
    assert (await ns.runtime_properties("q")).active_message_count == 3


async def test_closed_links_and_namespace_refuse_use(ns):
    await ns.create_queue("q")
    sender = ns.sender("q")
    await sender.aclose()
    with pytest.raises(errors.ClientClosed):
        await sender.send(Message(b"x"))
    receiver = ns.receiver("q")
    await ns.aclose()
    with pytest.raises(errors.ClientClosed):
        await receiver.receive(max_wait=0)
    with pytest.raises(errors.ClientClosed):
        await ns.get_queue("q")


async def test_a_sequence_number_or_lock_given_twice_counts_once(ns):
    await ns.create_queue("q")
    await send(ns, "q", b"d", b"c")
    async with ns.receiver("q") as receiver:
        d, c = await receiver.receive(max_messages=2, max_wait=0)
        await receiver.defer(d)
        (again,) = await receiver.receive_deferred([d.sequence_number, d.sequence_number])
        await receiver.complete([again, again, c])
    assert (await ns.runtime_properties("q")).total_message_count == 0


async def test_defer_is_not_a_failed_delivery(ns):
    """Deferring at the last allowed delivery keeps the message deferred."""
    await ns.create_queue("q", max_delivery_count=1)
    await send(ns, "q", b"x")
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        await receiver.defer(msg)
    counts = await ns.runtime_properties("q")
    assert (counts.deferred_message_count, counts.dead_letter_message_count) == (1, 0)


async def test_cancelling_a_scheduled_message_twice_in_one_call_counts_once(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        seq = await sender.schedule(Message(b"x"), datetime.now(UTC) + timedelta(hours=1))
        await sender.cancel_scheduled([seq, seq])
    assert (await ns.runtime_properties("q")).scheduled_message_count == 0


async def test_defer_and_dead_letter_modify_properties(ns):
    """properties_to_modify travels with every failed settlement, deferred ones too
    (over AMQP: in the outcome on the link, or in update-disposition)."""
    await ns.create_queue("q")
    await send(ns, "q", b"d", b"x")
    async with ns.receiver("q") as receiver:
        d, x = await receiver.receive(max_messages=2, max_wait=0)
        await receiver.defer(d, properties_to_modify={"step": 1})
        await receiver.dead_letter(x, reason="bad", properties_to_modify={"why": b"\x01"})
        (back,) = await receiver.receive_deferred(d.sequence_number)
        assert back.application_properties == {"step": 1}
        await receiver.dead_letter(back, reason="late", properties_to_modify={"step": 2})
    async with ns.receiver("q", sub_queue="deadletter") as dlq:
        got = {m.body: m for m in await dlq.receive(max_messages=2, max_wait=0)}
    assert got[b"x"].dead_letter_reason == "bad"
    assert got[b"x"].application_properties["why"] == b"\x01"
    assert got[b"d"].dead_letter_reason == "late"
    assert got[b"d"].application_properties["step"] == 2
