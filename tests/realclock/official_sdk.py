"""Issue 33: what only real time shows, with the official Python SDK (aio and sync)
against ``aiosb serve`` on the wall clock: ``AutoLockRenewer`` holding messages and a
session for more than two lock durations (the session while a receive waits in it, as
the SDK's own sample does), scheduled messages that become active at their time (not
before, not more than a second after) and can be cancelled until then, lock renewal,
session state across renewals, and expiry by time to live (EX-3, EX-5, EX-10)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from aiosb.server.process import ServerProcess

from .conftest import LOCK, SKEW, create_queue, create_queue_sync

pytest.importorskip("azure.servicebus")

from azure.servicebus import (
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import AutoLockRenewer as AsyncAutoLockRenewer
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import MessageNotFoundError

HOLD = 2 * LOCK + 2  # seconds: held past two lock durations
pytestmark = pytest.mark.timeout(90)


def lock_left(until: datetime | None) -> float:
    assert until is not None
    return until.timestamp() - time.time()


# -- AutoLockRenewer ----------------------------------------------------------------------


async def test_auto_lock_renewer_holds_messages_past_two_lock_durations_aio(
    server: ServerProcess, connection: str
):
    queue = await create_queue(server)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        async with client.get_queue_receiver(queue, prefetch_count=3) as receiver:
            got = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
            assert len(got) == 3
            for msg in got:  # a fresh lock reaches the SDK whole
                assert lock_left(msg.locked_until_utc) == pytest.approx(LOCK, abs=0.5)
            async with AsyncAutoLockRenewer() as renewer:
                for msg in got:
                    renewer.register(receiver, msg, max_lock_renewal_duration=HOLD + 10)
                await asyncio.sleep(HOLD)
                for msg in got:
                    assert 0 < lock_left(msg.locked_until_utc) <= LOCK + SKEW
                    await receiver.complete_message(msg)
            assert await receiver.receive_messages(max_message_count=3, max_wait_time=1) == []


def test_auto_lock_renewer_holds_messages_past_two_lock_durations_sync(
    server: ServerProcess, connection: str
):
    queue = create_queue_sync(server)
    with ServiceBusClient.from_connection_string(connection) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        with client.get_queue_receiver(queue, prefetch_count=3) as receiver:
            got = receiver.receive_messages(max_message_count=3, max_wait_time=5)
            assert len(got) == 3
            with AutoLockRenewer() as renewer:
                for msg in got:
                    renewer.register(receiver, msg, max_lock_renewal_duration=HOLD + 10)
                time.sleep(HOLD)
                for msg in got:
                    assert 0 < lock_left(msg.locked_until_utc) <= LOCK + SKEW
                    receiver.complete_message(msg)
            assert receiver.receive_messages(max_message_count=3, max_wait_time=1) == []


async def test_auto_lock_renewer_holds_a_session_while_a_receive_waits_in_it_aio(
    server: ServerProcess, connection: str
):
    """The SDK's auto_lock_renew sample's session half: the session lock is renewed
    from another task while a receive waits in the session, past the lock's end."""
    queue = await create_queue(server, requires_session=True)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(
                [ServiceBusMessage(f"s{i}", session_id="S") for i in range(3)]
            )
        async with client.get_queue_receiver(queue, session_id="S",
                                             prefetch_count=3) as receiver:
            async with AsyncAutoLockRenewer() as renewer:
                renewer.register(receiver, receiver.session,
                                 max_lock_renewal_duration=HOLD + 10)
                got = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
                assert [str(m) for m in got] == ["s0", "s1", "s2"]
                started = time.time()
                rest = await receiver.receive_messages(max_message_count=1,
                                                       max_wait_time=HOLD)
                assert rest == []
                assert time.time() - started >= HOLD - 1  # it did wait across the lock's end
                assert 0 < lock_left(receiver.session.locked_until_utc) <= LOCK + SKEW
                for msg in got:
                    await receiver.complete_message(msg)


def test_auto_lock_renewer_holds_a_session_while_a_receive_waits_in_it_sync(
    server: ServerProcess, connection: str
):
    queue = create_queue_sync(server, requires_session=True)
    with ServiceBusClient.from_connection_string(connection) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"s{i}", session_id="S") for i in range(3)])
        with client.get_queue_receiver(queue, session_id="S", prefetch_count=3) as receiver:
            with AutoLockRenewer() as renewer:
                renewer.register(receiver, receiver.session,
                                 max_lock_renewal_duration=HOLD + 10)
                got = receiver.receive_messages(max_message_count=3, max_wait_time=5)
                assert [str(m) for m in got] == ["s0", "s1", "s2"]
                assert receiver.receive_messages(max_message_count=1,
                                                 max_wait_time=HOLD) == []
                for msg in got:
                    receiver.complete_message(msg)


# -- scheduling -------------------------------------------------------------------------


async def test_a_scheduled_message_becomes_active_at_its_time_and_is_cancellable_until_then_aio(
    server: ServerProcess, connection: str
):
    queue = await create_queue(server)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            at = datetime.now(UTC) + timedelta(seconds=4)
            kept, cancelled = await sender.schedule_messages(
                [ServiceBusMessage("kept"), ServiceBusMessage("cancelled")], at
            )
            await asyncio.sleep(3)
            await sender.cancel_scheduled_messages(cancelled)  # a second before its time
        async with client.get_queue_receiver(queue) as receiver:
            (peeked,) = await receiver.peek_messages(max_message_count=5)
            assert peeked.sequence_number == kept  # the cancelled one is gone
            got = await receiver.receive_messages(max_message_count=5, max_wait_time=5)
            arrived = time.time()
            assert [str(m) for m in got] == ["kept"]
            late = arrived - at.timestamp()
            assert -SKEW <= late <= 1.0, f"active {late:+.3f} s from its time"
            assert got[0].enqueued_time_utc.timestamp() == pytest.approx(at.timestamp(),
                                                                         abs=0.001)
            await receiver.complete_message(got[0])
    # Active now, it is no longer scheduled: there is nothing to cancel. (The SDK retries
    # a message-not-found of a management request: not here.)
    async with AsyncServiceBusClient.from_connection_string(connection,
                                                            retry_total=0) as client:
        async with client.get_queue_sender(queue) as sender:
            with pytest.raises(MessageNotFoundError):
                await sender.cancel_scheduled_messages(kept)


def test_a_scheduled_message_becomes_active_at_its_time_and_is_cancellable_until_then_sync(
    server: ServerProcess, connection: str
):
    queue = create_queue_sync(server)
    with ServiceBusClient.from_connection_string(connection) as client:
        with client.get_queue_sender(queue) as sender, \
                client.get_queue_receiver(queue) as receiver:
            at = datetime.now(UTC) + timedelta(seconds=4)
            kept, cancelled = sender.schedule_messages(
                [ServiceBusMessage("kept"), ServiceBusMessage("cancelled")], at
            )
            assert receiver.receive_messages(max_message_count=5, max_wait_time=2) == []
            sender.cancel_scheduled_messages(cancelled)  # two seconds before its time
            got = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            arrived = time.time()
            assert [(str(m), m.sequence_number) for m in got] == [("kept", kept)]
            late = arrived - at.timestamp()
            assert -SKEW <= late <= 1.0, f"active {late:+.3f} s from its time"
            receiver.complete_message(got[0])


# -- locks, session state, expiry ---------------------------------------------------------


async def test_renewing_a_lock_extends_it_from_now_and_outlives_the_first(
    server: ServerProcess, connection: str
):
    queue = await create_queue(server)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage("held"))
        async with client.get_queue_receiver(queue) as receiver:
            (msg,) = await receiver.receive_messages(max_wait_time=5)
            assert lock_left(msg.locked_until_utc) == pytest.approx(LOCK, abs=0.5)
            for _ in range(3):  # 9 s in all: past the first lock and the second
                await asyncio.sleep(LOCK * 0.6)
                until = await receiver.renew_message_lock(msg)
                assert lock_left(until) == pytest.approx(LOCK, abs=0.5)
            await receiver.complete_message(msg)


async def test_a_lock_not_renewed_ends_at_its_time(server: ServerProcess, connection: str):
    queue = await create_queue(server)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage("let go"))
        async with client.get_queue_receiver(queue) as receiver:
            (msg,) = await receiver.receive_messages(max_wait_time=5)
            until = msg.locked_until_utc
            assert until is not None
            again = await receiver.receive_messages(max_wait_time=LOCK + 2)
            back = time.time()
            assert [m.delivery_count for m in again] == [1]
            assert -SKEW <= back - until.timestamp() <= 1.0
            await receiver.complete_message(again[0])


async def test_session_state_survives_renewals_past_two_lock_durations(
    server: ServerProcess, connection: str
):
    queue = await create_queue(server, requires_session=True)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_receiver(queue, session_id="kept") as receiver:
            session = receiver.session
            await session.set_state(b"step 1")
            for step in range(2, 6):  # 12 s in all
                await asyncio.sleep(LOCK * 0.6)
                until = await session.renew_lock()
                assert lock_left(until) == pytest.approx(LOCK, abs=0.5)
                assert await session.get_state() == f"step {step - 1}".encode()
                await session.set_state(f"step {step}".encode())
        async with client.get_queue_receiver(queue, session_id="kept") as again:
            assert await again.session.get_state() == b"step 5"


async def test_messages_expire_by_their_time_to_live(server: ServerProcess, connection: str):
    queue = await create_queue(server, dead_lettering_on_message_expiration=True)
    ttl = timedelta(seconds=2)
    async with AsyncServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage("brief", time_to_live=ttl),
                                        ServiceBusMessage("lasting")])
        async with client.get_queue_receiver(queue) as receiver:
            peeked = await receiver.peek_messages(max_message_count=5)
            assert [str(m) for m in peeked] == ["brief", "lasting"]  # not yet expired
            brief = peeked[0]
            expires = brief.expires_at_utc
            assert expires == brief.enqueued_time_utc + ttl
            await asyncio.sleep(max(0.0, expires.timestamp() - time.time() - 0.3))
            peeked = await receiver.peek_messages(max_message_count=5,
                                                  sequence_number=brief.sequence_number)
            assert [str(m) for m in peeked] == ["brief", "lasting"]  # not early either
            await asyncio.sleep(max(0.0, expires.timestamp() - time.time()) + 0.5)
            got = await receiver.receive_messages(max_message_count=5, max_wait_time=1)
            assert [str(m) for m in got] == ["lasting"]
            await receiver.complete_message(got[0])
        async with client.get_queue_receiver(
            queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
        ) as dead:
            (gone,) = await dead.receive_messages(max_wait_time=5)
    assert str(gone) == "brief"
    assert gone.dead_letter_reason == "TTLExpiredException"
