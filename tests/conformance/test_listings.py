"""Conformance: listings hold every entity, in name order, past one page of 100."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.looptime


async def test_list_queues_and_topics_go_past_a_page_in_name_order(ns):
    """Service Bus lists 100 entities a page; a client must ask for every page."""
    names = [f"q{i:03d}" for i in range(104, -1, -1)]  # created out of order: 105 of them
    await asyncio.gather(*(ns.create_queue(name) for name in names))
    await ns.create_topic("Events")
    await ns.create_topic("alerts")

    listed = [q.name for q in await ns.list_queues()]
    assert listed == sorted(names)
    assert [t.name for t in await ns.list_topics()] == ["alerts", "Events"]  # case-insensitive


async def test_list_subscriptions_goes_past_a_page(ns):
    await ns.create_topic("events")
    names = [f"s{i:03d}" for i in range(101)]
    await asyncio.gather(*(ns.create_subscription("events", name) for name in names))
    subs = await ns.list_subscriptions("events")
    assert [s.name for s in subs] == names
    assert {s.topic_name for s in subs} == {"events"}
