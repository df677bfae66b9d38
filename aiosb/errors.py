"""The aiosb error taxonomy.

Every error raised by aiosb is a :class:`ServiceBusError`. Each knows whether the
operation that raised it may succeed if simply tried again (``retryable``). The client
retries retryable errors with backoff within the operation timeout; when the timeout
runs out first, the caller gets :class:`OperationTimeout`.

The tree::

    ServiceBusError
    ├── TransientError                (retryable: a dropped link, a blip)
    │   ├── ServerBusy
    │   └── PartitionUnavailable      (a keyed message's fragment is down)
    ├── OperationTimeout              (also a TimeoutError)
    ├── ClientClosed
    └── MessagingError                (non-transient)
        ├── EntityUnavailable         (an outage of the entity or namespace)
        ├── EntityNotFound
        ├── EntityAlreadyExists
        ├── MessageNotFound
        ├── MessageSizeExceeded
        ├── QuotaExceeded
        ├── InvalidOperation
        │   └── InvalidArgument       (also a ValueError: a value out of range)
        ├── Unauthorized
        ├── MessageLockLost
        ├── SessionLockLost
        ├── SessionCannotBeLocked     (another receiver holds the session)
        └── BacklogUnavailable        (pairing: primary and every backlog queue down)
"""

from __future__ import annotations

import typing

__all__ = [
    "BacklogUnavailable",
    "ClientClosed",
    "EntityAlreadyExists",
    "EntityNotFound",
    "EntityUnavailable",
    "InvalidArgument",
    "InvalidOperation",
    "MessageLockLost",
    "MessageNotFound",
    "MessageSizeExceeded",
    "MessagingError",
    "OperationTimeout",
    "PartitionUnavailable",
    "QuotaExceeded",
    "ServerBusy",
    "ServiceBusError",
    "SessionCannotBeLocked",
    "SessionLockLost",
    "TransientError",
    "Unauthorized",
]


class ServiceBusError(Exception):
    """Base class of every aiosb error.

    Args:
        message: One sentence that says what happened and what to do.
        retryable: Overrides the class default; ``None`` keeps it.

    Attributes:
        retryable: Whether the same operation may succeed if tried again.
    """

    retryable: bool = False

    def __init__(self, message: str = "", *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable

    @property
    def message(self) -> str:
        """The error's sentence."""
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[typing.Any, ...]:  # keep `retryable` (Spark ships errors)
        return (_rebuild, (type(self), self.message, self.retryable))


def _rebuild(cls: type[ServiceBusError], message: str, retryable: bool) -> ServiceBusError:
    return cls(message, retryable=retryable)


class TransientError(ServiceBusError):
    """A passing fault (dropped connection, idle link closed, blip): try again."""

    retryable = True


class ServerBusy(TransientError):
    """The broker is throttling: back off and try again."""


class PartitionUnavailable(TransientError):
    """The fragment a keyed message is pinned to is down (PT-9); it never moves elsewhere."""


class OperationTimeout(ServiceBusError, TimeoutError):
    """The operation, with its retries of transient errors, ran past its timeout."""

    retryable = True


class ClientClosed(ServiceBusError):
    """The namespace, sender or receiver was used after it was closed."""


class MessagingError(ServiceBusError):
    """A non-transient messaging error: retrying the same call will not help."""


class EntityUnavailable(MessagingError):
    """The entity or its namespace is unavailable (an outage)."""


class EntityNotFound(MessagingError):
    """The queue, topic or subscription does not exist."""


class EntityAlreadyExists(MessagingError):
    """An entity with that name exists already."""


class MessageNotFound(MessagingError):
    """No message with that sequence number (deferred or scheduled) exists."""


class MessageSizeExceeded(MessagingError):
    """A message or batch is larger than the entity allows."""


class QuotaExceeded(MessagingError):
    """The entity is full or the namespace has too many entities."""


class InvalidOperation(MessagingError):
    """The operation is not allowed in this state or on this entity."""


class InvalidArgument(InvalidOperation, ValueError):
    """A value is out of its allowed range; the sentence names the value and the limit."""


class Unauthorized(MessagingError):
    """The credential is missing, wrong, expired or not valid for this resource."""


class MessageLockLost(MessagingError):
    """The message's lock expired, it was settled already, or the token is not known."""


class SessionLockLost(MessagingError):
    """The session's lock expired or was lost."""


class SessionCannotBeLocked(MessagingError):
    """The session is locked by another receiver (or none is available to accept)."""


class BacklogUnavailable(MessagingError):
    """Pairing: the primary entity and every backlog queue are unavailable."""
