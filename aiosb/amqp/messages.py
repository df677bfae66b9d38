"""AMQP messages and :class:`aiosb.message.Message`: the sections of a transfer's payload
read into the broker's messages (and, for deliveries, written back).

The map, field by field (``MESSAGE_FIELDS``)::

    body                    data sections, joined (an amqp-value string or binary too)
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

A batch (message format ``0x80013700``) is one transfer whose data sections are each a
whole encoded message.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument
from ..message import MESSAGE_FIELDS, Message
from .codec import DecodeError, Described, Symbol, ULong, decode, encode
from .performatives import BATCH_FORMAT

__all__ = ["Sections", "messages_of", "reply_payload", "sections_of", "to_message"]

HEADER, DELIVERY_ANNOTATIONS, ANNOTATIONS, PROPERTIES, APP_PROPERTIES = range(0x70, 0x75)
DATA, SEQUENCE, VALUE, FOOTER = range(0x75, 0x79)

PARTITION_KEY = Symbol("x-opt-partition-key")
SCHEDULED_AT = Symbol("x-opt-scheduled-enqueue-time")
TIMESPAN = "com.microsoft:timespan"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
#: The fields this module maps; tests/amqp_server checks it is every field of a Message.
MAPPED = frozenset(MESSAGE_FIELDS)


@dataclass(slots=True)
class Sections:
    """The sections of one AMQP message, as decoded."""

    header: list[Any] | None = None
    annotations: dict[Any, Any] | None = None
    properties: list[Any] | None = None
    application_properties: dict[Any, Any] | None = None
    data: list[bytes] = field(default_factory=list)
    value: Any = None
    has_value: bool = False
    sequence: list[Any] | None = None


def sections_of(payload: bytes) -> Sections:
    """The sections of an encoded message.

    Raises:
        DecodeError: Not a sequence of described sections.
    """
    out = Sections()
    pos = 0
    end = len(payload)
    while pos < end:
        section, pos = decode(payload, pos)
        if not isinstance(section, Described):
            raise DecodeError("a message section is not a described value.")
        code, value = section
        if code == DATA:
            out.data.append(value)
        elif code == PROPERTIES:
            out.properties = value
        elif code == APP_PROPERTIES:
            out.application_properties = value
        elif code == ANNOTATIONS:
            out.annotations = value
        elif code == HEADER:
            out.header = value
        elif code == VALUE:
            out.value, out.has_value = value, True
        elif code == SEQUENCE:
            out.sequence = (out.sequence or []) + [value]
        elif code not in (DELIVERY_ANNOTATIONS, FOOTER):
            raise DecodeError(f"unknown message section {code!r}.")
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
    if sections.data:
        return sections.data[0] if len(sections.data) == 1 else b"".join(sections.data)
    if sections.has_value:
        value = sections.value
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode()
        if value is None:
            return b""
        raise InvalidArgument(
            f"an amqp-value body of type {type(value).__name__} is not supported; send "
            "data sections (bytes) or a string."
        )
    if sections.sequence is not None:
        raise InvalidArgument("amqp-sequence bodies are not supported; send data sections.")
    return b""


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
    )


def reply_payload(correlation_id: Any, application_properties: dict[str, Any]) -> bytes:
    """A management reply: properties carrying ``correlation_id`` (the request's
    message-id) and the application properties (status code and description)."""
    return encode(Described(ULong(PROPERTIES), [None, None, None, None, None, correlation_id])) \
        + encode(Described(ULong(APP_PROPERTIES), application_properties))
