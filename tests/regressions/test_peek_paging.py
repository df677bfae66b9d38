import pytest

from aiosb import Message, errors

pytestmark = pytest.mark.looptime


async def test_peek_pages_all_fragments(ns, broker):
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as s:
        for i in range(200):
            await s.send(Message(b"x" * 10_000, partition_key=f"k{i}"))
    async with ns.receiver("p") as r:
        got = await r.peek(200)
        assert len(got) == 200
        assert len({m.sequence_number for m in got}) == 200
        assert await r.peek(5) == []


async def test_peek_with_every_fragment_down_is_an_error_not_an_empty_entity(ns, broker):
    """PT-13: a peek that can reach no fragment must not say the entity is empty."""
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as s:
        for i in range(64):
            await s.send(Message(b"x", partition_key=f"k{i}"))
    faults = [broker.faults.fail_fragment("p", i, operations=["receive"]) for i in range(16)]
    async with ns.receiver("p") as r:
        with pytest.raises(errors.OperationTimeout) as info:
            await r.peek(10)
        assert isinstance(info.value.__cause__, errors.PartitionUnavailable)
    for fault in faults:
        fault.heal()
    async with ns.receiver("p") as r:
        assert len(await r.peek(64)) == 64
