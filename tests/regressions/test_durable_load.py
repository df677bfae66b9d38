"""Regression tests from the review of durable mode (#39): the background load of a
restart (:mod:`aiosb.emulator._recovery`). R-3: nothing acknowledged is lost across a
restart, and no operation answers from part of a store while it loads.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb.emulator import _recovery
from aiosb.emulator.server import serve


@pytest.fixture
def slow_reads(monkeypatch):
    """A deep store: the load takes many reads of ten rows, each 20 ms."""
    monkeypatch.setattr(_recovery, "CHUNK", 10)
    read = _recovery.Recovery._read

    async def slow(self, fn):
        await asyncio.sleep(0.02)
        return await read(self, fn)

    monkeypatch.setattr(_recovery.Recovery, "_read", slow)


@pytest.mark.timeout(30)
async def test_a_row_written_while_its_entity_loads_is_not_loaded_again(tmp_path, slow_reads):
    """#39, R-3: a message that expired while the server was down is dead-lettered as
    soon as its chunk is put; its dead letter's row, numbered above every row kept, was
    read again by the loader (20 dead letters counted, 40 delivered), and a dead letter
    completed came back after the next restart."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("dup")) as ns:
            await ns.create_queue("q", dead_lettering_on_message_expiration=True)
            await ns.create_queue("other")
            async with ns.sender("q") as sender:
                await sender.send([Message(b"e%d" % i, time_to_live=timedelta(seconds=0.3))
                                   for i in range(20)])
                await sender.send([Message(b"k%d" % i) for i in range(180)])
    emulator.reset()
    await asyncio.sleep(0.5)  # the first 20 expire while the server is down
    async with serve(data_dir=tmp_path) as server:
        recovery = server.journal.recovery
        assert recovery is not None
        async with aiosb.connect(server.namespace_url("dup")) as ns:
            # Another client works on another entity meanwhile (every operation runs
            # what is due in the namespace: the expiries of what was loaded so far).
            while recovery.pending:
                await ns.runtime_properties("other")
                await asyncio.sleep(0.01)
            counts = await ns.runtime_properties("q")
            async with ns.receiver("q", sub_queue="deadletter") as receiver:
                got = await receiver.receive(max_messages=100, max_wait=0.5)
                seqs = [m.sequence_number for m in got]
                assert counts.dead_letter_message_count == 20
                assert len(seqs) == len(set(seqs)) == 20, sorted(seqs)
                await receiver.complete(got)
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("dup")) as ns:
            counts = await ns.runtime_properties("q")
    assert (counts.dead_letter_message_count, counts.active_message_count) == (0, 180)
