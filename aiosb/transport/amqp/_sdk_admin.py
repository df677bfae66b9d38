"""Management over the official SDK's administration client: entities, rules and
runtime counts, for :class:`~aiosb.transport.amqp.AmqpTransport` (a mixin: it provides
``_admin``, the SDK's ``ServiceBusAdministrationClient``, ``_client``, its
``ServiceBusClient``, which lists sessions, and ``manage``)."""

from __future__ import annotations

import datetime as _dt
import xml.etree.ElementTree as ET
from typing import Any

from ...entities import parse_entity_path
from ...errors import EntityNotFound, InvalidArgument, InvalidOperation
from ...protocol import ManagementRequest
from ...rules import split_rule_path
from ...wire.atom import read_runtime
from .._first_rule import create_with_rule
from ._convert import (
    apply_to_sdk,
    entity_from_sdk,
    entity_kwargs,
    rule_from_sdk,
    rule_to_sdk,
)

__all__ = ["AdminOperations"]


class AdminOperations:
    """The management operations of the AMQP transport."""

    _admin: Any
    _client: Any
    #: The namespace's tier (``basic``, ``standard`` or ``premium``), read on first need.
    _namespace_tier: str | None = None

    async def manage(self, request: ManagementRequest) -> Any:
        raise NotImplementedError

    async def _manage(self, request: ManagementRequest) -> Any:
        admin, action, kind = self._admin, request.action, request.kind
        if action == "runtime":
            return await self._runtime(request.path)
        if action == "sessions":
            return await self._list_sessions(request)
        if kind == "rule":
            return await self._rule(request)
        if action == "create" and kind == "subscription" and request.rule is not None:
            return await create_with_rule(self, request)
        if action == "list":
            if kind is None:
                raise InvalidArgument("list needs the entity kind.")
            if kind == "subscription":
                topic = request.path
                pager = admin.list_subscriptions(topic)
                return [entity_from_sdk(kind, s, topic=topic) async for s in pager]
            pager = admin.list_queues() if kind == "queue" else admin.list_topics()
            return [entity_from_sdk(kind, e) async for e in pager]
        if kind not in ("queue", "topic", "subscription"):
            raise InvalidArgument(f"unknown entity kind {kind!r}.")
        path = parse_entity_path(request.path)
        topic, name = (
            (path.entity, path.subscription) if kind == "subscription" else ("", path.entity)
        )
        if action == "create":
            props = request.properties.normalised(await self._tier())
            kwargs = entity_kwargs(kind, props)
            if kind == "subscription":
                created = await admin.create_subscription(topic, props.name, **kwargs)
            else:
                created = await getattr(admin, f"create_{kind}")(props.name, **kwargs)
            return entity_from_sdk(kind, created, topic=topic)
        if action == "get":
            return entity_from_sdk(kind, await self._get(kind, topic, name), topic=topic)
        if action == "update":
            tier = await self._tier()
            current = await self._get(kind, topic, name)
            before = entity_from_sdk(kind, current, topic=topic)
            # What cannot change is checked before the values are validated, as the
            # broker does: a partitioned entity reports its size in the 16x form, valid
            # only while partitioned (PT-4). Premium partitions everything, so there the
            # check waits for the normalised description.
            fixed = [] if tier == "premium" else before.changed_fixed(request.properties)
            props = request.properties if fixed else request.properties.normalised(tier)
            fixed = fixed or before.changed_fixed(props)
            if fixed:
                raise InvalidOperation(
                    f"{', '.join(fixed)} of {request.path!r} cannot change after creation (PT-3)."
                )
            await getattr(admin, f"update_{kind}")(
                *([topic] if kind == "subscription" else []), apply_to_sdk(current, props)
            )
            return entity_from_sdk(kind, await self._get(kind, topic, name), topic=topic)
        if action == "delete":
            if kind == "subscription":
                await admin.delete_subscription(topic, name)
            else:
                await getattr(admin, f"delete_{kind}")(name)
            return None
        raise InvalidArgument(f"unknown management action {action!r}.")

    async def _list_sessions(self, request: ManagementRequest) -> list[str]:
        """The sessions of a queue or subscription (get-message-sessions, every page)."""
        client = self._client
        if not hasattr(client, "list_queue_sessions"):
            raise InvalidOperation(
                "listing sessions needs azure-servicebus 7.15 or later: pip install -U "
                "azure-servicebus."
            )
        after = request.properties
        options = {} if after is None else {
            "state_updated_after": _dt.datetime.fromtimestamp(after, _dt.UTC)
        }
        path = parse_entity_path(request.path)
        if path.subscription is not None:
            pager = client.list_subscription_sessions(path.entity, path.subscription, **options)
        else:
            pager = client.list_queue_sessions(path.entity, **options)
        return sorted([sid async for sid in pager])

    async def _rule(self, request: ManagementRequest) -> Any:
        """A rule, through the SDK's administration client."""
        admin, action = self._admin, request.action
        subscription, name = split_rule_path(request.path)
        topic, _, sub = subscription.rpartition("/subscriptions/")
        if action == "list":
            return [rule_from_sdk(r) async for r in admin.list_rules(topic, sub)]
        if name is None:
            raise InvalidArgument(f"{action} of a rule needs its name: {request.path!r}.")
        if action == "get":
            return rule_from_sdk(await admin.get_rule(topic, sub, name))
        if action == "delete":
            await admin.delete_rule(topic, sub, name)
            return None
        rule = request.properties
        rule_filter, rule_action = rule_to_sdk(rule)
        if action == "create":
            made = await admin.create_rule(topic, sub, name, filter=rule_filter,
                                           action=rule_action)
            return rule_from_sdk(made)
        if action == "update":
            current = await admin.get_rule(topic, sub, name)
            current.filter, current.action = rule_filter, rule_action
            await admin.update_rule(topic, sub, current)
            return rule_from_sdk(await admin.get_rule(topic, sub, name))
        raise InvalidArgument(f"unknown management action {action!r} for a rule.")

    async def _tier(self) -> str:
        """The namespace's tier, which decides what a description may hold (premium
        partitions every entity, PT-4, and has its own sizes): asked once, of the
        namespace itself, rather than assumed."""
        if self._namespace_tier is None:
            info = await self._admin.get_namespace_properties()
            sku = str(getattr(info, "messaging_sku", None) or "standard")
            self._namespace_tier = sku.lower()
        return self._namespace_tier

    async def _get(self, kind: str, topic: str, name: str | None) -> Any:
        if kind == "subscription":
            return await self._admin.get_subscription(topic, name)
        try:
            return await getattr(self._admin, f"get_{kind}")(name)
        except AttributeError:
            # Queues and topics share one path space: Service Bus answers the GET of a
            # topic's name with the topic's entry, which the SDK's get_queue reads as a
            # queue's and fails on (and the other way round).
            raise EntityNotFound(
                f"{name!r} is not a {kind}: the namespace has another kind of entity there."
            ) from None

    async def _runtime(self, entity: str) -> Any:
        """Runtime counts, read from the entity's description as the service sent it.

        The SDK's runtime models drop what its schema does not name; aiosb's HTTPS
        endpoint reports deferred messages and fragment availability (PT-14) there too.
        A queue or topic is one GET (its path names either).
        """
        path = parse_entity_path(entity)
        admin = self._admin
        if path.subscription is not None:
            element = await admin._get_subscription_element(path.entity, path.subscription)
        else:
            element = await admin._get_entity_element(path.entity)
        got = read_runtime(path.path, ET.tostring(element))
        if got is None:
            raise EntityNotFound(f"The messaging entity {path.path!r} could not be found.")
        return got
