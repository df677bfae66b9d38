"""What the AMQP transport translates: messages, errors and entity descriptions.

Everything here works on objects of the official ``azure-servicebus`` SDK, which is
imported lazily (:func:`sdk`) so that ``import aiosb`` works without the ``amqp`` extra.

Application properties over the SDK come back as they were sent, each of its AMQP type
(:mod:`aiosb.values`, #47): the SDK's codec is taught the types it lacks
(:mod:`._typed_values`). ``bytes`` are sent as AMQP binary (the SDK alone sends them as a
string), an ``int`` beyond 32 bits as a long (the SDK alone fails on it), a ``timedelta``
as Service Bus's ``com.microsoft:timespan`` (what .NET receivers read as a ``TimeSpan``),
and a timestamp comes back as a ``datetime``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ... import errors
from ...entities import (
    NEVER,
    AuthorizationRule,
    QueueProperties,
    SubscriptionProperties,
    TopicProperties,
)
from ...message import MESSAGE_FIELDS, TEXT_FIELDS, Message, ReceivedMessage
from ...rules import (
    CORRELATION_FIELDS,
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from ...values import Long, Symbol
from ._typed_values import AmqpBinary, from_sdk, prepare, resend, to_sdk

__all__ = [
    "AmqpBinary",
    "apply_to_sdk",
    "entity_from_sdk",
    "entity_kwargs",
    "message_from_sdk",
    "message_to_sdk",
    "properties_to_sdk",
    "sdk",
]

_INSTALL_HINT = "pip install aiosb[amqp]"


def sdk() -> ModuleType:
    """The ``azure.servicebus`` package, imported on first use.

    Raises:
        InvalidOperation: The package is not installed; the sentence says how to add it.
    """
    try:
        import azure.servicebus
        import azure.servicebus.aio
        import azure.servicebus.aio.management
    except ImportError as exc:
        raise errors.InvalidOperation(
            "Connection strings select the AMQP transport, which needs the azure-servicebus "
            f"package: {_INSTALL_HINT} (import failed: {exc})."
        ) from None
    prepare()
    return azure.servicebus


# -- messages ------------------------------------------------------------------------

_TIMESPAN_DESCRIPTOR = b"com.microsoft:timespan"


def _property_to_sdk(value: Any) -> Any:
    if isinstance(value, _dt.timedelta):
        ticks = (value // _dt.timedelta(microseconds=1)) * 10
        return (to_sdk(Symbol(_TIMESPAN_DESCRIPTOR.decode())), to_sdk(Long(ticks)))
    return to_sdk(value)


#: The SDK's name of each field of a message that it takes as a keyword: the field's own
#: name, but for the few the SDK spells otherwise (from aiosb.message.MESSAGE_FIELDS; the
#: body is the SDK message's first argument, the properties are converted apart).
_SDK_NAMES = {
    name: {"scheduled_enqueue_time": "scheduled_enqueue_time_utc"}.get(name, name)
    for name, kind in MESSAGE_FIELDS.items()
    if kind in ("text", "duration", "instant")
}
_TEXTS = tuple((name, _SDK_NAMES[name]) for name in TEXT_FIELDS)
_AS_IS = tuple(
    (name, _SDK_NAMES[name]) for name, kind in MESSAGE_FIELDS.items()
    if kind in ("duration", "instant")
)


def properties_to_sdk(props: dict[str, Any]) -> dict[str, Any]:
    """Application properties as the SDK's encoder must get them (see the module's doc)."""
    return {k: _property_to_sdk(v) for k, v in props.items()}


def message_to_sdk(message: Message) -> Any:
    """Build a ``ServiceBusMessage`` carrying every field of ``message``."""
    out = sdk().ServiceBusMessage(
        message.body,
        application_properties=properties_to_sdk(message.application_properties) or None,
        **{sdk_name: getattr(message, name) for name, sdk_name in _SDK_NAMES.items()},
    )
    if message.amqp_extra is not None:
        _extra_to_sdk(message.amqp_extra, out.raw_amqp_message)
    return out


# -- the AMQP sections no field holds (Message.amqp_extra) ------------------------------
#
# Over the SDK they travel as the SDK's own AmqpAnnotatedMessage parts, read and written
# with the SDK's AMQP codec, taught the types it lacks (._amqp_values): the values of
# maps (annotations, the footer) keep their AMQP types (#47); values in lists, as the
# SDK decodes them (an int or a long as a number), their widths picked again. aiosb's
# own front end keeps everything bit for bit.

#: Annotations the broker sets or a field holds.
_BROKER_NOTES = frozenset(
    f"x-opt-{name}".encode() for name in (
        "partition-key", "scheduled-enqueue-time", "sequence-number", "enqueued-time",
        "locked-until", "message-state", "deadletter-source", "enqueue-sequence-number",
        "lock-token", "aiosb-no-body",
    )
)
#: The mark of a message with no body section in ``amqp_extra`` (aiosb.server.amqp.messages).
_NO_BODY = b"x-opt-aiosb-no-body"
_HEADER_KEPT = ("durable", "priority", "first_acquirer")
#: Not absolute_expiry_time and creation_time: the SDK derives them from the time to live.
_PROPERTIES_KEPT = ("user_id", "content_encoding", "group_sequence")
_IDS = ("message_id", "correlation_id")


#: A value the SDK's decoder gave, with its strings as ``str`` again (it gives them as
#: ``bytes``), binaries as ``bytes``, symbols as ``Symbol``: as aiosb holds it.
_texts = from_sdk


def _codec() -> tuple[Callable[..., Any], Callable[..., Any], Any]:
    from azure.servicebus._pyamqp._decode import decode_payload
    from azure.servicebus._pyamqp._encode import encode_payload
    from azure.servicebus._pyamqp.message import Message as AmqpMessage

    return decode_payload, encode_payload, AmqpMessage


def _extra_to_sdk(extra: bytes, raw: Any) -> None:
    """Put the sections of ``extra`` on the SDK's ``AmqpAnnotatedMessage`` ``raw``."""
    amqp = sdk().amqp
    parts = _codec()[0](memoryview(extra))
    kind = amqp.AmqpMessageBodyType
    # The body: the SDK's message has no setter for it (a received one is built so too).
    if parts.data is not None:
        raw._data_body, raw._body_type = [bytes(d) for d in parts.data], kind.DATA
    elif parts.sequence is not None:
        raw._sequence_body, raw._body_type = [resend(s) for s in parts.sequence], kind.SEQUENCE
    elif parts.value is not None:
        raw._value_body, raw._body_type = resend(parts.value), kind.VALUE
    if parts.header is not None:
        if raw.header is None:
            raw.header = amqp.AmqpMessageHeader()
        for name in _HEADER_KEPT:
            value = getattr(parts.header, name)
            if value is not None:
                setattr(raw.header, name, value)
    if parts.delivery_annotations:
        raw.delivery_annotations = resend(dict(parts.delivery_annotations))
    notes = dict(parts.message_annotations or {})
    if notes.pop(_NO_BODY, None):  # sent with no body: the SDK writes none for a None value
        raw._value_body, raw._body_type = None, kind.VALUE
    if notes:
        raw.annotations = {**(raw.annotations or {}), **resend(notes)}
    if parts.properties is not None:
        for name in (*_PROPERTIES_KEPT, *_IDS):
            value = getattr(parts.properties, name)
            if value is not None:
                setattr(raw.properties, name, _texts(value))
    if parts.footer:
        raw.footer = resend(dict(parts.footer))


def _extra_from_sdk(sdk_message: Any) -> bytes | None:
    """The sections of a received SDK message no field holds, encoded, or ``None``."""
    message = getattr(sdk_message, "_message", None)
    if message is None or not hasattr(message, "_replace"):
        return None  # pragma: no cover - an SDK without pyamqp messages
    _, encode_payload, amqp_message = _codec()
    header = message.header
    if header is not None and all(getattr(header, n) is None for n in _HEADER_KEPT):
        header = None
    elif header is not None:
        header = header._replace(time_to_live=None, delivery_count=None)
    delivery = {k: v for k, v in (message.delivery_annotations or {}).items()
                if k not in _BROKER_NOTES} or None
    notes = {k: v for k, v in (message.message_annotations or {}).items()
             if k not in _BROKER_NOTES}
    if message.data is None and message.sequence is None and message.value is None:
        notes[_NO_BODY] = True  # received with no body section
    props = message.properties
    if props is not None:
        kept = {n: getattr(props, n) for n in _PROPERTIES_KEPT}
        kept.update((n, getattr(props, n)) for n in _IDS
                    if not isinstance(getattr(props, n), (bytes, str, type(None))))
        props = props._replace(**{**dict.fromkeys(props._fields), **kept}) if any(
            v is not None for v in kept.values()) else None
    data = message.data if message.data is not None and len(message.data) != 1 else None
    extra = amqp_message(
        header=header, delivery_annotations=resend(delivery),
        message_annotations=resend(notes or None),
        properties=props, data=data, sequence=resend(message.sequence),
        value=resend(message.value), footer=resend(message.footer),
    )
    return bytes(encode_payload(bytearray(), extra)) or None


def _text(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return bytes(value)
    return value


def _property_from_sdk(value: Any) -> Any:
    descriptor = getattr(value, "descriptor", None)  # pyamqp's Described* values
    if descriptor is not None:
        descriptor = _text(getattr(descriptor, "value", descriptor))
        if descriptor == _TIMESPAN_DESCRIPTOR.decode() and isinstance(value, int):
            return _dt.timedelta(microseconds=int(value) // 10)
        if isinstance(value, int):  # the plain type under pyamqp's subclass
            value = int(value)
        elif isinstance(value, float):
            value = float(value)
        elif isinstance(value, bytes):
            value = bytes(value)
    return from_sdk(value)


def _body(sdk_message: Any) -> bytes:
    body = sdk_message.body
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    if body is None:
        return b""
    try:  # a data body is an iterator of byte sections
        return b"".join(bytes(part) for part in body)
    except TypeError:
        return str(body).encode()


def _timestamp(value: _dt.datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def message_from_sdk(
    sdk_message: Any, entity_path: str, *, locked: bool, lock_token: str | None = None,
    delivered: bool = True,
) -> ReceivedMessage:
    """Turn a ``ServiceBusReceivedMessage`` into plain data.

    Args:
        sdk_message: The SDK's received (or peeked) message.
        entity_path: The path it came from, sub-queue suffix included.
        locked: Whether it was received in peek-lock mode (peeks are not).
        lock_token: The lock token to report (the SDK's, as text, by default).
        delivered: Received, not peeked: the SDK's delivery count is the AMQP header's,
            the deliveries before this one (Service Bus writes its count less one), so
            this one is added back, as .NET does and as the emulator counts.
    """
    raw = sdk_message.application_properties or {}
    props = {str(_text(k)): _property_from_sdk(v) for k, v in raw.items()}
    token = None
    if locked:
        token = lock_token or (str(sdk_message.lock_token) if sdk_message.lock_token else None)
    state = sdk_message.state
    state_name = getattr(state, "name", str(state)).lower()
    enqueued = sdk_message.enqueued_time_utc
    sent = {name: _text(getattr(sdk_message, sdk_name)) for name, sdk_name in _TEXTS}
    sent.update((name, getattr(sdk_message, sdk_name)) for name, sdk_name in _AS_IS)
    return ReceivedMessage(
        _body(sdk_message),
        **sent,
        application_properties=props,
        sequence_number=sdk_message.sequence_number or 0,
        enqueued_timestamp=_timestamp(enqueued) or 0.0,
        expires_timestamp=_timestamp(sdk_message.expires_at_utc),
        delivery_count=(sdk_message.delivery_count or 0) + delivered,
        lock_token=token,
        locked_until_timestamp=_timestamp(sdk_message.locked_until_utc) if token else None,
        dead_letter_reason=_text(sdk_message.dead_letter_reason),
        dead_letter_error_description=_text(sdk_message.dead_letter_error_description),
        dead_letter_source=_text(sdk_message.dead_letter_source),
        state=state_name,
        entity_path=entity_path,
        amqp_extra=_extra_from_sdk(sdk_message),
    )


# -- errors --------------------------------------------------------------------------

#: AMQP conditions that mean the broker closed an idle (or moved) link or connection.
# -- entity descriptions -------------------------------------------------------------

_KINDS: dict[str, type[Any]] = {
    "queue": QueueProperties,
    "topic": TopicProperties,
    "subscription": SubscriptionProperties,
}


_NOT_SENT = frozenset({"name", "topic_name", "created_at_utc", "updated_at_utc", "accessed_at_utc"})


def entity_kwargs(kind: str, props: Any) -> dict[str, Any]:
    """Keyword arguments for the SDK's ``create_{kind}`` from an aiosb description.

    Only names that method takes are passed; ``NEVER`` durations are left out (the
    service's default is that same maximum).
    """
    admin = sdk().aio.management.ServiceBusAdministrationClient
    accepted = inspect.signature(getattr(admin, f"create_{kind}")).parameters
    out: dict[str, Any] = {}
    for field in dataclasses.fields(props):
        param = accepted.get(field.name)
        if param is None or param.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        value = _to_sdk_value(field.name, getattr(props, field.name))
        if value is None or (isinstance(value, _dt.timedelta) and value >= NEVER):
            continue
        out[field.name] = value
    return out


def _to_sdk_value(name: str, value: Any) -> Any:
    """A description's value as the SDK takes it: authorization rules as its own."""
    if name != "authorization_rules":
        return value
    if not value:
        return None
    made = sdk().management.AuthorizationRule
    return [made(type="SharedAccessAuthorizationRule", key_name=r.key_name,
                 rights=list(r.rights), primary_key=r.primary_key,
                 secondary_key=r.secondary_key, claim_type=r.claim_type,
                 claim_value=r.claim_value) for r in value]


def apply_to_sdk(sdk_props: Any, props: Any) -> Any:
    """Write an aiosb description's values onto the SDK's description (for ``update_*``)."""
    for field in dataclasses.fields(props):
        if field.name in _NOT_SENT or not hasattr(sdk_props, field.name):
            continue
        value = _to_sdk_value(field.name, getattr(props, field.name))
        if isinstance(value, _dt.timedelta) and value >= NEVER:
            value = None
        setattr(sdk_props, field.name, value)
    return sdk_props


def _from_sdk_value(value: Any) -> Any:
    if isinstance(value, _dt.timedelta) and value >= NEVER - _dt.timedelta(seconds=1):
        return NEVER
    status = getattr(value, "value", None)  # the SDK's EntityStatus enum
    if isinstance(status, str):
        return status
    return value


def entity_from_sdk(kind: str, sdk_props: Any, *, topic: str = "") -> Any:
    """An aiosb description from the SDK's ``QueueProperties`` (and friends)."""
    cls = _KINDS[kind]
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name == "topic_name":
            continue
        value = getattr(sdk_props, field.name, None)
        if field.name == "authorization_rules":
            value = tuple(AuthorizationRule(
                key_name=r.key_name, rights=tuple(str(getattr(x, "value", x)) for x in r.rights
                                                  or ()),
                primary_key=r.primary_key, secondary_key=r.secondary_key,
                claim_type=r.claim_type or "SharedAccessKey",
                claim_value=r.claim_value or "None") for r in value or ())
            values[field.name] = value
        elif value is not None:
            values[field.name] = _from_sdk_value(value)
    if kind == "subscription":
        values["topic_name"] = topic
    return cls(**values)


def rule_to_sdk(rule: RuleProperties) -> tuple[Any, Any]:
    """The SDK's filter and action for an aiosb rule."""
    m = management()
    f = rule.filter
    if isinstance(f, TrueRuleFilter):
        sdk_filter = m.TrueRuleFilter()
    elif isinstance(f, FalseRuleFilter):
        sdk_filter = m.FalseRuleFilter()
    elif isinstance(f, CorrelationRuleFilter):
        sdk_filter = m.CorrelationRuleFilter(
            **{name: getattr(f, name) for name in CORRELATION_FIELDS}, properties=f.properties
        )
    else:
        assert isinstance(f, SqlRuleFilter)
        sdk_filter = m.SqlRuleFilter(f.sql_expression, _as_given(f.parameters))
    action = rule.action
    sdk_action = None if action is None else m.SqlRuleAction(
        action.sql_expression, _as_given(action.parameters)
    )
    return sdk_filter, sdk_action


def _as_given(parameters: dict[str, Any] | None) -> dict[str, Any] | None:
    """Parameters for the SDK, named as given (``@name`` as Service Bus writes them, or
    ``name``): what is read back is what was given (#34)."""
    return None if parameters is None else dict(parameters)


def rule_from_sdk(sdk_rule: Any) -> RuleProperties:
    """An aiosb rule from the SDK's ``RuleProperties``."""
    m = management()
    f = sdk_rule.filter
    rule_filter: RuleFilter
    if isinstance(f, m.TrueRuleFilter):
        rule_filter = TrueRuleFilter()
    elif isinstance(f, m.FalseRuleFilter):
        rule_filter = FalseRuleFilter()
    elif isinstance(f, m.CorrelationRuleFilter):
        rule_filter = CorrelationRuleFilter(
            **{name: getattr(f, name) for name in CORRELATION_FIELDS},
            properties=dict(f.properties) if f.properties else None,
        )
    elif f is None:
        rule_filter = TrueRuleFilter()
    else:
        rule_filter = SqlRuleFilter(f.sql_expression, f.parameters or None)
    action = sdk_rule.action
    rule_action = None
    if action is not None and getattr(action, "sql_expression", None):
        rule_action = SqlRuleAction(action.sql_expression, action.parameters or None)
    return RuleProperties(sdk_rule.name, rule_filter, rule_action, sdk_rule.created_at_utc)


def management() -> ModuleType:
    """``azure.servicebus.management``, imported on first use."""
    import azure.servicebus.management as m

    return m
