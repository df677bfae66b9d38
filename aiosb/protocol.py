"""The contract between every backend and every front end: the Transport protocol.

A transport speaks to one namespace. Its methods take plain data (entity paths,
:class:`~aiosb.Message` lists, the small request dataclasses below) and raise only
:mod:`aiosb.errors`. It does not retry: retries of transient errors, operation
timeouts and pairing live above it, in :mod:`aiosb.client`, the same for every backend.

Backends: ``memory`` (the embedded emulator, :mod:`aiosb.transport.memory`); HTTP and
AMQP follow the same protocol and pass the same conformance suite. The emulator's broker
implements it without knowing that clients exist; this module imports no backend.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import InvalidArgument
from .message import (
    _PROPERTY_TYPES,
    LONG_MIN,
    MAX_ID_LENGTH,
    MESSAGE_FIELDS,
    RECEIVED_FIELDS,
    TEXT_FIELDS,
    ULONG_MAX,
    Message,
    PropertyValue,
    ReceivedMessage,
    builder,
    check_partition_key,
    content_type_ok,
    property_name_ok,
)

__all__ = [
    "MAX_RECEIVE_MESSAGES",
    "MAX_RECEIVE_WAIT",
    "check_columns",
    "check_receive",
    "ColumnTransport",
    "entity_kind",
    "ManagementRequest",
    "ReceiveRequest",
    "SessionInfo",
    "SessionRequest",
    "Settlement",
    "Transport",
    "received_from_columns",
]

ReceiveMode = Literal["peek_lock", "receive_and_delete"]
SettleAction = Literal["complete", "abandon", "dead_letter", "defer", "renew", "release"]
ManageAction = Literal["create", "get", "update", "delete", "list", "runtime", "sessions"]
SessionAction = Literal["accept", "renew", "get_state", "set_state", "release"]
EntityKind = Literal["queue", "topic", "subscription", "rule"]
_ENTITY_KINDS: dict[str, EntityKind] = {"queue": "queue", "topic": "topic",
                                        "subscription": "subscription", "rule": "rule"}


def entity_kind(text: object) -> EntityKind:
    """``text`` as an entity kind.

    Raises:
        InvalidArgument: Not ``queue``, ``topic`` or ``subscription``.
    """
    kind = _ENTITY_KINDS.get(text) if isinstance(text, str) else None
    if kind is None:
        raise InvalidArgument(
            f"{text!r:.40} is not an entity kind: queue, topic, subscription or rule."
        )
    return kind


#: The most messages one receive or peek returns, on every backend.
MAX_RECEIVE_MESSAGES = 10_000
#: The longest one receive waits for its first message, in seconds (a day); ``None``
#: waits for ever.
MAX_RECEIVE_WAIT = 24 * 3600.0


def check_receive(max_messages: object, max_wait: float | None = None) -> None:
    """The one check of a receive's or peek's limits, whatever the backend.

    Raises:
        InvalidArgument: ``max_messages`` not a whole number from 1 to
            :data:`MAX_RECEIVE_MESSAGES`, or ``max_wait`` (seconds) not from 0 to
            :data:`MAX_RECEIVE_WAIT`.
    """
    if (
        type(max_messages) is not int
        or not 1 <= max_messages <= MAX_RECEIVE_MESSAGES
    ):
        raise InvalidArgument(
            f"max_messages is {max_messages!r:.40}; it must be a whole number from 1 to "
            f"{MAX_RECEIVE_MESSAGES:,}."
        )
    if max_wait is not None and not 0 <= max_wait <= MAX_RECEIVE_WAIT:  # NaN fails too
        raise InvalidArgument(
            f"max_wait is {max_wait!r}; it must be from 0 to {MAX_RECEIVE_WAIT:g} seconds, "
            "or None to wait for ever."
        )


@dataclass(slots=True)
class ReceiveRequest:
    """What to receive or peek.

    Attributes:
        mode: ``"peek_lock"`` or ``"receive_and_delete"``.
        max_messages: Upper bound on messages returned (at least 1).
        max_wait: Seconds to wait for the first message; ``None`` waits until one
            arrives, ``0`` returns at once.
        sub_queue: ``None`` or ``"deadletter"``.
        session_id: Receive from this session only (session-enabled entities).
        session_lock: The session lock :class:`SessionInfo` gave when it was accepted
            (receives from a session need it; peeks do not).
        peek: Browse without locking, from ``from_sequence_number``.
        from_sequence_number: Where a peek starts.
        sequence_numbers: Receive these deferred messages (by sequence number).
    """

    mode: ReceiveMode = "peek_lock"
    max_messages: int = 1
    max_wait: float | None = None
    sub_queue: str | None = None
    session_id: str | None = None
    session_lock: str | None = None
    peek: bool = False
    from_sequence_number: int = 0
    sequence_numbers: Sequence[int] | None = None


@dataclass(slots=True)
class Settlement:
    """A settlement of one or more locked messages.

    Attributes:
        action: ``complete``, ``abandon``, ``dead_letter``, ``defer`` or ``renew``; or
            ``release`` (AMQP's released outcome: back to the queue as if never
            delivered, its delivery count unchanged; the AMQP front end sends it).
        lock_tokens: The locks to settle.
        sub_queue: ``None`` or ``"deadletter"`` (where the messages were received).
        reason: Dead-letter reason.
        description: Dead-letter error description.
        properties_to_modify: Application properties to merge (abandon, defer,
            dead-letter).
        session_id: The session the messages were received in, if any.
        session_lock: That session's lock.
    """

    action: SettleAction
    lock_tokens: Sequence[str]
    sub_queue: str | None = None
    reason: str | None = None
    description: str | None = None
    properties_to_modify: dict[str, PropertyValue] | None = None
    session_id: str | None = None
    session_lock: str | None = None


@dataclass(slots=True)
class SessionRequest:
    """An operation on a session of a session-enabled queue or subscription.

    Attributes:
        action: ``accept`` (lock a session: ``session_id``, or the next available one
            when it is ``None``, waiting up to ``max_wait`` seconds), ``renew`` (extend
            the lock), ``get_state``, ``set_state`` (to ``state``) or ``release``.
        session_id: The session (``None`` with ``accept``: the next available one).
        lock: The session lock from ``accept`` (every action but ``accept``).
        state: The new state for ``set_state`` (``None`` clears it).
        max_wait: How long ``accept`` waits for a session to become available
            (``None``: until one does).
        mode: The receive mode of the receiver accepting the session (a backend whose
            session links carry a mode needs it).
    """

    action: SessionAction
    session_id: str | None = None
    lock: str | None = None
    state: bytes | None = None
    max_wait: float | None = 0.0
    mode: ReceiveMode = "peek_lock"


@dataclass(slots=True)
class SessionInfo:
    """What a session operation answers.

    Attributes:
        session_id: The session.
        lock: The session lock (``accept``); pass it with every later request.
        locked_until: When the session lock ends (UTC epoch seconds).
        state: The session state (``get_state``).
    """

    session_id: str
    lock: str | None = None
    locked_until: float | None = None
    state: bytes | None = None


@dataclass(slots=True)
class ManagementRequest:
    """A management operation on one entity (or a listing).

    Attributes:
        action: ``create``, ``get``, ``update``, ``delete``, ``list``, ``runtime`` or
            ``sessions`` (the ids of the sessions of a session-enabled queue or
            subscription, in id order: those holding messages other than scheduled ones
            or a state, or, when ``properties`` is a UTC epoch time in seconds, those
            whose state was set after it).
        kind: ``queue``, ``topic``, ``subscription`` or ``rule`` (``runtime`` and
            ``sessions`` take any path, and ``None``).
        path: The entity path (``topic/subscriptions/name`` for subscriptions; for a
            ``list`` of subscriptions, the topic; ``topic/subscriptions/sub/rules/name``
            for a rule, ``.../rules`` for the list of a subscription's rules:
            :func:`aiosb.rules.rule_path`).
        properties: The description, for ``create`` and ``update`` (a
            :class:`~aiosb.rules.RuleProperties` for a rule); for ``sessions``, ``None``
            or the time the state must have been set after.
        rule: The first rule of a subscription being created (``None``: ``$Default``,
            which takes every message).
    """

    action: ManageAction
    kind: EntityKind | None
    path: str = ""
    properties: Any = None
    rule: Any = None


@runtime_checkable
class Transport(Protocol):
    """One namespace, seen through one backend.

    Every method may raise any :mod:`aiosb.errors` class; none retries.
    """

    namespace: str
    """The namespace's name."""

    max_message_size: int
    """The largest message (and batch) the namespace accepts, in bytes."""

    async def send(
        self, entity: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        """Enqueue ``messages`` on ``entity`` as one batch: all of them or none.

        With ``transaction=True`` they are one transaction's sends: on a partitioned
        entity they must share one partition key (PT-16 to PT-18), and the batch size
        limit applies to each message rather than to their sum.
        """

    async def schedule(self, entity: str, messages: Sequence[Message]) -> list[int]:
        """Schedule messages (each with ``scheduled_enqueue_time``); return sequence numbers."""

    async def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages by sequence number."""

    async def receive(self, entity: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        """Receive, peek or fetch deferred messages, as ``request`` says."""

    async def settle(self, entity: str, settlement: Settlement) -> list[float] | None:
        """Settle locked messages; ``renew`` returns the new lock expiries (UTC seconds)."""

    async def session(self, entity: str, request: SessionRequest) -> SessionInfo:
        """Accept, renew or release a session, or read or write its state."""

    async def manage(self, request: ManagementRequest) -> Any:
        """Create, read, update, delete or list entities, read their counts, or list the
        sessions of one."""

    async def aclose(self) -> None:
        """Release everything the transport holds; idempotent."""


@runtime_checkable
class ColumnTransport(Protocol):
    """What a transport may add to :class:`Transport`: a batch received and sent as
    columns rather than a message object each (the syphon's move, #16). Columns hold, by
    field name of :class:`~aiosb.ReceivedMessage`, a list with each message's value, or
    one value every message has; a field left out has its default."""

    async def receive_columns(
        self, entity: str, request: ReceiveRequest
    ) -> tuple[list[bytes], dict[str, Any]]:
        """What :meth:`Transport.receive` gives, as the bodies and the columns of the other
        fields. The columns may share what the broker holds: read them, never change
        them."""

    async def send_columns(
        self, entity: str, bodies: list[bytes], columns: dict[str, Any]
    ) -> None:
        """:meth:`Transport.send` for messages given as columns of their sent fields (as
        :meth:`receive_columns` gave them, changed as a message may be), refused as
        :class:`~aiosb.Message` refuses a field (:func:`check_columns`)."""


def received_from_columns(bodies: list[bytes], columns: dict[str, Any]) -> list[ReceivedMessage]:
    """The :class:`ReceivedMessage` objects of a batch given as columns (what a
    transport's ``receive_columns`` gives: by field name a list with each message's
    value, or one value every message has; a field left out has its default), each with
    properties of its own (the columns may share the broker's)."""
    n = len(bodies)
    rows: list[Iterable[Any]] = [bodies]
    for name, default in _RECEIVED_DEFAULTS.items():
        column = columns.get(name, default)
        if name == "application_properties":
            props = column if column.__class__ is list else [column] * n
            rows.append([dict(p) if p else {} for p in props])
        else:
            rows.append(column if column.__class__ is list else itertools.repeat(column, n))
    return _build_all(zip(*rows, strict=False))


def check_columns(bodies: list[bytes], columns: dict[str, Any]) -> None:
    """Refuse a batch given as columns (by field name of :class:`Message`, a list with
    each message's value, or one value every message has) that :class:`Message` would
    refuse a message of: a column per pass, not a check per message and field (#16).

    Raises:
        InvalidArgument: A body that is not bytes, a field that is not a sent one, a
            column of the wrong length or type, or a value Message refuses.
        InvalidOperation: PT-7 (a partition key beside a different session id).
    """
    n = len(bodies)
    if not isinstance(bodies, list) or not set(map(type, bodies)) <= {bytes}:
        raise InvalidArgument("the bodies of a batch must be a list of bytes.")
    listed: dict[str, list[Any]] = {}
    for name, column in columns.items():
        kinds = _COLUMN_TYPES.get(name)
        if kinds is None:
            raise InvalidArgument(f"{name!r} is not a field of a message to send.")
        if column is None:  # no message has it
            continue
        values = column if column.__class__ is list else [column] * n
        if len(values) != n:
            raise InvalidArgument(f"the {name} column has {len(values)} values for {n} messages.")
        wrong = set(map(type, values)) - kinds - {type(None)}
        if wrong:
            raise InvalidArgument(
                f"{name} must be {' or '.join(k.__name__ for k in kinds)}, not "
                f"{min(wrong, key=lambda k: k.__name__).__name__}."
            )
        listed[name] = values
    for name in ("message_id", "session_id", "partition_key"):
        ids = listed.get(name)
        if ids is not None and (
            max(map(len, filter(None, ids)), default=0) > MAX_ID_LENGTH
            or (name == "message_id" and "" in ids)
        ):
            for value in ids:  # say which, as Message says it
                Message(b"", **{name: value})
    sessions, keys = listed.get("session_id"), listed.get("partition_key")
    if sessions is not None and keys is not None:
        for session_id, key in zip(sessions, keys, strict=True):
            check_partition_key(session_id, key)
    for name in TEXT_FIELDS:
        texts = listed.get(name)
        if texts is not None and not "".join(filter(None, texts)).isascii():
            for value in texts:  # say which, as Message says it
                Message(b"", **{name: value})
    types = listed.get("content_type")
    if types is not None and ("" in types or not all(map(content_type_ok, set(types)))):
        # (Message takes "" for None; a column says None for none.)
        raise InvalidArgument("a content type is printable ASCII, and not empty.")
    ttls = [t for t in listed.get("time_to_live", ()) if t is not None]
    if ttls and min(ttls) <= _ZERO:
        raise InvalidArgument("every time_to_live must be positive.")
    ats = listed.get("scheduled_enqueue_time")
    if ats is not None and not all(t is None or t.tzinfo is not None for t in set(ats)):
        raise InvalidArgument("every scheduled_enqueue_time must be timezone-aware.")
    props = [p for p in listed.get("application_properties", ()) if p]
    if props:
        # Each name once, the values' types at once, the texts joined: Message judges
        # (and says what is wrong) only a batch with something unusual in it.
        values = list(itertools.chain.from_iterable(map(dict.values, props)))
        if not (
            all(map(property_name_ok, set().union(*props)))
            and set(map(type, values)) <= _PROPERTY_VALUE_TYPES
            and "".join([v for v in values if type(v) is str]).isascii()
            and _carried(values)
        ):
            for p in props:
                Message(b"", application_properties=p)


def _carried(values: list[Any]) -> bool:
    """Whether every whole number among plain property ``values`` fits 64 bits and every
    datetime has a time zone (else :class:`Message` says which does not)."""
    ints = [v for v in values if v.__class__ is int]
    if ints and (min(ints) < LONG_MIN or max(ints) > ULONG_MAX):
        return False
    return all(v.tzinfo is not None for v in values if v.__class__ is _dt.datetime)


_ZERO = _dt.timedelta(0)
#: The types of property values Message takes, exactly (a subclass goes to Message).
_PROPERTY_VALUE_TYPES = set(_PROPERTY_TYPES)
#: The types of each sent field's values (``None`` aside), for :func:`check_columns`.
_COLUMN_TYPES: dict[str, set[type]] = {
    **{name: {str} for name in TEXT_FIELDS},
    "time_to_live": {_dt.timedelta},
    "scheduled_enqueue_time": {_dt.datetime},
    "application_properties": {dict},
    "amqp_extra": {bytes},
}


#: Every field but the body, with its default (the properties: an empty dict each).
_RECEIVED_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(ReceivedMessage)
    if f.name != "body"
}
_build_all = builder(ReceivedMessage, (*MESSAGE_FIELDS, *RECEIVED_FIELDS))
