"""Errors on the wire: the HTTP status each :mod:`aiosb.errors` class answers with, and
the error back from a status (and, from aiosb's server, the ``x-aiosb-error`` header that
names the exact class), so that a client classifies an HTTP failure exactly as it would
an embedded one. Shared by the HTTP transport and the HTTP server; imports only the
vocabulary (:mod:`aiosb.errors`).
"""

from __future__ import annotations

from .. import errors
from ..errors import ServiceBusError

__all__ = [
    "ERROR_HEADER",
    "RETRYABLE_HEADER",
    "TIMEOUT_HEADER",
    "error_from_status",
    "status_for",
]

#: Names the exact :mod:`aiosb.errors` class of a failure (aiosb's server only).
ERROR_HEADER = "x-aiosb-error"
#: ``true`` or ``false``: whether that failure may succeed if tried again.
RETRYABLE_HEADER = "x-aiosb-retryable"
#: The client's budget for one request, in seconds (aiosb extension): the server gives
#: the operation up when it runs out, so a timed-out operation has no later effect.
TIMEOUT_HEADER = "x-aiosb-timeout"


#: The status each error answers with; the most specific class wins. Data-plane
#: statuses are those the REST protocol documents (410 for an entity that does not
#: exist, 404 for a lock or message that is not found).
_STATUS: list[tuple[type[ServiceBusError], int]] = [
    (errors.EntityNotFound, 410),
    (errors.MessageNotFound, 404),
    (errors.MessageLockLost, 404),
    (errors.SessionLockLost, 404),
    (errors.EntityAlreadyExists, 409),
    (errors.MessageSizeExceeded, 413),
    (errors.QuotaExceeded, 403),
    (errors.Unauthorized, 401),
    (errors.InvalidOperation, 400),
    (errors.EntityUnavailable, 503),
    (errors.ServerBusy, 503),
    (errors.PartitionUnavailable, 503),
    (errors.OperationTimeout, 504),
    (errors.TransientError, 500),
    (errors.MessagingError, 400),
    (errors.ServiceBusError, 500),
]
_CLASSES = {cls.__name__: cls for cls in vars(errors).values()
            if isinstance(cls, type) and issubclass(cls, ServiceBusError)}


def status_for(exc: ServiceBusError) -> int:
    """The HTTP status an error answers with."""
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500  # pragma: no cover - ServiceBusError is last in the table


def error_from_status(
    status: int,
    detail: str,
    *,
    name: str | None = None,
    retryable: str | None = None,
    settling: bool = False,
) -> ServiceBusError:
    """The :mod:`aiosb.errors` instance for a failed response.

    Args:
        status: The HTTP status.
        detail: The server's sentence.
        name: The ``x-aiosb-error`` header, when the server is aiosb's: the exact class.
        retryable: The ``x-aiosb-retryable`` header.
        settling: The request was on a message lock (404 means the lock is lost, not
            a missing entity).
    """
    cls = _CLASSES.get(name or "")
    if cls is None:
        if status == 404:
            cls = errors.MessageLockLost if settling else errors.EntityNotFound
        elif status == 410:
            cls = errors.EntityNotFound
        elif status == 401:
            cls = errors.Unauthorized
        elif status == 403:
            cls = errors.QuotaExceeded
        elif status == 409:
            cls = errors.EntityAlreadyExists
        elif status == 413:
            cls = errors.MessageSizeExceeded
        elif status in (503, 429):
            cls = errors.ServerBusy
        elif status in (408, 504):
            cls = errors.OperationTimeout
        elif status >= 500:
            cls = errors.TransientError
        else:
            cls = errors.InvalidOperation
    flag = None if retryable is None else retryable.strip().lower() == "true"
    return cls(detail or f"The server answered HTTP {status}.", retryable=flag)
