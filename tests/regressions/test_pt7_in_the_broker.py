import pytest

from aiosb import Message, errors

pytestmark = pytest.mark.looptime


async def test_mismatched_keys_after_construction(ns, broker):
    await ns.create_queue("p", enable_partitioning=True)
    m = Message(b"x", session_id=None, partition_key="a")
    m.session_id = "b"  # plain dataclass: mutable after the check in __post_init__
    with pytest.raises(errors.InvalidOperation):
        async with ns.sender("p") as s:
            await s.send(m)
