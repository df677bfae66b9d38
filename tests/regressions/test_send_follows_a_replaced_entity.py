"""A send that waits out a timeout fault on one fragment is prepared again once the
fault heals, against whatever entity its path names by then (#16: the records are made
once, before the wait, and their fragments were those of the first pass)."""

from __future__ import annotations

import asyncio

import pytest

from aiosb import Message
from aiosb.emulator._partitions import home

pytestmark = pytest.mark.looptime


async def test_a_send_waiting_on_a_fragment_lands_in_the_queue_that_replaced_it(ns, broker):
    await ns.create_queue("q", enable_partitioning=True)
    nfrag = broker._entities["q"].nfrag
    up = next(f"a{i}" for i in range(1000) if home(f"a{i}", nfrag) == nfrag - 1)
    down = next(f"b{i}" for i in range(1000) if home(f"b{i}", nfrag) == 0)
    fault = broker.faults.fail_fragment("q", 0, kind="timeout", operations=["send"])
    sending = asyncio.create_task(
        broker.send("q", [Message(b"x", partition_key=up), Message(b"y", partition_key=down)])
    )
    await asyncio.sleep(1)
    await ns.delete_queue("q")
    await ns.create_queue("q")  # one fragment now
    fault.heal()
    await sending
    async with ns.receiver("q", mode="receive_and_delete") as receiver:
        got = await receiver.receive(10, max_wait=0)
    assert [m.body for m in got] == [b"x", b"y"]
