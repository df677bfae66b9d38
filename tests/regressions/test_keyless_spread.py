import pytest

from aiosb import Message
from aiosb.emulator import FRAGMENT_SHIFT

pytestmark = pytest.mark.looptime


async def test_keyless_sends_spread_when_interleaved_with_receives(ns, broker):
    await ns.create_queue("p", enable_partitioning=True)
    frags = set()
    async with ns.sender("p") as s, ns.receiver("p") as r:
        for _i in range(64):
            await s.send(Message(b"x"))
            (m,) = await r.receive(max_wait=0)
            frags.add(m.sequence_number >> FRAGMENT_SHIFT)
            await r.complete(m)
    assert len(frags) == 16, sorted(frags)
