"""The syphon and an entity down for long (PN-17, G-2): what it parks past its limit it
leaves deferred in the backlog queue, so that what waits behind moves home; the deferred
come home when their entity does, and an earlier run's are found by the next."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message
from aiosb.pairing import Health

from .conftest import drain, syphon_options

pytestmark = pytest.mark.looptime


def another_entity_is_healthy(paired) -> None:
    """Make invoices known and healthy: the syphon defers what it parked only when some
    other entity may take messages (else, all down, it waits for a recovery)."""
    paired.mark_healthy("invoices")


async def test_pn17_with_every_entity_down_the_syphon_waits_and_defers_nothing(env):
    """PN-17: orders, the only entity, is down: past the park limit the syphon waits for
    a recovery rather than read the whole backlog to defer it (nothing could move)."""
    settled = []
    settle = env.secondary.transport.settle

    async def counted(entity, settlement):
        settled.append(settlement.action)
        return await settle(entity, settlement)

    env.secondary.transport.settle = counted
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        async with paired.sender("orders") as orders:
            env.p_broker.faults.fail("orders")
            for i in range(30):
                await orders.send([Message(f"o{i}-{j}") for j in range(100)])
            await asyncio.sleep(60)
            assert "defer" not in settled
            receives = paired.stats.syphon_receives
            await asyncio.sleep(600)
            assert paired.stats.syphon_receives - receives <= 1  # one long poll at most
            env.p_broker.faults.heal()
            paired.mark_healthy("orders")
            await asyncio.sleep(5)
        assert paired.stats.syphon_moved == 3000
    assert "defer" not in settled


async def test_pn17_an_entity_down_for_long_does_not_hold_up_the_others(env):
    """PN-17: 1,100 messages for orders (down for good) fill the syphon's park (1,000)
    of the one backlog queue; invoices, back after a short outage, still gets its
    message home within seconds. When orders comes back, its messages follow, every one
    once; one whose time ran out while deferred is dead-lettered in the backlog."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        (queue,) = paired.backlog_queues
        async with paired.sender("orders") as orders, paired.sender("invoices") as invoices:
            env.p_broker.faults.fail("orders")  # down for good
            await orders.send(Message(b"short", time_to_live=timedelta(minutes=5)))
            for i in range(11):
                await orders.send([Message(f"o{i}-{j}") for j in range(100)])
            with env.p_broker.faults.fail("invoices"):
                await invoices.send(Message(b"i", message_id="inv-1"))
            await asyncio.sleep(60)
            assert paired.health("invoices") is Health.HEALTHY
            assert [m.message_id for m in await drain(env.primary, "invoices")] == ["inv-1"]
            await asyncio.sleep(10 * 60)  # the short one's five minutes pass, deferred
            dead = await drain(env.secondary, queue, sub_queue="deadletter")
            assert [(m.body, m.dead_letter_reason) for m in dead] == [
                (b"short", "TTLExpiredException")
            ]
            env.p_broker.faults.heal()
            paired.mark_healthy("orders")
            await asyncio.sleep(5)
        assert paired.stats.syphon_moved == 1100 + 1
    bodies = [m.body for m in await drain(env.primary, "orders")]
    assert sorted(bodies) == sorted(f"o{i}-{j}".encode() for i in range(11) for j in range(100))
    assert await drain(env.secondary, queue) == []


async def test_pn17_a_new_syphon_finds_what_an_earlier_one_deferred(env):
    """PN-17: a pairing closed while messages wait deferred in its backlog queue (its
    entity still down) leaves them there; the next pairing's syphon finds them (they
    cannot be received but by number) and moves them home once the entity is back,
    with the parked ones the close gave back."""
    opts = syphon_options(backlog_queue_count=1)
    async with env.primary.pair(env.secondary, opts) as paired:
        another_entity_is_healthy(paired)
        async with paired.sender("orders") as orders:
            env.p_broker.faults.fail("orders")
            for i in range(11):
                await orders.send([Message(f"{i}-{j}") for j in range(100)])
            await asyncio.sleep(60)
    env.p_broker.faults.heal()
    async with env.primary.pair(env.secondary, opts) as paired:
        await asyncio.sleep(5)
        # The deferred, found; and the 100 parked at the close, given back by it (PN-17).
        assert paired.stats.syphon_moved == 1100
    assert len({m.body for m in await drain(env.primary, "orders")}) == 1100


async def test_pn17_one_taken_back_whose_lock_ends_is_found_deferred_again(env):
    """PN-17: 1,000 deferred for orders; orders is marked healthy but is still down, so
    500 are taken back by number, fail to move and are parked; then the backlog queue
    blinks for 70 s, their renewals fail and their locks end. The queue keeps such a
    message deferred (not available): the syphon searches for it again, and all 1,000
    reach orders once everything heals."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        (queue,) = paired.backlog_queues
        another_entity_is_healthy(paired)
        async with paired.sender("orders") as orders:
            env.p_broker.faults.fail("orders")
            for i in range(10):
                await orders.send([Message(f"o{i}-{j}") for j in range(100)])
            await asyncio.sleep(60)  # 1,000 parked, then deferred
            paired.mark_healthy("orders")  # 500 taken back, their move fails: parked
            await asyncio.sleep(5)
            with env.s_broker.faults.fail(queue, operations=["receive"]):
                await asyncio.sleep(70)  # renewals fail; the locks end
            env.p_broker.faults.heal()
            paired.mark_healthy("orders")
            await asyncio.sleep(120)
    assert len({m.body for m in await drain(env.primary, "orders")}) == 1000
    assert await drain(env.secondary, queue) == []


@pytest.mark.looptime(False)
@pytest.mark.timeout(60)
async def test_pn16_with_only_deferred_messages_the_syphon_long_polls(env):
    """PN-16: a move for orders fails (an outage: a retry is set, then orders fails
    over) and its 1,000 parked messages are deferred. With nothing parked the syphon
    still long-polls: a retry of an entity failed over is never due (it waits for a
    recovery), so it must not make the poll's wait nothing. Real time: a busy loop
    would never let a fast-forwarded clock move."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        another_entity_is_healthy(paired)
        async with paired.sender("orders") as orders:
            env.p_broker.faults.fail("orders")  # down for good
            for i in range(10):
                await orders.send([Message(f"o{i}-{j}") for j in range(100)])
            paired.mark_healthy("orders")  # the syphon tries, fails, orders fails over
            await asyncio.sleep(3)  # the retry interval (1 s) passes
            assert paired.health("orders") is not Health.HEALTHY
            before = paired.stats.syphon_receives
            await asyncio.sleep(2)
            assert paired.stats.syphon_receives - before < 5


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_taking_back_the_deferred_yields_to_the_application_between_batches(env):
    """The syphon yields to the application's tasks between batches (docs/pairing.md): taking
    40,000 deferred messages back and moving them too, not in one turn of the loop."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        another_entity_is_healthy(paired)
        async with paired.sender("orders") as orders:
            env.p_broker.faults.fail("orders")
            for i in range(400):
                await orders.send([Message(f"o{i}-{j}") for j in range(100)])
            await asyncio.sleep(3)  # parked, then deferred
            turns = 0
            most = 0

            async def ticks() -> None:
                nonlocal turns
                while True:
                    await asyncio.sleep(0)
                    turns += 1

            ticker = asyncio.create_task(ticks())
            env.p_broker.faults.heal()
            paired.mark_healthy("orders")
            while paired.stats.syphon_moved < 40_000:
                seen = paired.stats.syphon_moved
                await asyncio.sleep(0)
                most = max(most, paired.stats.syphon_moved - seen)
            ticker.cancel()
            assert turns > 40_000 // 500  # a turn of the loop at least per batch
            assert most <= 1000  # never more than a batch or two between two turns
