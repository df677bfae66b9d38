"""The streaming source's room, receive ahead, links and stop (S-11, #39), on the
embedded emulator: the parts of the Spark data source that need no Spark (the rest are
in ``test_spark_units.py``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from test_spark_units import _active, _fill

from aiosb import Message
from aiosb.bridge import Bridge
from aiosb.spark import _stream
from aiosb.spark._locked_chunks import Link
from aiosb.spark._options import stream_read_options
from aiosb.spark._stream import StreamSource


@pytest.fixture
def bridge():
    with Bridge() as b:
        yield b


def _count(bridge: Bridge) -> int:
    """Messages in the source queue, locked ones included."""
    with bridge.connect("memory://src") as ns:
        return ns.runtime_properties("q").active_message_count


@pytest.mark.timeout(60)
def test_s11_a_micro_batch_leaves_room_for_the_next_one_before_the_last_is_committed(bridge):
    """S-11 (#39): Spark plans micro-batch N+1 before it commits N, whose messages are
    still held: with the room (``max_buffered_messages``) no bigger than a trigger, the
    next found no room, Spark waited for data forever and N was never committed. A
    micro-batch now takes at most half the room, and the default room holds three."""
    assert stream_read_options({"namespace": "memory://src", "entity": "q",
                                "max_messages_per_trigger": "200000"}
                               ).max_buffered_messages == 600_000
    _fill(bridge, 30)
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_messages_per_trigger": "10",
                                   "max_buffered_messages": "10", "max_wait_seconds": "0"})
    source = StreamSource(options)
    try:
        first = source.latest(0, 10)
        assert 0 < first <= 5
        second = source.latest(first, 10)  # planned before commit(first)
        assert second > first
        assert source.commit(first) == first
        assert source.latest(second, 10) > second
    finally:
        source.stop()


@pytest.mark.timeout(60)
def test_s11_a_commit_frees_room_for_the_receive_ahead(bridge):
    """S-11 (#39): with room for two micro-batches, admitting one leaves none to receive
    ahead (the last is still held until Spark commits it, after planning the next):
    the commit starts the next one's receive, so latestOffset does not wait for it."""
    _fill(bridge, 40)
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_messages_per_trigger": "10",
                                   "max_buffered_messages": "20", "max_wait_seconds": "0"})
    source = StreamSource(options)
    try:
        assert source.latest(0, 10) == 10
        assert source.latest(10, 10) == 20
        holder, bridge_ = source._holder, source._bridge
        assert holder is not None and bridge_ is not None
        bridge_.run(holder._received())
        assert sum(map(len, holder.ready)) == 0  # no room: both micro-batches held
        assert source.commit(10) == 10
        bridge_.run(holder._received())
        assert sum(map(len, holder.ready)) == 10  # received ahead for the third
        assert source.latest(20, 10) == 30
    finally:
        source.stop()


@pytest.mark.timeout(60)
def test_s11_the_default_room_receives_the_next_micro_batch_ahead_before_the_commit(bridge):
    """S-11 (#39): with the default room (three micro-batches), admitting micro-batch
    N+1 while N is still held (Spark commits N only after it has written N+1's offsets)
    starts N+2's receive at once, not at N's commit: with room for two it waited for
    the commit, and latestOffset waited 70-100 ms a micro-batch of 50,000 for the rest."""
    per_trigger = 40_000  # 3 x 40,000 is over the 100,000 floor: the default is the rule's
    with bridge.connect("memory://src") as ns:
        ns.create_queue("q")
        with ns.sender("q") as sender:
            for first in range(0, 3 * per_trigger, 1000):  # a batch has a size limit
                sender.send([Message(str(i)) for i in range(first, first + 1000)])
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_messages_per_trigger": str(per_trigger),
                                   "max_wait_seconds": "0"})
    assert options.max_buffered_messages == 3 * per_trigger
    source = StreamSource(options)
    try:
        assert source.latest(0, per_trigger) == per_trigger
        assert source.latest(per_trigger, per_trigger) == 2 * per_trigger
        holder, bridge_ = source._holder, source._bridge
        assert holder is not None and bridge_ is not None
        bridge_.run(holder._received())
        assert sum(map(len, holder.ready)) == per_trigger  # before any commit
        assert source.commit(per_trigger) == per_trigger
        assert source.latest(2 * per_trigger, per_trigger) == 3 * per_trigger
    finally:
        source.stop()


@pytest.mark.timeout(60)
def test_s11_the_stream_source_receives_on_two_links_and_settles_each_chunk_on_its_own(
    bridge, monkeypatch
):
    """S-11 (#39): the receive ahead runs on two receivers at once; each chunk is
    renewed and settled through the link that received it (AMQP settles on the
    receiving link only), and every committed message is completed."""
    receive = Link.receive

    async def over_a_network(self: Link, count: int, max_wait: float) -> Any:
        await asyncio.sleep(0.01)  # a memory receive answers at once: make it wait
        return await receive(self, count, max_wait)

    monkeypatch.setattr(Link, "receive", over_a_network)
    _fill(bridge, 4000)
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_messages_per_trigger": "4000",
                                   "max_wait_seconds": "0"})
    source = StreamSource(options)
    try:
        assert source.latest(0, 4000) == 4000
        holder = source._holder
        assert holder is not None and len(holder.links) == 2
        owners = {id(c.owner) for c in holder.held}
        assert owners == {id(locks) for _, locks in holder.links}
        assert source.commit(4000) == 4000
    finally:
        source.stop()
    assert _count(bridge) == 0


@pytest.mark.timeout(60)
def test_s11_a_commit_completes_in_the_background_and_stop_lets_it_finish(
    bridge, monkeypatch
):
    """S-11 (#39): Spark's commit starts completing and returns, so the next
    micro-batch need not wait; a stop right after lets the completion finish (it does
    not abandon committed messages, nor close the receivers under it), then abandons
    the rest."""
    settle_all = Link.settle_all

    async def slowly(self: Link, action: Any, tokens: list[str]) -> Any:
        if action == "complete":
            await asyncio.sleep(0.5)
        return await settle_all(self, action, tokens)

    monkeypatch.setattr(Link, "settle_all", slowly)
    _fill(bridge, 30)
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_wait_seconds": "0"})
    source = StreamSource(options)
    try:
        assert source.latest(0, 20) == 20
        assert source.commit(20, wait=False) == 0
    finally:
        source.stop()
    assert _count(bridge) == 10
    assert _active(bridge) == [str(i) for i in range(20, 30)]


@pytest.mark.timeout(60)
def test_s11_stop_gives_up_on_a_server_that_does_not_answer(bridge, monkeypatch, caplog):
    """Spark stops the reader's process with SIGTERM; if the server is gone, stop
    retried completing and abandoning for minutes (the process outlived the query).
    It waits :data:`STOP_SECONDS` at most, says what stays locked, and closes."""
    hung = asyncio.Event()

    async def never(self: Link, action: Any, tokens: list[str]) -> Any:
        hung.set()
        await asyncio.Event().wait()  # a server that takes the request and never answers

    _fill(bridge, 30)
    options = stream_read_options({"namespace": "memory://src", "entity": "q",
                                   "max_wait_seconds": "0"})
    source = StreamSource(options)
    assert source.latest(0, 20) == 20
    monkeypatch.setattr(Link, "settle_all", never)
    monkeypatch.setattr(_stream, "STOP_SECONDS", 0.5)
    assert source.commit(20, wait=False) == 0
    with caplog.at_level(logging.WARNING, logger="aiosb.spark"):
        source.stop()
    assert hung.is_set()
    assert "did not answer within" in caplog.text
    assert source._holder is None and source._receivers == []


@pytest.mark.timeout(60)
def test_s11_a_packed_partition_gives_the_executor_the_same_rows_and_carries_less():
    """S-11 (#39): a streaming partition carries what every row of a column shares
    once (all null, an empty map each, one value) and the rest as it is; unpickled on
    the executor it is the same batch, row for row and type for type, whatever mix of
    shared, partly null and differing columns it has."""
    import datetime as dt
    import pickle

    from aiosb.message import ReceivedMessage
    from aiosb.spark._arrow import arrow_schema, message_columns, pack, to_batch

    def batch(n: int, **fields: Any) -> Any:
        return to_batch(*message_columns([
            ReceivedMessage(b"same", message_id=f"m{i}", sequence_number=i + 1,
                            enqueued_timestamp=1_800_000_000.25, entity_path="q",
                            **{k: v(i) if callable(v) else v for k, v in fields.items()})
            for i in range(n)]))

    cases = [
        batch(1000),  # mostly null or alike: the body too, yet carried as it is
        batch(7, subject=lambda i: None if i % 2 else "s",  # partly null
              application_properties=lambda i: {"k": i} if i == 3 else {},  # one map set
              time_to_live=dt.timedelta(seconds=5), delivery_count=lambda i: i),
        batch(3, expires_timestamp=1_900_000_000.5, correlation_id="c",
              application_properties={"k": "v"}),  # every row the same map, not empty
        batch(0),
    ]
    for original in cases:
        packed = pack(original)
        back = pickle.loads(pickle.dumps(packed)).batch()
        assert back.schema == arrow_schema()
        assert back.equals(original)
        assert back.to_pylist() == original.to_pylist()
    many = cases[0]
    assert len(pickle.dumps(pack(many))) < len(pickle.dumps(many)) / 2
    packed = pack(many)
    assert packed.arrays.keys() == {many.schema.get_field_index(name) for name in (
        "body", "message_id", "sequence_number")}  # the body is never taken as shared
