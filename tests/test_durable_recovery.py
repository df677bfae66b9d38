"""Durable mode at depth (#39): a restart listens before the messages are loaded, loads
them in the background in sequence order, and never answers from part of a store (R-3:
nothing acknowledged is lost, a kill -9 during the load included).

In process, the loader is held back (``hold``) to see what waits for it and in what
order entities are loaded; chunks are made small so that an entity takes many reads.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import struct
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

import aiosb
from aiosb import Message, emulator, errors
from aiosb.emulator.durable import Journal, _recovery
from aiosb.server.explorer import Explorer
from aiosb.server.http import serve

pytestmark = pytest.mark.looptime


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """An entity's rows come in many reads."""
    monkeypatch.setattr(_recovery, "CHUNK", 7)


@pytest.fixture
def hold(monkeypatch):
    """Hold the loader back until the event is set; the order entities load in is
    appended to ``hold.order``."""
    gate = asyncio.Event()
    order: list[str] = []
    run, load = _recovery.Recovery._run, _recovery.Recovery._load

    async def held(self):
        await gate.wait()
        await run(self)

    async def loading(self, entity):
        order.append(entity.path)
        await load(self, entity)

    monkeypatch.setattr(_recovery.Recovery, "_run", held)
    monkeypatch.setattr(_recovery.Recovery, "_load", loading)
    gate.order = order  # type: ignore[attr-defined]
    return gate


async def _fill(tmp_path, name: str, setup) -> None:
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url(name)) as ns:
            await setup(ns)
    emulator.reset()


async def _send(ns: aiosb.Namespace, path: str, count: int, **kwargs) -> None:
    async with ns.sender(path) as sender:
        await sender.send([Message(f"{path}-{i}".encode(), **kwargs) for i in range(count)])


async def test_a_restart_listens_first_and_an_operation_waits_for_its_entity(tmp_path, hold):
    """#39, R-3: the server listens with no message loaded yet; a receive waits for its
    entity's messages, which are loaded before the others, and then gets them all, in
    order; the counts are right at once; what needs no message does not wait."""
    async def setup(ns):
        for path in ("a", "b", "c"):
            await ns.create_queue(path)
            await _send(ns, path, 40)

    await _fill(tmp_path, "wait", setup)
    async with serve(data_dir=tmp_path) as server:
        recovery = server.journal.recovery
        assert {e.path for e in recovery.pending} == {"a", "b", "c"}  # listening already
        async with aiosb.connect(server.namespace_url("wait")) as ns:
            async with ns.receiver("b", mode="receive_and_delete") as receiver:
                got = asyncio.ensure_future(receiver.receive(max_messages=100, max_wait=0))
                counts = asyncio.ensure_future(ns.runtime_properties("c"))
                await asyncio.sleep(1)
                assert not got.done() and not counts.done()  # never from an empty store
                # What needs no message does not wait: descriptions, creations, listings
                # (in process: a GET over HTTP gives the counts too, and waits).
                async with aiosb.connect("memory://wait") as embedded:
                    assert (await embedded.get_queue("c")).name == "c"
                    await embedded.create_queue("new")
                    assert len(await embedded.list_queues()) == 4
                assert recovery.pending  # still loading
                hold.set()
                assert [m.body for m in await got] == [f"b-{i}".encode() for i in range(40)]
                assert (await counts).active_message_count == 40
            assert set(hold.order[:2]) == {"b", "c"}  # those waited for, first
            await recovery.wait_all()
            assert not recovery.pending and emulator.namespace("wait").recovery is None


async def test_an_entity_loads_after_those_it_passes_messages_to(tmp_path, hold):
    """A send to a topic waits for its subscriptions and where they forward to (loaded
    before any other), so that nothing reaches a store still loading; after it, every
    message is where it was, the new one after them."""
    async def setup(ns):
        await ns.create_queue("dest")
        await ns.create_queue("src", forward_to="dest")
        async with ns.sender("src") as sender:  # held by src until its time: its rows first
            await sender.schedule(Message(b"s"), aiosb_now("order") + timedelta(hours=1))
        await ns.create_queue("z")
        await ns.create_topic("t")
        await ns.create_subscription("t", "s", forward_to="dest")
        await ns.create_subscription("t", "kept")
        await _send(ns, "t", 20)
        await _send(ns, "z", 20)

    await _fill(tmp_path, "order", setup)
    async with serve(data_dir=tmp_path) as server:
        plan = [e.path for e in reversed(server.journal.recovery._plan)]  # taken from its end
        assert plan.index("dest") < plan.index("src")  # unasked, too: targets first
        async with aiosb.connect(server.namespace_url("order")) as ns:
            sent = asyncio.ensure_future(_send(ns, "t", 1, message_id="new"))
            await asyncio.sleep(1)
            assert not sent.done()
            hold.set()
            await sent
            # (the topic and "s" hold no rows: nothing of theirs to load)
            assert set(hold.order[:2]) == {"dest", "t/subscriptions/kept"}
            for path in ("dest", "t/subscriptions/kept"):
                async with ns.receiver(path) as receiver:
                    got = await receiver.peek(100)
                assert [m.body for m in got] == [f"t-{i}".encode() for i in range(20)] + [b"t-0"]
                assert got[-1].message_id == "new"


async def test_every_kind_of_message_comes_back_in_order_across_many_reads(tmp_path):
    """Chunks of 7 rows: a partitioned queue's fragments, dead letters, deferred and
    scheduled messages and an expiry that came while the server was down."""
    async def setup(ns):
        await ns.create_queue("p", enable_partitioning=True)
        await ns.create_queue("q", dead_lettering_on_message_expiration=True)
        async with ns.sender("p") as sender:
            await sender.send([Message(b"%d" % i, partition_key=f"k{i % 5}") for i in range(60)])
        await _send(ns, "q", 30)
        await _send(ns, "q", 1, time_to_live=timedelta(seconds=30))  # expires while down
        async with ns.sender("q") as sender:
            await sender.schedule(Message(b"later"), aiosb_now("kinds") + timedelta(seconds=60))
        async with ns.receiver("q") as receiver:
            first = await receiver.receive(max_messages=3, max_wait=0)
            await receiver.dead_letter(first[0])
            await receiver.defer(first[1])
            await receiver.complete(first[2])

    await _fill(tmp_path, "kinds", setup)
    peeked: dict[str, list[bytes]] = {}
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("kinds")) as ns:
            async with ns.receiver("p") as receiver:
                got = await receiver.peek(100)
            assert sorted(int(m.body) for m in got) == list(range(60))
            await asyncio.sleep(45)  # the expiry that came while down has been applied
            props = await ns.runtime_properties("q")
            assert (props.active_message_count, props.deferred_message_count) == (27, 1)
            assert (props.scheduled_message_count, props.dead_letter_message_count) == (1, 2)
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                peeked["q"] = [m.body for m in await receiver.receive(100, max_wait=0)]
            await asyncio.sleep(30)  # the scheduled one's time comes
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                peeked["later"] = [m.body for m in await receiver.receive(100, max_wait=0)]
    assert peeked["q"] == [f"q-{i}".encode() for i in range(3, 30)]
    assert peeked["later"] == [b"later"]


def aiosb_now(name: str) -> datetime:
    """The emulator's time now, as namespace ``name`` keeps it."""
    return datetime.fromtimestamp(emulator.namespace(name).now(), UTC)


async def test_a_row_that_cannot_be_read_fails_the_operations_that_need_it(tmp_path):
    """A row the loader cannot read stops it: an operation on that entity raises the
    sentence rather than answer from the part loaded; other entities loaded before it
    are served."""
    async def setup(ns):
        await ns.create_queue("fine")
        await ns.create_queue("bad")
        await _send(ns, "fine", 3)
        await _send(ns, "bad", 3)

    await _fill(tmp_path, "broken", setup)
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    head = struct.pack("<BBIIqd", 4, 0, 0, 3, 1, 0.0) + b"aiosb-json-9\n{}"  # a tail of v9
    db.execute("UPDATE msgs SET head = ? WHERE seq = 2 AND "
               "eid = (SELECT id FROM entity_ids WHERE key = 'bad')", (head,))
    db.commit()
    db.close()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("broken")) as ns:
            assert (await ns.runtime_properties("fine")).active_message_count == 3
            with pytest.raises(errors.InvalidArgument, match="aiosb-json-9"):
                await ns.runtime_properties("bad")


async def test_broker_assigned_ids_stay_numbers_and_read_the_same(tmp_path):
    """#39 (memory): a MessageId the broker gave is kept as its number in the row and,
    spelled as this process spells ids, stays a number in memory after the restart."""
    journal = Journal(tmp_path)
    await journal.open()
    emulator.use_journal(journal)
    try:
        async with aiosb.connect("memory://ids") as ns:
            await ns.create_queue("q")
            await _send(ns, "q", 3)
            async with ns.receiver("q") as receiver:
                before = [m.message_id for m in await receiver.peek(3)]
    finally:
        emulator.use_journal(None)
        await journal.aclose()
    emulator.reset()
    async with serve(data_dir=tmp_path) as server:
        async with aiosb.connect(server.namespace_url("ids")) as ns:
            async with ns.receiver("q") as receiver:
                after = [m.message_id for m in await receiver.peek(3)]
        recs = emulator.namespace("ids")._entities["q"].fragments[0].records.values()
        assert all(type(rec._mid) is int for rec in recs)
    assert after == before


def test_on_disk_a_message_takes_at_most_twice_its_size(tmp_path):
    """#39: 5,000 messages of 100 bytes take under 200 bytes each in the data directory
    (the old table took about 430)."""
    async def fill() -> None:
        async with serve(data_dir=tmp_path) as server:
            async with aiosb.connect(server.namespace_url("disk")) as ns:
                await ns.create_queue("q")
                async with ns.sender("q") as sender:
                    for start in range(0, 5000, 500):
                        await sender.send([Message(b"%0100d" % i)
                                           for i in range(start, start + 500)])
        emulator.reset()

    asyncio.run(fill())
    before = sum(f.stat().st_size for f in tmp_path.iterdir())
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    empty = db.execute("SELECT count(*) FROM msgs").fetchone()[0] == 0
    db.execute("DELETE FROM msgs")
    db.commit()
    db.execute("VACUUM")
    db.close()
    after = sum(f.stat().st_size for f in tmp_path.iterdir())
    assert not empty
    assert (before - after) / 5000 <= 200


def test_a_kill_during_the_background_load_loses_nothing(tmp_path):
    """R-3: kill -9 the server while it loads 100,000 messages, after it listens, then
    again while a consumer completes some; every message not completed is there after
    the next restart, with its id and body, in order."""
    data = tmp_path / "data"

    async def fill() -> list[str]:
        async with serve(data_dir=data) as server:
            async with aiosb.connect(server.namespace_url("deep")) as ns:
                await ns.create_queue("q", lock_duration=timedelta(seconds=60))
                async with ns.sender("q") as sender:
                    for start in range(0, 100_000, 5000):
                        await sender.send([Message(b"%d" % i)
                                           for i in range(start, start + 5000)])
                async with ns.receiver("q") as receiver:
                    ids = [m.message_id for m in await receiver.peek(3)]
        emulator.reset()
        return ids

    ids = asyncio.run(fill())

    def start() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--no-amqp",
             "--quiet", "--data-dir", str(data)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read()  # type: ignore[union-attr]
        return proc, f"{url}/deep"

    def kill(proc: subprocess.Popen[str]) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    proc, url = start()
    kill(proc)  # listening, loading
    proc, url = start()
    done: list[bytes] = []

    async def consume() -> None:
        async with aiosb.connect(url) as ns, ns.receiver("q") as receiver:
            got = await receiver.receive(max_messages=10, max_wait=30)
            await receiver.complete(got)
            done.extend(m.body for m in got)

    try:
        asyncio.run(consume())
    finally:
        kill(proc)
    assert done == [b"%d" % i for i in range(10)]
    proc, url = start()

    async def check() -> tuple[int, list[aiosb.ReceivedMessage]]:
        async with aiosb.connect(url) as ns:
            count = (await ns.runtime_properties("q")).active_message_count
            async with ns.receiver("q") as receiver:
                return count, await receiver.peek(3)

    try:
        count, first = asyncio.run(check())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    assert count == 100_000 - 10
    assert [m.body for m in first] == [b"10", b"11", b"12"]
    assert [m.message_id for m in first] != ids  # ids of other messages: the ids below
    assert first[0].message_id[:-12] == ids[0][:-12]  # spelled as before the restarts


async def test_the_explorer_waits_for_what_it_reads(tmp_path, hold):
    """#39: the explorer, which reads some stores directly (a dead letter resubmitted by
    its number), waits for the entity too: the dead letter is found, not missed."""
    async def setup(ns):
        await ns.create_queue("q")
        await _send(ns, "q", 3)
        async with ns.receiver("q") as receiver:
            for msg in await receiver.receive(max_messages=3, max_wait=0):
                await receiver.dead_letter(msg)
        async with ns.receiver("q", sub_queue="deadletter") as receiver:
            dead.extend(m.sequence_number for m in await receiver.peek(3))

    dead: list[int] = []
    await _fill(tmp_path, "explore", setup)
    async with serve(data_dir=tmp_path, sites=[Explorer]) as server:
        jar = aiohttp.CookieJar(unsafe=True)  # a cookie of 127.0.0.1
        async with aiohttp.ClientSession(server.url, cookie_jar=jar) as http:
            origin = {"Origin": server.url}
            async with http.post("/explorer/api/signin", json={
                    "key_name": server.key_name, "key": server.key},
                    headers={**origin, "X-Aiosb-Explorer": "1"}) as answer:
                assert answer.status == 200
                csrf = (await answer.json())["csrf"]
            resubmit = asyncio.ensure_future(http.post(
                "/explorer/api/resubmit", json={"ns": "explore", "path": "q",
                                                "sequence_numbers": dead[1:2]},
                headers={**origin, "X-Aiosb-Csrf": csrf}))
            await asyncio.sleep(1)
            if resubmit.done():
                async with await resubmit as answer:
                    raise AssertionError((answer.status, await answer.text()))
            hold.set()
            async with await resubmit as answer:
                assert (answer.status, await answer.json()) == (

                    200, {"resubmitted": 1, "to": "q"})


OTHER = "ffffffff-ffff-ffff-ffff-"  # another process's MessageId prefix


@pytest.mark.parametrize("where", [None, "d", "s:cart \u00fc"])
def test_a_row_of_the_compact_table_round_trips_every_field(where):
    """#39: what :func:`message_row` keeps of a record, :func:`record_of_row` gives back,
    every field (those a message seldom has in the row's tail) and its store; a
    broker-assigned id stays a number where this process spells ids as the rows do."""
    from aiosb.emulator._record import FIELDS, _Record
    from aiosb.emulator.durable._rows import message_row, record_of_row

    every = {"s": "text \u00fc", "i": 2**70, "f": 1.5, "b": b"\x00\xff", "t": True,
             "n": None, "d": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
             "dt": timedelta(days=-3, microseconds=7)}
    plain, rare = _Record.blank(), _Record.blank()
    for rec in (plain, rare):
        for name, value in {"body": b"\x00body", "seq": 7, "size": 5, "enqueued": 1.25,
                            "state": 0, "delivery_count": 0, "deferred": False, "frag": 0,
                            "ttl": float("inf"), "message_id": 42}.items():
            setattr(rec, name, value)
    for name, value in {
        "session_id": "cart", "partition_key": "k", "content_type": "c", "correlation_id": "r",
        "subject": "s", "reply_to": "rt", "reply_to_session_id": "rs", "to": "t",
        "scheduled": datetime(2030, 1, 1, tzinfo=UTC), "amqp_extra": b"\x00amqp",
        "dl_reason": "why", "dl_desc": "so", "dl_source": "q", "props": every, "key": "pk",
        "deferred": True, "lock_token": "tok", "locked_until": 9.5, "frag": 3, "state": 2,
        "delivery_count": 4, "ttl": 60.0, "expires": 61.25, "message_id": "m \u00fc",
    }.items():
        setattr(rare, name, value)
    for rec in (plain, rare):
        for prefix_ok in (True, False):
            head = message_row(rec, prefix_ok, where)
            # (not prefix_ok: the rows' numbers are spelled otherwise than this process's)
            back, at = record_of_row(7, rec.body, head, None if prefix_ok else OTHER)
            assert at == where
            assert {n: getattr(back, n) for n in FIELDS} == {n: getattr(rec, n) for n in FIELDS}
            assert type(back._mid) is (type(rec._mid) if prefix_ok else str)
    assert len(message_row(plain, True, None)) == 26  # the head alone


async def test_a_database_whose_rows_are_of_another_layout_is_refused(tmp_path):
    """#39: the database names its rows' layout; another one than this aiosb writes is
    refused with a sentence before anything is served."""
    async def setup(ns):
        await ns.create_queue("q")

    await _fill(tmp_path, "layout", setup)
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    db.execute("UPDATE meta SET value = 'aiosb-row-9' WHERE name = 'row_format'")
    db.commit()
    db.close()
    with pytest.raises(errors.InvalidArgument, match="rows of format 'aiosb-row-9'"):
        async with serve(data_dir=tmp_path):
            pass
