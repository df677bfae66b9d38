"""Regression tests from the review of durable mode (#39): the background load of a
restart (:mod:`aiosb.emulator._recovery`). R-3: nothing acknowledged is lost across a
restart, and no operation answers from part of a store while it loads.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from datetime import UTC, datetime, timedelta

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb.emulator import _recovery
from aiosb.emulator._durable import Journal
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


class _Node:
    other: _Node


async def _fill_deep(tmp_path, name: str, count: int) -> None:
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url(name)) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender:
                for start in range(0, count, 2000):
                    await sender.send([Message(b"%d" % i) for i in range(start, start + 2000)])
    emulator.reset()


@pytest.fixture
def freezing(monkeypatch):
    """A load of 4,000 messages is a large one (frozen after it)."""
    monkeypatch.setattr(_recovery, "FREEZE_AT", 4000)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.timeout(30)
async def test_garbage_made_during_a_large_load_is_still_collected(tmp_path, freezing):
    """#39: the collector is off during the load, and what the process held after a
    large one was frozen: reference cycles that became garbage meanwhile (a request's,
    the host process's) were frozen with it and never freed."""
    await _fill_deep(tmp_path, "gc", 6000)
    refs = []
    async with serve(data_dir=tmp_path) as server:
        recovery = server.journal.recovery
        assert recovery is not None
        while recovery.pending:
            a, b = _Node(), _Node()  # garbage at once, in a cycle
            a.other, b.other = b, a
            refs.append(weakref.ref(a))
            del a, b
            await asyncio.sleep(0)
        await recovery.wait_all()
        assert gc.isenabled()
        gc.collect()
        assert refs and not [r for r in refs if r() is not None]


@pytest.mark.timeout(30)
async def test_a_stopped_servers_store_is_freed_after_a_large_load(tmp_path, freezing):
    """#39: the namespace, entity and store graph a large load froze (cyclic: a store
    names its entity, the entity its stores) was never freed once the server stopped and
    the emulator was reset (an in-process restart)."""
    await _fill_deep(tmp_path, "gc2", 6000)
    async with serve(data_dir=tmp_path) as server:
        assert server.journal.recovery is not None
        await server.journal.recovery.wait_all()
        entity = weakref.ref(emulator.namespace("gc2")._entities["q"])
    del server
    emulator.reset()
    gc.collect()
    assert entity() is None


@pytest.mark.timeout(30)
async def test_two_loads_at_once_keep_the_collector_off_until_both_end(
    tmp_path, slow_reads, monkeypatch
):
    """#39: a second recovery starting while another loads saw the collector off (the
    first had turned it off) and left it to the first, which turned it back on while
    the second still loaded; the last load to end turns it back on."""
    first, second = tmp_path / "one", tmp_path / "two"
    for path in (first, second):
        await _fill_deep(path, path.name, 2000)
    seen: list[bool] = []
    put = _recovery._put

    def watched(*args):
        seen.append(gc.isenabled())
        put(*args)

    monkeypatch.setattr(_recovery, "_put", watched)

    async def load(path) -> None:
        journal = Journal(path)
        await journal.open()
        namespaces = await journal.load()
        assert journal.recovery is not None
        await journal.recovery.wait_all()
        await journal.aclose()
        for ns in namespaces:
            ns.detach_all()

    assert gc.isenabled()
    one = asyncio.ensure_future(load(first))
    await asyncio.sleep(0.1)  # the first loads
    await asyncio.gather(load(second), one)
    assert len(seen) == 400 and not any(seen)
    assert gc.isenabled()


@pytest.fixture
def hold(monkeypatch):
    """Hold the loader back until the event is set."""
    gate = asyncio.Event()
    run = _recovery.Recovery._run

    async def held(self):
        await gate.wait()
        await run(self)

    monkeypatch.setattr(_recovery.Recovery, "_run", held)
    return gate


@pytest.mark.timeout(30)
@pytest.mark.parametrize("upstream", ["topic", "forwarding queue"])
async def test_an_operation_waits_for_the_entities_that_pass_messages_to_its_own(
    tmp_path, hold, upstream
):
    """#39, R-3: a message scheduled on a topic (or a queue forwarding to another) whose
    time came while the server was down is activated as its source loads; a count on
    the subscription (or the forward's target) waited only for that entity and what it
    passes messages to, and answered 0 during the load, 1 afterwards."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("up")) as ns:
            if upstream == "topic":
                await ns.create_topic("src")
                await ns.create_subscription("src", "s")
                await ns.create_subscription("src", "sibling")
                target = "src/subscriptions/s"
            else:
                await ns.create_queue("dst")
                await ns.create_queue("src", forward_to="dst")
                target = "dst"
            async with ns.sender("src") as sender:
                await sender.schedule(Message(b"due"), datetime.now(UTC) + timedelta(seconds=0.3))
    emulator.reset()
    await asyncio.sleep(0.5)  # its time comes while the server is down
    async with serve(data_dir=tmp_path) as server:
        recovery = server.journal.recovery
        assert recovery is not None
        async with aiosb.connect(server.namespace_url("up")) as ns:
            counts = asyncio.ensure_future(ns.runtime_properties(target))
            await asyncio.sleep(0.2)
            assert not counts.done()  # it waits for the source too
            hold.set()
            before = (await counts).active_message_count
            await recovery.wait_all()
            after = (await ns.runtime_properties(target)).active_message_count
    assert before == after == 1
