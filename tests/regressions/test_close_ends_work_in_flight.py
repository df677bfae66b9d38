"""Issue 18, items 7 and 8: closing ends every operation in flight, with ClientClosed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions, emulator, errors
from aiosb.server.http import serve

pytestmark = pytest.mark.looptime


async def test_a_receive_waiting_for_ever_ends_when_its_receiver_closes():
    async with aiosb.connect("memory://c1") as ns:
        await ns.create_queue("q")
        receiver = ns.receiver("q")
        waiting = asyncio.create_task(receiver.receive(max_wait=None))
        await asyncio.sleep(1)
        await receiver.aclose()
        with pytest.raises(errors.ClientClosed):
            await asyncio.wait_for(waiting, 1)


async def test_a_receive_waiting_for_ever_ends_when_its_namespace_closes():
    ns = aiosb.connect("memory://c2")
    await ns.open()
    await ns.create_queue("q")
    waiting = asyncio.create_task(ns.receiver("q").receive(max_wait=None))
    await asyncio.sleep(1)
    await ns.aclose()
    with pytest.raises(errors.ClientClosed):
        await asyncio.wait_for(waiting, 1)


@pytest.mark.looptime(False)
async def test_http_sends_in_flight_at_close_raise_client_closed_not_cancelled():
    async with serve() as server:
        ns = aiosb.connect(server.namespace_url("c3"))
        await ns.open()
        await ns.create_queue("q")
        await ns.transport.faults.delay("q", 5, operations=["send"])
        sends = [asyncio.create_task(ns.sender("q").send(Message(b"x"))) for _ in range(5)]
        await asyncio.sleep(0.2)
        await ns.aclose()
        results = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 5)
        assert all(isinstance(r, errors.ClientClosed) for r in results), results


async def test_a_callers_own_cancellation_stays_a_cancellation():
    async with aiosb.connect("memory://c4") as ns:
        await ns.create_queue("q")
        async with ns.receiver("q") as receiver:
            waiting = asyncio.create_task(receiver.receive(max_wait=None))
            await asyncio.sleep(1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting


async def test_a_paired_send_waiting_out_the_failover_interval_ends_at_close():
    async with aiosb.connect("memory://p5") as primary, aiosb.connect("memory://s5") as secondary:
        await primary.create_queue("q")
        options = PairedNamespaceOptions(backlog_queue_count=1,
                                         failover_interval=timedelta(seconds=60))
        emulator.namespace("p5").faults.fail("q")
        paired = primary.pair(secondary, options)
        await paired.open()
        sending = asyncio.create_task(paired.sender("q").send(Message(b"late")))
        await asyncio.sleep(5)
        await paired.aclose()
        with pytest.raises(errors.ClientClosed):
            await asyncio.wait_for(sending, 1)
        emulator.namespace("p5").faults.heal()
        await asyncio.sleep(120)  # nothing lands later
        assert (await primary.runtime_properties("q")).active_message_count == 0
