"""aiosb's own JSON encodings of messages, exact and typed, used only between aiosb's
client and aiosb's server (the ``$aiosb`` extensions of :mod:`aiosb.server.http`):
one object per message with every field of :class:`~aiosb.Message` /
:class:`~aiosb.ReceivedMessage`, or a batch as one object of columns (what aiosb's
client sends and asks for: per-message objects cost most of a batch's time). The
encodings are described in :mod:`aiosb.server.http`. Imports only the vocabulary.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import itertools
import math
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgument, InvalidOperation
from ..message import (
    RECEIVED_FIELDS,
    TEXT_FIELDS,
    Message,
    PropertyValue,
    ReceivedMessage,
    builder,
    column_reader,
    field_of,
    fields_of,
)
from ..protocol import check_columns
from .json_values import (
    decode_value,
    dumps,
    encode_value,
    loads,
    microseconds,
)

__all__ = [
    "decode_batch",
    "decode_batch_columns",
    "decode_message",
    "decode_received",
    "decode_received_batch",
    "decode_received_columns",
    "decode_value",
    "dumps",
    "encode_batch",
    "encode_batch_columns",
    "encode_message",
    "encode_messages",
    "encode_received",
    "encode_received_batch",
    "encode_received_columns",
    "encode_value",
    "loads",
    "received_columns_of",
]

_UTC = _dt.UTC

# -- the aiosb encoding -----------------------------------------------------------------

# Every name below comes from the field tables of aiosb.message: a text field added
# there travels here with no change; a field of a new kind fails the field-table test.
_TEXT_FIELDS = TEXT_FIELDS
_BODY = field_of("bytes")
_TTL = field_of("duration")
_AT = field_of("instant")
_PROPERTIES = field_of("properties")
#: AMQP sections (bytes or None), as base64 text.
_EXTRA = field_of("amqp")
#: The wire name of the application properties.
_PROPS = "properties"
_MESSAGE_KEYS = frozenset((*_TEXT_FIELDS, _BODY, _TTL, _AT, _PROPS, _EXTRA))
_RECEIVED_NUMBERS = (*fields_of("int", RECEIVED_FIELDS), *fields_of("seconds", RECEIVED_FIELDS))
_RECEIVED_TEXTS = fields_of("text", RECEIVED_FIELDS)
#: What a received field is when the encoding leaves it out: the dataclass's default.
_RECEIVED_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(ReceivedMessage) if f.name in RECEIVED_FIELDS
}


def encode_message(msg: Message) -> dict[str, Any]:
    """A message in the aiosb encoding."""
    out: dict[str, Any] = {_BODY: base64.b64encode(getattr(msg, _BODY)).decode()}
    for name in _TEXT_FIELDS:
        value = getattr(msg, name)
        if value is not None:
            out[name] = value
    ttl = getattr(msg, _TTL)
    if ttl is not None:
        out[_TTL] = microseconds(ttl)
    at = getattr(msg, _AT)
    if at is not None:
        out[_AT] = at.isoformat()
    props = getattr(msg, _PROPERTIES)
    if props:
        out[_PROPS] = {k: encode_value(v) for k, v in props.items()}
    extra = getattr(msg, _EXTRA)
    if extra is not None:
        out[_EXTRA] = base64.b64encode(extra).decode()
    return out


def _base64(name: str, text: Any) -> bytes:
    if isinstance(text, str):
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise InvalidArgument(f"{name} must be a base64 string, not {text!r:.80}.")


def decode_message(data: Any) -> Message:
    """A :class:`~aiosb.Message` from the aiosb encoding, validated like any other.

    Raises:
        InvalidArgument: Not an object, an unknown key, a value of the wrong type.
        InvalidOperation: What :class:`~aiosb.Message` refuses (PT-7 and the like).
    """
    if not isinstance(data, dict):
        raise InvalidArgument(f"a message must be a JSON object, not {type(data).__name__}.")
    unknown = sorted(set(data) - _MESSAGE_KEYS)
    if unknown:
        raise InvalidArgument(f"unknown message propert(ies): {', '.join(unknown)[:200]}.")
    kw: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = data.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidArgument(f"{name} must be a string, not {value!r:.80}.")
            kw[name] = value
    body = data.get(_BODY, "")
    if not isinstance(body, str):
        raise InvalidArgument("body must be a base64 string.")
    try:
        kw[_BODY] = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("body is not valid base64.") from None
    extra = data.get(_EXTRA)
    if extra is not None:
        kw[_EXTRA] = _base64(_EXTRA, extra)
    ttl = data.get(_TTL)
    if ttl is not None:
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl > 2**62:
            raise InvalidArgument(f"{_TTL} must be whole microseconds, not {ttl!r:.80}.")
        kw[_TTL] = _dt.timedelta(microseconds=ttl)
    at = data.get(_AT)
    if at is not None:
        kw[_AT] = _parse_iso(_AT, at)
    props = data.get(_PROPS)
    if props is not None:
        if not isinstance(props, dict):
            raise InvalidArgument("properties must be a JSON object.")
        kw[_PROPERTIES] = {k: decode_value(k, v) for k, v in props.items()}
    return Message(**kw)


def _parse_iso(name: str, text: Any) -> _dt.datetime:
    if isinstance(text, str):
        try:
            value = _dt.datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if value.tzinfo is not None:
                return value
    raise InvalidArgument(f"{name} must be an ISO 8601 time with a UTC offset, not {text!r:.80}.")


def encode_received(msg: ReceivedMessage) -> dict[str, Any]:
    """A received message in the aiosb encoding (what the server answers)."""
    out = encode_message(msg)
    for name in _RECEIVED_NUMBERS:
        value = getattr(msg, name)
        if value is not None:
            out[name] = value
    for name in _RECEIVED_TEXTS:
        value = getattr(msg, name)
        if value is not None:
            out[name] = value
    return out


def decode_received(data: dict[str, Any]) -> ReceivedMessage:
    """A :class:`~aiosb.ReceivedMessage` from the server's aiosb encoding."""
    msg = ReceivedMessage.__new__(ReceivedMessage)
    setattr(msg, _BODY, base64.b64decode(data.get(_BODY, "")))
    for name in _TEXT_FIELDS:
        setattr(msg, name, data.get(name))
    ttl = data.get(_TTL)
    setattr(msg, _TTL, None if ttl is None else _dt.timedelta(microseconds=ttl))
    at = data.get(_AT)
    setattr(msg, _AT, None if at is None else _dt.datetime.fromisoformat(at))
    props = data.get(_PROPS)
    setattr(msg, _PROPERTIES, {k: decode_value(k, v) for k, v in props.items()} if props else {})
    extra = data.get(_EXTRA)
    setattr(msg, _EXTRA, None if extra is None else base64.b64decode(extra))
    for name, default in _RECEIVED_DEFAULTS.items():
        value = data.get(name)
        setattr(msg, name, default if value is None else value)
    return msg


# -- the aiosb batch encoding (column-wise) -------------------------------------------

# A batch of messages as one JSON object of columns, one column per field, instead of
# one object per message: what the aiosb extensions send and answer, for throughput.
# The bodies travel joined in one base64 string (``body``), or raw after the JSON when
# framed (:mod:`.frames`), cut by ``body_sizes``, whose length is the number of
# messages. Any other column is absent (every message has the default: null; 0, 0.0 or
# "active" for a received message's numbers and state), a JSON array with one value per
# message, or a single value that every message has. Times to live are whole
# microseconds, scheduled times ISO 8601 with a UTC offset, broker times UTC epoch
# seconds. ``properties`` is an array with one object (or null) per message, values as
# :func:`encode_value` writes them.

_TTL = "time_to_live"
_AT = "scheduled_enqueue_time"
_PROPS = "properties"
_BATCH_KEYS = frozenset((_BODY, "body_sizes", *_TEXT_FIELDS, _TTL, _AT, _PROPS, _EXTRA))
#: The columns after ``body``, in the order the decoders take them.
_SENT_COLUMNS = (*_TEXT_FIELDS, _TTL, _AT, _PROPS, _EXTRA)
_COLUMNS = (*_SENT_COLUMNS, *_RECEIVED_DEFAULTS)
_FIELD_OF = {_PROPS: _PROPERTIES}
#: Every field of a message, in the order of the columns (what the builders set).
_MESSAGE_FIELDS = (_BODY, *(_FIELD_OF.get(name, name) for name in _SENT_COLUMNS))
#: The same without the body: the columns :func:`_batch` gives, by field name.
_FIELDS = _MESSAGE_FIELDS[1:]
_build_messages = builder(Message, _MESSAGE_FIELDS, dicts=(_PROPERTIES,))
_build_received = builder(
    ReceivedMessage, (*_MESSAGE_FIELDS, *_RECEIVED_DEFAULTS), dicts=(_PROPERTIES,)
)
#: The sent fields, in the order :func:`_sent_values` reads them.
_SENT_FIELDS = (*_TEXT_FIELDS, _TTL, _AT, _PROPERTIES, _EXTRA)
_sent_values = column_reader(_SENT_FIELDS)
_RECEIVED_NAMES = tuple(_RECEIVED_DEFAULTS)
_received_values = column_reader(_RECEIVED_NAMES)
_NONE = type(None)
#: Property value types JSON carries as they are (floats: when finite).
_PLAIN = frozenset((str, int, bool, float, _NONE))
_new = object.__new__
_values_of = dict.values
_chain = itertools.chain.from_iterable
_repeat = itertools.repeat


def _column(values: list[Any]) -> Any:
    """``values`` as a column: the one value when all are the same (and of one type),
    else the list."""
    first = values[0]
    if values.count(first) == len(values) and (
        first is None or type(first) is str or len(set(map(type, values))) == 1
    ):
        return first
    return values


def _plain(props: Sequence[Any]) -> set[type] | None:
    """The types of the values of ``props`` if they are all dicts whose values JSON
    carries as they are (``None``: they are not)."""
    try:
        types = set(map(type, _chain(map(_values_of, props))))
    except TypeError:  # not all dicts
        return None
    if not types <= _PLAIN:
        return None
    if float in types and not all(
        math.isfinite(v) for v in _chain(map(_values_of, props)) if type(v) is float
    ):
        return None
    return types


def _encode_properties(props: list[dict[str, PropertyValue]]) -> list[Any] | None:
    if not any(props):
        return None
    if _plain(props) is not None:
        return props
    return [{k: encode_value(v) for k, v in p.items()} if p else None for p in props]


def _encode_columns(
    bodies: list[bytes], columns: dict[str, Any], names: tuple[str, ...], raw: bool = False
) -> dict[str, Any]:
    """``bodies`` and the columns of the sent fields and of ``names`` (received fields)
    in the batch encoding (``raw``: ``body`` is the list of bodies, for
    :func:`~.frames.frame`).

    ``columns`` holds, by field name (``application_properties`` for the properties),
    a list with each message's value, or one value every message has; a field it leaves
    out has its default for every message (``None``; 0, 0.0 or ``"active"`` for a
    received message's numbers and state)."""
    out: dict[str, Any] = {
        "body": bodies if raw else base64.b64encode(b"".join(bodies)).decode(),
        "body_sizes": list(map(len, bodies)),
    }
    n = len(bodies)
    if not n:
        return out
    get = columns.get
    for name in _TEXT_FIELDS:
        values = get(name)
        if type(values) is list:
            if any(values) or values.count(None) != n:
                out[name] = _column(values)
        elif values is not None:
            out[name] = values
    ttls = _listed(get(_TTL), n)
    if any(ttls):
        out[_TTL] = _column([None if t is None else microseconds(t) for t in ttls])
    ats = _listed(get(_AT), n)
    if any(ats):
        out[_AT] = _column([None if t is None else t.isoformat() for t in ats])
    props = _encode_properties(_listed(get(_PROPERTIES), n))
    if props is not None:
        out[_PROPS] = props
    extras = _listed(get(_EXTRA), n)
    if any(extras):
        out[_EXTRA] = [None if e is None else base64.b64encode(e).decode() for e in extras]
    for name in names:
        default = _RECEIVED_DEFAULTS[name]
        values = get(name, default)
        if type(values) is list:
            if values.count(default) != n or type(values[0]) is not type(default):
                out[name] = _column(values)
        elif values != default or type(values) is not type(default):
            out[name] = values
    return out


def _listed(values: Any, n: int) -> list[Any]:
    """A column as a list of ``n`` values (``None``: absent)."""
    return values if type(values) is list else [values] * n if values is not None else []


def encode_batch(messages: Sequence[Message], raw: bool = False) -> dict[str, Any]:
    """Messages in the aiosb batch encoding (what aiosb's client sends; ``raw``: the
    bodies as bytes, to be framed)."""
    # A column per field (a tuple per message would cost as much again in allocations).
    columns = dict(zip(_SENT_FIELDS, _sent_values(messages), strict=True))
    return _encode_columns([m.body for m in messages], columns, (), raw)


def encode_messages(messages: Sequence[Message], raw: bool = False) -> dict[str, Any]:
    """The messages of a send or schedule as the server takes them: one in the
    per-message encoding (``messages``), whose writing and reading cost less than a
    batch's columns do for one (S-3: about 4 us a send); more as a ``batch`` (``raw``:
    its bodies as bytes, to be framed)."""
    if len(messages) == 1:
        return {"messages": [encode_message(messages[0])]}
    return {"batch": encode_batch(messages, raw)}


def encode_received_batch(messages: Sequence[ReceivedMessage]) -> dict[str, Any]:
    """Received messages in the aiosb batch encoding; no messages is
    ``{"body": "", "body_sizes": []}``."""
    return encode_received_columns(*received_columns_of(messages))


def encode_received_columns(
    bodies: list[bytes], columns: dict[str, Any], raw: bool = False
) -> dict[str, Any]:
    """Received messages in the aiosb batch encoding, given as columns: their bodies,
    and by field name of :class:`~aiosb.ReceivedMessage` (``application_properties``
    for the properties) a list with each message's value, or one value every message
    has; a field left out has its default (``None``, or the dataclass's for the broker
    fields: 0, 0.0, ``"active"``, ``""``) for every message. What aiosb's server answers:
    the emulator reads the columns straight from the messages it holds, with no
    :class:`~aiosb.ReceivedMessage` per message (#16). ``raw``: the bodies as bytes,
    to be framed."""
    return _encode_columns(bodies, columns, _RECEIVED_NAMES, raw)


def _bodies(data: dict[str, Any]) -> list[bytes]:
    sizes = data.get("body_sizes")
    if not isinstance(sizes, list) or not set(map(type, sizes)) <= {int} or (
        sizes and min(sizes) < 0
    ):
        raise InvalidArgument("body_sizes must be a list of body lengths in bytes.")
    blob = data.get("body", "")
    if type(blob) is bytes:  # framed: the bodies as they came after the JSON
        raw = blob
    elif not isinstance(blob, str):
        raise InvalidArgument("body must be a base64 string.")
    else:
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("body is not valid base64.") from None
    total = sum(sizes)
    if total != len(raw):
        raise InvalidArgument(f"body_sizes add up to {total} bytes, but body has {len(raw)}.")
    if len(sizes) == 1:
        return [raw]
    ends = list(itertools.accumulate(sizes))
    return list(map(raw.__getitem__, map(slice, [0, *ends], ends)))


def _values(
    data: dict[str, Any], name: str, n: int, kind: type, what: str | None = None
) -> list[Any] | None:
    """Column ``name`` as one value per message (``None``: absent, all null); ``what``
    says what its values are, for the error (by default, a ``kind``)."""
    column = data.get(name)
    if column is None:
        return None
    if type(column) is list:
        if len(column) == n and set(map(type, column)) <= {kind, _NONE}:
            return column
    elif type(column) is kind:
        return [column] * n
    raise InvalidArgument(
        f"{name} must be {what or 'a ' + kind.__name__}, or a list of {n} such values or "
        f"nulls, not {column!r:.80}."
    )


def _properties_column(props: Any, n: int) -> tuple[list[dict[str, PropertyValue]], bool]:
    """The properties column decoded, and whether its values may hold text."""
    if not isinstance(props, list) or len(props) != n:
        raise InvalidArgument(f"{_PROPS} must be a list of {n} objects or nulls.")
    if set(map(type, props)) == {dict}:
        types = _plain(props)
        if types is not None:  # parsed JSON: every message has a dict of its own
            return props, str in types
    return list(map(_decode_properties, props)), True


def _decode_properties(props: Any) -> dict[str, PropertyValue]:
    if props is None:
        return {}
    if not isinstance(props, dict):
        raise InvalidArgument("each message's properties must be a JSON object or null.")
    return {k: decode_value(k, v) for k, v in props.items()}


def decode_batch(data: Any) -> list[Message]:
    """:class:`~aiosb.Message` objects from the batch encoding (parsed JSON, whose lists
    and objects they take over), validated as :class:`~aiosb.Message` validates.

    Raises:
        InvalidArgument: Not an object, an unknown key, a column of the wrong type or
            length, bad base64.
        InvalidOperation: What :class:`~aiosb.Message` refuses (PT-7 and the like).
    """
    bodies, columns, valid = _batch(data)
    n = len(bodies)
    if not valid:
        # Something Message refuses: let it say what, exactly as it always does.
        return [
            Message(body, **dict(zip(columns, row, strict=True)))
            for body, *row in zip(bodies, *columns.values(), strict=True)
        ]
    return _build_messages(
        zip(bodies, *(columns.get(name) or _repeat(None, n) for name in _FIELDS), strict=True)
    )


def decode_batch_columns(data: Any) -> tuple[list[bytes], dict[str, list[Any]]] | None:
    """What :func:`decode_batch` gives, as the bodies and, by field name of
    :class:`~aiosb.Message`, a list of each message's value (a field left out: ``None``
    for every message), validated as :class:`~aiosb.Message` validates: no message
    object per message (a send the server stores as columns, #16). ``None`` when a
    message would be refused or normalised: :func:`decode_batch` says how.

    Raises:
        InvalidArgument: As :func:`decode_batch`.
    """
    bodies, columns, valid = _batch(data)
    return (bodies, columns) if valid else None


def _batch(data: Any) -> tuple[list[bytes], dict[str, list[Any]], bool]:
    """The bodies of a batch, its columns by field name (those it has), and whether
    :class:`~aiosb.Message` takes every message as it is."""
    if not isinstance(data, dict):
        raise InvalidArgument(f"a batch must be a JSON object, not {type(data).__name__}.")
    unknown = sorted(data.keys() - _BATCH_KEYS)
    if unknown:
        raise InvalidArgument(f"unknown batch column(s): {', '.join(unknown)[:200]}.")
    bodies = _bodies(data)
    n = len(bodies)
    if not n:
        raise InvalidArgument("a batch needs at least one message (body_sizes is empty).")
    columns: dict[str, list[Any]] = {}
    for name in _TEXT_FIELDS:
        if name in data:  # most are absent: no call for them (#16)
            values = _values(data, name, n, str)
            if values is not None:
                columns[name] = values
    ttls = _values(data, _TTL, n, int, "whole microseconds (at most 2**62)")
    if ttls is not None:
        if any(t is not None and t > 2**62 for t in ttls):
            raise InvalidArgument(f"{_TTL} must be whole microseconds, at most 2**62.")
        columns[_TTL] = [None if t is None else _dt.timedelta(microseconds=t) for t in ttls]
    ats = _values(data, _AT, n, str)
    if ats is not None:
        columns[_AT] = [None if t is None else _parse_iso(_AT, t) for t in ats]
    props = data.get(_PROPS)
    if props is not None:
        columns[_PROPERTIES] = _properties_column(props, n)[0]
    extras = _values(data, _EXTRA, n, str, "base64 text")
    if extras is not None:
        columns[_EXTRA] = [None if e is None else _base64(_EXTRA, e) for e in extras]
    return bodies, columns, _valid(bodies, columns)


def _valid(bodies: list[bytes], columns: dict[str, list[Any]]) -> bool:
    """Whether :class:`~aiosb.Message` takes every message of these columns as it is
    (:func:`aiosb.protocol.check_columns` says nothing); if not, :func:`decode_batch`
    lets Message say what, or normalise it."""
    try:
        check_columns(bodies, columns)
    except (InvalidArgument, InvalidOperation):
        return False
    return True


def decode_received_batch(data: dict[str, Any]) -> list[ReceivedMessage]:
    """:class:`~aiosb.ReceivedMessage` objects from the server's batch encoding."""
    bodies, columns = _received_columns(data)
    if not bodies:
        return []
    n = len(bodies)
    return _build_received(zip(bodies, *(
        columns.get(name) or _repeat(_RECEIVED_DEFAULTS.get(name), n) for name in _COLUMNS
    ), strict=True))


def decode_received_columns(data: dict[str, Any]) -> tuple[list[bytes], dict[str, list[Any]]]:
    """What :func:`decode_received_batch` gives, as the bodies and, by field name of
    :class:`~aiosb.ReceivedMessage`, a list of each message's value (a field left out
    has its default): no message object per message (``ColumnTransport``, #16)."""
    bodies, columns = _received_columns(data)
    props = columns.pop(_PROPS, None)
    if props is not None:
        columns[_PROPERTIES] = props
    return bodies, columns


def _received_columns(data: dict[str, Any]) -> tuple[list[bytes], dict[str, list[Any]]]:
    """The bodies of a received batch and the columns it has (by wire name), each a
    list of one value per message."""
    bodies = _bodies(data)
    n = len(bodies)
    columns: dict[str, list[Any]] = {}
    if not n:
        return bodies, columns
    for name in _COLUMNS:
        column = data.get(name)
        if column is None:
            continue
        if name == _TTL:
            column = [None if t is None else _dt.timedelta(microseconds=t)
                      for t in _expand(column, n)]
        elif name == _AT:
            column = [None if t is None else _dt.datetime.fromisoformat(t)
                      for t in _expand(column, n)]
        elif name == _PROPS:
            column = _properties_column(column, n)[0]
        elif name == _EXTRA:
            column = [None if e is None else base64.b64decode(e) for e in _expand(column, n)]
        elif type(column) is not list:
            column = [column] * n
        if len(column) != n:
            raise InvalidArgument(f"the server answered {len(column)} {name} for {n} messages.")
        columns[name] = column
    return bodies, columns


def received_columns_of(
    messages: Sequence[ReceivedMessage],
) -> tuple[list[bytes], dict[str, list[Any]]]:
    """Received messages as the bodies and the columns of their fields (by field name):
    what a transport that receives message objects gives as columns."""
    columns = dict(zip(_SENT_FIELDS, _sent_values(messages), strict=True))
    columns.update(zip(_RECEIVED_NAMES, _received_values(messages), strict=True))
    return [m.body for m in messages], columns


def encode_batch_columns(
    bodies: list[bytes], columns: dict[str, Any], raw: bool = False
) -> dict[str, Any]:
    """Messages given as columns of their sent fields (by field name: a list with each
    message's value, or one value every message has) in the batch encoding, as
    :func:`encode_batch` writes messages (``raw``: the bodies as bytes, to be framed)."""
    return _encode_columns(bodies, columns, (), raw)


def _expand(column: Any, n: int) -> list[Any]:
    return column if type(column) is list else [column] * n
