"""A message wakes one waiting receive, not all of them (#16).

With every enqueue waking every long poll, 1,000 receivers on one queue made a send
cost over a hundred times more: each woke, looked, found nothing and waited again. These
count the looks (calls to ``_Store.take``), never the time they take.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import aiosb
from aiosb import Message
from aiosb.emulator._store import _Store

pytestmark = pytest.mark.looptime


async def _waiting(receiver: Any, n: int, max_wait: float = 60) -> list[asyncio.Task[Any]]:
    """``n`` long-poll receives of one message each, started in order, all waiting."""
    tasks = []
    for _ in range(n):
        tasks.append(asyncio.ensure_future(receiver.receive(max_messages=1, max_wait=max_wait)))
        await asyncio.sleep(0.01)  # each registers before the next: the order is known
    return tasks


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("partitioned", [False, True])
async def test_a_message_wakes_one_of_many_waiting_receives(monkeypatch, partitioned):
    looks = 0
    take = _Store.take

    def counted(self: _Store, *args: Any) -> Any:
        nonlocal looks
        looks += 1
        return take(self, *args)

    async with aiosb.connect("memory://wake1") as ns:
        await ns.create_queue("q", enable_partitioning=partitioned)
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            tasks = await _waiting(receiver, 200)
            monkeypatch.setattr(_Store, "take", counted)
            await sender.send(Message(b"one"))
            await asyncio.sleep(1)
            done = [t for t in tasks if t.done()]
            assert [[m.body for m in t.result()] for t in done] == [[b"one"]]
            assert done == tasks[:1]  # the longest waiting
            fragments = 16 if partitioned else 1  # a receive looks in each fragment
            assert looks <= fragments  # every receive woke and looked: 200 or 3,200

            looks = 0
            await sender.send([Message(str(i)) for i in range(10)])
            await asyncio.sleep(1)
            done = [t for t in tasks if t.done()]
            assert done == tasks[:11]
            assert sorted(t.result()[0].body for t in done[1:]) == sorted(
                str(i).encode() for i in range(10)
            )
            assert looks <= 10 * fragments
            await _cancel(tasks)


async def test_a_woken_receive_that_is_cancelled_passes_its_wake_up_on(monkeypatch):
    """The message's one wake-up went to a receive cancelled before it could look: the
    next waiting receive must wake instead, or the message waits with it asleep."""
    async with aiosb.connect("memory://wake2") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            first, second = await _waiting(receiver, 2)
            add = _Store.add

            def add_then_cancel_the_first(self: _Store, *args: Any) -> None:
                add(self, *args)  # wakes ``first``, which has not run yet
                first.cancel()

            monkeypatch.setattr(_Store, "add", add_then_cancel_the_first)
            start = asyncio.get_running_loop().time()
            await sender.send(Message(b"one"))
            got = await second  # its deadline is 60 s away (on the loop's clock)
            assert [m.body for m in got] == [b"one"]
            assert asyncio.get_running_loop().time() - start < 30
            assert first.cancelled()


async def test_a_woken_receive_that_finds_nothing_keeps_its_place_and_deadline(monkeypatch):
    """Woken, but the message was gone when it looked: it waits again at the head of
    the line (the next message is its), until its own deadline."""
    async with aiosb.connect("memory://wake3") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            loop = asyncio.get_running_loop()
            start = loop.time()
            (first,) = await _waiting(receiver, 1, max_wait=10)
            others = await _waiting(receiver, 3)
            add = _Store.add

            def add_then_steal(self: _Store, rec: Any, now: float) -> None:
                add(self, rec, now)  # wakes ``first``, which has not run yet
                self.take(1, None, now)  # taken by someone who did not wait

            monkeypatch.setattr(_Store, "add", add_then_steal)
            await sender.send(Message(b"stolen"))
            await asyncio.sleep(1)
            monkeypatch.setattr(_Store, "add", add)
            assert not any(t.done() for t in [first, *others])
            await sender.send(Message(b"next"))
            await asyncio.sleep(1)
            assert first.done() and [m.body for m in first.result()] == [b"next"]
            assert not any(t.done() for t in others)

            # and the deadline is the one it started with, not renewed by the wake-up
            (late,) = await _waiting(receiver, 1, max_wait=10)
            await _cancel(others)
            late_start = loop.time()
            add_steal = add_then_steal
            monkeypatch.setattr(_Store, "add", add_steal)
            await asyncio.sleep(5)
            await sender.send(Message(b"stolen again"))  # wakes ``late`` at 5 s
            assert await late == []
            assert loop.time() - late_start == pytest.approx(10, abs=0.1)
            assert loop.time() - start < 30
