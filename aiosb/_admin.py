"""Management of a namespace's entities and subscription rules: the methods
:class:`~aiosb.client.Namespace` offers to create, read, change, list and delete queues,
topics, subscriptions and rules, and read their counts. Each is one
:class:`~aiosb.protocol.ManagementRequest` through the namespace's transport (with its
retries and timeouts). Imports the vocabulary and the protocol only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from .entities import (
    QueueProperties,
    RuntimeProperties,
    SubscriptionProperties,
    TopicProperties,
    check_known,
)
from .errors import EntityNotFound, InvalidArgument
from .protocol import EntityKind, ManageAction, ManagementRequest
from .rules import RuleFilter, RuleProperties, SqlRuleAction, TrueRuleFilter, rule_path

__all__ = ["Management"]


class Management:
    """The management methods of a namespace (a mixin of :class:`~aiosb.Namespace`)."""

    async def _manage(
        self,
        action: ManageAction,
        kind: EntityKind | None,
        path: str = "",
        props: Any = None,
        rule: RuleProperties | None = None,
    ) -> Any:
        request = ManagementRequest(action, kind, path, props, rule)
        return await self._run_manage(request)

    async def _run_manage(self, request: ManagementRequest) -> Any:
        raise NotImplementedError  # Namespace runs it through its transport

    async def create_queue(self, name: str, **properties: Any) -> QueueProperties:
        """Create a queue; ``properties`` take the SDK's names (``lock_duration``, ...).

        Raises:
            EntityAlreadyExists: A queue or topic with that name exists.
            InvalidArgument: An unknown property or a value out of range.
        """
        props = QueueProperties.build(name, properties)
        return cast(QueueProperties, await self._manage("create", "queue", name, props))

    async def get_queue(self, name: str) -> QueueProperties:
        """The queue's description. Raises :class:`EntityNotFound` if there is none."""
        return cast(QueueProperties, await self._manage("get", "queue", name))

    async def update_queue(self, queue: str | QueueProperties, **changes: Any) -> QueueProperties:
        """Change a queue's properties (all but partitioning, sessions, duplicate detection)."""
        return cast(QueueProperties, await self._update("queue", queue, changes))

    async def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages."""
        await self._manage("delete", "queue", name)

    async def queue_exists(self, name: str) -> bool:
        """Whether the queue exists."""
        return await self._exists("queue", name)

    async def list_queues(self) -> list[QueueProperties]:
        """Every queue's description."""
        return cast(list[QueueProperties], await self._manage("list", "queue"))

    async def create_topic(self, name: str, **properties: Any) -> TopicProperties:
        """Create a topic; see :meth:`create_queue`."""
        props = TopicProperties.build(name, properties)
        return cast(TopicProperties, await self._manage("create", "topic", name, props))

    async def get_topic(self, name: str) -> TopicProperties:
        """The topic's description."""
        return cast(TopicProperties, await self._manage("get", "topic", name))

    async def update_topic(self, topic: str | TopicProperties, **changes: Any) -> TopicProperties:
        """Change a topic's properties."""
        return cast(TopicProperties, await self._update("topic", topic, changes))

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its subscriptions."""
        await self._manage("delete", "topic", name)

    async def topic_exists(self, name: str) -> bool:
        """Whether the topic exists."""
        return await self._exists("topic", name)

    async def list_topics(self) -> list[TopicProperties]:
        """Every topic's description."""
        return cast(list[TopicProperties], await self._manage("list", "topic"))

    async def create_subscription(
        self, topic: str, name: str, *, default_rule: RuleProperties | None = None,
        **properties: Any,
    ) -> SubscriptionProperties:
        """Create a subscription of ``topic``.

        Args:
            default_rule: Its first rule; without one it has ``$Default``, which takes
                every message sent to the topic.
            properties: The SDK's names (``lock_duration``, ``requires_session``, ...).
        """
        props = SubscriptionProperties.build(name, {**properties, "topic_name": topic})
        path = f"{topic}/subscriptions/{name}"
        if default_rule is not None:
            if not isinstance(default_rule, RuleProperties):
                raise InvalidArgument(
                    f"default_rule is a RuleProperties, not {default_rule!r:.60}."
                )
            default_rule = RuleProperties(default_rule.name, default_rule.filter,
                                          default_rule.action).checked()
        found = await self._manage("create", "subscription", path, props, default_rule)
        return cast(SubscriptionProperties, found)

    async def get_subscription(self, topic: str, name: str) -> SubscriptionProperties:
        """The subscription's description."""
        path = f"{topic}/subscriptions/{name}"
        return cast(SubscriptionProperties, await self._manage("get", "subscription", path))

    async def update_subscription(
        self, topic: str, subscription: str | SubscriptionProperties, **changes: Any
    ) -> SubscriptionProperties:
        """Change a subscription's properties."""
        if isinstance(subscription, str):
            current = await self.get_subscription(topic, subscription)
        else:
            current = subscription
        props = self._changed(current, changes)
        path = f"{topic}/subscriptions/{props.name}"
        found = await self._manage("update", "subscription", path, props)
        return cast(SubscriptionProperties, found)

    async def delete_subscription(self, topic: str, name: str) -> None:
        """Delete a subscription and its messages."""
        await self._manage("delete", "subscription", f"{topic}/subscriptions/{name}")

    async def subscription_exists(self, topic: str, name: str) -> bool:
        """Whether the subscription exists."""
        return await self._exists("subscription", f"{topic}/subscriptions/{name}")

    async def list_subscriptions(self, topic: str) -> list[SubscriptionProperties]:
        """Every subscription of ``topic``."""
        return cast(list[SubscriptionProperties], await self._manage("list", "subscription", topic))

    async def create_rule(
        self,
        topic: str,
        subscription: str,
        name: str,
        *,
        filter: RuleFilter | None = None,
        action: SqlRuleAction | None = None,
    ) -> RuleProperties:
        """Add a rule to a subscription: it takes the messages ``filter`` matches (all,
        by default), changed by ``action`` if one is given.

        Raises:
            InvalidArgument: A SQL filter or action that does not parse (the sentence
                names the position); nothing is created.
            EntityAlreadyExists: The subscription has a rule of that name.
            EntityNotFound: No such subscription.
        """
        rule = RuleProperties(name, filter or TrueRuleFilter(), action).checked()
        path = rule_path(topic, subscription, name)
        return cast(RuleProperties, await self._manage("create", "rule", path, rule))

    async def get_rule(self, topic: str, subscription: str, name: str) -> RuleProperties:
        """A rule of a subscription. Raises :class:`EntityNotFound` if there is none."""
        path = rule_path(topic, subscription, _rule_name(name))
        return cast(RuleProperties, await self._manage("get", "rule", path))

    async def list_rules(self, topic: str, subscription: str) -> list[RuleProperties]:
        """Every rule of a subscription, in name order."""
        path = rule_path(topic, subscription)
        return cast(list[RuleProperties], await self._manage("list", "rule", path))

    async def update_rule(
        self, topic: str, subscription: str, rule: str | RuleProperties, **changes: Any
    ) -> RuleProperties:
        """Change a rule's filter or action (``filter=``, ``action=``), or put a changed
        :class:`RuleProperties` in force."""
        if isinstance(rule, str):
            rule = await self.get_rule(topic, subscription, rule)
        if "name" in changes:
            raise InvalidArgument("a rule cannot be renamed: create one under the new name "
                                  "and delete the old one.")
        props = self._changed(rule, changes).checked()
        path = rule_path(topic, subscription, props.name)
        return cast(RuleProperties, await self._manage("update", "rule", path, props))

    async def delete_rule(self, topic: str, subscription: str, name: str) -> None:
        """Remove a rule; a subscription without rules takes no messages."""
        await self._manage("delete", "rule", rule_path(topic, subscription, _rule_name(name)))

    async def runtime_properties(self, entity: str) -> RuntimeProperties:
        """Counts of an entity: active, scheduled, dead-lettered, deferred messages."""
        return cast(RuntimeProperties, await self._manage("runtime", None, entity))

    async def _exists(self, kind: EntityKind, path: str) -> bool:
        try:
            await self._manage("get", kind, path)
        except EntityNotFound:
            return False
        return True

    @staticmethod
    def _changed(current: Any, changes: dict[str, Any]) -> Any:
        fields = {f.name for f in dataclasses.fields(current)}
        check_known(getattr(current, "kind", "rule"), changes, fields)
        return dataclasses.replace(current, **changes)

    async def _update(self, kind: EntityKind, entity: Any, changes: dict[str, Any]) -> Any:
        current = await self._manage("get", kind, entity) if isinstance(entity, str) else entity
        props = self._changed(current, changes)
        return await self._manage("update", kind, props.name, props)


def _rule_name(name: str) -> str:
    """A rule name as a path segment, checked (InvalidArgument, never a strange path)."""
    return RuleProperties(name).checked().name
