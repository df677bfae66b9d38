"""Decoding AMQP values (see :mod:`aiosb.server.amqp.codec` for the type map)."""

from __future__ import annotations

import datetime as _dt
import struct
import uuid
from collections.abc import Callable
from typing import Any

from ._types import (
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    DecodeError,
    Described,
    Float32,
    Long,
    Raw,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
)

__all__ = ["decode", "decode_all", "decode_typed", "elements"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
#: The plain types' constructors: a typed value the decoder makes is in range by its
#: width or its encoding, so it skips the typed value's checks (:mod:`aiosb.values`).
_new_int, _new_str = int.__new__, str.__new__
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_II = struct.Struct(">II")

Decoder = Callable[[bytes, int], tuple[Any, int]]


def _fixed(unpack: Callable[[bytes, int], tuple[Any, ...]], width: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + width
    return dec


def _constant(value: Any) -> Decoder:
    def dec(_buf: bytes, pos: int) -> tuple[Any, int]:
        return value, pos
    return dec


def _dec_empty_list(_buf: bytes, pos: int) -> tuple[Any, int]:
    return [], pos


def _dec_bool(buf: bytes, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _dec_byte1(buf: bytes, pos: int) -> tuple[Any, int]:
    return buf[pos], pos + 1


def _dec_char(buf: bytes, pos: int) -> tuple[Any, int]:
    return chr(_I.unpack_from(buf, pos)[0]), pos + 4


#: The range of a ``datetime``, in AMQP timestamp milliseconds.
_FIRST_MS = (_dt.datetime.min.replace(tzinfo=_dt.UTC) - _EPOCH) // _dt.timedelta(milliseconds=1)
_LAST_MS = (_dt.datetime.max.replace(tzinfo=_dt.UTC) - _EPOCH) // _dt.timedelta(milliseconds=1)


def _dec_timestamp(buf: bytes, pos: int) -> tuple[Any, int]:
    # A time beyond datetime's range is clamped to its end, as .NET clamps to
    # DateTime.MaxValue: the SDKs send .NET's MaxValue (253402300800000 ms, the first
    # instant of year 10000) to mean "no time" (get-message-sessions).
    ms = min(max(_q.unpack_from(buf, pos)[0], _FIRST_MS), _LAST_MS)
    return _EPOCH + _dt.timedelta(milliseconds=ms), pos + 8


def _dec_uuid(buf: bytes, pos: int) -> tuple[Any, int]:
    return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16


def _span(buf: bytes, start: int, size: int) -> int:
    end = start + size
    if end > len(buf):
        raise DecodeError(f"a value claims {size} bytes; only {len(buf) - start} remain.")
    return end


def _dec_vbin8(buf: bytes, pos: int) -> tuple[Any, int]:
    end = _span(buf, pos + 1, buf[pos])
    return bytes(buf[pos + 1:end]), end


def _dec_vbin32(buf: bytes, pos: int) -> tuple[Any, int]:
    end = _span(buf, pos + 4, _I.unpack_from(buf, pos)[0])
    return bytes(buf[pos + 4:end]), end


def _dec_str8(buf: bytes, pos: int) -> tuple[Any, int]:
    end = _span(buf, pos + 1, buf[pos])
    return str(buf[pos + 1:end], "utf-8"), end


def _dec_str32(buf: bytes, pos: int) -> tuple[Any, int]:
    end = _span(buf, pos + 4, _I.unpack_from(buf, pos)[0])
    return str(buf[pos + 4:end], "utf-8"), end


def _dec_sym8(buf: bytes, pos: int) -> tuple[Any, int]:
    end = _span(buf, pos + 1, buf[pos])
    return _new_str(Symbol, str(buf[pos + 1:end], "ascii")), end


def _dec_sym32(buf: bytes, pos: int) -> tuple[Any, int]:
    end = _span(buf, pos + 4, _I.unpack_from(buf, pos)[0])
    return _new_str(Symbol, str(buf[pos + 4:end], "ascii")), end


def _items(buf: bytes, pos: int, count: int, end: int,
           decoders: list[Decoder] | None = None) -> tuple[list[Any], int]:
    _span(buf, pos, end - pos)
    if count > end - pos:  # each item takes a byte at least (its constructor)
        raise DecodeError(f"a compound value of {end - pos} bytes says it holds {count} items.")
    items: list[Any] = []
    append = items.append
    if decoders is None:
        decoders = _DECODERS
    for _ in range(count):
        code = buf[pos]
        value, pos = decoders[code](buf, pos + 1)
        append(value)
    if pos != end:
        raise DecodeError(f"a compound value ends at byte {pos}, not at {end} as its size says.")
    return items, pos


def _pairs(items: list[Any]) -> dict[Any, Any]:
    if len(items) % 2:
        raise DecodeError("an AMQP map has an odd number of elements.")
    return dict(zip(items[::2], items[1::2], strict=True))


def _compounds(decoders: list[Decoder] | None
               ) -> tuple[Decoder, Decoder, Decoder, Decoder]:
    """The decoders of list8, list32, map8 and map32 that read their items with
    ``decoders`` (:data:`_DECODERS` when ``None``; :data:`_TYPED` for
    :func:`decode_typed`): one call each to :func:`_items` (#36: a call less per
    section)."""

    def list8(buf: bytes, pos: int) -> tuple[Any, int]:
        return _items(buf, pos + 2, buf[pos + 1], pos + 1 + buf[pos], decoders)

    def list32(buf: bytes, pos: int) -> tuple[Any, int]:
        size, count = _II.unpack_from(buf, pos)
        return _items(buf, pos + 8, count, pos + 4 + size, decoders)

    def map8(buf: bytes, pos: int) -> tuple[Any, int]:
        items, end = _items(buf, pos + 2, buf[pos + 1], pos + 1 + buf[pos], decoders)
        return _pairs(items), end

    def map32(buf: bytes, pos: int) -> tuple[Any, int]:
        size, count = _II.unpack_from(buf, pos)
        items, end = _items(buf, pos + 8, count, pos + 4 + size, decoders)
        return _pairs(items), end

    return list8, list32, map8, map32


#: Array element constructors that take no bytes of their own (null, true, false, 0):
#: such an array's count is not bounded by its size, so it is bounded here.
_EMPTY_ELEMENTS = frozenset((0x40, 0x41, 0x42, 0x43, 0x44, 0x45))
_MOST_EMPTY_ELEMENTS = 1 << 16


def _array(buf: bytes, pos: int, count: int, end: int) -> tuple[Any, int]:
    _span(buf, pos, end - pos)
    code = buf[pos]
    pos += 1
    descriptor = None
    if code == 0x00:
        descriptor, pos = decode(buf, pos)
        code = buf[pos]
        pos += 1
    decoder = _DECODERS[code]
    if count > (_MOST_EMPTY_ELEMENTS if code in _EMPTY_ELEMENTS else end - pos):
        raise DecodeError(f"an array of {end - pos} bytes says it holds {count} elements.")
    items: list[Any] = []
    for _ in range(count):
        value, pos = decoder(buf, pos)
        items.append(value if descriptor is None else Described(descriptor, value))
    if pos != end:
        raise DecodeError(f"an array ends at byte {pos}, not at {end} as its size says.")
    return items, pos


def _dec_array8(buf: bytes, pos: int) -> tuple[Any, int]:
    return _array(buf, pos + 2, buf[pos + 1], pos + 1 + buf[pos])


def _dec_array32(buf: bytes, pos: int) -> tuple[Any, int]:
    size, count = _II.unpack_from(buf, pos)
    return _array(buf, pos + 8, count, pos + 4 + size)


def _opaque(width: int) -> Decoder:
    """A fixed-width value kept as its encoding (decimals: :class:`Raw`)."""
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        end = _span(buf, pos, width)
        return Raw(buf[pos - 1:end]), end
    return dec


def elements(buf: bytes, pos: int = 0) -> tuple[list[Raw], int]:
    """The elements of the list or map encoded at ``buf[pos]``, each as its own encoding
    (:class:`Raw`, to be written back unchanged), and the position after it.

    Raises:
        DecodeError: Not a list or a map, or not valid AMQP.
    """
    code = buf[pos] if pos < len(buf) else -1
    if code == 0x45:
        return [], pos + 1
    try:
        if code in (0xC0, 0xC1):
            start, count, end = pos + 3, buf[pos + 2], pos + 2 + buf[pos + 1]
        elif code in (0xD0, 0xD1):
            size, count = _II.unpack_from(buf, pos + 1)
            start, end = pos + 9, pos + 5 + size
        else:
            raise DecodeError(f"expected a list or a map at byte {pos}.")
    except (IndexError, struct.error):
        raise DecodeError(f"a list or a map cut short at byte {pos}.") from None
    _span(buf, start, end - start)
    if count > end - start:
        raise DecodeError(f"a compound value of {end - start} bytes says it holds {count} items.")
    out: list[Raw] = []
    at = start
    for _ in range(count):
        _, after = decode(buf, at)
        out.append(Raw(buf[at:after]))
        at = after
    if at != end:
        raise DecodeError(f"a compound value ends at byte {at}, not at {end} as its size says.")
    return out, end


def _dec_described(buf: bytes, pos: int) -> tuple[Any, int]:
    descriptor, pos = _DECODERS[buf[pos]](buf, pos + 1)
    value, pos = _DECODERS[buf[pos]](buf, pos + 1)
    return Described(descriptor, value), pos


def _unknown(code: int) -> Decoder:
    def dec(_buf: bytes, pos: int) -> tuple[Any, int]:
        raise DecodeError(
            f"unknown or unsupported AMQP constructor 0x{code:02x} at byte {pos - 1}."
        )
    return dec


_DECODERS: list[Decoder] = [_unknown(code) for code in range(256)]
_DECODERS[0x00] = _dec_described
_DECODERS[0x40] = _constant(None)
_DECODERS[0x41] = _constant(True)
_DECODERS[0x42] = _constant(False)
_DECODERS[0x43] = _constant(0)
_DECODERS[0x44] = _constant(0)
_DECODERS[0x45] = _dec_empty_list
_DECODERS[0x50] = _dec_byte1
_DECODERS[0x51] = _fixed(_b.unpack_from, 1)
_DECODERS[0x52] = _dec_byte1
_DECODERS[0x53] = _dec_byte1
_DECODERS[0x54] = _fixed(_b.unpack_from, 1)
_DECODERS[0x55] = _fixed(_b.unpack_from, 1)
_DECODERS[0x56] = _dec_bool
_DECODERS[0x60] = _fixed(_H.unpack_from, 2)
_DECODERS[0x61] = _fixed(_h.unpack_from, 2)
_DECODERS[0x70] = _fixed(_I.unpack_from, 4)
_DECODERS[0x71] = _fixed(_i.unpack_from, 4)
_DECODERS[0x72] = _fixed(_f.unpack_from, 4)
_DECODERS[0x73] = _dec_char
_DECODERS[0x74] = _opaque(4)  # decimal32
_DECODERS[0x84] = _opaque(8)  # decimal64
_DECODERS[0x94] = _opaque(16)  # decimal128
_DECODERS[0x80] = _fixed(_Q.unpack_from, 8)
_DECODERS[0x81] = _fixed(_q.unpack_from, 8)
_DECODERS[0x82] = _fixed(_d.unpack_from, 8)
_DECODERS[0x83] = _dec_timestamp
_DECODERS[0x98] = _dec_uuid
_DECODERS[0xA0] = _dec_vbin8
_DECODERS[0xA1] = _dec_str8
_DECODERS[0xA3] = _dec_sym8
_DECODERS[0xB0] = _dec_vbin32
_DECODERS[0xB1] = _dec_str32
_DECODERS[0xB3] = _dec_sym32
_DECODERS[0xC0], _DECODERS[0xD0], _DECODERS[0xC1], _DECODERS[0xD1] = _compounds(None)
_DECODERS[0xE0] = _dec_array8
_DECODERS[0xF0] = _dec_array32


# -- typed values (application properties: #47) ---------------------------------------


# A decoded value is in its type's range by its width (a ubyte is one byte ...): it is
# made by the plain type's constructor, without the typed value's checks.
def _typed(kind: type, decoder: Decoder) -> Decoder:
    make: Callable[[type, Any], Any] = kind.__base__.__new__  # type: ignore[assignment]

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        value, pos = decoder(buf, pos)
        return make(kind, value), pos
    return dec


def _typed_long(decoder: Decoder) -> Decoder:
    """A long as :class:`Long` where a plain ``int`` would travel as an AMQP int."""
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        value, pos = decoder(buf, pos)
        return (_new_int(Long, value) if -2147483648 <= value <= 2147483647 else value), pos
    return dec


def _typed_decimal(kind: type, width: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        end = _span(buf, pos, width)
        return kind(buf[pos:end]), end
    return dec


#: The decoders of :func:`decode_typed`: a value of a type no plain Python type stands
#: for (see :mod:`aiosb.values`) as its typed value; an int, a long beyond 32 bits, a
#: double, a string, a binary ... as the plain value, as :func:`decode` gives it (#36:
#: the properties the SDKs send most cost nothing more).
_TYPED: list[Decoder] = list(_DECODERS)
for _code, _kind in ((0x50, UByte), (0x51, Byte), (0x52, UInt), (0x43, UInt), (0x70, UInt),
                     (0x53, ULong), (0x44, ULong), (0x80, ULong), (0x60, UShort),
                     (0x61, Short), (0x72, Float32), (0x73, Char)):
    _TYPED[_code] = _typed(_kind, _DECODERS[_code])
_TYPED[0x55] = _typed_long(_DECODERS[0x55])
_TYPED[0x81] = _typed_long(_DECODERS[0x81])
_TYPED[0x74] = _typed_decimal(Decimal32, 4)
_TYPED[0x84] = _typed_decimal(Decimal64, 8)
_TYPED[0x94] = _typed_decimal(Decimal128, 16)
_TYPED[0xC0], _TYPED[0xD0], _TYPED[0xC1], _TYPED[0xD1] = _compounds(_TYPED)


def decode_typed(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """:func:`decode`, with each value of a type no plain Python type stands for as its
    typed value (:mod:`aiosb.values`: a long that fits 32 bits as ``Long``, a symbol as
    ``Symbol``, a ubyte as ``UByte`` ...), so that it is encoded back as it came:
    application properties (#47).

    Raises:
        DecodeError: Not valid AMQP, or a type this codec does not support.
    """
    try:
        return _TYPED[buf[pos]](buf, pos + 1)
    except DecodeError:
        raise
    except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError,
            TypeError) as exc:
        raise DecodeError(f"malformed AMQP value at byte {pos}: {exc}") from None
    except RecursionError:
        raise DecodeError(f"an AMQP value nested too deep at byte {pos}.") from None


def decode(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """The value encoded at ``buf[pos]`` and the position after it.

    Raises:
        DecodeError: Not valid AMQP, or a type this codec does not support.
    """
    try:
        return _DECODERS[buf[pos]](buf, pos + 1)
    except DecodeError:
        raise
    except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError,
            TypeError) as exc:  # TypeError: a map key that cannot be one (a list)
        raise DecodeError(f"malformed AMQP value at byte {pos}: {exc}") from None
    except RecursionError:
        raise DecodeError(f"an AMQP value nested too deep at byte {pos}.") from None


def decode_all(buf: bytes) -> list[Any]:
    """Every value encoded one after another in ``buf``."""
    values = []
    pos = 0
    while pos < len(buf):
        value, pos = decode(buf, pos)
        values.append(value)
    return values
