"""Regression tests from the review of durable mode (#39): the background load of a
restart (:mod:`aiosb.emulator.durable._recovery`). R-3: nothing acknowledged is lost across a
restart, and no operation answers from part of a store while it loads.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import struct
import threading
import time
import weakref
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

import aiosb
from aiosb import Message, emulator, errors
from aiosb.emulator._record import _Record
from aiosb.emulator.durable import Journal, _recovery
from aiosb.emulator.durable import _journal as _durable
from aiosb.emulator.durable._rows import encode_record
from aiosb.server.explorer import Explorer
from aiosb.server.http import serve


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
                    await sender.send([Message(b"%d" % i)
                                       for i in range(start, min(count, start + 2000))])
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
        await _fill_deep(path, path.name, 600)
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
    assert len(seen) == 120 and not any(seen)
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


HEAD = struct.Struct("<BBIIqd")  # a row's packed head: flags, state, count, size, id, enqueued
#: A head whose tail is of a format no aiosb writes.
OTHER_TAIL = HEAD.pack(4, 0, 0, 3, 1, 0.0) + b"aiosb-json-9\n{}"


async def _two_queues(tmp_path, damage: bytes | None = None, seq: int = 2) -> None:
    """Queues 'bad' and 'healthy' of namespace 'b', three messages each; ``damage`` as
    the head of row ``seq`` of 'bad'."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("b")) as ns:
            for path in ("bad", "healthy"):
                await ns.create_queue(path)
                async with ns.sender(path) as sender:
                    await sender.send([Message(b"%d" % i) for i in range(3)])
    emulator.reset()
    if damage is not None:
        db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
        db.execute("UPDATE msgs SET head = ? WHERE seq = ? AND "
                   "eid = (SELECT id FROM entity_ids WHERE key = 'bad')", (damage, seq))
        db.commit()
        db.close()


@pytest.mark.timeout(30)
async def test_a_bad_row_of_one_entity_leaves_the_others_available(tmp_path):
    """#39: one row the loader could not read stopped the whole load: every entity not
    loaded yet, however healthy, refused every operation (and every update, which waits
    for all) until the server restarted."""
    await _two_queues(tmp_path, OTHER_TAIL)
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("b")) as ns:
            with pytest.raises(errors.InvalidArgument, match="aiosb-json-9"):
                await ns.runtime_properties("bad")  # loaded first: asked for first
            assert (await ns.runtime_properties("healthy")).active_message_count == 3
            await ns.update_queue("healthy", max_delivery_count=5)
            async with ns.receiver("healthy") as receiver:
                assert len(await receiver.receive(max_messages=5, max_wait=0)) == 3
            with pytest.raises(errors.InvalidArgument):
                await ns.runtime_properties("bad")  # still refused


@pytest.mark.timeout(30)
async def test_a_read_that_fails_once_is_tried_again(tmp_path, monkeypatch):
    """#39: a transient read failure (an I/O error) failed the load for good: HTTP 500
    for the entity until the server restarted."""
    await _two_queues(tmp_path)
    chunk = _recovery._chunk
    failures = [sqlite3.OperationalError("disk I/O error")]

    def flaky(eid, after):
        read = chunk(eid, after)

        def once(db):
            if failures:
                raise failures.pop()
            return read(db)
        return once

    monkeypatch.setattr(_recovery, "_chunk", flaky)
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("b")) as ns:
            for path in ("bad", "healthy"):
                assert (await ns.runtime_properties(path)).active_message_count == 3
    assert not failures


@pytest.mark.timeout(30)
async def test_a_read_that_keeps_failing_makes_its_entity_unavailable(tmp_path, monkeypatch):
    """A read that fails every time: once tried a few times, its entity is refused as
    unavailable (not transient: a client would retry it until its timeout), with the
    cause; the other entity loads."""
    await _two_queues(tmp_path)
    monkeypatch.setattr(_recovery, "READ_PAUSE", 0.001)
    chunk = _recovery._chunk
    bad_eid = []

    def failing(eid, after):
        read = chunk(eid, after)

        def attempt(db):
            if not bad_eid:  # the first entity read: the one asked for
                bad_eid.append(eid)
            if eid == bad_eid[0]:
                raise sqlite3.OperationalError("disk I/O error")
            return read(db)
        return attempt

    monkeypatch.setattr(_recovery, "_chunk", failing)
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("b")) as ns:
            with pytest.raises(errors.EntityUnavailable, match="disk I/O error"):
                await ns.runtime_properties("bad")
            assert (await ns.runtime_properties("healthy")).active_message_count == 3


@pytest.mark.timeout(30)
async def test_a_refusal_is_a_fresh_error_each_time(tmp_path):
    """#39: every refused operation raised the one stored exception, whose traceback
    grew by two frames with each raise (405 frames after 200 refusals)."""
    await _two_queues(tmp_path, OTHER_TAIL)
    async with serve(data_dir=tmp_path) as server:
        ns = emulator.namespace("b")
        recovery = server.journal.recovery
        assert recovery is not None
        caught = []
        for _ in range(200):
            with pytest.raises(errors.InvalidArgument) as refused:
                await recovery.wait(ns, "bad")
            caught.append(refused.value)
        assert len({id(e) for e in caught}) == 200
        (stored,) = recovery.failed.values()
        assert all(e.__cause__ is stored for e in caught)
        depth, tb = 0, stored.__traceback__
        while tb is not None:
            depth, tb = depth + 1, tb.tb_next
        assert depth < 20


@pytest.mark.timeout(30)
@pytest.mark.parametrize("damage", [
    HEAD.pack(1, 0, 0, 3, 1, 0.0),  # the flags promise an expiry; none follows
    HEAD.pack(4, 0, 0, 3, 1, 0.0) + b"aiosb-json-1\n{not json",  # a tail cut short
    HEAD.pack(0, 9, 0, 3, 1, 0.0),  # a state no aiosb writes
], ids=["no-expiry", "tail-not-json", "unknown-state"])
async def test_a_damaged_row_is_refused_with_a_sentence(tmp_path, damage):
    """#39: only a head too short or a tail of another format was refused with a
    sentence; other damage stopped the load with a bare struct.error, JSON or value
    error, which every front end answered as an internal error (HTTP 500)."""
    await _two_queues(tmp_path, damage)
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("b")) as ns:  # over HTTP
            with pytest.raises(errors.InvalidArgument) as refused:
                await ns.runtime_properties("bad")
            assert "message 2 of 'bad'" in str(refused.value)
            assert "internal error" not in str(refused.value)


def _loaders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aiosb-recovery")]


@pytest.mark.timeout(30)
async def test_a_failed_load_leaves_no_reader_behind(tmp_path, monkeypatch):
    """#39: when a chunk could not be put, the read of the next one, begun before the
    put, opened a new reader (a thread and a connection) after the loader had closed
    its own; nothing closed it, not even the server's stop."""
    monkeypatch.setattr(_recovery, "CHUNK", 1)
    await _two_queues(tmp_path, OTHER_TAIL, seq=2)
    before = len(_loaders())
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("b")) as ns:
            with pytest.raises(errors.InvalidArgument):
                await ns.runtime_properties("bad")
        recovery = server.journal.recovery
        assert recovery is not None and recovery._task is not None
        while not recovery._task.done():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert recovery._reader is None
        assert len(_loaders()) == before
    await asyncio.sleep(0.2)
    assert len(_loaders()) == before


def _active_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if line.startswith("aiosb_entity_messages") and 'state="active"' in line]


@pytest.mark.timeout(30)
async def test_metrics_and_the_live_view_leave_out_an_entity_still_loading(tmp_path, hold):
    """#39, R-3: GET /metrics and the explorer's live view read every entity's counts
    straight from its stores: while an entity loaded they reported it empty."""
    from aiosb.server.explorer._live import Sampler

    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("m")) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender:
                await sender.send([Message(b"%d" % i) for i in range(40)])
    emulator.reset()

    def live() -> list[dict]:
        return [e for n in Sampler().snapshot()["namespaces"] for e in n["entities"]]

    async with serve(data_dir=tmp_path, metrics=True, sites=[Explorer]) as server:
        recovery = server.journal.recovery
        assert recovery is not None and recovery.pending  # still loading
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/metrics") as answer:
                assert _active_lines(await answer.text()) == []
            assert live() == []
            hold.set()
            await recovery.wait_all()
            async with http.get(f"{server.url}/metrics") as answer:
                (line,) = _active_lines(await answer.text())
            assert line.endswith(" 40.0")
            (q,) = live()
            assert q["counts"]["active"] == 40


def _old_row(seq: int, body: bytes) -> bytes:
    """A message row as aiosb wrote it before #39 (one JSON document)."""
    rec = _Record.blank()
    fields = {"body": body, "seq": seq, "size": len(body), "enqueued": time.time(),
              "state": 0, "delivery_count": 0, "deferred": False, "frag": 0,
              "ttl": float("inf"), "message_id": f"id-{seq}"}
    for name, value in fields.items():
        setattr(rec, name, value)
    return encode_record(rec)


@pytest.mark.timeout(30)
async def test_an_older_database_is_moved_after_the_server_listens(tmp_path, monkeypatch):
    """#39: the rows of an older database moved to the compact table before the server
    listened (a million rows: 34 s); now in the background, what needs them waiting."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("old")) as ns:
            await ns.create_queue("q")
    emulator.reset()
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    db.execute("CREATE TABLE messages (ns TEXT NOT NULL, entity TEXT NOT NULL, seq INTEGER "
               "NOT NULL, store TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (ns, entity, seq))")
    db.executemany("INSERT INTO messages VALUES ('old', 'q', ?, 'm', ?)",
                   [(seq, _old_row(seq, b"%d" % seq)) for seq in (1, 2, 3)])
    db.commit()
    db.close()
    migrate = _durable.migrate

    def slow(db):  # a deep older database
        time.sleep(1)
        migrate(db)

    monkeypatch.setattr(_durable, "migrate", slow)
    started = time.perf_counter()
    async with serve(data_dir=tmp_path) as server:
        assert time.perf_counter() - started < 0.8  # listening, the rows still moving
        async with aiosb.connect(server.namespace_url("old")) as ns:
            await ns.create_queue("new")  # needs no message
            async with ns.sender("q") as sender:
                await sender.send(Message(b"4"))  # after the moved rows
            async with ns.receiver("q") as receiver:
                got = await receiver.receive(max_messages=10, max_wait=0)
            assert [(m.sequence_number, m.body) for m in got] == [
                (1, b"1"), (2, b"2"), (3, b"3"), (4, b"4")]
            assert got[0].message_id == "id-1"
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert "messages" not in tables
