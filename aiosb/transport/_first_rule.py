"""Creating a subscription with a first rule of its own, on a backend whose protocol
creates every subscription with ``$Default`` (the official SDK's administration client,
REST's Atom routes): create it, then put the rule in ``$Default``'s place. If the rule
is refused (a filter that does not parse), the subscription is deleted again, so that
nothing is left, as on the embedded broker."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Protocol

from ..errors import ServiceBusError
from ..protocol import ManagementRequest
from ..rules import DEFAULT_RULE, RuleProperties, rule_path

__all__ = ["create_with_rule"]


class Manages(Protocol):
    """What this needs of a transport: its management operation."""

    async def manage(self, request: ManagementRequest) -> Any: ...


async def create_with_rule(transport: Manages, request: ManagementRequest) -> Any:
    """Create the subscription of ``request`` with ``request.rule`` as its only rule."""
    made = await transport.manage(dataclasses.replace(request, rule=None))
    try:
        await _first_rule(transport, request.path, request.rule)
    except BaseException:
        with contextlib.suppress(ServiceBusError):
            await transport.manage(ManagementRequest("delete", "subscription", request.path))
        raise
    return made


async def _first_rule(transport: Manages, subscription: str, rule: RuleProperties) -> None:
    topic, _, name = subscription.rpartition("/subscriptions/")
    path = rule_path(topic, name, rule.name)
    if rule.name.lower() == DEFAULT_RULE.lower():
        await transport.manage(ManagementRequest("update", "rule", path, rule))
        return
    await transport.manage(ManagementRequest("create", "rule", path, rule))
    await transport.manage(
        ManagementRequest("delete", "rule", rule_path(topic, name, DEFAULT_RULE))
    )
