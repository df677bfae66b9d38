"""The typed-property round trip's table (#47): one application property of each AMQP
type, the bytes each is sent as, in compact and in wide encodings, the bytes each comes
back as, a message carrying them, and how to read the application properties of a
received message value by value.

aiosb keeps each value's AMQP type, not its sender's encoding: a type with two
encodings (a long in one byte, 0x55, or in eight, 0x81) comes back in the compact one
that fits the value, which every AMQP decoder reads as the same type and value."""

from __future__ import annotations

import datetime as _dt
import uuid
from typing import Any

from aiosb.server.amqp.codec import (
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
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
    decode_typed,
    elements,
    encode,
)

WHEN = _dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=_dt.UTC)
#: One application property of each AMQP type (by its name), as aiosb's codec writes it.
TYPED: dict[str, Any] = {
    "byte": Byte(-3),
    "short": Short(-300),
    "int": Int(7),
    "int-wide": Int(70_000),
    "long": Long(1),  # the case: came back as an int
    "long-wide": 2**40,
    "ubyte": UByte(200),
    "ushort": UShort(60_000),
    "uint": UInt(4_000_000_000),
    "ulong": ULong(2**63),
    "float": Float32(1.5),
    "double": 2.25,
    "decimal32": Decimal32(bytes.fromhex("3280000f")),  # 15
    "decimal64": Decimal64(bytes.fromhex("31c0000000000001")),  # 1
    "decimal128": Decimal128(bytes.fromhex("303e000000000000000000000000000f")),  # 1.5
    "char": Char("é"),
    "timestamp": WHEN,
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "binary": b"\x00\xff",
    "string": "text",
    "symbol": Symbol("sym"),
    "boolean": True,
    "null": None,
}
#: Values sent in an encoding wider than the compact one aiosb's codec writes: the bytes
#: sent, and the bytes each comes back as (its type's compact encoding).
WIDE: dict[str, tuple[bytes, bytes]] = {
    "long-8": (b"\x81" + (1).to_bytes(8, "big"), b"\x55\x01"),
    "int-4": (b"\x71" + (7).to_bytes(4, "big"), b"\x54\x07"),
    "uint-4": (b"\x70" + (5).to_bytes(4, "big"), b"\x52\x05"),
    "uint-0": (b"\x70" + bytes(4), b"\x43"),
    "ulong-8": (b"\x80" + (5).to_bytes(8, "big"), b"\x53\x05"),
    "boolean-1": (b"\x56\x01", b"\x41"),
    "string-32": (b"\xb1" + (4).to_bytes(4, "big") + b"text", b"\xa1\x04text"),
    "symbol-32": (b"\xb3" + (3).to_bytes(4, "big") + b"sym", b"\xa3\x03sym"),
    "binary-32": (b"\xb0" + (2).to_bytes(4, "big") + b"\x00\xff", b"\xa0\x02\x00\xff"),
}
#: The bytes each value is sent as (its constructor first).
SENT = {name: encode(value) for name, value in TYPED.items()} | {
    name: sent for name, (sent, _) in WIDE.items()}
#: The bytes each value comes back as: its type, in the compact encoding.
WIRE = {name: encode(value) for name, value in TYPED.items()} | {
    name: back for name, (_, back) in WIDE.items()}
APP = encode(Described(ULong(0x74), {name: Raw(sent) for name, sent in SENT.items()}))
#: The same values as message annotations (symbol keys), which travel in amqp_extra.
NOTES = encode(Described(ULong(0x72), {Symbol(name): Raw(sent) for name, sent in SENT.items()}))
PAYLOAD = encode(Described(ULong(0x73), ["typed-1"])) + NOTES + APP + encode(
    Described(ULong(0x75), b"body"))


def _entries(payload: bytes, code: int) -> dict[str, bytes]:
    """The map of section ``code`` of an encoded message: each value's bytes by key."""
    pos = 0
    while pos < len(payload):
        if payload.startswith(bytes((0x00, 0x53, code)), pos):
            items, _ = elements(payload, pos + 3)
            return {decode(k)[0]: bytes(v) for k, v in zip(items[::2], items[1::2],
                                                            strict=True)}
        _, pos = decode(payload, pos)
    return {}


def properties_of(payload: bytes) -> dict[str, bytes]:
    """The application properties of an encoded message: each value's bytes by name."""
    return _entries(payload, 0x74)


def annotations_of(payload: bytes) -> dict[str, bytes]:
    """The message annotations of an encoded message but the broker's (``x-opt-``):
    each value's bytes by key."""
    return {k: v for k, v in _entries(payload, 0x72).items() if not k.startswith("x-opt-")}


#: What aiosb reads each as (a plain value where its type is the plain type's: an int
#: that is an AMQP int is an ``int``).
READ = {name: decode_typed(sent)[0] for name, sent in SENT.items()}
