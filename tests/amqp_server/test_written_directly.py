"""The hot paths written byte by byte (#36) write what the general encoder writes.

A delivery (:func:`aiosb.server.amqp._receiving.delivery_payload`) and a transfer performative
(:func:`aiosb.server.amqp.performatives.transfer`) skip the general encoder for speed; these
properties hold them to it, over every field a delivery carries, and the decoder reads
back what the fields said.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiosb.message import ReceivedMessage
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp._receiving import (
    _epoch_millis,
    _payload_kept,
    delivery_payload,
    delivery_tag,
)
from aiosb.server.amqp.codec import DecodeError, Described, UByte, UInt, ULong, encode
from aiosb.server.amqp.messages import Sections, sections_of

pytestmark = pytest.mark.timeout(120)

_text = st.one_of(st.none(), st.text(max_size=300))
_ascii = st.one_of(st.none(), st.text(alphabet=st.characters(min_codepoint=33,
                                                             max_codepoint=126), max_size=40))
_seconds = st.floats(min_value=-2e9, max_value=4e9, allow_nan=False)
_props = st.dictionaries(
    st.text(max_size=20),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=40), st.booleans(),
              st.floats(allow_nan=False), st.binary(max_size=40),
              st.timedeltas(min_value=_dt.timedelta(0), max_value=_dt.timedelta(days=9000))),
    max_size=4)


@st.composite
def received(draw: st.DrawFn) -> ReceivedMessage:
    return ReceivedMessage(
        draw(st.binary(max_size=700)),
        message_id=draw(_text), session_id=draw(_text), partition_key=draw(_text),
        time_to_live=draw(st.one_of(st.none(), st.timedeltas(
            min_value=_dt.timedelta(0), max_value=_dt.timedelta(days=40)))),
        scheduled_enqueue_time=draw(st.one_of(st.none(), st.datetimes(
            min_value=_dt.datetime(1971, 1, 1), max_value=_dt.datetime(2200, 1, 1),
            timezones=st.just(_dt.UTC)))),
        content_type=draw(_ascii), correlation_id=draw(_text), subject=draw(_text),
        reply_to=draw(_text), reply_to_session_id=draw(_text), to=draw(_text),
        application_properties=draw(_props),
        sequence_number=draw(st.integers(0, 2**63 - 1)),
        enqueued_timestamp=draw(_seconds),
        delivery_count=draw(st.integers(0, 2**31)),
        lock_token=draw(st.one_of(st.none(), st.uuids().map(str))),
        locked_until_timestamp=draw(st.one_of(st.none(), _seconds)),
        dead_letter_reason=draw(_text), dead_letter_error_description=draw(_text),
        dead_letter_source=draw(_text),
        state=draw(st.sampled_from(["active", "deferred", "scheduled"])),
    )


@settings(max_examples=400, deadline=None)
@given(received(), st.booleans())
def test_a_delivery_is_what_the_general_encoder_writes(m: ReceivedMessage,
                                                       delivered: bool) -> None:
    count = m.delivery_count - 1 if delivered and m.delivery_count else m.delivery_count
    assert delivery_payload(m, delivered=delivered) == _payload_kept(m, count, Sections(),
                                                                   delivered)


@settings(max_examples=200, deadline=None)
@given(received())
def test_a_delivery_reads_back_as_its_fields(m: ReceivedMessage) -> None:
    got = sections_of(delivery_payload(m))
    assert got.data == [m.body]
    header = got.header or []
    ttl = m.time_to_live
    assert header[2] == (None if ttl is None else ttl // _dt.timedelta(milliseconds=1))
    props = (got.properties or []) + [None] * 13
    assert [props[i] for i in (0, 2, 3, 4, 5, 6, 10, 12)] == [
        m.message_id, m.to, m.subject, m.reply_to, m.correlation_id, m.content_type,
        m.session_id, m.reply_to_session_id]
    notes = got.annotations or {}
    assert notes["x-opt-sequence-number"] == m.sequence_number
    assert notes["x-opt-enqueued-time"] == _dt.datetime.fromtimestamp(
        _epoch_millis(m.enqueued_timestamp) / 1000, _dt.UTC)
    assert notes.get("x-opt-partition-key") == m.partition_key
    app = got.application_properties or {}
    assert app.get("DeadLetterReason") == m.dead_letter_reason
    assert {k: v for k, v in app.items() if k in m.application_properties}.keys() \
        == m.application_properties.keys()


@settings(max_examples=2000, deadline=None)
@given(_seconds)
def test_epoch_milliseconds_as_through_a_datetime(seconds: float) -> None:
    through = _dt.datetime.fromtimestamp(seconds, _dt.UTC) - _dt.datetime(
        1970, 1, 1, tzinfo=_dt.UTC)
    assert _epoch_millis(seconds) == through // _dt.timedelta(milliseconds=1)


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.binary(max_size=300),
       st.booleans(), st.booleans())
def test_a_transfer_is_what_the_general_encoder_writes(
        handle: int, delivery_id: int, tag: bytes, settled: bool, more: bool) -> None:
    general = p.performative(p.TRANSFER, UInt(handle), UInt(delivery_id), tag, UInt(0),
                             settled, True if more else None)
    assert len(general.value) == p.FIELD_COUNT[p.TRANSFER]  # #47: every field
    assert bytes(p.transfer(handle, delivery_id, tag, settled, more)) == encode(general)


@given(st.uuids())
def test_a_delivery_tag_is_the_lock_tokens_little_endian_bytes(token: uuid.UUID) -> None:
    for spelled in (str(token), str(token).upper(), "{" + str(token) + "}", token.hex):
        tag = delivery_tag(ReceivedMessage(b"", lock_token=spelled))
        assert tag == token.bytes_le
    # unlocked (received and deleted): no tag, as Service Bus sends it; 16 zero bytes
    # read as the lock token 00000000-... to the SDKs (#47: Microsoft's own test of
    # receive-and-delete expects none)
    assert delivery_tag(ReceivedMessage(b"")) == b""


@given(st.integers(0, 2**32 - 1), st.none() | st.integers(0, 2**32 - 1), st.booleans())
def test_an_accepted_disposition_is_what_the_general_encoder_writes(
        delivery_id: int, last: int | None, role: bool) -> None:
    """#36, a receiver's (a transfer settled); #50, a sender's, of a range too (a
    completion answered)."""
    general = p.performative(p.DISPOSITION, role, UInt(delivery_id),
                             None if last is None else UInt(last), True,
                             p.performative(p.ACCEPTED))
    assert len(general.value) == p.FIELD_COUNT[p.DISPOSITION]  # #47: every field
    assert bytes(p.accepted(delivery_id, last, role=role)) == encode(general)


_field = st.one_of(st.none(), st.booleans(), st.integers(0, 2**32 - 1).map(UInt),
                   st.integers(0, 255).map(UByte), st.binary(max_size=40),
                   st.text(max_size=5), st.integers(0, 2**64 - 1).map(ULong))


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(p.FIELD_COUNT)), st.lists(_field, max_size=14),
       st.binary(max_size=20))
def test_a_performative_reads_as_the_general_decoder_reads_it(
        code: int, fields: list[Any], payload: bytes) -> None:
    """parse's quick read (#36: a transfer per SDK batch) gives what the decoder gives,
    on performatives as peers may send them (trailing fields left off, #47)."""
    body = encode(Described(ULong(code), fields)) + payload
    assert p.parse(body) == p._parsed(body)


@settings(max_examples=2000, deadline=None)
@given(st.sampled_from(sorted(p.FIELD_COUNT)), st.lists(_field, max_size=14),
       st.binary(max_size=20), st.integers(0, 255), st.integers(0, 255), st.booleans())
def test_a_broken_performative_is_refused_as_the_general_decoder_refuses_it(
        code: int, fields: list[Any], payload: bytes, size: int, count: int,
        both: bool) -> None:
    """A list's size or count that lies (an item past its end, fewer items than it
    says): parse's quick read refuses it, or reads it, as the decoder does."""
    body = bytearray(encode(Described(ULong(code), fields)) + payload)
    if len(body) > 5 and body[3] == 0xC0:
        body[4] = size
        if both:
            body[5] = count
    try:
        expected: Any = p._parsed(bytes(body))
    except DecodeError as exc:
        expected = type(exc)
    try:
        got: Any = p.parse(bytes(body))
    except DecodeError as exc:
        got = type(exc)
    assert got == expected
