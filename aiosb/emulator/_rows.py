"""How the durable journal writes messages and entity properties: explicit, versioned.

A row is ``FORMAT`` followed by JSON: plain JSON values where JSON has the type, tagged
ones otherwise (bytes, instants, durations, UUIDs, non-finite floats, as the HTTP batch
format tags them). A row in another format is refused with a sentence, never guessed at.

Rows written before this format (pickles, aiosb 0.1) are still read, through an unpickler
that admits only the classes such rows hold, so a crafted file cannot run code.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import json
import operator
import pickle
from typing import Any

from ..entities import QueueProperties, SubscriptionProperties, TopicProperties
from ..errors import InvalidArgument
from ..rules import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from ..wire.aiosb_json import decode_value, encode_value
from ..wire.json_values import dumps, loads
from ._record import _NO_OPT, _OPT, FIELDS, INF, _Record

__all__ = [
    "FORMAT",
    "decode_props",
    "decode_record",
    "decode_rules",
    "encode_props",
    "encode_record",
    "encode_rules",
    "message_row",
    "record_of_row",
]

#: What every row starts with: the format's name and version.
FORMAT = b"aiosb-json-1\n"

_KINDS: dict[str, type[Any]] = {
    "queue": QueueProperties,
    "topic": TopicProperties,
    "subscription": SubscriptionProperties,
}
#: The classes a pickled row of aiosb 0.1 may hold, and nothing else.
_LEGACY_CLASSES = {
    ("datetime", "datetime"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("datetime", "date"),
    ("uuid", "UUID"),
    ("uuid", "SafeUUID"),
    ("zoneinfo", "ZoneInfo"),
    ("aiosb.entities", "QueueProperties"),
    ("aiosb.entities", "TopicProperties"),
    ("aiosb.entities", "SubscriptionProperties"),
}


_FIELDS_OF = operator.attrgetter(*FIELDS)
_PLAIN = (str, int, bool)


def encode_record(rec: Any) -> bytes:
    """A message row: a record's fields (:data:`._record.FIELDS`), those that are
    ``None`` left out (they read back as ``None``), ``props`` as a dict of property
    values. Written with orjson (#39: with the standard library's json, writing the
    rows took most of a durable server's time)."""
    out: dict[str, Any] = {}
    for name, value in zip(FIELDS, _FIELDS_OF(rec), strict=True):
        if value is None:
            continue
        if type(value) in _PLAIN:
            out[name] = value
        elif name == "props":
            out[name] = {"props": {k: encode_value(v) for k, v in value.items()}}
        else:
            out[name] = encode_value(value)
    return FORMAT + dumps(out)


#: The columns of a message row of the compact table (``msgs``, #39) that
#: :func:`message_row` gives, in order, after the entity's id, the sequence number and
#: the store.
ROW_COLUMNS = "state, mid, enqueued, expires, ttl, size, count, body, extra"
_NEW = object.__new__


def message_row(rec: Any, prefix_ok: bool) -> tuple[Any, ...]:
    """A record as the compact table's columns (:data:`ROW_COLUMNS`): the fields every
    message has in columns of their own (the body raw, a broker-assigned MessageId as
    its number when ``prefix_ok``, the time to live ``NULL`` for never), the rest, those
    set, in ``extra`` (format :data:`FORMAT`, as :func:`encode_record` writes them)."""
    extra: dict[str, Any] = {}
    opt = rec._opt
    if opt is not _NO_OPT:
        for name, value in zip(_OPT, opt, strict=True):
            if value is not None:
                extra[name] = value if type(value) in _PLAIN else encode_value(value)
    if rec.props:
        extra["props"] = {"props": {k: encode_value(v) for k, v in rec.props.items()}}
    if rec.key is not None:
        extra["key"] = rec.key
    if rec.deferred:
        extra["deferred"] = True
    if rec.lock_token is not None:
        extra["lock_token"] = rec.lock_token
    if rec.locked_until is not None:
        extra["locked_until"] = rec.locked_until
    if rec.frag:
        extra["frag"] = rec.frag
    mid = rec._mid
    if mid.__class__ is not str and not prefix_ok:
        mid = rec.message_id
    ttl = rec.ttl
    return (rec.state, mid, rec.enqueued, rec.expires, None if ttl == INF else ttl, rec.size,
            rec.delivery_count, rec.body, FORMAT + dumps(extra) if extra else None)


def record_of_row(seq: int, state: int, mid: str | int, enqueued: float,
                  expires: float | None, ttl: float | None, size: int, count: int,
                  body: bytes, extra: bytes | None, prefix: str | None) -> _Record:
    """The record of a compact row (:func:`message_row`); a MessageId kept as a number
    is spelled out with ``prefix`` unless that is ``None`` (this process spells ids so:
    the number is kept, as a message sent now keeps it)."""
    rec: _Record = _NEW(_Record)
    rec.body = body
    rec._mid = mid if prefix is None or mid.__class__ is str else f"{prefix}{mid:012x}"
    rec.ttl = INF if ttl is None else ttl
    rec.seq = seq
    rec.enqueued = enqueued
    rec.expires = expires
    rec.size = size
    rec.delivery_count = count
    rec.state = state
    rec._opt = _NO_OPT
    rec.props = rec.key = rec.lock_token = rec.locked_until = None
    rec.deferred = False
    rec.frag = 0
    if extra is not None:
        fields = loads(_checked(extra))
        if fields.keys() - _EXTRA_NAMES:
            raise InvalidArgument(
                f"a message row of the durable store has fields {sorted(fields)} that "
                "this aiosb does not know; use the aiosb that wrote it."
            )
        for name, value in fields.items():
            if name == "props":
                rec.props = {k: decode_value(k, v) for k, v in value["props"].items()}
            else:
                setattr(rec, name, decode_value(name, value))
    return rec


_EXTRA_NAMES = frozenset(_OPT) | {"props", "key", "deferred", "lock_token", "locked_until",
                                  "frag"}


def _checked(data: bytes) -> bytes:
    if not data.startswith(FORMAT):
        head = bytes(data[:24]).split(b"\n", 1)[0]
        raise InvalidArgument(
            f"the durable store holds a row in format {head!r}, which this aiosb does not "
            f"read (it reads {FORMAT.strip()!r}); use the aiosb that wrote it."
        )
    return data[len(FORMAT):]


def decode_record(data: bytes) -> dict[str, Any]:
    """The fields of a message row (of this format, or a legacy pickle)."""
    raw = _open(data)
    if not isinstance(raw, dict):
        raise InvalidArgument("a message row of the durable store is not an object.")
    if not data.startswith(FORMAT):
        return raw  # legacy: the values are Python objects already
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name == "props" and isinstance(value, dict) and "props" in value:
            out[name] = {k: decode_value(k, v) for k, v in value["props"].items()}
        else:
            out[name] = decode_value(name, value)
    return out


def encode_props(props: Any) -> bytes:
    """An entity's properties (a Queue/Topic/SubscriptionProperties)."""
    fields = {f.name: encode_value(getattr(props, f.name)) for f in dataclasses.fields(props)}
    return FORMAT + _dumps(fields)


def decode_props(kind: str, data: bytes) -> Any:
    """An entity's properties; fields unknown to this version are left out, missing ones
    take their defaults."""
    raw = _open(data)
    if not data.startswith(FORMAT):
        return raw
    cls = _KINDS[kind]
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: decode_value(k, v) for k, v in raw.items() if k in known})


_FILTERS: dict[str, type[Any]] = {
    "sql": SqlRuleFilter,
    "correlation": CorrelationRuleFilter,
    "true": TrueRuleFilter,
    "false": FalseRuleFilter,
}
_FILTER_KIND = {cls: kind for kind, cls in _FILTERS.items()}


def _encode_fields(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, dict):
            out[f.name] = {"props": {k: encode_value(v) for k, v in value.items()}}
        else:
            out[f.name] = encode_value(value)
    return out


def _decode_fields(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if isinstance(value, dict) and "props" in value:
            out[name] = {k: decode_value(k, v) for k, v in value["props"].items()}
        else:
            out[name] = decode_value(name, value)
    return out


def encode_rules(rules: list[RuleProperties]) -> bytes:
    """A subscription's rules: each with its filter (by kind) and action."""
    out = []
    for rule in rules:
        out.append(
            {
                "name": rule.name,
                "filter": {"kind": _FILTER_KIND[type(rule.filter)],
                           **_encode_fields(rule.filter)},
                "action": None if rule.action is None else _encode_fields(rule.action),
                "created": encode_value(rule.created_at_utc),
            }
        )
    return FORMAT + _dumps(out)


def _instant(value: Any) -> _dt.datetime | None:
    return value if isinstance(value, _dt.datetime) else None


def decode_rules(data: bytes) -> list[RuleProperties]:
    """The rules :func:`encode_rules` wrote."""
    raw = _open(data)
    if not isinstance(raw, list):
        raise InvalidArgument("the rules row of the durable store is not a list.")
    rules = []
    for item in raw:
        spec = dict(item["filter"])
        cls = _FILTERS[spec.pop("kind")]
        action = item["action"]
        rules.append(
            RuleProperties(
                item["name"],
                cls(**_decode_fields(spec)),
                None if action is None else SqlRuleAction(**_decode_fields(action)),
                _instant(decode_value("created", item["created"])),
            )
        )
    return rules


def _dumps(value: Any) -> bytes:
    # The standard library's json (entity properties and rules: written seldom).
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def _open(data: bytes) -> Any:
    data = bytes(data)
    if data.startswith(FORMAT):
        return json.loads(data[len(FORMAT) :])
    if data[:1] == b"\x80":  # a pickle: aiosb 0.1 wrote them
        return _LegacyUnpickler(io.BytesIO(data)).load()
    head = bytes(data[:24]).split(b"\n", 1)[0]
    raise InvalidArgument(
        f"the durable store holds a row in format {head!r}, which this aiosb does not "
        f"read (it reads {FORMAT.strip()!r}); use the aiosb that wrote it."
    )


def _legacy_getattr(obj: Any, name: str) -> Any:
    """The one attribute lookup such rows make: a ``ZoneInfo`` unpickling itself (an
    instant scheduled in a named zone)."""
    import zoneinfo

    if obj is zoneinfo.ZoneInfo and name == "_unpickle":
        # (private in typeshed, but what a pickled ZoneInfo names: legacy rows only)
        return zoneinfo.ZoneInfo._unpickle  # type: ignore[attr-defined]
    raise InvalidArgument(
        f"the durable store holds a row that looks up {name!r}, which no row aiosb wrote "
        "does; it was not loaded."
    )


class _LegacyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _legacy_getattr
        if (module, name) not in _LEGACY_CLASSES:
            raise InvalidArgument(
                f"the durable store holds a row that names {module}.{name}, which no row "
                "aiosb wrote holds; it was not loaded."
            )
        return super().find_class(module, name)
