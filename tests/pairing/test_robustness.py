"""The pairing's actors under the conditions that used to break them (review findings)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message
from aiosb.pairing import Health, Signal

from .conftest import drain, options, syphon_options

pytestmark = pytest.mark.looptime



async def test_a_closed_primary_stops_the_syphon_without_touching_the_callers_task(env):
    paired = env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1))
    await paired.open()
    (path,) = paired.backlog_queues
    await env.primary.aclose()  # the PN-18 window: primary closed, secondary open
    async with env.secondary.sender(path) as sender:
        await sender.send(Message(b"x", application_properties={"x-ms-path": "orders"}))
    await asyncio.sleep(1)  # would raise CancelledError if a failing actor cancelled us
    assert asyncio.current_task().cancelling() == 0
    await paired.aclose()  # and closing reports nothing
    assert not paired._tasks


async def test_no_receive_outlives_the_pairing(env):
    """A long poll left running would lock messages nobody moves."""
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=2)) as paired:
        await asyncio.sleep(1)
        paths = list(paired.backlog_queues)
    await asyncio.sleep(0)
    assert not [
        t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Receiver.receive"
    ]
    async with env.secondary.sender(paths[0]) as sender:
        await sender.send(Message(b"after"))
    assert [m.body for m in await drain(env.secondary, paths[0])] == [b"after"]


async def test_a_backlog_queue_with_a_short_lock_is_renewed_at_its_own_pace(env):
    """PN-8: a queue found with another lock duration is used as it is; parked
    messages are renewed at half of that lock, not polled in a tight loop."""
    path = f"{env.primary.name}/x-servicebus-transfer/0"
    await env.secondary.create_queue(path, lock_duration=timedelta(seconds=20))
    renewals = 0
    settle = env.secondary.transport.settle

    async def counting(entity, settlement):
        nonlocal renewals
        renewals += settlement.action == "renew"
        return await settle(entity, settlement)

    env.secondary.transport.settle = counting
    opts = syphon_options(backlog_queue_count=1, ping_primary_interval=timedelta(minutes=30))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            await sender.send(Message(b"x"))
            await asyncio.sleep(600)
            assert 50 <= renewals <= 70  # every 10 s for 10 minutes
            assert paired.stats.syphon_receives < 100
            env.p_broker.faults.heal()
            paired.mark_healthy("orders")
            await asyncio.sleep(1)
    assert [m.body for m in await drain(env.primary, "orders")] == [b"x"]


async def test_backlog_queues_missing_at_open_are_created_when_needed(env):
    """PN-1: a secondary that was down when the pairing opened still gets its queues."""
    with env.s_broker.faults.fail():
        paired = env.primary.pair(env.secondary, options(failover_interval=timedelta(0)))
        await paired.open()
    try:
        assert not await env.secondary.list_queues()
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"x"))
        assert paired.stats.backlog_sends == 1
        assert len(await env.secondary.list_queues()) == 1
    finally:
        await paired.aclose()


async def test_a_failed_move_parks_the_rest_instead_of_sending_it(env):
    """PN-17: after one failed chunk nothing more goes to the entity that just failed."""
    attempts = 0
    send = env.primary.transport.send

    async def counting(entity, messages):
        nonlocal attempts
        if entity == "orders" and len(messages) > 1:
            attempts += 1
        await send(entity, messages)

    opts = syphon_options(backlog_queue_count=1, failover_interval=timedelta(minutes=5),
                          ping_primary_interval=timedelta(minutes=30))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            fault = env.p_broker.faults.fail("orders")
            paired._report(paired._entry("orders"), Signal.SEND_FAILED)
            await asyncio.sleep(300)  # failed over now
            for i in range(3):
                await sender.send([Message(f"{i}-{j}") for j in range(100)])
            env.primary.transport.send = counting
            paired.mark_healthy("orders")  # wrongly: the primary is still down
            await asyncio.sleep(0.5)
            assert attempts == 1
            assert paired.health("orders") is Health.SUSPECT
            fault.heal()
            await asyncio.sleep(5)
        assert paired.stats.syphon_moved == 300
    assert len(await drain(env.primary, "orders")) == 300
