"""Issue 14 review: Service Bus's quotas on rules: SQL filters and correlation filters per
topic (counted over its subscriptions), statements per action."""

from __future__ import annotations

import pytest

import aiosb
from aiosb import CorrelationRuleFilter, SqlRuleAction, SqlRuleFilter, errors
from aiosb.emulator import _rules


async def test_a_topic_holds_as_many_sql_filters_as_service_bus_allows(monkeypatch):
    monkeypatch.setattr(_rules, "MAX_SQL_FILTERS", 3)
    monkeypatch.setattr(_rules, "MAX_CORRELATION_FILTERS", 2)
    async with aiosb.connect("memory://quotas") as ns:
        await ns.create_topic("t")
        await ns.create_subscription("t", "a")
        await ns.create_subscription("t", "b")
        await ns.create_rule("t", "a", "s1", filter=SqlRuleFilter("x = 1"))
        await ns.create_rule("t", "b", "s2", filter=SqlRuleFilter("x = 2"))
        await ns.create_rule("t", "b", "s3", filter=SqlRuleFilter("x = 3"))
        with pytest.raises(errors.QuotaExceeded, match="SqlRuleFilter"):
            await ns.create_rule("t", "a", "s4", filter=SqlRuleFilter("x = 4"))
        await ns.create_rule("t", "a", "c1", filter=CorrelationRuleFilter(label="1"))
        await ns.create_rule("t", "b", "c2", filter=CorrelationRuleFilter(label="2"))
        with pytest.raises(errors.QuotaExceeded, match="CorrelationRuleFilter"):
            await ns.create_rule("t", "b", "c3", filter=CorrelationRuleFilter(label="3"))
        await ns.create_rule("t", "a", "all")  # true filters are not counted
        assert len(await ns.list_rules("t", "a")) == 4  # $Default, s1, c1, all


async def test_an_action_holds_at_most_32_statements():
    async with aiosb.connect("memory://quotas2") as ns:
        await ns.create_topic("t")
        await ns.create_subscription("t", "a")
        sets = [f"SET p{i} = {i}" for i in range(33)]
        await ns.create_rule("t", "a", "ok", action=SqlRuleAction("; ".join(sets[:32])))
        with pytest.raises(errors.InvalidArgument, match="32"):
            await ns.create_rule("t", "a", "bad", action=SqlRuleAction("; ".join(sets)))
