"""Issue 16: a message resident in an embedded queue (a 10-byte body, the MessageId the
broker assigns) costs under 300 bytes, measured with tracemalloc (deterministic: no wall
clock, no resident-set noise)."""

from __future__ import annotations

import gc
import tracemalloc

import aiosb
from aiosb import Message

N = 20_000


async def test_a_resident_message_costs_under_300_bytes():
    async with aiosb.connect("memory://resident") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send([Message(b"warming-up")])
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for start in range(0, N, 100):
                    await sender.send([Message(b"%010d" % i) for i in range(start, start + 100)])
                gc.collect()
                per_message = (tracemalloc.get_traced_memory()[0] - before) / N
            finally:
                tracemalloc.stop()
    assert per_message < 300, f"{per_message:.0f} bytes per resident message"
