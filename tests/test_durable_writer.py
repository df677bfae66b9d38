"""The journal's writer process under a careless or hostile world (#48, R-3).

A writer that stops answering (stopped with SIGSTOP, its disk stalled) is killed within
its deadline and replaced; the frames it had not answered are written again by the
replacement, nothing acknowledged is lost and no request waits for ever. A frame that
names a forbidden global is refused before anything in it runs. A burst goes as
several frames bounded in rows and bytes, each its own transaction, all written. And
``--fsync`` acts where it must: on the writer process's own connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from typing import Any

import pytest

import aiosb
from aiosb import Message, emulator, errors
from aiosb.emulator._record import _Record
from aiosb.emulator.durable import Journal, _group_commit
from aiosb.emulator.durable import _writer_client as _link
from aiosb.emulator.durable import _writer_process as _writer
from aiosb.emulator.durable._schema import SCHEMA
from aiosb.server.http import serve

#: ``WriterLink.send`` as the module defines it (before the looptime fixture of
#: ``tests/conftest.py`` wraps it): its answers are not waits on the world outside.
_SEND = _link.WriterLink.send
#: ``PRAGMA synchronous`` as SQLite reads it back.
NORMAL, FULL = 1, 2


def _bodies(path: Any) -> list[bytes]:
    """The bodies of the messages on disk, in sequence order."""
    db = sqlite3.connect(path / "aiosb.sqlite3")
    try:
        return [body for (body,) in db.execute("SELECT body FROM msgs ORDER BY eid, seq")]
    finally:
        db.close()


@contextlib.contextmanager
def _stopped(journal: Journal) -> Any:
    """The journal's writer stopped (SIGSTOP) for the block; let go whatever happens."""
    link = journal._link
    assert link is not None
    pid = link._transport.get_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield link
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(60)
async def test_a_stopped_writer_is_replaced_within_its_deadline_and_nothing_is_lost(
        tmp_path, monkeypatch):
    """#48, R-3: the writer stopped (SIGSTOP) with a send's frame in its pipe: within
    its deadline (shortened here to 1 s) it is killed and a new writer writes that
    frame; a send made meanwhile is answered too; after a restart every message is
    there (a writer that hangs froze every durable request: commit waited for ever)."""
    monkeypatch.setattr(_link, "WRITE_DEADLINE", 1.0)
    sent = [b"before", b"first", b"meanwhile", b"after"]
    async with serve(data_dir=tmp_path) as server:
        journal = server.journal
        assert journal is not None
        async with aiosb.connect(server.namespace_url("hung")) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender, ns.sender("q") as other:
                await sender.send(Message(b"before"))
                with _stopped(journal) as hung:
                    began = time.monotonic()
                    first = asyncio.ensure_future(sender.send(Message(b"first")))
                    while not hung.writes:  # its frame is in the stopped writer's pipe
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.1)
                    assert not first.done()
                    async with asyncio.timeout(10):
                        await other.send(Message(b"meanwhile"))
                        await first
                    took = time.monotonic() - began
                    assert hung.closed and journal._link is not hung
                    await hung.exited  # killed: it had not answered
                    assert hung._transport.get_returncode() == -signal.SIGKILL
                await sender.send(Message(b"after"))
    assert 1.0 <= took < 8.0, f"the sends waited {took:.1f} s for a writer given 1 s"
    emulator.reset()
    assert _bodies(tmp_path) == sent
    async with serve(data_dir=tmp_path) as server, aiosb.connect(
            server.namespace_url("hung")) as ns, ns.receiver(
            "q", mode="receive_and_delete") as receiver:
        got = await receiver.receive(10, max_wait=1)
    assert [bytes(m.body) for m in got] == sent


@pytest.mark.timeout(60)
async def test_a_commit_through_two_hung_writers_gets_an_error_and_nothing_is_lost(
        tmp_path, monkeypatch):
    """#48: the writer and the one replacing it both hang (stopped as they start): the
    commit waiting on them fails with a transient error after their two deadlines
    (shortened to 0.5 s) instead of waiting for ever; the next writer, left alone,
    writes what was pending, and nothing is lost."""
    monkeypatch.setattr(_link, "WRITE_DEADLINE", 0.5)
    journal = Journal(tmp_path)
    await journal.open()
    await journal.load()
    emulator.use_journal(journal)
    try:
        async with aiosb.connect("memory://twice") as ns:
            await ns.create_queue("q")
            await journal.commit()
            made = _link.WriterLink.connection_made

            def stopped_at_start(self: _link.WriterLink, transport: Any) -> None:
                made(self, transport)
                os.kill(transport.get_pid(), signal.SIGSTOP)

            monkeypatch.setattr(_link.WriterLink, "connection_made", stopped_at_start)
            async with ns.sender("q") as sender:
                with _stopped(journal):
                    await sender.send(Message(b"a"))
                    began = time.monotonic()
                    with pytest.raises(errors.TransientError, match="did not answer"):
                        await journal.commit()
                    took = time.monotonic() - began
            monkeypatch.setattr(_link.WriterLink, "connection_made", made)
            await journal.commit()
    finally:
        emulator.use_journal(None)
        await journal.aclose()
        emulator.reset()
    assert 1.0 <= took < 6.0, f"the commit waited {took:.1f} s through two 0.5 s deadlines"
    assert _bodies(tmp_path) == [b"a"]


@pytest.mark.looptime
@pytest.mark.timeout(60)
async def test_on_a_fast_forwarded_clock_the_writer_has_its_default_deadline(
        tmp_path, monkeypatch):
    """#48: with the default deadline (:data:`_link.WRITE_DEADLINE`, not shortened), a
    send waiting on a stopped writer is answered once the deadline has passed on the
    loop's clock, not before, and its message is on disk."""
    async with serve(data_dir=tmp_path) as server:
        journal = server.journal
        assert journal is not None
        async with aiosb.connect(server.namespace_url("late")) as ns:
            await ns.create_queue("q")
            fixture_send = _link.WriterLink.send
            with _stopped(journal) as hung:
                # the stopped writer's answers are not waited for outside the loop's clock
                monkeypatch.setattr(_link.WriterLink, "send", lambda self, write, *frame: (
                    _SEND if self is hung else fixture_send)(self, write, *frame))
                loop = asyncio.get_running_loop()
                began = loop.time()
                async with ns.sender("q") as sender:
                    await sender.send(Message(b"late"))
                took = loop.time() - began
            assert hung.closed and journal._link is not hung
    emulator.reset()
    assert _link.WRITE_DEADLINE <= took < _link.WRITE_DEADLINE + 1
    assert _bodies(tmp_path) == [b"late"]


def _dump(db: sqlite3.Connection) -> dict[str, list[Any]]:
    return {table: sorted(db.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("namespaces", "entities", "entity_ids", "msgs", "sequences",
                          "sessions", "meta")}


def test_a_frame_written_twice_leaves_the_journal_as_written_once(tmp_path):
    """#48: a frame taken back from a writer that was killed may have been written
    already; the replacement writes it again, and the journal is as if it were written
    once (every statement an upsert, a delete, or a lock set)."""
    db = sqlite3.connect(tmp_path / "w.sqlite3", isolation_level=None)
    db.executescript(SCHEMA)
    writer = _writer.Writer(db)
    writer.write([], [("ns", "q", [], [(n, b"m%d" % n, b"h") for n in range(1, 6)], [])],
                 [("ns", "q", 0, 5)])
    frame = (
        [("INSERT OR IGNORE INTO namespaces VALUES (?, ?)", ("ns", "standard")),
         ("INSERT OR REPLACE INTO entities VALUES (?, ?, ?, ?, ?, ?, ?)",
          ("ns", "r", "queue", "r", 1, 0.0, b"{}")),
         ("INSERT OR REPLACE INTO sessions (ns, entity, sid, state, state_set) "
          "VALUES (?, ?, ?, ?, ?)", ("ns", "q", "s", b"state", 1.0)),
         ("INSERT INTO meta VALUES ('auto_high', ?) ON CONFLICT (name) "
          "DO UPDATE SET value = max(value, excluded.value)", (7,))],
        [("ns", "q", [1, 2, 4], [(6, b"m6", b"h"), (7, b"m7", b"h")], [(b"lock", 5)]),
         ("ns", "r", [], [(1, b"r1", b"h")], [])],
        [("ns", "q", 0, 7), ("ns", "r", 0, 1)])
    writer.write(*frame)
    once = _dump(db)
    _writer.Writer(db).write(*pickle.loads(pickle.dumps(frame)))  # the replacement's
    twice = _dump(db)
    db.close()
    assert twice == once
    assert [row[2] for row in once["msgs"]] == [b"m3", b"m5", b"m6", b"m7", b"r1"]


def test_a_frame_naming_a_forbidden_global_is_refused_and_runs_nothing(tmp_path):
    """#48: a frame whose pickle calls ``os.system`` reaches the writer process: it is
    refused with a sentence naming the global, nothing runs, and the writer answers the
    next frame (flagged RESUME) as usual (it unpickled with plain ``pickle.loads``)."""
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    db.executescript(SCHEMA)
    db.close()
    planted = tmp_path / "planted"

    class Evil:
        def __reduce__(self) -> Any:
            return os.system, (f"touch {planted}",)

    evil = pickle.dumps(([("SELECT ?", (Evil(),))], [], []))
    good = _group_commit.frame_of([("INSERT INTO namespaces VALUES (?, ?)", ("ns", "basic"))],
                            [], [])
    frames = (_writer.HEAD.pack(len(evil), 0) + evil
              + _writer.HEAD.pack(len(good), _writer.RESUME) + good)
    done = subprocess.run([sys.executable, "-I", "-S", _writer.__file__,
                           str(tmp_path / "aiosb.sqlite3")],
                          input=frames, capture_output=True, timeout=30, check=True)
    assert not planted.exists(), "the writer ran what the frame named"
    answer = done.stdout
    assert answer[:1] == _writer.FAILED, answer
    (size,) = struct.unpack_from("<I", answer, 1)
    message = answer[5:5 + size].decode()
    assert "system" in message and "refused" in message, message
    assert answer[5 + size:] == _writer.OK
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    try:
        assert db.execute("SELECT * FROM namespaces").fetchall() == [("ns", "basic")]
    finally:
        db.close()


async def test_a_burst_goes_as_bounded_frames_each_answered_all_written_in_order(
        tmp_path, monkeypatch):
    """#48: 1,000 messages sent in one batch (one commit), then received in two, with
    frames capped at 64 rows and 8 KiB: they go as several frames, none over either cap
    (but for a row bigger than the cap, alone), each answered; every message is on disk
    in order after the sends, and none after the receives (everything pending went as
    one frame, pickled on the loop at once)."""
    monkeypatch.setattr(_group_commit, "MOST_ROWS", 64)
    monkeypatch.setattr(_group_commit, "MOST_BYTES", 8192)
    frames: list[tuple[int, int]] = []  # rows, bytes of bodies
    send = _link.WriterLink.send

    def watched(self: _link.WriterLink[Any], write: Any, frame: bytes, *resume: Any) -> None:
        ops, groups, _ = pickle.loads(frame)
        rows = len(ops) + sum(len(d) + len(p) + len(h) for _, _, d, p, h in groups)
        size = sum(len(body) for _, _, _, puts, _ in groups for _, body, _ in puts)
        frames.append((rows, size))
        send(self, write, frame, *resume)

    big = b"B" * 10_000  # over the byte cap: a frame of its own
    bodies = [b"%05d" % n + b"." * 50 for n in range(1000)] + [big]
    async with serve(data_dir=tmp_path) as server:
        journal = server.journal
        assert journal is not None
        async with aiosb.connect(server.namespace_url("burst")) as ns:
            await ns.create_queue("q")
            monkeypatch.setattr(_link.WriterLink, "send", watched)
            async with ns.sender("q") as sender:
                await sender.send([Message(body) for body in bodies])
            puts = len(frames)
            assert _bodies(tmp_path) == bodies
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                got: list[Any] = []
                while len(got) < len(bodies):
                    got += await receiver.receive(600, max_wait=1)
            assert _bodies(tmp_path) == []
    assert [bytes(m.body) for m in got] == bodies
    assert puts > 1000 // 64 and len(frames) > 2 * (1000 // 64), frames
    assert all(rows <= 64 for rows, _ in frames), frames
    assert all(size <= 8192 or size == len(big) for _, size in frames), [
        size for _, size in frames if size > 8192]


def _record(seq: int) -> _Record:
    rec = _Record.blank()
    for name, value in {"body": b"m%d" % seq, "seq": seq, "size": 3, "enqueued": 0.0,
                        "state": 0, "delivery_count": 0, "deferred": False, "frag": 0,
                        "ttl": float("inf"), "message_id": f"id-{seq}"}.items():
        setattr(rec, name, value)
    return rec


async def test_a_batch_puts_rows_before_it_deletes_any_and_leaves_rows_changed_again(
        monkeypatch):
    """#48: a group commit cut into frames of at most 4 rows (one kept for the highest
    id): its statement first, every row put (entity b, where messages moved to) in a
    frame before any row deleted (entity a, where they came from), so that a group cut
    short by a crash may leave a moved message in both places, never in neither; a row
    pending again since the batch was taken is left to the next; only the last frame
    is whole."""
    monkeypatch.setattr(_group_commit, "MOST_ROWS", 4)
    a, b = ("ns", "a"), ("ns", "b")
    dirty: dict[Any, dict[int, Any]] = {
        a: dict.fromkeys(range(1, 11)), b: {n: (None, _record(n)) for n in range(1, 11)}}
    op = ("INSERT OR IGNORE INTO namespaces VALUES (?, ?)", ("ns", "basic"))
    batch = _group_commit.Batch(7, dirty, {}, [op], 0)
    pending = {b: {5: None}}  # b's 5 changed again after the batch was taken
    loop = asyncio.get_running_loop()
    frames = []
    while not batch.done:
        write, frame = batch.cut(pending, {}, False, loop.create_future())
        ops, groups, _ = pickle.loads(frame)
        frames.append((write.whole, ops, {(ns, e): (d, [seq for seq, _, _ in p])
                                          for ns, e, d, p, _ in groups}))
    assert [whole for whole, _, _ in frames] == [False] * (len(frames) - 1) + [True]
    assert frames[0][1] == [op] and all(not ops for _, ops, _ in frames[1:])
    assert all(len(ops) + sum(len(d) + len(p) for d, p in g.values()) <= 3
               for _, ops, g in frames)
    puts = [seq for _, _, g in frames for seq in g.get(b, ((), ()))[1]]
    deletes = [seq for _, _, g in frames for seq in g.get(a, ((), ()))[0]]
    assert sorted(puts) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert sorted(deletes) == list(range(1, 11))
    last_put = max(i for i, (_, _, g) in enumerate(frames) if b in g)
    first_delete = min(i for i, (_, _, g) in enumerate(frames) if a in g)
    assert last_put <= first_delete  # in one frame: one transaction


@pytest.mark.parametrize(("fsync", "level"), [(False, NORMAL), (True, FULL)])
async def test_the_writer_process_runs_with_synchronous_as_asked(
        tmp_path, monkeypatch, fsync, level):
    """#48, R-3: ``--fsync`` where it acts, the writer's own connection: the command
    line the server starts its writer with, run through the writer's ``main`` as the
    process runs it, reads ``synchronous`` FULL with fsync and NORMAL without (the
    journal's own connection, which only reads, proved nothing: the flag could be
    dropped on the way to the writer)."""
    loop = asyncio.get_running_loop()
    started: list[list[str]] = []
    spawn = loop.subprocess_exec

    async def recorded(factory: Any, *args: Any, **kwargs: Any) -> Any:
        started.append([str(arg) for arg in args])
        return await spawn(factory, *args, **kwargs)

    monkeypatch.setattr(loop, "subprocess_exec", recorded)
    async with serve(data_dir=tmp_path, fsync=fsync):
        pass
    (argv,) = [args for args in started if _writer.__file__ in args]
    assert argv[:3] == [sys.executable, "-I", "-S"]
    seen: list[int] = []

    def serve_once(writer: _writer.Writer, frames: Any, answers: Any) -> None:
        seen.append(writer.db.execute("PRAGMA synchronous").fetchone()[0])

    monkeypatch.setattr(_writer, "serve", serve_once)
    monkeypatch.setattr(_writer.signal, "signal", lambda *args: None)
    assert _writer.main(argv[argv.index(_writer.__file__) + 1:]) == 0
    assert seen == [level]
