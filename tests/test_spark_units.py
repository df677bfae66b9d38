"""The Spark data source's parts that need no Spark: options, row batching, and the
streaming source's bookkeeping, on the embedded emulator (issue 12)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.bridge import Bridge
from aiosb.spark._locked_chunks import Link
from aiosb.spark._options import read_options, stream_read_options, write_options
from aiosb.spark._read import shares
from aiosb.spark._stream import Holder, StreamSource
from aiosb.spark._write import send_partition


@pytest.mark.looptime
async def test_held_messages_keep_their_locks_until_committed():
    """The streaming source renews locks that would run out before Spark commits."""
    async with aiosb.connect("memory://renew") as ns:
        await ns.create_queue("q", lock_duration=timedelta(seconds=30))
        async with ns.sender("q") as sender:
            await sender.send([Message(str(i)) for i in range(5)])
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 5, room=100, max_wait=0) == 5
            assert [c.first for c in holder.held] == [1]
            await asyncio.sleep(300)  # ten lock durations between admission and commit
            assert await holder.complete(3) == 3
            assert holder.locks.lost == 0 and holder.locks.renewed > 0
            await holder.release()  # the two uncommitted go back at once
            again = await receiver.receive(max_messages=10, max_wait=0)
        assert sorted(m.body for m in again) == [b"3", b"4"]
        assert all(m.delivery_count == 2 for m in again)


@pytest.fixture
def bridge():
    with Bridge() as b:
        yield b


def _fill(bridge: Bridge, count: int) -> None:
    with bridge.connect("memory://src") as ns:
        ns.create_queue("q")
        ns.sender("q").send([Message(str(i)) for i in range(count)])


def _active(bridge: Bridge) -> list[str]:
    with bridge.connect("memory://src") as ns, ns.receiver("q") as r:
        return sorted((m.body.decode() for m in r.receive(max_messages=100, max_wait=0)), key=int)


def test_stream_source_offsets_rows_commit_and_stop(bridge):
    _fill(bridge, 25)
    options = stream_read_options(
        {"namespace": "memory://src", "entity": "q", "partitions": "3", "max_wait_seconds": "0"}
    )
    source = StreamSource(options)
    try:
        assert source.latest(0, 10) == 10
        parts = source.batches(0, 10)
        assert [sum(b.num_rows for b in p) for p in parts] == [4, 4, 2]
        bodies = [body for p in parts for b in p for body in b.column("body").to_pylist()]
        assert bodies == [str(i).encode() for i in range(10)]
        assert source.latest(10, 10) == 20
        assert source.latest(20, None) == 25  # ReadAllAvailable: what is there
        assert source.latest(25, 10) == 25  # nothing new: no batch
        assert source.commit(10) == 10
    finally:
        source.stop()
    # Completed: the first ten. Abandoned on stop: the rest, back at once.
    assert _active(bridge) == [str(i) for i in range(10, 25)]


def test_a_restarted_source_replays_an_unknown_range_empty_and_numbers_on(bridge):
    _fill(bridge, 5)
    options = stream_read_options({"namespace": "memory://src", "entity": "q"})
    source = StreamSource(options)
    try:
        assert source.batches(40, 50) == []  # admitted by a driver that is gone
        assert source.commit(50) == 0
        assert source.latest(50, 10) == 55
        assert sum(b.num_rows for p in source.batches(50, 55) for b in p) == 5
    finally:
        source.stop()


def test_send_partition_fills_batches_to_the_size_limit_and_keeps_order(bridge):
    with bridge.connect("memory://w") as ns:
        ns.create_queue("q")
    sender = bridge.sender("memory://w", "q")
    body = b"x" * 1000
    messages = [Message(body, message_id=str(i)) for i in range(1000)]
    rows, batches, size = send_partition(sender, messages, max_batch_messages=10_000,
                                         max_in_flight=3)
    per_batch = sender.max_message_size // (1000 + 3)
    assert rows == 1000 and size == sum(m.size for m in messages)
    assert batches == -(-1000 // per_batch)  # as few batches as the limit allows
    with bridge.connect("memory://w") as ns, ns.receiver("q", mode="receive_and_delete") as r:
        got = []
        while chunk := r.receive(max_messages=500, max_wait=0):
            got.extend(chunk)
    assert len(got) == 1000  # every row acknowledged before send_partition returned
    too_big = [Message(b"x" * (sender.max_message_size + 1))]
    with pytest.raises(errors.MessageSizeExceeded, match="over the"):
        send_partition(sender, too_big, 100, 1)


def test_shares_split_the_total_over_partitions():
    assert shares(10, 3) == [4, 3, 3]
    assert shares(2, 8) == [1, 1]
    assert sum(shares(1_000_001, 7)) == 1_000_001


@pytest.mark.parametrize(
    ("parse", "options", "sentence"),
    [
        (write_options, {}, "needs the option 'namespace'"),
        (write_options, {"namespace": "memory://x", "entity": "q", "max_batch_messages": "1e3"},
         "'max_batch_messages' is '1e3'; it must be a whole number"),
        (write_options, {"namespace": "memory://x", "entity": "q", "secondary": "memory://y",
                         "ping_primary_interval_seconds": "nan"},
         "'ping_primary_interval_seconds' is 'nan'"),
        (write_options, {"namespace": "memory://x", "entity": "q", "message_id_prefix": "p" * 65},
         "'message_id_prefix' is 65 characters long"),
        (read_options, {"namespace": "memory://x", "entity": "q", "mode": "destroy"},
         "'mode' is 'destroy'; it must be one of complete, peek"),
        (read_options, {"namespace": "memory://x", "entity": "q", "sub_queue": "transfer"},
         "the only sub-queue is 'deadletter'"),
        (read_options, {"namespace": "memory://x", "entity": "q", "secondary": "memory://y"},
         "does not know the option 'secondary' for a batch read"),
        (stream_read_options, {"namespace": "memory://x", "entity": "q",
                               "max_messages_per_trigger": "50", "max_buffered_messages": "10"},
         "'max_buffered_messages' is 10; it must be at least"),
    ],
)
def test_bad_options_are_one_sentence_naming_the_option(parse, options, sentence):
    with pytest.raises(errors.InvalidArgument, match=sentence) as caught:
        parse(options)
    assert caught.value.message.count(". ") == 0  # one sentence


def test_options_are_case_insensitive_and_build_the_pairing():
    parsed = write_options(
        {"NameSpace": "http://h:1/a", "ENTITY": "q", "Secondary": "http://h:1/b",
         "key_name": "k", "key": "v", "failover_interval_seconds": "2.5",
         "backlog_queue_count": "3"}
    )
    c = parsed.connection
    assert (c.namespace, c.entity, c.secondary) == ("http://h:1/a", "q", "http://h:1/b")
    assert c.credential == ("k", "v")
    assert c.pairing is not None and c.pairing.backlog_queue_count == 3
    assert c.pairing.failover_interval == timedelta(seconds=2.5)
    assert not c.pairing.enable_syphon


@pytest.mark.looptime
async def test_one_lost_lock_does_not_cost_the_others_theirs():
    """A broker settles a chunk all or nothing: the holder settles a failed chunk again
    message by message, so one lost lock neither stops the renewal of the others nor
    makes a commit report messages it did not complete."""
    async with aiosb.connect("memory://lost") as ns:
        await ns.create_queue("q", lock_duration=timedelta(seconds=5))
        await ns.sender("q").send([Message(str(i)) for i in range(4)])
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            await holder.admit(1, 4, room=100, max_wait=0)
            await holder.link.settle("complete", holder.held[0].tokens[1:2])  # lock gone
            await asyncio.sleep(60)  # twelve lock durations
            async with ns.receiver("q") as other:
                assert await other.receive(max_messages=10, max_wait=0) == []
            assert await holder.complete(4) == 3
            assert holder.locks.lost == 1
            await holder.release()
        assert (await ns.runtime_properties("q")).active_message_count == 0


def test_a_batch_over_the_brokers_limit_is_halved_until_the_parts_fit(bridge):
    """The advertised limit may be above the batch limit (premium, AMQP framing)."""
    with bridge.connect("memory://halve") as ns:
        ns.create_queue("q")
    sender = bridge.sender("memory://halve", "q")
    sender.max_message_size = 1024 * 1024  # four times what the broker takes in a batch
    messages = [Message(b"x" * 1000, message_id=str(i)) for i in range(1000)]
    rows, batches, _ = send_partition(sender, messages, max_batch_messages=1000,
                                      max_in_flight=2)
    assert rows == 1000 and batches >= 4
    with bridge.connect("memory://halve") as ns:
        assert ns.runtime_properties("q").active_message_count == 1000


def test_rows_become_messages_with_derived_ids_and_checked_ttls():
    import pyarrow as pa

    from aiosb.spark._write import _row_messages

    batch = pa.record_batch(
        {
            "body": pa.array([b"a", b"b", None]),
            "message_id": pa.array(["given", "", None]),
            "time_to_live_seconds": pa.array([1.5, 1e30, None]),
        }
    )
    got = list(_row_messages([batch], "w-3-"))
    assert [m.message_id for m in got] == ["given", "w-3-1", "w-3-2"]  # "" is null
    assert [m.body for m in got] == [b"a", b"b", b""]  # a null body is an empty message
    assert got[0].time_to_live == timedelta(seconds=1.5)
    assert got[1].time_to_live == aiosb.NEVER  # beyond TimeSpan.MaxValue: never
    for bad in (float("nan"), float("inf"), -1.0, 0.0):
        rows = pa.record_batch({"body": pa.array([b"x"]), "time_to_live_seconds": [bad]})
        with pytest.raises(errors.InvalidArgument, match="row 0 of this partition: "
                                                         "time_to_live_seconds is"):
            list(_row_messages([rows], "w-0-"))


def test_arrow_batches_hold_the_rows_to_row_gives():
    """#39: reads hand Spark Arrow batches built a column at a time; each row is the
    tuple the per-message conversion gives (every kind of field, set and unset), and a
    column given as one value for all is the same as that value in each row."""
    import datetime as dt

    from aiosb.message import ReceivedMessage
    from aiosb.spark._arrow import arrow_schema, message_columns, to_batch
    from aiosb.spark._columns import READ_COLUMNS, to_row

    zone = dt.timezone(dt.timedelta(hours=2))
    messages = [
        ReceivedMessage(
            str(i).encode(), message_id=f"m{i}", sequence_number=i + 1, delivery_count=1,
            enqueued_timestamp=1_800_000_000.4001129 + i, lock_token=f"t{i}",  # rounds up
            expires_timestamp=None if i % 2 else 1_900_000_000.5,
            application_properties={"k": i, "b": b"\x01", "t": True} if i % 2 else {},
            time_to_live=dt.timedelta(seconds=90.25) if i == 1 else None,
            scheduled_enqueue_time=dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=zone)
            if i == 2 else None,
            subject="s" if i == 3 else None, entity_path="q",
        )
        for i in range(5)
    ]
    names = [name for name, _, _, _ in READ_COLUMNS]
    batch = to_batch(*message_columns(messages))
    assert batch.schema == arrow_schema()
    for message, got in zip(messages, batch.to_pylist(), strict=True):
        got["properties"] = dict(got["properties"])
        assert got == dict(zip(names, to_row(message), strict=True))
    bodies, listed = message_columns(messages[:2])
    shared = {**listed, "entity_path": "q", "state": "active", "subject": None}
    assert to_batch(bodies, shared).equals(to_batch(bodies, listed))


async def _held(ns, count: int, lock: float = 30):
    await ns.create_queue("q", lock_duration=timedelta(seconds=lock))
    async with ns.sender("q") as sender:
        await sender.send([Message(str(i)) for i in range(count)])


@pytest.mark.looptime
async def test_messages_received_ahead_are_renewed_admitted_once_and_abandoned_on_stop():
    """#39: the streaming source receives the next micro-batch's messages while Spark
    runs the current one. Received ahead, they keep their locks however long the
    micro-batch takes, are numbered only when admitted (each in one micro-batch), and a
    stop gives them back at once, uncompleted."""
    async with aiosb.connect("memory://ahead") as ns:
        await _held(ns, 12)
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 5, room=100, max_wait=0) == 5
            await asyncio.sleep(300)  # ten lock durations, received ahead while "Spark" works
            assert sum(map(len, holder.ready)) == 5  # ahead, not numbered yet
            assert holder.locks.lost == 0 and holder.locks.renewed >= 10
            assert await holder.admit(6, 5, room=100, max_wait=0) == 5
            first = [b for c in holder.held for b in c.batch.column("body").to_pylist()]
            assert first == [str(i).encode() for i in range(10)]  # in order, each once
            assert await holder.complete(5) == 5
            await asyncio.sleep(0)
            await holder.release()  # 5 admitted, 2 ahead: all back, none completed
            again = await receiver.receive(max_messages=20, max_wait=0)
        assert sorted(int(m.body) for m in again) == list(range(5, 12))
        assert all(m.delivery_count == 2 for m in again)


@pytest.mark.looptime
async def test_a_message_ahead_whose_lock_is_lost_is_left_out_of_the_micro_batch():
    """Delivered again by the broker, it must not be in a micro-batch twice."""
    async with aiosb.connect("memory://aheadlost") as ns:
        await _held(ns, 6, lock=5)
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 3, room=100, max_wait=0) == 3
            await holder._received()  # the receive ahead
            await holder.link.settle("complete", holder.ready[0].tokens[1:2])  # 4 is gone
            await asyncio.sleep(30)
            assert await holder.admit(4, 3, room=100, max_wait=0) == 2
            bodies = [b for c in holder.held for b in c.batch.column("body").to_pylist()]
            assert bodies == [b"0", b"1", b"2", b"3", b"5"]
            assert holder.locks.lost == 1
            await holder.release()


def _read_options(url: str, count: int) -> Any:
    return read_options({"namespace": url, "entity": "q", "max_messages": str(count),
                         "max_wait_seconds": "0"})


@pytest.mark.timeout(60)
def test_a_batch_task_holding_its_share_past_the_lock_duration_keeps_the_locks():
    """#39: a batch-read task completes its messages once Spark has all its rows, which
    may take longer than the lock: it renews them meanwhile, so none is lost (delivered
    again) and every one is completed."""
    from aiosb.spark._read import read_partition

    bridge = Bridge.shared()  # read_partition's own: a memory namespace serves one loop
    url = "memory://batchlocks"
    with bridge.connect(url) as ns:
        ns.create_queue("q", lock_duration=timedelta(seconds=5))
        ns.sender("q").send([Message(str(i)) for i in range(30)])
    batches = read_partition(_read_options(url, 30), 30)
    first = next(batches)
    time.sleep(8)  # Spark is slow to take the rows: the locks would have ended twice
    rest = list(batches)
    assert sum(b.num_rows for b in [first, *rest]) == 30
    with bridge.connect(url) as ns:
        props = ns.runtime_properties("q")
        assert props.active_message_count == 0 and props.total_message_count == 0


@pytest.mark.timeout(60)
def test_a_batch_task_that_fails_gives_its_messages_back_at_once():
    """A task that fails before Spark has every row completes nothing and abandons what
    it holds: delivered again at once, not when the locks end."""
    from aiosb.spark._read import read_partition

    bridge = Bridge.shared()
    url = "memory://batchfails"
    with bridge.connect(url) as ns:
        ns.create_queue("q", lock_duration=timedelta(minutes=5))
        ns.sender("q").send([Message(str(i)) for i in range(3)])
    batches = read_partition(_read_options(url, 10), 10)
    assert next(batches).column("body").to_pylist() == [b"0", b"1", b"2"]
    with pytest.raises(RuntimeError):
        batches.throw(RuntimeError("the task fails"))
    with bridge.connect(url) as ns, ns.receiver("q") as receiver:
        back = receiver.receive(max_messages=10, max_wait=0)
        assert sorted(m.body for m in back) == [b"0", b"1", b"2"]
        assert all(m.delivery_count == 2 for m in back)
        receiver.complete(back)


async def test_a_paired_writers_pings_are_completed_never_rows():
    """A broker that delivers a paired writer's pings (the emulator does not, PN-14):
    the reads complete them and keep them out of the rows, as Receiver.receive does."""
    from aiosb.message import PING_CONTENT_TYPE

    settled: list[tuple[str, list[str]]] = []

    class Recording(Link):
        def __init__(self) -> None:
            pass

        async def settle(self, action: Any, tokens: list[str]) -> None:
            settled.append((action, tokens))

    bodies = [b"a", b"", b"c"]
    columns = {"lock_token": ["t1", "t2", "t3"], "entity_path": "q",
               "content_type": [None, PING_CONTENT_TYPE, "text/plain"]}
    kept, left = await Recording()._drop_pings(bodies, columns)
    assert kept == [b"a", b"c"] and settled == [("complete", ["t2"])]
    assert left == {"lock_token": ["t1", "t3"], "entity_path": "q",
                    "content_type": [None, "text/plain"]}
    settled.clear()
    assert await Recording()._drop_pings(bodies, {"content_type": PING_CONTENT_TYPE,
                                                  "lock_token": ["t1", "t2", "t3"]}) == ([], {
        "content_type": PING_CONTENT_TYPE, "lock_token": []})
    assert settled == [("complete", ["t1", "t2", "t3"])]


@pytest.mark.parametrize("columns", [True, False], ids=["receive_columns", "messages"])
async def test_a_link_receives_the_same_chunk_with_or_without_column_receives(columns):
    """A transport without ``receive_columns`` (AMQP) gives message objects: the link
    makes the same batch and tokens of them."""
    async with aiosb.connect(f"memory://link{columns}") as ns:
        await _held(ns, 3)
        async with ns.receiver("q") as receiver:
            link = Link(receiver)
            assert link.columns  # the memory transport has it
            link.columns = columns
            chunk = await link.receive(10, 0)
            assert chunk is not None and len(chunk) == 3
            assert chunk.batch.column("body").to_pylist() == [b"0", b"1", b"2"]
            assert chunk.batch.column("delivery_count").to_pylist() == [1, 1, 1]
            await link.settle_all("complete", chunk.locked())
            assert await link.receive(10, 0) is None
        assert (await ns.runtime_properties("q")).active_message_count == 0


@pytest.mark.timeout(30)
@pytest.mark.looptime
async def test_messages_ahead_whose_locks_ended_while_renewals_failed_are_not_admitted():
    """Renewals failing (a network blip) for longer than the lock duration: the locks
    of messages received ahead end, the broker delivers them again; the old delivery
    must not go into a micro-batch beside the new one (finding 2)."""
    async with aiosb.connect("memory://expiredahead") as ns:
        await _held(ns, 6, lock=5)
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 3, room=100, max_wait=0) == 3
            await holder._received()  # 3, 4, 5 received ahead
            real = holder.link.settle

            async def blip(action: Any, tokens: list[str]) -> Any:
                if action == "renew":
                    raise errors.TransientError("network blip")
                return await real(action, tokens)

            holder.link.settle = blip  # type: ignore[method-assign]
            await asyncio.sleep(20)
            holder.link.settle = real  # type: ignore[method-assign]
            n2 = await holder.admit(4, 6, room=100, max_wait=0)
            n3 = await holder.admit(4 + n2, 6, room=100, max_wait=0)

            def bodies(lo: int, hi: int) -> list[bytes]:
                return [b for batch in holder.batches(lo, hi)
                        for b in batch.column("body").to_pylist()]

            mb2, mb3 = bodies(3, 3 + n2), bodies(3 + n2, 3 + n2 + n3)
            await holder.release()
        assert len(mb2) == len(set(mb2)) and not set(mb2) & set(mb3), (mb2, mb3)
        assert sorted(mb2 + mb3) == [str(i).encode() for i in range(6)]


@pytest.mark.timeout(30)
@pytest.mark.looptime
async def test_a_lock_lost_during_a_renewal_overlapping_admission_is_left_out():
    """A renewal on its way while latestOffset admits (and splits) the chunk it renews:
    the lock it finds lost is left out of the admitted rows (finding 3)."""
    async with aiosb.connect("memory://splitrace") as ns:
        await _held(ns, 6, lock=30)
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 3, room=100, max_wait=0) == 3
            await holder._received()  # 3, 4, 5 ahead
            real = holder.link.settle
            await real("complete", holder.ready[0].tokens[1:2])  # 4's lock is gone
            renewing = asyncio.Event()

            async def slow(action: Any, tokens: list[str]) -> Any:
                if action == "renew" and not renewing.is_set():
                    renewing.set()
                    await asyncio.sleep(3)  # the renewal is on its way...
                return await real(action, tokens)

            holder.link.settle = slow  # type: ignore[method-assign]
            await renewing.wait()
            n = await holder.admit(4, 2, room=0, max_wait=0)  # ...while Spark admits 2
            holder.link.settle = real  # type: ignore[method-assign]
            admitted = [b for batch in holder.batches(3, 3 + n)
                        for b in batch.column("body").to_pylist()]
            rest = [b for c in holder.ready for b in c.batch.column("body").to_pylist()]
            lost = holder.locks.lost
            await holder.release()
        assert admitted == [b"3", b"5"] and rest == [] and lost == 1


@pytest.mark.timeout(30)
async def test_a_receive_that_brings_only_pings_waits_on_for_data(monkeypatch):
    """A broker that delivers pings (the emulator, patched, stores them): a receive of
    only pings is not 'the entity is empty'; the link waits on until ``max_wait``, as
    Receiver.receive does (finding 1)."""
    import aiosb.emulator._sending as sending
    from aiosb.message import PING_CONTENT_TYPE

    monkeypatch.setattr(sending, "PING_CONTENT_TYPE", "x-emulator-delivers-pings")
    async with aiosb.connect("memory://pingsonly") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            await sender.send(Message(b"", content_type=PING_CONTENT_TYPE))

            async def later() -> None:
                await asyncio.sleep(0.3)
                await sender.send([Message(b"d%d" % i) for i in range(3)])

            sending_later = asyncio.create_task(later())
            link = Link(receiver)
            chunk = await link.receive(10, max_wait=5)
            await sending_later
            assert chunk is not None
            assert chunk.batch.column("body").to_pylist()[0] == b"d0"
            await link.settle_all("complete", chunk.locked())
            await sender.send(Message(b"", content_type=PING_CONTENT_TYPE))
            started = time.monotonic()
            assert await link.receive(10, max_wait=0.5) is None  # only a ping: none came
            assert time.monotonic() - started >= 0.4


@pytest.mark.timeout(60)
def test_the_stream_source_holds_no_more_locks_than_the_transport_can_settle(bridge):
    """Over AMQP a connection remembers at most ``lock_capacity`` locks (the oldest are
    forgotten, their messages no longer completable): Spark plans micro-batch N+1
    before committing N, and the receive ahead comes on top; the source holds no more
    than the capacity (finding 4)."""
    _fill(bridge, 40)
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_wait_seconds": "0"})
    source = StreamSource(options)
    try:
        holder = source._open()
        holder.link.capacity = 10
        assert source.latest(0, 4) == 4
        assert source.latest(4, 4) == 8  # planned before commit(4)
        bridge_ = source._bridge
        assert bridge_ is not None
        bridge_.run(holder._received())
        assert holder.count() <= 10
        assert source.commit(4) == 4
        assert source.latest(8, 4) == 12
        bridge_.run(holder._received())
        assert holder.count() <= 10
    finally:
        source.stop()


def test_a_batch_task_whose_share_the_transport_cannot_keep_locked_is_refused(monkeypatch):
    """A batch-read task holds its whole share locked until Spark has it: a share over
    the transport's lock capacity is refused with a sentence saying what to set."""
    from aiosb.spark._read import read_partition

    bridge = Bridge.shared()
    url = "memory://overcapacity"
    with bridge.connect(url) as ns:
        ns.create_queue("q")
        ns.sender("q").send([Message(str(i)) for i in range(30)])
        monkeypatch.setattr(type(ns._target.transport), "lock_capacity", 10, raising=False)
        with pytest.raises(ValueError, match="set 'partitions' to at least 3"):
            next(read_partition(_read_options(url, 30), 30))
        assert ns.runtime_properties("q").active_message_count == 30


@pytest.mark.timeout(60)
def test_arrow_timestamps_are_rounded_to_the_microsecond_as_to_row_rounds_them():
    """Epoch seconds near 1.8e9 times 1e6 in float64 lose the last microsecond: the
    batches' enqueued_time must equal to_row's (datetime.fromtimestamp) for every
    value (finding 6: about one in eight was a microsecond off)."""
    import random

    from aiosb.message import ReceivedMessage
    from aiosb.spark._arrow import message_columns, to_batch
    from aiosb.spark._columns import READ_COLUMNS, to_row

    where = [name for name, _, _, _ in READ_COLUMNS].index("enqueued_time")
    rng = random.Random(7)
    stamps = [1.7e9 + rng.random() * 1e8 for _ in range(5000)]
    stamps += [1_800_000_000.0000005, 1_800_000_000.0000015, 1_800_000_000.9999996]
    messages = [ReceivedMessage(b"x", sequence_number=i, entity_path="q",
                                enqueued_timestamp=t) for i, t in enumerate(stamps)]
    got = to_batch(*message_columns(messages)).column("enqueued_time").to_pylist()
    want = [to_row(m)[where] for m in messages]
    assert [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w] == []


@pytest.mark.timeout(60)
def test_a_batch_read_finalised_on_the_loop_thread_stops_renewing_and_gives_back():
    """The garbage collector may finalise an unfinished batch-read generator on the
    bridge's loop thread, where nothing may block: its end runs on the loop instead
    (renewer stopped, messages abandoned, receiver closed), not never (finding 5)."""
    from aiosb.spark._read import read_partition

    bridge = Bridge.shared()
    url = "memory://finalised"
    with bridge.connect(url) as ns:
        ns.create_queue("q", lock_duration=timedelta(seconds=30))
        ns.sender("q").send([Message(str(i)) for i in range(5)])
    reading = [read_partition(_read_options(url, 5), 5)]
    assert next(reading[0]).num_rows == 5

    async def drop() -> None:
        reading.clear()  # the last reference goes on the loop thread
        await asyncio.sleep(0.5)

    bridge.run(drop())
    with bridge.connect(url) as ns, ns.receiver("q") as receiver:
        back = receiver.receive(max_messages=10, max_wait=2)
        assert sorted(m.body for m in back) == [str(i).encode() for i in range(5)]
        receiver.complete(back)


def test_a_retried_complete_read_attempt_is_refused_with_a_sentence():
    from aiosb.spark._read import refuse_retry

    refuse_retry(0)
    with pytest.raises(RuntimeError, match=r"cannot be retried .*attempt 2.*mode=peek"):
        refuse_retry(1)


@pytest.mark.timeout(30)
@pytest.mark.looptime
async def test_an_unforeseen_error_in_a_renewal_does_not_end_renewing():
    """The renewer caught only ServiceBusError: anything else ended it silently and the
    held locks ran out (suspected in the review)."""
    async with aiosb.connect("memory://renewbug") as ns:
        await _held(ns, 3, lock=30)
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 3, room=3, max_wait=0) == 3
            real, failed = holder.link.settle, []

            async def once(action: Any, tokens: list[str]) -> Any:
                if action == "renew" and not failed:
                    failed.append(action)
                    raise RuntimeError("a bug")
                return await real(action, tokens)

            holder.link.settle = once  # type: ignore[method-assign]
            await asyncio.sleep(120)
            assert failed and holder.locks.renewed > 0 and holder.locks.lost == 0
            assert await holder.complete(3) == 3


async def test_a_failed_ping_completion_does_not_fail_the_receive():
    """The pings come back when their locks end; the data of the receive is kept."""
    from aiosb.message import PING_CONTENT_TYPE

    class Failing(Link):
        def __init__(self) -> None:
            pass

        async def settle(self, action: Any, tokens: list[str]) -> None:
            raise errors.TransientError("network blip")

    columns = {"lock_token": ["t1", "t2"], "content_type": [PING_CONTENT_TYPE, None]}
    kept, left = await Failing()._drop_pings([b"", b"a"], columns)
    assert kept == [b"a"] and left["lock_token"] == ["t2"]


@pytest.mark.timeout(30)
async def test_a_failed_receive_ahead_is_collected_when_the_source_stops(caplog):
    """Its error was never retrieved ('Task exception was never retrieved')."""
    async with aiosb.connect("memory://aheadfails") as ns:
        await _held(ns, 3)
        async with ns.receiver("q") as receiver:
            holder = Holder(Link(receiver))
            assert await holder.admit(1, 3, room=100, max_wait=0) == 3

            async def broken(count: int, max_wait: float) -> Any:
                raise errors.TransientError("network blip")

            await holder._received()
            holder.link.receive = broken  # type: ignore[method-assign]
            holder._receive_ahead(3, 0)
            await asyncio.sleep(0.1)
            fetching = holder.fetching
            await holder.release()
            assert fetching is not None and fetching.done()
            assert not fetching._log_traceback  # type: ignore[attr-defined]
        assert "the receive ahead had failed" in caplog.text
