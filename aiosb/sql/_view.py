"""The message as a rule sees it (:class:`MessageView`), and the table of system properties.

A view is built per message per subscription by the broker, so it is a slotted object
that copies nothing: it points at the message and at the dict of user properties.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from ..message import MAX_ID_LENGTH, content_type_ok
from ._errors import FilterEvaluationError
from ._values import kind_name as _kind

__all__ = ["SYSTEM_PROPERTIES", "MessageView", "SystemProperty", "system_property"]


class MessageView:
    """One message as the rules of one subscription see it.

    Args:
        message: Any object with the attributes of :class:`aiosb.message.Message`
            (``message_id``, ``session_id``, ``partition_key``, ``time_to_live``,
            ``scheduled_enqueue_time``, ``content_type``, ``correlation_id``, ``subject``,
            ``reply_to``, ``reply_to_session_id``, ``to``, ``body``). Never modified.
        properties: The user (application) properties. Not copied: an action changes
            this dict in place, so give an action a view over the copy it may change.
        sequence_number: ``sys.SequenceNumber``.
        enqueued_time: ``sys.EnqueuedTimeUtc`` (a timezone-aware datetime, or None).
        delivery_count: ``sys.DeliveryCount``.
        size: ``sys.Size`` in bytes; None reads ``message.size`` when the message has one.

    Attributes:
        system_changes: What actions set on system properties, by aiosb field name
            (``"subject"`` for ``sys.Label``): the broker applies them to its copy of the
            message. Reads of a system property see these changes.
    """

    __slots__ = (
        "delivery_count",
        "enqueued_time",
        "message",
        "properties",
        "sequence_number",
        "size",
        "system_changes",
    )

    def __init__(
        self,
        message: Any,
        properties: dict[str, Any],
        *,
        sequence_number: int = 0,
        enqueued_time: _dt.datetime | None = None,
        delivery_count: int = 0,
        size: int | None = None,
    ) -> None:
        self.message = message
        self.properties = properties
        self.sequence_number = sequence_number
        self.enqueued_time = enqueued_time
        self.delivery_count = delivery_count
        self.size = size
        self.system_changes: dict[str, object] = {}

    def __repr__(self) -> str:
        return (
            f"MessageView(message_id={getattr(self.message, 'message_id', None)!r}, "
            f"properties={self.properties!r}, system_changes={self.system_changes!r})"
        )


Reader = Callable[[MessageView], Any]
Writer = Callable[[MessageView, Any], None]


@dataclass(frozen=True, slots=True)
class SystemProperty:
    """One ``sys.`` name: its documented spelling, how to read it, how to set it."""

    name: str
    read: Reader
    #: The aiosb field an action sets, or None: the property is read-only.
    field: str | None = None
    write: Writer | None = None
    #: Why an action may not set it (for the compile error), when ``field`` is None.
    read_only_because: str = "it is read-only"


def _field_reader(field: str) -> Reader:
    get = attrgetter(field)

    def read(view: MessageView) -> Any:
        changes = view.system_changes
        if changes and field in changes:
            return changes[field]
        return get(view.message)

    return read


def _text_writer(field: str, shown: str) -> Writer:
    def write(view: MessageView, value: Any) -> None:
        if value is not None and type(value) is not str:
            raise FilterEvaluationError(
                f"sys.{shown} takes a string, not {_kind(value)} ({value!r})."
            )
        view.system_changes[field] = value

    return write


def _id_writer(field: str, shown: str, *, required: bool = False) -> Writer:
    def write(view: MessageView, value: Any) -> None:
        if value is None:
            if required:
                raise FilterEvaluationError(f"sys.{shown} cannot be set to NULL.")
        elif type(value) is not str:
            raise FilterEvaluationError(
                f"sys.{shown} takes a string, not {_kind(value)} ({value!r})."
            )
        elif not value or len(value) > MAX_ID_LENGTH:
            raise FilterEvaluationError(
                f"sys.{shown} must be 1 to {MAX_ID_LENGTH} characters long, not "
                f"{len(value)}."
            )
        view.system_changes[field] = value

    return write


def _content_type_writer(view: MessageView, value: Any) -> None:
    if value is not None and (type(value) is not str or not content_type_ok(value)):
        raise FilterEvaluationError(
            f"sys.ContentType takes a string of printable ASCII, not {value!r}."
        )
    view.system_changes["content_type"] = value or None


def _duration_writer(view: MessageView, value: Any) -> None:
    if value is not None:
        if type(value) is not _dt.timedelta:
            raise FilterEvaluationError(
                f"sys.TimeToLive takes a time span, not {_kind(value)} ({value!r})."
            )
        if value <= _dt.timedelta(0):
            raise FilterEvaluationError(f"sys.TimeToLive must be positive, not {value}.")
    view.system_changes["time_to_live"] = value


def _instant_writer(view: MessageView, value: Any) -> None:
    if value is not None:
        if not isinstance(value, _dt.datetime):
            raise FilterEvaluationError(
                f"sys.ScheduledEnqueueTimeUtc takes a date and time, not {_kind(value)} "
                f"({value!r})."
            )
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)  # a naive time is UTC, as the name says
    view.system_changes["scheduled_enqueue_time"] = value


def _enqueued_time(view: MessageView) -> Any:
    return view.enqueued_time


def _sequence_number(view: MessageView) -> Any:
    return view.sequence_number


def _delivery_count(view: MessageView) -> Any:
    return view.delivery_count


_time_to_live = _field_reader("time_to_live")


def _expires_at(view: MessageView) -> Any:
    enqueued = view.enqueued_time
    ttl = _time_to_live(view)
    if enqueued is None or ttl is None:
        return None
    try:
        return enqueued + ttl
    except OverflowError:
        return None  # beyond year 9999: never expires


def _size(view: MessageView) -> Any:
    size = view.size
    if size is None:
        return getattr(view.message, "size", None)
    return size


def _null(view: MessageView) -> Any:
    return None


def _build() -> dict[str, SystemProperty]:
    table: dict[str, SystemProperty] = {}

    def add(names: tuple[str, ...], prop: SystemProperty) -> None:
        for name in names:
            table[name.lower()] = prop

    def settable(names: tuple[str, ...], field: str, write: Writer) -> None:
        add(names, SystemProperty(names[0], _field_reader(field), field, write))

    def text(names: tuple[str, ...], field: str) -> None:
        settable(names, field, _text_writer(field, names[0]))

    settable(("MessageId",), "message_id", _id_writer("message_id", "MessageId", required=True))
    settable(("SessionId",), "session_id", _id_writer("session_id", "SessionId"))
    settable(("PartitionKey",), "partition_key", _id_writer("partition_key", "PartitionKey"))
    text(("CorrelationId",), "correlation_id")
    text(("To",), "to")
    text(("ReplyTo",), "reply_to")
    text(("Label", "Subject"), "subject")
    text(("ReplyToSessionId",), "reply_to_session_id")
    settable(("ContentType",), "content_type", _content_type_writer)
    settable(("TimeToLive",), "time_to_live", _duration_writer)
    settable(
        ("ScheduledEnqueueTimeUtc", "ScheduledEnqueueTime"),
        "scheduled_enqueue_time",
        _instant_writer,
    )
    for names, read in [
        (("EnqueuedTimeUtc", "EnqueuedTime"), _enqueued_time),
        (("SequenceNumber",), _sequence_number),
        (("DeliveryCount",), _delivery_count),
        (("ExpiresAtUtc", "ExpiresAt"), _expires_at),
        (("Size",), _size),
    ]:
        add(names, SystemProperty(names[0], read))
    # Documented, but a message being routed has none of them (no lock, no dead-letter
    # source, no transfer queue), and aiosb carries none: they read NULL.
    for names in [
        ("DeadLetterSource",),
        ("EnqueuedSequenceNumber",),
        ("ForcePersistence",),
        ("LockToken",),
        ("LockedUntilUtc", "LockedUntil"),
        ("State",),
        ("ViaPartitionKey", "TransactionPartitionKey"),
    ]:
        add(
            names,
            SystemProperty(
                names[0], _null, read_only_because="aiosb does not carry it (it reads NULL)"
            ),
        )
    return table


#: Every ``sys.`` name, lower-cased (system property names are case-insensitive).
SYSTEM_PROPERTIES: dict[str, SystemProperty] = _build()


def system_property(name: str) -> SystemProperty | None:
    """The system property ``name`` (any case), or None if Service Bus has none such."""
    return SYSTEM_PROPERTIES.get(name.lower())
