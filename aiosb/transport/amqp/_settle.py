"""Settling a received message through the official SDK's receiver (the AMQP
transport's part of :meth:`~aiosb.transport.amqp.AmqpTransport.settle`): each action
as the SDK's own method, and, where the SDK has none, the settlement with properties to
modify as the .NET SDK sends it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import InvalidArgument
from ...protocol import Settlement
from ._convert import properties_to_sdk

__all__ = ["settle_operation"]


def settle_operation(
    action: str, sdk_message: Any, settlement: Settlement
) -> Callable[[Any], Awaitable[Any]]:
    """What settles ``sdk_message`` as ``settlement`` asks, given the SDK receiver."""
    if settlement.properties_to_modify and action in ("abandon", "defer", "dead_letter"):
        return functools.partial(_settle_modifying, message=sdk_message, settlement=settlement)
    if action == "complete":
        return lambda r: r.complete_message(sdk_message)
    if action == "abandon":
        return lambda r: r.abandon_message(sdk_message)
    if action == "defer":
        return lambda r: r.defer_message(sdk_message)
    if action == "dead_letter":
        return lambda r: r.dead_letter_message(
            sdk_message, reason=settlement.reason, error_description=settlement.description
        )
    if action == "renew":
        return lambda r: r.renew_message_lock(sdk_message)
    raise InvalidArgument(f"unknown settlement action {action!r}.")


async def _settle_modifying(receiver: Any, *, message: Any, settlement: Settlement) -> None:
    """Abandon, defer or dead-letter with ``properties_to_modify``, which the SDK's
    settlement methods do not take.

    It sends what the .NET SDK sends and Service Bus applies: on the receive link, the
    ``modified`` outcome with the properties as its message annotations (abandon, defer),
    or ``rejected`` with them in the dead-letter error's info next to the reason and
    description; for a deferred message (received by sequence number), the
    ``update-disposition`` request with ``properties-to-modify``. The SDK's own checks
    (settled already, peeked, receive-and-delete) and error mapping apply as for its
    own settlements.
    """
    from azure.servicebus._common import constants as c
    from azure.servicebus._pyamqp.error import AMQPError

    action = settlement.action
    operation = {"abandon": c.MESSAGE_ABANDON, "defer": c.MESSAGE_DEFER,
                 "dead_letter": c.MESSAGE_DEAD_LETTER}[action]
    receiver._check_live()
    receiver._check_message_alive(message, operation)
    props = properties_to_sdk(settlement.properties_to_modify or {})
    reason, description = settlement.reason, settlement.description

    async def settle() -> None:
        if message._is_deferred_message:
            details: dict[str, Any] = {"properties-to-modify": props}
            if action == "dead_letter":
                details[c.MGMT_REQUEST_DEAD_LETTER_REASON] = reason or ""
                details[c.MGMT_REQUEST_DEAD_LETTER_ERROR_DESCRIPTION] = description or ""
            await receiver._settle_message_via_mgmt_link(
                c.MESSAGE_MGMT_SETTLEMENT_TERM_MAP[operation], [message.lock_token],
                dead_letter_details=details,
            )
            return
        outcome: dict[str, Any]
        if action == "dead_letter":
            info = {c.RECEIVER_LINK_DEAD_LETTER_REASON: reason,
                    c.RECEIVER_LINK_DEAD_LETTER_ERROR_DESCRIPTION: description, **props}
            outcome = {"outcome": "rejected", "error": AMQPError(
                condition=c.DEADLETTERNAME, description=description, info=info)}
        else:
            outcome = {"outcome": "modified", "delivery_failed": True,
                       "undeliverable_here": action == "defer", "message_annotations": props}
        await receiver._handler.settle_messages_async(
            message._delivery_id, message._delivery_tag, **outcome,
            await_outcome=receiver._await_settlement_outcome,
            outcome_timeout=receiver._config.timeout,
        )

    await receiver._do_retryable_operation(settle, timeout=None)
    message._settled = True
