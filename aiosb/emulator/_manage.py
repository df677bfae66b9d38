"""Management: create, get, update, delete and list entities, and their runtime counts,
over the namespace's entity table; and every entity's status read in passing, for tools
(:func:`statuses`: ``GET /metrics``, the explorer).

Changes act on every fragment of a partitioned entity, so a fragment that is down holds
them up (PT-14); counts are summed over every fragment and session.

Imports: :mod:`._record`, :mod:`._entity`, :mod:`._namespace`, :mod:`._partitions`
(never the broker).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..entities import FRAGMENTS, RuntimeProperties
from ..errors import (
    EntityAlreadyExists,
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
    QuotaExceeded,
)
from ..protocol import ManagementRequest
from ..rules import CorrelationRuleFilter, RuleProperties, split_rule_path
from ._entity import _Entity
from ._namespace import Namespace
from ._partitions import FRAGMENT_SHIFT
from ._record import _utc
from ._rules import Rules, check_quota

__all__ = ["EntityStatus", "manage", "statuses"]

MAX_ENTITIES = 10_000
_MAX_PARTITIONED = 100


async def manage(ns: Namespace, request: ManagementRequest) -> Any:
    """Create, get, update, delete or list entities, or read their counts."""
    if ns.faults.active:
        await ns.faults.check("manage", request.path)
    now = ns.now()
    action, kind = request.action, request.kind
    if action == "runtime":
        return runtime(ns, request.path)
    if kind == "rule":
        return await rule(ns, request, now)
    if action == "list":
        return listing(ns, kind, request.path)
    if kind not in ("queue", "topic", "subscription"):
        raise InvalidArgument(f"unknown entity kind {kind!r}.")
    if action == "create":
        return create(ns, kind, request.properties, now, request.rule)
    entity = lookup(ns, kind, request.path)
    if action == "get":
        return entity.description()
    down = ns._down("manage", entity.path)
    if down is not None:  # PT-14: changes act on every fragment
        await ns.faults.apply(next(iter(down.values())), action, entity.path)
        return await manage(ns, request)
    if action == "update":
        return update(ns, entity, request.properties, now)
    if action == "delete":
        entity.delete()
        return None
    raise InvalidArgument(f"unknown management action {action!r}.")


def lookup(ns: Namespace, kind: str, path: str) -> _Entity:
    """The ``kind`` (queue, topic or subscription) at ``path``, or EntityNotFound."""
    try:
        entity, dlq = ns._resolve(path)
    except EntityNotFound:
        found, dlq = None, False
    else:
        found = entity
    if found is None or found.kind != kind or dlq:
        raise EntityNotFound(f"The {kind} {path!r} does not exist in namespace {ns.name!r}.")
    return found


def create(ns: Namespace, kind: str, props: Any, now: float, first: Any = None) -> Any:
    """Make an entity from its (checked and normalised) description; a subscription
    with its first rule (``$Default``, taking everything, when ``first`` is None)."""
    props = props.normalised(ns.tier)
    rules = None
    if kind == "subscription":
        if first is not None and not isinstance(first, RuleProperties):
            raise InvalidArgument(f"a subscription's first rule is a RuleProperties, not "
                                  f"{first!r:.60}.")
        rules = Rules(first, now)  # refuses a rule that does not parse, before anything
    entities = ns._entities
    topic = None
    if kind == "subscription":
        topic = lookup(ns, "topic", props.topic_name)
        path = f"{topic.path}/subscriptions/{props.name}"
        props.topic_name = topic.path
    else:
        path = props.name
    if path.lower() in entities:
        existing = entities[path.lower()]
        raise EntityAlreadyExists(
            f"A {existing.kind} named {path!r} exists already in namespace {ns.name!r}."
        )
    for target_name in ("forward_to", "forward_dead_lettered_messages_to"):
        target = getattr(props, target_name, None)
        if target is not None and target.lower() != path.lower():  # itself: allowed
            forward_target(ns, target, target_name)
    if kind != "subscription":
        if ns.tier != "premium" and len(entities) >= MAX_ENTITIES:
            raise QuotaExceeded(
                f"Namespace {ns.name!r} has {MAX_ENTITIES} entities, the most it may hold."
            )
        # Counted only for a partitioned entity on the standard tier (at most 100 of
        # them), so creating entities stays linear in their number, not quadratic.
        if props.enable_partitioning and ns.tier == "standard" and sum(
            1 for e in entities.values() if getattr(e.props, "enable_partitioning", False)
        ) >= _MAX_PARTITIONED:
            raise QuotaExceeded(
                f"Namespace {ns.name!r} has {_MAX_PARTITIONED} partitioned entities, "
                "the most a standard namespace may hold (PT-5)."
            )
    if topic is not None:
        nfrag = topic.nfrag  # a subscription shares its topic's fragments
    elif props.enable_partitioning:
        nfrag = FRAGMENTS[ns.tier]
    else:
        nfrag = 1
    entity = _Entity(ns, kind, path, props, now, nfrag)
    if rules is not None:
        entity.rules = rules
    if topic is not None:
        entity.topic = topic
        topic.subscriptions[entity.key] = entity
        topic.touch(now)
    entities[entity.key] = entity
    if ns.journal is not None:
        ns.journal.entity(entity)
    return entity.description()


async def rule(ns: Namespace, request: ManagementRequest, now: float) -> Any:
    """Create, get, update, delete or list the rules of a subscription."""
    action = request.action
    path, name = split_rule_path(request.path)
    sub = lookup(ns, "subscription", path)
    rules = sub.rules
    assert rules is not None
    if action == "list":
        return rules.listing()
    if name is None:
        raise InvalidArgument(f"{request.action} of a rule needs its name: {request.path!r}.")
    if action == "get":
        return rules.get(name)
    if action == "create":
        made = request.properties
        if not isinstance(made, RuleProperties) or made.name.lower() != name.lower():
            raise InvalidArgument(f"create the rule {name!r} with its RuleProperties.")
        assert sub.topic is not None
        check_quota([s.rules for s in sub.topic.subscriptions.values() if s.rules], made)
        result: Any = rules.add(made, now)
    elif action == "update":
        if not isinstance(request.properties, RuleProperties):
            raise InvalidArgument(f"update the rule {name!r} with its RuleProperties.")
        result = rules.replace(RuleProperties(name, request.properties.filter,
                                              request.properties.action))
    elif action == "delete":
        rules.remove(name)
        result = None
    else:
        raise InvalidArgument(f"unknown management action {action!r} for a rule.")
    if ns.journal is not None:
        ns.journal.entity(sub)
    sub.updated = now
    sub.touch(now)
    return result


def forward_target(ns: Namespace, name: str, what: str) -> _Entity:
    """The queue or topic ``name`` that ``what`` (a forwarding setting) names."""
    entity = ns._entities.get(name.lower())
    if entity is None or entity.kind == "subscription":
        raise EntityNotFound(
            f"{what} names {name!r}, which is not a queue or topic in namespace {ns.name!r}."
        )
    return entity


def update(ns: Namespace, entity: _Entity, props: Any, now: float) -> Any:
    """Put a changed description in force (what may change: PT-3)."""
    fixed = entity.props.changed_fixed(props)  # before the checks that depend on them
    if fixed:
        raise InvalidOperation(
            f"{', '.join(fixed)} of {entity.path!r} cannot change after creation (PT-3)."
        )
    props = props.normalised(ns.tier)
    if entity.topic is not None:  # a subscription
        props.topic_name = entity.topic.path
    for target_name in ("forward_to", "forward_dead_lettered_messages_to"):
        target = getattr(props, target_name, None)
        if target is not None:
            forward_target(ns, target, target_name)
    entity.apply(props)
    if ns.journal is not None:
        ns.journal.entity(entity)
    entity.updated = now
    entity.touch(now)
    entity.rearm_idle()
    return entity.description()


def listing(ns: Namespace, kind: str | None, topic: str) -> list[Any]:
    """Descriptions in name order (case-insensitive, as names are), so that pages of
    a listing over HTTP are stable."""
    if kind == "subscription":
        found: Iterable[_Entity] = lookup(ns, "topic", topic).subscriptions.values()
    else:
        found = (e for e in ns._entities.values() if e.kind == kind)
    return [e.description() for e in sorted(found, key=lambda e: e.path.lower())]


def runtime(ns: Namespace, path: str) -> RuntimeProperties:
    """Counts summed over every fragment and session (PT-14)."""
    entity, _ = ns._resolve(path)
    active = deferred = scheduled = 0
    for store in entity.main_stores():
        a, d, s = store.counts()
        active, deferred, scheduled = active + a, deferred + d, scheduled + s
    dead = sum(len(store.records) for store in entity.dlqs)
    size = entity.bytes
    if entity.kind == "topic":
        size += sum(sub.bytes for sub in entity.subscriptions.values())
    down = ns._down("receive", entity.path) or ns._down("send", entity.path) or {}
    filters = [rule.filter for sub in entity.subscriptions.values() if sub.rules is not None
               for rule in sub.rules.listing()]
    correlation = sum(isinstance(f, CorrelationRuleFilter) for f in filters)
    return RuntimeProperties(
        name=entity.path,
        active_message_count=active,
        scheduled_message_count=scheduled,
        dead_letter_message_count=dead,
        deferred_message_count=deferred,
        total_message_count=active + deferred + scheduled + dead,
        size_in_bytes=size,
        subscription_count=len(entity.subscriptions),
        created_at_utc=_utc(entity.created),
        updated_at_utc=_utc(entity.updated),
        accessed_at_utc=_utc(entity.activity),
        fragment_count=entity.nfrag,
        available_fragments=entity.nfrag - len(down),
        sql_filter_count=len(filters) - correlation,  # true and false filters are SQL's
        correlation_filter_count=correlation,
    )


@dataclass(frozen=True, slots=True)
class EntityStatus:
    """One entity as :meth:`~aiosb.emulator.EmulatorNamespace.entity_statuses` reads it,
    in passing (for ``GET /metrics`` and the explorer's live page).

    Attributes:
        kind: ``queue``, ``topic`` or ``subscription``.
        description: Its description, as a management ``get`` gives it.
        counts: Its counts, as a management ``runtime`` gives them (``counts.name`` is
            its path).
        numbered: How many sequence numbers it has given out (messages in, dead-letter
            copies included), or ``None`` if that cannot be read.
    """

    kind: str
    description: Any
    counts: RuntimeProperties
    numbered: int | None

    @property
    def path(self) -> str:
        """The entity's path."""
        return self.counts.name


def statuses(ns: Namespace) -> list[EntityStatus]:
    """Every entity of the namespace in path order (case-insensitive), read without a
    fault check, a wait or a touch; one a durable restart is still loading is left out
    (#39: it was reported empty while it loaded)."""
    recovery = ns.recovery
    out = []
    for entity in sorted(list(ns._entities.values()), key=lambda e: e.path.lower()):
        if entity.deleted or (recovery is not None and not recovery.ready(entity)):
            continue
        out.append(EntityStatus(entity.kind, entity.description(), runtime(ns, entity.path),
                                _numbered(entity)))
    return out


_COUNT = re.compile(r"count\((\d+)\)")


def _numbered(entity: _Entity) -> int | None:
    """How many sequence numbers ``entity`` has given out. Each fragment numbers with
    an :func:`itertools.count`, whose ``repr`` is the one view of its next value that
    does not take it: read so, the hot path pays nothing for a chart."""
    total = 0
    for fragment, counter in enumerate(entity.seqs):
        found = _COUNT.fullmatch(repr(counter))
        if found is None:
            return None
        total += int(found[1]) - (fragment << FRAGMENT_SHIFT) - 1  # the next, less the first
    return total
