"""Durable mode's two promises (#39, R-3) and how a group commit writes its rows.

By default the journal runs SQLite's WAL with ``synchronous=NORMAL``: what is
acknowledged survives the server being killed (R-3's SIGKILL tests, in
``test_durable.py``, run in this mode), not the machine crashing. ``aiosb serve
--fsync`` (``serve(fsync=True)``) runs with ``synchronous=FULL``: it survives that too.
A group commit writes a batch's rows a few statements at a time, its deletes as runs of
sequence numbers: what is on disk after sends, receives and settlements of batches of
awkward sizes is exactly what is held.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

import aiosb
from aiosb import Message, cli, emulator
from aiosb.server.http import serve

#: ``PRAGMA synchronous`` as SQLite reads it back.
NORMAL, FULL = 1, 2


async def _synchronous(fsync: bool | None, data_dir: Any) -> int:
    kwargs = {} if fsync is None else {"fsync": fsync}
    async with serve(data_dir=data_dir, **kwargs) as server:
        assert server.journal is not None
        level: int = await server.journal.read(
            lambda db: db.execute("PRAGMA synchronous").fetchone()[0])
    return level


@pytest.mark.parametrize(("fsync", "level"), [(None, NORMAL), (False, NORMAL), (True, FULL)])
async def test_r3_by_default_the_journal_survives_a_kill_and_fsync_a_crash(
        tmp_path, fsync, level):
    """R-3, #39: the journal's own connection reads back synchronous=NORMAL by default
    (the WAL survives the process being killed) and FULL with fsync (each commit flushed
    to the disk: it survives the machine crashing)."""
    assert await _synchronous(fsync, tmp_path) == level


def test_aiosb_serve_fsync_asks_for_it_and_needs_a_data_dir(monkeypatch, capsys):
    """``aiosb serve --fsync`` reaches the server; without ``--data-dir`` it is refused
    (in memory nothing is written)."""
    asked: list[bool] = []

    async def serve_forever(config: Any, *, stdin: bool = False) -> None:
        asked.append(config.fsync)

    monkeypatch.setattr(cli, "serve_forever", serve_forever)
    monkeypatch.setattr(cli, "run", lambda coro, loop: asyncio.run(coro))
    for argv in (["--data-dir", "d", "--fsync"], ["--data-dir", "d"]):
        assert not cli.main(["serve", "--no-amqp", *argv])
    assert asked == [True, False]
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--no-amqp", "--fsync"])
    assert exc.value.code == 2
    assert "--fsync goes with --data-dir" in capsys.readouterr().err


def _rows(path: Any) -> dict[int, bool]:
    """Sequence number -> whether its row holds a lock, as the database has them."""
    db = sqlite3.connect(path / "aiosb.sqlite3")
    try:
        return {seq: lock is not None
                for seq, lock in db.execute("SELECT seq, lock FROM msgs")}
    finally:
        db.close()


@pytest.mark.parametrize("update_from", [True, False], ids=["update-from", "sqlite-before-3.33"])
async def test_a_group_writes_batches_of_any_size_exactly(tmp_path, monkeypatch, update_from):
    """#39: batches of 137 and 1 (put 64 + 64 + 8 + 1 rows a statement), 75 received
    (locked 64 + 8 + 2 + 1 a statement, or a row a statement where SQLite has no
    UPDATE ... FROM, before 3.33), every third completed (deleted as runs, with gaps):
    the rows on disk are the messages held, the locked ones with their lock, and a
    restart holds them again."""
    from aiosb.emulator.durable import _writer_client as _link

    if not update_from:  # the writer's process is told to (it cannot be patched)
        monkeypatch.setattr(_link, "WRITER_FLAGS", ["--row-locks"])
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("sizes")) as ns:
            await ns.create_queue("q", lock_duration=timedelta(minutes=5))
            async with ns.sender("q") as sender:
                await sender.send([Message(b"%d" % i, application_properties={"i": i})
                                   for i in range(137)])
                await sender.send(Message(b"last"))
            async with ns.receiver("q") as receiver:
                got: list[aiosb.ReceivedMessage] = []
                while len(got) < 75:
                    got += await receiver.receive(max_messages=75 - len(got), max_wait=1)
                done = got[::3]
                await receiver.complete(done)
            seqs = {m.sequence_number for m in got}
            gone = {m.sequence_number for m in done}
            held = (await ns.runtime_properties("q")).total_message_count
    assert held == 138 - len(gone)
    rows = _rows(tmp_path)
    assert len(rows) == held and not gone & rows.keys()
    assert {seq for seq, locked in rows.items() if locked} == seqs - gone
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("sizes")) as ns:
            async with ns.receiver("q") as receiver:
                peeked = await receiver.peek(max_messages=200)
                assert {m.sequence_number for m in peeked} == rows.keys()
                assert {m.body for m in peeked} == {
                    b"last", *(b"%d" % i for i in range(137))} - {m.body for m in done}
                locked = {m.sequence_number for m in peeked if m.delivery_count == 1}
                assert locked == seqs - gone


@pytest.mark.parametrize("props", [{"i": 2**64 - 1, "t": "ü"}, {"f": float("inf")}, {"b": b"\x00"},
                                   {"f": 1.5}])
async def test_properties_of_one_kind_are_written_as_they_read_back(tmp_path, props):
    """#39: a row writes plain property values (text, whole numbers, booleans) as they
    are, and tags the rest, also when every value of a message is of one such kind (an
    infinite float is not plain; a whole number past 63 bits is)."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("kinds")) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender:
                await sender.send(Message(b"x", application_properties=props))
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("kinds")) as ns:
            async with ns.receiver("q") as receiver:
                (got,) = await receiver.peek()
    assert got.application_properties == props


@pytest.mark.looptime
async def test_a_lock_is_written_once_held_a_while_and_never_if_settled_sooner(
        tmp_path, monkeypatch):
    """#39: a lock goes to the disk once it has been held ``LOCK_WRITE_AFTER`` (no
    request waits for it): a message completed sooner never has its lock written; one
    still held then has, in a group of its own."""
    import pickle

    from aiosb.emulator import durable
    from aiosb.emulator.durable import _writer_client as _link

    locks_sent: list[int] = []
    send = _link.WriterLink.send

    def watched(self: _link.WriterLink[Any], write: Any, body: bytes, *resume: Any) -> None:
        _, groups, _ = pickle.loads(body)
        locks_sent.extend(seq for *_, held in groups for _, seq in held)
        send(self, write, body, *resume)

    monkeypatch.setattr(_link.WriterLink, "send", watched)
    after = durable.LOCK_WRITE_AFTER
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("lazy")) as ns:
            await ns.create_queue("q", lock_duration=timedelta(minutes=5))
            async with ns.sender("q") as sender:
                await sender.send([Message(b"a"), Message(b"b")])
            async with ns.receiver("q") as receiver:
                got: list[aiosb.ReceivedMessage] = []
                while len(got) < 2:
                    got += await receiver.receive(max_messages=2, max_wait=1)
                a, b = got
                await asyncio.sleep(after / 2)
                await receiver.complete(a)
                assert not any(_rows(tmp_path).values()), "a lock was written at once"
                await asyncio.sleep(after)
                assert _rows(tmp_path) == {b.sequence_number: True}
                assert locks_sent == [b.sequence_number]
                await receiver.complete(b)
