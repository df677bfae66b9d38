"""The marker types of the AMQP codec (see :mod:`aiosb.server.amqp.codec`): the typed values
(:mod:`aiosb.values`), and the codec's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

# The typed values are the vocabulary's (application properties hold them): #47.
from ...values import (
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

__all__ = [
    "AMQP_HEADER", "SASL_HEADER", "Array", "Byte", "Char", "DecodeError", "Decimal32",
    "Decimal64", "Decimal128", "Described", "Float32", "Int", "Long", "Raw", "Short",
    "Symbol", "UByte", "UInt", "ULong", "UShort",
]

#: The protocol headers: plain AMQP 1.0 and its SASL layer.
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


class DecodeError(ValueError):
    """Bytes that are not valid AMQP (or use a type this codec does not support)."""


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
