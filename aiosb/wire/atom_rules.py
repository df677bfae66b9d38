"""Subscription rules in the Atom management protocol: ``<RuleDescription>`` entries and
feeds, as Service Bus (and the official admin client) write and read them at
``{topic}/subscriptions/{sub}/rules/{rule}``.

A filter is ``<Filter i:type="SqlFilter|CorrelationFilter|TrueFilter|FalseFilter">``, an
action ``<Action i:type="SqlRuleAction|EmptyRuleAction">``; parameters and correlation
properties are ``<KeyValueOfstringanyType>`` pairs whose ``<Value>`` names its XML Schema
type (``d6p1:string``, ``int``, ``long``, ``double``, ``boolean``, ``dateTime``,
``duration``). Imports the vocabulary and :mod:`aiosb.wire.atom` only.
"""

from __future__ import annotations

import datetime as _dt
import re
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

from ..errors import InvalidArgument
from ..message import PropertyValue
from ..rules import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from .atom import ATOM, SB, XSI, _format_value, _local, _parse, _parse_value

__all__ = [
    "Unzoned",
    "default_rule_of",
    "parse_rule",
    "parse_rules",
    "rule_entry_xml",
    "rule_request_xml",
    "rules_feed_xml",
    "with_default_rule",
]

_XS = "http://www.w3.org/2001/XMLSchema"
#: Correlation filter elements and the filter's fields, in Service Bus order.
_CORRELATION = [
    ("CorrelationId", "correlation_id"),
    ("MessageId", "message_id"),
    ("To", "to"),
    ("ReplyTo", "reply_to"),
    ("Label", "label"),
    ("SessionId", "session_id"),
    ("ReplyToSessionId", "reply_to_session_id"),
    ("ContentType", "content_type"),
]
_INT32 = 2**31
_ZONED = re.compile(r".*(?:Z|[+-]\d\d:\d\d)", re.IGNORECASE)


class Unzoned(_dt.datetime):
    """A rule's time that came without a time zone (the official clients send a naive
    ``datetime`` so): held as that time in UTC, the instant rules compare, and written
    back without a zone, as Service Bus echoes it (#47)."""

    __slots__ = ()


# -- writing ------------------------------------------------------------------------------


def _value_xml(value: PropertyValue) -> str:
    if isinstance(value, bool):
        kind, text = "boolean", "true" if value else "false"
    elif isinstance(value, int):
        kind, text = ("int" if -_INT32 <= value < _INT32 else "long"), str(value)
    elif isinstance(value, float):
        kind, text = "double", repr(value)
    elif isinstance(value, Unzoned):
        kind, text = "dateTime", value.replace(tzinfo=None).isoformat()
    elif isinstance(value, _dt.datetime):
        kind, text = "dateTime", _format_value("datetime", value)
    elif isinstance(value, _dt.timedelta):
        kind, text = "duration", _format_value("duration", value)
    else:
        kind, text = "string", str(value)
    return (f'<Value xmlns:d6p1="{_XS}" i:type="d6p1:{kind}">{escape(text)}</Value>')


def _pairs(tag: str, values: dict[str, PropertyValue] | None) -> str:
    if not values:
        return ""
    inner = "".join(
        f"<KeyValueOfstringanyType><Key>{escape(key)}</Key>{_value_xml(value)}"
        "</KeyValueOfstringanyType>"
        for key, value in values.items()
    )
    return f"<{tag}>{inner}</{tag}>"


def _sql(expression: str, parameters: dict[str, PropertyValue] | None) -> str:
    params = dict(parameters or {})  # names as given, with their @ or without
    return (
        f"<SqlExpression>{escape(expression)}</SqlExpression>"
        f"<CompatibilityLevel>20</CompatibilityLevel>{_pairs('Parameters', params)}"
        "<RequiresPreprocessing>true</RequiresPreprocessing>"
    )


def _filter_xml(rule_filter: RuleFilter) -> str:
    if isinstance(rule_filter, CorrelationRuleFilter):
        parts = "".join(
            f"<{element}>{escape(getattr(rule_filter, field))}</{element}>"
            for element, field in _CORRELATION
            if getattr(rule_filter, field) is not None
        )
        body = parts + _pairs("Properties", rule_filter.properties)
        return f'<Filter i:type="CorrelationFilter">{body}</Filter>'
    if isinstance(rule_filter, TrueRuleFilter):
        return f'<Filter i:type="TrueFilter">{_sql("1=1", None)}</Filter>'
    if isinstance(rule_filter, FalseRuleFilter):
        return f'<Filter i:type="FalseFilter">{_sql("1=0", None)}</Filter>'
    return (f'<Filter i:type="SqlFilter">'
            f"{_sql(rule_filter.sql_expression, rule_filter.parameters)}</Filter>")


def _rule_parts(rule: RuleProperties, created: str = "") -> str:
    """A rule's Filter, Action, CreatedAt and Name elements, in Service Bus's order."""
    action = rule.action
    action_xml = (
        '<Action i:type="EmptyRuleAction"/>'
        if action is None
        else f'<Action i:type="SqlRuleAction">{_sql(action.sql_expression, action.parameters)}'
        "</Action>"
    )
    return f"{_filter_xml(rule.filter)}{action_xml}{created}<Name>{escape(rule.name)}</Name>"


def with_default_rule(request: bytes, rule: RuleProperties) -> bytes:
    """A subscription's Atom entry (:func:`aiosb.wire.atom.request_xml`) with ``rule`` as
    its ``<DefaultRuleDescription>``, where Service Bus reads it: the subscription is
    created with that rule instead of ``$Default``, in one request."""
    marker = b"<MaxDeliveryCount>"
    if marker not in request:
        raise InvalidArgument("not a subscription description with MaxDeliveryCount.")
    element = f"<DefaultRuleDescription>{_rule_parts(rule)}</DefaultRuleDescription>".encode()
    return request.replace(marker, element + marker, 1)


def default_rule_of(data: bytes) -> RuleProperties | None:
    """The ``<DefaultRuleDescription>`` of a subscription's Atom entry, if it has one."""
    root = _parse(data)
    content = _child(root, "content")
    description = None if content is None else _child(content, "SubscriptionDescription")
    found = None if description is None else _child(description, "DefaultRuleDescription")
    return None if found is None else read_description(found)


def description_xml(rule: RuleProperties) -> str:
    """The ``<RuleDescription>`` element of a rule."""
    created = ""
    if rule.created_at_utc is not None:
        created = f"<CreatedAt>{_format_value('datetime', rule.created_at_utc)}</CreatedAt>"
    return (f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}">{_rule_parts(rule, created)}'
            "</RuleDescription>")


def rule_request_xml(rule: RuleProperties) -> bytes:
    """The Atom entry a client PUTs to create or update a rule."""
    return (
        f'<?xml version="1.0" encoding="utf-8"?><entry xmlns="{ATOM}">'
        f'<content type="application/xml">{description_xml(rule)}</content></entry>'
    ).encode()


def _entry(rule: RuleProperties, url: str, now: str) -> str:
    return (
        f"<entry><id>{escape(url)}</id><title type=\"text\">{escape(rule.name)}</title>"
        f"<published>{now}</published><updated>{now}</updated>"
        f"<link rel=\"self\" href={quoteattr(url)}/>"
        f'<content type="application/xml">{description_xml(rule)}</content></entry>'
    )


def rule_entry_xml(rule: RuleProperties, url: str) -> bytes:
    """An Atom entry describing one rule (what GET and PUT answer)."""
    now = _format_value("datetime", _dt.datetime.now(_dt.UTC))
    body = _entry(rule, url, now).replace("<entry>", f'<entry xmlns="{ATOM}">', 1)
    return ('<?xml version="1.0" encoding="utf-8"?>' + body).encode()


def rules_feed_xml(rules: list[RuleProperties], url: str,
                   following: str | None = None) -> bytes:
    """An Atom feed of (a page of) a subscription's rules (what a listing answers), with
    a ``next`` link to ``following`` when the listing goes on (the official clients
    follow it: without it they stopped at the first 100)."""
    now = _format_value("datetime", _dt.datetime.now(_dt.UTC))
    entries = "".join(_entry(rule, f"{url}/{rule.name}", now) for rule in rules)
    more = "" if following is None else f"<link rel=\"next\" href={quoteattr(following)}/>"
    return (
        f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{ATOM}">'
        f'<title type="text">Rules</title><id>{escape(url)}</id><updated>{now}</updated>'
        f"<link rel=\"self\" href={quoteattr(url)}/>{more}{entries}</feed>"
    ).encode()


# -- reading ------------------------------------------------------------------------------

_TYPES = {
    "string": "str",
    "int": "int",
    "long": "int",
    "short": "int",
    "boolean": "bool",
    "dateTime": "datetime",
    "duration": "duration",
}


def _read_value(key: str, node: ET.Element) -> PropertyValue:
    declared = next((v for k, v in node.attrib.items() if _local(k) == "type"), "d6p1:string")
    kind = declared.rpartition(":")[2]
    text = node.text or ""
    if kind in ("double", "float", "decimal"):
        try:
            return float(text)
        except ValueError:
            raise InvalidArgument(f"parameter {key!r} is {text[:40]!r}, not a number.") from None
    if kind not in _TYPES:
        raise InvalidArgument(f"parameter {key!r} has the type {kind[:40]!r}, which a rule "
                              "cannot hold.")
    value: PropertyValue = _parse_value(key, _TYPES[kind], text)
    if isinstance(value, _dt.datetime) and not _ZONED.fullmatch(text.strip()):
        return Unzoned.combine(value.date(), value.timetz())
    return value


def _read_pairs(node: ET.Element | None) -> dict[str, PropertyValue] | None:
    if node is None:
        return None
    out: dict[str, PropertyValue] = {}
    for pair in node:
        key = value = None
        for child in pair:
            if _local(child.tag) == "Key":
                key = (child.text or "").strip()
            elif _local(child.tag).lower() == "value":
                value = child
        if not key or value is None:
            raise InvalidArgument("a rule's key-value pair needs a <Key> and a <Value>.")
        out[key] = _read_value(key, value)  # names as given
    return out or None


def _child(node: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in node if _local(c.tag) == name), None)


def _text(node: ET.Element, name: str) -> str | None:
    found = _child(node, name)
    return None if found is None else (found.text or "")


def _type(node: ET.Element) -> str:
    return next((v for k, v in node.attrib.items() if _local(k) == "type"), "").rpartition(
        ":")[2]


def _read_filter(node: ET.Element | None) -> RuleFilter:
    if node is None:
        return TrueRuleFilter()
    kind = _type(node)
    if kind == "TrueFilter":
        return TrueRuleFilter()
    if kind == "FalseFilter":
        return FalseRuleFilter()
    if kind == "SqlFilter":
        return SqlRuleFilter(_text(node, "SqlExpression") or "",
                             _read_pairs(_child(node, "Parameters")))
    if kind == "CorrelationFilter":
        fields = {field: _text(node, element) for element, field in _CORRELATION}
        return CorrelationRuleFilter(
            **{k: v for k, v in fields.items() if v is not None},
            properties=_read_pairs(_child(node, "Properties")),
        )
    raise InvalidArgument(f"unknown rule filter type {kind[:40]!r}; use SqlFilter, "
                          "CorrelationFilter, TrueFilter or FalseFilter.")


def _read_action(node: ET.Element | None) -> SqlRuleAction | None:
    if node is None or _type(node) in ("EmptyRuleAction", ""):
        return None
    if _type(node) != "SqlRuleAction":
        raise InvalidArgument(f"unknown rule action type {_type(node)[:40]!r}; use "
                              "SqlRuleAction or EmptyRuleAction.")
    return SqlRuleAction(_text(node, "SqlExpression") or "",
                         _read_pairs(_child(node, "Parameters")))


def read_description(node: ET.Element, name: str | None = None) -> RuleProperties:
    """A rule from its ``<RuleDescription>`` element (named by ``<Name>`` or ``name``)."""
    created = _text(node, "CreatedAt")
    return RuleProperties(
        name or (_text(node, "Name") or "").strip(),
        _read_filter(_child(node, "Filter")),
        _read_action(_child(node, "Action")),
        None if not created else _parse_value("CreatedAt", "datetime", created),
    )


def _from_entry(entry: ET.Element) -> RuleProperties:
    title = _text(entry, "title")
    content = _child(entry, "content")
    description = None if content is None else _child(content, "RuleDescription")
    if description is None:
        raise InvalidArgument("the entry has no <content> with a <RuleDescription>.")
    rule = read_description(description)
    if not rule.name and title:
        rule.name = title.strip()
    return rule


def parse_rule(data: bytes) -> RuleProperties:
    """A rule from an Atom entry (a PUT body or a GET answer)."""
    root = _parse(data)
    if _local(root.tag) != "entry":
        raise InvalidArgument(f"expected an Atom <entry>, not <{_local(root.tag)[:60]}>.")
    return _from_entry(root)


def parse_rules(data: bytes) -> list[RuleProperties]:
    """The rules of an Atom feed."""
    root = _parse(data)
    if _local(root.tag) != "feed":
        raise InvalidArgument(f"expected an Atom feed, not <{_local(root.tag)[:60]}>.")
    return [_from_entry(child) for child in root if _local(child.tag) == "entry"]

