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
    application_properties  application-properties, each value of its AMQP type
                            (aiosb.values: a long that fits 32 bits as Long, a symbol
                            as Symbol ...; com.microsoft:timespan as timedelta)
    amqp_extra              the rest, encoded as sent: the header's durable, priority and
                            first-acquirer; delivery annotations; message annotations
                            but the broker's; user-id, content-encoding, group-sequence
                            (and an id that is not a string); the body sections unless
                            one data section, and a message with no body section at all
                            marked so (the message annotation ``x-opt-aiosb-no-body``,
                            never delivered: the message goes back with no body, as
                            Service Bus keeps it); the footer. Written back in place on
                            delivery (_receiving).

A batch (message format ``0x80013700``) is one transfer whose data sections are each a
whole encoded message.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidArgument
from ...message import MESSAGE_FIELDS, Message
from .codec import (
    DecodeError,
    Described,
    Raw,
    Symbol,
    ULong,
    decode,
    decode_typed,
    elements,
    encode,
)
from .performatives import BATCH_FORMAT

__all__ = [
    "Sections", "application_properties", "messages_of", "reply_payload", "sections_of",
    "to_message",
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
_APP_HEAD = bytes((0x00, 0x53, APP_PROPERTIES))
PARTITION_KEY = Symbol("x-opt-partition-key")
#: aiosb's mark, in ``amqp_extra``'s message annotations, of a message sent with no body
#: section (``body`` is then empty): it is delivered back with none.
NO_BODY = Symbol("x-opt-aiosb-no-body")
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

    @property
    def bodyless(self) -> bool:
        """Whether these are ``amqp_extra``'s sections of a message sent with no body."""
        return self.annotations is not None and NO_BODY in self.annotations


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
        if payload.startswith(_APP_HEAD, pos):  # typed values, to go back as sent (#47)
            out.application_properties, pos = decode_typed(payload, pos + 3)
            continue
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
        elif code == APP_PROPERTIES:  # a symbolic descriptor: read again, typed
            out.application_properties = decode_typed(payload, pos - len(inner))[0]
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


def _utf8(value: Any) -> Any:
    """A binary as the text its UTF-8 spells (the Python SDK's synchronous sender can
    write the partition key as a binary, and Service Bus takes it: Microsoft's
    test_session_by_session_client_conn_str_receive_handler_peeklock); else as it is.

    Raises:
        InvalidArgument: The binary is not UTF-8.
    """
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise InvalidArgument("x-opt-partition-key is a binary that is not UTF-8 text.") \
                from None
    return value


def application_properties(section: dict[Any, Any]) -> dict[str, Any]:
    """An application-properties section as :attr:`~aiosb.Message.application_properties`
    holds it: each value of its AMQP type (#47), a ``com.microsoft:timespan`` as a
    timedelta (any other described value is left for Message to refuse, by name). Read
    here for a message field by field, and for a batch read as columns
    (``_batch_columns``).

    Raises:
        InvalidArgument: A property's name is not a string.
    """
    return {_name(key): _property(value) for key, value in section.items()}


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
    "x-opt-enqueue-sequence-number", "x-opt-lock-token", NO_BODY,
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
_NO_BODY_KEY, _TRUE = Raw(encode(NO_BODY)), Raw(b"\x41")


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
    notes = notes_kept(sections.raw_annotations) if sections.annotations and not \
        sections.annotations.keys() <= _BROKER_NOTES else {}
    bodyless = not sections.data and not sections.has_value and sections.sequence is None
    if bodyless:
        notes[_NO_BODY_KEY] = _TRUE
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
        partition_key=_text(_utf8(notes.get(PARTITION_KEY)), str(PARTITION_KEY)),
        scheduled_enqueue_time=_instant(notes.get(SCHEDULED_AT)),
        application_properties=(
            application_properties(app) if app else {}
        ),
        amqp_extra=_extra(sections),
    )


def reply_payload(correlation_id: Any, application_properties: dict[str, Any]) -> bytes:
    """A management reply: properties carrying ``correlation_id`` (the request's
    message-id) and the application properties (status code and description)."""
    return encode(Described(ULong(PROPERTIES), [None, None, None, None, None, correlation_id])) \
        + encode(Described(ULong(APP_PROPERTIES), application_properties))
