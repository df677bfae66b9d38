"""#47: a typed value (:mod:`aiosb.values`) is checked when it is made, so that no value
its AMQP type cannot hold reaches a delivery: encoding one there failed inside the
delivery, ended the receiver's whole connection, and the message, redelivered, ended the
next receiver's, until dead-lettered (a client with Send rights over HTTP could poison a
queue for AMQP receivers with ``{"float32": 1e300}``)."""

from __future__ import annotations

import json

import aiohttp
import pytest

import aiosb
from aiosb import Message, SasCredential, errors
from aiosb.server.amqp.codec import decode_typed, encode
from aiosb.server.http import DEV_KEY, DEV_KEY_NAME, serve
from aiosb.values import (
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Float32,
    Int,
    Long,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
)
from aiosb.wire import json_values

#: Each integer type's least and greatest value.
EDGES = {
    UByte: (0, 2**8 - 1), UShort: (0, 2**16 - 1), UInt: (0, 2**32 - 1),
    ULong: (0, 2**64 - 1), Byte: (-(2**7), 2**7 - 1), Short: (-(2**15), 2**15 - 1),
    Int: (-(2**31), 2**31 - 1), Long: (-(2**63), 2**63 - 1),
}


@pytest.mark.parametrize("kind", list(EDGES), ids=lambda kind: kind.__name__)
def test_an_integer_type_holds_its_range_and_nothing_beyond(kind):
    low, high = EDGES[kind]
    assert (kind(low), kind(high)) == (low, high)
    for beyond in (low - 1, high + 1, 2**70):
        with pytest.raises(ValueError, match=f"an AMQP {kind.__name__.lower()} is from"):
            kind(beyond)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Char("ab"), "one code point, not 2"),
    (lambda: Char(""), "one code point, not 0"),
    (lambda: Float32(1e300), "at most"),
    (lambda: Float32(-3.5e38), "at most"),
    (lambda: Symbol("é"), "ASCII"),
    (lambda: Decimal32(b"\x00" * 5), "4 bytes"),
    (lambda: Decimal64(b"\x00" * 4), "8 bytes"),
    (lambda: Decimal128(b"\x00" * 8), "16 bytes"),
])
def test_a_value_its_type_cannot_hold_is_refused_when_made(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_what_each_type_can_hold_is_taken():
    """A float's infinities and NaN, and a value that rounds to its range, are floats;
    a char is any one code point."""
    assert [Float32(v) for v in ("inf", "-inf", 3.4e38, 1e-300)] == [
        float("inf"), float("-inf"), 3.4e38, 1e-300]
    assert Float32("nan") != Float32("nan")
    assert (Char("é"), Char("\U0001F600"), Symbol("x-opt-a")) == ("é", "\U0001F600",
                                                                  "x-opt-a")


def test_a_message_cannot_hold_a_value_its_type_cannot():
    """In process the value cannot be made; a property holds only what it can be."""
    with pytest.raises(ValueError):
        Message(b"", application_properties={"x": UByte(300)})
    message = Message(b"", application_properties={"x": UByte(255), "f": Float32(1.5)})
    assert encode(message.application_properties["x"]) == b"\x50\xff"


@pytest.mark.parametrize("raw", [
    {"float32": 1e300}, {"float32": 10**400}, {"ubyte": 256}, {"byte": -129},
    {"long": 2**63}, {"ulong": -1}, {"char": "ab"}, {"char": ""}, {"symbol": "é"},
    {"decimal32": "AAAAAAA="},
])
def test_json_refuses_a_tagged_value_its_type_cannot_hold(raw):
    with pytest.raises(errors.InvalidArgument, match="property 'x'"):
        json_values.decode_value("x", raw)


def test_json_takes_each_types_edges():
    for kind, (low, high) in EDGES.items():
        tag = json_values._TAGS[kind]
        assert json_values.decode_value("x", {tag: high}) == high
        assert type(json_values.decode_value("x", {tag: low})) is kind
    assert json_values.decode_value("x", {"float32": "inf"}) == float("inf")


@pytest.mark.parametrize("wire", [
    b"\x50\xff", b"\x51\x80", b"\x60\xff\xff", b"\x61\x80\x00", b"\x70\xff\xff\xff\xff",
    b"\x71\x80\x00\x00\x00", b"\x80" + b"\xff" * 8, b"\x81\x80" + b"\x00" * 7,
    b"\x72\x7f\x7f\xff\xff", b"\x72\xff\x80\x00\x00", b"\x72\x7f\xc0\x00\x00",
    b"\x73\x00\x10\xff\xff", b"\xa3\x01a",
])
def test_what_an_amqp_sender_sends_is_always_in_range(wire):
    """The decoder makes a typed value from its bytes (skipping the checks), which hold
    nothing beyond its type's range (a char beyond Unicode is not decoded at all): it
    passes its type's checks, and encodes."""
    value, _ = decode_typed(wire)
    again = type(value)(value)
    assert again == value or value != value  # NaN
    assert decode_typed(encode(value))[0] == value or value != value


async def test_an_http_send_of_a_value_its_type_cannot_hold_is_refused_whole():
    """A 400 that says which property, and nothing stored: before, the message was
    stored and ended each AMQP receiver's connection that it was delivered to."""
    async with serve() as server, aiohttp.ClientSession() as session:
        url = server.namespace_url("ns")
        token = SasCredential(DEV_KEY_NAME, DEV_KEY).token(url)
        async with aiosb.connect(url) as ns:
            await ns.create_queue("q")
            for properties in ({"x": {"float32": 1e300}}, {"x": {"ubyte": 300}},
                               {"x": {"char": "ab"}}):
                batch = {"body": "", "body_sizes": [0], "properties": [properties]}
                async with session.post(f"{url}/q/$aiosb/send",
                                        data=json.dumps({"batch": batch}).encode(),
                                        headers={"Authorization": token}) as response:
                    text = await response.text()
                assert response.status == 400 and "property 'x'" in text, (response.status,
                                                                          text)
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                assert await receiver.receive(max_wait=0) == []


def test_a_symbol_the_sdk_read_that_is_not_ascii_is_still_a_symbol():
    """aiosb's AMQP transport reads a symbol the SDK gave (bytes) as a Symbol; one that
    is not ASCII (a peer's error) is escaped, not refused: a receive does not fail on it."""
    from aiosb.transport.amqp._typed_values import AmqpSymbol, from_sdk

    got = from_sdk(AmqpSymbol("é".encode()))
    assert (type(got), got) == (Symbol, "\\xc3\\xa9")
