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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import InvalidArgument
from .message import Message, PropertyValue, ReceivedMessage

__all__ = [
    "MAX_RECEIVE_MESSAGES",
    "MAX_RECEIVE_WAIT",
    "check_receive",
    "ColumnTransport",
    "entity_kind",
    "ManagementRequest",
    "ReceiveRequest",
    "SessionInfo",
    "SessionRequest",
    "Settlement",
    "Transport",
]

ReceiveMode = Literal["peek_lock", "receive_and_delete"]
SettleAction = Literal["complete", "abandon", "dead_letter", "defer", "renew"]
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
        action: ``complete``, ``abandon``, ``dead_letter``, ``defer`` or ``renew``.
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
        :meth:`receive_columns` gave them, and changed as a message may be): not checked
        as a :class:`~aiosb.Message` checks its fields."""
