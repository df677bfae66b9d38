"""Conformance: fault injection, and how the client retries and times out under it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message, errors

pytestmark = pytest.mark.looptime


async def test_unavailable_entity_fails_fast_with_a_non_transient_error(ns, broker):
    await ns.create_queue("q")
    await ns.create_queue("other")
    loop = asyncio.get_running_loop()
    async with ns.sender("q") as sender, ns.sender("other") as other:
        with broker.faults.fail("q"):
            start = loop.time()
            with pytest.raises(errors.EntityUnavailable, match="'q'") as info:
                await sender.send(Message(b"x"))
            assert info.value.retryable is False
            assert loop.time() == start  # not retried
            await other.send(Message(b"fine"))  # a fault is per entity
        await sender.send(Message(b"healed"))
    assert (await ns.runtime_properties("q")).active_message_count == 1


async def test_namespace_outage_covers_every_entity_and_operation(ns, broker):
    await ns.create_queue("q")
    fault = broker.faults.fail()
    with pytest.raises(errors.EntityUnavailable):
        await ns.get_queue("q")
    async with ns.receiver("q") as receiver:
        with pytest.raises(errors.EntityUnavailable):
            await receiver.receive(max_wait=0)
    fault.heal()
    assert fault.active is False
    await ns.get_queue("q")


async def test_fault_on_chosen_operations_only(ns, broker):
    await ns.create_queue("q")
    with broker.faults.fail("q", operations=["receive"]):
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x"))
        async with ns.receiver("q") as receiver:
            with pytest.raises(errors.EntityUnavailable):
                await receiver.receive(max_wait=0)


async def test_fault_on_a_topic_covers_its_subscriptions_and_dead_letter_queues(ns, broker):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    with broker.faults.fail("t", operations=["receive"]):
        async with ns.receiver("t/subscriptions/s", sub_queue="deadletter") as receiver:
            with pytest.raises(errors.EntityUnavailable):
                await receiver.receive(max_wait=0)


async def test_transient_errors_are_retried_with_backoff_until_success(ns, broker):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    fault = broker.faults.fail("q", kind="transient")
    loop.call_later(1.0, fault.heal)
    start = loop.time()
    async with ns.sender("q") as sender:
        await sender.send(Message(b"x"))
    assert 1.0 <= loop.time() - start < 2.0
    assert (await ns.runtime_properties("q")).active_message_count == 1


async def test_transient_errors_that_outlast_the_operation_timeout_become_a_timeout(ns, broker):
    """PN-6: retries that run out count as a timeout."""
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    with broker.faults.fail("q", kind="transient"):
        start = loop.time()
        async with ns.sender("q") as sender:
            with pytest.raises(errors.OperationTimeout, match="transient") as info:
                await sender.send(Message(b"x"))
        assert isinstance(info.value.__cause__, errors.TransientError)
        # Retries stop at the timeout; over the SDK in real time a retry in flight at the
        # deadline takes a moment to be cancelled.
        assert loop.time() - start <= ns.operation_timeout + 0.5
    assert (await ns.runtime_properties("q")).active_message_count == 0


async def test_timeout_fault_hangs_until_the_operation_timeout(ns, broker):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    with broker.faults.fail("q", kind="timeout", operations=["send"]):
        start = loop.time()
        async with ns.sender("q") as sender:
            with pytest.raises(errors.OperationTimeout) as info:
                await sender.send(Message(b"x"))
        assert isinstance(info.value, TimeoutError)
        assert loop.time() - start == pytest.approx(ns.operation_timeout)
    assert (await ns.runtime_properties("q")).active_message_count == 0


async def test_healing_a_timeout_fault_lets_a_hanging_operation_finish(ns, broker):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    fault = broker.faults.fail("q", kind="timeout")
    loop.call_later(3, fault.heal)
    start = loop.time()
    async with ns.sender("q") as sender:
        await sender.send(Message(b"x"))
    assert loop.time() - start == pytest.approx(3)


async def test_receive_timeout_fault_is_not_mistaken_for_an_empty_queue(ns, broker):
    await ns.create_queue("q")
    with broker.faults.fail("q", kind="timeout"):
        async with ns.receiver("q") as receiver:
            with pytest.raises(errors.OperationTimeout):
                await receiver.receive(max_wait=1)


async def test_fault_injected_during_a_long_poll_fails_the_waiting_receive(ns, broker):
    await ns.create_queue("q")
    async with ns.receiver("q") as receiver:
        task = asyncio.create_task(receiver.receive(max_wait=timedelta(minutes=15)))
        await asyncio.sleep(10)
        broker.faults.fail("q")
        with pytest.raises(errors.EntityUnavailable):
            await task


async def test_delay_adds_latency_to_each_operation(ns, broker):
    await ns.create_queue("q")
    loop = asyncio.get_running_loop()
    with broker.faults.delay("q", 0.25):
        start = loop.time()
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x"))
            await sender.send(Message(b"y"))
        assert loop.time() - start == pytest.approx(0.5)


async def test_heal_by_entity_and_all(ns, broker):
    await ns.create_queue("a")
    await ns.create_queue("b")
    broker.faults.fail("a")
    broker.faults.fail("b")
    broker.faults.fail("b", kind="transient")
    assert broker.faults.heal("b") == 2
    assert len(broker.faults.active) == 1
    assert broker.faults.heal() == 1
    async with ns.sender("a") as sender:
        await sender.send(Message(b"x"))


async def test_async_context_manager_heals(ns, broker):
    await ns.create_queue("q")
    async with broker.faults.fail("q") as fault:
        assert fault in broker.faults.active
    assert broker.faults.active == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "meteor"}, "fault kind"),
        ({"operations": ["explode"]}, "operations"),
        ({"operations": []}, "operations"),
    ],
)
def test_bad_fault_arguments_are_refused(broker, kwargs, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        broker.faults.fail("q", **kwargs)
    assert broker.faults.active == []
