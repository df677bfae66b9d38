"""Issue 14: rules in the Atom management protocol, judged by the official SDK's own
serializer and parser (azure.servicebus.management): what the SDK PUTs, aiosb's server
reads; what aiosb's server answers, the SDK reads, with parameter types intact."""

from __future__ import annotations

import datetime as _dt
import xml.etree.ElementTree as ET

import pytest

from aiosb import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from aiosb.wire.atom_rules import parse_rule, parse_rules, rule_entry_xml, rules_feed_xml

m = pytest.importorskip("azure.servicebus.management")
from azure.servicebus.management import _utils  # noqa: E402
from azure.servicebus.management._generated.models import (  # noqa: E402
    CreateRuleBody,
    CreateRuleBodyContent,
    RuleDescriptionEntry,
)

PARAMS = {"s": "eu", "i": 5, "big": 2**40, "f": 2.5, "b": True,
          "t": _dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=_dt.UTC),
          "d": _dt.timedelta(minutes=3)}

CASES = [
    RuleProperties("sql", SqlRuleFilter("region = @s AND qty > @i", PARAMS)),
    RuleProperties("act", SqlRuleFilter("1=1"), SqlRuleAction("SET a = @s; REMOVE b", {"s": "x"})),
    RuleProperties("corr", CorrelationRuleFilter(label="l", correlation_id="c", to="t",
                                                 reply_to="r", message_id="m", session_id="s",
                                                 reply_to_session_id="rs",
                                                 content_type="application/json",
                                                 properties={"k": 5, "n": "x", "ok": False})),
    RuleProperties("$Default", TrueRuleFilter()),
    RuleProperties("never", FalseRuleFilter()),
]


def sdk_rule(rule: RuleProperties):
    """The SDK's RuleProperties for ``rule`` (what a user of the SDK would build)."""
    f = rule.filter
    if isinstance(f, SqlRuleFilter):
        sdk_filter = m.SqlRuleFilter(f.sql_expression, dict(f.parameters or {}))  # as given
    elif isinstance(f, CorrelationRuleFilter):
        fields = {k: getattr(f, k) for k in ("correlation_id", "message_id", "to", "reply_to",
                                             "label", "session_id", "reply_to_session_id",
                                             "content_type")}
        sdk_filter = m.CorrelationRuleFilter(**fields, properties=f.properties)
    elif isinstance(f, TrueRuleFilter):
        sdk_filter = m.TrueRuleFilter()
    else:
        sdk_filter = m.FalseRuleFilter()
    action = None
    if rule.action is not None:
        action = m.SqlRuleAction(rule.action.sql_expression,
                                 dict(rule.action.parameters or {}))
    return m.RuleProperties(rule.name, filter=sdk_filter, action=action, created_at_utc=None)


def sdk_request(rule: RuleProperties) -> bytes:
    """The bytes the SDK PUTs to create ``rule`` (its create_rule, without the network)."""
    sdk = sdk_rule(rule)
    body = CreateRuleBody(content=CreateRuleBodyContent(rule_description=sdk._to_internal_entity()))
    element = body.serialize(is_xml=True)
    _utils.serialize_rule_key_values(element, sdk)
    return ET.tostring(element)


@pytest.mark.parametrize("rule", CASES, ids=lambda r: r.name)
def test_what_the_sdk_puts_is_read_back_exactly(rule):
    assert parse_rule(sdk_request(rule)) == RuleProperties(rule.name, rule.filter, rule.action)


@pytest.mark.parametrize("rule", CASES, ids=lambda r: r.name)
def test_what_the_server_answers_the_sdk_reads(rule):
    created = _dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=_dt.UTC)
    answer = rule_entry_xml(RuleProperties(rule.name, rule.filter, rule.action, created),
                            "http://h/ns/t/subscriptions/s/rules/" + rule.name)
    element = ET.fromstring(answer)
    entry = RuleDescriptionEntry.deserialize(element)
    got = m.RuleProperties._from_internal_entity(rule.name, entry.content.rule_description)
    _utils.deserialize_rule_key_values(element, got)
    expected = sdk_rule(rule)
    assert type(got.filter) is type(expected.filter)
    if isinstance(rule.filter, (SqlRuleFilter, CorrelationRuleFilter)):
        assert vars(got.filter) == vars(expected.filter)
    if rule.action is None:
        assert got.action is None or not getattr(got.action, "sql_expression", None)
    else:
        assert vars(got.action) == vars(expected.action)
    assert got.created_at_utc == created
    # and back through aiosb's own parser
    assert parse_rule(answer) == RuleProperties(rule.name, rule.filter, rule.action, created)


def test_a_feed_lists_every_rule():
    feed = rules_feed_xml(CASES, "http://h/ns/t/subscriptions/s/rules")
    assert [r.name for r in parse_rules(feed)] == [r.name for r in CASES]
    assert parse_rules(feed)[0] == CASES[0]
