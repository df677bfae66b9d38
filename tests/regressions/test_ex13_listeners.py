import asyncio
from datetime import timedelta

import pytest

from aiosb import Message, errors
from aiosb.transport import SessionRequest

pytestmark = pytest.mark.looptime


async def test_listener_counts_after_timeouts_and_cancels(ns, broker):
    await ns.create_queue("sq", requires_session=True, dead_lettering_on_message_expiration=True)
    async with ns.sender("sq") as s:
        await s.send(Message(b"x", session_id="a", time_to_live=timedelta(seconds=1)))
    await asyncio.sleep(5)
    e = broker._entities["sq"]
    assert (await ns.runtime_properties("sq")).active_message_count == 1  # EX-13
    with pytest.raises(errors.OperationTimeout):
        await broker.session("sq", SessionRequest("accept", None, max_wait=2))
    assert e.listeners == 0
    assert (await ns.runtime_properties("sq")).dead_letter_message_count == 1
    t = asyncio.create_task(broker.session("sq", SessionRequest("accept", None, max_wait=None)))
    await asyncio.sleep(1)
    assert e.listeners == 1
    t.cancel()
    await asyncio.sleep(0)
    assert e.listeners == 0
    # no listener: a new expiring message waits
    async with ns.sender("sq") as s:
        await s.send(Message(b"y", session_id="b", time_to_live=timedelta(seconds=1)))
    await asyncio.sleep(5)
    assert (await ns.runtime_properties("sq")).active_message_count == 1
    assert "a" not in e.sessions


async def test_named_accept_with_expired_messages(ns, broker):
    await ns.create_queue("sq", requires_session=True, dead_lettering_on_message_expiration=True)
    async with ns.sender("sq") as s:
        await s.send(
            [
                Message(b"x", session_id="a", time_to_live=timedelta(seconds=1)),
                Message(b"y", session_id="a"),
            ]
        )
    await asyncio.sleep(5)
    async with ns.receiver("sq", session_id="a") as r:
        assert await r.receive(max_wait=0) == []  # EX-12: y expires with x
    p = await ns.runtime_properties("sq")
    assert (p.active_message_count, p.dead_letter_message_count) == (0, 2)
    assert broker._entities["sq"].listeners == 0
    assert broker._entities["sq"].sessions == {}
