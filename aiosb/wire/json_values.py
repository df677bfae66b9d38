"""JSON values as aiosb's encodings write them (:mod:`aiosb.wire.aiosb_json`, the
durable store's rows): property values native where JSON has the type and tagged where
it has not, and the reader and writer that are fast where they can be and exact always.
Imports only the vocabulary.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import math
import re
import uuid
from typing import Any

import orjson

from ..errors import InvalidArgument
from ..message import PropertyValue

__all__ = ["JSON_INTS", "decode_value", "dumps", "encode_value", "loads", "microseconds"]

#: The whole numbers JSON carries as they are here: 64-bit signed (a JSON reader such as
#: orjson reads one beyond 64 bits as a float); others are tagged ``{"int": DIGITS}``.
JSON_INTS = range(-(2**63), 2**63)


def encode_value(value: PropertyValue) -> Any:
    """A property value as JSON: native where JSON has the type, tagged otherwise."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value if value in JSON_INTS else {"int": str(value)}
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
            if tag == "int" and isinstance(text, str) and _DIGITS.fullmatch(text):
                return int(text)
        except (ValueError, OverflowError, binascii.Error):
            pass
    raise InvalidArgument(f"property {name!r} has a value aiosb cannot read: {raw!r:.80}.")


_DIGITS = re.compile(r"-?[0-9]+")


def loads(data: bytes) -> Any:
    """JSON, read as :func:`json.loads` reads it, through orjson where it can (three
    times as fast: #16). orjson reads a whole number beyond 64 bits as a float, and
    aiosb's encodings never write one (:func:`encode_value` tags it); what orjson
    refuses and json takes (NaN, a lone surrogate, a byte order mark) goes to json.

    Raises:
        ValueError: Not JSON (:class:`json.JSONDecodeError`).
        RecursionError: Nested too deep.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def microseconds(delta: _dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def dumps(data: Any) -> bytes:
    """Compact JSON for payloads of the batch encoding, which hold str keys and finite
    floats only (orjson would write NaN as null); what orjson refuses (a lone surrogate;
    a whole number beyond 64 bits, which :func:`encode_value` tags) goes through
    :mod:`json`."""
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        return json.dumps(data, separators=(",", ":")).encode()
