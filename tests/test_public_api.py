"""The public names of architecture.md are a contract."""

from __future__ import annotations

import pickle

import pytest

import aiosb
from aiosb import errors


def test_all_lists_exactly_the_public_names():
    assert sorted(aiosb.__all__) == sorted(
        [
            "NEVER",
            "NEXT_AVAILABLE_SESSION",
            "CorrelationRuleFilter",
            "FalseRuleFilter",
            "RuleProperties",
            "SqlRuleAction",
            "SqlRuleFilter",
            "TrueRuleFilter",
            "Message",
            "Namespace",
            "PairedNamespace",
            "PairedNamespaceOptions",
            "PairedSender",
            "QueueProperties",
            "ReceivedMessage",
            "Receiver",
            "ReceiverSession",
            "RuntimeProperties",
            "SasCredential",
            "Sender",
            "ServiceBusError",
            "SubscriptionProperties",
            "TopicProperties",
            "Transaction",
            "__version__",
            "connect",
            "errors",
        ]
    )
    for name in aiosb.__all__:
        assert hasattr(aiosb, name), name


def test_errors_module_has_the_architecture_names():
    for name in [
        "ServiceBusError",
        "MessagingError",
        "OperationTimeout",
        "ServerBusy",
        "EntityNotFound",
        "EntityAlreadyExists",
        "MessageSizeExceeded",
        "QuotaExceeded",
        "InvalidOperation",
        "Unauthorized",
        "MessageLockLost",
        "SessionLockLost",
        "PartitionUnavailable",
        "BacklogUnavailable",
    ]:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.ServiceBusError)
    assert sorted(errors.__all__) == sorted(
        n for n in dir(errors) if isinstance(getattr(errors, n), type) and n[0].isupper()
    )


@pytest.mark.parametrize(
    ("cls", "retryable"),
    [
        (errors.TransientError, True),
        (errors.ServerBusy, True),
        (errors.PartitionUnavailable, True),
        (errors.OperationTimeout, True),
        (errors.MessagingError, False),
        (errors.EntityUnavailable, False),
        (errors.EntityNotFound, False),
        (errors.MessageSizeExceeded, False),
        (errors.InvalidOperation, False),
        (errors.Unauthorized, False),
        (errors.MessageLockLost, False),
        (errors.BacklogUnavailable, False),
    ],
)
def test_each_error_knows_whether_it_is_retryable(cls, retryable):
    assert cls("x").retryable is retryable
    assert cls("x", retryable=not retryable).retryable is (not retryable)


def test_operation_timeout_is_a_timeout_error_and_errors_pickle():
    exc = errors.OperationTimeout("took too long", retryable=False)
    assert isinstance(exc, TimeoutError)
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is errors.OperationTimeout
    assert again.message == "took too long" and again.retryable is False


def test_invalid_argument_is_a_value_error():
    assert issubclass(errors.InvalidArgument, ValueError)
    assert issubclass(errors.InvalidArgument, errors.InvalidOperation)
