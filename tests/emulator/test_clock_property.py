"""Issue 33, property-based: whatever interleaving of receives (long polls, in a
session and not), renewals (of message locks and of the session lock, from other tasks,
as ``AutoLockRenewer`` does), schedules, cancellations, abandons, deferrals, completions
and settings updates, on a fast-forwarded loop:

* the emulator's clock never reads ahead of the loop's time (``CLOCK.lead()``);
* nothing reaches a receiver stamped in the future, or before its scheduled time;
* a fresh lock reaches its receiver whole: it ends one lock duration after it was taken.

The renewals racing a waiting receive are what moved the clock (the wait's timer was
armed from the session lock's end, which the renewal then moved)."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, field

import looptime
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiosb
from aiosb import Message, emulator, errors
from aiosb._clock import CLOCK
from aiosb.message import ReceivedMessage

LOCKS = (10.0, 25.0)  # the two lock durations the settings updates switch between
EPS = 1e-5  # seconds: the float rounding of UTC epoch seconds near 2e9 is 2.4e-7

delays = st.one_of(
    st.sampled_from([0.0, 5.0, 9.99, 10.0, 10.01, 12.5, 24.99, 25.0, 30.0]),
    st.floats(0.0, 40.0, allow_nan=False),
)
waits = st.one_of(st.sampled_from([0.0, 10.0, 25.0, 40.0]), st.floats(0.0, 60.0))

#: Each actor's steps: (pause before, operation, a number the operation may use).
# Weighted toward what raced in the bug: a session receive waiting long while another
# task renews the session's lock.
SESSION_RECEIVER = st.lists(
    st.tuples(delays, st.sampled_from(["receive", "receive", "receive", "complete",
                                       "abandon", "defer", "deferred", "state", "reopen"]),
              waits),
    max_size=8,
)
PLAIN_RECEIVER = st.lists(
    st.tuples(delays, st.sampled_from(["receive", "complete", "abandon", "defer",
                                       "deferred"]), waits),
    max_size=8,
)
RENEWER = st.lists(
    st.tuples(st.one_of(delays, st.floats(0.5, 9.5)),
              st.sampled_from(["renew_session", "renew_session", "renew_messages",
                               "renew_plain"]), st.just(0.0)),
    max_size=10,
)
SENDER = st.lists(
    st.tuples(delays, st.sampled_from(["send", "send_session", "schedule", "cancel",
                                       "update_lock", "update_ttl"]), delays),
    max_size=10,
)


@dataclass
class World:
    ns: aiosb.Namespace
    session: aiosb.Receiver | None = None
    plain: aiosb.Receiver | None = None
    held_session: list[ReceivedMessage] = field(default_factory=list)
    held_plain: list[ReceivedMessage] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    deferred_session: list[int] = field(default_factory=list)
    #: (queue, sequence number): when it was scheduled for.
    scheduled: dict[tuple[str, int], float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def check_clock(self, where: str) -> None:
        ahead = CLOCK.lead()
        if ahead > EPS:
            self.problems.append(f"after {where} the clock reads {ahead:.6f} s ahead")

    def check_received(self, path: str, got: list[ReceivedMessage], fresh: bool) -> None:
        now = CLOCK.now()
        for msg in got:
            enqueued = msg.enqueued_time.timestamp()
            if enqueued > now + EPS:
                self.problems.append(f"{msg.body!r} enqueued {enqueued - now:.6f} s ahead")
            planned = self.scheduled.get((path, msg.sequence_number))
            if planned is not None and now + EPS < planned:
                self.problems.append(f"{msg.body!r} active {planned - now:.6f} s early")
            if fresh and msg.locked_until_timestamp is not None:
                left = msg.locked_until_timestamp - now
                if not any(abs(left - lock) <= EPS for lock in LOCKS):
                    self.problems.append(f"{msg.body!r} came with its lock {left:.6f} s long")


async def _session_actor(world: World, steps: list[tuple[float, str, float]]) -> None:
    for pause, op, wait in steps:
        await asyncio.sleep(pause)
        try:
            if op == "reopen" or world.session is None:
                if world.session is not None:
                    await world.session.aclose()
                world.session = None
                world.held_session.clear()
                receiver = world.ns.receiver("sq", session_id="s")
                await receiver.__aenter__()
                world.session = receiver
            receiver = world.session
            if op == "receive":
                got = await receiver.receive(max_messages=3, max_wait=wait)
                world.check_received("sq", got, fresh=False)  # the lock is the session's
                world.held_session += got
            elif op == "deferred" and world.deferred_session:
                got = await receiver.receive_deferred(world.deferred_session[:2])
                del world.deferred_session[:2]
                world.held_session += got
            elif op == "state":
                await receiver.session.set_state(str(CLOCK.now()).encode())
                await receiver.session.get_state()
            elif world.held_session and op in ("complete", "abandon", "defer"):
                msg = world.held_session.pop(0)
                await getattr(receiver, op)(msg)
                if op == "defer":
                    world.deferred_session.append(msg.sequence_number)
        except errors.ServiceBusError:
            pass  # a lock lost, a message gone: what the clock does is the question
        world.check_clock(f"session {op}")


async def _plain_actor(world: World, steps: list[tuple[float, str, float]]) -> None:
    receiver = world.plain = world.ns.receiver("q")
    async with receiver:
        for pause, op, wait in steps:
            await asyncio.sleep(pause)
            try:
                if op == "receive":
                    got = await receiver.receive(max_messages=3, max_wait=wait)
                    world.check_received("q", got, fresh=True)
                    world.held_plain += got
                elif op == "deferred" and world.deferred:
                    got = await receiver.receive_deferred(world.deferred[:2])
                    del world.deferred[:2]
                    world.check_received("q", got, fresh=True)
                    world.held_plain += got
                elif world.held_plain and op in ("complete", "abandon", "defer"):
                    msg = world.held_plain.pop(0)
                    await getattr(receiver, op)(msg)
                    if op == "defer":
                        world.deferred.append(msg.sequence_number)
            except errors.ServiceBusError:
                pass
            world.check_clock(f"plain {op}")


async def _renewer(world: World, steps: list[tuple[float, str, float]]) -> None:
    for pause, op, _ in steps:
        await asyncio.sleep(pause)
        try:
            if op == "renew_session" and world.session is not None:
                await world.session.session.renew_lock()
            elif op == "renew_messages" and world.session is not None and world.held_session:
                await world.session.renew_lock(world.held_session[0])
            elif op == "renew_plain" and world.plain is not None and world.held_plain:
                await world.plain.renew_lock(list(world.held_plain))
        except errors.ServiceBusError:
            pass
        world.check_clock(op)


async def _sender(world: World, steps: list[tuple[float, str, float]]) -> None:
    ns = world.ns
    async with ns.sender("q") as plain, ns.sender("sq") as session:
        for i, (pause, op, ahead) in enumerate(steps):
            await asyncio.sleep(pause)
            try:
                if op == "send":
                    await plain.send(Message(f"m{i}".encode()))
                elif op == "send_session":
                    await session.send(Message(f"s{i}".encode(), session_id="s"))
                elif op == "schedule":
                    at = dt.datetime.fromtimestamp(CLOCK.now() + ahead, dt.UTC)
                    seq = await plain.schedule(Message(f"at{i}".encode()), at)
                    assert isinstance(seq, int)
                    world.scheduled["q", seq] = at.timestamp()
                elif op == "cancel" and world.scheduled:
                    await plain.cancel_scheduled(max(world.scheduled)[1])
                elif op == "update_lock":
                    for path in ("q", "sq"):
                        now = (await ns.get_queue(path)).lock_duration.total_seconds()
                        lock = LOCKS[1] if now == LOCKS[0] else LOCKS[0]
                        await ns.update_queue(path, lock_duration=dt.timedelta(seconds=lock))
                elif op == "update_ttl":
                    await ns.update_queue(
                        "q", default_message_time_to_live=dt.timedelta(seconds=5 + ahead)
                    )
            except errors.ServiceBusError:
                pass
            world.check_clock(op)


async def _scenario(steps: dict[str, list[tuple[float, str, float]]]) -> list[str]:
    async with aiosb.connect("memory://clk", operation_timeout=600) as ns:
        lock = dt.timedelta(seconds=LOCKS[0])
        await ns.create_queue("q", lock_duration=lock, max_delivery_count=100)
        await ns.create_queue("sq", requires_session=True, lock_duration=lock,
                              max_delivery_count=100)
        world = World(ns)
        try:
            await asyncio.gather(
                _session_actor(world, steps["session"]),
                _plain_actor(world, steps["plain"]),
                _renewer(world, steps["renewer"]),
                _sender(world, steps["sender"]),
            )
        finally:
            if world.session is not None:
                await world.session.aclose()
        await asyncio.sleep(60)  # every lock the steps left ends, every schedule comes
        world.check_clock("the end")
        return world.problems


@pytest.mark.timeout(300)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    session=SESSION_RECEIVER, plain=PLAIN_RECEIVER, renewer=RENEWER, sender=SENDER,
)
def test_no_interleaving_moves_the_clock_ahead_of_the_loop(session, plain, renewer, sender):
    emulator.reset()
    loop = looptime.new_event_loop(start=0)
    try:
        problems = loop.run_until_complete(
            _scenario({"session": session, "plain": plain, "renewer": renewer,
                       "sender": sender})
        )
    finally:
        loop.close()
        emulator.reset()
    assert problems == []


def test_the_session_race_that_moved_the_clock_is_among_the_examples():
    """The interleaving of the bug report, as one example: a session receive waits
    across its lock's first end while another task renews the session."""
    test_no_interleaving_moves_the_clock_ahead_of_the_loop.hypothesis.inner_test(  # type: ignore[attr-defined]
        session=[(0.0, "receive", 40.0)],
        plain=[],
        renewer=[(5.0, "renew_session", 0.0), (5.0, "renew_session", 0.0)],
        sender=[],
    )
