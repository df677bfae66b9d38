"""Rule descriptions as the ``$management`` rule operations carry them (add-rule,
enumerate-rules): the request's ``rule-description`` map to a
:class:`~aiosb.rules.RuleProperties`, and a rule to the described list an
enumerate-rules reply holds.

The request map (``com.microsoft:add-rule``): ``sql-filter`` (``expression``, optional
``parameters``) or ``correlation-filter`` (``correlation-id``, ``message-id``, ``to``,
``reply-to``, ``label``, ``session-id``, ``reply-to-session-id``, ``content-type``,
``properties``), and an optional ``sql-rule-action`` (``expression``, ``parameters``).

The reply's described types, with the codes the SDKs compare (azure-sdk-for-js
``descriptorCodes``, azure-sdk-for-net ``Amqp*Codec``): a rule description
``0x0000013700000004`` is the list [filter, action, name, created-at]; a filter is a SQL
filter ``0x0000001370000006``, true ``...07``, false ``...08`` ([expression,
compatibility-level]) or a correlation filter ``...09`` (its nine fields in the order
above); an action is empty ``0x0000013700000005`` ([]) or SQL ``...06`` ([expression,
compatibility-level]). The filter codes have one hex digit fewer than the rule and
action codes: that is how the service and every SDK spell them.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ...errors import InvalidArgument
from ...rules import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from ._types import Described, Int, Symbol, ULong

__all__ = [
    "CORRELATION_FILTER",
    "EMPTY_ACTION",
    "FALSE_FILTER",
    "RULE_DESCRIPTION",
    "SQL_ACTION",
    "SQL_FILTER",
    "TRUE_FILTER",
    "describe",
    "rule_of",
]

RULE_DESCRIPTION = 0x0000013700000004
EMPTY_ACTION = 0x0000013700000005
SQL_ACTION = 0x0000013700000006
SQL_FILTER = 0x0000001370000006
TRUE_FILTER = 0x0000001370000007
FALSE_FILTER = 0x0000001370000008
CORRELATION_FILTER = 0x0000001370000009
_COMPATIBILITY = Int(20)  # the SQL compatibility level the service reports
_TIMESPAN = "com.microsoft:timespan"
#: The correlation filter's map keys, in the order of its described list, and the field
#: of :class:`~aiosb.rules.CorrelationRuleFilter` each one is.
_CORRELATION = (
    ("correlation-id", "correlation_id"),
    ("message-id", "message_id"),
    ("to", "to"),
    ("reply-to", "reply_to"),
    ("label", "label"),
    ("session-id", "session_id"),
    ("reply-to-session-id", "reply_to_session_id"),
    ("content-type", "content_type"),
)


def rule_of(name: Any, description: Any) -> RuleProperties:
    """The rule an add-rule request describes.

    Raises:
        InvalidArgument: No name, no filter or two, a filter or action that is not a map,
            a correlation filter that names nothing (what the service refuses too).
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument("add-rule needs the rule-name.")
    if not isinstance(description, dict):
        raise InvalidArgument("add-rule needs the rule-description map.")
    sql = description.get("sql-filter")
    correlation = description.get("correlation-filter")
    if (sql is None) == (correlation is None):
        raise InvalidArgument(
            "a rule-description has one of sql-filter and correlation-filter, not "
            f"{'both' if sql is not None else 'neither'}."
        )
    rule_filter: RuleFilter
    if sql is not None:
        expression, parameters = _sql("sql-filter", sql)
        rule_filter = SqlRuleFilter(expression, parameters)
    else:
        rule_filter = _correlation(correlation)
    action = description.get("sql-rule-action")
    sql_action = None
    if action is not None:
        sql_action = SqlRuleAction(*_sql("sql-rule-action", action))
    return RuleProperties(name, rule_filter, sql_action).checked()


def _sql(what: str, part: Any) -> tuple[Any, dict[str, Any] | None]:
    if not isinstance(part, dict):
        raise InvalidArgument(f"the {what} of a rule-description must be a map.")
    parameters = part.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidArgument(f"the parameters of the {what} must be a map.")
    return part.get("expression"), _values(parameters)


def _correlation(part: Any) -> CorrelationRuleFilter:
    if not isinstance(part, dict):
        raise InvalidArgument("the correlation-filter of a rule-description must be a map.")
    fields = {field: part.get(key) for key, field in _CORRELATION}
    properties = part.get("properties")
    if properties is not None and not isinstance(properties, dict):
        raise InvalidArgument("the properties of a correlation-filter must be a map.")
    if all(v is None for v in fields.values()) and not properties:
        raise InvalidArgument("a correlation-filter needs at least one property to match.")
    return CorrelationRuleFilter(**fields, properties=_values(properties))


def _values(found: dict[Any, Any] | None) -> dict[str, Any] | None:
    """Parameters or properties as the rules vocabulary has them (a timespan as a
    timedelta, a symbol as text); the vocabulary refuses what it cannot hold."""
    if not found:
        return None
    out: dict[str, Any] = {}
    for key, value in found.items():
        if isinstance(value, Described) and value.descriptor == _TIMESPAN:
            value = _dt.timedelta(microseconds=int(value.value) // 10)
        elif type(value) is Symbol:
            value = str(value)
        out[str(key)] = value
    return out


def describe(rule: RuleProperties) -> Described:
    """``rule`` as an enumerate-rules reply carries it (a rule-description)."""
    rule_filter = rule.filter
    filter_part: Described
    if isinstance(rule_filter, TrueRuleFilter):
        filter_part = Described(ULong(TRUE_FILTER), ["1=1", _COMPATIBILITY])
    elif isinstance(rule_filter, FalseRuleFilter):
        filter_part = Described(ULong(FALSE_FILTER), ["1=0", _COMPATIBILITY])
    elif isinstance(rule_filter, SqlRuleFilter):
        filter_part = Described(ULong(SQL_FILTER), [rule_filter.sql_expression, _COMPATIBILITY])
    else:
        filter_part = Described(ULong(CORRELATION_FILTER), [
            *(getattr(rule_filter, field) for _, field in _CORRELATION),
            _wire(rule_filter.properties or {}),
        ])
    if rule.action is None:
        action_part = Described(ULong(EMPTY_ACTION), [])
    else:
        action_part = Described(ULong(SQL_ACTION), [rule.action.sql_expression, _COMPATIBILITY])
    return Described(ULong(RULE_DESCRIPTION),
                     [filter_part, action_part, rule.name, rule.created_at_utc])


def _wire(properties: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in properties.items():
        if isinstance(value, _dt.timedelta):
            value = Described(Symbol(_TIMESPAN), value // _dt.timedelta(microseconds=1) * 10)
        out[key] = value
    return out
