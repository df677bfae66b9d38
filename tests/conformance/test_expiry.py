"""Conformance: message-expiration.md, rule by rule (EX-1 to EX-16; EX-12/13 are
session rules and live with the session tests)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import NEVER, Message, errors

pytestmark = pytest.mark.looptime

MIN = timedelta(minutes=1)


async def send(ns, entity, *messages):
    async with ns.sender(entity) as sender:
        await sender.send(list(messages))


async def dead_letters(ns, entity):
    async with ns.receiver(entity, sub_queue="deadletter", mode="receive_and_delete") as dlq:
        return await dlq.receive(max_messages=100, max_wait=0)


async def test_ex1_expiry_is_enqueue_time_plus_time_to_live(ns):
    """EX-1: the relative TTL becomes an absolute instant at enqueue."""
    await ns.create_queue("q")
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=90)))
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.peek(1)
    assert msg.expires_at - msg.enqueued_time == timedelta(seconds=90)


async def test_ex2_an_expired_message_cannot_be_received_or_peeked(ns):
    """EX-2: after expires_at a message is gone for receivers and peeks."""
    await ns.create_queue("q")
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=10)))
    await asyncio.sleep(9.9)
    async with ns.receiver("q") as receiver:
        assert len(await receiver.peek(1, from_sequence_number=0)) == 1
        await asyncio.sleep(0.2)
        assert await receiver.peek(1, from_sequence_number=0) == []
        assert await receiver.receive(max_wait=0) == []
    assert (await ns.runtime_properties("q")).active_message_count == 0


async def test_ex3_a_locked_message_can_be_completed_after_its_expiry(ns):
    """EX-3 and EX-4: expiry does not touch a locked message; completing it is final."""
    await ns.create_queue(
        "q", dead_lettering_on_message_expiration=True, lock_duration=timedelta(minutes=2)
    )
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=30)))
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        await asyncio.sleep(60)  # expired while locked
        await receiver.complete(msg)
    await asyncio.sleep(120)
    assert await dead_letters(ns, "q") == []
    counts = await ns.runtime_properties("q")
    assert counts.total_message_count == 0


async def test_ex3_ex11_expiry_takes_effect_when_the_lock_is_abandoned(ns):
    """EX-3, EX-11: abandoned after expiry, the message is dead-lettered at once."""
    await ns.create_queue("q", dead_lettering_on_message_expiration=True)
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=30)))
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        await asyncio.sleep(45)
        assert (await dead_letters(ns, "q")) == []  # still locked: untouched
        await receiver.abandon(msg)
        assert await receiver.receive(max_wait=0) == []
    (dead,) = await dead_letters(ns, "q")
    assert dead.dead_letter_reason == "TTLExpiredException"


async def test_ex11_expiry_takes_effect_when_the_lock_expires(ns):
    """EX-11: a message that expired while locked is dead-lettered when the lock expires."""
    await ns.create_queue(
        "q", dead_lettering_on_message_expiration=True, lock_duration=timedelta(seconds=60)
    )
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=20)))
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
    await asyncio.sleep(59)
    assert await dead_letters(ns, "q") == []
    await asyncio.sleep(2)
    (dead,) = await dead_letters(ns, "q")
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert dead.message_id == msg.message_id


async def test_ex5_a_scheduled_message_expires_relative_to_its_scheduled_time(ns):
    """EX-5: scheduled 5 minutes ahead with a 10 minute TTL, it expires 15 minutes on."""
    await ns.create_queue("q")
    now = datetime.now(UTC)
    async with ns.sender("q") as sender:
        await sender.schedule(Message(b"x", time_to_live=10 * MIN), now + 5 * MIN)
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=6 * 60)
        assert msg.expires_at - msg.enqueued_time == 10 * MIN
        assert msg.expires_at == pytest.approx(now + 15 * MIN, abs=timedelta(seconds=1))
        await receiver.abandon(msg)
        await asyncio.sleep(9 * 60 + 50)
        assert len(await receiver.peek(1, from_sequence_number=0)) == 1
        await asyncio.sleep(20)
        assert await receiver.peek(1, from_sequence_number=0) == []


async def test_ex6_a_very_low_ttl_can_expire_before_any_receive(ns):
    """EX-6: milliseconds of TTL expire before a receiver comes; that is correct."""
    await ns.create_queue("q", dead_lettering_on_message_expiration=True)
    await send(ns, "q", Message(b"x", time_to_live=timedelta(milliseconds=5)))
    await asyncio.sleep(0.01)
    async with ns.receiver("q") as receiver:
        assert await receiver.receive(max_wait=0) == []
    assert len(await dead_letters(ns, "q")) == 1


async def test_ex7_entity_default_applies_and_caps_longer_ttls(ns):
    """EX-7: default TTL for messages without one, and a cap for longer ones."""
    await ns.create_queue("q", default_message_time_to_live=timedelta(hours=1))
    await send(
        ns,
        "q",
        Message(b"none"),
        Message(b"long", time_to_live=timedelta(days=2)),
        Message(b"short", time_to_live=timedelta(minutes=5)),
    )
    async with ns.receiver("q") as receiver:
        got = {m.body: m for m in await receiver.peek(3)}
    for body, ttl in ((b"none", 60 * MIN), (b"long", 60 * MIN), (b"short", 5 * MIN)):
        assert got[body].time_to_live == ttl
        assert got[body].expires_at - got[body].enqueued_time == ttl


async def test_ex7_the_default_can_change_later_and_applies_to_new_messages(ns):
    """EX-7: default_message_time_to_live is changeable after creation."""
    await ns.create_queue("q", default_message_time_to_live=timedelta(hours=1))
    updated = await ns.update_queue("q", default_message_time_to_live=timedelta(minutes=2))
    assert updated.default_message_time_to_live == timedelta(minutes=2)
    await send(ns, "q", Message(b"x"))
    await asyncio.sleep(121)
    assert (await ns.runtime_properties("q")).active_message_count == 0


async def test_ex8_defaults_are_never_on_standard(ns):
    """EX-8: without a TTL anywhere, a message never expires."""
    queue = await ns.create_queue("q")
    assert queue.default_message_time_to_live == NEVER
    await send(ns, "q", Message(b"x"))
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.peek(1)
    assert msg.expires_at is None and msg.time_to_live is None


async def test_ex8_basic_tier_default_and_maximum_is_14_days():
    """EX-8: on the basic tier the entity default is 14 days, also the maximum."""
    import aiosb

    async with aiosb.connect("memory://basicns?tier=basic") as ns:
        with pytest.raises(errors.InvalidArgument, match="14 days"):
            await ns.create_queue("q", default_message_time_to_live=timedelta(days=15))
        queue = await ns.create_queue("q", default_message_time_to_live=timedelta(days=14))
        assert queue.default_message_time_to_live == timedelta(days=14)


async def test_ex9_the_topic_ttl_applies_when_lower_than_the_subscription(ns):
    """EX-9: a topic's lower TTL wins over its subscription's."""
    await ns.create_topic("t", default_message_time_to_live=timedelta(minutes=5))
    await ns.create_subscription("t", "long", default_message_time_to_live=timedelta(hours=1))
    await ns.create_subscription("t", "short", default_message_time_to_live=timedelta(minutes=1))
    await send(ns, "t", Message(b"x"))
    for sub, ttl in (("long", 5 * MIN), ("short", MIN)):
        async with ns.receiver(f"t/subscriptions/{sub}") as receiver:
            (msg,) = await receiver.peek(1)
            assert msg.time_to_live == ttl


async def test_ex10_expired_messages_are_dead_lettered_with_the_ttl_reason(ns):
    """EX-10: with the flag, expired messages move to $DeadLetterQueue as TTLExpiredException."""
    await ns.create_queue("q", dead_lettering_on_message_expiration=True)
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=30), message_id="job-1"))
    await asyncio.sleep(31)
    counts = await ns.runtime_properties("q")
    assert (counts.active_message_count, counts.dead_letter_message_count) == (0, 1)
    (dead,) = await dead_letters(ns, "q")
    assert dead.message_id == "job-1"
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert dead.expires_at is None  # dead letters do not expire again


async def test_ex10_dead_letter_receivers_are_woken_by_expiry(ns):
    """EX-10: the move happens in the background, waking a waiting DLQ receiver."""
    await ns.create_queue("q", dead_lettering_on_message_expiration=True)
    loop = asyncio.get_running_loop()
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=30)))
    start = loop.time()
    async with ns.receiver("q", sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive(max_wait=timedelta(minutes=5))
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert loop.time() - start == pytest.approx(30, abs=0.01)


async def test_ex10_without_the_flag_expired_messages_are_dropped(ns):
    """EX-10: with the flag off, expired messages are dropped."""
    await ns.create_queue("q")
    await send(ns, "q", Message(b"x", time_to_live=timedelta(seconds=30)))
    await asyncio.sleep(31)
    counts = await ns.runtime_properties("q")
    assert counts.total_message_count == 0


async def test_ex10_subscriptions_dead_letter_on_expiry_too(ns):
    """EX-10 applies to subscriptions."""
    await ns.create_topic("t")
    await ns.create_subscription("t", "s", dead_lettering_on_message_expiration=True)
    await send(ns, "t", Message(b"x", time_to_live=timedelta(seconds=5)))
    await asyncio.sleep(6)
    (dead,) = await dead_letters(ns, "t/subscriptions/s")
    assert dead.dead_letter_reason == "TTLExpiredException"


async def test_ex14_idle_entity_is_deleted_after_auto_delete_on_idle(ns):
    """EX-14: an entity idle for auto_delete_on_idle is deleted."""
    await ns.create_queue("temp", auto_delete_on_idle=timedelta(minutes=5))
    await asyncio.sleep(4 * 60)
    assert await ns.queue_exists("temp")  # reading the description is not activity
    await asyncio.sleep(61)
    assert not await ns.queue_exists("temp")


async def test_ex14_auto_delete_minimum_is_5_minutes_and_bad_input_changes_nothing(ns):
    """EX-14: under 5 minutes is rejected with the value and the limit."""
    with pytest.raises(errors.InvalidArgument, match=r"auto_delete_on_idle is 0:04:59.*0:05:00"):
        await ns.create_queue(
            "temp", auto_delete_on_idle=timedelta(minutes=5) - timedelta(seconds=1)
        )
    assert not await ns.queue_exists("temp")


async def test_ex15_sends_receives_and_peeks_keep_a_queue_alive(ns):
    """EX-15: sends, receives, updates and peeks are activity for a queue."""
    await ns.create_queue("temp", auto_delete_on_idle=5 * MIN)
    async with ns.sender("temp") as sender, ns.receiver("temp") as receiver:
        await asyncio.sleep(4 * 60)
        await sender.send(Message(b"x"))
        await asyncio.sleep(4 * 60)
        await receiver.peek(1)
        await asyncio.sleep(4 * 60)
        await receiver.receive(max_wait=0)
        await asyncio.sleep(4 * 60)
        await ns.update_queue("temp", max_delivery_count=5)
        await asyncio.sleep(4 * 60)
        assert await ns.queue_exists("temp")
        await asyncio.sleep(2 * 60)
        assert not await ns.queue_exists("temp")


async def test_ex15_pending_scheduled_messages_keep_a_queue_alive(ns):
    """EX-15: a queue with scheduled messages is not idle."""
    await ns.create_queue("temp", auto_delete_on_idle=5 * MIN)
    async with ns.sender("temp") as sender:
        await sender.schedule(Message(b"x"), datetime.now(UTC) + timedelta(minutes=20))
    await asyncio.sleep(15 * 60)
    assert await ns.queue_exists("temp")


async def test_ex15_subscription_activity_keeps_its_topic_but_not_topic_sends_a_subscription(ns):
    """EX-15: subscription operations count for the topic; topic sends not for subscriptions."""
    await ns.create_topic("t", auto_delete_on_idle=5 * MIN)
    await ns.create_subscription("t", "s", auto_delete_on_idle=5 * MIN)
    await ns.create_subscription("t", "busy")
    async with ns.sender("t") as sender, ns.receiver("t/subscriptions/busy") as receiver:
        for _ in range(3):
            await asyncio.sleep(4 * 60)
            await receiver.peek(1)  # subscription activity: keeps the topic
            await sender.send(Message(b"x"))  # topic send: not activity for "s"
    assert await ns.topic_exists("t")
    assert not await ns.subscription_exists("t", "s")


async def test_ex16_a_forwarding_queue_never_becomes_idle(ns):
    """EX-16: auto-forwarding counts as having a receiver."""
    await ns.create_queue("dest")
    await ns.create_queue("fwd", auto_delete_on_idle=5 * MIN, forward_to="dest")
    await asyncio.sleep(60 * 60)
    assert await ns.queue_exists("fwd")


async def test_deleted_entity_fails_waiting_receivers(ns):
    await ns.create_queue("temp", auto_delete_on_idle=5 * MIN)
    async with ns.receiver("temp") as receiver:
        task = asyncio.create_task(receiver.receive(max_wait=timedelta(minutes=1)))
        await asyncio.sleep(0)
        await ns.delete_queue("temp")
        with pytest.raises(errors.EntityNotFound):
            await task


async def test_ex3_ex11_expiry_survives_a_long_timeline_while_locked(ns):
    """EX-3, EX-11: a message locked while its store's timeline is compacted still
    expires when its lock ends (the compaction keeps a locked message's expiry)."""
    await ns.create_queue("q", dead_lettering_on_message_expiration=True)
    await send(ns, "q", Message(b"first", time_to_live=timedelta(seconds=100)))
    async with ns.receiver("q") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        for _ in range(11):  # > 1024 timeline entries: compaction runs
            await send(ns, "q", *[Message(b"x", time_to_live=timedelta(hours=1))] * 100)
        await asyncio.sleep(10)
        await receiver.abandon(msg)
    await asyncio.sleep(200)
    (dead,) = await dead_letters(ns, "q")
    assert dead.body == b"first" and dead.dead_letter_reason == "TTLExpiredException"
