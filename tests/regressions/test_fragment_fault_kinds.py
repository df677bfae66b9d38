import asyncio

import pytest

from aiosb import NEXT_AVAILABLE_SESSION, Message, errors

pytestmark = pytest.mark.looptime


async def test_manage_after_timeout_heals(ns, broker):
    await ns.create_queue("p", enable_partitioning=True)
    f = broker.faults.fail_fragment("p", 3, kind="timeout", operations=["manage"])
    asyncio.get_running_loop().call_later(3, f.heal)
    q = await ns.update_queue("p", max_delivery_count=3)
    assert q.max_delivery_count == 3
    f = broker.faults.fail_fragment("p", 3, kind="timeout", operations=["manage"])
    with pytest.raises(errors.OperationTimeout):
        await ns.delete_queue("p")
    f.heal()
    await ns.delete_queue("p")


@pytest.mark.parametrize("kind", ["unavailable", "transient", "timeout"])
async def test_session_accept_fragment_faults(ns, broker, kind):
    await ns.create_queue("sp", enable_partitioning=True, requires_session=True)
    async with ns.sender("sp") as s:
        await s.send(Message(b"x", session_id="a"))
    e = broker._entities["sp"]
    frag = e.sessions["a"].store.fragment
    f = broker.faults.fail_fragment("sp", frag, kind=kind, operations=["receive"])
    with pytest.raises(
        (errors.PartitionUnavailable, errors.OperationTimeout, errors.TransientError)
    ):
        async with ns.receiver("sp", session_id="a"):
            pass
    with pytest.raises(errors.OperationTimeout):
        async with ns.receiver("sp", session_id=NEXT_AVAILABLE_SESSION, session_wait=2):
            pass
    assert e.listeners == 0
    f.heal()
    async with ns.receiver("sp", session_id=NEXT_AVAILABLE_SESSION, session_wait=2) as r:
        assert [m.body for m in await r.receive(max_wait=0)] == [b"x"]
    assert e.listeners == 0
