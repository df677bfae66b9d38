"""The AMQP codec, type by type: each value's wire bytes (from the spec's encodings),
and the value they decode back to; frames and performatives; malformed input refused."""

from __future__ import annotations

import datetime as _dt
import uuid

import pytest

from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    DecodeError,
    Described,
    Float32,
    Int,
    Long,
    Raw,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    decode,
    decode_all,
    decode_typed,
    elements,
    encode,
    frame,
)

WHEN = _dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=_dt.UTC)
MS = 1704164645678
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
LONG_TEXT = "x" * 300

#: (value to encode, its wire bytes, the value decoded back)
TABLE = [
    (None, b"\x40", None),
    (True, b"\x41", True),
    (False, b"\x42", False),
    (UByte(200), b"\x50\xc8", 200),
    (UShort(65535), b"\x60\xff\xff", 65535),
    (UInt(0), b"\x43", 0),
    (UInt(7), b"\x52\x07", 7),
    (UInt(2**32 - 1), b"\x70\xff\xff\xff\xff", 2**32 - 1),
    (ULong(0), b"\x44", 0),
    (ULong(9), b"\x53\x09", 9),
    (ULong(2**64 - 1), b"\x80" + b"\xff" * 8, 2**64 - 1),
    (Byte(-2), b"\x51\xfe", -2),
    (Short(-300), b"\x61\xfe\xd4", -300),
    (Int(-5), b"\x54\xfb", -5),
    (Int(2**31 - 1), b"\x71\x7f\xff\xff\xff", 2**31 - 1),
    (-7, b"\x55\xf9", -7),
    (Long(-7), b"\x55\xf9", -7),
    (2**40, b"\x81\x00\x00\x01\x00\x00\x00\x00\x00", 2**40),
    (Float32(1.5), b"\x72\x3f\xc0\x00\x00", 1.5),
    (2.25, b"\x82\x40\x02\x00\x00\x00\x00\x00\x00", 2.25),
    (Char("é"), b"\x73\x00\x00\x00\xe9", "é"),
    # A decimal is kept as its encoding; a Raw value is written as it is.
    (Raw(b"\x84" + bytes(range(8))), b"\x84" + bytes(range(8)), Raw(b"\x84" + bytes(range(8)))),
    (Decimal32(bytes.fromhex("3280000f")), bytes.fromhex("743280000f"),
     Raw(bytes.fromhex("743280000f"))),
    (Decimal64(bytes(range(8))), b"\x84" + bytes(range(8)), Raw(b"\x84" + bytes(range(8)))),
    (Decimal128(bytes(range(16))), b"\x94" + bytes(range(16)),
     Raw(b"\x94" + bytes(range(16)))),
    (WHEN, b"\x83" + MS.to_bytes(8, "big"), WHEN),
    (ID, b"\x98" + ID.bytes, ID),
    (b"ab", b"\xa0\x02ab", b"ab"),
    (b"z" * 300, b"\xb0\x00\x00\x01\x2c" + b"z" * 300, b"z" * 300),
    ("hé", b"\xa1\x03h\xc3\xa9", "hé"),
    (LONG_TEXT, b"\xb1\x00\x00\x01\x2c" + LONG_TEXT.encode(), LONG_TEXT),
    (Symbol("amqp:x"), b"\xa3\x06amqp:x", Symbol("amqp:x")),
    (Symbol(LONG_TEXT), b"\xb3\x00\x00\x01\x2c" + LONG_TEXT.encode(), Symbol(LONG_TEXT)),
    ([], b"\x45", []),
    ([True, None], b"\xc0\x03\x02\x41\x40", [True, None]),
    ([b"z" * 300], b"\xd0\x00\x00\x01\x35\x00\x00\x00\x01\xb0\x00\x00\x01\x2c" + b"z" * 300,
     [b"z" * 300]),
    ({"a": 1}, b"\xc1\x06\x02\xa1\x01a\x55\x01", {"a": 1}),
    (Array(Symbol, [Symbol("a"), Symbol("bc")]),
     b"\xe0\x0d\x02\xb3\x00\x00\x00\x01a\x00\x00\x00\x02bc", ["a", "bc"]),
    (Array(UInt, []), b"\xe0\x02\x00\x70", []),
    (Described(ULong(0x24), []), b"\x00\x53\x24\x45", Described(0x24, [])),
    (Described(Symbol("com.microsoft:timespan"), 10),
     b"\x00\xa3\x16com.microsoft:timespan\x55\x0a",
     Described("com.microsoft:timespan", 10)),
]


@pytest.mark.parametrize(("value", "wire", "back"), TABLE, ids=[repr(r[0])[:30] for r in TABLE])
def test_each_type_encodes_to_its_wire_bytes_and_back(value, wire, back):
    assert encode(value) == wire
    decoded, end = decode(wire)
    assert end == len(wire)
    assert decoded == back
    assert type(decoded) is type(back)


#: (wire bytes, what decode_typed gives): #47, each value of a type no plain Python type
#: stands for as its typed value, to be encoded back as it came.
TYPED = [
    (b"\x50\xc8", UByte(200)), (b"\x51\xfe", Byte(-2)), (b"\x60\xff\xff", UShort(65535)),
    (b"\x61\xfe\xd4", Short(-300)), (b"\x43", UInt(0)), (b"\x52\x07", UInt(7)),
    (b"\x70\x00\x00\x00\x05", UInt(5)), (b"\x44", ULong(0)), (b"\x53\x09", ULong(9)),
    (b"\x80" + b"\xff" * 8, ULong(2**64 - 1)), (b"\x54\xfb", -5),
    (b"\x71\x7f\xff\xff\xff", 2**31 - 1), (b"\x55\xf9", Long(-7)),
    (b"\x81" + (2**31 - 1).to_bytes(8, "big"), Long(2**31 - 1)),
    (b"\x81\x00\x00\x01\x00\x00\x00\x00\x00", 2**40),
    (b"\x72\x3f\xc0\x00\x00", Float32(1.5)), (b"\x82\x40\x02" + bytes(6), 2.25),
    (b"\x73\x00\x00\x00\xe9", Char("é")),
    (bytes.fromhex("743280000f"), Decimal32(bytes.fromhex("3280000f"))),
    (b"\x84" + bytes(range(8)), Decimal64(bytes(range(8)))),
    (b"\x94" + bytes(range(16)), Decimal128(bytes(range(16)))),
    (b"\xa3\x01s", Symbol("s")), (b"\xa1\x01s", "s"), (b"\xa0\x01s", b"s"),
    (b"\x83" + MS.to_bytes(8, "big"), WHEN), (b"\x98" + ID.bytes, ID), (b"\x41", True),
]


@pytest.mark.parametrize(("wire", "back"), TYPED, ids=[r[0].hex()[:12] for r in TYPED])
def test_typed_decoding_gives_each_amqp_type_its_own_value(wire, back):
    """#47: application properties are read so, alone and inside a map."""
    decoded, end = decode_typed(wire)
    assert (decoded, type(decoded), end) == (back, type(back), len(wire))
    # Written back (a plain int as a delivery writes it: an int when it fits 32 bits) in
    # the shortest form, which is what was sent but for the uint 0x70.
    plain_int = type(decoded) is int and -(2**31) <= decoded < 2**31
    assert encode(Int(decoded) if plain_int else decoded) == wire or wire[0] == 0x70
    (key, value), = decode_typed(encode({"k": Raw(wire)}))[0].items()
    assert (key, value, type(value)) == ("k", back, type(back))


def test_a_decimal_reads_as_its_value():
    assert str(Decimal32(bytes.fromhex("3280000f"))) == "15"
    assert str(Decimal64(bytes.fromhex("31c0000000000001"))) == "1"
    assert str(Decimal128(bytes.fromhex("303e000000000000000000000000000f"))) == "1.5"
    assert str(Decimal128(bytes.fromhex("7c" + "00" * 15))) == "NaN"
    with pytest.raises(ValueError, match="16 bytes"):
        Decimal128(b"\x00")


def test_every_encoding_constructor_is_in_the_table():
    """A type the codec gains must gain a row."""
    from aiosb.server.amqp.codec import _ENCODERS

    covered = {type(row[0]) for row in TABLE}
    assert set(_ENCODERS) - covered <= {bytearray, memoryview, tuple}
    assert encode(bytearray(b"ab")) == encode(memoryview(b"ab")) == b"\xa0\x02ab"
    assert encode((1,)) == encode([1])


def test_decoders_take_the_long_forms_others_send():
    """The forms a peer may choose that our encoder does not (str32 of short text ...)."""
    assert decode(b"\xb1\x00\x00\x00\x01a")[0] == "a"
    assert decode(b"\x70\x00\x00\x00\x05")[0] == 5
    assert decode(b"\xd1\x00\x00\x00\x08\x00\x00\x00\x02\xa3\x01k\x40")[0] == {"k": None}
    assert decode(b"\x56\x01")[0] is True
    assert decode(b"\xf0\x00\x00\x00\x07\x00\x00\x00\x02\x52\x01\x02")[0] == [1, 2]


@pytest.mark.parametrize("wire", [
    b"\xa1\x05ab",                    # shorter than it says
    b"\xc0\x05\x02\x41",              # a list cut short
    b"\xc1\x03\x01\x41\x41",          # a map with an odd count
    b"\x94" + b"\x00" * 15,           # decimal128 cut short
    b"\xff",                          # no such constructor
    b"\xa1\x02\xff\xfe",              # not UTF-8
    b"",                              # nothing
])
def test_malformed_input_is_a_decode_error(wire):
    with pytest.raises(DecodeError):
        decode(wire)


def test_a_frame_round_trips_with_its_payload():
    body = p.performative(p.TRANSFER, UInt(1), UInt(2), b"tag", UInt(p.BATCH_FORMAT), True)
    payload = encode(Described(ULong(0x75), b"data"))
    wire = frame(3, body, payload)
    assert int.from_bytes(wire[:4], "big") == len(wire)
    assert wire[4:8] == b"\x02\x00\x00\x03"
    code, fields, end = p.parse(wire[8:])
    assert code == p.TRANSFER
    assert fields[:5] == [1, 2, b"tag", p.BATCH_FORMAT, True]
    assert fields[5:] == [None] * 6  # padded to the transfer's 11 fields
    assert decode_all(wire[8 + end:]) == [Described(0x75, b"data")]
    assert frame(0, None) == b"\x00\x00\x00\x08\x02\x00\x00\x00"  # a heartbeat
    assert frame(0, p.performative(p.SASL_OUTCOME, UByte(0)), kind=1)[5] == 1


def test_a_performative_carries_every_field_and_errors_keep_three_fields():
    """#47: the fields not given go on the wire as nulls (pyamqp before azure-servicebus
    7.15 indexes them); a peer's short performative still parses."""
    assert encode(p.performative(p.END)) == b"\x00\x53\x17\xc0\x02\x01\x40"
    assert encode(p.performative(p.ACCEPTED)) == b"\x00\x53\x24\x45"  # it has none
    assert p.parse(b"\x00\x53\x17\x45") == (p.END, [None], 4)
    error = decode(encode(p.amqp_error("amqp:not-found", "gone")))[0]
    assert error == Described(p.ERROR, ["amqp:not-found", "gone", None])
    with pytest.raises(DecodeError):
        p.parse(encode(Described(ULong(0x99), [])))


def test_elements_split_a_list_or_map_into_the_encodings_of_its_items():
    wire = encode([UByte(1), "a", {Symbol("k"): None}])
    items, end = elements(wire)
    assert end == len(wire)
    assert items == [b"\x50\x01", b"\xa1\x01a", b"\xc1\x05\x02\xa3\x01k\x40"]
    assert encode(items) == wire  # written back, as they came
    assert elements(b"\x45") == ([], 1)
    with pytest.raises(DecodeError):
        elements(b"\x55\x01")  # not a list
    with pytest.raises(DecodeError):
        elements(b"\xc0\x05\x02\x41")  # cut short
