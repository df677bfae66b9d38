"""What the AMQP transport translates: messages, errors and entity descriptions.

Everything here works on objects of the official ``azure-servicebus`` SDK, which is
imported lazily (:func:`sdk`) so that ``import aiosb`` works without the ``amqp`` extra.

Fidelity of application properties over the SDK (what a receiver gets back):

- ``str``, ``bool``, ``float``, ``uuid.UUID`` and ``None`` come back as they were sent.
- ``int`` comes back as ``int``; the SDK encodes ints as 32-bit, so larger ones are sent
  as AMQP longs here (the SDK alone fails to send them).
- ``bytes`` come back as ``bytes``. The SDK alone would not keep them: it sends bytes as
  AMQP strings (decoding them as UTF-8, and failing on other bytes), and decodes strings
  and binaries alike to ``bytes`` on receipt. Here they are sent explicitly typed as AMQP
  binary, and :func:`sdk` makes the SDK's decoder mark what was binary on the wire
  (:class:`AmqpBinary`, a ``bytes`` subclass the SDK handles as it does ``bytes``); an
  unmarked ``bytes`` value was an AMQP string.
- ``datetime`` is sent as an AMQP timestamp and comes back as ``int`` milliseconds since
  the epoch (the SDK's decoder drops the type).
- ``timedelta`` is sent as Service Bus's ``com.microsoft:timespan`` (what .NET receivers
  read as a ``TimeSpan``) and comes back as ``timedelta``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import errors
from ..entities import (
    NEVER,
    QueueProperties,
    SubscriptionProperties,
    TopicProperties,
)
from ..message import MESSAGE_FIELDS, TEXT_FIELDS, Message, ReceivedMessage
from ..rules import (
    CORRELATION_FIELDS,
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

__all__ = [
    "AmqpBinary",
    "apply_to_sdk",
    "condition_of",
    "entity_from_sdk",
    "entity_kwargs",
    "named_error",
    "is_idle_detach",
    "map_error",
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
    _mark_binaries()
    return azure.servicebus


class AmqpBinary(bytes):
    """A value that was AMQP ``binary`` on the wire (the SDK gives strings as ``bytes`` too)."""

    __slots__ = ()


def _mark_binaries() -> None:
    """Make the SDK's AMQP decoder return binaries as :class:`AmqpBinary`.

    Its decoder table maps the binary constructors (``vbin8`` 0xa0, ``vbin32`` 0xb0) and
    the string ones to one function returning ``bytes``; only the binary entries are
    wrapped, so strings stay plain ``bytes`` and every other value is untouched. Done once
    per process; an SDK without this table leaves binaries unmarked (read as text).
    """
    try:
        from azure.servicebus._pyamqp import _decode
    except ImportError:  # pragma: no cover - a future SDK without pyamqp
        return
    table = getattr(_decode, "_DECODE_BY_CONSTRUCTOR", None)
    if not isinstance(table, list) or len(table) < 0xB1:
        return  # pragma: no cover
    for constructor in (0xA0, 0xB0):
        decode = table[constructor]
        if decode is None or getattr(decode, "_aiosb_marks_binary", False):
            continue
        table[constructor] = _marking(decode)


def _marking(decode: Callable[..., tuple[Any, bytes]]) -> Callable[..., tuple[Any, bytes]]:
    def decode_binary(buffer: Any, *args: Any) -> tuple[Any, bytes]:
        rest, value = decode(buffer, *args)
        return rest, AmqpBinary(value)

    decode_binary._aiosb_marks_binary = True  # type: ignore[attr-defined]
    return decode_binary


# -- messages ------------------------------------------------------------------------

_INT32 = range(-(2**31), 2**31)
_TICKS_PER_SECOND = 10_000_000
_TIMESPAN_DESCRIPTOR = b"com.microsoft:timespan"


def _amqp_typed(kind: str, value: Any) -> Any:
    # The SDK's encoder takes {TYPE: <amqp type>, VALUE: value} for explicitly typed
    # values (what its own code does for longs); an import failure leaves value as is.
    try:
        from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
    except ImportError:  # pragma: no cover - a future SDK without pyamqp
        return value
    return {TYPE: getattr(AMQPTypes, kind), VALUE: value}


def _property_to_sdk(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if value in _INT32 else _amqp_typed("long", value)
    if isinstance(value, (bytes, bytearray)):  # the SDK would send them as a string
        return _amqp_typed("binary", bytes(value))
    if isinstance(value, _dt.timedelta):
        ticks = (value // _dt.timedelta(microseconds=1)) * 10
        return (_amqp_typed("symbol", _TIMESPAN_DESCRIPTOR), _amqp_typed("long", ticks))
    return value


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
    return sdk().ServiceBusMessage(
        message.body,
        application_properties=properties_to_sdk(message.application_properties) or None,
        **{sdk_name: getattr(message, name) for name, sdk_name in _SDK_NAMES.items()},
    )


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
    if isinstance(value, AmqpBinary):
        return bytes(value)
    return _text(value)


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
    sdk_message: Any, entity_path: str, *, locked: bool, lock_token: str | None = None
) -> ReceivedMessage:
    """Turn a ``ServiceBusReceivedMessage`` into plain data.

    Args:
        sdk_message: The SDK's received (or peeked) message.
        entity_path: The path it came from, sub-queue suffix included.
        locked: Whether it was received in peek-lock mode (peeks are not).
        lock_token: The lock token to report (the SDK's, as text, by default).
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
        delivery_count=sdk_message.delivery_count or 0,
        lock_token=token,
        locked_until_timestamp=_timestamp(sdk_message.locked_until_utc) if token else None,
        dead_letter_reason=_text(sdk_message.dead_letter_reason),
        dead_letter_error_description=_text(sdk_message.dead_letter_error_description),
        dead_letter_source=_text(sdk_message.dead_letter_source),
        state=state_name,
        entity_path=entity_path,
    )


# -- errors --------------------------------------------------------------------------

#: AMQP conditions that mean the broker closed an idle (or moved) link or connection.
IDLE_CONDITIONS = frozenset(
    {"amqp:link:detach-forced", "amqp:connection:forced", "com.microsoft:container-close"}
)
_CONDITION_IN_TEXT = re.compile(r"Error condition: ([\w.:\-]+)")
_IDLE_WORDS = ("idle", "detach-forced", "connection:forced", "force detached")


def condition_of(exc: BaseException) -> str | None:
    """The AMQP error condition an SDK exception carries, from public data only.

    The SDK keeps it in a private attribute; this reads the underlying AMQP error's
    ``condition`` or the ``Error condition: ...`` the SDK writes into the message.
    """
    for candidate in (exc, getattr(exc, "inner_exception", None), exc.__cause__):
        condition = getattr(candidate, "condition", None)
        if condition is not None:
            condition = getattr(condition, "value", condition)
            if isinstance(condition, bytes):
                condition = condition.decode(errors="replace")
            return str(condition)
    match = _CONDITION_IN_TEXT.search(str(exc))
    return match.group(1).rstrip(".") if match else None


def is_idle_detach(exc: BaseException) -> bool:
    """Whether ``exc`` says the broker closed a link or connection (idleness, a move):
    reopening it is the cure, and it is never an outage."""
    ex = sdk().exceptions
    if not isinstance(exc, ex.ServiceBusError):
        return _is_pyamqp_link_error(exc)
    if type(exc) not in (ex.ServiceBusError, ex.ServiceBusConnectionError):
        return False  # a lock, an entity, a credential: something the broker meant
    if condition_of(exc) in IDLE_CONDITIONS:
        return True
    text = str(exc).lower()
    return isinstance(exc, ex.ServiceBusConnectionError) and any(
        word in text for word in _IDLE_WORDS
    )


def _is_pyamqp_link_error(exc: BaseException) -> bool:
    try:
        from azure.servicebus._pyamqp.error import AMQPConnectionError, AMQPLinkError
    except ImportError:  # pragma: no cover - a future SDK without pyamqp
        return False
    if not isinstance(exc, (AMQPLinkError, AMQPConnectionError)):
        return False
    return condition_of(exc) in IDLE_CONDITIONS


#: A row's target: an aiosb error class, or a function of (sentence, exception).
Target = type[errors.ServiceBusError] | Callable[[str, BaseException], errors.ServiceBusError]


def _rows() -> list[tuple[type[BaseException], Target]]:
    """The mapping, most specific class first; read by :func:`map_error`."""
    from azure.core import exceptions as core

    ex = sdk().exceptions
    return [
        # Client-side validation and settlement.
        (ex.MessageAlreadySettled, errors.MessageLockLost),
        (ex.MessageSizeExceededError, errors.MessageSizeExceeded),
        (ex.AutoLockRenewTimeout, errors.MessageLockLost),
        (ex.AutoLockRenewFailed, errors.MessageLockLost),
        # Locks and messages: the caller's to handle, never retried.
        (ex.MessageLockLostError, errors.MessageLockLost),
        (ex.SessionLockLostError, errors.SessionLockLost),
        (ex.MessageNotFoundError, errors.MessageNotFound),
        # Entities. A disabled entity takes no traffic: an outage (PN-6), not retried.
        (ex.MessagingEntityNotFoundError, errors.EntityNotFound),
        (ex.MessagingEntityAlreadyExistsError, errors.EntityAlreadyExists),
        (ex.MessagingEntityDisabledError, errors.EntityUnavailable),
        (ex.ServiceBusQuotaExceededError, errors.QuotaExceeded),
        # Credentials: the SDK retries these; a wrong key does not heal by itself.
        (ex.ServiceBusAuthenticationError, errors.Unauthorized),
        (ex.ServiceBusAuthorizationError, errors.Unauthorized),
        # Passing conditions: the client retries them within the operation timeout,
        # and a namespace that stays unreachable ends in OperationTimeout (an outage).
        (ex.ServiceBusServerBusyError, errors.ServerBusy),
        (ex.OperationTimeoutError, errors.OperationTimeout),
        (ex.SessionCannotBeLockedError, errors.SessionCannotBeLocked),
        (ex.ServiceBusCommunicationError, errors.TransientError),
        (ex.ServiceBusConnectionError, errors.TransientError),
        # The management client (azure-core HTTP errors).
        (core.ResourceExistsError, errors.EntityAlreadyExists),
        (core.ResourceNotFoundError, errors.EntityNotFound),
        (core.ClientAuthenticationError, errors.Unauthorized),
        (core.ServiceRequestError, errors.TransientError),  # no connection made
        (core.ServiceResponseError, errors.TransientError),  # the answer broke off
        (core.HttpResponseError, _from_http_status),
        (ex.ServiceBusError, _from_condition),
    ]


_TABLE: list[tuple[type[BaseException], Target]] = []

#: Conditions of a plain ``ServiceBusError`` and what they mean.
_CONDITIONS: dict[str, type[errors.ServiceBusError]] = {
    "amqp:not-allowed": errors.InvalidOperation,
    "amqp:not-implemented": errors.InvalidOperation,
    "amqp:invalid-field": errors.InvalidOperation,
    "amqp:precondition-failed": errors.InvalidOperation,
    "com.microsoft:argument-error": errors.InvalidArgument,
    "com.microsoft:argument-out-of-range": errors.InvalidArgument,
    "amqp:internal-error": errors.TransientError,
    "amqp:unknown-error": errors.TransientError,
    "com.microsoft:timeout": errors.OperationTimeout,
    "amqp:resource-deleted": errors.EntityNotFound,
    "amqp:not-found": errors.EntityNotFound,
    "amqp:unauthorized-access": errors.Unauthorized,
    **{condition: errors.TransientError for condition in IDLE_CONDITIONS},
}


def _from_condition(text: str, exc: BaseException) -> errors.ServiceBusError:
    return _CONDITIONS.get(condition_of(exc) or "", errors.MessagingError)(text)


def _from_http_status(text: str, exc: BaseException) -> errors.ServiceBusError:
    status = getattr(exc, "status_code", None)
    if status in (429, 503):
        return errors.ServerBusy(text)
    if status in (500, 502, 504) or status is None:
        return errors.TransientError(text)
    if status == 413:
        return errors.MessageSizeExceeded(text)
    if status in (401, 403):
        if "quota" in text.lower() or "40301" in text:  # 403 also means "namespace full"
            return errors.QuotaExceeded(text)
        return errors.Unauthorized(text)
    if status == 404:
        return errors.EntityNotFound(text)
    if status == 409:
        return errors.EntityAlreadyExists(text)
    if status == 400:
        return errors.InvalidArgument(text)
    return errors.MessagingError(text)


#: Where aiosb's servers name the exact class of a failure: the AMQP error's info
#: (aiosb serve) and the HTTP response's header (its HTTPS endpoint, which the SDK's
#: administration client talks to). Service Bus sends neither.
ERROR_NAME = "x-aiosb-error"
_ERROR_CLASSES = {
    cls.__name__: cls for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.ServiceBusError)
}


def named_error(exc: BaseException) -> type[errors.ServiceBusError] | None:
    """The :mod:`aiosb.errors` class an aiosb server named for ``exc``, if it did.

    The condition (or status) the server sends is the one the SDK knows, so the SDK
    classifies and retries as against Service Bus; the name is what tells aiosb's
    finer classes apart (a fragment that is down sends ``server-busy``, which the SDK
    retries, and names :class:`~aiosb.errors.PartitionUnavailable`).
    """
    seen: set[int] = set()
    queue: list[Any] = [exc]
    while queue:
        candidate = queue.pop(0)
        if candidate is None or id(candidate) in seen:
            continue
        seen.add(id(candidate))
        info = getattr(candidate, "info", None)
        name = None
        if isinstance(info, dict):
            name = info.get(ERROR_NAME.encode(), info.get(ERROR_NAME))
        headers = getattr(getattr(candidate, "response", None), "headers", None)
        if name is None and headers is not None:
            with contextlib.suppress(Exception):
                name = headers.get(ERROR_NAME)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        cls = _ERROR_CLASSES.get(name) if isinstance(name, str) else None
        if cls is not None:
            return cls
        queue += [getattr(candidate, "inner_exception", None), candidate.__cause__,
                  getattr(candidate, "error", None)]
    return None


def map_error(exc: BaseException, what: str = "") -> errors.ServiceBusError:
    """The :mod:`aiosb.errors` instance for an SDK (or azure-core) exception.

    Classes decide, then the AMQP condition or HTTP status where one class covers
    several cases; the SDK's private retryability flags are not read. Anything not in
    the table is a non-transient :class:`~aiosb.errors.MessagingError`.

    Args:
        exc: What the SDK raised.
        what: The operation and entity, to start the sentence with.
    """
    if isinstance(exc, errors.ServiceBusError):
        return exc
    if not _TABLE:
        _TABLE.extend(_rows())
    text = f"{what}: {exc}" if what else str(exc)
    named = named_error(exc)
    if named is not None:
        return named(text)
    for cls, target in _TABLE:
        if isinstance(exc, cls):
            if isinstance(target, type):
                made: errors.ServiceBusError = target(text)
                return made
            return target(text, exc)
    if isinstance(exc, ValueError) and "shutdown" in str(exc).lower():
        return errors.ClientClosed(text)
    if isinstance(exc, (ValueError, TypeError)):
        return errors.InvalidOperation(text)
    return errors.MessagingError(text)


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
        value = getattr(props, field.name)
        if value is None or (isinstance(value, _dt.timedelta) and value >= NEVER):
            continue
        out[field.name] = value
    return out


def apply_to_sdk(sdk_props: Any, props: Any) -> Any:
    """Write an aiosb description's values onto the SDK's description (for ``update_*``)."""
    for field in dataclasses.fields(props):
        if field.name in _NOT_SENT or not hasattr(sdk_props, field.name):
            continue
        value = getattr(props, field.name)
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
        if value is not None:
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
        sdk_filter = m.SqlRuleFilter(f.sql_expression, _at(f.parameters))
    action = rule.action
    sdk_action = None if action is None else m.SqlRuleAction(
        action.sql_expression, _at(action.parameters)
    )
    return sdk_filter, sdk_action


def _at(parameters: dict[str, Any] | None) -> dict[str, Any] | None:
    """Parameters named as the SDK (and Service Bus) write them: ``@name``."""
    return None if parameters is None else {f"@{k}": v for k, v in parameters.items()}


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
