"""AMQP's typed values through the official SDK (#47): what aiosb's AMQP transport does so
that an application property (or an annotation) keeps its AMQP type both ways.

The SDK's codec knows fewer types than AMQP has: its decoder gives ints, longs and the
unsigned types all as ``int``, strings, symbols and binaries all as ``bytes``, a
timestamp as ``int`` milliseconds, and fails on a char, a decimal32 or a decimal64; its
encoder picks a type from the Python type (an ``int`` as a 32-bit int). So, once per
process (:func:`prepare`):

- the SDK's decoder reads the values of a map (application properties, annotations)
  typed: each as aiosb's typed value (:mod:`aiosb.values`: ``Long``, ``UByte`` ...;
  ``Char`` and the decimals, which it gains) where no plain Python type names its AMQP
  type, a binary as :class:`AmqpBinary` (everywhere, not only in maps), a symbol as
  :class:`AmqpSymbol`, a timestamp as :class:`AmqpTimestamp` (``bytes`` and ``int``
  subclasses: the SDK's own code, which compares and reads them, sees what it saw);
- its encoder gains an entry for bytes aiosb encoded itself (a char, a decimal, a
  boolean in its one-byte form, as aiosb's codec writes it), and every other typed value
  is handed to it with its AMQP type named (:func:`to_sdk`).

The SDK's lists and performatives are decoded as before.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import struct
from collections.abc import Callable
from typing import Any

from ...values import (
    TYPE_NAMES,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Float32,
    Long,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
)

__all__ = ["AmqpBinary", "AmqpSymbol", "AmqpTimestamp", "from_sdk", "prepare", "to_sdk"]


class AmqpBinary(bytes):
    """A value that was AMQP ``binary`` on the wire (the SDK gives strings as ``bytes`` too)."""

    __slots__ = ()


class AmqpSymbol(bytes):
    """A value that was an AMQP ``symbol`` on the wire (as ``bytes``, as the SDK reads it)."""

    __slots__ = ()


class AmqpTimestamp(int):
    """A value that was an AMQP ``timestamp``: milliseconds since the epoch, as the SDK
    reads it."""

    __slots__ = ()


#: The SDK encoder's entry for a value aiosb encoded itself (constructor and bytes).
_RAW = "AIOSB_RAW"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_U32 = struct.Struct(">I")
_INT32 = range(-(2**31), 2**31)
#: The SDK encoder's type name of each typed value it encodes itself: the numbers (its
#: names are AMQP's, as :data:`~aiosb.values.TYPE_NAMES` gives them).
_SDK_TYPES: dict[type, str] = {
    kind: name for kind, name in TYPE_NAMES.items() if issubclass(kind, (int, float))
}
_DECIMALS: dict[type, int] = {Decimal32: 0x74, Decimal64: 0x84, Decimal128: 0x94}
_prepared = False


def prepare() -> None:
    """Teach the SDK's codec the typed values (see the module's doc); once per process.
    An SDK without these tables is left as it is (its values then lose their types)."""
    global _prepared
    if _prepared:  # called for every message the transport converts
        return
    _prepared = True
    try:
        from azure.servicebus._pyamqp import _decode, _encode
    except ImportError:  # pragma: no cover - a future SDK without pyamqp
        return
    table = getattr(_decode, "_DECODE_BY_CONSTRUCTOR", None)
    encoders = getattr(_encode, "_ENCODE_MAP", None)
    if not isinstance(table, list) or len(table) < 0xF1 or not isinstance(encoders, dict):
        return  # pragma: no cover
    encoders.setdefault(_RAW, _put_raw)
    if getattr(table[0xC1], "_aiosb_typed", False):
        return
    for code in (0xA0, 0xB0):
        table[code] = _marking(AmqpBinary, table[code])
    for code, decimal in ((0x74, Decimal32), (0x84, Decimal64), (0x94, Decimal128)):
        table[code] = _decimal(decimal)
    table[0x73] = _char
    typed = list(table)
    for codes, kind in (((0x50,), UByte), ((0x51,), Byte), ((0x60,), UShort),
                        ((0x61,), Short), ((0x43, 0x52, 0x70), UInt),
                        ((0x44, 0x53, 0x80), ULong), ((0x72,), Float32),
                        ((0xA3, 0xB3), AmqpSymbol), ((0x83,), AmqpTimestamp)):
        for code in codes:
            typed[code] = _marking(kind, table[code])
    typed[0x55] = _long(table[0x55])
    typed[0x81] = _long(table[0x81])
    limit = getattr(_decode, "_MAX_NESTING_DEPTH", 64)
    most = getattr(_decode, "_MAX_COMPOUND_COUNT", 65536)
    deep = _takes_depth(table[0x40])
    for code, large in ((0xC1, False), (0xD1, True)):
        table[code] = typed[code] = _typed_map(typed, large, limit, most, deep)


def _takes_depth(decode: Callable[..., Any]) -> bool:
    """Whether the SDK's decoders take the nesting depth after the buffer (7.15 and
    later: ``decode(buffer, depth)``) or the buffer alone (7.12 to 7.14)."""
    try:
        parameters = inspect.signature(decode).parameters
    except (TypeError, ValueError):  # pragma: no cover - a decoder in C
        return False
    return len(parameters) > 1


def _put_raw(output: bytearray, value: bytes, **_kwargs: Any) -> None:
    output.extend(value)


def _marking(kind: type, decode: Callable[..., tuple[Any, Any]]) -> Callable[..., Any]:
    def decode_marked(buffer: Any, *args: Any) -> tuple[Any, Any]:
        rest, value = decode(buffer, *args)
        return rest, kind(value)

    return decode_marked


def _long(decode: Callable[..., tuple[Any, Any]]) -> Callable[..., Any]:
    def decode_long(buffer: Any, *args: Any) -> tuple[Any, Any]:
        rest, value = decode(buffer, *args)
        return rest, Long(value) if value in _INT32 else value

    return decode_long


def _decimal(kind: type[Decimal32 | Decimal64 | Decimal128]) -> Callable[..., Any]:
    width = {Decimal32: 4, Decimal64: 8, Decimal128: 16}[kind]

    def decode_decimal(buffer: Any, _depth: int = 0) -> tuple[Any, Any]:
        return buffer[width:], kind(bytes(buffer[:width]))

    return decode_decimal


def _char(buffer: Any, _depth: int = 0) -> tuple[Any, Any]:
    return buffer[4:], Char(chr(_U32.unpack(buffer[:4])[0]))


def _typed_map(typed: list[Any], large: bool, limit: int, most: int,
               deep: bool) -> Callable[..., Any]:
    """A map decoder (map8, or map32 when ``large``) that reads its keys and values with
    the ``typed`` table, bounded as the SDK's own; it hands each decoder the nesting
    depth when the SDK's decoders take it (``deep``: 7.15 and later), the buffer alone
    otherwise (before 7.15 they take nothing else)."""

    def decode_map(buffer: Any, depth: int = 0) -> tuple[Any, Any]:
        depth += 1
        if depth > limit:
            raise ValueError(f"AMQP value nesting exceeds maximum depth of {limit}")
        if large:
            count = _U32.unpack(buffer[4:8])[0]
            buffer = buffer[8:]
        else:
            count = buffer[1]
            buffer = buffer[2:]
        if count > most or count % 2:
            raise ValueError(f"AMQP map element count {count} is not a map's")
        values = {}
        if deep:
            for _ in range(count // 2):
                buffer, key = typed[buffer[0]](buffer[1:], depth)
                buffer, value = typed[buffer[0]](buffer[1:], depth)
                values[key] = value
        else:  # nested maps then start from depth 0, as the SDK's own do there
            for _ in range(count // 2):
                buffer, key = typed[buffer[0]](buffer[1:])
                buffer, value = typed[buffer[0]](buffer[1:])
                values[key] = value
        return buffer, values

    decode_map._aiosb_typed = True  # type: ignore[attr-defined]
    return decode_map


def _typed(kind: str, value: Any) -> dict[str, Any]:
    # The SDK's encoder takes {TYPE: <amqp type>, VALUE: value} for explicitly typed
    # values (what its own code does for longs).
    from azure.servicebus._pyamqp.types import TYPE, VALUE

    return {TYPE: kind, VALUE: value}


def to_sdk(value: Any) -> Any:
    """A value as the SDK's encoder must get it to write its AMQP type (lists and maps
    item by item; a map's keys as they are)."""
    kind = type(value)
    name = _SDK_TYPES.get(kind)
    if name is not None:
        return _typed(name.upper(), kind.__mro__[1](value))
    if kind is bool:  # the SDK writes the longer form (0x56), the same value
        return _typed(_RAW, b"\x41" if value else b"\x42")
    if value is None or kind is str or kind is float:
        return value
    if kind is int:  # the SDK alone would send every int as a 32-bit int
        return value if value in _INT32 else _typed("LONG", value)
    if kind is Symbol:
        return _typed("SYMBOL", value.encode("ascii"))
    if kind is Char:
        return _typed(_RAW, b"\x73" + _U32.pack(ord(value)))
    if kind in _DECIMALS:
        return _typed(_RAW, bytes((_DECIMALS[kind],)) + value)
    if kind is AmqpSymbol:
        return _typed("SYMBOL", bytes(value))
    if kind is AmqpTimestamp:
        return _typed("TIMESTAMP", int(value))
    if isinstance(value, (bytes, bytearray)):  # the SDK would send bytes as a string
        return _typed("BINARY", bytes(value))
    if isinstance(value, list):
        return [to_sdk(item) for item in value]
    if isinstance(value, dict):
        return {key: to_sdk(item) for key, item in value.items()}
    return value


def from_sdk(value: Any) -> Any:
    """A value the SDK's decoder gave, as aiosb holds it: a string as ``str``, a binary as
    ``bytes``, a symbol as :class:`~aiosb.values.Symbol`, a timestamp as a ``datetime``;
    typed values as they are; lists and maps item by item."""
    kind = type(value)
    if kind is AmqpBinary:
        return bytes(value)
    if kind is AmqpSymbol:
        return Symbol(value.decode("ascii", "backslashreplace"))  # a Symbol is ASCII
    if kind is AmqpTimestamp:
        try:
            return _EPOCH + _dt.timedelta(milliseconds=int(value))
        except OverflowError:
            return int(value)
    if kind is bytes or kind is bytearray or kind is memoryview:
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return bytes(value)
    if isinstance(value, list):
        return [from_sdk(item) for item in value]
    if isinstance(value, dict):
        return {from_sdk(key): from_sdk(item) for key, item in value.items()}
    return value


def resend(value: Any) -> Any:
    """A value the SDK's decoder gave, as its encoder must get it to write the same type."""
    return to_sdk(from_sdk(value))
