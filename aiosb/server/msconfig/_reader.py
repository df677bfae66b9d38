"""Reading a ``Config.json`` (see :mod:`aiosb.server.msconfig`): the file to an
:class:`EmulatorConfig`, every value checked, or one :class:`ConfigError` sentence.

Nothing in the file can crash the reader: it is read up to :data:`MAX_BYTES`, nests at
most :data:`MAX_DEPTH` deep, its numbers and durations are bounded before anything is
computed from them (an ISO 8601 duration longer than Service Bus's ``TimeSpan.MaxValue``
is refused, never an ``OverflowError``), and names are checked as the emulator checks
them (:func:`aiosb.entities._check_name`, the namespace's by
:func:`aiosb.emulator.check_namespace_name`) and compared without case, as
Service Bus compares them. A limit of aiosb's own constructors (a SQL expression over
1024 characters, more than 64 correlation properties, a property named ``""``) is the
same one sentence: their :class:`~aiosb.errors.InvalidArgument` becomes a
:class:`ConfigError` at the path of what was being read (:func:`_within`); any other
exception is a bug of the reader and is left to be seen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import decimal
import difflib
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...emulator import MAX_CORRELATION_FILTERS, MAX_ENTITIES, MAX_SQL_FILTERS, check_namespace_name
from ...entities import (
    NEVER,
    QueueProperties,
    SubscriptionProperties,
    TopicProperties,
    _check_name,
)
from ...errors import InvalidArgument
from ...rules import (
    CorrelationRuleFilter,
    RuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
)
from ...sql import compile_action, compile_filter
from ._spec import ConfigError, EmulatorConfig, EntitySpec, RuleSpec

#: The largest file read (Microsoft's emulator holds 50 entities; aiosb no limit, but a
#: file of 10,000 entities with their rules is a few MiB).
MAX_BYTES = 16 * 1024 * 1024
#: How deep the file's objects and arrays may nest (the schema needs 13 levels).
MAX_DEPTH = 64

#: ISO 8601 durations as the schema's pattern takes them: years and months too.
_DURATION = re.compile(
    r"P(?!$)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?"
    r"(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d+))?S)?)?"
)
#: Service Bus's TimeSpan.MaxValue in microseconds: the longest duration it knows.
_LONGEST = (NEVER.days * 86_400 + NEVER.seconds) * 1_000_000 + NEVER.microseconds
#: The most digits a number of the file may have (no whole number of Service Bus's
#: needs more than 20; Python refuses to read past 4,300).
_DIGITS = 40
#: A whole number Service Bus keeps (a property's: 64 bits; a count: 32).
_LONG = (-(2**63), 2**63 - 1)
_MOST_DELIVERIES = 2**31 - 1

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
_LOGGING_TYPES = ("File", "Console", "File,Console", "Console,File")
#: The namespace's name, as the schema's pattern has it (ASCII: JSON Schema's \w is).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_\-./]*[A-Za-z0-9])?")
#: A JSON string (unrolled, so a long one is skipped at C speed), and the comments
#: outside strings; an unended string or comment runs to the end.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_TOKENS = re.compile(_STRING.pattern + r"|//[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
#: A bracket to its step in depth: opening +1, closing -1 (indexes of (-1, 1)).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\x00\x00")


def load(path: str | Path) -> EmulatorConfig:
    """Read and check a ``Config.json``: UTF-8 (a byte order mark is skipped), JSON with
    ``//`` and ``/* */`` comments, at most :data:`MAX_BYTES` and :data:`MAX_DEPTH` deep.

    Raises:
        ConfigError: The file cannot be read, is not JSON, or breaks the schema; the
            sentence names the JSON path (not the file's: the caller says it).
    """
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot be read ({exc.strerror or exc}).") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"is larger than {MAX_BYTES // (1024 * 1024)} MiB, more than a "
                          "Config.json holds.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"is not UTF-8 text (byte {exc.start}).") from None
    return dataclasses.replace(parse(_json(_without_comments(text))), source=str(path))


def _json(text: str) -> Any:
    """The JSON value of ``text``, bounded: its nesting first (Python's reader recurses),
    and numbers that are finite, of at most :data:`_DIGITS` digits (else a marker the
    checks refuse); ``NaN`` and ``Infinity``, which are not JSON, refused."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).encode("ascii")
    depth = max(itertools.accumulate(map((-1, 1).__getitem__, brackets.translate(_STEPS))),
                default=0)
    if depth > MAX_DEPTH:
        raise ConfigError(f"nests objects and arrays {depth} deep; a Config.json needs at "
                          f"most {MAX_DEPTH}.")

    def constant(name: str) -> Any:
        raise ConfigError(f"is not JSON: {name} is not a JSON number.")

    try:
        return json.loads(text, parse_int=_number, parse_float=_number,
                          parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})."
        ) from None
    except RecursionError:  # a net only: the count above stops such a file first
        raise ConfigError(f"nests objects and arrays deeper than {MAX_DEPTH}.") from None


class _Huge:
    """A number of the file too long (or too large) to be any of Service Bus's: every
    check refuses it, and a sentence shows its first digits."""

    def __init__(self, text: str) -> None:
        self.text = text


def _number(text: str) -> Any:
    if len(text) > _DIGITS:
        return _Huge(text)
    value = float(text) if any(c in text for c in ".eE") else int(text)
    return value if not isinstance(value, float) or math.isfinite(value) else _Huge(text)


def _is_text(value: Any) -> bool:
    return type(value) is str


def _property_value(value: Any) -> bool:
    """Whether a correlation filter may match an application property against it."""
    if isinstance(value, bool) or _is_text(value):
        return True
    if isinstance(value, int):
        return _LONG[0] <= value <= _LONG[1]
    return isinstance(value, float) and math.isfinite(value)


@contextlib.contextmanager
def _within(path: str) -> Iterator[None]:
    """Reading what is at ``path``: aiosb's own :class:`InvalidArgument` raised inside
    (a constructor refusing a user's value) becomes the :class:`ConfigError` at ``path``;
    a ConfigError passes as it is (the innermost path wins), and so does any other
    exception, which is a bug of the reader and must stay visible."""
    try:
        yield
    except ConfigError:
        raise
    except InvalidArgument as exc:
        raise ConfigError(f"{path or 'the file'}: {exc}") from None


def parse(data: Any) -> EmulatorConfig:
    """Check a parsed ``Config.json`` (see :func:`load`).

    Raises:
        ConfigError: As :func:`load`; also a name given twice (compared without case).
    """
    with _within(""):  # a net: each part is read within its own path first
        return _parse(data)


def _parse(data: Any) -> EmulatorConfig:
    reader = _Reader()
    root = reader.object(data, "", {"UserConfig"}, required=("UserConfig",))
    user = reader.object(root["UserConfig"], "UserConfig", {"Namespaces", "Logging"},
                         required=("Namespaces",))
    if "Logging" in user:
        logging = reader.object(user["Logging"], "UserConfig.Logging", {"Type"})
        if "Type" in logging and (not _is_text(logging["Type"])
                                  or logging["Type"] not in _LOGGING_TYPES):
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
    name = reader.name(ns["Name"], f"{where}.Name", "namespace")
    entities: list[EntitySpec] = []
    seen: dict[str, str] = {}  # queues and topics share one set of names
    queues = reader.array(ns.get("Queues", []), f"{where}.Queues")
    topics = reader.array(ns.get("Topics", []), f"{where}.Topics")
    if len(queues) + len(topics) > MAX_ENTITIES:  # said before each is read
        raise ConfigError(f"{where}: has {len(queues) + len(topics)} queues and topics, "
                          f"more than the {MAX_ENTITIES} a namespace may hold.")
    for i, queue in enumerate(queues):
        at = f"{where}.Queues[{i}]"
        with _within(at):
            item = reader.object(queue, at, {"Name", "Properties"}, required=("Name",))
            queue_name = reader.unique(seen, item["Name"], f"{at}.Name", "queue")
            entities.append(EntitySpec("queue", queue_name, reader.properties(
                item.get("Properties"), at, _QUEUE, QueueProperties, queue_name), where=at))
    for i, topic in enumerate(topics):
        at = f"{where}.Topics[{i}]"
        with _within(at):
            entities.extend(_topic(reader, topic, at, seen))
    return EmulatorConfig(name, tuple(entities), tuple(reader.warnings))


def _topic(reader: _Reader, topic: Any, at: str, seen: dict[str, str]) -> list[EntitySpec]:
    """A topic and its subscriptions, in the order to create them."""
    item = reader.object(topic, at, {"Name", "Properties", "Subscriptions"},
                         required=("Name",))
    topic_name = reader.unique(seen, item["Name"], f"{at}.Name", "topic")
    entities = [EntitySpec("topic", topic_name, reader.properties(
        item.get("Properties"), at, _TOPIC, TopicProperties, topic_name), where=at)]
    subs = reader.array(item.get("Subscriptions", []), f"{at}.Subscriptions")
    names: dict[str, str] = {}
    filters = {SqlRuleFilter: 0, CorrelationRuleFilter: 0}  # the topic's quotas
    for j, sub in enumerate(subs):
        sat = f"{at}.Subscriptions[{j}]"
        with _within(sat):
            entry = reader.object(sub, sat, {"Name", "Properties", "Rules"}, required=("Name",))
            sub_name = reader.unique(names, entry["Name"], f"{sat}.Name", "subscription")
            rules = None
            if "Rules" in entry:
                rule_names: dict[str, str] = {}
                rules = tuple(
                    reader.rule(rule, f"{sat}.Rules[{k}]", rule_names, filters)
                    for k, rule in enumerate(reader.array(entry["Rules"], f"{sat}.Rules"))
                )
            entities.append(EntitySpec(
                "subscription", sub_name,
                reader.properties(entry.get("Properties"), sat, _SUBSCRIPTION,
                                  SubscriptionProperties, sub_name),
                topic=topic_name, rules=rules, where=sat,
            ))
    return entities


class _Reader:
    """Checks values, naming the JSON path of what is wrong."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    @staticmethod
    def fail(path: str, value: Any, what: str) -> None:
        raise ConfigError(f"{path}: {_shown(value)} {what}.")

    def object(self, value: Any, path: str, known: set[str],
               required: tuple[str, ...] = ()) -> dict[str, Any]:
        shown = path or "the file"
        if not isinstance(value, dict):
            raise ConfigError(f"{shown}: must be a JSON object, not {_kind(value)}.")
        for key in value:
            if key not in known:
                near = difflib.get_close_matches(key[:100], known, n=1, cutoff=0.8)
                if near:
                    raise ConfigError(f"{_join(path, key)}: is not a key of {shown}; did you "
                                      f"mean {near[0]!r}?")
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

    def name(self, value: Any, path: str, kind: str) -> str:
        """A name as Service Bus takes it for a ``kind`` (``namespace`` and ``rule``:
        the schema's pattern, then a namespace's as the emulator takes it; a rule's is
        checked whole with the rule)."""
        if not _is_text(value) or (kind in ("namespace", "rule") and not _NAME.fullmatch(value)):
            self.fail(path, value, "is not a name (letters, digits and - . _ /, beginning "
                      "and ending with a letter or digit)")
        with _within(path):
            if kind == "namespace":
                check_namespace_name(value)
            elif kind != "rule":
                _check_name(kind, value)
        return str(value)

    def unique(self, seen: dict[str, str], value: Any, path: str, kind: str) -> str:
        """A name not given before in ``seen`` (``{lower-case name: its path}``):
        Service Bus compares names without case, so ``s`` and ``S`` are one."""
        name = self.name(value, path, kind)
        first = seen.setdefault(name.lower(), path)
        if first != path:
            raise ConfigError(f"{path}: {name!r} is given twice (first at {first}); Service "
                              "Bus compares names without case.")
        return name

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
            if isinstance(raw, bool) or not isinstance(raw, int) or not (
                    1 <= raw <= _MOST_DELIVERIES):
                self.fail(path, raw, f"is not a whole number from 1 to {_MOST_DELIVERIES}")
            return raw
        if kind == "entity":
            if not _is_text(raw):
                self.fail(path, raw, "is not an entity name (or \"\" for none)")
            if raw == "":
                return None
            return self.name(raw, path, "queue")
        return duration(raw, path)

    def rule(self, value: Any, path: str, names: dict[str, str],
             filters: dict[type[Any], int]) -> RuleSpec:
        """A rule, its name not given before in ``names``, counted in ``filters`` (the
        topic's, refused past Service Bus's quota before its SQL is compiled)."""
        item = self.object(value, path, {"Name", "Properties"}, required=("Name", "Properties"))
        name = self.unique(names, item["Name"], f"{path}.Name", "rule")
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
                        if not _property_value(prop_value):
                            self.fail(f"{where}.{prop}", prop_value, "is not a string, "
                                      "a finite number, a 64-bit whole number or a boolean")
                    fields["properties"] = dict(raw)
                elif not _is_text(raw):
                    self.fail(where, raw, "is not a string")
                else:
                    fields[_CORRELATION[key]] = raw
            with _within(f"{at}.CorrelationFilter"):
                rule_filter = CorrelationRuleFilter(**fields)
        elif kind == "Sql":
            if "SqlFilter" not in props:
                raise ConfigError(f"{at}: FilterType is Sql but it has no SqlFilter.")
            sql = self.object(props["SqlFilter"], f"{at}.SqlFilter", {"SqlExpression"},
                              required=("SqlExpression",))
            expression = sql["SqlExpression"]
            if not _is_text(expression) or not expression.strip():
                self.fail(f"{at}.SqlFilter.SqlExpression", expression, "is not a SQL expression")
            with _within(f"{at}.SqlFilter.SqlExpression"):
                rule_filter = SqlRuleFilter(expression)
        else:
            self.fail(f"{at}.FilterType", kind, "is not Correlation or Sql")
            raise AssertionError  # pragma: no cover - fail raises
        kind_of = type(rule_filter)
        filters[kind_of] += 1
        most = MAX_SQL_FILTERS if kind_of is SqlRuleFilter else MAX_CORRELATION_FILTERS
        if filters[kind_of] > most:
            raise ConfigError(f"{path}: is {kind_of.__name__} number {filters[kind_of]} of "
                              f"the topic, more than the {most} a topic may have.")
        action = None
        if "Action" in props:
            act = self.object(props["Action"], f"{at}.Action", {"SqlExpression"},
                              required=("SqlExpression",))
            expression = act["SqlExpression"]
            if not _is_text(expression) or not expression.strip():
                self.fail(f"{at}.Action.SqlExpression", expression, "is not a SQL action")
            with _within(f"{at}.Action.SqlExpression"):
                action = SqlRuleAction(expression)
        rule = RuleSpec(name, rule_filter, action)
        with _within(at):  # the SQL parses here, before the server listens
            RuleProperties(name, rule_filter, action).checked()
            if isinstance(rule_filter, SqlRuleFilter):
                compile_filter(rule_filter.sql_expression, None)
            if action is not None:
                compile_action(action.sql_expression, None)
        return rule



def duration(raw: Any, path: str) -> _dt.timedelta:
    """An ISO 8601 duration (``PT1H``, ``P2DT30M``, ``PT0.5S``, ``P1W``); years and
    months only as whole multiples of 365 and 30 days would mislead, so they are refused.

    Raises:
        ConfigError: Not such a duration, or zero.
    """
    match = _DURATION.fullmatch(raw) if _is_text(raw) else None
    if match is None or raw.endswith("T"):
        raise ConfigError(f"{path}: {_shown(raw)} is not an ISO 8601 duration "
                          "(such as PT1H, PT20S or P14D).")
    years, months, weeks, days, hours, minutes, whole, fraction = match.groups()
    if years or months:
        raise ConfigError(f"{path}: {_shown(raw)} has years or months, which have no "
                          "fixed length; give days (P365D).")
    parts = [p.lstrip("0") for p in (weeks, days, hours, minutes, whole) if p]
    micros = -1  # too long to count
    if all(len(p) <= _DIGITS for p in parts):
        w, d, h, m, sec = (int(p or 0) for p in (weeks, days, hours, minutes, whole))
        micros = (((w * 7 + d) * 24 + h) * 60 + m) * 60 + sec
        micros = micros * 1_000_000 + int(decimal.Decimal(f"0.{fraction or 0}").scaleb(6)
                                          .to_integral_value(decimal.ROUND_HALF_EVEN))
    if not 0 <= micros <= _LONGEST:
        raise ConfigError(f"{path}: {_shown(raw)} is longer than the longest duration Service "
                          "Bus knows (TimeSpan.MaxValue, P10675199DT2H48M5.4775807S).")
    if micros == 0:
        raise ConfigError(f"{path}: {_shown(raw)} is no time at all; give a positive one.")
    return _dt.timedelta(microseconds=micros)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _shown(value: Any) -> str:
    """A value of the file as a sentence shows it: JSON, cut short; a container by kind."""
    if isinstance(value, (dict, list)):
        return _kind(value)
    if isinstance(value, _Huge):
        text = value.text
        return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
    if _is_text(value) and len(value) > 80:
        return json.dumps(value[:60]).rstrip('"') + f'..." ({len(value)} characters)'
    return json.dumps(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")  # _Huge too


def _without_comments(text: str) -> str:
    """JSON with ``//`` and ``/* */`` comments taken out (outside strings); a block
    comment becomes a space, an unended one runs to the end."""
    return _TOKENS.sub(lambda m: m[0] if m[0].startswith('"') else
                       (" " if m[0].startswith("/*") else ""), text)
