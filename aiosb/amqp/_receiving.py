"""Receiver links: the broker's messages as AMQP deliveries, and the client's
dispositions as settlements.

- A delivery's tag is its lock token (a UUID, little-endian bytes, as the SDKs read it);
  receive-and-delete deliveries are sent settled.
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
import uuid
from typing import Any

from ..message import ReceivedMessage
from ..protocol import SettleAction, Settlement
from . import performatives as p
from .codec import DecodeError, Described, Int, Symbol, UInt, ULong, elements, encode
from .messages import (
    ANNOTATIONS,
    APP_PROPERTIES,
    DATA,
    HEADER,
    PARTITION_KEY,
    PROPERTIES,
    SCHEDULED_AT,
    Sections,
    notes_kept,
    sections_of,
)

__all__ = ["delivery_payload", "delivery_tag", "settlement_of"]

_log = logging.getLogger("aiosb.amqp")

_STATES = {"active": 0, "deferred": 1, "scheduled": 2}
_SEQUENCE = Symbol("x-opt-sequence-number")
_ENQUEUED = Symbol("x-opt-enqueued-time")
_LOCKED_UNTIL = Symbol("x-opt-locked-until")
_STATE = Symbol("x-opt-message-state")
_DLQ_SOURCE = Symbol("x-opt-deadletter-source")
_REASON = "DeadLetterReason"
_DESCRIPTION = "DeadLetterErrorDescription"


def _instant(seconds: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(seconds, _dt.UTC)


def delivery_tag(message: ReceivedMessage) -> bytes:
    """The delivery tag: the lock token's little-endian bytes (16 zero bytes unlocked)."""
    if message.lock_token is None:
        return bytes(16)
    return uuid.UUID(message.lock_token).bytes_le


def delivery_payload(m: ReceivedMessage, *, delivered: bool = True) -> bytes:
    """A received message as the sections of an AMQP message; ``delivered``: handed out
    now (a receive), not peeked.

    The header's delivery-count is, as AMQP defines it, the number of earlier deliveries:
    Service Bus writes its count less this delivery, so the Python and JavaScript SDKs
    read 0 on a first receive and .NET adds the one back. A peek hands nothing out.
    """
    ttl = m.time_to_live
    count = m.delivery_count - 1 if delivered and m.delivery_count else m.delivery_count
    header = [None, None, None if ttl is None else UInt(ttl // _dt.timedelta(milliseconds=1)),
              None, UInt(count)]
    notes: dict[Any, Any] = {
        _SEQUENCE: m.sequence_number,
        _ENQUEUED: _instant(m.enqueued_timestamp),
        _STATE: _STATES.get(m.state or "active", 0),
    }
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
    while properties and properties[-1] is None:
        properties.pop()
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
    # What the sender put that no field holds goes back in place (aiosb.amqp.messages).
    extra = _extra(m)
    if extra is not None:
        _put(header, extra.raw_header)
        notes.update(notes_kept(extra.raw_annotations, frozenset(notes)))
        _put(properties, extra.raw_properties)
    out = bytearray(encode(Described(ULong(HEADER), header)))
    if extra is not None and extra.raw_delivery_annotations:
        out += extra.raw_delivery_annotations
    out += encode(Described(ULong(ANNOTATIONS), notes))
    out += encode(Described(ULong(PROPERTIES), properties))
    if app:
        out += encode(Described(ULong(APP_PROPERTIES), app))
    if extra is not None and extra.raw_body:
        out += extra.raw_body
    else:
        out += encode(Described(ULong(DATA), m.body))
    if extra is not None and extra.raw_footer:
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
    echo = state
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
