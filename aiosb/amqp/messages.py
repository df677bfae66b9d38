"""AMQP messages and :class:`aiosb.message.Message`: the sections of a transfer's payload
read into the broker's messages (and, for deliveries, written back).

The map, field by field (``MESSAGE_FIELDS``)::

    body                    data sections, joined; an amqp-value binary or string as its
                            bytes; any other value, or a sequence, as the encoded body
                            sections
    message_id              properties.message-id (a uuid, ulong or binary as text)
    session_id              properties.group-id
    partition_key           message-annotations x-opt-partition-key
    time_to_live            header.ttl (milliseconds)
    scheduled_enqueue_time  message-annotations x-opt-scheduled-enqueue-time
    content_type            properties.content-type
    correlation_id          properties.correlation-id
    subject                 properties.subject
    reply_to                properties.reply-to
    reply_to_session_id     properties.reply-to-group-id
    to                      properties.to
    application_properties  application-properties (com.microsoft:timespan as timedelta)
    amqp_extra              the rest, encoded as sent: the header's durable, priority and
                            first-acquirer; delivery annotations; message annotations
                            but the broker's; user-id, content-encoding, group-sequence
                            (and an id that is not a string); the body sections unless
                            one data section;
                            the footer. Written back in place on delivery (_receiving).

A batch (message format ``0x80013700``) is one transfer whose data sections are each a
whole encoded message.
"""

from __future__ import annotations

import datetime as _dt
import operator
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument
from ..message import MESSAGE_FIELDS, Message
from .codec import DecodeError, Described, Raw, Symbol, ULong, decode, elements, encode
from .performatives import BATCH_FORMAT

__all__ = [
    "Sections", "columns_of", "messages_of", "reply_payload", "sections_of", "to_message",
]

HEADER, DELIVERY_ANNOTATIONS, ANNOTATIONS, PROPERTIES, APP_PROPERTIES = range(0x70, 0x75)
DATA, SEQUENCE, VALUE, FOOTER = range(0x75, 0x79)

#: The sections by their symbolic descriptors, which a peer may send instead of codes.
SECTION_CODES = {
    Symbol(f"amqp:{name}"): code for code, name in enumerate((
        "header:list", "delivery-annotations:map", "message-annotations:map",
        "properties:list", "application-properties:map", "data:binary",
        "amqp-sequence:list", "amqp-value:*", "footer:map",
    ), start=HEADER)
}
PARTITION_KEY = Symbol("x-opt-partition-key")
SCHEDULED_AT = Symbol("x-opt-scheduled-enqueue-time")
TIMESPAN = "com.microsoft:timespan"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
#: The fields this module maps; tests/amqp_server checks it is every field of a Message.
MAPPED = frozenset(MESSAGE_FIELDS)


@dataclass(slots=True)
class Sections:
    """The sections of one AMQP message, as decoded; the ``raw_*`` fields keep what a
    peer sent as it was encoded, to be written back unchanged."""

    header: list[Any] | None = None
    annotations: dict[Any, Any] | None = None
    properties: list[Any] | None = None
    application_properties: dict[Any, Any] | None = None
    data: list[bytes] = field(default_factory=list)
    value: Any = None
    has_value: bool = False
    sequence: list[Any] | None = None
    #: The encoded value (a list) of the header section.
    raw_header: bytes | None = None
    #: The whole delivery-annotations section.
    raw_delivery_annotations: bytes | None = None
    #: The encoded value (a map) of the message-annotations section.
    raw_annotations: bytes | None = None
    #: The encoded value (a list) of the properties section.
    raw_properties: bytes | None = None
    #: The body sections (data, amqp-sequence or amqp-value), whole, in order.
    raw_body: bytes = b""
    #: The whole footer section.
    raw_footer: bytes | None = None


def sections_of(payload: bytes) -> Sections:
    """The sections of an encoded message.

    Raises:
        DecodeError: Not a sequence of described sections.
    """
    out = Sections()
    pos = 0
    end = len(payload)
    body: list[bytes] = []
    while pos < end:
        start = pos
        section, pos = decode(payload, pos)
        if not isinstance(section, Described):
            raise DecodeError("a message section is not a described value.")
        code, value = section
        code = SECTION_CODES.get(code, code)
        if code in (DATA, VALUE, SEQUENCE):
            body.append(payload[start:pos])
            if code == DATA:
                out.data.append(value)
            elif code == VALUE:
                out.value, out.has_value = value, True
            else:
                out.sequence = (out.sequence or []) + [value]
            continue
        # The value, past the descriptor (a smallulong code, as the SDKs write it).
        inner = payload[start + 3 if payload[start + 1] == 0x53 else
                        decode(payload, start + 1)[1]:pos]
        if code == PROPERTIES:
            out.properties, out.raw_properties = value, inner
        elif code == APP_PROPERTIES:
            out.application_properties = value
        elif code == ANNOTATIONS:
            out.annotations, out.raw_annotations = value, inner
        elif code == HEADER:
            out.header, out.raw_header = value, inner
        elif code == DELIVERY_ANNOTATIONS:
            out.raw_delivery_annotations = payload[start:pos]
        elif code == FOOTER:
            out.raw_footer = payload[start:pos]
        else:
            raise DecodeError(f"unknown message section {code!r}.")
    if body:
        out.raw_body = b"".join(body)
    return out


def messages_of(payload: bytes, message_format: int) -> list[Message]:
    """The messages one transfer carries: one, or a batch's.

    Raises:
        DecodeError: The payload is not an AMQP message.
        InvalidArgument: A message Service Bus cannot take (aiosb's checks).
    """
    outer = sections_of(payload)
    if message_format == BATCH_FORMAT:
        return [to_message(sections_of(inner)) for inner in outer.data]
    return [to_message(outer)]


#: Properties fields by position, as columns (by field name of Message) take them; the
#: other positions must be null for a message to go as columns (they go to amqp_extra).
_PROPERTY_COLUMNS = {0: "message_id", 2: "to", 3: "subject", 4: "reply_to",
                     5: "correlation_id", 6: "content_type", 10: "session_id",
                     12: "reply_to_session_id"}
_COLUMN_NAMES = (*_PROPERTY_COLUMNS.values(), "application_properties")
_STR_LENGTH = {0xA1: 1, 0xA3: 1, 0xB1: 4, 0xB3: 4}  # str8, sym8, str32, sym32
_u32 = int.from_bytes


def columns_of(payload: bytes, message_format: int) -> tuple[list[bytes], dict[str, Any]] | None:
    """The messages of a transfer (one, or a batch's) as the broker's columns (bodies, and
    by field name a list of each message's value), when each has the shape the SDKs send
    most: a
    properties section of strings, application properties, and one data section. Read
    with no object per message and no second look at its bytes (#36: a batch of 100
    over AMQP cost the server several times what it costs over HTTP, which sends
    columns). ``None`` when any message has more (a header, annotations, another body,
    a typed id ...): :func:`messages_of` reads those, field by field.
    """
    try:
        if message_format == 0:  # one message: read alike, its fields or none
            rows = [_message_row(payload)]
        elif message_format == BATCH_FORMAT:
            alike = _look_alikes(payload)
            if alike is not None:
                return alike
            rows = [_message_row(message) for message in _data_sections(payload)]
        else:
            return None
    except (IndexError, UnicodeDecodeError, ValueError):  # DecodeError is a ValueError
        return None  # messages_of says what is wrong, if anything is
    if not rows or None in rows:
        return None
    bodies, *fields = map(list, zip(*rows, strict=True))
    columns = {
        name: values for name, values in zip(_COLUMN_NAMES, fields, strict=True)
        if values.count(None) != len(values)
    }
    return bodies, columns


def _data_sections(payload: bytes) -> list[bytes]:
    """The data sections of a batch (each a whole message), the rest skipped."""
    out: list[bytes] = []
    append = out.append
    pos, end = 0, len(payload)
    while pos < end:
        if payload[pos:pos + 3] == b"\x00Su":  # a data section
            c = payload[pos + 3]
            if c == 0xA0:
                n, start = payload[pos + 4], pos + 5
            elif c == 0xB0:
                n, start = _u32(payload[pos + 4:pos + 8]), pos + 8
            else:
                raise ValueError("a data section that is not binary")
            pos = start + n
            if pos > end:
                raise ValueError("a data section cut short")
            append(payload[start:pos])
        else:
            _, pos = decode(payload, pos)  # the batch's own properties, say
    return out


_NO_TEXTS: list[str | None] = [None] * 13
_row_texts = operator.itemgetter(*_PROPERTY_COLUMNS)
_tail_texts = operator.itemgetter(*list(_PROPERTY_COLUMNS)[1:])
#: What follows a string message-id in a properties list (its bytes) as the columns'
#: values, with the list's count: each SDK message has an id of its own, and the same
#: rest (the SDKs send a uuid and twelve nulls). Bounded: emptied when full.
_TAILS: dict[bytes, tuple[int, tuple[str | None, ...]]] = {}
_TAILS_KEPT = 256
_NO_TAIL = (0, ())


def _quick(buf: bytes, at: int, end: int) -> tuple[bytes, str, tuple[Any, ...]] | None:
    """The message from ``at`` to ``end`` of ``buf`` in the shape the official SDKs send
    most, read in a few steps (#36): a properties list8 whose first item is a str8 id and
    whose rest was seen before (:data:`_TAILS`), then one data section to the message's
    end. Its body, its id and the rest's entry; ``None`` for any other shape."""
    if end > len(buf) or buf[at + 3] != 0xC0 or buf[at + 6] != 0xA1 \
            or buf[at:at + 3] != b"\x00Ss":
        return None
    rest = at + 8 + buf[at + 7]  # past the id
    data = at + 5 + buf[at + 4]  # past the list
    tail = _TAILS.get(buf[rest:data]) if rest <= data else None
    if tail is None or tail[0] != buf[at + 5] or buf[data:data + 3] != b"\x00Su":
        return None
    c = buf[data + 3]
    if c == 0xA0 and data + 5 + buf[data + 4] == end:
        return buf[data + 5:end], buf[at + 8:rest].decode(), tail
    if c == 0xB0 and data + 8 + _u32(buf[data + 4:data + 8]) == end:
        return buf[data + 8:end], buf[at + 8:rest].decode(), tail
    return None


def _look_alikes(payload: bytes) -> tuple[list[bytes], dict[str, Any]] | None:
    """The columns of a batch whose messages all have the quick shape (:func:`_quick`)
    and one rest after their ids (what one SDK sender sends): the bodies, the ids, and
    the rest's values once for all; ``None`` for any other batch. Read in place: no
    message is cut out of the batch first."""
    bodies: list[bytes] = []
    ids: list[str] = []
    shared: tuple[int, tuple[str | None, ...]] = _NO_TAIL
    pos, end = 0, len(payload)
    while pos < end:
        if payload[pos:pos + 3] != b"\x00Su":  # not a data section
            _, pos = decode(payload, pos)  # the batch's own properties, say
            continue
        c = payload[pos + 3]
        if c == 0xA0:
            at, pos = pos + 5, pos + 5 + payload[pos + 4]
        elif c == 0xB0:
            at, pos = pos + 8, pos + 8 + _u32(payload[pos + 4:pos + 8])
        else:
            return None
        quick = _quick(payload, at, pos)
        if quick is None:
            return None
        body, mid, tail = quick
        if tail is not shared:
            if shared is not _NO_TAIL:
                return None  # another rest: row by row
            shared = tail
        bodies.append(body)
        ids.append(mid)
    if shared is _NO_TAIL:
        return None
    columns: dict[str, Any] = {"message_id": ids}
    for name, value in zip(_COLUMN_NAMES[1:], shared[1], strict=False):
        if value is not None:
            columns[name] = value  # one value, every message's
    return bodies, columns


def _message_row(buf: bytes) -> tuple[Any, ...] | None:
    """One message as a row (body, the property columns' values, its application
    properties); ``None`` if it has more than the columns hold: the quick shape
    (:func:`_quick`), else section by section (:func:`_sections_row`)."""
    quick = _quick(buf, 0, len(buf))
    if quick is not None:
        body, mid, tail = quick
        return (body, mid, *tail[1], None)
    return _sections_row(buf)


def _sections_row(buf: bytes) -> tuple[Any, ...] | None:
    """:func:`_message_row`, section by section."""
    pos, end = 0, len(buf)
    body: bytes | None = None
    texts: list[str | None] = _NO_TEXTS
    props: dict[str, Any] | None = None
    while pos < end:
        if buf[pos] != 0 or buf[pos + 1] != 0x53:
            return None
        code = buf[pos + 2]
        pos += 3
        if code == DATA:
            if body is not None:
                return None  # several data sections: amqp_extra keeps them
            c = buf[pos]
            if c == 0xA0:
                n, pos = buf[pos + 1], pos + 2
            elif c == 0xB0:
                n, pos = _u32(buf[pos + 1:pos + 5]), pos + 5
            else:
                return None
            if pos + n > end:
                return None
            body, pos = buf[pos:pos + n], pos + n
        elif code == PROPERTIES:
            c = buf[pos]
            if c == 0x45:
                pos += 1
                continue
            if c == 0xC0:
                count, items_end, pos = buf[pos + 2], pos + 2 + buf[pos + 1], pos + 3
            elif c == 0xD0:
                count, pos = _u32(buf[pos + 5:pos + 9]), pos + 9
                items_end = pos - 4 + _u32(buf[pos - 8:pos - 4])
            else:
                return None
            if count > 13 or items_end > end:
                return None
            texts = [None] * 13
            first = buf[pos] == 0xA1 and c == 0xC0
            for i in range(count):
                if items_end - pos == count - i == buf.count(0x40, pos, items_end):
                    pos = items_end  # the rest are nulls
                    break
                c = buf[pos]
                if c == 0x40:
                    pos += 1
                    continue
                width = _STR_LENGTH.get(c)
                if width is None or i not in _PROPERTY_COLUMNS:
                    return None  # a typed id, a time, user-id ...: field by field
                n = buf[pos + 1] if width == 1 else _u32(buf[pos + 1:pos + 5])
                start = pos + 1 + width
                pos = start + n
                if pos > items_end:
                    return None
                texts[i] = buf[start:pos].decode()
                if first and i == 0:
                    id_end = pos
            if pos != items_end:
                return None
            if first:  # the rest of such a list, for the next message (_message_row)
                if len(_TAILS) >= _TAILS_KEPT:
                    _TAILS.clear()
                _TAILS[buf[id_end:items_end]] = (count, _tail_texts(texts))
        elif code == APP_PROPERTIES:
            value, pos = decode(buf, pos)
            if not isinstance(value, dict):
                return None
            props = {_name(k): _property(v) for k, v in value.items()} if value else None
        else:
            return None
    if body is None:
        return None
    return (body, *_row_texts(texts), props)


def _text_id(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, (uuid.UUID, int)):
        return str(value)
    raise InvalidArgument(f"a message or correlation id of type {type(value).__name__} "
                          "is not one AMQP allows.")


def _text(value: Any, name: str) -> str | None:
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    raise InvalidArgument(f"{name} must be a string, not {type(value).__name__}.")


def _name(key: Any) -> str:
    if isinstance(key, str):
        return str(key)
    raise InvalidArgument(
        f"application property names must be strings, not {type(key).__name__}."
    )


def _property(value: Any) -> Any:
    if isinstance(value, Described):
        if value.descriptor == TIMESPAN and isinstance(value.value, int):
            return _dt.timedelta(microseconds=value.value // 10)
        return value  # Message refuses it, naming the property
    if type(value) is Symbol:
        return str(value)
    return value


def _instant(value: Any) -> _dt.datetime | None:
    if value is None or isinstance(value, _dt.datetime):
        return value
    if isinstance(value, int):
        return _EPOCH + _dt.timedelta(milliseconds=value)
    raise InvalidArgument(f"{SCHEDULED_AT} must be a timestamp, not {type(value).__name__}.")


def _body(sections: Sections) -> bytes:
    """The body as :attr:`~aiosb.Message.body` holds it: data sections joined; a binary
    or string value as its bytes; any other value, or a sequence, as the encoded body
    sections (what a REST receiver gets; the sections travel in ``amqp_extra``)."""
    if sections.data:
        return sections.data[0] if len(sections.data) == 1 else b"".join(sections.data)
    if sections.has_value and sections.sequence is None:
        value = sections.value
        if isinstance(value, bytes):
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
        if value is None:
            return b""
    return sections.raw_body


#: Annotations the broker sets or maps to fields: a sender's are not kept as sent.
_BROKER_NOTES = frozenset(map(Symbol, (
    PARTITION_KEY, SCHEDULED_AT, "x-opt-sequence-number", "x-opt-enqueued-time",
    "x-opt-locked-until", "x-opt-message-state", "x-opt-deadletter-source",
    "x-opt-enqueue-sequence-number", "x-opt-lock-token",
)))
#: The header's fields kept as sent: durable, priority, first-acquirer (the time to
#: live is a field; the delivery count is the broker's).
HEADER_KEPT = frozenset((0, 1, 3))
#: The properties no field holds: user-id, content-encoding, group-sequence. Not the
#: absolute-expiry-time and creation-time: the SDKs derive them from the time to live,
#: which is a field, and the broker's enqueue and expiry times stand for them.
PROPERTIES_KEPT = frozenset((1, 7, 11))
#: The ids, kept as sent when they are not strings (a uuid, ulong or binary id).
PROPERTIES_IDS = (0, 5)
_NULL = Raw(b"\x40")


def _kept(raw: bytes | None, keep: frozenset[int]) -> list[Raw | None] | None:
    """The elements of an encoded list at the positions ``keep`` names (others null),
    without trailing nulls; ``None`` when none is set."""
    if raw is None:
        return None
    items, _ = elements(raw)
    out: list[Raw | None] = [
        item if i in keep and item != _NULL else None for i, item in enumerate(items)
    ]
    while out and out[-1] is None:
        out.pop()
    return out or None


def notes_kept(raw: bytes | None, skip: frozenset[Any] = _BROKER_NOTES) -> dict[Raw, Raw]:
    """The entries of an encoded map whose keys are not in ``skip``, as encoded."""
    if raw is None:
        return {}
    items, _ = elements(raw)
    return {
        key: value for key, value in zip(items[::2], items[1::2], strict=True)
        if decode(key)[0] not in skip
    }


def _any_at(values: list[Any] | None, keep: frozenset[int]) -> bool:
    """Whether a decoded list has a value at one of the positions ``keep`` names."""
    return values is not None and any(
        values[i] is not None for i in keep if i < len(values)
    )


def _extra(sections: Sections) -> bytes | None:
    """The sections of the message no field of :class:`~aiosb.Message` holds, encoded
    (see ``Message.amqp_extra``), or ``None``. What a message of the common kind has
    (one data section, fields aiosb maps) is found out from the decoded values, with no
    second look at the bytes: this runs for every message sent over AMQP (#36)."""
    out = bytearray()
    if _any_at(sections.header, HEADER_KEPT):
        header = _kept(sections.raw_header, HEADER_KEPT)
        if header:
            out += encode(Described(ULong(HEADER), header))
    if sections.raw_delivery_annotations is not None:
        out += sections.raw_delivery_annotations
    if sections.annotations and not sections.annotations.keys() <= _BROKER_NOTES:
        notes = notes_kept(sections.raw_annotations)
        if notes:
            out += encode(Described(ULong(ANNOTATIONS), notes))
    props = sections.properties
    if props:
        keep = PROPERTIES_KEPT | {
            i for i in PROPERTIES_IDS
            if i < len(props) and props[i] is not None and not isinstance(props[i], str)
        }
        if _any_at(props, keep):
            kept = _kept(sections.raw_properties, keep)
            if kept:
                out += encode(Described(ULong(PROPERTIES), kept))
    if len(sections.data) != 1 or sections.has_value or sections.sequence is not None:
        out += sections.raw_body
    if sections.raw_footer is not None:
        out += sections.raw_footer
    return bytes(out) or None


def to_message(sections: Sections) -> Message:
    """The :class:`~aiosb.message.Message` an AMQP message carries.

    Raises:
        InvalidArgument: A field Service Bus cannot take.
    """
    props: list[Any] = list(sections.properties or ())
    if len(props) < 13:
        props += [None] * (13 - len(props))
    header = sections.header
    ttl_ms = header[2] if header and len(header) > 2 else None
    if ttl_ms is not None and (type(ttl_ms) is bool or not isinstance(ttl_ms, int)):
        raise InvalidArgument(
            f"header.ttl must be milliseconds (a uint), not {type(ttl_ms).__name__}."
        )
    notes = sections.annotations or {}
    app = sections.application_properties
    return Message(
        _body(sections),
        message_id=_text_id(props[0]),
        to=_text(props[2], "to"),
        subject=_text(props[3], "subject"),
        reply_to=_text(props[4], "reply-to"),
        correlation_id=_text_id(props[5]),
        content_type=_text(props[6], "content-type"),
        session_id=_text(props[10], "group-id"),
        reply_to_session_id=_text(props[12], "reply-to-group-id"),
        time_to_live=_dt.timedelta(milliseconds=ttl_ms) if ttl_ms else None,
        partition_key=_text(notes.get(PARTITION_KEY), str(PARTITION_KEY)),
        scheduled_enqueue_time=_instant(notes.get(SCHEDULED_AT)),
        application_properties=(
            {_name(key): _property(value) for key, value in app.items()} if app else {}
        ),
        amqp_extra=_extra(sections),
    )


def reply_payload(correlation_id: Any, application_properties: dict[str, Any]) -> bytes:
    """A management reply: properties carrying ``correlation_id`` (the request's
    message-id) and the application properties (status code and description)."""
    return encode(Described(ULong(PROPERTIES), [None, None, None, None, None, correlation_id])) \
        + encode(Described(ULong(APP_PROPERTIES), application_properties))
