"""Conformance: sessions (session receivers, locks, state, ordering, EX-12, EX-13)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiosb
from aiosb import NEXT_AVAILABLE_SESSION, Message, errors
from aiosb.emulator import FRAGMENT_SHIFT, TTL_EXPIRED

pytestmark = pytest.mark.looptime

LOCK = 30  # seconds: the session queues' lock duration


@pytest.fixture
async def sq(ns: aiosb.Namespace) -> str:
    await ns.create_queue(
        "sq",
        requires_session=True,
        lock_duration=timedelta(seconds=LOCK),
        dead_lettering_on_message_expiration=True,
    )
    return "sq"


async def send(ns: aiosb.Namespace, entity: str, *messages: Message) -> None:
    async with ns.sender(entity) as sender:
        await sender.send(list(messages))


async def test_a_session_receiver_gets_its_session_only_in_order(ns, sq):
    await send(
        ns, sq, *(Message(f"{s}{i}".encode(), session_id=s) for i in range(5) for s in ("a", "b"))
    )
    async with ns.receiver(sq, session_id="b") as receiver:
        assert receiver.session.session_id == "b"
        got = await receiver.receive(max_messages=10, max_wait=0)
        assert [m.body for m in got] == [b"b0", b"b1", b"b2", b"b3", b"b4"]
        assert {m.session_id for m in got} == {"b"}
        await receiver.complete(got)
    assert (await ns.runtime_properties(sq)).active_message_count == 5


async def test_session_entities_refuse_messages_and_receivers_without_a_session(ns, sq):
    with pytest.raises(errors.InvalidOperation, match="requires sessions"):
        await send(ns, sq, Message(b"no session"))
    async with ns.receiver(sq) as receiver:
        with pytest.raises(errors.InvalidOperation, match="session receiver"):
            await receiver.receive(max_wait=0)
    await ns.create_queue("plain")
    with pytest.raises(errors.InvalidOperation, match="not session-enabled"):
        async with ns.receiver("plain", session_id="a"):
            pass
    with pytest.raises(errors.InvalidOperation, match="not session-enabled"):
        ns.receiver(sq, session_id="a", sub_queue="deadletter")


async def test_next_available_session_skips_locked_and_empty_sessions(ns, sq):
    await send(ns, sq, Message(b"a", session_id="a"), Message(b"b", session_id="b"))
    async with ns.receiver(sq, session_id=NEXT_AVAILABLE_SESSION) as first:
        async with ns.receiver(sq, session_id=NEXT_AVAILABLE_SESSION) as second:
            assert {first.session_id, second.session_id} == {"a", "b"}
            (msg,) = await second.receive(max_wait=0)
            assert msg.session_id == second.session_id
            await second.complete(msg)


async def test_next_available_waits_for_a_session_then_times_out(ns, sq):
    loop = asyncio.get_running_loop()
    start = loop.time()
    receiver = ns.receiver(sq, session_id=NEXT_AVAILABLE_SESSION, session_wait=20)
    with pytest.raises(errors.OperationTimeout, match="No session"):
        await receiver.__aenter__()
    assert loop.time() - start == pytest.approx(20)
    loop.call_later(
        5, lambda: asyncio.ensure_future(send(ns, sq, Message(b"x", session_id="late")))
    )
    start = loop.time()
    async with ns.receiver(sq, session_id=NEXT_AVAILABLE_SESSION, session_wait=60) as receiver:
        assert receiver.session_id == "late"
        assert loop.time() - start == pytest.approx(5)


async def test_competing_receivers_for_one_session(ns, sq):
    """Only one receiver holds a session; the other can take it once it is released."""
    await send(ns, sq, Message(b"1", session_id="s"), Message(b"2", session_id="s"))
    async with ns.receiver(sq, session_id="s") as holder:
        with pytest.raises(errors.SessionCannotBeLocked, match="locked by another"):
            async with ns.receiver(sq, session_id="s"):
                pass
        (first,) = await holder.receive(max_wait=0)
        assert first.body == b"1"
    # closed: the lock is released and the unsettled message comes back
    async with ns.receiver(sq, session_id="s") as taker:
        got = await taker.receive(max_messages=5, max_wait=0)
        assert [(m.body, m.delivery_count) for m in got] == [(b"1", 2), (b"2", 1)]
        await taker.complete(got)


async def test_session_lock_expires_and_the_session_moves_on(ns, sq):
    await send(ns, sq, Message(b"1", session_id="s"))
    loop = asyncio.get_running_loop()
    async with ns.receiver(sq, session_id="s") as lost:
        (msg,) = await lost.receive(max_wait=0)
        assert msg.locked_until == lost.session.locked_until
        await asyncio.sleep(LOCK + 1)
        with pytest.raises(errors.SessionLockLost):
            await lost.complete(msg)
        with pytest.raises(errors.SessionLockLost):
            await lost.receive(max_wait=0)
        async with ns.receiver(sq, session_id="s") as other:
            (again,) = await other.receive(max_wait=0)
            assert again.delivery_count == 2
            await other.complete(again)
    start = loop.time()
    async with ns.receiver(sq, session_id="t") as waiting:  # an empty session can be held
        with pytest.raises(errors.SessionLockLost):
            await waiting.receive(max_wait=None)  # the lock ends during the long poll
        assert loop.time() - start == pytest.approx(LOCK)


async def test_renewing_the_session_lock_keeps_session_and_messages(ns, sq):
    await send(ns, sq, Message(b"1", session_id="s"))
    async with ns.receiver(sq, session_id="s") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        for _ in range(4):
            await asyncio.sleep(LOCK * 0.75)
            before = receiver.session.locked_until
            after = await receiver.session.renew_lock()
            gained = (after - before).total_seconds()
            assert gained == pytest.approx(LOCK * 0.75, abs=1e-3)
        with pytest.raises(errors.InvalidOperation, match="renew the session"):
            await receiver.renew_lock(msg)
        await receiver.complete(msg)  # still held after 3 lock durations
    assert (await ns.runtime_properties(sq)).active_message_count == 0


async def test_session_state_is_kept_with_the_session(ns, sq):
    async with ns.receiver(sq, session_id="cart-1") as receiver:
        assert await receiver.session.get_state() is None
        await receiver.session.set_state(b'{"items": 3}')
        with pytest.raises(errors.InvalidArgument):
            await receiver.session.set_state("not bytes")
    async with ns.receiver(sq, session_id="cart-1") as receiver:
        assert await receiver.session.get_state() == b'{"items": 3}'
        await receiver.session.set_state(None)
        assert await receiver.session.get_state() is None


async def test_defer_dead_letter_and_abandon_inside_a_session(ns, sq):
    await ns.update_queue(sq, max_delivery_count=2)
    await send(ns, sq, *(Message(str(i).encode(), session_id="s") for i in range(3)))
    async with ns.receiver(sq, session_id="s") as receiver:
        zero, one, two = await receiver.receive(max_messages=3, max_wait=0)
        await receiver.defer(zero)
        await receiver.dead_letter(one, reason="bad")
        await receiver.abandon(two)
        (again,) = await receiver.receive(max_wait=0)
        assert (again.body, again.delivery_count) == (b"2", 2)
        await receiver.abandon(again)  # max_delivery_count 2: dead-lettered
        (deferred,) = await receiver.receive_deferred(zero.sequence_number)
        await receiver.complete(deferred)
    async with ns.receiver(sq, sub_queue="deadletter") as dlq:  # not session-enabled
        dead = await dlq.receive(max_messages=5, max_wait=0)
        assert sorted((m.body, m.dead_letter_reason) for m in dead) == [
            (b"1", "bad"),
            (b"2", "MaxDeliveryCountExceeded"),
        ]


async def test_long_poll_in_a_session_wakes_for_that_session_only(ns, sq):
    loop = asyncio.get_running_loop()
    loop.call_later(2, lambda: asyncio.ensure_future(send(ns, sq, Message(b"o", session_id="o"))))
    loop.call_later(4, lambda: asyncio.ensure_future(send(ns, sq, Message(b"m", session_id="m"))))
    async with ns.receiver(sq, session_id="m") as receiver:
        start = loop.time()
        (msg,) = await receiver.receive(max_wait=LOCK - 1)
        assert (msg.body, loop.time() - start) == (b"m", pytest.approx(4))
        await receiver.complete(msg)


async def test_one_expired_message_expires_its_whole_session(ns, sq):
    """EX-12: with a listener there, every message of the session expires with it."""
    await send(
        ns,
        sq,
        Message(b"short", session_id="s", time_to_live=timedelta(seconds=10)),
        Message(b"long", session_id="s", time_to_live=timedelta(hours=1)),
        Message(b"other", session_id="t", time_to_live=timedelta(hours=1)),
    )
    async with ns.receiver(sq, session_id="t") as listener:  # a listener on the entity
        await asyncio.sleep(11)
        async with ns.receiver(sq, sub_queue="deadletter") as dlq:
            dead = await dlq.receive(max_messages=5, max_wait=0)
        assert sorted(m.body for m in dead) == [b"long", b"short"]
        assert {m.dead_letter_reason for m in dead} == {TTL_EXPIRED}
        (other,) = await listener.receive(max_wait=0)
        assert other.body == b"other"
        await listener.complete(other)


async def test_session_messages_expire_only_while_a_listener_is_there(ns, sq):
    """EX-13: without a receiver accepting sessions, nothing of a session expires; the
    first listener lets the due expiries happen."""
    await send(
        ns,
        sq,
        Message(b"a", session_id="s", time_to_live=timedelta(seconds=10)),
        Message(b"b", session_id="s"),
    )
    await asyncio.sleep(60)
    props = await ns.runtime_properties(sq)
    assert (props.active_message_count, props.dead_letter_message_count) == (2, 0)
    async with ns.receiver(sq, session_id="elsewhere"):
        props = await ns.runtime_properties(sq)
        assert (props.active_message_count, props.dead_letter_message_count) == (0, 2)


async def test_a_session_lives_in_one_fragment_of_a_partitioned_entity(ns):
    """PT-6: the session id is the partition key."""
    await ns.create_queue("psq", requires_session=True, enable_partitioning=True)
    sessions = [f"user-{i}" for i in range(6)]
    await send(ns, "psq", *(Message(b"x", session_id=s) for s in sessions for _ in range(4)))
    homes = set()
    for sid in sessions:
        async with ns.receiver("psq", session_id=sid) as receiver:
            got = await receiver.receive(max_messages=10, max_wait=0)
            assert len(got) == 4
            frags = {m.sequence_number >> FRAGMENT_SHIFT for m in got}
            assert len(frags) == 1
            homes |= frags
            await receiver.complete(got)
    assert len(homes) > 1


async def test_a_session_on_a_down_fragment_cannot_be_accepted(ns, broker, reconnect):
    await ns.create_queue("psq", requires_session=True, enable_partitioning=True)
    await send(ns, "psq", Message(b"x", session_id="s"))
    async with ns.receiver("psq", session_id="s") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        home = msg.sequence_number >> FRAGMENT_SHIFT
        await receiver.abandon(msg)
    async with reconnect(operation_timeout=1, retry_backoff=0.1) as short:
        with broker.faults.fail_fragment("psq", home, operations=["receive"]):
            with pytest.raises(errors.OperationTimeout) as info:
                async with short.receiver("psq", session_id="s"):
                    pass
            assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
            with pytest.raises(errors.OperationTimeout, match="No session"):
                async with short.receiver("psq", session_id=NEXT_AVAILABLE_SESSION, session_wait=1):
                    pass


async def test_session_subscriptions_of_a_topic(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "sessions", requires_session=True)
    await ns.create_subscription("t", "all")
    with pytest.raises(errors.InvalidOperation, match="requires sessions"):
        await send(ns, "t", Message(b"no session"))
    await send(ns, "t", Message(b"x", session_id="s"))
    async with ns.receiver("t/subscriptions/sessions", session_id="s") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        await receiver.complete(msg)
    async with ns.receiver("t/subscriptions/all") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        assert msg.session_id == "s"
