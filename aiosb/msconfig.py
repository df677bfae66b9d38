"""Microsoft's Service Bus emulator's ``Config.json``, read and applied: what ``aiosb
serve --config Config.json`` does (#35).

The file is the one Microsoft's emulator mounts (its schema:
``ServiceBus-Emulator/Schema/Config-schema.json`` of the public
``Azure/azure-service-bus-emulator-installer`` repository): ``UserConfig.Namespaces``
with their ``Queues`` and ``Topics``, a topic's ``Subscriptions`` and a subscription's
``Rules`` (``Correlation`` or ``Sql`` filters, an ``Action``), each with its
``Properties``. Files shaped like that repository's examples load unchanged (``//``
comments too, as its documentation writes them).

- **Its defaults, not its limits.** A property left out takes the value Microsoft's
  emulator gives it (a one-hour time to live, a one-minute lock, three deliveries, a
  20-second duplicate detection window); its limits (50 entities, one hour at most, one
  namespace named ``sbemulatorns``) are not applied.
- **One sentence for a bad file**, naming the JSON path and what is wrong
  (``UserConfig.Namespaces[0].Queues[3].Properties.LockDuration: "PT1X" is not an ISO
  8601 duration``), before the server listens. A key the schema does not know is
  reported (a warning), or refused when it is a misspelling of one it knows.
- **Idempotent.** Applied at every start (with ``--data-dir`` the entities are kept):
  what is missing is created, what the file changed is updated and said, what is as the
  file says is left alone. A subscription that lists ``Rules`` has those rules and no
  other (its ``$Default`` rule, which takes every message, goes unless listed). What
  Service Bus fixes at creation (``RequiresSession``, ``RequiresDuplicateDetection``)
  cannot change on an existing entity: that is a sentence too.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import Namespace
from .entities import QueueProperties, SubscriptionProperties, TopicProperties
from .errors import EntityNotFound, InvalidArgument
from .rules import (
    CorrelationRuleFilter,
    RuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
)
from .sql import compile_action, compile_filter

__all__ = ["ConfigError", "EmulatorConfig", "EntitySpec", "RuleSpec", "apply", "load"]


class ConfigError(InvalidArgument):
    """A ``Config.json`` aiosb cannot use; the sentence names the JSON path."""


#: ISO 8601 durations as the schema's pattern takes them: years and months too.
_DURATION = re.compile(
    r"P(?!$)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?"
    r"(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?"
)

# Each entity kind's properties: Microsoft's name -> (aiosb's name, kind, Microsoft's
# default). Kinds: "duration", "bool", "int", "entity" (a name, "" for none).
_QUEUE: dict[str, tuple[str, str, Any]] = {
    "DeadLetteringOnMessageExpiration": ("dead_lettering_on_message_expiration", "bool", False),
    "DefaultMessageTimeToLive": ("default_message_time_to_live", "duration", "PT1H"),
    "DuplicateDetectionHistoryTimeWindow": (
        "duplicate_detection_history_time_window", "duration", "PT20S"),
    "ForwardDeadLetteredMessagesTo": ("forward_dead_lettered_messages_to", "entity", ""),
    "ForwardTo": ("forward_to", "entity", ""),
    "LockDuration": ("lock_duration", "duration", "PT1M"),
    "MaxDeliveryCount": ("max_delivery_count", "int", 3),
    "RequiresDuplicateDetection": ("requires_duplicate_detection", "bool", False),
    "RequiresSession": ("requires_session", "bool", False),
}
_TOPIC = {name: _QUEUE[name] for name in (
    "DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow",
    "RequiresDuplicateDetection",
)}
_SUBSCRIPTION = {name: _QUEUE[name] for name in (
    "DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive", "LockDuration",
    "MaxDeliveryCount", "ForwardDeadLetteredMessagesTo", "ForwardTo", "RequiresSession",
)}
#: A correlation filter's keys -> aiosb's CorrelationRuleFilter fields.
_CORRELATION = {
    "ContentType": "content_type", "CorrelationId": "correlation_id", "Label": "label",
    "MessageId": "message_id", "ReplyTo": "reply_to", "ReplyToSessionId": "reply_to_session_id",
    "SessionId": "session_id", "To": "to", "Properties": "properties",
}
#: Service Bus's shortest duplicate detection window (Microsoft's emulator takes 5 s).
_SHORTEST_WINDOW = _dt.timedelta(seconds=20)
_WINDOW_KEY = "DuplicateDetectionHistoryTimeWindow"
#: What Service Bus fixes when it creates an entity.
_FIXED = ("requires_session", "requires_duplicate_detection")
_LOGGING_TYPES = ("File", "Console", "File,Console", "Console,File")
#: Entity and rule names, as the schema's pattern has them.
_NAME = re.compile(r"^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-./]*[A-Za-z0-9]$")


@dataclass(frozen=True)
class RuleSpec:
    """A rule as the file gives it."""

    name: str
    filter: RuleFilter
    action: SqlRuleAction | None = None


@dataclass(frozen=True)
class EntitySpec:
    """A queue, topic or subscription as the file gives it: aiosb's property names, with
    Microsoft's defaults for what it leaves out."""

    kind: str  # "queue", "topic" or "subscription"
    name: str
    properties: Mapping[str, Any]
    topic: str = ""
    #: A subscription's rules, when the file lists them (None: it does not).
    rules: tuple[RuleSpec, ...] | None = None

    @property
    def path(self) -> str:
        return f"{self.topic}/subscriptions/{self.name}" if self.kind == "subscription" \
            else self.name


@dataclass(frozen=True)
class EmulatorConfig:
    """A whole file: the namespace, its entities in the order to create them (queues,
    then topics, each topic's subscriptions after it), and what was reported."""

    namespace: str
    entities: tuple[EntitySpec, ...]
    warnings: tuple[str, ...] = field(default=())


def load(path: str | Path) -> EmulatorConfig:
    """Read and check a ``Config.json``.

    Raises:
        ConfigError: The file cannot be read, is not JSON, or breaks the schema; the
            sentence names the JSON path (not the file's: the caller says it).
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"cannot be read ({exc.strerror or exc}).") from None
    except UnicodeDecodeError:
        raise ConfigError("is not UTF-8 text.") from None
    try:
        data = json.loads(_without_comments(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})."
        ) from None
    return parse(data)


def parse(data: Any) -> EmulatorConfig:
    """Check a parsed ``Config.json`` (see :func:`load`).

    Raises:
        ConfigError: As :func:`load`.
    """
    reader = _Reader()
    root = reader.object(data, "", {"UserConfig"}, required=("UserConfig",))
    user = reader.object(root["UserConfig"], "UserConfig", {"Namespaces", "Logging"},
                         required=("Namespaces",))
    if "Logging" in user:
        logging = reader.object(user["Logging"], "UserConfig.Logging", {"Type"})
        if "Type" in logging and logging["Type"] not in _LOGGING_TYPES:
            reader.fail("UserConfig.Logging.Type", logging["Type"],
                        f"is not one of {', '.join(_LOGGING_TYPES)}")
    namespaces = reader.array(user["Namespaces"], "UserConfig.Namespaces")
    if len(namespaces) != 1:
        raise ConfigError(
            f"UserConfig.Namespaces: has {len(namespaces)} namespaces; aiosb serve serves "
            "one from a Config.json (run one server per file), as Microsoft's emulator does."
        )
    where = "UserConfig.Namespaces[0]"
    ns = reader.object(namespaces[0], where, {"Name", "Queues", "Topics"}, required=("Name",))
    name = reader.name(ns["Name"], f"{where}.Name")
    entities: list[EntitySpec] = []
    for i, queue in enumerate(reader.array(ns.get("Queues", []), f"{where}.Queues")):
        at = f"{where}.Queues[{i}]"
        item = reader.object(queue, at, {"Name", "Properties"}, required=("Name",))
        queue_name = reader.name(item["Name"], f"{at}.Name")
        entities.append(EntitySpec("queue", queue_name, reader.properties(
            item.get("Properties"), at, _QUEUE, QueueProperties, queue_name)))
    for i, topic in enumerate(reader.array(ns.get("Topics", []), f"{where}.Topics")):
        at = f"{where}.Topics[{i}]"
        item = reader.object(topic, at, {"Name", "Properties", "Subscriptions"},
                             required=("Name",))
        topic_name = reader.name(item["Name"], f"{at}.Name")
        entities.append(EntitySpec("topic", topic_name, reader.properties(
            item.get("Properties"), at, _TOPIC, TopicProperties, topic_name)))
        subs = reader.array(item.get("Subscriptions", []), f"{at}.Subscriptions")
        for j, sub in enumerate(subs):
            sat = f"{at}.Subscriptions[{j}]"
            entry = reader.object(sub, sat, {"Name", "Properties", "Rules"}, required=("Name",))
            rules = None
            if "Rules" in entry:
                rules = tuple(
                    reader.rule(rule, f"{sat}.Rules[{k}]")
                    for k, rule in enumerate(reader.array(entry["Rules"], f"{sat}.Rules"))
                )
                names = [r.name.lower() for r in rules]
                twice = sorted({n for n in names if names.count(n) > 1})
                if twice:
                    raise ConfigError(f"{sat}.Rules: the rule {twice[0]!r} is given twice.")
            sub_name = reader.name(entry["Name"], f"{sat}.Name")
            entities.append(EntitySpec(
                "subscription", sub_name,
                reader.properties(entry.get("Properties"), sat, _SUBSCRIPTION,
                                  SubscriptionProperties, sub_name),
                topic=topic_name, rules=rules,
            ))
    paths = [e.path.lower() for e in entities if e.kind != "subscription"]
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        raise ConfigError(f"{where}: the entity {twice[0]!r} is given twice.")
    return EmulatorConfig(name, tuple(entities), tuple(reader.warnings))


class _Reader:
    """Checks values, naming the JSON path of what is wrong."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    @staticmethod
    def fail(path: str, value: Any, what: str) -> None:
        raise ConfigError(f"{path}: {json.dumps(value)[:80]} {what}.")

    def object(self, value: Any, path: str, known: set[str],
               required: tuple[str, ...] = ()) -> dict[str, Any]:
        shown = path or "the file"
        if not isinstance(value, dict):
            raise ConfigError(f"{shown}: must be a JSON object, not {_kind(value)}.")
        for key in value:
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
                if near:
                    raise ConfigError(
                        f"{_join(path, key)}: is not a key of {shown}; did you mean {near[0]!r}?"
                    )
                self.warnings.append(
                    f"{_join(path, key)}: not a key Microsoft's schema knows here, ignored "
                    f"(known: {', '.join(sorted(known))})."
                )
        for key in required:
            if key not in value:
                raise ConfigError(f"{shown}: has no {key!r}, which it needs.")
        return value

    @staticmethod
    def array(value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a JSON array, not {_kind(value)}.")
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not _NAME.match(value):
            self.fail(path, value, "is not a name (letters, digits and - . _ /, beginning "
                      "and ending with a letter or digit)")
        return str(value)

    def properties(self, value: Any, path: str, table: Mapping[str, tuple[str, str, Any]],
                   kind: type[Any], name: str) -> dict[str, Any]:
        at = f"{path}.Properties"
        given = {} if value is None else self.object(value, at, set(table))
        out: dict[str, Any] = {}
        for key, (field_name, field_kind, default) in table.items():
            raw = given.get(key, default)
            out[field_name] = self.value(raw, f"{at}.{key}", field_kind)
        window = out.get("duplicate_detection_history_time_window")
        if window is not None and window < _SHORTEST_WINDOW:
            self.warnings.append(
                f"{at}.DuplicateDetectionHistoryTimeWindow: {given.get(_WINDOW_KEY)} is below "
                "Service Bus's 20 s minimum (Microsoft's emulator allows it): PT20S is used."
            )
            out["duplicate_detection_history_time_window"] = _SHORTEST_WINDOW
        try:  # Service Bus's ranges (not Microsoft's emulator's), said at the key's path
            kind(name=name, **{k: v for k, v in out.items() if v is not None}).checked()
        except InvalidArgument as exc:
            keys = [k for k, (f, _, _) in table.items() if str(exc).startswith(f)]
            raise ConfigError(f"{at}.{keys[0] if keys else ''}: {exc}".replace(".:", ":")) \
                from None
        return out

    def value(self, raw: Any, path: str, kind: str) -> Any:
        if kind == "bool":
            if not isinstance(raw, bool):
                self.fail(path, raw, "is not true or false")
            return raw
        if kind == "int":
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                self.fail(path, raw, "is not a whole number of at least 1")
            return raw
        if kind == "entity":
            if not isinstance(raw, str):
                self.fail(path, raw, "is not an entity name (or \"\" for none)")
            if raw == "":
                return None
            return self.name(raw, path)
        return duration(raw, path)

    def rule(self, value: Any, path: str) -> RuleSpec:
        item = self.object(value, path, {"Name", "Properties"}, required=("Name", "Properties"))
        name = self.name(item["Name"], f"{path}.Name")
        at = f"{path}.Properties"
        props = self.object(item["Properties"], at,
                            {"FilterType", "CorrelationFilter", "SqlFilter", "Action"},
                            required=("FilterType",))
        kind = props["FilterType"]
        rule_filter: RuleFilter
        if kind == "Correlation":
            if "CorrelationFilter" not in props:
                raise ConfigError(f"{at}: FilterType is Correlation but it has no "
                                  "CorrelationFilter.")
            given = self.object(props["CorrelationFilter"], f"{at}.CorrelationFilter",
                                set(_CORRELATION))
            if not given:
                raise ConfigError(f"{at}.CorrelationFilter: is empty; give at least one of "
                                  f"{', '.join(_CORRELATION)}.")
            fields: dict[str, Any] = {}
            for key, raw in given.items():
                where = f"{at}.CorrelationFilter.{key}"
                if key == "Properties":
                    if not isinstance(raw, dict) or not raw:
                        self.fail(where, raw, "is not an object of at least one property")
                    for prop, prop_value in raw.items():
                        if isinstance(prop_value, (dict, list)) or prop_value is None:
                            self.fail(f"{where}.{prop}", prop_value,
                                      "is not a string, number or boolean")
                    fields["properties"] = dict(raw)
                elif not isinstance(raw, str):
                    self.fail(where, raw, "is not a string")
                else:
                    fields[_CORRELATION[key]] = raw
            rule_filter = CorrelationRuleFilter(**fields)
        elif kind == "Sql":
            if "SqlFilter" not in props:
                raise ConfigError(f"{at}: FilterType is Sql but it has no SqlFilter.")
            sql = self.object(props["SqlFilter"], f"{at}.SqlFilter", {"SqlExpression"},
                              required=("SqlExpression",))
            expression = sql["SqlExpression"]
            if not isinstance(expression, str) or not expression.strip():
                self.fail(f"{at}.SqlFilter.SqlExpression", expression, "is not a SQL expression")
            rule_filter = SqlRuleFilter(expression)
        else:
            self.fail(f"{at}.FilterType", kind, "is not Correlation or Sql")
            raise AssertionError  # pragma: no cover - fail raises
        action = None
        if "Action" in props:
            act = self.object(props["Action"], f"{at}.Action", {"SqlExpression"},
                              required=("SqlExpression",))
            expression = act["SqlExpression"]
            if not isinstance(expression, str) or not expression.strip():
                self.fail(f"{at}.Action.SqlExpression", expression, "is not a SQL action")
            action = SqlRuleAction(expression)
        rule = RuleSpec(name, rule_filter, action)
        try:  # the SQL parses here, before the server listens
            RuleProperties(name, rule_filter, action).checked()
            if isinstance(rule_filter, SqlRuleFilter):
                compile_filter(rule_filter.sql_expression, None)
            if action is not None:
                compile_action(action.sql_expression, None)
        except InvalidArgument as exc:
            raise ConfigError(f"{at}: {exc}") from None
        return rule


def duration(raw: Any, path: str) -> _dt.timedelta:
    """An ISO 8601 duration (``PT1H``, ``P2DT30M``, ``PT0.5S``, ``P1W``); years and
    months only as whole multiples of 365 and 30 days would mislead, so they are refused.

    Raises:
        ConfigError: Not such a duration, or zero.
    """
    match = _DURATION.fullmatch(raw) if isinstance(raw, str) else None
    if match is None or raw.endswith("T"):
        raise ConfigError(f"{path}: {json.dumps(raw)[:80]} is not an ISO 8601 duration "
                          "(such as PT1H, PT20S or P14D).")
    years, months, weeks, days, hours, minutes, seconds = match.groups()
    if years or months:
        raise ConfigError(f"{path}: {json.dumps(raw)} has years or months, which have no "
                          "fixed length; give days (P365D).")
    value = _dt.timedelta(weeks=int(weeks or 0), days=int(days or 0), hours=int(hours or 0),
                          minutes=int(minutes or 0), seconds=float(seconds or 0))
    if value <= _dt.timedelta(0):
        raise ConfigError(f"{path}: {json.dumps(raw)} is no time at all; give a positive one.")
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _without_comments(text: str) -> str:
    """JSON with ``//`` and ``/* */`` comments taken out (outside strings)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


# -- applying -----------------------------------------------------------------------------


#: Properties naming another entity: set once every entity of the file exists.
_FORWARDS = ("forward_to", "forward_dead_lettered_messages_to")


async def apply(ns: Namespace, config: EmulatorConfig) -> list[str]:
    """Make ``ns`` hold what ``config`` says: create what is missing, update what
    differs, leave the rest; the lines to say (what was updated, and a count).

    Entities are made first without their forwarding, which is set once every entity of
    the file exists (a queue may forward to one the file lists after it).

    Raises:
        ConfigError: The file changes what Service Bus fixes at creation.
    """
    said: list[str] = []
    created: set[str] = set()
    changed: dict[str, dict[str, tuple[Any, Any]]] = {}
    currents: dict[str, Any] = {}
    for spec in config.entities:
        try:
            current = await _get(ns, spec)
        except EntityNotFound:
            current = None
        if current is None:
            await _create(ns, spec, {k: v for k, v in spec.properties.items()
                                     if k not in _FORWARDS})
            created.add(spec.path)
            current = await _get(ns, spec)
        else:
            changes = {
                name: value for name, value in spec.properties.items()
                if name not in _FORWARDS and getattr(current, name) != value
            }
            fixed = [name for name in changes if name in _FIXED]
            if fixed:
                raise ConfigError(
                    f"{spec.kind} {spec.path}: the file sets {fixed[0]} to "
                    f"{spec.properties[fixed[0]]}, but the entity exists with "
                    f"{getattr(current, fixed[0])}, which Service Bus fixes at creation; "
                    "delete the entity (or its --data-dir) to make it anew."
                )
            if changes:
                await _update(ns, spec, changes)
                changed[spec.path] = {k: (getattr(current, k), v) for k, v in changes.items()}
        currents[spec.path] = current
    for spec in config.entities:  # forwarding, now that every entity exists
        current = currents[spec.path]
        forwards = {
            name: spec.properties[name] for name in _FORWARDS
            if name in spec.properties and not _same_entity(getattr(current, name),
                                                            spec.properties[name])
        }
        if forwards:
            await _update(ns, spec, forwards)
            if spec.path not in created:
                changed.setdefault(spec.path, {}).update(
                    (k, (getattr(current, k), v)) for k, v in forwards.items())
    for spec in config.entities:
        if spec.path in changed:
            shown = ", ".join(f"{name} {old} -> {new}"
                              for name, (old, new) in changed[spec.path].items())
            said.append(f"updated {spec.kind} {spec.path}: {shown}")
        if spec.rules is not None:
            said += await _rules(ns, spec)
    kept = len(config.entities) - len(created) - len(changed)
    said.append(f"Config.json: {len(created)} created, {len(changed)} updated, "
                f"{kept} as they were")
    return said


def _same_entity(current: str | None, wanted: str | None) -> bool:
    """Whether a forwarding target read back (a name, or a URL ending in it) is the one
    wanted."""
    if not current or not wanted:
        return not current and not wanted
    return current.rstrip("/").rsplit("/", 1)[-1].lower() == wanted.lower()


async def _get(ns: Namespace, spec: EntitySpec) -> Any:
    if spec.kind == "queue":
        return await ns.get_queue(spec.name)
    if spec.kind == "topic":
        return await ns.get_topic(spec.name)
    return await ns.get_subscription(spec.topic, spec.name)


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


async def _rules(ns: Namespace, spec: EntitySpec) -> list[str]:
    """Make the subscription's rules those the file lists, and no other."""
    assert spec.rules is not None
    said = []
    have = {rule.name.lower(): rule for rule in await ns.list_rules(spec.topic, spec.name)}
    want = {rule.name.lower(): rule for rule in spec.rules}
    for name, rule in have.items():
        if name not in want:
            await ns.delete_rule(spec.topic, spec.name, rule.name)
            if name != "$default":
                said.append(f"removed rule {rule.name} of subscription {spec.path}: the file "
                            "does not list it")
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

