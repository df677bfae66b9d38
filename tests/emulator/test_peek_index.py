"""Issue 16: a peek from a sequence number reads from the store's index of sequence
numbers (a bisection, then what it returns), not every message: the same answers as a
scan, through removals, activations of scheduled messages and the index's compaction."""

from __future__ import annotations

import asyncio
import datetime as _dt
import random

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb.emulator._held import Held
from aiosb.emulator._record import _Record, record_of

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


def test_held_records_match_a_dict_through_adds_removals_and_sparse_pages():
    """The pages of :class:`Held` (a record alone, or a list) answer as a dict would:
    runs of numbers, numbers spread out (a session's or dead-letter queue's), numbers
    out of order (activated scheduled messages), removals anywhere."""
    rng = random.Random(16)
    held, model = Held(), {}
    seqs = list(range(1, 2000)) + rng.sample(range(2000, 100_000), 300)
    rng.shuffle(seqs[:200])
    for seq in seqs:
        rec = record_of(Message(b"x"), f"m{seq}", 1)
        rec.seq = seq
        assert held.add(rec)
        model[seq] = rec
    for seq in rng.sample(seqs, 1000):
        assert held.pop(seq) is model.pop(seq)
        assert held.pop(seq) is None
    # A batch at once (a settlement): numbers held or not, in any order, one given twice.
    batch = rng.sample(seqs, 500) + seqs[:3]
    expected = [model.pop(seq) for seq in dict.fromkeys(batch) if seq in model]
    assert held.discard(batch) == expected
    assert len(held) == len(model) and held == model
    assert [r.seq for r in held.values()] == sorted(model)
    for start in [0, 1, 63, 64, 65, 1999, 2000, 50_000, 100_001]:
        assert [r.seq for r in held.from_sequence(start)] == sorted(s for s in model if s >= start)
    for seq in rng.sample(range(100_000), 500):
        assert held.get(seq) is model.get(seq)
    assert len(held._keys) <= 2 * len(held._pages) + 64  # page numbers of pages gone go


def test_held_discards_runs_of_numbers_as_a_dict_would():
    """A settlement's batch is mostly a run of numbers from the front of a page (#16):
    runs within a page, across pages, to a page's end, leaving one record, with a
    number given twice and numbers not held between them; the answer is a dict's."""
    rng = random.Random(18)
    for _ in range(200):
        held, model = Held(), {}
        seqs = sorted(rng.sample(range(1, 600), rng.randint(1, 400)))
        for seq in seqs:
            rec = record_of(Message(b"x"), f"m{seq}", 1)
            rec.seq = seq
            held.add(rec)
            model[seq] = rec
        batch: list[int] = []
        for _ in range(rng.randint(1, 6)):
            start = rng.choice(seqs)
            run = list(range(start, start + rng.randint(1, 150)))
            if rng.random() < 0.3:
                run.insert(rng.randrange(len(run)), rng.choice(run))  # one given twice
            batch += run
        expected = [model.pop(seq) for seq in dict.fromkeys(batch) if seq in model]
        assert held.discard(batch) == expected
        assert len(held) == len(model) and held == model
        assert [r.seq for r in held.values()] == sorted(model)
        for page in held._pages.values():  # a page of one is the record, never a list
            assert not isinstance(page, list) or len(page) > 1


def test_held_discards_one_consecutive_run_as_a_dict_would():
    """A settlement of one receive's batch is a run of consecutive numbers, cut a page
    at a time (#16): runs from any number, within a page or across several, over pages
    full, with holes (numbers settled already), or held a record alone; the answer is a
    dict's."""
    rng = random.Random(20)
    for _ in range(300):
        held, model = Held(), {}
        top = rng.randint(1, 500)
        for seq in range(1, top + 1):
            rec = record_of(Message(b"x"), f"m{seq}", 1)
            rec.seq = seq
            held.add(rec)
            model[seq] = rec
        for seq in rng.sample(range(1, top + 1), rng.randint(0, top // 3)):
            assert held.pop(seq) is model.pop(seq)
        start = rng.randint(0, top + 1)
        batch = list(range(start, start + rng.randint(2, 200)))
        expected = [model.pop(seq) for seq in batch if seq in model]
        assert held.discard(batch) == expected
        assert len(held) == len(model) and held == model
        assert [r.seq for r in held.values()] == sorted(model)
        for page in held._pages.values():  # a page of one is the record, never a list
            assert not isinstance(page, list) or len(page) > 1


def test_held_takes_a_run_as_a_dict_would():
    """A send's batch is held a page at a time (``add_run``, #16): runs that start on a
    page held already or a fresh one, cross pages, follow sparse numbers, or (taken one
    by one, as ``add`` takes them) are not consecutive, lie below numbers held, or
    repeat numbers held; whatever the run, the answer is a dict's."""
    rng = random.Random(19)
    for _ in range(300):
        held, model = Held(), {}

        def record(seq: int) -> _Record:
            rec = record_of(Message(b"x"), f"m{seq}", 1)
            rec.seq = seq
            return rec

        for seq in sorted(rng.sample(range(1, 400), rng.randint(0, 60))):
            held.add(rec := record(seq))
            model[seq] = rec
        for _ in range(rng.randint(1, 4)):
            top = max(model, default=0)
            start = rng.choice([top + 1, top + rng.randint(1, 200), rng.randint(1, top + 1)])
            seqs = list(range(start, start + rng.randint(1, 170)))
            if rng.random() < 0.2:
                seqs.insert(rng.randrange(len(seqs)), seqs[0] + 500)  # not consecutive
            recs = [record(seq) for seq in seqs]
            held.add_run(recs)
            model.update((rec.seq, rec) for rec in recs)
            assert len(held) == len(model) and held == model
            assert [r.seq for r in held.values()] == sorted(model)
            for seq in rng.sample(range(1, 1200), 50):
                assert held.get(seq) is model.get(seq)
            for page in held._pages.values():
                assert not isinstance(page, list) or len(page) > 1
        start = rng.randint(0, max(model) + 2)
        assert [r.seq for r in held.from_sequence(start)] == sorted(s for s in model if s >= start)


async def test_a_batch_with_a_scheduled_message_in_it_keeps_sequence_order():
    """A send's batch is stored as a run (#16) around the scheduled message numbered in
    its middle: what is available comes in sequence order, then the scheduled one."""
    async with aiosb.connect("memory://run-order") as ns:
        await ns.create_queue("q")
        later = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=30)
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            await sender.send([Message(b"a0")])
            await sender.send([Message(b"a"), Message(b"b", scheduled_enqueue_time=later),
                               Message(b"c"), Message(b"d")])
            got = await receiver.receive(max_messages=10, max_wait=0)
            assert [m.body for m in got] == [b"a0", b"a", b"c", b"d"]
            seqs = [m.sequence_number for m in got]
            assert seqs == sorted(seqs) and seqs[2] - seqs[1] == 2  # b took the one between
            await receiver.complete(got)
            await asyncio.sleep(31)
            (b,) = await receiver.receive(max_messages=10, max_wait=0)
            assert b.body == b"b" and b.sequence_number == seqs[1] + 1
