"""Durable mode of the emulator server (``aiosb serve --data-dir``), R-3.

In process: serve, work, stop, forget the in-memory emulator, serve again from the same
directory, and find everything as it was (looptime keeps lock expiries exact). Then the
real thing: a server process killed with SIGKILL in the middle of a stream of sends and
completions, restarted, and checked message by message.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb._clock import CLOCK
from aiosb.emulator._record import _Record
from aiosb.emulator.durable import Journal
from aiosb.emulator.durable._rows import encode_record
from aiosb.protocol import ManagementRequest
from aiosb.server.http import serve
from aiosb.wire.json_values import dumps

LOCK = 30


async def restart() -> None:
    """What a server restart leaves of the in-memory state: nothing."""
    emulator.reset()


@pytest.mark.looptime
async def test_everything_survives_a_restart(tmp_path):
    """Entities, messages with every field, dead letters, deferred and scheduled
    messages, sessions and their state, partitioned fragments and sequence numbers."""
    at = datetime.now(UTC) + timedelta(hours=1)
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("keep")) as ns:
            await ns.create_queue("q", lock_duration=timedelta(seconds=LOCK), max_delivery_count=3)
            await ns.create_queue("p", enable_partitioning=True)
            await ns.create_topic("t")
            await ns.create_subscription("t", "s")
            async with ns.sender("q") as sender:
                await sender.send(
                    [
                        Message(
                            b"keep",
                            message_id="m1",
                            application_properties={"n": 1},
                            time_to_live=timedelta(days=1),
                        ),
                        Message(b"dead"),
                        Message(b"defer"),
                        Message(b"done"),
                    ]
                )
                scheduled = await sender.schedule(Message(b"later"), at)
            async with ns.sender("p") as sender:
                for i in range(8):
                    await sender.send(Message(str(i).encode(), partition_key=f"k{i}"))
            async with ns.sender("t") as sender:
                await sender.send(Message(b"to subscription"))
            async with ns.receiver("q") as receiver:
                keep, dead, defer, done = await receiver.receive(max_messages=4, max_wait=0)
                await receiver.abandon(keep)
                await receiver.dead_letter(dead, reason="bad", description="very")
                await receiver.defer(defer)
                await receiver.complete(done)
            p_before = sorted(m.sequence_number for m in await _peek(ns, "p", 8))
    await restart()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("keep")) as ns:
            queue = await ns.get_queue("q")
            assert (queue.lock_duration, queue.max_delivery_count) == (timedelta(seconds=LOCK), 3)
            props = await ns.runtime_properties("q")
            assert (props.active_message_count, props.deferred_message_count) == (1, 1)
            assert (props.scheduled_message_count, props.dead_letter_message_count) == (1, 1)
            async with ns.receiver("q") as receiver:
                (again,) = await receiver.receive(max_wait=0)
                assert (again.body, again.message_id, again.delivery_count) == (b"keep", "m1", 2)
                assert again.application_properties == {"n": 1}
                assert again.sequence_number == keep.sequence_number
                assert again.expires_at == keep.expires_at
                await receiver.complete(again)
                (deferred,) = await receiver.receive_deferred(defer.sequence_number)
                await receiver.complete(deferred)
                async with ns.sender("q") as sender:
                    await sender.cancel_scheduled(scheduled)
                    await sender.send(Message(b"new"))
                (new,) = await receiver.receive(max_wait=0)
                assert new.sequence_number > scheduled  # numbers go on, never reused
                await receiver.complete(new)
            async with ns.receiver("q", sub_queue="deadletter") as dlq:
                (dl,) = await dlq.receive(max_wait=0)
                assert (dl.body, dl.dead_letter_reason, dl.dead_letter_error_description) == (
                    b"dead",
                    "bad",
                    "very",
                )
            assert sorted(m.sequence_number for m in await _peek(ns, "p", 8)) == p_before
            assert len(p_before) == 8 and len({s >> 48 for s in p_before}) > 1
            async with ns.receiver("t/subscriptions/s") as receiver:
                (msg,) = await receiver.receive(max_wait=0)
                assert msg.body == b"to subscription"


async def _peek(ns: aiosb.Namespace, entity: str, n: int) -> list[aiosb.ReceivedMessage]:
    async with ns.receiver(entity) as receiver:
        return await receiver.peek(n)


@pytest.mark.looptime
async def test_a_lock_held_at_the_restart_ends_when_it_would_have(tmp_path):
    """R-3: a locked message stays locked through a restart and comes back when its lock
    expires (not at once, not never); its lock token still completes it before then."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("locks")) as ns:
            await ns.create_queue("q", lock_duration=timedelta(seconds=LOCK))
            async with ns.sender("q") as sender:
                await sender.send([Message(b"a"), Message(b"b")])
            async with ns.receiver("q") as receiver:
                a, _ = await receiver.receive(max_messages=2, max_wait=0)
    await restart()
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("locks")) as ns:
            async with ns.receiver("q") as receiver:
                await receiver.complete(a)  # the lock survived
                (back,) = await receiver.receive(max_wait=LOCK * 2)
                assert back.body == b"b" and back.delivery_count == 2
                assert loop.time() - start == pytest.approx(LOCK, abs=0.5)
                await receiver.complete(back)
            assert (await ns.runtime_properties("q")).active_message_count == 0


@pytest.mark.looptime
async def test_session_state_and_background_expiry_are_kept(tmp_path):
    """The journal under the embedded emulator itself (sessions are not part of the
    REST protocol): session state, and an expiry no request waited for."""
    journal = Journal(tmp_path)
    await journal.open()
    emulator.use_journal(journal)
    async with aiosb.connect("memory://sess") as ns:
        await ns.create_queue("sq", requires_session=True)
        await ns.create_queue("ttl", dead_lettering_on_message_expiration=True)
        async with ns.receiver("sq", session_id="cart") as receiver:
            set_at = emulator.namespace("sess").now()
            await receiver.session.set_state(b"3 items")
        async with ns.sender("ttl") as sender:
            await sender.send(Message(b"short", time_to_live=timedelta(seconds=5)))
        await asyncio.sleep(10)  # expires in the background, no request waits on it
        assert journal.writes >= 1
    emulator.use_journal(None)
    await journal.aclose()
    await restart()
    journal = Journal(tmp_path)
    await journal.open()
    await journal.load()
    emulator.use_journal(journal)
    async with aiosb.connect("memory://sess") as ns:
        async with ns.receiver("sq", session_id="cart") as receiver:
            assert await receiver.session.get_state() == b"3 items"
        # When the state was set is kept too: get-message-sessions with a last-updated
        # time still finds the session after the restart.
        assert await _sessions_set_after(ns, "sq", set_at - 1) == ["cart"]
        assert await _sessions_set_after(ns, "sq", set_at + 1) == []
        props = await ns.runtime_properties("ttl")
        assert (props.active_message_count, props.dead_letter_message_count) == (0, 1)
    emulator.use_journal(None)
    await journal.aclose()


async def _sessions_set_after(ns: aiosb.Namespace, entity: str, after: float) -> list[str]:
    request = ManagementRequest("sessions", None, entity, after)
    listed: list[str] = await ns.transport.manage(request)
    return listed


async def test_a_database_from_before_session_times_were_kept_opens(tmp_path):
    """A data directory written before the sessions table had its ``state_set`` column
    opens with the column added: its session states load, as set at no known time."""
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    db.executescript(
        "CREATE TABLE sessions (ns TEXT NOT NULL, entity TEXT NOT NULL, sid TEXT NOT NULL,"
        " state BLOB, PRIMARY KEY (ns, entity, sid));"
        "INSERT INTO sessions VALUES ('old', 'sq', 'cart', x'6869');"
    )
    db.close()
    journal = Journal(tmp_path)
    await journal.open()
    try:
        sessions = await journal.read(
            lambda db: db.execute("SELECT ns, entity, sid, state, state_set FROM sessions")
            .fetchall())
        assert sessions == [("old", "sq", "cart", b"hi", 0.0)]
    finally:
        await journal.aclose()


async def test_concurrent_sends_share_disk_writes(tmp_path):
    """Group commit: 200 concurrent single sends need far fewer than 200 writes."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("group")) as ns:
            await ns.create_queue("q")
            journal = emulator.namespace("group").journal
            before = journal.writes
            async with ns.sender("q") as sender:
                await asyncio.gather(*(sender.send(Message(b"x")) for _ in range(200)))
            writes = journal.writes - before
            assert (await ns.runtime_properties("q")).active_message_count == 200
    assert 1 <= writes < 100


def test_sigkill_mid_stream_loses_nothing_acknowledged(tmp_path):
    """R-3: kill -9 the server while sends and completions are in flight; after a
    restart every acknowledged send is there unless its completion was acknowledged,
    and every acknowledged completion stays done."""
    data = tmp_path / "data"

    def start() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--amqp-port", "0",
             "--amqps-port", "0", "--data-dir", str(data)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read()  # type: ignore[union-attr]
        return proc, f"{url}/crash"

    sent: set[str] = set()
    completing: set[str] = set()
    completed: set[str] = set()

    async def stream(url: str) -> None:
        async with aiosb.connect(url, operation_timeout=5) as ns:
            if not await ns.queue_exists("q"):
                await ns.create_queue("q", lock_duration=timedelta(seconds=5))

            async def producer(p: int) -> None:
                async with ns.sender("q") as sender:
                    for i in range(10_000):
                        mid = f"{p}-{i}"
                        await sender.send(Message(mid.encode(), message_id=mid))
                        sent.add(mid)

            async def consumer() -> None:
                async with ns.receiver("q") as receiver:
                    while True:
                        for msg in await receiver.receive(max_messages=20, max_wait=1):
                            completing.add(msg.message_id)  # done or not: unknown yet
                            await receiver.complete(msg)
                            completed.add(msg.message_id)

            await asyncio.gather(*(producer(p) for p in range(8)), consumer())

    proc, url = start()
    try:

        async def run_until_killed() -> None:
            task = asyncio.ensure_future(stream(url))
            while len(sent) < 400:
                await asyncio.sleep(0.01)
                if task.done():
                    task.result()
            os.kill(proc.pid, signal.SIGKILL)
            with pytest.raises(aiosb.ServiceBusError):
                await task

        asyncio.run(run_until_killed())
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(sent) >= 400 and completed

    proc, url = start()
    try:

        async def check() -> list[aiosb.ReceivedMessage]:
            found: list[aiosb.ReceivedMessage] = []
            async with aiosb.connect(url) as ns, ns.receiver("q") as receiver:
                while batch := await receiver.peek(10_000):
                    found += batch
            return found

        there = {m.message_id for m in asyncio.run(check())}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    # Nothing acknowledged is lost: every acknowledged send is there, unless a completion
    # of it was asked for (the kill may land after it is on disk, before its answer).
    assert sent - completing <= there
    assert len(sent - completing) > 100
    assert not (there & completed)  # nothing acknowledged as done comes back


@pytest.mark.looptime
async def test_rules_survive_a_restart(tmp_path):
    """Issue 14: a subscription's rules (filters, actions, parameters) and a subscription
    with no rules at all are kept; a message sent after the restart is routed by them."""
    from aiosb import CorrelationRuleFilter, RuleProperties, SqlRuleAction, SqlRuleFilter

    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("rules")) as ns:
            await ns.create_topic("t")
            await ns.create_subscription(
                "t", "eu",
                default_rule=RuleProperties(
                    "eu", SqlRuleFilter("region = @r", {"r": "eu"}),
                    SqlRuleAction("SET routed = @by", {"by": "eu-rule"}),
                ),
            )
            await ns.create_subscription("t", "corr")
            await ns.create_rule("t", "corr", "c", filter=CorrelationRuleFilter(label="x"))
            await ns.create_subscription("t", "none")
            await ns.delete_rule("t", "none", "$Default")
            before = {s: await ns.list_rules("t", s) for s in ("eu", "corr", "none")}
    await restart()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("rules")) as ns:
            after = {s: await ns.list_rules("t", s) for s in ("eu", "corr", "none")}
            assert after == before and after["none"] == []
            async with ns.sender("t") as sender:
                await sender.send([Message(b"eu", application_properties={"region": "eu"}),
                                   Message(b"x", subject="x")])
            async with ns.receiver("t/subscriptions/eu") as receiver:
                (got,) = await receiver.receive(max_messages=10, max_wait=0)
                assert got.body == b"eu" and got.application_properties["routed"] == "eu-rule"
            counts = await ns.runtime_properties("t/subscriptions/corr")
            assert counts.active_message_count == 2  # plain rules yield one copy between them


@pytest.mark.looptime
async def test_a_lock_is_kept_beside_the_row_not_by_writing_it_again(tmp_path):
    """#39: receiving (and renewing) changes a message's lock only: the journal keeps
    the lock in the row's lock column and leaves the written row as it was, and a
    restart reads the lock, renewed, from there."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("held")) as ns:
            await ns.create_queue("q", lock_duration=timedelta(seconds=LOCK))
            async with ns.sender("q") as sender:
                await sender.send(Message(b"a"))
            db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
            [(*written, lock)] = db.execute("SELECT body, head, lock FROM msgs").fetchall()
            assert lock is None
            async with ns.receiver("q") as receiver:
                (a,) = await receiver.receive(max_wait=0)
                await asyncio.sleep(LOCK / 2)
                renewed = await receiver.renew_lock(a)
            [(*data, lock)] = db.execute("SELECT body, head, lock FROM msgs").fetchall()
            db.close()
            assert data == written and lock is not None
    await restart()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("held")) as ns:
            async with ns.receiver("q") as receiver:
                assert await receiver.peek(max_messages=5) != []
                assert await receiver.receive(max_wait=0) == []  # still locked
            store = emulator.namespace("held")._entities["q"].fragments[0]
            [rec] = store.records.values()
            assert (rec.lock_token, rec.delivery_count) == (a.lock_token, 1)
            assert rec.locked_until == pytest.approx(renewed.timestamp())
            async with ns.receiver("q") as receiver:
                await receiver.complete(a)  # the lock survived, renewed
            assert (await ns.runtime_properties("q")).total_message_count == 0


@pytest.mark.looptime
@pytest.mark.parametrize("lock_column", [False, True])
async def test_a_database_of_the_schema_before_39_is_moved_to_the_compact_table(
    tmp_path, lock_column
):
    """#39: a data directory written before the compact message table (rows in
    ``messages``, keyed by namespace and entity names, one JSON document each, with or
    without the ``lock`` column) opens with its rows moved to ``msgs``: every message
    as it was (ids, properties, a held lock, the dead-letter queue, a session), in order,
    and the old table gone; every id stays text, even one spelled as the broker spells
    its own (an older aiosb's prefix was random per process: a client's GUID looks the
    same; adopting it made every start count to 10^14, #39)."""
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("old")) as ns:
            await ns.create_queue("q", lock_duration=timedelta(seconds=LOCK))
            await ns.create_queue("s", requires_session=True)
    await restart()
    rows = [_old_row(seq, body, **fields) for seq, body, fields in (
        (1, b"first", {"message_id": "m1", "props": {"n": 1}}),
        (2, b"locked", {} if lock_column else {"state": 1, "delivery_count": 1}),
        (3, b"dead", {"dl_reason": "bad"}),
        (4, b"third", {"message_id": SPELLED}),
        (5, b"fourth", {"message_id": "ffffffff-0123-4567-89ab-00000000002b"}),
    )]
    lock = dumps([1, 1, "tok-2", CLOCK.now() + LOCK])
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    db.executescript("DROP TABLE msgs; DROP TABLE entity_ids; DROP TABLE meta;")
    db.execute(
        "CREATE TABLE messages (ns TEXT NOT NULL, entity TEXT NOT NULL, seq INTEGER NOT NULL,"
        " store TEXT NOT NULL, data BLOB NOT NULL" + (", lock TEXT" if lock_column else "")
        + ", PRIMARY KEY (ns, entity, seq))")
    for seq, data in rows:
        store = {3: "d"}.get(seq, "m")
        held = lock if lock_column and seq == 2 else None
        db.execute("INSERT INTO messages (ns, entity, seq, store, data) VALUES (?, ?, ?, ?, ?)",
                   ("old", "q", seq, store, data))
        if held is not None:
            db.execute("UPDATE messages SET lock = ? WHERE seq = ?", (held, seq))
    db.execute("INSERT INTO messages (ns, entity, seq, store, data) VALUES (?, ?, ?, ?, ?)",
               ("old", "s", 1, "s:cart", _old_row(1, b"in a session", session_id="cart")[1]))
    db.commit()
    db.close()
    async with serve(data_dir=tmp_path) as server:
        await server.journal.recovery.wait_all()  # the rows move in the background (#39)
        db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
        heads = dict(db.execute("SELECT seq, length(head) FROM msgs WHERE seq IN (4, 5) AND "
                                "eid = (SELECT id FROM entity_ids WHERE key = 'q')"))
        db.close()
        assert heads[4] == heads[5] > 26  # both ids in the tail: text
        async with aiosb.connect(server.namespace_url("old")) as ns:
            async with ns.receiver("q") as receiver:
                got = await receiver.receive(max_messages=10, max_wait=0)
                assert [m.body for m in got] == [b"first", b"third", b"fourth"]  # one held
                assert (got[0].message_id, got[0].application_properties) == ("m1", {"n": 1})
                assert [m.message_id for m in got[1:]] == [  # ids spelled as they were
                    SPELLED, "ffffffff-0123-4567-89ab-00000000002b"]
                held = emulator.namespace("old")._entities["q"].fragments[0].records[2]
                assert (held.lock_token, held.delivery_count) == ("tok-2", 1)
                await receiver.complete(got)
                (back,) = await receiver.receive(max_wait=2 * LOCK)  # when its lock ends
                assert (back.body, back.delivery_count) == (b"locked", 2)
            async with ns.receiver("q", sub_queue="deadletter") as dlq:
                (dead,) = await dlq.peek()
                assert (dead.body, dead.dead_letter_reason) == (b"dead", "bad")
        async with aiosb.connect("memory://old") as ns:  # sessions: not over REST
            async with ns.receiver("s", session_id="cart") as receiver:
                (in_session,) = await receiver.receive(max_wait=0)
                assert in_session.body == b"in a session"
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    meta = dict(db.execute("SELECT name, value FROM meta"))
    db.close()
    assert "messages" not in tables and "msgs" in tables
    # No prefix a client's id could have made is adopted: the process's own is named.
    assert meta["auto_prefix"] != SPELLED[:-12] and "auto_high" not in meta


SPELLED = "0123abcd-0123-4567-89ab-00000000002a"  # as aiosb spells an id it gave


def _old_row(seq: int, body: bytes, **fields: object) -> tuple[int, bytes]:
    """A message row as aiosb wrote it before #39 (``encode_record``)."""
    rec = _Record.blank()
    values = {"body": body, "seq": seq, "size": len(body), "enqueued": CLOCK.now(),
              "state": 0, "delivery_count": 0, "deferred": False, "frag": 0,
              "ttl": float("inf"), "message_id": f"id-{seq}", **fields}
    if values["state"] == 1:
        values.update(lock_token="tok-2", locked_until=CLOCK.now() + LOCK)
    for name, value in values.items():
        setattr(rec, name, value)
    return seq, encode_record(rec)
