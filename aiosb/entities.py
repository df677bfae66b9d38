"""Entity descriptions: queues, topics, subscriptions, and their runtime counts.

Property names and defaults are those of the azure-servicebus SDK's management models
(``azure.servicebus.management.QueueProperties`` and friends) and of Service Bus itself,
so code written against the SDK reads the same here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from .errors import InvalidArgument

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "NEVER",
    "time_to_live_seconds",
    "EntityPath",
    "QueueProperties",
    "RuntimeProperties",
    "SubscriptionProperties",
    "TopicProperties",
    "parse_entity_path",
]

#: Service Bus's ``TimeSpan.MaxValue``: a duration that never runs out.
NEVER = _dt.timedelta(days=10675199, seconds=10085, microseconds=477581)
_NEVER_SECONDS = NEVER.total_seconds()


def time_to_live_seconds(name: str, seconds: Any) -> _dt.timedelta:
    """A time to live given in seconds (REST's TimeToLive, a Spark column): positive and
    finite; ``TimeSpan.MaxValue`` or more means never (:data:`NEVER`).

    Raises:
        InvalidArgument: Not a number, or not positive and finite; the sentence names it.
    """
    if isinstance(seconds, bool):
        seconds = None
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be seconds, not {seconds!r:.80}.") from None
    if not 0 < value < math.inf:  # NaN too
        raise InvalidArgument(f"{name} is {seconds!r}; it must be a positive number of seconds.")
    return NEVER if value >= _NEVER_SECONDS else _dt.timedelta(seconds=value)


#: The dead-letter sub-queue's path suffix.
DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"

_MIN = _dt.timedelta(minutes=1)
_STANDARD_SIZES = (1024, 2048, 3072, 4096, 5120)
_PREMIUM_SIZES = (*_STANDARD_SIZES, 10240, 20480, 40960, 81920)
#: Fragments of a partitioned entity per tier (PT-4).
FRAGMENTS = {"standard": 16, "premium": 2, "basic": 1}
TIERS = ("basic", "standard", "premium")
STATUSES = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")

_ENTITY_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._\-/]*[A-Za-z0-9])?")
_SUBSCRIPTION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._\-]*[A-Za-z0-9])?")


def _check_name(kind: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a {kind} name must be a non-empty string, not {name!r}.")
    if kind == "subscription":
        limit, pattern = 50, _SUBSCRIPTION_NAME
        allowed = "letters, digits, '.', '-' and '_'"
    else:
        limit, pattern = 260, _ENTITY_NAME
        allowed = "letters, digits, '.', '-', '_' and '/'"
    if len(name) > limit:
        raise InvalidArgument(
            f"{kind} name {name[:40]!r}... is {len(name)} characters; the limit is {limit}."
        )
    if not pattern.fullmatch(name) or "//" in name:
        raise InvalidArgument(
            f"{kind} name {name!r} is not valid: use {allowed}, starting and ending "
            "with a letter or digit."
        )
    segments = name.lower().split("/")
    if kind != "subscription" and "subscriptions" in segments:
        raise InvalidArgument(
            f"{kind} name {name!r} contains the reserved segment 'subscriptions'."
        )
    dots = next((s for s in segments if s in (".", "..")), None)
    if dots is not None:  # an address would lose it: a URL resolves it away
        raise InvalidArgument(
            f"{kind} name {name!r} is not valid: it contains the path segment {dots!r}."
        )
    return name


def _duration(name: str, value: Any) -> _dt.timedelta:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = _dt.timedelta(seconds=value)
    if not isinstance(value, _dt.timedelta):
        raise InvalidArgument(f"{name} must be a timedelta, not {value!r}.")
    return min(value, NEVER)


def _check_range(name: str, value: _dt.timedelta, low: _dt.timedelta, high: _dt.timedelta) -> None:
    if not low <= value <= high:
        high_text = "never" if high >= NEVER else str(high)
        raise InvalidArgument(f"{name} is {value}; it must be between {low} and {high_text}.")


def check_known(kind: str, props: dict[str, Any], known: set[str]) -> None:
    """Refuse property names that a ``kind`` description does not have (``name`` aside),
    saying which it has.

    Raises:
        InvalidArgument: Some name in ``props`` is not in ``known``.
    """
    unknown = sorted(set(props) - known)
    if unknown:
        raise InvalidArgument(
            f"unknown {kind} propert{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(unknown)}; known: {', '.join(sorted(known - {'name'}))}."
        )


@dataclass
class _EntityProperties:
    """Common behaviour of the entity descriptions."""

    kind: ClassVar[str] = ""
    _durations: ClassVar[tuple[str, ...]] = ()
    _fixed: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def build(cls, name: str, props: dict[str, Any]) -> Any:
        """Build a description from keyword properties, rejecting unknown names."""
        check_known(cls.kind, props, {f.name for f in dataclasses.fields(cls) if f.init})
        factory: Any = cls  # each subclass has a name field; the base has none
        return factory(name=name, **props)

    def normalised(self, tier: str = "standard") -> Any:
        """Return a validated copy with durations normalised, for ``tier``.

        Raises:
            InvalidArgument: A name or value outside what Service Bus allows; the
                sentence names the value and the limit.
        """
        copy = dataclasses.replace(self)
        copy._check(tier)
        return copy

    def _field(self, name: str) -> Any:
        """A field the subclasses have (the base declares none of them)."""
        return getattr(self, name)

    def _set_field(self, name: str, value: Any) -> None:
        setattr(self, name, value)

    def changed_fixed(self, new: _EntityProperties) -> list[str]:
        """Names of properties that can't change after creation but differ in ``new``."""
        return [n for n in self._fixed if getattr(self, n) != getattr(new, n)]

    def checked(self, tier: str = "standard") -> Self:
        """This description, its values checked as Service Bus checks them (a ``tier``
        namespace's limits).

        Raises:
            InvalidArgument: A value out of Service Bus's range, in a sentence.
        """
        self._check(tier)
        return self

    def _check(self, tier: str) -> None:
        _check_name(self.kind, self._field("name"))
        for name in self._durations:
            setattr(self, name, _duration(name, getattr(self, name)))
        if "default_message_time_to_live" in self._durations:
            ttl = self._field("default_message_time_to_live")
            high = _dt.timedelta(days=14) if tier == "basic" else NEVER
            _check_range("default_message_time_to_live", ttl, _dt.timedelta(seconds=1), high)
        if "auto_delete_on_idle" in self._durations:
            _check_range(
                "auto_delete_on_idle",
                self._field("auto_delete_on_idle"),
                5 * _MIN,
                NEVER,
            )
        if "lock_duration" in self._durations:
            _check_range(
                "lock_duration",
                self._field("lock_duration"),
                _dt.timedelta(seconds=5),
                5 * _MIN,
            )
        if "duplicate_detection_history_time_window" in self._durations:
            _check_range(
                "duplicate_detection_history_time_window",
                self._field("duplicate_detection_history_time_window"),
                _dt.timedelta(seconds=20),
                _dt.timedelta(days=7),
            )
        if hasattr(self, "max_delivery_count"):
            count = self.max_delivery_count
            if not isinstance(count, int) or not 1 <= count <= 2**31 - 1:
                raise InvalidArgument(
                    f"max_delivery_count is {count!r}; it must be between 1 and {2**31 - 1}."
                )
        if hasattr(self, "max_size_in_megabytes"):
            self._check_size(tier)
        status = self._field("status")
        if status not in STATUSES:
            raise InvalidArgument(f"status is {status!r}; it must be one of {', '.join(STATUSES)}.")
        for name in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(self, name, None)
            if target is not None:
                if not isinstance(target, str) or not target:
                    raise InvalidArgument(f"{name} must be an entity name, not {target!r}.")
                if "://" in target:  # sb://host/orders, as the official clients give it
                    target = urllib.parse.urlsplit(target).path.strip("/")
                    if not target:
                        raise InvalidArgument(f"{name} is a URI without an entity name.")
                    self._set_field(name, target)
                if target.lower() == self._field("name").lower():
                    raise InvalidArgument(f"{name} names the entity itself ({target!r}).")

    def _check_size(self, tier: str) -> None:
        size = self._field("max_size_in_megabytes")
        partitioned = self._field("enable_partitioning")
        allowed: tuple[int, ...]
        if tier == "premium":
            allowed = _PREMIUM_SIZES
            self._set_field("enable_partitioning", True)  # always (PT-4)
        elif tier == "basic":
            allowed = _STANDARD_SIZES
        else:
            allowed = _STANDARD_SIZES
            if partitioned and size in [16 * s for s in _STANDARD_SIZES]:
                size //= 16  # the reported 16x form is accepted back (PT-4)
        if size not in allowed:
            raise InvalidArgument(
                f"max_size_in_megabytes is {size!r}; on the {tier} tier it must be one of "
                f"{', '.join(map(str, allowed))}."
            )
        if partitioned and tier == "basic":
            raise InvalidArgument("enable_partitioning is not available on the basic tier.")
        self._set_field("max_size_in_megabytes", size)


@dataclass
class QueueProperties(_EntityProperties):
    """A queue's description (names and defaults of ``azure.servicebus.management``).

    Durations are ``timedelta``; :data:`NEVER` means no limit. ``max_size_in_megabytes``
    is per fragment when given and reported as the whole entity's size (16 fragments on
    standard, PT-4) when read back.
    """

    kind: ClassVar[str] = "queue"
    _durations: ClassVar[tuple[str, ...]] = (
        "auto_delete_on_idle",
        "default_message_time_to_live",
        "duplicate_detection_history_time_window",
        "lock_duration",
    )
    _fixed: ClassVar[tuple[str, ...]] = (
        "enable_partitioning",
        "requires_session",
        "requires_duplicate_detection",
    )

    name: str
    max_size_in_megabytes: int = 1024
    max_delivery_count: int = 10
    lock_duration: _dt.timedelta = _MIN
    default_message_time_to_live: _dt.timedelta = NEVER
    auto_delete_on_idle: _dt.timedelta = NEVER
    dead_lettering_on_message_expiration: bool = False
    duplicate_detection_history_time_window: _dt.timedelta = 10 * _MIN
    enable_batched_operations: bool = True
    enable_express: bool = False
    enable_partitioning: bool = False
    requires_duplicate_detection: bool = False
    requires_session: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    max_message_size_in_kilobytes: int | None = None
    status: str = "Active"
    user_metadata: str | None = None
    created_at_utc: _dt.datetime | None = None
    updated_at_utc: _dt.datetime | None = None
    accessed_at_utc: _dt.datetime | None = None


@dataclass
class TopicProperties(_EntityProperties):
    """A topic's description (names and defaults of ``azure.servicebus.management``)."""

    kind: ClassVar[str] = "topic"
    _durations: ClassVar[tuple[str, ...]] = (
        "auto_delete_on_idle",
        "default_message_time_to_live",
        "duplicate_detection_history_time_window",
    )
    _fixed: ClassVar[tuple[str, ...]] = ("enable_partitioning", "requires_duplicate_detection")

    name: str
    max_size_in_megabytes: int = 1024
    default_message_time_to_live: _dt.timedelta = NEVER
    auto_delete_on_idle: _dt.timedelta = NEVER
    duplicate_detection_history_time_window: _dt.timedelta = 10 * _MIN
    enable_batched_operations: bool = True
    enable_express: bool = False
    enable_partitioning: bool = False
    requires_duplicate_detection: bool = False
    support_ordering: bool = False
    max_message_size_in_kilobytes: int | None = None
    status: str = "Active"
    user_metadata: str | None = None
    created_at_utc: _dt.datetime | None = None
    updated_at_utc: _dt.datetime | None = None
    accessed_at_utc: _dt.datetime | None = None


@dataclass
class SubscriptionProperties(_EntityProperties):
    """A subscription's description (names and defaults of ``azure.servicebus.management``).

    ``name`` is the subscription's own name; ``topic_name`` its topic.
    """

    kind: ClassVar[str] = "subscription"
    _durations: ClassVar[tuple[str, ...]] = (
        "auto_delete_on_idle",
        "default_message_time_to_live",
        "lock_duration",
    )
    _fixed: ClassVar[tuple[str, ...]] = ("requires_session",)

    name: str
    topic_name: str = ""
    max_delivery_count: int = 10
    lock_duration: _dt.timedelta = _MIN
    default_message_time_to_live: _dt.timedelta = NEVER
    auto_delete_on_idle: _dt.timedelta = NEVER
    dead_lettering_on_message_expiration: bool = False
    dead_lettering_on_filter_evaluation_exceptions: bool = True
    enable_batched_operations: bool = True
    requires_session: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    status: str = "Active"
    user_metadata: str | None = None
    created_at_utc: _dt.datetime | None = None
    updated_at_utc: _dt.datetime | None = None
    accessed_at_utc: _dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class RuntimeProperties:
    """An entity's counts at one instant (``runtime_properties(entity)``).

    Attributes:
        name: The entity path.
        active_message_count: Messages that can be received now (locked ones included).
        scheduled_message_count: Messages waiting for their scheduled time.
        dead_letter_message_count: Messages in the dead-letter sub-queue.
        deferred_message_count: Messages set aside with ``defer``.
        transfer_message_count: Messages waiting to be forwarded.
        transfer_dead_letter_message_count: Messages that could not be forwarded.
        total_message_count: All of the above.
        size_in_bytes: Sum of the sizes of the messages held.
        subscription_count: For a topic, its number of subscriptions.
        accessed_at_utc: Last activity (what auto-delete on idle measures).
        available_fragments: Fragments up, of ``fragment_count`` (PT-14).
    """

    name: str
    active_message_count: int = 0
    scheduled_message_count: int = 0
    dead_letter_message_count: int = 0
    deferred_message_count: int = 0
    transfer_message_count: int = 0
    transfer_dead_letter_message_count: int = 0
    total_message_count: int = 0
    size_in_bytes: int = 0
    subscription_count: int = 0
    created_at_utc: _dt.datetime | None = None
    updated_at_utc: _dt.datetime | None = None
    accessed_at_utc: _dt.datetime | None = None
    fragment_count: int = 1
    available_fragments: int = 1


@dataclass(frozen=True, slots=True)
class EntityPath:
    """A parsed entity path: a queue or topic, or a subscription, and a sub-queue."""

    entity: str  # queue or topic name; for a subscription, the topic
    subscription: str | None = None
    sub_queue: str | None = None  # None or "deadletter"

    @property
    def path(self) -> str:
        """The entity path without the sub-queue."""
        if self.subscription is None:
            return self.entity
        return f"{self.entity}/subscriptions/{self.subscription}"

    def __str__(self) -> str:
        return self.path + (DEAD_LETTER_SUFFIX if self.sub_queue else "")


_SUB_QUEUES = {None: None, "deadletter": "deadletter", "dead_letter": "deadletter"}


def parse_entity_path(path: str, sub_queue: str | None = None) -> EntityPath:
    """Parse ``"queue"``, ``"topic/subscriptions/sub"`` and a ``/$DeadLetterQueue`` suffix.

    Args:
        path: The entity path.
        sub_queue: ``None`` or ``"deadletter"``.

    Raises:
        InvalidArgument: The path or the sub-queue is not valid.
    """
    if not isinstance(path, str) or not path:
        raise InvalidArgument(f"an entity path must be a non-empty string, not {path!r}.")
    if sub_queue not in _SUB_QUEUES:
        raise InvalidArgument(f"sub_queue is {sub_queue!r}; it must be None or 'deadletter'.")
    sub = _SUB_QUEUES[sub_queue]
    if path.lower().endswith(DEAD_LETTER_SUFFIX.lower()):
        path = path[: -len(DEAD_LETTER_SUFFIX)]
        sub = "deadletter"
    parts = path.split("/")
    if len(parts) >= 3 and parts[-2].lower() == "subscriptions":
        topic = "/".join(parts[:-2])
        _check_name("topic", topic)
        _check_name("subscription", parts[-1])
        return EntityPath(topic, parts[-1], sub)
    _check_name("entity", path)
    return EntityPath(path, None, sub)
