"""G: closing a session receiver while its first accept is in flight leaves the session
locked (nobody releases it) until its lock expires."""

import asyncio
from datetime import timedelta

import pytest

from aiosb import NEXT_AVAILABLE_SESSION, Message

pytestmark = pytest.mark.looptime


async def test_close_while_accept_in_flight(ns, broker):
    await ns.create_queue("sq", requires_session=True, lock_duration=timedelta(minutes=5))
    r = ns.receiver("sq", session_id=NEXT_AVAILABLE_SESSION, session_wait=60)
    task = asyncio.create_task(r.receive(max_wait=30))
    await asyncio.sleep(1)
    await r.aclose()
    async with ns.sender("sq") as s:
        await s.send(Message(b"a", session_id="a"))
    await asyncio.sleep(1)
    # the closed receiver should not hold session 'a': another receiver takes it
    async with ns.receiver("sq", session_id="a") as r2:
        await r2.receive(max_wait=0)
    task.cancel()
