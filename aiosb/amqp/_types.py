"""The marker types of the AMQP codec (see :mod:`aiosb.amqp.codec`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "AMQP_HEADER", "SASL_HEADER", "Array", "Byte", "Char", "DecodeError", "Described",
    "Float32", "Int", "Raw", "Short", "Symbol", "UByte", "UInt", "ULong", "UShort",
]

#: The protocol headers: plain AMQP 1.0 and its SASL layer.
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


class DecodeError(ValueError):
    """Bytes that are not valid AMQP (or use a type this codec does not support)."""


class Symbol(str):
    """An AMQP symbol (ASCII names: descriptors, conditions, annotation keys)."""

    __slots__ = ()


class Char(str):
    """An AMQP char: one Unicode code point, sent as UTF-32."""

    __slots__ = ()


class UByte(int):
    __slots__ = ()


class UShort(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


class ULong(int):
    __slots__ = ()


class Byte(int):
    __slots__ = ()


class Short(int):
    __slots__ = ()


class Int(int):
    __slots__ = ()


class Float32(float):
    __slots__ = ()


class Raw(bytes):
    """One value already encoded, written as it is: what a peer sent, kept bit for bit
    (and how a decimal, which this codec does not interpret, is decoded)."""

    __slots__ = ()


class Described(NamedTuple):
    """A described value: ``descriptor`` (a ulong code or a symbol) and ``value``."""

    descriptor: Any
    value: Any


@dataclass(slots=True)
class Array:
    """An AMQP array: ``items``, all encoded as ``kind`` (e.g. ``Symbol``, ``UInt``)."""

    kind: type
    items: list[Any] = field(default_factory=list)
