"""Conformance: listings hold every entity, in name order, past one page of 100."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.looptime


def _ours(listed, names, backend):
    """The names of ``listed`` that this test created (a real namespace may hold others),
    in the order listed; the emulator lists in name order, a real namespace in its own."""
    found = [e.name for e in listed if e.name in names]
    return found if backend != "amqp" else sorted(found, key=str.lower)


async def test_list_queues_and_topics_go_past_a_page_in_name_order(ns, backend):
    """Service Bus lists 100 entities a page; a client must ask for every page."""
    names = [f"q{i:03d}" for i in range(104, -1, -1)]  # created out of order: 105 of them
    await asyncio.gather(*(ns.create_queue(name) for name in names))
    await ns.create_topic("Events")
    await ns.create_topic("alerts")

    assert _ours(await ns.list_queues(), names, backend) == sorted(names)
    topics = _ours(await ns.list_topics(), {"Events", "alerts"}, backend)
    assert topics == ["alerts", "Events"]  # case-insensitive order


async def test_list_subscriptions_goes_past_a_page(ns, backend):
    await ns.create_topic("events")
    names = [f"s{i:03d}" for i in range(101)]
    await asyncio.gather(*(ns.create_subscription("events", name) for name in names))
    subs = await ns.list_subscriptions("events")
    assert _ours(subs, names, backend) == names
    assert {s.topic_name for s in subs} == {"events"}
