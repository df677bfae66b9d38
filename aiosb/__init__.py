"""aiosb: an asyncio-native messaging framework for Azure Service Bus.

Start with :func:`connect`::

    async with aiosb.connect("memory://contoso") as ns:
        await ns.create_queue("orders")
        async with ns.sender("orders") as sender:
            await sender.send(aiosb.Message(b"hello"))
"""

from __future__ import annotations

import logging

from . import errors
from .auth import SasCredential
from .client import (
    NEXT_AVAILABLE_SESSION,
    Namespace,
    Receiver,
    ReceiverSession,
    Sender,
    Transaction,
    connect,
)
from .entities import (
    NEVER,
    QueueProperties,
    RuntimeProperties,
    SubscriptionProperties,
    TopicProperties,
)
from .errors import ServiceBusError
from .message import Message, ReceivedMessage
from .pairing import PairedNamespace, PairedNamespaceOptions, PairedSender
from .rules import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

__version__ = "0.1.0"

logging.getLogger("aiosb").addHandler(logging.NullHandler())

__all__ = [
    "NEVER",
    "CorrelationRuleFilter",
    "FalseRuleFilter",
    "RuleProperties",
    "SqlRuleAction",
    "SqlRuleFilter",
    "TrueRuleFilter",
    "NEXT_AVAILABLE_SESSION",
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
