"""F: auto-delete-on-idle: a topic whose session subscription has a receiver waiting
for the next available session is deleted under it (sub.listeners is not looked at)."""

import asyncio
from datetime import timedelta

import pytest

from aiosb import NEXT_AVAILABLE_SESSION

pytestmark = pytest.mark.looptime


async def test_topic_idle_with_waiting_session_listener(ns, broker):
    await ns.create_topic("t", auto_delete_on_idle=timedelta(minutes=5))
    await ns.create_subscription("t", "s", requires_session=True)
    r = ns.receiver(
        "t/subscriptions/s", session_id=NEXT_AVAILABLE_SESSION, session_wait=timedelta(minutes=20)
    )
    task = asyncio.create_task(r.__aenter__())
    await asyncio.sleep(10 * 60)
    assert await ns.topic_exists("t")  # a listener is waiting on its subscription
    task.cancel()


async def test_queue_idle_with_waiting_session_listener(ns, broker):
    await ns.create_queue("q", requires_session=True, auto_delete_on_idle=timedelta(minutes=5))
    r = ns.receiver("q", session_id=NEXT_AVAILABLE_SESSION, session_wait=timedelta(minutes=20))
    task = asyncio.create_task(r.__aenter__())
    await asyncio.sleep(10 * 60)
    assert await ns.queue_exists("q")
    task.cancel()
