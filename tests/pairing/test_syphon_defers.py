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
    cannot be received but by number) and moves them home once the entity is back."""
    opts = syphon_options(backlog_queue_count=1)
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as orders:
            env.p_broker.faults.fail("orders")
            for i in range(11):
                await orders.send([Message(f"{i}-{j}") for j in range(100)])
            await asyncio.sleep(60)
    env.p_broker.faults.heal()
    async with env.primary.pair(env.secondary, opts) as paired:
        await asyncio.sleep(5)
        assert paired.stats.syphon_moved == 1000  # the deferred, found
        await asyncio.sleep(60)  # the 100 parked at the close come back as their locks end
        assert paired.stats.syphon_moved == 1100
    assert len({m.body for m in await drain(env.primary, "orders")}) == 1100
