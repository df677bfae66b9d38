"""The AMQP 1.0 type system (OASIS AMQP 1.0 part 1): values to bytes and back, and frames.

Python values map to AMQP types as follows; where one Python type covers several AMQP
types, a marker subclass (:class:`UInt`, :class:`Symbol`, ...) picks the one to encode.

========================  ===========================================================
encoded from              AMQP type (decoded back as)
========================  ===========================================================
``None``                  null
``bool``                  boolean
``UByte`` ``UShort``      ubyte, ushort, uint, ulong (decoded as ``int``)
``UInt`` ``ULong``
``Byte`` ``Short``        byte, short, int (decoded as ``int``)
``Int``
``int`` / ``Long``        long (decoded as ``int``)
``Float32`` / ``float``   float / double (decoded as ``float``)
``Char``                  char (decoded as ``str``)
``Decimal32`` ...         decimal32, decimal64, decimal128 (decoded as :class:`Raw`)
``datetime``              timestamp, milliseconds (decoded as an aware UTC ``datetime``)
``uuid.UUID``             uuid
``bytes``                 binary
``str`` / ``Symbol``      string / symbol (decoded as ``str`` / ``Symbol``)
``list`` / ``tuple``      list (decoded as ``list``)
``dict``                  map
``Array(kind, items)``    array of one type (decoded as ``list``)
``Described(d, v)``       a described value (decoded as :class:`Described`)
========================  ===========================================================

Decimals are decoded as :class:`Raw` (their encoding, written back unchanged): this codec
does not interpret them, but a message carrying one is kept bit for bit.
:func:`decode_typed` reads application properties: every value of a type no plain
Python type stands for comes as its typed value (:mod:`aiosb.values`, #47). :class:`Raw` is
also how a value a peer sent is written back as it came (:func:`elements` splits a list
or a map into its elements' encodings). Modelled on the MIT-licensed ``_pyamqp`` codec
of azure-servicebus, written anew: the server never imports the SDK.
"""

from __future__ import annotations

import datetime as _dt
import struct
import uuid
from collections.abc import Callable
from typing import Any

from ._decoding import decode, decode_all, decode_typed, elements
from ._types import (
    AMQP_HEADER,
    SASL_HEADER,
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
)

__all__ = [
    "AMQP_HEADER",
    "SASL_HEADER",
    "Array",
    "Byte",
    "Char",
    "DecodeError",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Described",
    "Float32",
    "Int",
    "Long",
    "Raw",
    "Short",
    "Symbol",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode",
    "decode_all",
    "decode_typed",
    "elements",
    "encode",
    "encode_into",
    "frame",
    "put_compound",
    "put_long",
    "put_uint",
    "put_variable",
]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MS = _dt.timedelta(milliseconds=1)

_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BB = struct.Struct(">BB")
_II = struct.Struct(">II")
_FRAME = struct.Struct(">IBBH")

Encoder = Callable[[bytearray, Any], None]


# -- encoding -------------------------------------------------------------------------


def _enc_null(out: bytearray, _value: Any) -> None:
    out.append(0x40)


def _enc_bool(out: bytearray, value: Any) -> None:
    out.append(0x41 if value else 0x42)


def _enc_ubyte(out: bytearray, value: Any) -> None:
    out += b"\x50" + _B.pack(value)


def _enc_ushort(out: bytearray, value: Any) -> None:
    out += b"\x60" + _H.pack(value)


def _enc_uint(out: bytearray, value: Any) -> None:
    if value == 0:
        out.append(0x43)
    elif value < 256:
        out += b"\x52" + _B.pack(value)
    else:
        out += b"\x70" + _I.pack(value)


def _enc_ulong(out: bytearray, value: Any) -> None:
    if value == 0:
        out.append(0x44)
    elif value < 256:
        out += b"\x53" + _B.pack(value)
    else:
        out += b"\x80" + _Q.pack(value)


def _enc_byte(out: bytearray, value: Any) -> None:
    out += b"\x51" + _b.pack(value)


def _enc_short(out: bytearray, value: Any) -> None:
    out += b"\x61" + _h.pack(value)


def _enc_int(out: bytearray, value: Any) -> None:
    if -128 <= value <= 127:
        out += b"\x54" + _b.pack(value)
    else:
        out += b"\x71" + _i.pack(value)


def _enc_long(out: bytearray, value: Any) -> None:
    if -128 <= value <= 127:
        out += b"\x55" + _b.pack(value)
    else:
        out += b"\x81" + _q.pack(value)


def _decimal(code: int) -> Encoder:
    def enc(out: bytearray, value: Any) -> None:
        out.append(code)
        out += value
    return enc


def _enc_float(out: bytearray, value: Any) -> None:
    out += b"\x72" + _f.pack(value)


def _enc_double(out: bytearray, value: Any) -> None:
    out += b"\x82" + _d.pack(value)


def _enc_char(out: bytearray, value: Any) -> None:
    out += b"\x73" + _I.pack(ord(value))


def _millis(value: _dt.datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"an AMQP timestamp needs a timezone-aware datetime, not {value!r}.")
    return (value - _EPOCH) // _MS


def _enc_timestamp(out: bytearray, value: Any) -> None:
    out += b"\x83" + _q.pack(_millis(value))


def _enc_uuid(out: bytearray, value: Any) -> None:
    out += b"\x98" + value.bytes


def _variable(out: bytearray, small: int, large: int, data: bytes) -> None:
    size = len(data)
    if size < 256:
        out += _BB.pack(small, size)
    else:
        out.append(large)
        out += _I.pack(size)
    out += data


def _enc_binary(out: bytearray, value: Any) -> None:
    _variable(out, 0xA0, 0xB0, bytes(value))


def _enc_string(out: bytearray, value: Any) -> None:
    _variable(out, 0xA1, 0xB1, value.encode())


def _enc_symbol(out: bytearray, value: Any) -> None:
    _variable(out, 0xA3, 0xB3, value.encode("ascii"))


def _compound(out: bytearray, small: int, large: int, count: int,
              body: bytes | bytearray) -> None:
    size = len(body)
    if size < 255 and count < 256:
        out += _BB.pack(small, size + 1)
        out.append(count)
    else:
        out.append(large)
        out += _II.pack(size + 4, count)
    out += body


def _enc_list(out: bytearray, value: Any) -> None:
    if not value:
        out.append(0x45)
        return
    body = bytearray()
    for item in value:
        _ENCODERS.get(type(item), _enc_other)(body, item)
    _compound(out, 0xC0, 0xD0, len(value), body)


def _enc_map(out: bytearray, value: Any) -> None:
    body = bytearray()
    for key, item in value.items():
        _ENCODERS.get(type(key), _enc_other)(body, key)
        _ENCODERS.get(type(item), _enc_other)(body, item)
    _compound(out, 0xC1, 0xD1, 2 * len(value), body)


def _enc_raw(out: bytearray, value: Any) -> None:
    out += value


def _enc_described(out: bytearray, value: Any) -> None:
    out.append(0x00)
    descriptor, inner = value
    _ENCODERS.get(type(descriptor), _enc_other)(out, descriptor)
    _ENCODERS.get(type(inner), _enc_other)(out, inner)


#: An array element's constructor and its encoding without one (fixed widths).
_ELEMENTS: dict[type, tuple[int, Callable[[Any], bytes]]] = {
    bool: (0x56, lambda v: b"\x01" if v else b"\x00"),
    UByte: (0x50, _B.pack),
    UShort: (0x60, _H.pack),
    UInt: (0x70, _I.pack),
    ULong: (0x80, _Q.pack),
    Byte: (0x51, _b.pack),
    Short: (0x61, _h.pack),
    Int: (0x71, _i.pack),
    int: (0x81, _q.pack),
    Long: (0x81, _q.pack),
    Float32: (0x72, _f.pack),
    float: (0x82, _d.pack),
    Char: (0x73, lambda v: _I.pack(ord(v))),
    _dt.datetime: (0x83, lambda v: _q.pack(_millis(v))),
    uuid.UUID: (0x98, lambda v: bytes(v.bytes)),
    bytes: (0xB0, lambda v: _I.pack(len(v)) + v),
    str: (0xB1, lambda v: _I.pack(len(v.encode())) + v.encode()),
    Symbol: (0xB3, lambda v: _I.pack(len(v)) + v.encode("ascii")),
}


def _enc_array(out: bytearray, value: Any) -> None:
    try:
        constructor, element = _ELEMENTS[value.kind]
    except KeyError:
        raise TypeError(f"an AMQP array of {value.kind.__name__} is not supported.") from None
    body = bytearray([constructor])
    for item in value.items:
        body += element(item)
    _compound(out, 0xE0, 0xF0, len(value.items), body)


def _enc_other(out: bytearray, value: Any) -> None:
    for kind, encoder in _SUBCLASSES:
        if isinstance(value, kind):
            encoder(out, value)
            return
    raise TypeError(f"cannot encode {type(value).__name__} as AMQP: {value!r:.60}")


_ENCODERS: dict[type, Encoder] = {
    type(None): _enc_null,
    bool: _enc_bool,
    UByte: _enc_ubyte,
    UShort: _enc_ushort,
    UInt: _enc_uint,
    ULong: _enc_ulong,
    Byte: _enc_byte,
    Short: _enc_short,
    Int: _enc_int,
    int: _enc_long,
    Long: _enc_long,
    Float32: _enc_float,
    float: _enc_double,
    Char: _enc_char,
    Decimal32: _decimal(0x74),
    Decimal64: _decimal(0x84),
    Decimal128: _decimal(0x94),
    _dt.datetime: _enc_timestamp,
    uuid.UUID: _enc_uuid,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    str: _enc_string,
    Symbol: _enc_symbol,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    Described: _enc_described,
    Array: _enc_array,
    Raw: _enc_raw,
}
_SUBCLASSES: tuple[tuple[type, Encoder], ...] = (
    (bool, _enc_bool), (int, _enc_long), (float, _enc_double), (str, _enc_string),
    (bytes, _enc_binary), (dict, _enc_map), (list, _enc_list), (uuid.UUID, _enc_uuid),
)


# The pieces the byte-by-byte writers of the hot paths use (a delivery, a transfer),
# so that they write exactly what the general encoder writes.
#: Append a uint, in its shortest form.
put_uint = _enc_uint
#: Append a long, in its shortest form.
put_long = _enc_long


#: Append ``data`` with the one-byte (``small``) or four-byte (``large``) length
#: constructor: binary ``0xA0``/``0xB0``, string ``0xA1``/``0xB1``, symbol ``0xA3``/``0xB3``.
put_variable = _variable
#: Append a list (``0xC0``/``0xD0``) or map (``0xC1``/``0xD1``) of ``count`` encoded
#: items, ``body``.
put_compound = _compound


def encode_into(out: bytearray, value: Any) -> None:
    """Append the AMQP encoding of ``value`` to ``out``."""
    _ENCODERS.get(type(value), _enc_other)(out, value)


def encode(value: Any) -> bytes:
    """The AMQP encoding of ``value``."""
    out = bytearray()
    _ENCODERS.get(type(value), _enc_other)(out, value)
    return bytes(out)


def frame(channel: int, body: Any, payload: bytes = b"", kind: int = 0) -> bytes:
    """One frame: the 8-byte header (size, data offset 2, ``kind`` 0 for AMQP or 1 for
    SASL, ``channel``), the encoded ``body`` (a performative, ``None`` for an empty
    heartbeat frame) and ``payload`` (a transfer's message bytes)."""
    out = bytearray(8)
    if body is not None:
        _ENCODERS.get(type(body), _enc_other)(out, body)
    out += payload
    _FRAME.pack_into(out, 0, len(out), 2, kind, channel)
    return bytes(out)
