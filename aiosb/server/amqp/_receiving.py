"""Receiver links: the broker's messages as AMQP deliveries, and the client's
dispositions as settlements.

- A delivery's tag is its lock token (a UUID, little-endian bytes, as the SDKs read it);
  receive-and-delete deliveries are sent settled.
- Delivery annotations, as Service Bus writes them: ``x-opt-lock-token`` (the lock token
  as a uuid) on a locked delivery, an empty map on one that holds no lock (received and
  deleted, or peeked); a sender's own delivery annotations are kept beside it.
- Broker state travels as message annotations (``x-opt-sequence-number``,
  ``x-opt-enqueued-time``, ``x-opt-locked-until``, ``x-opt-message-state``, ...) and the
  dead-letter reason and description as application properties.
- Dispositions: ``accepted`` completes, ``modified`` abandons (or defers, when
  undeliverable-here; its message annotations are properties to modify), ``rejected``
  dead-letters (reason and description from the error's info, whose other entries are
  properties to modify, as .NET sends them), ``released`` returns the message without
  counting the delivery (as Service Bus does; AMQP 3.4.4). The server settles
  each with the outcome the client sent (a rejection without its error: the SDK reads an
  error as a failed settlement), or with ``rejected`` carrying the broker's error when
  the settlement failed.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import struct
import uuid
from typing import Any

from ...message import ReceivedMessage
from ...protocol import SettleAction, Settlement
from . import performatives as p
from .codec import (
    DecodeError,
    Described,
    Int,
    Symbol,
    UInt,
    ULong,
    decode,
    elements,
    encode,
    encode_into,
    put_compound,
    put_long,
    put_uint,
    put_variable,
)
from .messages import (
    ANNOTATIONS,
    APP_PROPERTIES,
    DATA,
    DELIVERY_ANNOTATIONS,
    HEADER,
    NO_BODY,
    PARTITION_KEY,
    PROPERTIES,
    SCHEDULED_AT,
    Sections,
    notes_kept,
    sections_of,
)

__all__ = ["delivery_payload", "delivery_tag", "settlement_of"]

_log = logging.getLogger("aiosb.server.amqp")

_STATES = {"active": 0, "deferred": 1, "scheduled": 2}
_SEQUENCE = Symbol("x-opt-sequence-number")
_ENQUEUED = Symbol("x-opt-enqueued-time")
_LOCKED_UNTIL = Symbol("x-opt-locked-until")
_STATE = Symbol("x-opt-message-state")
_DLQ_SOURCE = Symbol("x-opt-deadletter-source")
_REASON = "DeadLetterReason"
_DESCRIPTION = "DeadLetterErrorDescription"
_MILLISECOND = _dt.timedelta(milliseconds=1)
# The annotation keys and state values as encoded, for the byte-by-byte writer.
_SEQUENCE_KEY, _ENQUEUED_KEY, _STATE_KEY, _LOCKED_UNTIL_KEY, _PARTITION_KEY, \
    _SCHEDULED_KEY, _DLQ_SOURCE_KEY = (encode(key) for key in (
        _SEQUENCE, _ENQUEUED, _STATE, _LOCKED_UNTIL, PARTITION_KEY, SCHEDULED_AT, _DLQ_SOURCE))
_STATE_VALUES = {name: encode(value) for name, value in _STATES.items()}
_TIMESTAMP = struct.Struct(">Bq")
_HEADER_HEAD, _ANNOTATIONS_HEAD, _PROPERTIES_HEAD, _DATA_HEAD = (
    bytes((0x00, 0x53, code)) for code in (HEADER, ANNOTATIONS, PROPERTIES, DATA))
_LOCK_TOKEN = Symbol("x-opt-lock-token")
#: The delivery annotations of a delivery without a lock (an empty map), and those of
#: one with a lock up to its token's 16 bytes (one entry: x-opt-lock-token, a uuid).
_NO_NOTES = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, 0x01, 0x00))
_LOCK_NOTE_HEAD = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, 36, 0x02)) \
    + encode(_LOCK_TOKEN) + b"\x98"


def _instant(seconds: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(seconds, _dt.UTC)


def _token_bytes(token: str) -> bytes:
    """A lock token's 16 bytes, big-endian (an AMQP uuid)."""
    try:
        raw = bytes.fromhex(token.replace("-", ""))  # the canonical form, quickly
    except ValueError:
        raw = b""
    return raw if len(raw) == 16 else uuid.UUID(token).bytes


def delivery_tag(message: ReceivedMessage) -> bytes:
    """The delivery tag: the lock token's little-endian bytes; empty for a delivery with no
    lock (received and deleted), as Service Bus sends it (the SDKs then give no lock
    token, where 16 zero bytes read as the lock token 00000000-...)."""
    token = message.lock_token
    if token is None:
        return b""
    raw = _token_bytes(token)
    return raw[3::-1] + raw[5:3:-1] + raw[7:5:-1] + raw[8:]


def delivery_payload(m: ReceivedMessage, *, delivered: bool = True) -> bytes:
    """A received message as the sections of an AMQP message; ``delivered``: handed out
    now (a receive), not peeked.

    A locked delivery names its lock token in its delivery annotations
    (``x-opt-lock-token``), as Service Bus's do; one without a lock has an empty map.
    The header's delivery-count is, as AMQP defines it, the number of earlier deliveries:
    Service Bus writes its count less this delivery, so the Python and JavaScript SDKs
    read 0 on a first receive and .NET adds the one back. A peek hands nothing out.

    Written byte by byte (#36: through the general encoder, a delivery cost the server
    five times a whole HTTP receive of it); a message that carries sections no field
    holds (``amqp_extra``) is put together section by section instead
    (:func:`_payload_kept`), and both write the same bytes for the same fields.
    """
    count = m.delivery_count - 1 if delivered and m.delivery_count else m.delivery_count
    if m.amqp_extra is not None:
        extra = _extra(m)
        if extra is not None:
            return _payload_kept(m, count, extra, delivered)
    ttl = m.time_to_live
    out = bytearray(_HEADER_HEAD)
    head = bytearray(b"\x40\x40")
    if ttl is None:
        head.append(0x40)
    else:
        put_uint(head, ttl // _MILLISECOND)
    head.append(0x40)
    put_uint(head, count)
    put_compound(out, 0xC0, 0xD0, 5, head)
    token = m.lock_token
    if delivered and token is not None:
        out += _LOCK_NOTE_HEAD
        out += _token_bytes(token)
    else:
        out += _NO_NOTES
    notes = bytearray(_SEQUENCE_KEY)
    put_long(notes, m.sequence_number)
    notes += _ENQUEUED_KEY
    notes += _TIMESTAMP.pack(0x83, _epoch_millis(m.enqueued_timestamp))
    pairs = 2
    state = _STATE_VALUES.get(m.state) if m.state != "active" else None
    if state is not None:  # as Service Bus: an active message's state goes unsaid
        notes += _STATE_KEY
        notes += state
        pairs += 1
    if m.locked_until_timestamp is not None:
        notes += _LOCKED_UNTIL_KEY
        notes += _TIMESTAMP.pack(0x83, _epoch_millis(m.locked_until_timestamp))
        pairs += 1
    for key, value in ((_PARTITION_KEY, m.partition_key),
                       (_SCHEDULED_KEY, m.scheduled_enqueue_time),
                       (_DLQ_SOURCE_KEY, m.dead_letter_source)):
        if value is not None:
            notes += key
            encode_into(notes, value)
            pairs += 1
    out += _ANNOTATIONS_HEAD
    put_compound(out, 0xC1, 0xD1, 2 * pairs, notes)
    out += _PROPERTIES_HEAD
    fields = (m.message_id, None, m.to, m.subject, m.reply_to, m.correlation_id,
              m.content_type, None, None, None, m.session_id, None, m.reply_to_session_id)
    last = len(fields)
    while last and fields[last - 1] is None:
        last -= 1
    if last:
        props = bytearray()
        for i in range(last):
            text = fields[i]
            if text is None:
                props.append(0x40)
            elif i == 6:  # the content type is a symbol
                put_variable(props, 0xA3, 0xB3, text.encode("ascii"))
            else:
                encode_into(props, text)
        put_compound(out, 0xC0, 0xD0, last, props)
    else:
        out.append(0x45)
    app = _application(m)
    if app:
        encode_into(out, Described(ULong(APP_PROPERTIES), app))
    out += _DATA_HEAD
    put_variable(out, 0xA0, 0xB0, m.body)
    return bytes(out)


def _epoch_millis(seconds: float) -> int:
    """``seconds`` since the epoch as whole milliseconds, exactly as through an aware
    datetime (rounded half to even to the microsecond, then floored), without one."""
    fraction, whole = math.modf(seconds)
    return (int(whole) * 1_000_000 + round(fraction * 1e6)) // 1000


def _application(m: ReceivedMessage) -> dict[str, Any]:
    """A message's application properties as AMQP values, with the dead-letter reason
    and description."""
    app: dict[str, Any] = {}
    value: Any
    for key, value in m.application_properties.items():
        if isinstance(value, _dt.timedelta):
            value = Described(Symbol("com.microsoft:timespan"), value // _dt.timedelta(
                microseconds=1) * 10)
        elif type(value) is int and -(2**31) <= value < 2**31:
            value = Int(value)
        app[key] = value
    if m.dead_letter_reason is not None:
        app[_REASON] = m.dead_letter_reason
    if m.dead_letter_error_description is not None:
        app[_DESCRIPTION] = m.dead_letter_error_description
    return app


def _payload_kept(m: ReceivedMessage, count: int, extra: Sections, delivered: bool) -> bytes:
    """:func:`delivery_payload` for a message with sections no field holds: what the
    sender put goes back in place (:mod:`aiosb.server.amqp.messages`)."""
    ttl = m.time_to_live
    header = [None, None, None if ttl is None else UInt(ttl // _MILLISECOND),
              None, UInt(count)]
    notes: dict[Any, Any] = {
        _SEQUENCE: m.sequence_number,
        _ENQUEUED: _instant(m.enqueued_timestamp),
    }
    if m.state != "active" and m.state in _STATES:
        notes[_STATE] = _STATES[m.state]
    if m.locked_until_timestamp is not None:
        notes[_LOCKED_UNTIL] = _instant(m.locked_until_timestamp)
    if m.partition_key is not None:
        notes[PARTITION_KEY] = m.partition_key
    if m.scheduled_enqueue_time is not None:
        notes[SCHEDULED_AT] = m.scheduled_enqueue_time
    if m.dead_letter_source is not None:
        notes[_DLQ_SOURCE] = m.dead_letter_source
    properties = [m.message_id, None, m.to, m.subject, m.reply_to, m.correlation_id,
                  None if m.content_type is None else Symbol(m.content_type), None, None,
                  None, m.session_id, None, m.reply_to_session_id]
    _put(header, extra.raw_header)
    notes.update(notes_kept(extra.raw_annotations, frozenset((*notes, NO_BODY))))
    _put(properties, extra.raw_properties)
    while properties and properties[-1] is None:
        properties.pop()
    out = bytearray(encode(Described(ULong(HEADER), header)))
    kept = notes_kept(_map_of(extra.raw_delivery_annotations), frozenset((_LOCK_TOKEN,)))
    delivery_notes: dict[Any, Any] = {}
    if delivered and m.lock_token is not None:
        delivery_notes[_LOCK_TOKEN] = uuid.UUID(bytes=_token_bytes(m.lock_token))
    delivery_notes.update(kept)
    out += encode(Described(ULong(DELIVERY_ANNOTATIONS), delivery_notes))
    out += encode(Described(ULong(ANNOTATIONS), notes))
    out += encode(Described(ULong(PROPERTIES), properties))
    app = _application(m)
    if app:
        out += encode(Described(ULong(APP_PROPERTIES), app))
    if extra.raw_body:
        out += extra.raw_body
    elif not extra.bodyless:
        out += encode(Described(ULong(DATA), m.body))
    if extra.raw_footer:
        out += extra.raw_footer
    return bytes(out)


def _extra(m: ReceivedMessage) -> Sections | None:
    """The sections of ``m.amqp_extra``; ``None`` when it has none, or holds something
    that is not AMQP sections (then the message is delivered from its fields)."""
    if m.amqp_extra is None:
        return None
    try:
        return sections_of(m.amqp_extra)
    except DecodeError as exc:
        _log.warning("message %s: its amqp_extra is not AMQP sections (%s); delivered "
                     "without them.", m.sequence_number, exc)
        return None


def _map_of(section: bytes | None) -> bytes | None:
    """The encoded map of a whole annotations section (past its descriptor)."""
    if section is None:
        return None
    if section[1] == 0x53:
        return section[3:]
    return section[decode(section, 1)[1]:]


def _put(fields: list[Any], raw: bytes | None) -> None:
    """Set the fields of a list section that the encoded list ``raw`` sets (as encoded)."""
    if raw is None:
        return
    items, _ = elements(raw)
    if len(fields) < len(items):
        fields += [None] * (len(items) - len(fields))
    for i, item in enumerate(items):
        if item != b"\x40":
            fields[i] = item


def settlement_of(state: Any, lock_token: str, sub_queue: str | None
                  ) -> tuple[Settlement | None, Any]:
    """The settlement a disposition's ``state`` asks for, and the outcome to echo.

    ``None`` when the state settles nothing (``received``, or no state).
    """
    if not isinstance(state, Described):
        return None, state
    code = state.descriptor
    fields = state.value if isinstance(state.value, list) else []
    action: SettleAction
    reason = description = None
    props: dict[str, Any] | None = None
    echo = p.whole(state)
    if code == p.ACCEPTED:
        action = "complete"
    elif code == p.MODIFIED:
        undeliverable = len(fields) > 1 and bool(fields[1])
        action = "defer" if undeliverable else "abandon"
        notes = fields[2] if len(fields) > 2 and isinstance(fields[2], dict) else None
        props = {str(k): v for k, v in notes.items()} if notes else None
    elif code == p.RELEASED:
        # What the SDKs send for a message that arrived when no receive was waiting
        # (prefetch 0), and on close: Service Bus does not count such a delivery.
        action = "release"
    elif code == p.REJECTED:
        action = "dead_letter"
        error = fields[0] if fields else None
        if isinstance(error, Described) and isinstance(error.value, list):
            info = error.value[2] if len(error.value) > 2 else None
            if isinstance(info, dict):
                reason = info.get(_REASON)
                description = info.get(_DESCRIPTION)
                # The rest of the info are properties to modify (what .NET sends).
                props = {str(k): v for k, v in info.items()
                         if str(k) not in (_REASON, _DESCRIPTION)} or None
        echo = p.performative(p.REJECTED)
    else:
        return None, state
    return Settlement(action, [lock_token], sub_queue, reason, description, props), echo
