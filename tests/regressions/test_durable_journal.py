"""Regression tests from the review of durable mode: each failed before its fix.

Each test restarts in process: what was committed stays on disk, the in-memory emulator
is forgotten, and the journal loads it back.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

import aiosb
from aiosb import Message, emulator, errors
from aiosb.emulator.durable import Journal
from aiosb.server.http import serve


@pytest.fixture(autouse=True)
def _detach_journal():
    yield
    emulator.use_journal(None)


async def start(path, load=True):
    j = Journal(path)
    await j.open()
    if load:
        await j.load()
    emulator.use_journal(j)
    return j


async def restart(j, path):
    """Kill-like restart: everything already committed is on disk; then forget memory."""
    await j.commit()
    emulator.use_journal(None)
    await j.aclose()
    emulator.reset()
    return await start(path)


async def test_reset_and_a_second_journal_are_refused_while_serving_durably(tmp_path):
    async with serve(data_dir=tmp_path / "a"):
        with pytest.raises(errors.InvalidOperation, match="stop that server"):
            emulator.reset()
        with pytest.raises(errors.InvalidOperation, match="one durable server"):
            async with serve(data_dir=tmp_path / "b"):
                pass
    emulator.reset()  # fine once stopped


# A record object that moves to another entity keeps one dirty entry: the old row stays.


@pytest.mark.looptime
async def test_scheduled_on_topic_is_not_delivered_twice_after_restart(tmp_path):
    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://mv") as ns:
        await ns.create_topic("t")
        await ns.create_subscription("t", "s")
        async with ns.sender("t") as sender:
            await sender.schedule(Message(b"once"), datetime.now(UTC) + timedelta(seconds=5))
        await j.commit()
        await asyncio.sleep(10)  # activation: topic store -> subscription
        await j.commit()
        assert (await ns.runtime_properties("t/subscriptions/s")).active_message_count == 1
    j = await restart(j, tmp_path)
    async with aiosb.connect("memory://mv") as ns:
        await asyncio.sleep(20)
        props = await ns.runtime_properties("t/subscriptions/s")
        tprops = await ns.runtime_properties("t")
        async with ns.receiver("t/subscriptions/s") as r:
            got = await r.receive(max_messages=10, max_wait=0)
        await j.aclose()
        assert tprops.scheduled_message_count == 0
        assert [m.body for m in got] == [b"once"], (props, tprops)


@pytest.mark.looptime
async def test_scheduled_on_forwarding_queue_is_not_delivered_twice_after_restart(tmp_path):
    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://mv2") as ns:
        await ns.create_queue("dst")
        await ns.create_queue("src", forward_to="dst")
        async with ns.sender("src") as sender:
            await sender.schedule(Message(b"once"), datetime.now(UTC) + timedelta(seconds=5))
        await j.commit()
        await asyncio.sleep(10)
        await j.commit()
    j = await restart(j, tmp_path)
    async with aiosb.connect("memory://mv2") as ns:
        await asyncio.sleep(20)
        async with ns.receiver("dst") as r:
            got = await r.receive(max_messages=10, max_wait=0)
        sprops = await ns.runtime_properties("src")
        await j.aclose()
        assert sprops.scheduled_message_count == 0
        assert [m.body for m in got] == [b"once"]


# Sequence numbers of messages added and removed within one group commit are reused.


@pytest.mark.looptime
async def test_seq_not_reused_after_receive_and_delete_in_one_group(tmp_path):
    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://sq") as ns:
        await ns.create_queue("q")
        await j.commit()
        async with ns.sender("q") as s, ns.receiver("q", mode="receive_and_delete") as r:
            await s.send(Message(b"a"))
            (a,) = await r.receive(max_wait=0)  # no flush in between (no server commit)
        await j.commit()
    j = await restart(j, tmp_path)
    async with aiosb.connect("memory://sq") as ns:
        async with ns.sender("q") as s, ns.receiver("q", mode="receive_and_delete") as r:
            await s.send(Message(b"b"))
            (b,) = await r.receive(max_wait=0)
    await j.aclose()
    assert b.sequence_number > a.sequence_number


async def test_seq_not_reused_via_server_long_poll_receive_and_delete(tmp_path):
    """Over HTTP: a receive-and-delete consumer long-polling; the send wakes it and the
    message is gone before the send's group is snapshotted: no row, no high-water mark."""
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("sqs")) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as s, ns.receiver("q", mode="receive_and_delete") as r:
                recv = asyncio.ensure_future(r.receive(max_wait=5))
                await asyncio.sleep(0.5)
                await s.send(Message(b"a"))
                (a,) = await recv
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("sqs")) as ns:
            async with ns.sender("q") as s, ns.receiver("q", mode="receive_and_delete") as r:
                await s.send(Message(b"b"))
                (b,) = await r.receive(max_wait=1)
    assert b.sequence_number > a.sequence_number


# A deleted entity's session lock still expires on the namespace timeline; the unlocked
# message is journaled under the entity's key and comes back in a new entity of that name.


@pytest.mark.looptime
async def test_deleted_entity_message_not_resurrected(tmp_path):
    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://del") as ns:
        await ns.create_queue("sq", requires_session=True, lock_duration=timedelta(seconds=30))
        async with ns.sender("sq") as s:
            await s.send(Message(b"old", session_id="a"))
        r = ns.receiver("sq", session_id="a")
        await r.__aenter__()
        (_m,) = await r.receive(max_wait=0)
        await ns.delete_queue("sq")
        await ns.create_queue("sq")  # a new, unrelated queue of the same name
        await j.commit()
        await asyncio.sleep(60)  # the old session's lock ends
        await j.commit()
        in_memory = (await ns.runtime_properties("sq")).active_message_count
        try:
            await r.__aexit__(None, None, None)
        except Exception:
            pass
    j = await restart(j, tmp_path)
    async with aiosb.connect("memory://del") as ns:
        props = await ns.runtime_properties("sq")
        async with ns.receiver("sq") as rr:
            peeked = await rr.peek(10)
    await j.aclose()
    assert in_memory == 0
    assert props.active_message_count == 0 and peeked == [], [p.body for p in peeked]


# use_journal()/serve(data_dir) over a namespace that already has entities journals the
# namespace row only: its entities never reach the disk, so every acknowledged send to them
# is skipped at load (the entity row is missing).


async def test_prepopulated_namespace_is_durable(tmp_path):
    emulator.reset()
    async with aiosb.connect("memory://pre") as ns:
        await ns.create_queue("q")
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("pre")) as ns:
            async with ns.sender("q") as s:
                await s.send(Message(b"acknowledged"))
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("pre")) as ns:
            assert await ns.queue_exists("q")


# A failing write is retried at once, forever: a hot loop (and an unretrieved task
# exception logged each time).


def _refused(monkeypatch, first: int) -> list[int]:
    """The writer process refuses the first ``first`` groups it is sent (their frames
    arrive mangled: unpickling fails in the writer, which answers FAILED and rolls
    back) and writes the rest; the list counts the groups sent."""
    from aiosb.emulator.durable import _writer_client as _link

    sent: list[int] = []
    send = _link.WriterLink.send

    def mangled(self, write, body, *resume):
        sent.append(1)
        if len(sent) <= first:
            body = b"\xff" * len(body)
        send(self, write, body, *resume)

    monkeypatch.setattr(_link.WriterLink, "send", mangled)
    return sent


async def test_failed_background_flush_backs_off(tmp_path, monkeypatch):
    emulator.reset()
    j = await start(tmp_path)
    sent = _refused(monkeypatch, 10**6)
    async with aiosb.connect("memory://ff") as ns:
        await ns.create_queue("q")  # background kick at 50 ms, then retries
        await asyncio.sleep(0.5)
    n = len(sent)
    emulator.use_journal(None)
    j._changes = j._durable  # let it stop
    await asyncio.sleep(0.05)
    assert 2 <= n < 20, f"{n} write attempts in 0.5 s"


async def test_commit_of_a_change_not_in_the_failed_group_is_not_failed(tmp_path, monkeypatch):
    """B's change arrives while A's group is being written (B's group waits behind it in
    the writer's pipe); A's write fails; B is not told its operation failed: its change
    was never tried (a retried send duplicates), and it is written again."""
    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://ff2") as ns:
        await ns.create_queue("q")
        await j.commit()
        sent = _refused(monkeypatch, 1)
        async with ns.sender("q") as s:
            await s.send(Message(b"a"))
            ca = asyncio.ensure_future(j.commit())
            await asyncio.sleep(0)  # A's group is sent
            await s.send(Message(b"b"))
            cb = asyncio.ensure_future(j.commit())
            ra, rb = await asyncio.gather(ca, cb, return_exceptions=True)
    emulator.use_journal(None)
    await j.aclose()
    assert len(sent) >= 2, "B's group was not sent while A's was in flight"
    assert isinstance(ra, errors.TransientError)
    assert rb is None, f"B's commit failed: {rb!r}"
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    try:
        bodies = sorted(body for (body,) in db.execute("SELECT body FROM msgs"))
    finally:
        db.close()
    assert bodies == [b"a", b"b"], "what was taken back from the writer was not written"


# (Pre-existing, in-memory) a session message whose lock ends after its TTL stays LOCKED forever.


@pytest.mark.looptime
async def test_expired_locked_session_message_goes_away(tmp_path):
    emulator.reset()
    async with aiosb.connect("memory://stuck") as ns:
        await ns.create_queue(
            "sq",
            requires_session=True,
            lock_duration=timedelta(seconds=30),
            dead_lettering_on_message_expiration=True,
        )
        async with ns.sender("sq") as s:
            await s.send(Message(b"x", session_id="a", time_to_live=timedelta(seconds=10)))
        async with ns.receiver("sq", session_id="a") as r:
            (_m,) = await r.receive(max_wait=0)
            await asyncio.sleep(40)  # session lock (and message lock) end after the TTL
        await asyncio.sleep(5)
        props = await ns.runtime_properties("sq")
        rec = (
            next(
                iter(
                    emulator.namespace("stuck")._entities["sq"].sessions["a"].store.records.values()
                ),
                None,
            )
            if "a" in emulator.namespace("stuck")._entities["sq"].sessions
            else None
        )
        assert (props.active_message_count, props.dead_letter_message_count) == (0, 1), (
            props,
            rec and (rec.state, rec.lock_token),
        )


async def test_rows_taken_back_after_their_entity_went_are_not_written_after_it(
        tmp_path, monkeypatch):
    """A group carrying a queue's message is refused, and its answer arrives after the
    queue was deleted: the message's row is not written again after the delete (it would
    stay in the database, of no entity)."""
    from aiosb.emulator.durable import _writer_client as _link

    emulator.reset()
    j = await start(tmp_path)
    held: list[tuple[_link.WriterLink, int, bytes]] = []
    receive = _link.WriterLink.pipe_data_received

    def hold(self, fd, data):  # the writer's answers wait until the queue is gone
        held.append((self, fd, data))

    async with aiosb.connect("memory://went") as ns:
        await ns.create_queue("q")
        await j.commit()
        _refused(monkeypatch, 1)
        monkeypatch.setattr(_link.WriterLink, "pipe_data_received", hold)
        async with ns.sender("q") as sender:
            await sender.send(Message(b"a"))
        put = asyncio.ensure_future(j.commit())  # the put's group: sent, to be refused
        while not held:
            await asyncio.sleep(0.01)
        await ns.delete_queue("q")
        monkeypatch.setattr(_link.WriterLink, "pipe_data_received", receive)
        for link, fd, data in held:
            link.pipe_data_received(fd, data)
        with pytest.raises(errors.TransientError):
            await put
        await j.commit()  # the delete, and what came back of the put's group
    emulator.use_journal(None)
    await j.aclose()
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    try:
        assert db.execute("SELECT count(*) FROM msgs").fetchone() == (0,)
    finally:
        db.close()


async def test_names_given_as_str_subclasses_are_written(tmp_path):
    """A queue named with a ``StrEnum`` (a subclass of str): the writer, a process that
    imports none of the caller's classes, writes it as the plain name (it refused every
    later group when the name reached it pickled as the caller's class)."""
    import enum

    class Queues(enum.StrEnum):
        ORDERS = "orders"

    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://named") as ns:
        await ns.create_queue(Queues.ORDERS)
        async with ns.sender(Queues.ORDERS) as sender:
            await sender.send(Message(b"a"))
        await j.commit()
    j = await restart(j, tmp_path)
    async with aiosb.connect("memory://named") as ns:
        assert (await ns.runtime_properties("orders")).total_message_count == 1
    emulator.use_journal(None)
    await j.aclose()


async def test_a_writer_that_dies_is_started_again_and_nothing_is_lost(tmp_path):
    """The writer's process killed with a group in flight: that commit fails (or was
    written first), the next starts a new writer, and everything is on disk."""
    emulator.reset()
    j = await start(tmp_path)
    async with aiosb.connect("memory://dies") as ns:
        await ns.create_queue("q")
        await j.commit()
        link = j._link
        assert link is not None
        async with ns.sender("q") as sender:
            await sender.send(Message(b"a"))
        first = asyncio.ensure_future(j.commit())
        await asyncio.sleep(0)  # its group is in the pipe
        link._transport.kill()
        try:
            await first
        except errors.TransientError:
            pass
        await link.exited
        async with ns.sender("q") as sender:
            await sender.send(Message(b"b"))
        await j.commit()
        assert j._link is not None and j._link is not link
    j = await restart(j, tmp_path)
    async with aiosb.connect("memory://dies") as ns:
        assert (await ns.runtime_properties("q")).total_message_count == 2
    emulator.use_journal(None)
    await j.aclose()


def test_the_writer_forgets_the_entity_ids_of_a_transaction_rolled_back(tmp_path):
    """An entity's id made in a transaction that rolled back is made again: a cached id
    would put the entity's rows under the next entity's id."""
    from aiosb.emulator.durable import _writer_process as _writer
    from aiosb.emulator.durable._schema import SCHEMA

    db = sqlite3.connect(tmp_path / "w.sqlite3", isolation_level=None)
    db.executescript(SCHEMA)
    writer = _writer.Writer(db)
    with pytest.raises(sqlite3.Error):  # q's id is made, then a bad statement
        writer.write([], [("ns", "q", [], [(1, b"q", b"h")], [])], [("ns", "q", 0)])
    writer.write([], [("ns", "r", [], [(1, b"r", b"h")], [])], [])
    writer.write([], [("ns", "q", [], [(2, b"q", b"h")], [])], [])
    ids = dict(db.execute("SELECT key, id FROM entity_ids"))
    rows = {body: eid for eid, body in db.execute("SELECT eid, body FROM msgs")}
    db.close()
    assert ids["q"] != ids["r"] and rows == {b"r": ids["r"], b"q": ids["q"]}
