"""Subscription rules: filters that choose which messages of a topic a subscription takes,
and actions that change the copy it takes (names and fields of
``azure.servicebus.management``).

A subscription takes a message when at least one of its rules' filters matches. A
matching rule with an action yields a copy of its own, with the action applied; the
matching rules without one yield one copy between them. A new subscription has the rule
``$Default`` with a :class:`TrueRuleFilter`, unless it is created with another first
rule. SQL filters and actions are compiled when the rule is made (:mod:`aiosb.sql`), so
a rule that does not parse is refused then, and nothing is created.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument
from .message import PropertyValue

__all__ = [
    "DEFAULT_RULE",
    "CorrelationRuleFilter",
    "FalseRuleFilter",
    "RuleFilter",
    "RuleProperties",
    "SqlRuleAction",
    "SqlRuleFilter",
    "TrueRuleFilter",
    "rule_path",
    "split_rule_path",
]

#: The name of the rule a subscription is created with.
DEFAULT_RULE = "$Default"
_MAX_NAME = 50
_MAX_SQL = 1024  # characters of a filter or action expression (Service Bus's limit)
_MAX_PARAMETERS = 64


def _parameters(what: str, parameters: Any) -> dict[str, PropertyValue] | None:
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        raise InvalidArgument(f"the parameters of a {what} must be a dict, not {parameters!r:.60}.")
    if len(parameters) > _MAX_PARAMETERS:
        raise InvalidArgument(f"a {what} takes at most {_MAX_PARAMETERS} parameters.")
    out: dict[str, PropertyValue] = {}
    for name, value in parameters.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a {what} parameter name must be text, not {name!r:.40}.")
        if not isinstance(value, (str, int, float, bool, _dt.datetime, _dt.timedelta)):
            raise InvalidArgument(
                f"parameter {name!r} of a {what} is a {type(value).__name__}; a parameter "
                "is text, a number, a boolean, a datetime or a timedelta."
            )
        if isinstance(value, _dt.datetime) and value.tzinfo is None:
            raise InvalidArgument(
                f"parameter {name!r} of a {what} is a datetime without a time zone; give "
                "it one (datetime.UTC), so that it means the same instant everywhere."
            )
        if isinstance(value, int) and not isinstance(value, bool) and not (
            -(2**63) <= value < 2**63
        ):
            raise InvalidArgument(f"parameter {name!r} of a {what} is beyond a 64-bit integer.")
        if name.removeprefix("@") in {n.removeprefix("@") for n in out}:
            raise InvalidArgument(f"the {what} names parameter {name!r} twice (with and "
                                  "without @).")
        out[name] = value  # as given (``@p`` or ``p``), as Service Bus keeps it (#34)
    return out


def _sql(what: str, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"a {what} needs its SQL expression (text), not {text!r:.60}.")
    if len(text) > _MAX_SQL:
        raise InvalidArgument(f"the {what} is {len(text)} characters; at most {_MAX_SQL}.")
    return text


@dataclass(frozen=True)
class SqlRuleFilter:
    """A filter in Service Bus's SQL language, e.g. ``"region = 'eu' AND qty > @min"``.

    Args:
        sql_expression: The condition; a message matches when it is TRUE (a missing
            property makes a comparison unknown, which does not match).
        parameters: Values for the ``@name`` parameters of the expression.
    """

    sql_expression: str
    parameters: dict[str, PropertyValue] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sql_expression", _sql("SQL filter", self.sql_expression))
        object.__setattr__(self, "parameters", _parameters("SQL filter", self.parameters))


@dataclass(frozen=True)
class TrueRuleFilter:
    """A filter every message matches (``1=1``)."""

    @property
    def sql_expression(self) -> str:
        return "1=1"


@dataclass(frozen=True)
class FalseRuleFilter:
    """A filter no message matches (``1=0``)."""

    @property
    def sql_expression(self) -> str:
        return "1=0"


@dataclass(frozen=True)
class CorrelationRuleFilter:
    """A filter on exact values of system and application properties: a message matches
    when every field given here equals the message's (``label`` is the subject) and
    every entry of ``properties`` equals that application property. Cheaper than SQL.
    """

    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    label: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: dict[str, PropertyValue] | None = None

    def __post_init__(self) -> None:
        for name in CORRELATION_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidArgument(
                    f"{name} of a correlation filter must be text, not {value!r:.60}."
                )
        object.__setattr__(
            self, "properties", _parameters("correlation filter", self.properties) or None
        )


#: The fields of a correlation filter, and the message field each compares with.
CORRELATION_FIELDS = {
    "correlation_id": "correlation_id",
    "message_id": "message_id",
    "to": "to",
    "reply_to": "reply_to",
    "label": "subject",
    "session_id": "session_id",
    "reply_to_session_id": "reply_to_session_id",
    "content_type": "content_type",
}

RuleFilter = SqlRuleFilter | CorrelationRuleFilter | TrueRuleFilter | FalseRuleFilter


@dataclass(frozen=True)
class SqlRuleAction:
    """Changes made to the copy a rule yields: ``SET`` and ``REMOVE`` statements, e.g.
    ``"SET sys.Label = 'eu-order'; REMOVE internal"``.

    Args:
        sql_expression: The statements.
        parameters: Values for the ``@name`` parameters of the statements.
    """

    sql_expression: str
    parameters: dict[str, PropertyValue] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sql_expression", _sql("SQL action", self.sql_expression))
        object.__setattr__(self, "parameters", _parameters("SQL action", self.parameters))


@dataclass
class RuleProperties:
    """A rule of a subscription.

    Args:
        name: The rule's name (at most 50 characters), unique in its subscription.
        filter: Which messages it takes (a :class:`TrueRuleFilter` by default).
        action: What it changes in the copy it yields, if anything.
        created_at_utc: When it was made (set by the broker).
    """

    name: str
    filter: RuleFilter = field(default_factory=TrueRuleFilter)
    action: SqlRuleAction | None = None
    created_at_utc: _dt.datetime | None = None

    def checked(self) -> RuleProperties:
        """This rule, its name and parts checked.

        Raises:
            InvalidArgument: A name that is empty, too long or has a character Service
                Bus refuses; a filter or action of another type.
        """
        name = self.name
        if not isinstance(name, str) or not name or len(name) > _MAX_NAME:
            raise InvalidArgument(
                f"a rule name is 1 to {_MAX_NAME} characters, not {name!r:.60}."
            )
        if any(c in name for c in "/\\?#%") or not name.isprintable():
            raise InvalidArgument(
                f"rule name {name!r} has a character a rule name cannot have (/ \\ ? # %)."
            )
        if name in (".", ".."):  # a URL resolves it away: the rule's address would be
            raise InvalidArgument(  # its subscription's (deleting the rule deleted that)
                f"rule name {name!r} is not valid: a rule cannot be named '.' or '..'."
            )
        if not isinstance(
            self.filter, (SqlRuleFilter, CorrelationRuleFilter, TrueRuleFilter, FalseRuleFilter)
        ):
            raise InvalidArgument(
                f"a rule's filter is a SqlRuleFilter, CorrelationRuleFilter, TrueRuleFilter "
                f"or FalseRuleFilter, not {self.filter!r:.60}."
            )
        if self.action is not None and not isinstance(self.action, SqlRuleAction):
            raise InvalidArgument(
                f"a rule's action is a SqlRuleAction or None, not {self.action!r:.60}."
            )
        return self


def rule_path(topic: str, subscription: str, name: str | None = None) -> str:
    """``topic/subscriptions/sub/rules[/name]``: where a rule (or the rules) of a
    subscription live, as management requests and the REST protocol name them."""
    base = f"{topic}/subscriptions/{subscription}/rules"
    return base if name is None else f"{base}/{name}"


def split_rule_path(path: str) -> tuple[str, str | None]:
    """The subscription path and rule name (``None`` for the rules) of a rule path.

    Raises:
        InvalidArgument: Not a path :func:`rule_path` makes.
    """
    # From the right: a topic's name may hold "/" (and the word "rules"); a
    # subscription's or a rule's never holds "/".
    parts = path.split("/")
    lower = [p.lower() for p in parts]
    if len(parts) >= 5 and lower[-2] == "rules" and lower[-4] == "subscriptions":
        return "/".join(parts[:-2]), parts[-1]
    if len(parts) >= 4 and lower[-1] == "rules" and lower[-3] == "subscriptions":
        return "/".join(parts[:-1]), None
    raise InvalidArgument(f"{path!r} is not a rule path (topic/subscriptions/sub/rules/name).")
