"""JSON values as aiosb's encodings write them (:mod:`aiosb.wire.aiosb_json`, the
durable store's rows): property values native where JSON has the type and tagged where
it has not, and the reader and writer that are fast where they can be and exact always.
Imports only the vocabulary.

A typed value (:mod:`aiosb.values`, #47) is tagged with its AMQP type's name
(``{"long": 1}``, ``{"symbol": "s"}``, ``{"decimal128": "<base64>"}``; an AMQP float is
``{"float32": 1.5}``, since ``{"float": "nan"}`` is a double that JSON has no number
for), so that it comes back as it went, to be sent on as its AMQP type.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import math
import uuid
from typing import Any

import orjson

from ..errors import InvalidArgument
from ..message import PropertyValue
from ..values import TYPE_NAMES, Char, Float32, Symbol

__all__ = ["decode_value", "dumps", "encode_value", "loads", "microseconds"]


#: The tag of each typed value, and the type of each tag.
_TAGS: dict[type, str] = {
    kind: "float32" if kind is Float32 else name for kind, name in TYPE_NAMES.items()
}
_KINDS: dict[str, type] = {name: kind for kind, name in _TAGS.items()}
def _typed(tag: str, value: Any) -> Any:
    """A typed value's JSON, under its tag."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _untyped(tag: str, kind: type, raw: Any) -> Any:
    """The typed value tagged ``tag`` (``kind``) whose JSON is ``raw``; ``None`` when it
    is not one. Each class checks its range itself (an integer type's, a float's, a
    char's one code point, a symbol's ASCII, a decimal's width): a value beyond it
    raises :class:`ValueError` (:mod:`aiosb.values`)."""
    if issubclass(kind, int):
        ok = isinstance(raw, int) and not isinstance(raw, bool)
        return kind(raw) if ok else None
    if kind is Float32:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return Float32(raw)
        return Float32(raw) if raw in ("nan", "inf", "-inf") else None
    if not isinstance(raw, str):
        return None
    if kind is Char or kind is Symbol:
        return kind(raw)
    return kind(base64.b64decode(raw, validate=True))  # type: ignore[call-arg]  # a decimal


def encode_value(value: PropertyValue) -> Any:
    """A property value as JSON: native where JSON has the type, tagged otherwise."""
    tag = _TAGS.get(type(value))
    if tag is not None:
        return {tag: _typed(tag, value)}
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, _dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, _dt.timedelta):
        return {"timedelta": microseconds(value)}
    if isinstance(value, uuid.UUID):
        return {"uuid": str(value)}
    raise InvalidArgument(f"a property of type {type(value).__name__} cannot travel over HTTP.")


def decode_value(name: str, raw: Any) -> PropertyValue:
    """The inverse of :func:`encode_value`; bad input raises :class:`InvalidArgument`."""
    if raw is None or isinstance(raw, (str, bool, int, float)):
        return raw
    if isinstance(raw, dict) and len(raw) == 1:
        ((tag, text),) = raw.items()
        try:
            if tag == "bytes" and isinstance(text, str):
                return base64.b64decode(text, validate=True)
            if tag == "datetime" and isinstance(text, str):
                return _dt.datetime.fromisoformat(text)
            if tag == "timedelta" and isinstance(text, int) and not isinstance(text, bool):
                return _dt.timedelta(microseconds=text)
            if tag == "uuid" and isinstance(text, str):
                return uuid.UUID(text)
            if tag == "float" and text in ("nan", "inf", "-inf"):
                return float(text)
            kind = _KINDS.get(tag)
            if kind is not None:
                typed = _untyped(tag, kind, text)
                if typed is not None:
                    return typed  # type: ignore[no-any-return]
        except (ValueError, OverflowError, binascii.Error):
            pass
    raise InvalidArgument(f"property {name!r} has a value aiosb cannot read: {raw!r:.80}.")


#: Bytes as :func:`_risky` sees them: a digit is ``0``, what may stand before a number
#: (``[`` ``,`` ``:``, whitespace, a minus sign) is ``s``, anything else ``.``.
_CLASSES = bytes(
    ord("0") if chr(b).isdigit() and b < 128 else ord("s") if b in b"[,: \t\n\r-" else ord(".")
    for b in range(256)
)
#: The shortest whole number orjson may read as a float: 19 digits after a sign
#: (below -2**63), or after what begins a number.
_RISK = b"s" + b"0" * 19


def _risky(data: bytes) -> bool:
    """Whether ``data`` may hold a whole number orjson reads as a float (beyond 64 bits:
    19 digits or more): two passes in C, where a text of hex ids or base64 finds none
    (a run of digits inside a string follows a letter or a quote, not a separator)."""
    classes = data.translate(_CLASSES)
    return _RISK in classes or classes.startswith(_RISK[1:])


def loads(data: bytes) -> Any:
    """JSON, exactly as :func:`json.loads` reads it, through orjson where that gives the
    same (about three times as fast: #16). orjson reads a whole number beyond 64 bits
    as a float, so a text that may hold one goes to json, as does what orjson refuses
    and json takes (NaN, a lone surrogate, a byte order mark).

    Raises:
        ValueError: Not JSON (:class:`json.JSONDecodeError`).
        RecursionError: Nested too deep.
    """
    if not _risky(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def microseconds(delta: _dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def dumps(data: Any) -> bytes:
    """Compact JSON for payloads of the batch encoding, which hold str keys and finite
    floats only (orjson would write NaN as null); what orjson refuses (an int over 64
    bits, a lone surrogate) goes through :mod:`json`."""
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        return json.dumps(data, separators=(",", ":")).encode()
