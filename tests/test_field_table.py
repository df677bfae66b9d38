"""Issue 13: one list of a message's fields, and every converter carries every field.

A message with every field of ``dataclasses.fields(Message)`` set to something other than
its default goes through each converter and back; whatever the converter forgets shows
up as a field that differs. The values come from the fields' declared types, not from
``aiosb.message.MESSAGE_FIELDS``, so a field added to the dataclass (and the table) gets
a value here at once, and each converter that does not learn it fails.

Converters: aiosb's JSON codec (one message, batches, received messages), the Service Bus
REST codec (lossy by design: instants to the second, property values as text), the AMQP
mapping to and from the official SDK's messages, the backlog rewrite of pairing (PN-10,
PN-11), Spark's write and read columns, the embedded broker (send and receive) and the
durable journal (R-3).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json

import pytest

import aiosb
from aiosb import Message, ReceivedMessage, emulator
from aiosb.message import MESSAGE_FIELDS, RECEIVED_FIELDS, builder, column_reader, copier
from aiosb.server.amqp.codec import Described, Symbol, ULong, encode
from aiosb.wire import aiosb_json, rest

UTC = _dt.UTC
#: An AMQP footer section ({"k": "v"}), what an AMQP message's amqp_extra may hold.
FOOTER = encode(Described(ULong(0x78), {Symbol("k"): "v"}))
#: A whole second, so the REST codec (instants to the second) keeps it exactly.
AT = _dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)


def _value(field: dataclasses.Field[object]) -> object:
    """A value other than the default for a field, from its declared type alone."""
    kind = str(field.type)
    if kind == "bytes":
        return b"\x00body\xff"
    if kind == "bytes | None":  # amqp_extra: a footer, as an AMQP sender writes one
        return FOOTER
    if kind.startswith("str"):
        if field.name in ("session_id", "partition_key"):
            return "s-1"  # PT-7: equal when both are set
        if field.name == "content_type":
            return "application/json"
        if field.name == "state":
            return "deferred"
        return f"{field.name}-1"
    if "timedelta" in kind:
        return _dt.timedelta(minutes=5, seconds=7)
    if "datetime" in kind:
        return AT
    if kind.startswith("dict"):
        return {"n": 7, "s": "x"}
    if kind == "int":
        return 7
    if kind.startswith("float"):
        return 1_900_000_000.0
    raise AssertionError(f"teach this test a value for {field.name}: {kind}")


def full_message() -> Message:
    return Message(**{f.name: _value(f) for f in dataclasses.fields(Message)})


def full_received() -> ReceivedMessage:
    msg = ReceivedMessage.__new__(ReceivedMessage)
    for f in dataclasses.fields(ReceivedMessage):
        setattr(msg, f.name, _value(f))
    return msg


def sent_fields(msg: Message) -> dict[str, object]:
    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(Message)}


def all_fields(msg: ReceivedMessage) -> dict[str, object]:
    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(ReceivedMessage)}


def test_the_table_lists_the_dataclasses_fields_in_order():
    assert list(MESSAGE_FIELDS) == [f.name for f in dataclasses.fields(Message)]
    received = [f.name for f in dataclasses.fields(ReceivedMessage)]
    assert received == [*MESSAGE_FIELDS, *RECEIVED_FIELDS]


def test_the_full_message_sets_every_field_off_its_default():
    blank, full = ReceivedMessage(), full_received()
    same = [name for name in all_fields(full) if getattr(full, name) == getattr(blank, name)]
    assert same == []


def test_the_compiled_helpers_set_exactly_the_fields_named():
    source = full_received()
    target = ReceivedMessage()
    copier(["subject", "sequence_number"])(source, target)
    assert (target.subject, target.sequence_number) == ("subject-1", 7)
    assert target.to is None and target.body == b""
    build = builder(
        Message, ["body", "application_properties"], dicts=["application_properties"]
    )
    (built,) = build([(b"b", None)])
    assert (built.body, built.application_properties) == (b"b", {})
    assert column_reader(["to", "body"])([source, source]) == (["to-1"] * 2, [source.body] * 2)
    with pytest.raises(ValueError, match="not message fields"):
        copier(["nonsense"])


# -- the wire codecs ------------------------------------------------------------------


def test_aiosb_json_carries_every_field_of_a_message():
    msg = full_message()
    back = aiosb_json.decode_message(json.loads(json.dumps(aiosb_json.encode_message(msg))))
    assert sent_fields(back) == sent_fields(msg)
    batch = json.loads(aiosb_json.dumps(aiosb_json.encode_batch([msg])))
    (batched,) = aiosb_json.decode_batch(batch)
    assert sent_fields(batched) == sent_fields(msg)


def test_aiosb_json_carries_every_field_of_a_received_message():
    msg = full_received()
    back = aiosb_json.decode_received(
        json.loads(json.dumps(aiosb_json.encode_received(msg)))
    )
    assert all_fields(back) == all_fields(msg)
    answer = json.loads(aiosb_json.dumps(aiosb_json.encode_received_batch([msg, msg])))
    for batched in aiosb_json.decode_received_batch(answer):
        assert all_fields(batched) == all_fields(msg)


def test_the_rest_codec_carries_every_field_a_sender_sets():
    msg = full_message()
    back = rest.message_from_rest(
        rest.rest_broker_properties(msg), msg.body, msg.content_type,
        dict(msg.application_properties),
    )
    # The REST protocol has no place for AMQP sections (a REST client sends data only).
    assert back.amqp_extra is None
    assert sent_fields(back) == {**sent_fields(msg), "amqp_extra": None}


def test_the_rest_codec_carries_every_field_of_a_received_message():
    """What the server answers a REST receive with, read by the HTTP transport; the REST
    protocol has no entity path (the client knows it) and no expiry (derived from the
    enqueue time and the time to live), and properties come back as text."""
    from aiosb.server.http._rest_plane import rest_headers

    msg = full_received()
    msg.enqueued_timestamp = AT.timestamp()
    msg.locked_until_timestamp = AT.timestamp() + 30
    msg.expires_timestamp = msg.enqueued_timestamp + msg.time_to_live.total_seconds()
    msg.application_properties = {"s": "x"}
    headers = rest_headers(msg, locked=True)
    broker = json.loads(headers["BrokerProperties"])
    back = rest.received_from_rest(broker, msg.body, headers, msg.entity_path)
    # A REST receiver gets the body; the AMQP sections are for AMQP receivers.
    assert all_fields(back) == {**all_fields(msg), "amqp_extra": None}


def test_the_amqp_mapping_carries_every_field():
    pytest.importorskip("azure.servicebus")
    from amqp.sdk import received

    from aiosb.transport.amqp._convert import message_from_sdk, message_to_sdk

    msg = full_message()
    sdk_message = received(sdk_message=message_to_sdk(msg), sequence_number=7)
    back = message_from_sdk(sdk_message, "q", locked=True)
    assert sent_fields(back) == sent_fields(msg)


# -- pairing's backlog rewrite ----------------------------------------------------------


def test_the_backlog_rewrite_carries_every_field_home():
    """PN-10, PN-11: a message sent to a backlog queue and moved home by the syphon is
    the message the application sent; the scheduled time and the time to live are
    restored relative to now."""
    from aiosb.pairing.rewrite import restore, to_backlog

    msg = full_message()
    now = AT.timestamp() - 3600  # the schedule is still ahead
    copy = to_backlog(msg, "orders", now, 256 * 1024)
    received = ReceivedMessage(**sent_fields(copy))
    received.expires_timestamp = AT.timestamp() + msg.time_to_live.total_seconds()
    assert restore(received, now) == "orders"
    assert sent_fields(received) == sent_fields(msg)


def test_the_backlog_rewrite_of_a_batch_as_columns_carries_every_field_home():
    """#16: the syphon moves a batch as columns (restore_columns, then the broker's
    send_columns) where it can: a full message, but for the session it would not be
    moved that way with, comes home with every field, as restore gives it."""
    from aiosb.emulator._record import FIELDS, record_of, records_from_columns
    from aiosb.pairing.rewrite import restore, restore_columns, to_backlog

    msg = full_message()
    msg.session_id = msg.scheduled_enqueue_time = None  # moved as messages (restore)
    now = AT.timestamp() - 3600
    copy = to_backlog(msg, "orders", now, 256 * 1024)
    received = ReceivedMessage(**sent_fields(copy))
    received.expires_timestamp = AT.timestamp() + msg.time_to_live.total_seconds()
    names = [f.name for f in dataclasses.fields(ReceivedMessage) if f.name != "body"]
    columns = dict(zip(names, column_reader(names)([received]), strict=True))
    restored = restore_columns(columns, now)
    assert restored is not None
    entity, sent = restored
    # A column may hold one value every message has (as the HTTP batch encoding writes
    # equal values): the expiry is kept all the same (G-2).
    one = restore_columns({**columns, "expires_timestamp": received.expires_timestamp}, now)
    assert one is not None and one[1]["time_to_live"] == [sent["time_to_live"][0]]
    assert columns["application_properties"] == [copy.application_properties]  # unchanged
    assert restore(received, now) == entity == "orders"
    (rec,) = records_from_columns([received.body], sent)
    want = record_of(received, received.message_id)
    assert {f: getattr(rec, f) for f in FIELDS} == {f: getattr(want, f) for f in FIELDS}
    assert rec.props == msg.application_properties and rec.ttl_td == received.time_to_live


def test_a_batch_as_columns_becomes_received_messages_with_every_field():
    """What the syphon does with a batch it cannot move as columns: the messages, each
    with properties of its own."""
    from aiosb.protocol import received_from_columns

    full = full_received()
    names = [f.name for f in dataclasses.fields(ReceivedMessage) if f.name != "body"]
    columns = dict(zip(names, column_reader(names)([full, full]), strict=True))
    a, b = received_from_columns([full.body, full.body], columns)
    assert all_fields(a) == all_fields(b) == all_fields(full)
    a.application_properties["n"] = 8
    assert full.application_properties["n"] == b.application_properties["n"] == 7
    (c,) = received_from_columns([b"x"], {"lock_token": "t", "state": "deferred"})
    assert all_fields(c) == {**all_fields(ReceivedMessage(b"x")), "lock_token": "t",
                             "state": "deferred"}


# -- Spark's columns --------------------------------------------------------------------


def test_spark_columns_carry_every_field():
    pa = pytest.importorskip("pyarrow")
    from aiosb.spark._columns import READ_COLUMNS, WRITE_FIELDS, to_row
    from aiosb.spark._write import _row_messages

    msg = full_message()
    cells = {}
    for column, (field, kind) in WRITE_FIELDS.items():
        value = getattr(msg, field)
        if kind == "duration":
            value = value.total_seconds()
        cells[column] = [value]
    # a map of strings, as most DataFrames have
    cells["properties"] = pa.array([[("n", "7"), ("s", "x")]], pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_pydict(cells)
    (written,) = _row_messages([batch], "w-")
    expected = sent_fields(msg)
    expected["application_properties"] = {"n": "7", "s": "x"}
    assert sent_fields(written) == expected

    full = full_received()
    row = dict(zip([c[0] for c in READ_COLUMNS], to_row(full), strict=True))
    shown = {field: row[column] for column, _, field, _ in READ_COLUMNS}
    assert set(shown) == set(all_fields(full)) - {"lock_token", "locked_until_timestamp"}
    assert row["body"] == full.body and row["subject"] == full.subject
    assert row["time_to_live_seconds"] == full.time_to_live.total_seconds()
    assert row["enqueued_time"] == full.enqueued_time
    assert row["properties"] == {"n": "7", "s": "x"}


# -- the broker and the durable journal ----------------------------------------------------


async def _send_and_receive(name: str, before_receive=None) -> ReceivedMessage:
    msg = full_message()
    msg.scheduled_enqueue_time = None  # scheduled messages are received later
    async with aiosb.connect(f"memory://{name}") as ns:
        await ns.create_queue("q", requires_session=True)
        async with ns.sender("q") as sender:
            await sender.send(msg)
    if before_receive is not None:
        await before_receive()
    async with aiosb.connect(f"memory://{name}") as ns:
        async with ns.receiver("q", session_id="s-1") as receiver:
            (got,) = await receiver.receive(max_wait=0)
            await receiver.complete(got)
    expected = sent_fields(msg)
    assert sent_fields(got) == expected
    return got


async def test_the_broker_keeps_every_field():
    await _send_and_receive("fieldtable")


async def test_the_durable_journal_keeps_every_field(tmp_path):
    """R-3: what the journal writes and reads back after a restart."""
    from aiosb.emulator.durable import Journal

    journal = Journal(tmp_path)
    await journal.open()
    emulator.use_journal(journal)

    async def restart() -> None:
        nonlocal journal
        await journal.commit()
        emulator.use_journal(None)
        await journal.aclose()
        emulator.reset()
        journal = Journal(tmp_path)
        await journal.open()
        await journal.load()
        emulator.use_journal(journal)

    try:
        await _send_and_receive("durablefields", restart)
    finally:
        emulator.use_journal(None)
        await journal.aclose()
