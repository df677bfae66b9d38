"""Management over the official SDK's administration client: entities, rules and
runtime counts, for :class:`~aiosb.transport.amqp.AmqpTransport` (a mixin: it provides
``_admin``, the SDK's ``ServiceBusAdministrationClient``, ``_client``, its
``ServiceBusClient``, which lists sessions, and ``manage``)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ..entities import parse_entity_path
from ..errors import InvalidArgument, InvalidOperation
from ..protocol import ManagementRequest
from ..rules import split_rule_path
from ._amqp_convert import (
    apply_to_sdk,
    entity_from_sdk,
    entity_kwargs,
    rule_from_sdk,
    rule_to_sdk,
    runtime_from_sdk,
)
from ._first_rule import create_with_rule

__all__ = ["AdminOperations"]


class AdminOperations:
    """The management operations of the AMQP transport."""

    _admin: Any
    _client: Any

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
            props = _normalised(request.properties)
            kwargs = entity_kwargs(kind, props)
            if kind == "subscription":
                created = await admin.create_subscription(topic, props.name, **kwargs)
            else:
                created = await getattr(admin, f"create_{kind}")(props.name, **kwargs)
            return entity_from_sdk(kind, created, topic=topic)
        if action == "get":
            return entity_from_sdk(kind, await self._get(kind, topic, name), topic=topic)
        if action == "update":
            props = _normalised(request.properties)
            current = await self._get(kind, topic, name)
            fixed = entity_from_sdk(kind, current, topic=topic).changed_fixed(props)
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

    async def _get(self, kind: str, topic: str, name: str | None) -> Any:
        if kind == "subscription":
            return await self._admin.get_subscription(topic, name)
        return await getattr(self._admin, f"get_{kind}")(name)

    async def _runtime(self, entity: str) -> Any:
        path = parse_entity_path(entity)
        admin = self._admin
        if path.subscription is not None:
            got = await admin.get_subscription_runtime_properties(path.entity, path.subscription)
            return runtime_from_sdk(path.path, got)
        from azure.core.exceptions import ResourceNotFoundError

        try:
            got = await admin.get_queue_runtime_properties(path.entity)
        except ResourceNotFoundError:
            got = await admin.get_topic_runtime_properties(path.entity)
        return runtime_from_sdk(path.path, got)


def _normalised(props: Any) -> Any:
    """``props`` checked against the widest sizes (the namespace's tier is the service's
    to judge), with partitioning as the caller chose it: normalising for premium turns it
    on (PT-4), which would make every entity created on a standard namespace partitioned
    (PT-3: for ever)."""
    out = props.normalised("premium")
    if hasattr(props, "enable_partitioning"):  # queues and topics
        out.enable_partitioning = props.enable_partitioning
    return out
