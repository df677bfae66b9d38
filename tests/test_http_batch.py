"""The aiosb batch encoding (column-wise messages, what the ``$aiosb`` extensions carry):
exact round trips of every field and type, the same refusals as one message at a time,
and no 5xx on bad batches (R-4)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from message_strategies import ids, text, value

import aiosb
from aiosb import Message, SasCredential, errors
from aiosb.emulator._record import (
    AVAILABLE,
    DEFERRED,
    LOCKED,
    SCHEDULED,
    received_columns,
    received_messages,
    record_of,
)
from aiosb.message import ReceivedMessage
from aiosb.server.http import DEV_KEY, DEV_KEY_NAME, serve
from aiosb.wire import aiosb_json as _json
from aiosb.wire import json_values


@pytest.fixture
async def post():
    """``post(path, body)`` to a running server with a queue ``q`` in namespace ``ns``:
    the status and the error detail."""
    async with serve() as server, aiohttp.ClientSession() as session:
        async with aiosb.connect(server.namespace_url("ns")) as ns:
            await ns.create_queue("q")
        token = SasCredential(DEV_KEY_NAME, DEV_KEY).token(f"{server.url}/ns")

        async def call(path: str, body: bytes) -> tuple[int, str]:
            async with session.post(f"{server.url}{path}", data=body,
                                    headers={"Authorization": token}) as response:
                text = await response.text()
            found = re.search(r"<Detail>(.*)</Detail>", text, re.S)
            return response.status, found.group(1) if found else text

        yield call

message_kw = st.fixed_dictionaries(
    {},
    optional={
        "message_id": ids,
        "session_id": ids,
        "partition_key": ids,
        "content_type": st.none() | text,
        "correlation_id": st.none() | text,
        "subject": st.none() | text,
        "reply_to": st.none() | text,
        "reply_to_session_id": st.none() | text,
        "to": st.none() | text,
        "time_to_live": st.none() | st.timedeltas(min_value=timedelta(days=-1),
                                                   max_value=timedelta(days=99)),
        "scheduled_enqueue_time": st.none() | st.datetimes(
            timezones=st.just(UTC) | st.just(timezone(timedelta(hours=5, minutes=30)))
        ),
        "application_properties": st.dictionaries(text, value, max_size=3),
    },
)


def fields(msg: Message) -> dict:
    out = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    # NaN is not equal to itself: compare its spelling.
    out["application_properties"] = {
        k: repr(v) if isinstance(v, float) else v
        for k, v in out["application_properties"].items()
    }
    return out


def one_at_a_time(kws: list[dict]) -> list[Message] | type[Exception]:
    try:
        return [Message(b"body %d" % i, **kw) for i, kw in enumerate(kws)]
    except (errors.InvalidArgument, errors.InvalidOperation) as exc:
        return type(exc)


def wire(data: dict) -> dict:
    """Through the bytes, as the server and the client see it (read as they read it)."""
    return _json.loads(_json.dumps(data))


def test_the_fast_paths_know_every_field():
    """The decoders set fields one by one: a new field must be added there too."""
    assert {f.name for f in dataclasses.fields(Message)} == set(_json._MESSAGE_FIELDS)
    received = {f.name for f in dataclasses.fields(ReceivedMessage)}
    assert received == {*_json._MESSAGE_FIELDS, *_json._RECEIVED_DEFAULTS}
    blank = ReceivedMessage()
    assert {k: getattr(blank, k) for k in _json._RECEIVED_DEFAULTS} == _json._RECEIVED_DEFAULTS


@settings(max_examples=200, deadline=None)
@given(st.lists(message_kw, min_size=1, max_size=5))
def test_a_batch_decodes_to_what_one_message_at_a_time_gives(kws):
    """Every field and property type survives exactly; what Message refuses one at a
    time, the batch refuses with the same error."""
    expected = one_at_a_time(kws)
    if isinstance(expected, type):
        # Build what a client would send without the client's own checks.
        batch = {"body": "", "body_sizes": [0] * len(kws)}
        for name in ("message_id", "session_id", "partition_key"):
            if any(kw.get(name) is not None for kw in kws):
                batch[name] = [kw.get(name) for kw in kws]
        for name in ("content_type",):
            if any(kw.get(name) is not None for kw in kws):
                batch[name] = [kw.get(name) for kw in kws]
        if any(kw.get("application_properties") for kw in kws):
            batch["properties"] = [
                {k: _json.encode_value(v) for k, v in kw.get("application_properties", {}).items()}
                for kw in kws
            ]
        ttls = [kw.get("time_to_live") for kw in kws]
        if any(t is not None for t in ttls):
            batch["time_to_live"] = [None if t is None else _json.microseconds(t)
                                     for t in ttls]
        if not any(batch.get(n) for n in ("message_id", "session_id", "partition_key",
                                          "time_to_live", "content_type", "properties")):
            return  # refused for a property type the encoder cannot write either
        with pytest.raises(expected):
            _json.decode_batch(wire(batch))
        return
    decoded = _json.decode_batch(wire(_json.encode_batch(expected)))
    assert [fields(m) for m in decoded] == [fields(m) for m in expected]


@settings(max_examples=100, deadline=None)
@given(st.lists(message_kw, min_size=0, max_size=5), st.data())
def test_received_messages_round_trip_exactly(kws, data):
    sent = one_at_a_time(kws)
    if isinstance(sent, type):
        return
    received = []
    for i, msg in enumerate(sent):
        r = ReceivedMessage(**{f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)})
        r.sequence_number = data.draw(st.integers(0, 2**63 - 1))
        r.enqueued_timestamp = 1_700_000_000.123456 + i // 2
        r.expires_timestamp = data.draw(st.none() | st.floats(0, 2e9))
        r.delivery_count = data.draw(st.integers(0, 9))
        r.lock_token = data.draw(st.none() | st.just(str(uuid.uuid4())))
        r.locked_until_timestamp = data.draw(st.none() | st.floats(0, 2e9))
        r.dead_letter_reason = data.draw(st.none() | text)
        r.dead_letter_error_description = data.draw(st.none() | text)
        r.dead_letter_source = data.draw(st.none() | text)
        r.state = data.draw(st.sampled_from(["active", "deferred", "scheduled"]))
        r.entity_path = "q"
        received.append(r)
    decoded = _json.decode_received_batch(wire(_json.encode_received_batch(received)))
    assert all(type(m) is ReceivedMessage for m in decoded)
    assert [fields(m) for m in decoded] == [fields(m) for m in received]


def test_columns_are_compact():
    """Absent when every message has the default, one value when all share it."""
    msgs = [Message(b"ab", subject="s", application_properties={"i": i}) for i in range(3)]
    assert _json.encode_batch(msgs) == {
        "body": "YWJhYmFi",
        "body_sizes": [2, 2, 2],
        "subject": "s",
        "properties": [{"i": 0}, {"i": 1}, {"i": 2}],
    }
    assert _json.encode_received_batch([]) == {"body": "", "body_sizes": []}
    assert _json.decode_received_batch({"body": "", "body_sizes": []}) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(message_kw, min_size=1, max_size=5))
def test_a_record_counts_the_size_its_message_counts(kws):
    """The emulator works out a record's size as it reads the message's fields (#16):
    the size Message.size gives, whichever fields are set."""
    sent = one_at_a_time(kws)
    if isinstance(sent, type):
        return
    for msg in sent:
        assert record_of(msg, msg.message_id or 7).size == msg.size


@pytest.mark.parametrize(
    ("msg", "size"),
    [
        (Message(b"xy"), 2),
        (Message(b"xy", message_id="m"), 3),  # an id alone: the record's short cut
        (Message(b"", message_id="\u00e9t\u00e9"), 5),  # UTF-8 bytes, not characters
        (Message(b"x", message_id="m", to="t"), 3),
        (Message(b"x", subject="\u20ac"), 4),
        (Message(b"x", application_properties={"k": 1}), 1 + 1 + 8),
    ],
)
def test_a_records_size_is_its_messages_for_each_shape(msg, size):
    assert record_of(msg, msg.message_id or 7).size == msg.size == size


@settings(max_examples=100, deadline=None)
@given(st.lists(message_kw, min_size=1, max_size=5), st.booleans(), st.data())
def test_the_servers_columns_say_what_the_messages_of_a_receive_say(kws, peek, data):
    """The server answers a batch receive from the emulator's records, column by column
    (#16), with no ReceivedMessage each: the answer is the one the messages give, for
    every field, broker state (locked, deferred, scheduled, dead-lettered) and peek."""
    sent = one_at_a_time(kws)
    if isinstance(sent, type):
        return
    recs = []
    for i, msg in enumerate(sent):
        rec = record_of(msg, msg.message_id or data.draw(st.integers(1, 2**40)), msg.size)
        rec.seq = data.draw(st.integers(0, 2**63 - 1))
        rec.enqueued = 1_700_000_000.123456 + i // 2
        rec.expires = data.draw(st.none() | st.floats(0, 2e9))
        rec.delivery_count = data.draw(st.integers(0, 9))
        rec.state = data.draw(st.sampled_from([AVAILABLE, LOCKED, DEFERRED, SCHEDULED]))
        rec.deferred = data.draw(st.booleans())
        if rec.state == LOCKED:
            rec.lock_token = str(uuid.uuid4())
            rec.locked_until = data.draw(st.floats(0, 2e9))
        if data.draw(st.booleans()):
            rec.dl_reason = data.draw(text)
            rec.dl_desc = data.draw(st.none() | text)
            rec.dl_source = data.draw(st.none() | text)
        recs.append(rec)
    messages = received_messages(recs, "q/$DeadLetterQueue", peek)
    answer = _json.encode_received_columns(*received_columns(recs, "q/$DeadLetterQueue", peek))
    assert answer == _json.encode_received_batch(messages)
    decoded = _json.decode_received_batch(wire(answer))
    assert [fields(m) for m in decoded] == [fields(m) for m in messages]


@pytest.mark.parametrize(
    "text",
    [
        b"[18446744073709551615, 18446744073709551616, -9223372036854775808]",
        b'{"a": -9223372036854775809, "b": [1, 123456789012345678901234567890]}',
        b"12345678901234567890123",
        b"-12345678901234567890123",
        b'{"t":\n 99999999999999999999, "s": "x"}',
        b"NaN",
        b'"\\ud800"',
        b"1E400",
        "\ufeff{}".encode(),
        "[1]".encode("utf-16"),
    ],
)
def test_the_extensions_read_json_as_json_reads_it(text):
    """orjson reads the extension bodies (#16), but a whole number beyond 64 bits
    (which orjson reads as a float) and what orjson refuses read as json reads them."""
    got, expected = _json.loads(text), json.loads(text)
    assert repr(got) == repr(expected)  # repr: NaN is not equal to itself
    assert list(map(type, got.values() if isinstance(got, dict) else [got])) == list(
        map(type, expected.values() if isinstance(expected, dict) else [expected])
    )


def test_a_long_run_of_digits_in_a_string_is_no_number():
    """Hex ids, lock tokens and base64 hold runs of digits, never after a separator:
    the fast reader takes them (a number after one would send the text to json)."""
    text = _json.dumps({"message_id": ["0123456789012345678901234567890a"] * 3,
                        "body": "01234567890123456789012345678901", "n": [12345678]})
    assert not json_values._risky(text)
    assert json_values._risky(b'{"n": 1234567890123456789}')
    assert json_values._risky(b'["x", -1234567890123456789]')
    with pytest.raises(ValueError):
        _json.loads(b"{")


def test_whole_numbers_at_the_ends_of_64_bits_survive_a_batch():
    big = {"p": 2**64 - 1, "n": -(2**63), "t": timedelta.max}
    batch = wire(_json.encode_batch([Message(b"", application_properties=big)] * 2))
    decoded = [m.application_properties for m in _json.decode_batch(batch)]
    assert decoded == [big] * 2
    assert {type(v) for p in decoded for k, v in p.items() if k != "t"} == {int}


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 2**70, datetime(2030, 1, 1)])
def test_a_property_no_amqp_type_carries_is_refused_at_once(value):
    """A whole number beyond 64 bits, or a datetime without a time zone, has no AMQP
    type: refused when the message is made, and in a batch that arrives as columns (the
    HTTP send path), so that no receiver over AMQP meets a message it cannot be given
    (#47: its delivery ended the receiver's whole connection, again after each lock)."""
    from aiosb.protocol import check_columns

    with pytest.raises(errors.InvalidArgument, match="'p'"):
        Message(b"", application_properties={"p": value})
    with pytest.raises(errors.InvalidArgument, match="'p'"):
        check_columns([b"a", b"b"], {"application_properties": [{"q": 1}, {"p": value}]})


def test_dumps_falls_back_for_what_orjson_refuses():
    for data in ({"x": 2**70}, {"x": "\ud800"}):
        assert json.loads(_json.dumps(data)) == data


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        ({"body": "", "body_sizes": []}, "at least one message"),
        ({"body_sizes": [1]}, "add up to 1 bytes, but body has 0"),
        ({"body": "%%%", "body_sizes": [1]}, "base64"),
        ({"body": 5, "body_sizes": [1]}, "body must be a base64 string"),
        ({"body": "", "body_sizes": [-1, 1]}, "body_sizes"),
        ({"body": "", "body_sizes": [0.0]}, "body_sizes"),
        ({"body": "", "body_sizes": "0"}, "body_sizes"),
        ({"body": ""}, "body_sizes"),
        ({"body": "", "body_sizes": [0], "colour": ["red"]}, "unknown batch column"),
        ({"body": "", "body_sizes": [0, 0], "subject": ["a"]}, "list of 2"),
        ({"body": "", "body_sizes": [0], "subject": [5]}, "subject must be a str"),
        ({"body": "", "body_sizes": [0], "subject": 5}, "subject must be a str"),
        ({"body": "", "body_sizes": [0], "subject": {"a": 1}}, "subject must be a str"),
        ({"body": "", "body_sizes": [0], "message_id": "m" * 129}, "128"),
        ({"body": "", "body_sizes": [0], "session_id": "a", "partition_key": "b"},
         "differs from session_id"),
        ({"body": "", "body_sizes": [0], "time_to_live": 0}, "positive"),
        ({"body": "", "body_sizes": [0], "time_to_live": [True]}, "time_to_live must be"),
        ({"body": "", "body_sizes": [0], "time_to_live": 2**70}, "2\\*\\*62"),
        ({"body": "", "body_sizes": [0], "scheduled_enqueue_time": "2030-01-01T00:00:00"},
         "UTC offset"),
        ({"body": "", "body_sizes": [0], "properties": {"a": 1}}, "properties must be a list"),
        ({"body": "", "body_sizes": [0], "properties": [5]}, "JSON object or null"),
        ({"body": "", "body_sizes": [0], "properties": [{"x": [1]}]}, "property 'x'"),
        ({"body": "", "body_sizes": [0], "properties": [{"x": {"set": 1}}]}, "property 'x'"),
        ({"body": "", "body_sizes": [0], "properties": [{}, {}]}, "list of 1"),
    ],
)
async def test_r4_bad_batches_get_a_4xx_that_says_what_is_wrong(post, batch, match):
    for op in ("send", "schedule"):
        status, text = await post(f"/ns/q/$aiosb/{op}", json.dumps({"batch": batch}).encode())
        assert status == 400 and re.search(match, text), (status, text)
    assert (await post("/ns/q/messages", b"ok"))[0] == 201


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b'{"batch": {"body": "", "body_sizes": [0]}, "messages": [{}]}', "one of them"),
        (b'{"transaction": false}', "one of them"),
        (b'{"batch": [], "transaction": false}', "a batch must be a JSON object"),
    ],
)
async def test_r4_a_send_has_messages_or_a_batch(post, body, match):
    status, text = await post("/ns/q/$aiosb/send", body)
    assert status == 400 and re.search(match, text), (status, text)


async def test_r4_receive_batch_flag_is_a_boolean(post):
    status, text = await post("/ns/q/$aiosb/receive", b'{"batch": 1}')
    assert status == 400 and "batch must be true or false" in text, (status, text)


@pytest.mark.parametrize("odd", [float("nan"), float("inf"), float("-inf")])
def test_a_float_json_cannot_write_survives_a_batch_beside_plain_ones(odd):
    """A batch whose property values JSON carries as they are goes as it is (#16); a
    float JSON has no number for is tagged instead, or orjson would write null."""
    sent = [Message(b"a", application_properties={"f": 1.5}),
            Message(b"b", application_properties={"f": odd})]
    batch = _json.encode_batch(sent)
    assert batch["properties"][1]["f"] != odd  # tagged, not a bare float
    first, second = _json.decode_batch(wire(batch))
    assert first.application_properties == {"f": 1.5}
    got = second.application_properties["f"]
    assert got == odd or (math.isnan(got) and math.isnan(odd))
