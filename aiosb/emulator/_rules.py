"""The rules of a subscription, compiled when they are made, and what they route: which
copies of a message sent to the topic the subscription takes.

A message matches a subscription when at least one rule's filter is TRUE. The matching
rules without an action yield one copy between them; each matching rule with an action
yields a copy of its own with the action applied (Service Bus's documented behaviour).
A filter that fails for a message (a type mismatch in SQL) raises
:class:`~aiosb.sql.FilterEvaluationError`, which the entity turns into a dead letter or
a skip (``dead_lettering_on_filter_evaluation_exceptions``).

Imports: the vocabulary (:mod:`aiosb.rules`, :mod:`aiosb.message`), :mod:`aiosb.sql`
and :mod:`._record`; never the broker.
"""

from __future__ import annotations

import copy
import datetime as _dt
from collections.abc import Callable
from typing import Any

from ..errors import EntityAlreadyExists, EntityNotFound, QuotaExceeded
from ..message import TEXT_FIELDS
from ..rules import (
    CORRELATION_FIELDS,
    DEFAULT_RULE,
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleProperties,
    SqlRuleFilter,
    TrueRuleFilter,
)
from ..sql import Action, Filter, MessageView, compile_action, compile_filter
from ..values import plain
from ._record import INF, _Record, _seconds

__all__ = ["MAX_CORRELATION_FILTERS", "MAX_SQL_FILTERS", "Rules", "check_quota"]

#: The most SQL filters (with their rules) the subscriptions of one topic may have, and
#: the most correlation filters (Service Bus's quotas).
MAX_SQL_FILTERS = 2000
MAX_CORRELATION_FILTERS = 100_000
_EMPTY: dict[str, Any] = {}
_TEXT = frozenset(TEXT_FIELDS)
Match = Callable[[_Record, MessageView], bool]


def view_of(rec: _Record) -> MessageView:
    """The message as filters see it: built once per message, read by every filter of
    every subscription (filters change nothing)."""
    return _view(rec, rec.props or _EMPTY)


def _view(rec: _Record, properties: dict[str, Any]) -> MessageView:
    return MessageView(
        rec, properties, sequence_number=rec.seq, enqueued_time=_utc(rec.enqueued),
        delivery_count=rec.delivery_count, size=rec.size,
    )


def _utc(ts: float) -> _dt.datetime | None:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC) if ts else None


def _correlation(rule_filter: CorrelationRuleFilter) -> Match:
    checks = [
        (field, getattr(rule_filter, name))
        for name, field in CORRELATION_FIELDS.items()
        if getattr(rule_filter, name) is not None
    ]
    wanted = list((rule_filter.properties or {}).items())

    def match(rec: _Record, view: MessageView) -> bool:
        for field, value in checks:
            if getattr(rec, field) != value:
                return False
        if wanted:
            props = rec.props
            if not props:
                return False
            for key, value in wanted:
                if key not in props or props[key] != value or type(plain(props[key])) is not \
                        type(value):  # a Long an AMQP client sent matches an int (#47)
                    return False
        return True

    return match


def _compile(rule: RuleProperties) -> tuple[Match | None, Action | None]:
    """The rule's filter as a predicate (``None``: matches everything) and its action,
    compiled once; a filter or action that does not parse raises InvalidArgument."""
    rule_filter = rule.filter
    match: Match | None
    if isinstance(rule_filter, TrueRuleFilter):
        match = None
    elif isinstance(rule_filter, FalseRuleFilter):
        match = _never
    elif isinstance(rule_filter, CorrelationRuleFilter):
        match = _correlation(rule_filter)
    else:
        assert isinstance(rule_filter, SqlRuleFilter)
        match = _sql_match(compile_filter(rule_filter.sql_expression, rule_filter.parameters))

    action = None
    if rule.action is not None:
        action = compile_action(rule.action.sql_expression, rule.action.parameters)
    return match, action


def _sql_match(sql: Filter) -> Match:
    def match(rec: _Record, view: MessageView) -> bool:
        return sql.matches(view)

    return match


def _never(rec: _Record, view: MessageView) -> bool:
    return False


class Rules:
    """A subscription's rules by name (case-insensitive, as Service Bus names are)."""

    __slots__ = ("_by_name", "_compiled", "_rules", "everything")

    def __init__(self, first: RuleProperties | None, now: float) -> None:
        self._rules: dict[str, RuleProperties] = {}
        #: Each rule compiled once, when it is made (by key): a change to one rule
        #: compiles that rule, not its neighbours.
        self._by_name: dict[str, tuple[str, Match | None, Action | None]] = {}
        self._compiled: list[tuple[str, Match | None, Action | None]] = []
        #: Only rules that take every message as it is: route without evaluating.
        self.everything = False
        self.add(first or RuleProperties(DEFAULT_RULE, TrueRuleFilter()), now)

    def add(self, rule: RuleProperties, now: float) -> RuleProperties:
        """Compile and add ``rule``.

        Raises:
            InvalidArgument: A filter or action that does not parse (nothing is added).
            EntityAlreadyExists: A rule of that name exists.
        """
        rule = rule.checked()
        key = rule.name.lower()
        if key in self._rules:
            raise EntityAlreadyExists(f"The rule {rule.name!r} exists already.")
        compiled = _compile(rule)  # refuses bad SQL before anything changes
        made = RuleProperties(rule.name, rule.filter, rule.action, _utc(now))
        self._rules[key] = made
        self._by_name[key] = (made.name, *compiled)
        self._rebuild()
        return copy.copy(made)

    def replace(self, rule: RuleProperties) -> RuleProperties:
        """Put a changed rule (same name) in force."""
        rule = rule.checked()
        old = self._get(rule.name)
        compiled = _compile(rule)
        made = RuleProperties(old.name, rule.filter, rule.action, old.created_at_utc)
        self._rules[old.name.lower()] = made
        self._by_name[old.name.lower()] = (made.name, *compiled)
        self._rebuild()
        return copy.copy(made)

    def remove(self, name: str) -> None:
        self._get(name)
        del self._rules[name.lower()]
        del self._by_name[name.lower()]
        self._rebuild()

    def get(self, name: str) -> RuleProperties:
        """A copy of the rule (changing it changes nothing here)."""
        return copy.copy(self._get(name))

    def _get(self, name: str) -> RuleProperties:
        found = self._rules.get(name.lower()) if isinstance(name, str) else None
        if found is None:
            raise EntityNotFound(f"The rule {name!r} does not exist.")
        return found

    def listing(self) -> list[RuleProperties]:
        """Copies of the rules, in name order."""
        return [copy.copy(self._rules[k]) for k in sorted(self._rules)]

    def restore(self, rules: list[RuleProperties]) -> None:
        """Replace every rule with ``rules`` (as the journal kept them)."""
        self._rules = {r.name.lower(): r for r in rules}
        self._by_name = {r.name.lower(): (r.name, *_compile(r)) for r in rules}
        self._rebuild()

    def _rebuild(self) -> None:
        self._compiled = list(self._by_name.values())
        self.everything = bool(self._compiled) and all(
            match is None and action is None for _, match, action in self._compiled
        )

    def route(self, rec: _Record, view: MessageView) -> tuple[bool, list[tuple[str, Action]]]:
        """Whether ``rec`` yields a plain copy, and the name and action of each matching
        rule that has one (a copy each).

        Raises:
            FilterEvaluationError: A filter failed for this message.
        """
        plain = False
        actions: list[tuple[str, Action]] = []
        for name, match, action in self._compiled:
            if match is None or match(rec, view):
                if action is None:
                    plain = True
                else:
                    actions.append((name, action))
        return plain, actions


def check_quota(subscriptions: list[Rules], rule: RuleProperties) -> None:
    """Refuse ``rule`` if the topic's subscriptions (their ``Rules``) have as many filters
    of its kind as Service Bus allows a topic.

    Raises:
        QuotaExceeded: Saying which quota.
    """
    kind: type[Any]
    if isinstance(rule.filter, CorrelationRuleFilter):
        kind, limit = CorrelationRuleFilter, MAX_CORRELATION_FILTERS
    elif isinstance(rule.filter, SqlRuleFilter):
        kind, limit = SqlRuleFilter, MAX_SQL_FILTERS
    else:
        return
    held = sum(1 for rules in subscriptions for r in rules._rules.values()
               if isinstance(r.filter, kind))
    if held >= limit:
        raise QuotaExceeded(
            f"the topic's subscriptions have {held} {kind.__name__}s, the most a topic may "
            "have."
        )


def apply_action(rule: str, action: Action, copy: _Record) -> None:
    """Run the action of the rule named ``rule`` on ``copy`` (a clone of its own): its
    properties and the system fields the action sets; the copy carries the rule's name
    in the property ``RuleName``, as Service Bus documents, and its size is counted
    anew.

    Raises:
        FilterEvaluationError: The action failed for this message (``copy`` is then
            half changed: discard it).
    """
    props = copy.props = dict(copy.props) if copy.props else {}
    view = _view(copy, props)
    action.apply(view)
    props["RuleName"] = rule
    for field, value in view.system_changes.items():
        if field in _TEXT:
            setattr(copy, field, value)
        elif field == "time_to_live":  # the subscription stamps the expiry anew
            ttl = value if isinstance(value, _dt.timedelta) else None
            copy.ttl = INF if ttl is None else _seconds(ttl)
            copy.ttl_td = ttl
        elif field == "scheduled_enqueue_time":
            copy.scheduled = value if isinstance(value, _dt.datetime) else None
    copy.size = copy.received("").size
