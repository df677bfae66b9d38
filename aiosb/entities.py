"""Entity descriptions: queues, topics, subscriptions, and their runtime counts.

Property names and defaults are those of the azure-servicebus SDK's management models
(``azure.servicebus.management.QueueProperties`` and friends) and of Service Bus itself,
so code written against the SDK reads the same here.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import math
import re
import secrets
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from .errors import InvalidArgument

__all__ = [
    "ACCESS_RIGHTS",
    "AuthorizationRule",
    "DEAD_LETTER_SUFFIX",
    "NEVER",
    "time_to_live_seconds",
    "EntityPath",
    "QueueProperties",
    "RuntimeProperties",
    "SubscriptionProperties",
    "TopicProperties",
    "forward_target_name",
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
#: A premium entity's largest message, in kilobytes: the default (and least) and most.
_PREMIUM_MESSAGE_KB = (1024, 102400)
#: Fragments of a partitioned entity per tier (PT-4).
FRAGMENTS = {"standard": 16, "premium": 2, "basic": 1}
TIERS = ("basic", "standard", "premium")
STATUSES = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")

_ENTITY_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._\-/]*[A-Za-z0-9])?")
_SUBSCRIPTION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._\-]*[A-Za-z0-9])?")


def forward_target_name(what: str, target: Any) -> str:
    """The entity a forwarding setting (``what``) names: ``orders``, or the address
    ``sb://HOST/orders`` that the official clients send and Service Bus answers with.

    Raises:
        InvalidArgument: Not a non-empty string, or an address without an entity.
    """
    if not isinstance(target, str) or not target:
        raise InvalidArgument(f"{what} must be an entity name, not {target!r}.")
    if "://" not in target:
        return target
    name = urllib.parse.urlsplit(target).path.strip("/")
    if not name:
        raise InvalidArgument(f"{what} is a URI without an entity name.")
    return name


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


ACCESS_RIGHTS = ("Manage", "Send", "Listen")


@dataclass(frozen=True, slots=True)
class AuthorizationRule:
    """A shared access rule of one queue or topic (``authorization_rules``; the fields of
    ``azure.servicebus.management.AuthorizationRule``): a key name, its rights (of
    ``Manage``, ``Send``, ``Listen``) and two keys, made when not given. aiosb keeps and
    reports them, as Service Bus does; the emulator signs requests with its namespace's
    keys only (docs/sdks.md)."""

    key_name: str
    rights: tuple[str, ...]
    primary_key: str | None = field(default=None, repr=False)  # no key in a log line
    secondary_key: str | None = field(default=None, repr=False)
    claim_type: str = "SharedAccessKey"
    claim_value: str = "None"

    def checked(self) -> AuthorizationRule:
        """This rule with its keys made where absent.

        Raises:
            InvalidArgument: A key name, right or key Service Bus refuses.
        """
        name = self.key_name
        if not isinstance(name, str) or not 0 < len(name) <= 256 or not name.isprintable():
            raise InvalidArgument(f"an authorization rule's key_name is {name!r:.60}; it "
                                  "must be text of 1 to 256 characters.")
        rights = tuple(self.rights) if isinstance(self.rights, (list, tuple)) else ()
        if not rights or not set(rights) <= set(ACCESS_RIGHTS) or len(set(rights)) != len(
                rights):
            raise InvalidArgument(f"the rights of authorization rule {name!r} are "
                                  f"{self.rights!r:.80}; give some of {', '.join(ACCESS_RIGHTS)}"
                                  ", each once.")
        if "Manage" in rights and not {"Send", "Listen"} <= set(rights):
            raise InvalidArgument(f"authorization rule {name!r} has Manage without Send and "
                                  "Listen; Manage needs both.")
        keys = [self.primary_key, self.secondary_key]
        for i, key in enumerate(keys):
            if key is None:
                keys[i] = base64.b64encode(secrets.token_bytes(32)).decode()
            elif not isinstance(key, str) or not 0 < len(key) <= 256:
                raise InvalidArgument(f"a key of authorization rule {name!r} must be text "
                                      "of 1 to 256 characters.")
        return dataclasses.replace(self, rights=rights, primary_key=keys[0],
                                   secondary_key=keys[1])


def _check_rules(rules: Any) -> tuple[AuthorizationRule, ...]:
    if not isinstance(rules, (list, tuple)) or not all(
            isinstance(r, AuthorizationRule) for r in rules):
        raise InvalidArgument(f"authorization_rules must be AuthorizationRules, not "
                              f"{rules!r:.80}.")
    if len(rules) > 12:
        raise InvalidArgument(f"an entity has at most 12 authorization rules, not {len(rules)}.")
    names = [r.key_name.lower() for r in rules if isinstance(r.key_name, str)]
    if len(set(names)) != len(names):
        raise InvalidArgument("two authorization rules of the entity have the same key_name.")
    return tuple(r.checked() for r in rules)


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
        if hasattr(self, "max_message_size_in_kilobytes"):
            self._check_message_size(tier)
        if hasattr(self, "authorization_rules"):
            self._set_field("authorization_rules", _check_rules(self._field(
                "authorization_rules")))
        status = self._field("status")
        if status not in STATUSES:
            raise InvalidArgument(f"status is {status!r}; it must be one of {', '.join(STATUSES)}.")
        for name in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(self, name, None)
            if target is not None:
                # An entity may forward to itself, as on Service Bus: a message then goes
                # round until its hops run out and is dead-lettered (#47).
                self._set_field(name, forward_target_name(name, target))

    def _check_message_size(self, tier: str) -> None:
        """``max_message_size_in_kilobytes``: a premium namespace's, from 1024 (its
        default) to 102400; the other tiers have none to set (Service Bus refuses it
        there, #47)."""
        size = self._field("max_message_size_in_kilobytes")
        if tier != "premium":
            if size is not None:
                raise InvalidArgument(
                    f"max_message_size_in_kilobytes is {size!r}; only a premium namespace "
                    f"has it, and this one is {tier}."
                )
            return
        if size is None:
            size = _PREMIUM_MESSAGE_KB[0]
        if isinstance(size, bool) or not isinstance(size, int) or not (
            _PREMIUM_MESSAGE_KB[0] <= size <= _PREMIUM_MESSAGE_KB[1]
        ):
            raise InvalidArgument(
                f"max_message_size_in_kilobytes is {size!r}; it must be between "
                f"{_PREMIUM_MESSAGE_KB[0]} and {_PREMIUM_MESSAGE_KB[1]}."
            )
        self._set_field("max_message_size_in_kilobytes", size)

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
    standard, PT-4) when read back. ``max_message_size_in_kilobytes`` is a premium
    namespace's setting (1024 to 102400; refused on the other tiers); ``forward_to``
    may name the queue itself; ``authorization_rules`` are kept and reported.
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
    authorization_rules: tuple[AuthorizationRule, ...] = ()
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
    authorization_rules: tuple[AuthorizationRule, ...] = ()
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
        sql_filter_count: For a topic, the SQL filters of its subscriptions' rules
            (true and false filters are SQL filters).
        correlation_filter_count: For a topic, their correlation filters.
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
    sql_filter_count: int = 0
    correlation_filter_count: int = 0


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
