"""The documented Service Bus REST encoding of messages: a single message is its body,
with a ``BrokerProperties`` JSON header and one header per custom property; a batch is a
JSON array of ``{"Body", "BrokerProperties", "UserProperties"}`` with content type
:data:`BATCH_CONTENT_TYPE`. It loses precision (times to the second) and types (no
bytes, durations or UUIDs in custom properties): what a real namespace speaks. Shared by
the HTTP transport and the HTTP server; imports only the vocabulary.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import math
from typing import Any

from ..entities import time_to_live_seconds
from ..errors import InvalidArgument
from ..message import (
    MESSAGE_FIELDS,
    Message,
    PropertyValue,
    ReceivedMessage,
    property_name_ok,
)

__all__ = [
    "BATCH_CONTENT_TYPE",
    "NOT_PROPERTIES",
    "SEND_BROKER_PROPERTIES",
    "custom_headers",
    "custom_value",
    "http_date",
    "message_from_rest",
    "parse_custom_value",
    "parse_http_date",
    "received_broker_properties",
    "received_from_rest",
    "rest_broker_properties",
]

#: The content type of a batch of messages in the REST protocol.
BATCH_CONTENT_TYPE = "application/vnd.microsoft.servicebus.json"
_UTC = _dt.UTC

# -- the Service Bus REST encoding -----------------------------------------------------

#: BrokerProperties keys a sender may set, and the message field each fills.
SEND_BROKER_PROPERTIES = {
    "MessageId": "message_id",
    "SessionId": "session_id",
    "PartitionKey": "partition_key",
    "CorrelationId": "correlation_id",
    "Label": "subject",
    "ReplyTo": "reply_to",
    "ReplyToSessionId": "reply_to_session_id",
    "To": "to",
    "ContentType": "content_type",
    "TimeToLive": "time_to_live",
    "ScheduledEnqueueTimeUtc": "scheduled_enqueue_time",
}
_TEXT_KEYS = tuple(
    (key, field) for key, field in SEND_BROKER_PROPERTIES.items() if MESSAGE_FIELDS[field] == "text"
)
(_TTL_KEY,) = (k for k, f in SEND_BROKER_PROPERTIES.items() if MESSAGE_FIELDS[f] == "duration")
(_AT_KEY,) = (k for k, f in SEND_BROKER_PROPERTIES.items() if MESSAGE_FIELDS[f] == "instant")
#: Keys the broker sets; a sender may echo them back (they are ignored).
_BROKER_SET = frozenset(
    (
        "DeliveryCount",
        "EnqueuedSequenceNumber",
        "EnqueuedTimeUtc",
        "LockToken",
        "LockedUntilUtc",
        "SequenceNumber",
        "State",
        "DeadLetterSource",
        "ForcePersistence",
        "ViaPartitionKey",
    )
)
#: Request headers that are never custom properties.
NOT_PROPERTIES = frozenset(
    h.lower()
    for h in (
        "Accept",
        "Accept-Encoding",
        "Accept-Language",
        "Authorization",
        "BrokerProperties",
        "Cache-Control",
        "Connection",
        "Content-Encoding",
        "Content-Length",
        "Content-Type",
        "Cookie",
        "Date",
        "Expect",
        "Host",
        "Keep-Alive",
        "Origin",
        "Pragma",
        "Proxy-Connection",
        "Referer",
        "ServiceBusAuthorization",
        "Te",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "User-Agent",
        "Via",
    )
)


def http_date(ts: float) -> str:
    """RFC 1123 time, as the REST protocol writes instants (to the second)."""
    return email.utils.formatdate(ts, usegmt=True)


def parse_http_date(name: str, text: Any) -> _dt.datetime:
    """An RFC 1123 time; bad input raises :class:`InvalidArgument`."""
    if isinstance(text, str):
        try:
            value = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            value = None
        if value is not None:
            return value if value.tzinfo else value.replace(tzinfo=_UTC)
    raise InvalidArgument(f"{name} must be an RFC 1123 time such as "
                          f"'Sun, 06 Nov 1994 08:49:37 GMT', not {text!r:.80}.")


def message_from_rest(
    broker: Any, body: bytes, content_type: str | None, properties: dict[str, PropertyValue]
) -> Message:
    """A :class:`~aiosb.Message` from ``BrokerProperties`` (parsed JSON), body, and
    custom properties.

    Raises:
        InvalidArgument: Not an object, an unknown key, a value of the wrong type.
    """
    if broker is None:
        broker = {}
    if not isinstance(broker, dict):
        raise InvalidArgument("BrokerProperties must be a JSON object.")
    kw: dict[str, Any] = {"body": body, "application_properties": properties}
    if content_type:
        kw["content_type"] = content_type
    for key, value in broker.items():
        field = SEND_BROKER_PROPERTIES.get(key)
        if field is None:
            if key in _BROKER_SET:
                continue
            raise InvalidArgument(
                f"unknown BrokerProperties key {key!r:.60}; known: "
                f"{', '.join(sorted(SEND_BROKER_PROPERTIES))}."
            )
        if value is None:
            continue
        kind = MESSAGE_FIELDS[field]
        if kind == "duration":
            if isinstance(value, str):  # JSON gives numbers; a string is not one here
                raise InvalidArgument(f"{key} must be seconds, not {value!r:.80}.")
            kw[field] = time_to_live_seconds(key, value)
        elif kind == "instant":
            kw[field] = parse_http_date(key, value)
        else:
            if not isinstance(value, str):
                raise InvalidArgument(f"{key} must be a string, not {value!r:.80}.")
            kw[field] = value
    return Message(**kw)


def rest_broker_properties(msg: Message) -> dict[str, Any]:
    """The ``BrokerProperties`` a sender sets for ``msg``."""
    out: dict[str, Any] = {}
    for key, field in SEND_BROKER_PROPERTIES.items():
        value = getattr(msg, field)
        if value is None:
            continue
        kind = MESSAGE_FIELDS[field]
        if kind == "duration":
            value = value.total_seconds()
        elif kind == "instant":
            value = http_date(value.timestamp())
        out[key] = value
    return out


def received_broker_properties(msg: ReceivedMessage) -> dict[str, Any]:
    """The ``BrokerProperties`` of a received message, as the REST protocol answers."""
    out = rest_broker_properties(msg)
    out["SequenceNumber"] = msg.sequence_number
    out["EnqueuedSequenceNumber"] = msg.sequence_number
    out["DeliveryCount"] = msg.delivery_count
    out["EnqueuedTimeUtc"] = http_date(msg.enqueued_timestamp)
    out["State"] = msg.state.capitalize()
    if msg.lock_token is not None:
        out["LockToken"] = msg.lock_token
        out["LockedUntilUtc"] = http_date(msg.locked_until_timestamp or 0.0)
    if msg.dead_letter_source is not None:
        out["DeadLetterSource"] = msg.dead_letter_source
    return out


def received_from_rest(
    broker: dict[str, Any], body: bytes, headers: Any, entity_path: str
) -> ReceivedMessage:
    """A :class:`~aiosb.ReceivedMessage` from a REST receive's headers and body."""
    properties: dict[str, PropertyValue] = {}
    for name, raw in headers.items():
        if name.lower() in NOT_PROPERTIES or name.lower().startswith(("x-ms-", "x-aiosb-")):
            continue
        if name.lower() in ("location", "server", "strict-transport-security"):
            continue
        properties[name] = parse_custom_value(raw)
    msg = ReceivedMessage.__new__(ReceivedMessage)
    msg.body = body
    for key, field in _TEXT_KEYS:
        setattr(msg, field, broker.get(key))
    msg.content_type = msg.content_type or _content_type(headers)
    ttl = broker.get(_TTL_KEY)
    msg.time_to_live = None if ttl is None or ttl >= 9e11 else _dt.timedelta(seconds=ttl)
    at = broker.get(_AT_KEY)
    msg.scheduled_enqueue_time = None if at is None else parse_http_date(_AT_KEY, at)
    reason = properties.pop("DeadLetterReason", None)
    msg.dead_letter_reason = None if reason is None else str(reason)
    description = properties.pop("DeadLetterErrorDescription", None)
    msg.dead_letter_error_description = None if description is None else str(description)
    msg.application_properties = properties
    msg.sequence_number = int(broker.get("SequenceNumber", 0))
    enq = broker.get("EnqueuedTimeUtc")
    msg.enqueued_timestamp = parse_http_date("EnqueuedTimeUtc", enq).timestamp() if enq else 0.0
    msg.expires_timestamp = None
    if ttl is not None and msg.time_to_live is not None:
        msg.expires_timestamp = msg.enqueued_timestamp + ttl
    msg.delivery_count = int(broker.get("DeliveryCount", 0))
    msg.lock_token = broker.get("LockToken")
    until = broker.get("LockedUntilUtc")
    msg.locked_until_timestamp = (
        parse_http_date("LockedUntilUtc", until).timestamp() if until else None
    )
    msg.dead_letter_source = broker.get("DeadLetterSource")
    msg.state = str(broker.get("State", "active")).lower()
    msg.entity_path = entity_path
    msg.amqp_extra = None  # the REST protocol carries the body alone
    return msg


def _content_type(headers: Any) -> str | None:
    value = headers.get("Content-Type")
    if not value or value.startswith(("application/atom+xml", "application/octet-stream")):
        return None
    return str(value)


def custom_headers(properties: dict[str, PropertyValue]) -> dict[str, str]:
    """Custom properties as REST headers (strings quoted, instants as quoted RFC 1123).

    Raises:
        InvalidArgument: A name that is not an HTTP header name, or a value of a type the
            REST protocol cannot carry (bytes, durations, UUIDs).
    """
    out: dict[str, str] = {}
    for name, value in properties.items():
        if not property_name_ok(name) or name.lower() in NOT_PROPERTIES:
            raise InvalidArgument(
                f"application property {name!r} cannot be a REST header; use names of "
                "letters, digits and '-', or the AMQP transport."
            )
        out[name] = custom_value(name, value, exact=True)
    return out


def custom_value(name: str, value: PropertyValue, *, exact: bool = False) -> str:
    """One custom property as a REST header value.

    Args:
        exact: Refuse what the header cannot carry exactly (a datetime finer than the
            second, as an HTTP date is), rather than round it: for sending.
    """
    if exact and isinstance(value, _dt.datetime) and value.microsecond:
        raise InvalidArgument(
            f"application property {name!r} is {value.isoformat()}; the REST protocol "
            "carries an instant to the second: round it, or use the AMQP transport."
        )
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, _dt.datetime):
        return json.dumps(http_date(value.timestamp()))
    raise InvalidArgument(
        f"application property {name!r} is a {type(value).__name__}, which the REST "
        "protocol cannot carry; use str, int, float, bool or datetime."
    )


def parse_custom_value(raw: str) -> PropertyValue:
    """A REST custom property header value: quoted string (or instant), number, bool."""
    text = raw.strip()
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, str) and value.endswith(" GMT"):
            try:
                return parse_http_date("", value)
            except InvalidArgument:
                return value
        return value if isinstance(value, str) else text
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text
