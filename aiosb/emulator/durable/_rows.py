"""How the durable journal writes messages and entity properties: explicit, versioned.

A message row of the compact table (#39) is the body, raw, and a head
(:func:`message_row`): flags, state, delivery count, size, a broker-assigned MessageId's
number and the enqueued instant packed (:data:`ROW_FORMAT`, which the database names),
the expiry instant and time to live when set, and a tail holding the fields a message
seldom has: ``FORMAT`` followed by JSON, plain JSON values where JSON has the type,
tagged ones otherwise (bytes, instants, durations, UUIDs, non-finite floats, as the HTTP
batch format tags them). Entity properties and rules are ``FORMAT`` and JSON too. A row
in another format is refused with a sentence, never guessed at.

Rows of older databases (one JSON document a message, :func:`decode_record`; pickles,
aiosb 0.1) are still read, to be moved to the compact table; pickles through an
unpickler that admits only the classes such rows hold, so a crafted file cannot run
code.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import json
import operator
import pickle
import struct
from typing import Any

from ...entities import (
    AuthorizationRule,
    QueueProperties,
    SubscriptionProperties,
    TopicProperties,
)
from ...errors import InvalidArgument
from ...rules import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from ...wire.aiosb_json import decode_value, encode_value
from ...wire.json_values import dumps, loads
from .._record import _NO_OPT, _OPT, FIELDS, INF, _Record

__all__ = [
    "FORMAT",
    "decode_props",
    "decode_record",
    "decode_rules",
    "encode_props",
    "encode_record",
    "encode_rules",
    "ROW_FORMAT",
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
#: The types of property values :func:`~aiosb.wire.json_values.encode_value` leaves as
#: they are (a float is too, unless it is not finite).
_PLAIN_TYPES = frozenset(_PLAIN)


def encode_record(rec: Any) -> bytes:
    """A message row: a record's fields (:data:`.._record.FIELDS`), those that are
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


#: The layout of a message row of the compact table (``msgs``, #39), which a database
#: names in its ``meta`` table; another is refused with a sentence.
ROW_FORMAT = "aiosb-row-1"
#: A row's head: flags, state, delivery count, size, the broker-assigned MessageId's
#: number (0: the id is text, in the tail), enqueued instant; then, as the flags say,
#: the expiry instant and the time to live (doubles), and a tail (:data:`FORMAT` and a
#: JSON object) of the fields a message seldom has.
_HEAD = struct.Struct("<BBIIqd")
_DOUBLE = struct.Struct("<d")
_EXPIRES, _TTL, _TAIL, _DLQ = 1, 2, 4, 8
_TAIL_NAMES = frozenset(_OPT) | {"props", "key", "deferred", "lock_token", "locked_until",
                                 "frag", "mid", "session"}
_NEW = object.__new__


def message_row(rec: Any, prefix_ok: bool, where: str | None) -> bytes:
    """A record's row (the head, :data:`_HEAD`; its body goes in a column of its own):
    a broker-assigned MessageId kept as its number when ``prefix_ok``, ``where`` (the
    store: ``None`` the main one, ``"d"`` the dead-letter queue, ``"s:ID"`` a session's)
    as a flag or in the tail, as the fields a message seldom has (those set)."""
    tail: dict[str, Any] = {}
    opt = rec._opt
    if opt is not _NO_OPT:
        for name, value in zip(_OPT, opt, strict=True):
            if value is not None:
                tail[name] = value if type(value) in _PLAIN else encode_value(value)
    props = rec.props
    if props:  # as encode_value writes them: plain values as they are (#39: most are)
        tail["props"] = (props if _PLAIN_TYPES.issuperset(map(type, props.values()))
                         else {k: encode_value(v) for k, v in props.items()})
    if rec.key is not None:
        tail["key"] = rec.key
    if rec.deferred:
        tail["deferred"] = True
    if rec.lock_token is not None:
        tail["lock_token"] = rec.lock_token
    if rec.locked_until is not None:
        tail["locked_until"] = rec.locked_until
    if rec.frag:
        tail["frag"] = rec.frag
    flags = 0
    if where is not None:
        if where == "d":
            flags = _DLQ
        else:
            tail["session"] = where[2:]
    mid = rec._mid
    if mid.__class__ is not int or not prefix_ok or not 0 < mid < 2**63:
        tail["mid"] = rec.message_id
        mid = 0
    extra = b""
    expires, ttl = rec.expires, rec.ttl
    if expires is not None:
        flags |= _EXPIRES
        extra = _DOUBLE.pack(expires)
    if ttl != INF:
        flags |= _TTL
        extra += _DOUBLE.pack(ttl)
    if tail:
        flags |= _TAIL
        extra += FORMAT + dumps(tail)
    return _HEAD.pack(flags, rec.state, rec.delivery_count, rec.size, mid, rec.enqueued) + extra


def record_of_row(seq: int, body: bytes, row: bytes, prefix: str | None
                  ) -> tuple[_Record, str | None]:
    """The record of a row :func:`message_row` wrote, and its store; a MessageId kept as
    a number is spelled out with ``prefix`` unless that is ``None`` (this process spells
    ids so: the number is kept, as a message sent now keeps it)."""
    try:
        flags, state, count, size, mid, enqueued = _HEAD.unpack_from(row)
    except struct.error:
        raise InvalidArgument(
            f"message {seq} of the durable store is damaged ({len(row)} bytes of head)."
        ) from None
    rec: _Record = _NEW(_Record)
    rec.body = body
    rec._mid = mid if prefix is None else f"{prefix}{mid:012x}"
    rec.seq = seq
    rec.enqueued = enqueued
    rec.size = size
    rec.delivery_count = count
    rec.state = state
    rec._opt = _NO_OPT
    rec.props = rec.key = rec.lock_token = rec.locked_until = rec.expires = None
    rec.deferred = False
    rec.frag = 0
    rec.ttl = INF
    where = "d" if flags & _DLQ else None
    if flags:
        at = _HEAD.size
        if flags & _EXPIRES:
            (rec.expires,) = _DOUBLE.unpack_from(row, at)
            at += 8
        if flags & _TTL:
            (rec.ttl,) = _DOUBLE.unpack_from(row, at)
            at += 8
        if flags & _TAIL:
            where = _tail(rec, row[at:], where)
    return rec, where


def _tail(rec: _Record, data: bytes, where: str | None) -> str | None:
    """Set the fields of a row's tail on ``rec``; the store, if the tail names one."""
    if not data.startswith(FORMAT):
        head = bytes(data[:24]).split(b"\n", 1)[0]
        raise InvalidArgument(
            f"the durable store holds a row in format {head!r}, which this aiosb does not "
            f"read (it reads {FORMAT.strip()!r}); use the aiosb that wrote it."
        )
    fields = loads(data[len(FORMAT):])
    if not isinstance(fields, dict) or fields.keys() - _TAIL_NAMES:
        raise InvalidArgument(
            f"message {rec.seq} of the durable store has fields this aiosb does not know; "
            "use the aiosb that wrote it."
        )
    for name, value in fields.items():
        if name == "props":
            rec.props = {k: decode_value(k, v) for k, v in value.items()}
        elif name == "mid":
            rec._mid = value
        elif name == "session":
            where = "s:" + value
        else:
            setattr(rec, name, decode_value(name, value))
    return where


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
    """An entity's properties (a Queue/Topic/SubscriptionProperties); its authorization
    rules as a list of their fields."""
    fields = {f.name: encode_value(getattr(props, f.name)) for f in dataclasses.fields(props)
              if f.name != _ACCESS}
    rules = getattr(props, _ACCESS, ())
    if rules:
        fields[_ACCESS] = [{**dataclasses.asdict(r), "rights": list(r.rights)} for r in rules]
    return FORMAT + _dumps(fields)


_ACCESS = "authorization_rules"


def _access(raw: Any) -> tuple[AuthorizationRule, ...]:
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise InvalidArgument("the authorization rules of an entity row are not a list.")
    return tuple(AuthorizationRule(**{**r, "rights": tuple(r.get("rights", ()))})
                 for r in raw)


def decode_props(kind: str, data: bytes) -> Any:
    """An entity's properties; fields unknown to this version are left out, missing ones
    take their defaults."""
    raw = _open(data)
    if not data.startswith(FORMAT):
        return raw
    cls = _KINDS[kind]
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: _access(v) if k == _ACCESS else decode_value(k, v)
                  for k, v in raw.items() if k in known})


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
        return loads(data[len(FORMAT) :])  # orjson where it reads as json does
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
