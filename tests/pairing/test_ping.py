"""The ping actor alone (paired-namespaces.md PN-3, PN-10, PN-14, PN-15): a fake send, a
recorded outcome callback, and a fast-forwarded loop clock (``looptime``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message
from aiosb.errors import ClientClosed, EntityUnavailable, ServiceBusError
from aiosb.message import PING_CONTENT_TYPE
from aiosb.pairing.ping import PingActor

pytestmark = pytest.mark.looptime

INTERVAL = 30.0
TIMEOUT = 120.0


class FakePrimary:
    """Records each ping sent; fails with the next of ``errors`` (``None``: delivered)."""

    def __init__(self, *outcomes: BaseException | None, block: bool = False) -> None:
        self.outcomes = list(outcomes)
        self.block = block
        self.sent: list[tuple[float, str, Message, float]] = []

    async def send(self, entity: str, message: Message, timeout: float) -> None:  # noqa: ASYNC109
        self.sent.append((asyncio.get_running_loop().time(), entity, message, timeout))
        if self.block:
            await asyncio.Event().wait()
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome


def actor(primary: FakePrimary, outcomes: list[ServiceBusError | None]) -> PingActor:
    return PingActor("orders", primary.send, outcomes.append, interval=INTERVAL, timeout=TIMEOUT)


async def test_pn10_it_pings_every_interval_until_a_ping_is_delivered_and_reports_each():
    """PN-10, PN-15: a ping every ping_primary_interval, the first one interval after the
    start; each outcome goes to the callback; once one is delivered the pings stop."""
    down = EntityUnavailable("the primary is down")
    primary, outcomes = FakePrimary(down, down), []
    ping = actor(primary, outcomes)
    start = asyncio.get_running_loop().time()
    ping.start()
    assert ping.running
    await asyncio.sleep(10 * INTERVAL)
    assert [at - start for at, *_ in primary.sent] == [INTERVAL, 2 * INTERVAL, 3 * INTERVAL]
    assert outcomes == [down, down, None]
    assert {(entity, timeout) for _, entity, _, timeout in primary.sent} == {("orders", TIMEOUT)}
    assert not ping.running  # PN-15: pings are billable; none after the entity is back


async def test_pn14_a_ping_is_empty_short_lived_and_in_a_session_of_its_own():
    """PN-14: empty, the ping content type, a 1 s time to live, a random SessionId."""
    primary = FakePrimary(EntityUnavailable("down"), EntityUnavailable("down"))
    actor(primary, []).start()
    await asyncio.sleep(10 * INTERVAL)
    pings = [message for _, _, message, _ in primary.sent]
    assert len(pings) == 3
    for message in pings:
        assert message.body == b""
        assert message.content_type == PING_CONTENT_TYPE
        assert message.time_to_live == timedelta(seconds=1)
        assert message.session_id
    assert len({message.session_id for message in pings}) == 3


async def test_pn3_it_stops_when_told_with_a_ping_in_flight():
    """The runtime stops the actor when the entity is healthy again: a ping in flight is
    cancelled, nothing is reported, and no ping follows."""
    primary, outcomes = FakePrimary(block=True), []
    ping = actor(primary, outcomes)
    ping.start()
    await asyncio.sleep(INTERVAL + 1)
    assert len(primary.sent) == 1  # in flight
    ping.stop()
    await asyncio.sleep(10 * INTERVAL)
    assert len(primary.sent) == 1
    assert outcomes == []
    assert not ping.running
    ping.stop()  # idempotent


async def test_it_stops_when_told_between_pings():
    primary, outcomes = FakePrimary(EntityUnavailable("down")), []
    ping = actor(primary, outcomes)
    ping.start()
    await asyncio.sleep(INTERVAL + 1)
    ping.stop()
    await asyncio.sleep(10 * INTERVAL)
    assert len(primary.sent) == 1 and len(outcomes) == 1


async def test_stopped_from_its_outcome_callback_it_pings_no_more():
    """The runtime may stop the actor while it reports (its _report runs in the
    callback): the loop ends there, it does not ping again."""
    primary = FakePrimary(*[EntityUnavailable("down")] * 5)
    outcomes: list[ServiceBusError | None] = []

    def on_outcome(error: ServiceBusError | None) -> None:
        outcomes.append(error)
        ping.stop()

    ping = PingActor("orders", primary.send, on_outcome, interval=INTERVAL, timeout=TIMEOUT)
    ping.start()
    await asyncio.sleep(10 * INTERVAL)
    assert len(primary.sent) == 1 and len(outcomes) == 1
    assert not ping.running


async def test_a_closed_namespace_ends_the_actor_after_reporting_it():
    """Nothing can be sent through a closed namespace: the failure is reported, then the
    actor ends instead of pinging a closed client forever."""
    closed = ClientClosed("namespace 'p' was closed")
    primary, outcomes = FakePrimary(closed), []
    ping = actor(primary, outcomes)
    ping.start()
    await asyncio.sleep(10 * INTERVAL)
    assert outcomes == [closed]
    assert len(primary.sent) == 1
    assert not ping.running


async def test_an_unexpected_error_is_reported_and_the_actor_goes_on():
    """An actor never dies of a failed ping: a bug's exception is reported as a
    ServiceBusError, and the next ping follows an interval later."""
    primary, outcomes = FakePrimary(ValueError("a bug")), []
    ping = actor(primary, outcomes)
    ping.start()
    await asyncio.sleep(10 * INTERVAL)
    assert len(outcomes) == 2
    assert isinstance(outcomes[0], ServiceBusError) and "a bug" in str(outcomes[0])
    assert outcomes[1] is None
    assert len(primary.sent) == 2


async def test_it_runs_in_the_task_its_owner_spawns():
    """The runtime owns the actor's task (closing the pairing cancels and awaits it)."""
    primary, outcomes = FakePrimary(), []
    spawned: list[tuple[str, asyncio.Task[None]]] = []

    def spawn(coro, name):
        task = asyncio.get_running_loop().create_task(coro)
        spawned.append((name, task))
        return task

    ping = actor(primary, outcomes)
    ping.start(spawn)
    assert [name for name, _ in spawned] == ["ping orders"]
    await spawned[0][1]
    assert outcomes == [None]
    with pytest.raises(RuntimeError):
        ping.start(spawn)  # an actor starts once
