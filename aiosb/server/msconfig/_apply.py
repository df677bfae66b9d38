"""Applying a read ``Config.json`` to a namespace (see :mod:`aiosb.server.msconfig`): whole or
not at all.

:func:`plan` reads the namespace (it changes nothing) and checks everything the broker
would refuse half-way: a name the namespace holds as another kind of entity, what
Service Bus fixes at creation, a forwarding target that will not exist, the namespace's
entity quota and a topic's filter quotas. Only a plan that holds is carried out, by
:func:`apply`, so a file that fails creates nothing (and, with ``--data-dir``, commits
nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...client import Namespace
from ...emulator import MAX_CORRELATION_FILTERS, MAX_ENTITIES, MAX_SQL_FILTERS
from ...errors import EntityNotFound
from ...rules import CorrelationRuleFilter, RuleProperties, SqlRuleFilter
from ._spec import ConfigError, EmulatorConfig, EntitySpec, RuleSpec

#: What Service Bus fixes when it creates an entity.
_FIXED = ("requires_session", "requires_duplicate_detection")
#: Properties naming another entity: set once every entity of the file exists.
_FORWARDS = ("forward_to", "forward_dead_lettered_messages_to")
#: Their keys in the file, for sentences.
_FORWARD_KEYS = {"forward_to": "ForwardTo",
                 "forward_dead_lettered_messages_to": "ForwardDeadLetteredMessagesTo"}


@dataclass
class _Step:
    """One entity of the file against the namespace."""

    spec: EntitySpec
    current: Any  # its description in the namespace, None if it is to be made
    changes: dict[str, Any] = field(default_factory=dict)  # what differs (not forwarding)
    forwards: dict[str, Any] = field(default_factory=dict)  # forwarding that differs
    #: Its rules as the namespace has them (existing subscriptions that list Rules).
    rules: list[RuleProperties] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """What :func:`apply` will do, every step already checked against the namespace."""

    config: EmulatorConfig
    steps: tuple[_Step, ...]


async def plan(ns: Namespace, config: EmulatorConfig) -> Plan:
    """Check ``config`` against what ``ns`` holds, changing nothing.

    Raises:
        ConfigError: Carrying out the file would fail part-way; the sentence names the
            JSON path (and the field) the namespace stops.
    """
    queues = {q.name.lower(): q for q in await ns.list_queues()}
    topics = {t.name.lower(): t for t in await ns.list_topics()}
    held: dict[str, dict[str, Any]] = {"queue": queues, "topic": topics}
    steps: list[_Step] = []
    for spec in config.entities:
        current = None
        if spec.kind == "subscription":
            if spec.topic.lower() in topics:
                current = await _found(ns.get_subscription(spec.topic, spec.name))
        else:
            current = held[spec.kind].get(spec.name.lower())
            other = "topic" if spec.kind == "queue" else "queue"
            if spec.name.lower() in held[other]:
                raise ConfigError(
                    f"{spec.where}.Name: the namespace has a {other} named "
                    f"{held[other][spec.name.lower()].name!r} already, and a {spec.kind} "
                    "cannot share its name; delete it (or the --data-dir that keeps it).")
        step = _Step(spec, current)
        if current is not None:
            step.changes = {name: value for name, value in spec.properties.items()
                            if name not in _FORWARDS and getattr(current, name) != value}
            fixed = [name for name in step.changes if name in _FIXED]
            if fixed:
                raise ConfigError(
                    f"{spec.where}.Properties: the file sets {fixed[0]} to "
                    f"{spec.properties[fixed[0]]}, but the {spec.kind} {spec.path} exists "
                    f"with {getattr(current, fixed[0])}, which Service Bus fixes at "
                    "creation; delete the entity (or its --data-dir) to make it anew.")
            if spec.rules is not None:
                step.rules = await ns.list_rules(spec.topic, spec.name)
        step.forwards = {
            name: spec.properties[name] for name in _FORWARDS
            if name in spec.properties and not _same_entity(
                None if current is None else getattr(current, name), spec.properties[name])
        }
        steps.append(step)
    made = {s.spec.name.lower() for s in steps if s.spec.kind != "subscription"}
    _check_forwards(steps, made | set(queues) | set(topics))
    if len(made | set(queues) | set(topics)) > MAX_ENTITIES:
        raise ConfigError(
            f"UserConfig.Namespaces[0]: with the file's queues and topics the namespace "
            f"would hold {len(made | set(queues) | set(topics))}, more than the "
            f"{MAX_ENTITIES} a namespace may hold.")
    await _check_filter_quotas(ns, steps, topics)
    return Plan(config, tuple(steps))


async def _found(getting: Any) -> Any:
    try:
        return await getting
    except EntityNotFound:
        return None


def _check_forwards(steps: list[_Step], names: set[str]) -> None:
    """Every forwarding target is a queue or topic of the file or of the namespace."""
    for step in steps:
        for name, target in step.forwards.items():
            if target is not None and target.lower() not in names:
                raise ConfigError(
                    f"{step.spec.where}.Properties.{_FORWARD_KEYS[name]}: {target!r} is "
                    "neither a queue nor a topic of the file or of the namespace.")


async def _check_filter_quotas(ns: Namespace, steps: list[_Step],
                               topics: dict[str, Any]) -> None:
    """Each topic's SQL and correlation filters, once the file is applied, within
    Service Bus's quotas (rules are removed before any is added, so that is the most
    the topic holds on the way)."""
    by_topic: dict[str, list[_Step]] = {}
    for step in steps:
        if step.spec.kind == "subscription":
            by_topic.setdefault(step.spec.topic.lower(), []).append(step)
    for topic, subs in by_topic.items():
        filters: list[Any] = []
        listed = {s.spec.name.lower() for s in subs}
        for step in subs:
            if step.spec.rules is not None:
                filters += [r.filter for r in step.spec.rules]
            elif step.current is not None:
                filters += [r.filter for r in await ns.list_rules(step.spec.topic,
                                                                  step.spec.name)]
        if topic in topics:
            for sub in await ns.list_subscriptions(topics[topic].name):
                if sub.name.lower() not in listed:
                    filters += [r.filter for r in await ns.list_rules(topics[topic].name,
                                                                      sub.name)]
        for kind, most in ((SqlRuleFilter, MAX_SQL_FILTERS),
                           (CorrelationRuleFilter, MAX_CORRELATION_FILTERS)):
            count = sum(1 for f in filters if isinstance(f, kind))
            if count > most:
                raise ConfigError(
                    f"{subs[0].spec.where.rsplit('.Subscriptions', 1)[0]}.Subscriptions: "
                    f"the topic's subscriptions would have {count} {kind.__name__}s, more "
                    f"than the {most} a topic may have.")


async def apply(ns: Namespace, config: EmulatorConfig) -> list[str]:
    """Make ``ns`` hold what ``config`` says, whole or not at all: the plan is checked
    first (:func:`plan`), then carried out: what is missing created, what differs
    updated, the rest left; the lines to say (what was updated, and a count).

    Entities are made first without their forwarding, which is set once every entity of
    the file exists (a queue may forward to one the file lists after it); rules are
    removed before any is added.

    Raises:
        ConfigError: As :func:`plan`; then nothing has changed.
    """
    return await carry_out(ns, await plan(ns, config))


async def carry_out(ns: Namespace, checked: Plan) -> list[str]:
    """Carry out a :func:`plan` (see :func:`apply`)."""
    said: list[str] = []
    changed: dict[str, dict[str, tuple[Any, Any]]] = {}
    for step in checked.steps:
        spec = step.spec
        if step.current is None:
            await _create(ns, spec, {k: v for k, v in spec.properties.items()
                                     if k not in _FORWARDS})
        elif step.changes:
            await _update(ns, spec, step.changes)
            changed[spec.path] = {k: (getattr(step.current, k), v)
                                  for k, v in step.changes.items()}
    for step in checked.steps:  # forwarding, now that every entity exists
        if step.forwards:
            await _update(ns, step.spec, step.forwards)
            if step.current is not None:
                changed.setdefault(step.spec.path, {}).update(
                    (k, (getattr(step.current, k), v)) for k, v in step.forwards.items())
    for step in checked.steps:
        if step.spec.path in changed:
            shown = ", ".join(f"{name} {old} -> {new}"
                              for name, (old, new) in changed[step.spec.path].items())
            said.append(f"updated {step.spec.kind} {step.spec.path}: {shown}")
    said += await _rules(ns, [s for s in checked.steps if s.spec.rules is not None])
    created = sum(1 for s in checked.steps if s.current is None)
    kept = len(checked.steps) - created - len(changed)
    said.append(f"Config.json: {created} created, {len(changed)} updated, "
                f"{kept} as they were")
    return said


def _same_entity(current: str | None, wanted: str | None) -> bool:
    """Whether a forwarding target read back (a name, or a URL ending in it) is the one
    wanted."""
    if not current or not wanted:
        return not current and not wanted
    return current.rstrip("/").rsplit("/", 1)[-1].lower() == wanted.lower()


async def _create(ns: Namespace, spec: EntitySpec, props: dict[str, Any]) -> None:
    if spec.kind == "queue":
        await ns.create_queue(spec.name, **props)
    elif spec.kind == "topic":
        await ns.create_topic(spec.name, **props)
    else:
        await ns.create_subscription(spec.topic, spec.name, **props)


async def _update(ns: Namespace, spec: EntitySpec, changes: dict[str, Any]) -> None:
    if spec.kind == "queue":
        await ns.update_queue(spec.name, **changes)
    elif spec.kind == "topic":
        await ns.update_topic(spec.name, **changes)
    else:
        await ns.update_subscription(spec.topic, spec.name, **changes)


async def _rules(ns: Namespace, steps: Iterable[_Step]) -> list[str]:
    """Make each subscription's rules those the file lists, and no other: every removal
    first (a topic's filter quota counts what it holds on the way), then the rest."""
    said: list[str] = []
    work: list[tuple[EntitySpec, dict[str, RuleProperties], dict[str, RuleSpec]]] = []
    for step in steps:
        spec = step.spec
        assert spec.rules is not None
        have = {rule.name.lower(): rule for rule in (
            step.rules if step.current is not None
            else await ns.list_rules(spec.topic, spec.name))}  # made now: $Default
        want = {rule.name.lower(): rule for rule in spec.rules}
        work.append((spec, have, want))
        for name, rule in have.items():
            if name not in want:
                await ns.delete_rule(spec.topic, spec.name, rule.name)
                if name != "$default":
                    said.append(f"removed rule {rule.name} of subscription {spec.path}: the "
                                "file does not list it")
    for spec, have, want in work:
        for name, wanted in want.items():
            current = have.get(name)
            if current is not None and (current.filter, current.action) == (
                    wanted.filter, wanted.action):
                continue
            if current is not None:
                await ns.update_rule(spec.topic, spec.name, wanted.name, filter=wanted.filter,
                                     action=wanted.action)
                said.append(f"updated rule {wanted.name} of subscription {spec.path}")
            else:
                await ns.create_rule(spec.topic, spec.name, wanted.name, filter=wanted.filter,
                                     action=wanted.action)
    return said
