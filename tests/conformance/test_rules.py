"""Conformance (issue 14): subscription rules route a topic's messages, on every backend.

A subscription takes a message when one of its rules matches; matching rules without an
action yield one copy between them, each matching rule with an action a copy of its own
(Service Bus's documented behaviour); a copy's changes never reach another subscription.
"""

from __future__ import annotations

import asyncio
import datetime

import pytest

import aiosb
from aiosb import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    Message,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
    errors,
)

pytestmark = pytest.mark.looptime


async def drain(ns: aiosb.Namespace, entity: str) -> list[aiosb.ReceivedMessage]:
    """Receive and complete everything there is now."""
    out = []
    async with ns.receiver(entity) as receiver:
        while batch := await receiver.receive(max_messages=100, max_wait=0):
            await receiver.complete(batch)
            out += batch
    return out


def bodies(messages: list[aiosb.ReceivedMessage]) -> list[bytes]:
    return sorted(m.body for m in messages)


async def send(ns: aiosb.Namespace, topic: str, *messages: Message) -> None:
    async with ns.sender(topic) as sender:
        await sender.send(list(messages))


async def test_a_new_subscription_takes_everything_through_its_default_rule(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "all")
    (rule,) = await ns.list_rules("t", "all")
    assert rule.name == "$Default" and isinstance(rule.filter, TrueRuleFilter)
    assert rule.action is None
    await send(ns, "t", Message(b"a"), Message(b"b"))
    assert bodies(await drain(ns, "t/subscriptions/all")) == [b"a", b"b"]


async def test_sql_filters_route_by_property(ns):
    await ns.create_topic("orders")
    for region in ("eu", "us"):
        await ns.create_subscription("orders", region)
        await ns.delete_rule("orders", region, "$Default")
        await ns.create_rule("orders", region, "by-region",
                             filter=SqlRuleFilter("region = @r", {"r": region}))
    await send(
        ns, "orders",
        Message(b"eu-1", application_properties={"region": "eu"}),
        Message(b"us-1", application_properties={"region": "us"}),
        Message(b"none"),
    )
    assert bodies(await drain(ns, "orders/subscriptions/eu")) == [b"eu-1"]
    assert bodies(await drain(ns, "orders/subscriptions/us")) == [b"us-1"]


async def test_system_properties_and_correlation_filters(ns):
    await ns.create_topic("t")
    await ns.create_subscription(
        "t", "created",
        default_rule=RuleProperties("label", SqlRuleFilter("sys.Label = 'order.created'")),
    )
    await ns.create_subscription(
        "t", "corr",
        default_rule=RuleProperties(
            "c", CorrelationRuleFilter(correlation_id="c-1", properties={"kind": "x"})
        ),
    )
    assert [r.name for r in await ns.list_rules("t", "created")] == ["label"]
    await send(
        ns, "t",
        Message(b"created", subject="order.created"),
        Message(b"shipped", subject="order.shipped", correlation_id="c-1"),
        Message(b"both", correlation_id="c-1", application_properties={"kind": "x"}),
        Message(b"wrong-value", correlation_id="c-1", application_properties={"kind": "y"}),
    )
    assert bodies(await drain(ns, "t/subscriptions/created")) == [b"created"]
    assert bodies(await drain(ns, "t/subscriptions/corr")) == [b"both"]


async def test_a_subscription_without_a_matching_rule_takes_nothing(ns):
    await ns.create_topic("t")
    await ns.create_subscription(
        "t", "never", default_rule=RuleProperties("no", FalseRuleFilter())
    )
    await ns.create_subscription("t", "empty")
    await ns.delete_rule("t", "empty", "$Default")
    assert await ns.list_rules("t", "empty") == []
    await send(ns, "t", Message(b"x"))
    assert await drain(ns, "t/subscriptions/never") == []
    assert await drain(ns, "t/subscriptions/empty") == []


async def test_each_matching_rule_with_an_action_yields_its_own_copy(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")  # $Default: one plain copy
    await ns.create_rule("t", "s", "also-plain", filter=SqlRuleFilter("1=1"))
    await ns.create_rule("t", "s", "stamp", filter=SqlRuleFilter("n > 1"),
                         action=SqlRuleAction("SET stamped = 'yes'; SET sys.Label = 'big'"))
    await ns.create_rule("t", "s", "other", filter=SqlRuleFilter("n > 5"),
                         action=SqlRuleAction("SET n = n * 10; REMOVE tmp"))
    await ns.create_subscription("t", "untouched")
    await send(ns, "t", Message(b"m", application_properties={"n": 7, "tmp": True}))
    copies = await drain(ns, "t/subscriptions/s")
    assert len(copies) == 3  # plain rules: one copy; each action: its own
    props = sorted((m.subject or "", sorted(m.application_properties.items())) for m in copies)
    assert props == [  # an action's copy names its rule in RuleName, as Service Bus's does
        ("", [("RuleName", "other"), ("n", 70)]),
        ("", [("n", 7), ("tmp", True)]),
        ("big", [("RuleName", "stamp"), ("n", 7), ("stamped", "yes"), ("tmp", True)]),
    ]
    (other,) = await drain(ns, "t/subscriptions/untouched")
    assert other.application_properties == {"n": 7, "tmp": True} and other.subject is None


async def test_a_rule_that_does_not_parse_is_refused_and_nothing_changes(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    with pytest.raises(errors.InvalidArgument, match="column"):
        await ns.create_rule("t", "s", "bad", filter=SqlRuleFilter("region = = 'eu'"))
    with pytest.raises(errors.InvalidArgument):
        await ns.create_rule("t", "s", "bad-action", action=SqlRuleAction("SET = 1"))
    assert [r.name for r in await ns.list_rules("t", "s")] == ["$Default"]
    with pytest.raises(errors.InvalidArgument):
        await ns.create_subscription(
            "t", "s2", default_rule=RuleProperties("r", SqlRuleFilter("(("))
        )
    assert not await ns.subscription_exists("t", "s2")


async def test_rules_are_managed_like_entities(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    made = await ns.create_rule("t", "s", "r1", filter=SqlRuleFilter("a = 1"))
    assert made.name == "r1" and made.created_at_utc is not None
    with pytest.raises(errors.EntityAlreadyExists):
        await ns.create_rule("t", "s", "r1")
    got = await ns.get_rule("t", "s", "r1")
    assert isinstance(got.filter, SqlRuleFilter) and got.filter.sql_expression == "a = 1"
    changed = await ns.update_rule("t", "s", "r1", filter=CorrelationRuleFilter(label="l"),
                                   action=SqlRuleAction("SET b = 2"))
    assert isinstance(changed.filter, CorrelationRuleFilter) and changed.filter.label == "l"
    assert changed.action is not None and changed.action.sql_expression == "SET b = 2"
    again = await ns.get_rule("t", "s", "r1")
    assert again.filter == changed.filter and again.action == changed.action
    assert [r.name for r in await ns.list_rules("t", "s")] == ["$Default", "r1"]
    await ns.delete_rule("t", "s", "r1")
    with pytest.raises(errors.EntityNotFound):
        await ns.get_rule("t", "s", "r1")
    with pytest.raises(errors.EntityNotFound):
        await ns.delete_rule("t", "s", "r1")
    with pytest.raises(errors.EntityNotFound):
        await ns.list_rules("t", "nope")


async def test_parameters_and_correlation_properties_keep_their_types(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    params = {"i": 5, "f": 2.5, "s": "x", "b": True}
    await ns.create_rule("t", "s", "p", filter=SqlRuleFilter("i = @i AND s = @s", params))
    await ns.create_rule("t", "s", "c", filter=CorrelationRuleFilter(properties=params))
    rules = {r.name: r for r in await ns.list_rules("t", "s")}
    assert rules["p"].filter == SqlRuleFilter("i = @i AND s = @s", params)
    assert rules["c"].filter == CorrelationRuleFilter(properties=params)


async def test_parameter_names_come_back_as_given_with_their_at_or_without(ns):
    """Issue 34: ``{"@c": "red"}`` comes back as ``{"@c": "red"}`` (it came back as
    ``{"c": "red"}`` through aiosb's own API, with the @ over the administration
    client), and a name given without @ stays without; both route alike."""
    await ns.create_topic("t")
    await ns.create_subscription("t", "at")
    await ns.create_subscription("t", "bare")
    await ns.create_rule("t", "at", "red", filter=SqlRuleFilter("c = @c", {"@c": "red"}),
                         action=SqlRuleAction("SET seen = @s", {"@s": "at"}))
    await ns.create_rule("t", "bare", "red", filter=SqlRuleFilter("c = @c", {"c": "red"}))
    for sub in ("at", "bare"):
        await ns.delete_rule("t", sub, "$Default")
    rules = {(sub, r.name): r for sub in ("at", "bare") for r in await ns.list_rules("t", sub)}
    at, bare = rules["at", "red"], rules["bare", "red"]
    assert isinstance(at.filter, SqlRuleFilter) and isinstance(bare.filter, SqlRuleFilter)
    assert at.filter.parameters == {"@c": "red"}
    assert at.action is not None and at.action.parameters == {"@s": "at"}
    assert bare.filter.parameters == {"c": "red"}
    async with ns.sender("t") as sender:
        await sender.send([Message(b"red", application_properties={"c": "red"}),
                           Message(b"blue", application_properties={"c": "blue"})])
    got = await drain(ns, "t/subscriptions/at")
    assert [(m.body, m.application_properties["seen"]) for m in got] == [(b"red", "at")]
    assert bodies(await drain(ns, "t/subscriptions/bare")) == [b"red"]


async def test_a_filter_that_fails_dead_letters_or_skips_as_the_subscription_says(ns):
    """A type mismatch in a SQL filter is an evaluation error: with
    dead_lettering_on_filter_evaluation_exceptions (the default) the message goes to that
    subscription's dead-letter queue, reason FilterException; without it, it is skipped.
    Other subscriptions are not affected."""
    await ns.create_topic("t")
    mismatch = RuleProperties("cmp", SqlRuleFilter("region > 5"))
    await ns.create_subscription("t", "dlq", default_rule=mismatch)
    await ns.create_subscription("t", "skip", default_rule=mismatch,
                                 dead_lettering_on_filter_evaluation_exceptions=False)
    await ns.create_subscription("t", "all")
    await send(ns, "t", Message(b"m", application_properties={"region": "eu"}),
               Message(b"fine", application_properties={"region": 9}))
    assert bodies(await drain(ns, "t/subscriptions/dlq")) == [b"fine"]
    (dead,) = await drain(ns, "t/subscriptions/dlq/$DeadLetterQueue")
    assert dead.body == b"m" and dead.dead_letter_reason == "FilterException"
    assert dead.dead_letter_error_description
    assert bodies(await drain(ns, "t/subscriptions/skip")) == [b"fine"]
    assert await drain(ns, "t/subscriptions/skip/$DeadLetterQueue") == []
    assert bodies(await drain(ns, "t/subscriptions/all")) == [b"fine", b"m"]


async def test_an_action_that_fails_touches_its_subscription_only(ns):
    """A failing action (integer division by zero) dead-letters that message in that
    subscription; the batch is accepted, every other subscription has every message,
    and nothing is delivered twice."""
    await ns.create_topic("t")
    await ns.create_subscription("t", "a")
    await ns.create_subscription(
        "t", "b", default_rule=RuleProperties(
            "bad", SqlRuleFilter("EXISTS(d)"), SqlRuleAction("SET x = d / 0"))
    )
    await send(ns, "t", Message(b"m0"), Message(b"m1", application_properties={"d": 1}),
               Message(b"m2"))
    assert bodies(await drain(ns, "t/subscriptions/a")) == [b"m0", b"m1", b"m2"]
    assert await drain(ns, "t/subscriptions/b") == []
    (dead,) = await drain(ns, "t/subscriptions/b/$DeadLetterQueue")
    assert dead.body == b"m1" and dead.dead_letter_reason == "FilterException"


async def test_a_subscription_made_with_a_rule_never_takes_what_the_rule_refuses(ns):
    """The first rule is in force from the first instant (one request over HTTP, with
    <DefaultRuleDescription>): a message sent while the subscription is being made is
    not taken through a $Default it never had."""
    await ns.create_topic("t")

    async def keep_sending() -> None:
        async with ns.sender("t") as sender:
            for i in range(20):
                await sender.send(Message(f"{i}".encode()))
                await asyncio.sleep(0)

    sending = asyncio.create_task(keep_sending())
    await ns.create_subscription("t", "never",
                                 default_rule=RuleProperties("never", FalseRuleFilter()))
    await sending
    assert await drain(ns, "t/subscriptions/never") == []
    assert [r.name for r in await ns.list_rules("t", "never")] == ["never"]


async def test_rules_handed_out_are_copies(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    rule = await ns.get_rule("t", "s", "$Default")
    rule.name, rule.filter = "changed", FalseRuleFilter()
    (listed,) = await ns.list_rules("t", "s")
    listed.filter = FalseRuleFilter()
    (again,) = await ns.list_rules("t", "s")
    assert again.name == "$Default" and isinstance(again.filter, TrueRuleFilter)


async def test_names_that_look_like_rule_paths_are_still_what_they_say(ns):
    await ns.create_topic("app/rules/t")
    await ns.create_subscription("app/rules/t", "rules")
    assert [r.name for r in await ns.list_rules("app/rules/t", "rules")] == ["$Default"]
    await ns.create_rule("app/rules/t", "rules", "rules")
    assert (await ns.get_rule("app/rules/t", "rules", "rules")).name == "rules"
    for bad in ("", "a/b", None):
        with pytest.raises(errors.InvalidArgument):
            await ns.get_rule("app/rules/t", "rules", bad)
    with pytest.raises(errors.InvalidArgument, match="renamed"):
        await ns.update_rule("app/rules/t", "rules", "rules", name="other")
    with pytest.raises(errors.InvalidArgument, match="time zone"):
        SqlRuleFilter("a = @t", {"t": datetime.datetime(2024, 1, 1)})


@pytest.mark.parametrize("name", [".", ".."])
async def test_a_rule_named_dot_or_dot_dot_is_refused_and_its_subscription_stays(ns, name):
    """Over HTTP ``.../Rules/..`` resolved to the subscription's own address: deleting
    such a 'rule' deleted the subscription."""
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    for attempt in (ns.delete_rule("t", "s", name), ns.create_rule("t", "s", name),
                    ns.get_rule("t", "s", name)):
        with pytest.raises(errors.InvalidArgument, match=r"cannot be named '\.' or '\.\.'"):
            await attempt
    assert [r.name for r in await ns.list_rules("t", "s")] == ["$Default"]
