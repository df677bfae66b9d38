"""How the official SDK's errors become aiosb's (:func:`map_error`), for the AMQP
transport: by exception class, by the AMQP condition in the text, by HTTP status for the
administration client, and by the exact class an aiosb server names in the error's info
(``x-aiosb-error``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

from ... import errors
from .._tls_failures import chain as _chain
from .._tls_failures import tls_failure
from ._convert import sdk

__all__ = ["ERROR_NAME", "IDLE_CONDITIONS", "Reached", "condition_of", "is_idle_detach",
           "map_error", "named_error", "refused"]

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
        (ex.ServiceBusAuthenticationError, _from_token_failure),
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
        (core.ServiceRequestError, _from_request_error),  # no connection made
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


def _from_token_failure(text: str, exc: BaseException) -> errors.ServiceBusError:
    """A token the ``$cbs`` node refused: with 404, for an entity that does not exist
    (Service Bus, and aiosb serve, answer a put-token so), else a credential refused."""
    for candidate in _chain(exc, ("inner_exception", "__cause__")):
        if getattr(candidate, "status_code", None) == 404:
            said = str(candidate).rpartition("Description: ")[2].strip()
            return errors.EntityNotFound(f"{text} ({said})" if said not in text else text)
    return errors.Unauthorized(text)


def _from_request_error(text: str, exc: BaseException) -> errors.ServiceBusError:
    """No connection made: transient, unless TLS failed (a certificate not trusted, a
    port that does not speak TLS: the administration client's HTTPS at the connection
    string's port, which aiosb serve's AMQP port is not)."""
    url = getattr(getattr(exc, "request", None), "url", None) or "the administration endpoint"
    failed = tls_failure(exc, str(url), _NO_ADMIN_HERE)
    if failed is not None:
        said = str(exc)
        what = text[: -len(said)] if said and text.endswith(said) else ""
        return type(failed)(what + failed.message)
    return errors.TransientError(text)


#: Why the administration client's HTTPS fails on a port that does not speak TLS.
_NO_ADMIN_HERE = (
    "the official SDK manages entities over HTTPS at the connection string's port. If "
    "that is aiosb serve's AMQP port, it answers HTTPS there only with a certificate, and "
    "has none: install cryptography (pip install aiosb[tls]) or give it --tls-cert and "
    "--tls-key, and trust the certificate (connection_verify=...); or manage entities "
    "through its HTTP port (aiosb.connect('http://localhost:5380/NAMESPACE')). Sending "
    "and receiving work over this connection string."
)


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
_NAMED_IN_TEXT = re.compile(r"\[x-aiosb-error: (\w+)\]")
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
    for candidate in _chain(exc, ("inner_exception", "__cause__", "error")):
        info = getattr(candidate, "info", None)
        name = None
        if isinstance(info, dict):
            name = info.get(ERROR_NAME.encode(), info.get(ERROR_NAME))
        headers = getattr(getattr(candidate, "response", None), "headers", None)
        if name is None and headers is not None:
            with contextlib.suppress(Exception):
                name = headers.get(ERROR_NAME)
        if name is None:  # a $management reply names it at its description's end
            named_in_text = _NAMED_IN_TEXT.search(str(candidate))
            name = named_in_text.group(1) if named_in_text else None
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        cls = _ERROR_CLASSES.get(name) if isinstance(name, str) else None
        if cls is not None:
            return cls
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



def refused(exc: BaseException) -> str | None:
    """What said no, if ``exc`` comes of a connection refused (nothing listens at the
    port) anywhere in its chain; else ``None``. A host name that does not resolve is not
    one: a name service starting up fails for a while, and is retried."""
    links = ("inner_exception", "os_error", "__cause__", "__context__")
    return next(
        (str(c) for c in _chain(exc, links) if isinstance(c, ConnectionRefusedError)), None
    )


class Reached:
    """Whether the namespace has answered the transport once (shared by its links and its
    management): until it has, a refused connection is a server not started or a wrong
    address, said at once as the HTTP transport says it (issue 17), not retried for the
    operation timeout; it is still an outage for pairing (PN-6). Once the namespace has
    answered, a refusal is transient (a restart, a move)."""

    __slots__ = ("address", "yes")

    def __init__(self, address: str) -> None:
        self.address = address
        self.yes = False

    def error(self, exc: BaseException, what: str) -> errors.ServiceBusError:
        """The aiosb error for an SDK failure of ``what``."""
        mapped = map_error(exc, what)
        refusal = refused(exc)
        if refusal is None:
            if not isinstance(mapped, errors.TransientError):
                self.yes = True  # the broker answered, if only to say no
            return mapped
        if self.yes or not isinstance(mapped, errors.TransientError):
            return mapped
        return errors.EntityUnavailable(
            f"nothing is listening at sb://{self.address}; is the server started, and is the "
            f"address right? ({refusal})"
        )
