"""B: sessions made on first use and never forgotten."""

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message, errors
from aiosb.transport import ReceiveRequest, SessionRequest

pytestmark = pytest.mark.looptime


def entity(broker, path):
    return broker._entities[path]


async def test_peek_of_unknown_session_leaves_a_session(ns, broker):
    await ns.create_queue("sq", requires_session=True)
    for i in range(100):
        await broker.receive("sq", ReceiveRequest(peek=True, session_id=f"nosuch{i}"))
    assert len(entity(broker, "sq").sessions) == 0


async def test_renew_or_get_state_of_unknown_session_leaves_a_session(ns, broker):
    await ns.create_queue("sq", requires_session=True)
    for action in ("renew", "get_state", "set_state"):
        with pytest.raises(errors.SessionLockLost):
            await broker.session("sq", SessionRequest(action, f"ghost-{action}", lock="bogus"))
    assert len(entity(broker, "sq").sessions) == 0


async def test_accept_while_fragment_down_leaves_a_session(ns, broker):
    await ns.create_queue("sp", requires_session=True, enable_partitioning=True)
    for f in range(16):
        broker.faults.fail_fragment("sp", f, operations=["receive"])
    for i in range(20):
        with pytest.raises(errors.ServiceBusError):
            await broker.session("sp", SessionRequest("accept", f"s{i}"))
    assert len(entity(broker, "sp").sessions) == 0


async def test_session_expired_while_unlocked_is_not_forgotten(ns, broker):
    await ns.create_queue("sq", requires_session=True)
    async with ns.sender("sq") as s:
        await s.send(Message(b"x", session_id="dies", time_to_live=timedelta(seconds=1)))
        await s.send(Message(b"y", session_id="other"))
    async with ns.receiver("sq", session_id="other") as r:  # a listener (EX-13)
        await asyncio.sleep(5)
        await r.receive(max_wait=0)
        # 'dies' expired entirely (EX-12): nothing left, no lock, no state
        assert "dies" not in entity(broker, "sq").sessions
