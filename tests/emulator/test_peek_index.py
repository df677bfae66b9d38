"""Issue 16: a peek from a sequence number reads from the store's index of sequence
numbers (a bisection, then what it returns), not every message: the same answers as a
scan, through removals, activations of scheduled messages and the index's compaction."""

from __future__ import annotations

import datetime as _dt
import random

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb.emulator._store import _Store

pytestmark = pytest.mark.looptime


async def test_peeks_from_any_sequence_number_match_a_scan():
    rng = random.Random(7)
    async with aiosb.connect("memory://peekindex") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            for start in range(0, 3000, 100):
                await sender.send([Message(f"{i}".encode()) for i in range(start, start + 100)])
            at = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=30)
            await sender.schedule([Message(b"later-1"), Message(b"later-2")], at)
        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            for _ in range(5):  # remove runs of messages here and there
                got = await receiver.receive(max_messages=rng.randint(50, 400), max_wait=0)
                assert got
        store = emulator.namespace("peekindex")._entities["q"].fragments[0]
        held = sorted(store.records)
        async with ns.receiver("q") as receiver:
            for start in [0, held[0], held[1] + 1, held[len(held) // 2], held[-3], held[-1] + 1]:
                peeked = await receiver.peek(max_messages=25, from_sequence_number=start)
                expected = [s for s in held if s >= start][:25]
                assert [m.sequence_number for m in peeked] == expected


def test_the_index_skips_records_gone_and_is_compacted():
    seen = list(range(1, 1001))

    class Fake:  # the few attributes from_sequence reads
        records: dict[int, object]

    fake = Fake()
    fake.records = {s: s for s in seen}
    fake._index, fake._index_sorted = list(seen), True  # type: ignore[attr-defined]
    for gone in [s for s in seen if s % 4]:  # three in four go
        del fake.records[gone]
    got = list(_Store.from_sequence(fake, 500))  # type: ignore[arg-type]
    assert got == [s for s in range(500, 1001) if s % 4 == 0]
    assert len(fake._index) == 250  # type: ignore[attr-defined]  # compacted: most were gone
