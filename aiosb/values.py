"""AMQP's typed values: the types an application property (or an annotation) can have on
the wire that no plain Python type names, as subclasses of the plain types, so that code
reading a property sees an ordinary ``int``, ``float``, ``str`` or ``bytes`` (#47).

A plain value travels as its AMQP type by this rule, the same on every path aiosb has:

| Python value | AMQP type |
| --- | --- |
| ``int`` | int when it fits 32 bits, else long (what the Python SDK sends) |
| ``float`` | double |
| ``str`` | string |
| ``bytes`` | binary |
| ``bool`` | boolean |
| ``None`` | null |
| ``datetime`` | timestamp (milliseconds) |
| ``uuid.UUID`` | uuid |
| ``timedelta`` | ``com.microsoft:timespan`` (a described long of ticks) |

A value of any other AMQP type is one of the classes below: a property an AMQP client
sent as ``long`` 1 is ``Long(1)``, equal to ``1``, and goes back to any AMQP client as a
long, after a durable restart or a move by a pairing's syphon too; an aiosb sender picks
a type so (``Message(application_properties={"n": Long(1)})``). :data:`TYPE_NAMES`
names each class's AMQP type. Each class holds only what its type can (an integer
type its range, ``Float32`` single precision's, ``Char`` one code point, ``Symbol``
ASCII, a decimal its width): anything else raises :class:`ValueError` when made, so
that no value reaches a delivery that its encoding would fail on. The vocabulary of
:mod:`aiosb` (imports nothing above it); the AMQP codec (:mod:`aiosb.server.amqp.codec`)
encodes each as its type.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
import uuid
from typing import Any, Self, TypeVar

__all__ = [
    "TYPED",
    "TYPE_NAMES",
    "Byte",
    "Char",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Float32",
    "Int",
    "Long",
    "Short",
    "Symbol",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "amqp_type",
    "plain",
]


_I = TypeVar("_I", bound=int)


def _in_range(kind: type[_I], value: Any) -> _I:
    """``kind(value)`` for an integer type, or :class:`ValueError` if out of its range."""
    number = int.__new__(kind, value)
    span: range = kind.RANGE  # type: ignore[attr-defined]
    if not span.start <= number < span.stop:  # `in` would iterate: number is no int
        raise ValueError(f"an AMQP {kind.__name__.lower()} is from {span.start} to "
                         f"{span.stop - 1}, not {int(number)}.")
    return number


class Symbol(str):
    """An AMQP symbol (ASCII names: descriptors, conditions, annotation keys).

    Raises:
        ValueError: Not ASCII.
    """

    __slots__ = ()

    def __new__(cls, value: object = "") -> Self:
        text = super().__new__(cls, value)
        if not text.isascii():
            raise ValueError(f"an AMQP symbol is ASCII, not {str(text)!r:.80}.")
        return text


class Char(str):
    """An AMQP char: one Unicode code point, sent as UTF-32.

    Raises:
        ValueError: Not exactly one code point.
    """

    __slots__ = ()

    def __new__(cls, value: object) -> Self:
        text = super().__new__(cls, value)
        if len(text) != 1:
            raise ValueError(f"an AMQP char is one code point, not {len(text)}: "
                             f"{str(text)!r:.80}.")
        return text


class UByte(int):
    """An AMQP ubyte (0 to 255)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(2**8)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class UShort(int):
    """An AMQP ushort (0 to 65,535)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(2**16)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class UInt(int):
    """An AMQP uint (0 to 2**32 - 1)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(2**32)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class ULong(int):
    """An AMQP ulong (0 to 2**64 - 1)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(2**64)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class Byte(int):
    """An AMQP byte (-128 to 127)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(-(2**7), 2**7)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class Short(int):
    """An AMQP short (-32,768 to 32,767)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(-(2**15), 2**15)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class Int(int):
    """An AMQP int (32 bits; a plain ``int`` that fits travels as one too)."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(-(2**31), 2**31)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class Long(int):
    """An AMQP long (64 bits) that a plain ``int`` would not be: one that fits 32 bits."""

    __slots__ = ()
    #: The values it holds (out of it: :class:`ValueError`).
    RANGE = range(-(2**63), 2**63)

    def __new__(cls, value: Any = 0) -> Self:
        return _in_range(cls, value)


class Float32(float):
    """An AMQP float (IEEE 754 single precision; a plain ``float`` is a double).

    Raises:
        ValueError: Beyond single precision's range (infinities and NaN are floats; a
            value too small for it rounds to zero, as the encoding does).
    """

    __slots__ = ()

    def __new__(cls, value: Any = 0.0) -> Self:
        number = super().__new__(cls, value)
        try:
            _FLOAT32.pack(number)
        except OverflowError:
            raise ValueError(f"an AMQP float is at most {_FLOAT32_MAX!r} in magnitude, "
                             f"not {float(number)!r}.") from None
        return number


_FLOAT32 = struct.Struct(">f")
#: The largest finite single-precision value.
_FLOAT32_MAX = _FLOAT32.unpack(b"\x7f\x7f\xff\xff")[0]


class _Decimal(bytes):
    """An AMQP decimal, as its IEEE 754-2008 encoding (Binary Integer Decimal, big-endian),
    kept bit for bit; :meth:`as_decimal` reads it, ``str()`` gives its text."""

    __slots__ = ()
    #: The width in bytes, the exponent's width in bits and its bias.
    _WIDTH, _EXPONENT, _BIAS = 16, 14, 6176

    def __new__(cls, data: bytes) -> Self:
        if len(data) != cls._WIDTH:
            raise ValueError(f"an AMQP {cls.__name__.lower()} is {cls._WIDTH} bytes, "
                             f"not {len(data)}.")
        return super().__new__(cls, data)

    def as_decimal(self) -> decimal.Decimal:
        """The value (IEEE 754-2008 BID; a non-canonical significand reads as zero)."""
        bits = self._WIDTH * 8
        value = int.from_bytes(self, "big")
        sign = value >> (bits - 1)
        combination = (value >> (bits - 6)) & 0x1F
        if combination == 0x1F:
            return decimal.Decimal("NaN")
        if combination == 0x1E:
            return decimal.Decimal("-Infinity" if sign else "Infinity")
        rest = bits - 1 - self._EXPONENT  # the significand's bits
        if (value >> (bits - 3)) & 0x3 == 0x3:  # the significand's high bits implied
            exponent = (value >> (rest - 2)) & ((1 << self._EXPONENT) - 1)
            significand = (0b100 << (rest - 2)) | (value & ((1 << (rest - 2)) - 1))
        else:
            exponent = (value >> rest) & ((1 << self._EXPONENT) - 1)
            significand = value & ((1 << rest) - 1)
        digits = {4: 7, 8: 16, 16: 34}[self._WIDTH]
        if significand >= 10**digits:
            significand = 0
        return decimal.Decimal((sign, tuple(map(int, str(significand))),
                                exponent - self._BIAS))

    def __str__(self) -> str:
        return str(self.as_decimal())


class Decimal32(_Decimal):
    """An AMQP decimal32 (4 bytes)."""

    __slots__ = ()
    _WIDTH, _EXPONENT, _BIAS = 4, 8, 101


class Decimal64(_Decimal):
    """An AMQP decimal64 (8 bytes)."""

    __slots__ = ()
    _WIDTH, _EXPONENT, _BIAS = 8, 10, 398


class Decimal128(_Decimal):
    """An AMQP decimal128 (16 bytes; what .NET sends a ``decimal`` as)."""

    __slots__ = ()


#: The AMQP type each class stands for.
TYPE_NAMES: dict[type, str] = {
    Byte: "byte", Short: "short", Int: "int", Long: "long",
    UByte: "ubyte", UShort: "ushort", UInt: "uint", ULong: "ulong",
    Float32: "float", Char: "char", Symbol: "symbol",
    Decimal32: "decimal32", Decimal64: "decimal64", Decimal128: "decimal128",
}


def amqp_type(value: object) -> str:
    """The AMQP type ``value`` travels as (the table of the module's doc, and
    :data:`TYPE_NAMES`).

    Raises:
        TypeError: Not a value an application property can hold.
    """
    name = TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int" if -(2**31) <= value < 2**31 else "long"
    for kind, name in ((float, "double"), (str, "string"), (bytes, "binary"),
                       (_dt.datetime, "timestamp"), (uuid.UUID, "uuid"),
                       (_dt.timedelta, "com.microsoft:timespan")):
        if isinstance(value, kind):
            return name
    raise TypeError(f"{type(value).__name__} is not an application property's type.")


def _decimal_number(value: _Decimal) -> float:
    return float(value.as_decimal())


#: The plain Python type each typed value computes as (:func:`plain`).
_PLAIN: dict[type, Any] = {
    **dict.fromkeys((Byte, Short, Int, Long, UByte, UShort, UInt, ULong), int),
    Float32: float, Char: str, Symbol: str,
    **dict.fromkeys((Decimal32, Decimal64, Decimal128), _decimal_number),
}
#: The typed values' classes (a ``set`` to test a value's class against).
TYPED = frozenset(_PLAIN)


def plain(value: Any) -> Any:
    """``value`` as the plain Python value it stands for (an ``int`` for a ``Long``, a
    ``float`` for a decimal ...): what SQL filters and correlation filters compute and
    compare with, as they did before properties kept their AMQP types; any other value
    as it is."""
    convert = _PLAIN.get(value.__class__)
    return value if convert is None else convert(value)

