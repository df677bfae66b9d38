"""The server's ``bounded()``: an operation within the client's budget (R-4, and the
rule that a timed-out operation never takes effect later). It runs the work at once up
to its first wait and arms its timer only then (S-3); these tests pin that the eager
start keeps every behaviour of ``await`` under a timeout."""

from __future__ import annotations

import asyncio

import pytest

from aiosb.errors import InvalidArgument, OperationTimeout
from aiosb.server.http._requests import bounded

pytestmark = pytest.mark.looptime


async def test_work_that_never_waits_is_done_at_once():
    steps = []

    async def work() -> str:
        steps.append("ran")
        return "done"

    assert await bounded(5, work()) == "done"
    assert steps == ["ran"]


async def test_work_that_waits_finishes_within_the_budget():
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def work() -> int:
        await asyncio.sleep(1)
        await asyncio.sleep(1)
        return 7

    assert await bounded(5, work()) == 7
    assert loop.time() - start == pytest.approx(2)


async def test_work_over_the_budget_is_cancelled_and_times_out():
    loop = asyncio.get_running_loop()
    start = loop.time()
    cleaned = []

    async def work() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append(loop.time() - start)

    with pytest.raises(OperationTimeout, match="within the client's 2 s"):
        await bounded(2, work(), wait=1)
    assert cleaned == [pytest.approx(3)]  # cancelled at the budget plus the wait


async def test_errors_before_and_after_a_wait_are_raised_as_they_are():
    async def early() -> None:
        raise InvalidArgument("early")

    async def late() -> None:
        await asyncio.sleep(0.5)
        raise InvalidArgument("late")

    with pytest.raises(InvalidArgument, match="early"):
        await bounded(5, early())
    with pytest.raises(InvalidArgument, match="late"):
        await bounded(5, late())


async def test_a_caller_cancelled_while_the_work_waits_cancels_the_work():
    cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.ensure_future(bounded(30, work()))
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


async def test_a_future_and_no_budget_are_awaited_plainly():
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(1, future.set_result, "f")
    assert await bounded(5, future) == "f"

    async def work() -> str:
        await asyncio.sleep(100)
        return "unbounded"

    assert await bounded(None, work()) == "unbounded"


async def test_a_budget_that_runs_out_at_a_later_wait_cancels_the_work_there():
    """After its first wait the work is resumed by ``yield from`` (in C): a timeout at its
    second wait, and a caught cancellation there, still reach it as under ``await``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    seen = []

    async def work() -> None:
        await asyncio.sleep(1)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(("cancelled", loop.time() - start))
            raise

    with pytest.raises(OperationTimeout):
        await bounded(3, work())
    assert seen == [("cancelled", pytest.approx(3))]

    async def stubborn() -> str:
        await asyncio.sleep(1)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass  # caught: the work goes on and finishes, as under await
        return "finished anyway"

    task = asyncio.ensure_future(bounded(30, stubborn()))
    await asyncio.sleep(2)
    task.cancel()
    assert await task == "finished anyway"
