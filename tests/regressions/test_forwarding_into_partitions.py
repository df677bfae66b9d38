from datetime import timedelta

import pytest

from aiosb import Message
from aiosb.emulator import FRAGMENT_SHIFT

pytestmark = pytest.mark.looptime


def frag(m):
    return m.sequence_number >> FRAGMENT_SHIFT


async def test_forward_keys_carry(ns, broker):
    await ns.create_queue("dst", enable_partitioning=True)
    await ns.create_queue("dsts", enable_partitioning=True, requires_session=True)
    await ns.create_queue("src", forward_to="dst")
    await ns.create_queue("srcs", forward_to="dsts")
    await ns.create_topic("t", enable_partitioning=True)
    await ns.create_subscription("t", "fwd", forward_to="dst")
    async with ns.sender("dst") as s:
        await s.send(Message(b"direct", partition_key="K"))
    async with ns.sender("src") as s:
        await s.send(Message(b"fwd", partition_key="K"))
    async with ns.sender("t") as s:
        await s.send(Message(b"topic", partition_key="K"))
    async with ns.receiver("dst") as r:
        got = await r.receive(max_messages=10, max_wait=0)
        assert len(got) == 3 and len({frag(m) for m in got}) == 1, [(m.body, frag(m)) for m in got]
        await r.complete(got)
    async with ns.sender("srcs") as s:
        await s.send([Message(b"s1", session_id="S"), Message(b"s2", session_id="S")])
    async with ns.receiver("dsts", session_id="S") as r:
        got = await r.receive(max_messages=10, max_wait=0)
        assert [m.body for m in got] == [b"s1", b"s2"]
        await r.complete(got)


async def test_forward_dead_letters_into_session_queue(ns, broker):
    await ns.create_queue("dls", enable_partitioning=True, requires_session=True)
    await ns.create_queue(
        "src",
        enable_partitioning=True,
        requires_session=True,
        forward_dead_lettered_messages_to="dls",
        max_delivery_count=1,
        lock_duration=timedelta(seconds=5),
    )
    async with ns.sender("src") as s:
        await s.send([Message(b"a", session_id="S"), Message(b"b", session_id="S")])
    async with ns.receiver("src", session_id="S") as r:
        got = await r.receive(max_messages=10, max_wait=0)
    # closing released the session: delivery count 1 = max -> dead-lettered -> forwarded
    p = await ns.runtime_properties("dls")
    assert p.active_message_count == 2
    async with ns.receiver("dls", session_id="S") as r:
        got = await r.receive(max_messages=10, max_wait=0)
        assert sorted(m.body for m in got) == [b"a", b"b"]
    assert broker._entities["src"].sessions == {}
