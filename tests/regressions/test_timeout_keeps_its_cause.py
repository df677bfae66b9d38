"""CI on 2026-11-25 (amqp-serve, PT-9): a keyed send retried against a down fragment
ran out of time while its last retry was still in flight, and the OperationTimeout lost
the PartitionUnavailable that had made it retry: ``__cause__`` was None. The timeout
must carry the last failure, whichever of the two ways the time runs out."""

import asyncio

import pytest

from aiosb import Message, errors
from aiosb.emulator import FRAGMENT_SHIFT

pytestmark = pytest.mark.looptime


async def _home(ns, entity, key):
    async with ns.sender(entity) as sender:
        await sender.send(Message(b"probe", partition_key=key))
    async with ns.receiver(entity, mode="receive_and_delete") as receiver:
        (probe,) = await receiver.receive(max_wait=0)
    return probe.sequence_number >> FRAGMENT_SHIFT


async def test_time_running_out_during_a_retry_keeps_the_failures_before_it(ns, broker):
    """PT-9: the fragment is down (PartitionUnavailable) for 5 s, then hangs; the retry
    in flight at the 10 s deadline gets no answer, and the timeout says why it retried."""
    await ns.create_queue("p", enable_partitioning=True)
    home = await _home(ns, "p", "k")
    down = broker.faults.fail_fragment("p", home)

    def hang() -> None:
        down.heal()
        broker.faults.fail_fragment("p", home, kind="timeout")

    loop = asyncio.get_running_loop()
    loop.call_later(5.0, hang)
    start = loop.time()
    async with ns.sender("p") as sender:
        with pytest.raises(errors.OperationTimeout, match="attempts failed") as info:
            await sender.send(Message(b"pinned", partition_key="k"))
    assert loop.time() - start == pytest.approx(10, abs=0.01)  # the in-flight retry hung
    assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
    assert "got no answer" in info.value.message
    broker.faults.heal()
    assert (await ns.runtime_properties("p")).active_message_count == 0


async def test_an_operation_that_never_answered_has_no_cause(ns, broker):
    """With no failed attempt before the deadline, the timeout has nothing to carry."""
    await ns.create_queue("p", enable_partitioning=True)
    home = await _home(ns, "p", "k")
    broker.faults.fail_fragment("p", home, kind="timeout")
    async with ns.sender("p") as sender:
        with pytest.raises(errors.OperationTimeout, match="got no answer") as info:
            await sender.send(Message(b"pinned", partition_key="k"))
    assert info.value.__cause__ is None
    broker.faults.heal()
