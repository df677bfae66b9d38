"""The Spark data source's parts that need no Spark: options, row batching, and the
streaming source's bookkeeping, on the embedded emulator (issue 12)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.bridge import Bridge
from aiosb.spark._link import Link
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
