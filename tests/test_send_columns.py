"""#16: a batch sent as columns (the syphon's move; ``ColumnTransport.send_columns``) is
refused as a Message refuses its fields, with the same sentence, and nothing of it is
stored; a good one is stored as the same messages sent one by one would be. And a batch
received as columns (``receive_columns``) is what ``receive`` gives. On every transport
that has them: the embedded emulator, the HTTP transport to ``aiosb serve`` (its batch
encoding), and the HTTP transport over plain REST (message by message)."""

from __future__ import annotations

import datetime as _dt

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.protocol import ColumnTransport, ReceiveRequest, check_columns, received_from_columns
from aiosb.server.http import serve

UTC = _dt.UTC


@pytest.fixture(params=["memory", "http", "rest"])
async def ns(request):
    if request.param == "memory":
        async with aiosb.connect("memory://columns") as namespace:
            await namespace.create_queue("q")
            yield namespace
            await namespace.delete_queue("q")
        return
    async with serve() as server, aiosb.connect(
        server.namespace_url("columns"), extensions=request.param == "http"
    ) as namespace:
        await namespace.create_queue("q")
        yield namespace


BAD = [
    ({"message_id": ["a"]}, errors.InvalidArgument, "1 values for 2 messages"),
    ({"colour": "red"}, errors.InvalidArgument, "not a field of a message to send"),
    ({"sequence_number": [1, 2]}, errors.InvalidArgument, "not a field"),
    ({"time_to_live": 5}, errors.InvalidArgument, "time_to_live must be timedelta, not int"),
    ({"time_to_live": _dt.timedelta(seconds=-5)}, errors.InvalidArgument, "positive"),
    ({"message_id": ["a", ""]}, errors.InvalidArgument, "message_id is empty"),
    ({"session_id": "s" * 200}, errors.InvalidArgument, "200 characters long"),
    ({"session_id": "a", "partition_key": ["a", "b"]}, errors.InvalidOperation, "PT-7"),
    ({"subject": ["ok", "\ud800"]}, errors.InvalidArgument, "lone surrogate"),
    ({"content_type": "a\nb"}, errors.InvalidArgument, "printable ASCII"),
    ({"content_type": ["", None]}, errors.InvalidArgument, "not empty"),
    ({"scheduled_enqueue_time": _dt.datetime(2030, 1, 1)}, errors.InvalidArgument, "aware"),
    ({"application_properties": [{"ok": 1}, {"bad name": 1}]}, errors.InvalidArgument,
     "'bad name' is not allowed"),
    ({"application_properties": [{"k": object()}, None]}, errors.InvalidArgument,
     "Service Bus cannot carry"),
]


@pytest.mark.parametrize(("columns", "error", "says"), BAD)
async def test_a_bad_column_is_refused_and_nothing_is_stored(ns, columns, error, says):
    assert isinstance(ns.transport, ColumnTransport)
    with pytest.raises(error, match=says.replace("(", r"\(")):
        await ns.transport.send_columns("q", [b"a", b"b"], columns)
    assert (await ns.runtime_properties("q")).active_message_count == 0


async def test_bodies_must_be_bytes(ns):
    with pytest.raises(errors.InvalidArgument, match="bodies"):
        await ns.transport.send_columns("q", [b"a", "b"], {})


async def test_good_columns_are_stored_as_the_messages_would_be(ns):
    at = _dt.datetime(2031, 1, 1, tzinfo=UTC)
    columns = {
        "message_id": ["m1", "m2"],
        "partition_key": "k",
        "subject": ["é", None],
        "time_to_live": [_dt.timedelta(hours=1), None],
        "application_properties": [{"n": 1, "s": "ü", "t": at}, None],
        "content_type": None,
    }
    check_columns([b"a", b"b"], columns)  # nothing to say
    await ns.transport.send_columns("q", [b"a", b"b"], columns)
    async with ns.receiver("q", mode="receive_and_delete") as receiver:
        got = await receiver.receive(2, max_wait=0)
    want = [
        Message(b"a", message_id="m1", partition_key="k", subject="é",
                time_to_live=_dt.timedelta(hours=1),
                application_properties={"n": 1, "s": "ü", "t": at}),
        Message(b"b", message_id="m2", partition_key="k"),
    ]
    fields = ("body", "message_id", "partition_key", "subject", "application_properties")
    assert [tuple(getattr(m, f) for f in fields) for m in got] == [
        tuple(getattr(m, f) for f in fields) for m in want
    ]
    assert got[0].time_to_live == _dt.timedelta(hours=1)
    assert got[1].time_to_live is None or got[1].time_to_live > _dt.timedelta(days=1)


async def test_a_batch_received_as_columns_is_what_receive_gives(ns):
    at = _dt.datetime(2031, 1, 1, tzinfo=UTC)
    sent = [
        Message(b"a", message_id="m1", subject="s", correlation_id="c",
                time_to_live=_dt.timedelta(hours=1), application_properties={"n": 1, "t": at}),
        Message(b"b", message_id="m2", content_type="text/plain"),
        Message(b"c", message_id="m3", application_properties={"n": 2.5}),
    ]
    async with ns.sender("q") as sender:
        await sender.send(sent)
    bodies, columns = await ns.transport.receive_columns(
        "q", ReceiveRequest(max_messages=10, max_wait=0)
    )
    got = received_from_columns(bodies, columns)
    assert [m.body for m in got] == [b"a", b"b", b"c"]
    # What the syphon cuts into chunks: a list each, whatever the encoding collapsed.
    assert all(type(columns[name]) is list and len(columns[name]) == 3
               for name in ("lock_token", "locked_until_timestamp", "expires_timestamp"))
    fields = ("message_id", "subject", "correlation_id", "content_type", "time_to_live",
              "application_properties", "delivery_count", "state")
    assert [tuple(getattr(m, f) for f in fields) for m in got] == [
        ("m1", "s", "c", None, _dt.timedelta(hours=1), {"n": 1, "t": at}, 1, "active"),
        ("m2", None, None, "text/plain", None, {}, 1, "active"),
        ("m3", None, None, None, None, {"n": 2.5}, 1, "active"),
    ]
    assert len({m.lock_token for m in got}) == 3
    assert [m.sequence_number for m in got] == sorted(m.sequence_number for m in got)
    assert all(m.locked_until_timestamp > m.enqueued_timestamp for m in got)
    async with ns.receiver("q") as receiver:
        await receiver.complete(got)  # locked: the lock tokens of the columns hold
        assert await receiver.receive(max_wait=0) == []
