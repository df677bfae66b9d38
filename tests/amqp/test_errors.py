"""Error mapping of the AMQP transport: every SDK exception class, as real instances.

Each row says what aiosb raises, whether the client retries it (``retryable``), and
whether pairing counts it as an outage of the primary (PN-6: non-transient or timeout,
and not the caller's own fault).
"""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace

import pytest
from azure.core import exceptions as core
from azure.servicebus import exceptions as sdk
from azure.servicebus._pyamqp.error import (
    AMQPConnectionError,
    AMQPLinkError,
    ErrorCondition,
)
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

from aiosb import errors
from aiosb.pairing.runtime import is_outage
from aiosb.transport.amqp._error_map import condition_of, is_idle_detach, map_error

IDLE_TEXT = (
    "The link 'G3:123:amqps://contoso.servicebus.windows.net/orders' is force detached. "
    "Code: publisher(link42). Details: AmqpMessagePublisher.IdleTimerExpired: Idle timeout: "
    "00:10:00."
)


def http_error(cls: type[core.HttpResponseError], status: int, text: str = "failed"):
    exc = cls(message=text)
    exc.status_code = status
    return exc


# (exception, aiosb class, retryable, outage)
ROWS = [
    (sdk.ServiceBusConnectionError(), errors.TransientError, True, False),
    (sdk.ServiceBusAuthenticationError(), errors.Unauthorized, False, False),
    (sdk.ServiceBusAuthorizationError(), errors.Unauthorized, False, False),
    (sdk.OperationTimeoutError(), errors.OperationTimeout, True, True),
    (sdk.MessageSizeExceededError(), errors.MessageSizeExceeded, False, False),
    (sdk.MessageAlreadySettled(action="complete"), errors.MessageLockLost, False, False),
    (sdk.MessageLockLostError(), errors.MessageLockLost, False, False),
    (sdk.SessionLockLostError(), errors.SessionLockLost, False, False),
    (sdk.MessageNotFoundError(), errors.MessageNotFound, False, False),
    (sdk.MessagingEntityNotFoundError(), errors.EntityNotFound, False, False),
    (sdk.MessagingEntityDisabledError(), errors.EntityUnavailable, False, True),
    (sdk.MessagingEntityAlreadyExistsError(), errors.EntityAlreadyExists, False, False),
    (sdk.ServiceBusQuotaExceededError(), errors.QuotaExceeded, False, True),
    (sdk.ServiceBusServerBusyError(), errors.ServerBusy, True, False),
    (sdk.ServiceBusCommunicationError(), errors.TransientError, True, False),
    (sdk.SessionCannotBeLockedError(), errors.SessionCannotBeLocked, False, False),
    (sdk.AutoLockRenewFailed("renew failed"), errors.MessageLockLost, False, False),
    (sdk.AutoLockRenewTimeout("renew ran out"), errors.MessageLockLost, False, False),
    (sdk.ServiceBusError("no condition"), errors.MessagingError, False, True),
    (sdk.ServiceBusError("x", condition=b"amqp:not-allowed"), errors.InvalidOperation, 0, 0),
    (
        sdk.ServiceBusError("x", condition=b"com.microsoft:argument-out-of-range"),
        errors.InvalidArgument,
        False,
        False,
    ),
    (sdk.ServiceBusError("x", condition=b"amqp:internal-error"), errors.TransientError, 1, 0),
    # The management client speaks HTTP through azure-core.
    (core.ResourceExistsError("exists"), errors.EntityAlreadyExists, False, False),
    (core.ResourceNotFoundError("missing"), errors.EntityNotFound, False, False),
    (core.ClientAuthenticationError("bad key"), errors.Unauthorized, False, False),
    (core.ServiceRequestError("no route to host"), errors.TransientError, True, False),
    (core.ServiceResponseError("connection reset"), errors.TransientError, True, False),
    (http_error(core.HttpResponseError, 503), errors.ServerBusy, True, False),
    (http_error(core.HttpResponseError, 429), errors.ServerBusy, True, False),
    (http_error(core.HttpResponseError, 500), errors.TransientError, True, False),
    (http_error(core.HttpResponseError, 400), errors.InvalidArgument, False, False),
    (http_error(core.HttpResponseError, 401), errors.Unauthorized, False, False),
    (
        http_error(core.HttpResponseError, 403, "SubCode=40301. quota exceeded"),
        errors.QuotaExceeded,
        False,
        True,
    ),
    (http_error(core.HttpResponseError, 413), errors.MessageSizeExceeded, False, False),
]


@pytest.mark.parametrize(
    ("exc", "expected", "retryable", "outage"),
    ROWS,
    ids=[f"{type(row[0]).__name__}-{i}" for i, row in enumerate(ROWS)],
)
def test_sdk_exceptions_map_to_aiosb_errors(exc, expected, retryable, outage):
    mapped = map_error(exc, "send on contoso/orders")
    assert type(mapped) is expected
    assert mapped.retryable is bool(retryable)
    assert is_outage(mapped) is bool(outage)
    assert mapped.message.startswith("send on contoso/orders: ")


def test_every_sdk_exception_class_has_a_row():
    """A class added to azure.servicebus.exceptions fails here until it is mapped."""
    classes = {
        cls
        for _, cls in inspect.getmembers(sdk, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == sdk.__name__
    }
    covered = {type(row[0]) for row in ROWS}
    assert classes - covered == set()


def test_retryability_comes_from_the_class_not_the_sdks_private_flag():
    """The SDK marks a bad key retryable; aiosb must not keep retrying it."""
    exc = sdk.ServiceBusAuthenticationError()
    exc._retryable = True
    assert map_error(exc).retryable is False
    busy = sdk.ServiceBusServerBusyError()
    busy._retryable = False
    assert map_error(busy).retryable is True


# What the SDK itself raises for AMQP errors from the wire (its own translator).
WIRE = [
    (AMQPLinkError, ErrorCondition.LinkDetachForced, errors.TransientError, True),
    (AMQPConnectionError, ErrorCondition.ConnectionCloseForced, errors.TransientError, True),
    (AMQPLinkError, b"com.microsoft:server-busy", errors.ServerBusy, False),
    (AMQPLinkError, b"com.microsoft:timeout", errors.OperationTimeout, False),
    (AMQPLinkError, ErrorCondition.NotFound, errors.EntityNotFound, False),
    (AMQPLinkError, b"com.microsoft:entity-disabled", errors.EntityUnavailable, False),
    (AMQPLinkError, b"com.microsoft:message-lock-lost", errors.MessageLockLost, False),
    (AMQPLinkError, b"com.microsoft:session-lock-lost", errors.SessionLockLost, False),
    (AMQPLinkError, ErrorCondition.UnauthorizedAccess, errors.Unauthorized, False),
    (AMQPLinkError, ErrorCondition.ResourceLimitExceeded, errors.QuotaExceeded, False),
    (AMQPLinkError, ErrorCondition.LinkMessageSizeExceeded, errors.MessageSizeExceeded, False),
    (AMQPLinkError, ErrorCondition.NotAllowed, errors.InvalidOperation, False),
]


@pytest.mark.parametrize(("amqp_cls", "condition", "expected", "idle"), WIRE)
def test_amqp_conditions_as_the_sdk_raises_them(amqp_cls, condition, expected, idle):
    raised = PyamqpTransport.create_servicebus_exception(
        logging.getLogger("test"), amqp_cls(condition, description="from the broker")
    )
    assert isinstance(raised, sdk.ServiceBusError)
    assert type(map_error(raised)) is expected
    assert is_idle_detach(raised) is idle


def test_idle_detach_is_recognised_from_condition_or_text():
    by_condition = sdk.ServiceBusConnectionError(
        message="detached", condition=b"amqp:link:detach-forced"
    )
    assert condition_of(by_condition) == "amqp:link:detach-forced"
    assert is_idle_detach(by_condition)
    assert is_idle_detach(sdk.ServiceBusConnectionError(message=IDLE_TEXT))
    assert is_idle_detach(AMQPLinkError(ErrorCondition.LinkDetachForced, description=IDLE_TEXT))


@pytest.mark.parametrize(
    "exc",
    [
        sdk.ServiceBusConnectionError(message="Failed to initiate the connection."),
        sdk.MessageLockLostError(message=IDLE_TEXT),  # a lock, whatever the text says
        sdk.MessagingEntityNotFoundError(condition=b"amqp:link:detach-forced"),
        sdk.ServiceBusServerBusyError(),
        ValueError("not an SDK error"),
    ],
)
def test_other_errors_are_not_idle_detaches(exc):
    assert not is_idle_detach(exc)


def test_unknown_exceptions_become_non_transient_messaging_errors():
    mapped = map_error(KeyError("surprise"))
    assert type(mapped) is errors.MessagingError and not mapped.retryable
    assert type(map_error(ValueError("The handler has already been shutdown."))) is (
        errors.ClientClosed
    )
    assert type(map_error(TypeError("bad argument"))) is errors.InvalidOperation


def test_the_class_an_aiosb_server_names_wins_over_the_condition():
    """aiosb serve keeps the condition the SDK knows (server-busy: retried) and names
    the exact class in the error's info; its HTTPS endpoint does so in a header."""
    link_error = AMQPLinkError(
        condition=b"com.microsoft:server-busy", description="Fragment 3 of 'p' is down",
        info={b"x-aiosb-error": b"PartitionUnavailable"},
    )
    made = PyamqpTransport.create_servicebus_exception(logging.getLogger(__name__), link_error)
    assert isinstance(made, sdk.ServiceBusServerBusyError)
    got = map_error(made, "send")
    assert type(got) is errors.PartitionUnavailable and got.retryable
    plain = AMQPLinkError(condition=b"com.microsoft:server-busy", description="busy")
    made = PyamqpTransport.create_servicebus_exception(logging.getLogger(__name__), plain)
    assert type(map_error(made)) is errors.ServerBusy  # a real namespace names nothing

    outage = http_error(core.HttpResponseError, 503, "The namespace is unavailable")
    outage.response = SimpleNamespace(headers={"x-aiosb-error": "EntityUnavailable"})
    got = map_error(outage, "get queue 'q'")
    assert type(got) is errors.EntityUnavailable and not got.retryable
    assert type(map_error(http_error(core.HttpResponseError, 503))) is errors.ServerBusy


def test_a_put_token_refused_with_404_is_a_missing_entity():
    """Service Bus (and aiosb serve) answer a put-token for an entity that does not exist
    with 404; the SDK raises its authentication error, whose cause says 404 (#47)."""
    from azure.servicebus._pyamqp.error import TokenAuthFailure

    said = "The messaging entity 'nosuch' could not be found."
    raised = PyamqpTransport.create_servicebus_exception(
        logging.getLogger("test"), TokenAuthFailure(404, said))
    assert isinstance(raised, sdk.ServiceBusAuthenticationError)
    mapped = map_error(raised)
    assert type(mapped) is errors.EntityNotFound
    assert "'nosuch'" in str(mapped)
    refused = PyamqpTransport.create_servicebus_exception(
        logging.getLogger("test"), TokenAuthFailure(401, "a bad signature"))
    assert type(map_error(refused)) is errors.Unauthorized
