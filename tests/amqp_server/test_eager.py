"""#50: :func:`aiosb.server.amqp._eager.run_eagerly` runs a sender link's transfers and a
connection's settlements at once and hands the rest to a task only if they wait. That
task must be what a task of the coroutine's own would have been: cancelled (a detach
cancels ``link.pump``, PN-6) before its first step, the coroutine still hears the
CancelledError where it waits, and what it waited on is cancelled, as
:meth:`asyncio.Task.cancel` does for a task that has not run yet."""

from __future__ import annotations

import asyncio
from typing import Any

from aiosb.server.amqp._eager import run_eagerly


async def test_a_continuation_cancelled_before_it_runs_is_heard_by_the_coroutine():
    """A transfer and a detach in one read: the transfer waits (a delay fault, a
    journal's commit), the detach cancels it in the same turn of the loop."""
    heard: list[str] = []
    waited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def served() -> None:
        heard.append("started")
        try:
            await waited
        except asyncio.CancelledError:
            heard.append("cancelled")
            raise
        heard.append("resumed")

    coro: Any = served()
    task = run_eagerly(coro)
    assert task is not None and heard == ["started"]
    task.cancel()  # before the task's first step
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert task.cancelled()
    assert heard == ["started", "cancelled"]
    assert waited.cancelled()
    assert coro.cr_frame is None  # the coroutine is over, not left suspended


async def test_a_continuation_cancelled_while_it_waits_is_heard_by_the_coroutine():
    """The same, once the task has run a step (the usual case)."""
    heard: list[str] = []
    waited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def served() -> None:
        try:
            await waited
        except asyncio.CancelledError:
            heard.append("cancelled")
            raise

    task = run_eagerly(served())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert task.cancelled() and heard == ["cancelled"] and waited.cancelled()


async def test_what_does_not_wait_is_done_at_once_and_what_waits_goes_on():
    done: list[int] = []

    async def at_once() -> None:
        done.append(1)

    assert run_eagerly(at_once()) is None and done == [1]

    async def later() -> None:
        await asyncio.sleep(0)
        done.append(2)

    task = run_eagerly(later())
    assert task is not None and done == [1]
    await task
    assert done == [1, 2]
