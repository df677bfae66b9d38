"""The syphon and time: what waits in it (parked for an entity still down, the rest of a
move through a slow primary, a move refused for a credential) keeps its expiry and its
locks (G-2, G-3, PN-16, PN-17)."""

from __future__ import annotations

import asyncio
import collections
from datetime import timedelta

import pytest

from aiosb import Message, errors
from aiosb._clock import CLOCK

from .conftest import drain, syphon_options

pytestmark = pytest.mark.looptime


async def test_g2_a_parked_message_whose_time_runs_out_is_dead_lettered_in_the_backlog(env):
    """G-2: a message parked for an entity that stays down is locked by the syphon, so
    the backlog queue cannot expire it; the syphon dead-letters it there itself
    (TTLExpiredException) when its time runs out, not once the entity is back."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        (queue,) = paired.backlog_queues
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")  # down for good
            await sender.send(Message(b"x", time_to_live=timedelta(seconds=130), message_id="m1"))
            await sender.send(Message(b"y", message_id="m2"))  # no time to live: waits
            await asyncio.sleep(130 + 1)  # between two renewals of the lock (every 30 s)
            dead = await drain(env.secondary, queue, sub_queue="deadletter")
            assert [(m.message_id, m.dead_letter_reason) for m in dead] == [
                ("m1", "TTLExpiredException")
            ]
            assert paired.stats.syphon_dead_lettered == 1
            await asyncio.sleep(30 * 60)  # m2 stays parked, its lock renewed
            assert await drain(env.secondary, queue, sub_queue="deadletter") == []
        env.p_broker.faults.heal()
        paired.mark_healthy("orders")
        await asyncio.sleep(1)
    assert [m.message_id for m in await drain(env.primary, "orders")] == ["m2"]


async def test_g3_a_move_through_a_slow_primary_keeps_the_rest_of_its_batch_locked(env):
    """G-3: 100 messages of 100 KB move in chunks that fit the primary's limit; at 2 s a
    send the move outlasts the backlog's 60 s lock. The locks of what is left are renewed
    on the way, so no message is received again and moved twice."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        events = paired.events()
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                for i in range(100):
                    await sender.send(Message(b"x" * 100_000, message_id=f"m{i}"))
            with env.p_broker.faults.delay("orders", 2, operations=["send"]):
                paired.mark_healthy("orders")
                await asyncio.sleep(15 * 60)
        assert paired.stats.syphon_moved == 100
    assert not [e async for e in events if e.kind == "syphon_failed"]
    ids = collections.Counter(m.message_id for m in await drain(env.primary, "orders"))
    assert len(ids) == 100 and set(ids.values()) == {1}


async def test_g2_each_chunk_of_a_slow_move_leaves_with_the_time_to_live_then_left(env):
    """G-2: four 200 KB messages move one per chunk through a primary that takes 5 s a
    send. Each leaves with the time to live left when it is sent, so each expires on
    the primary when it would have (only its own send's 5 s later), not 5 s later per
    chunk before it."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                sent_at = CLOCK.now()
                for _ in range(4):
                    await sender.send(Message(b"x" * 200_000, time_to_live=timedelta(minutes=10)))
            with env.p_broker.faults.delay("orders", 5, operations=["send"]):
                paired.mark_healthy("orders")
                await asyncio.sleep(60)
        assert paired.stats.syphon_moved == 4
    async with env.primary.receiver("orders") as receiver:
        moved = await receiver.peek(10)
    assert [round(m.expires_timestamp - sent_at - 600) for m in moved] == [5, 5, 5, 5]


async def test_pn16_a_move_refused_for_a_credential_is_retried_not_dead_lettered(env):
    """PN-16: a move the primary refuses as Unauthorized (a token that expired, a key
    rotated) is retried after the syphon retry interval; a message acknowledged to the
    application is never dead-lettered for it, and arrives once the credential works."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        (queue,) = paired.backlog_queues
        events = paired.events()
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"x", message_id="m"))
            send = env.primary.transport.send

            async def unauthorized(entity, messages):
                raise errors.Unauthorized("the token expired")

            env.primary.transport.send = unauthorized
            paired.mark_healthy("orders")
            await asyncio.sleep(5)
            assert paired.stats.syphon_moved == 0
            env.primary.transport.send = send  # the credential works again
            await asyncio.sleep(2)
        assert paired.stats.syphon_moved == 1
        assert paired.stats.syphon_dead_lettered == 0
    failed = [e async for e in events if e.kind == "syphon_failed"]
    assert failed and all("Unauthorized" in e.detail or "token" in e.detail for e in failed)
    assert await drain(env.secondary, queue, sub_queue="deadletter") == []
    assert [m.message_id for m in await drain(env.primary, "orders")] == ["m"]


async def test_pn17_what_is_parked_is_given_back_when_the_pairing_closes(env):
    """PN-17: parked messages are held locked while the pairing runs; when it closes they
    are given back (abandoned), so the next syphon of the queue, here a new pairing's,
    moves them at once instead of after the backlog's 60 s lock."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        (queue,) = paired.backlog_queues
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            await sender.send(Message(b"x", message_id="m1"))
            await asyncio.sleep(5)
            async with env.secondary.receiver(queue) as other:
                assert await other.receive(max_wait=0) == []  # parked: locked by the syphon
    env.p_broker.faults.heal()
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as again:
        assert again.backlog_queues == [queue]
        await asyncio.sleep(2)  # far less than the lock
        assert again.stats.syphon_moved == 1
    assert [m.message_id for m in await drain(env.primary, "orders")] == ["m1"]


async def test_pn17_a_recovery_while_a_long_polls_answer_is_on_its_way_loses_nothing(env):
    """PN-17: a recovery wakes the syphon out of its long poll to move what it parked. A
    poll whose answer is already on its way (over a network, the broker has locked its
    messages and is sending them back) is not dropped then: its messages are moved with
    the rest, not left locked for nobody until the backlog's 60 s lock ends.

    (A cancelled receive over HTTP loses the answer it was sent: the explorer's failover
    test saw its backlog drain exactly a lock's minute after the heal, now and then.)"""
    transport = env.secondary.transport
    receive = transport.receive

    async def answered_over_a_network(entity, request):
        got = await receive(entity, request)
        if got:
            await asyncio.sleep(0.2)  # the answer's way back; its messages are locked
        return got

    transport.receive = answered_over_a_network
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        async with paired.sender("orders") as sender:
            fault = env.p_broker.faults.fail("orders")
            await sender.send(Message(b"a", message_id="m1"))  # failed over at once
            await asyncio.sleep(1)  # the syphon took m1 and parked it
            assert paired.stats.syphon_moved == 0
            await sender.send(Message(b"b", message_id="m2"))  # the long poll takes it
            await asyncio.sleep(0.1)  # m2's answer is on its way when the entity is back
            fault.heal()
            paired.mark_healthy("orders")
            await asyncio.sleep(5)  # far less than the lock
            assert paired.stats.syphon_moved == 2
    assert sorted(m.message_id for m in await drain(env.primary, "orders")) == ["m1", "m2"]
