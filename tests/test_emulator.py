"""The embedded emulator's own behaviour: sharing, lifetime, timers, tiers, quotas."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, emulator, errors

pytestmark = pytest.mark.looptime


async def test_two_connects_to_one_name_share_the_namespace():
    async with aiosb.connect("memory://shared") as a, aiosb.connect("memory://SHARED") as b:
        await a.create_queue("q")
        async with a.sender("q") as sender:
            await sender.send(Message(b"x"))
        async with b.receiver("q") as receiver:
            assert len(await receiver.receive(max_wait=0)) == 1
    assert emulator.namespace("shared") is emulator.namespace("Shared")


async def test_state_outlives_connections_until_reset():
    async with aiosb.connect("memory://keep") as ns:
        await ns.create_queue("q")
    async with aiosb.connect("memory://keep") as ns:
        assert await ns.queue_exists("q")
    emulator.reset()
    async with aiosb.connect("memory://keep") as ns:
        assert not await ns.queue_exists("q")


async def test_timer_runs_only_while_a_connection_is_open_and_nothing_is_left_running():
    broker = emulator.namespace("timers")
    before = asyncio.all_tasks()
    async with aiosb.connect("memory://timers") as ns:
        await ns.create_queue("q", dead_lettering_on_message_expiration=True)
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x", time_to_live=timedelta(seconds=30)))
        assert broker._handle is not None
    assert broker._handle is None
    assert asyncio.all_tasks() == before
    # Time passes with no connection; the next operation still sees exact state.
    await asyncio.sleep(31)
    async with aiosb.connect("memory://timers") as ns:
        counts = await ns.runtime_properties("q")
        assert (counts.active_message_count, counts.dead_letter_message_count) == (0, 1)


async def test_timer_fires_expiry_in_the_background_without_any_operation():
    broker = emulator.namespace("background")
    async with aiosb.connect("memory://background") as ns:
        await ns.create_queue("q", dead_lettering_on_message_expiration=True)
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x", time_to_live=timedelta(seconds=30)))
        await asyncio.sleep(31)
        # Read the store directly: the timer, not an operation, moved the message.
        entity = broker._entities["q"]
        assert len(entity.fragments[0].records) == 0 and len(entity.dlqs[0].records) == 1


async def test_lock_timeline_stays_bounded_under_many_completions():
    broker = emulator.namespace("bounded")
    async with aiosb.connect("memory://bounded") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            for _ in range(100):
                await sender.send([Message(b"x") for _ in range(100)])
                await receiver.complete(await receiver.receive(max_messages=100, max_wait=0))
        store = broker._entities["q"].fragments[0]
        assert len(store.timeline) <= 2 * 1024 + 100
        assert store.records == {} and store.locked == {}


async def test_a_namespace_serves_one_event_loop_at_a_time():
    async with aiosb.connect("memory://oneloop"):
        errors_seen = []

        def other_thread():
            async def use():
                async with aiosb.connect("memory://oneloop"):
                    pass

            try:
                asyncio.run(use())
            except errors.InvalidOperation as exc:
                errors_seen.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert errors_seen and "another event loop" in str(errors_seen[0])


async def test_premium_tier_takes_larger_messages():
    async with aiosb.connect("memory://prem", tier="premium") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x" * 500_000))
            with pytest.raises(errors.MessageSizeExceeded, match="premium"):
                await sender.send(Message(b"x" * (1024 * 1024 + 1)))


def test_a_namespace_cannot_change_tier():
    emulator.namespace("fixed", tier="standard")
    with pytest.raises(errors.InvalidOperation, match="standard"):
        emulator.namespace("fixed", tier="premium")


@pytest.mark.parametrize("name", ["", "1abc", "has_underscore", "x" * 51])
def test_bad_namespace_names(name):
    with pytest.raises(errors.InvalidArgument, match="namespace name"):
        emulator.namespace(name)


async def test_partitioned_size_is_reported_as_16_times_on_standard():
    """PT-4: a partitioned standard entity reports 16 x its size as its maximum."""
    async with aiosb.connect("memory://sizes") as ns:
        queue = await ns.create_queue("q", enable_partitioning=True, max_size_in_megabytes=5120)
        assert queue.max_size_in_megabytes == 16 * 5120
        updated = await ns.update_queue(queue, max_delivery_count=4)
        assert updated.max_size_in_megabytes == 16 * 5120


async def test_full_queue_is_quota_exceeded_and_keeps_its_messages():
    async with aiosb.connect("memory://full") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send(Message(b"kept"))
            entity = emulator.namespace("full")._entities["q"]
            entity.bytes = 1024 * 1024 * 1024 - 10  # pretend the gigabyte is nearly used
            with pytest.raises(errors.QuotaExceeded, match="is full"):
                await sender.send(Message(b"x" * 100))
        assert (await ns.runtime_properties("q")).active_message_count == 1


async def test_entity_quota_of_partitioned_entities_on_standard():
    """PT-5: at most 100 partitioned entities per standard namespace."""
    async with aiosb.connect("memory://quota") as ns:
        for i in range(100):
            await ns.create_queue(f"p{i}", enable_partitioning=True)
        with pytest.raises(errors.QuotaExceeded, match="100 partitioned"):
            await ns.create_topic("one-more", enable_partitioning=True)
        await ns.create_queue("plain")


async def test_clock_never_goes_backwards_when_the_loop_time_resets(monkeypatch):
    broker = emulator.namespace("clock")
    first = broker.clock.now()
    loop = asyncio.get_running_loop()
    real = loop.time
    monkeypatch.setattr(loop, "time", lambda: real() - 1000)  # the loop's time jumped back
    assert broker.clock.now() >= first
    later = broker.clock.now()
    monkeypatch.setattr(loop, "time", lambda: real() - 990)  # and runs on from there
    assert broker.clock.now() == pytest.approx(later + 10, abs=0.5)


async def test_disabled_entity_refuses_sends():
    async with aiosb.connect("memory://disabled") as ns:
        await ns.create_queue("q", status="SendDisabled")
        async with ns.sender("q") as sender:
            with pytest.raises(errors.EntityUnavailable, match="SendDisabled"):
                await sender.send(Message(b"x"))


def test_pytest_plugin_fixture_resets(aiosb_emulator):
    assert aiosb_emulator is emulator
    assert emulator.namespaces() == []


def test_unsupported_urls_say_what_to_do():
    with pytest.raises(errors.InvalidArgument, match="unsupported URL"):
        aiosb.connect("ftp://x")
    with pytest.raises(errors.InvalidArgument, match="unknown option"):
        aiosb.connect("memory://x", colour="blue")
    with pytest.raises(errors.InvalidArgument, match="operation_timeout"):
        aiosb.connect("memory://x", operation_timeout=-1)


async def test_empty_long_polls_leave_no_waiters_behind():
    broker = emulator.namespace("waiters")
    async with aiosb.connect("memory://waiters") as ns:
        await ns.create_queue("q")
        async with ns.receiver("q") as receiver:
            for _ in range(50):
                assert await receiver.receive(max_wait=1) == []
            task = asyncio.create_task(receiver.receive(max_wait=60))
            await asyncio.sleep(1)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert broker._entities["q"].fragments[0].waiters == []
