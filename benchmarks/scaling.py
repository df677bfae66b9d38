"""Scaling (issue 16): what one operation costs as the work grows, on the embedded
emulator. For queue depths of 10^3 and 10^5 messages (10^6 with --deep): a send, a
receive-and-complete, a peek of 10 from the middle, and the runtime properties; and for
1, 100 and 1,000 receivers long-polling one queue, a send and its delivery. The curve
should be flat: each operation within 2x from the smallest case to the largest. Each
cost is the least of three runs (a machine's hiccup in one run is no curve).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import aiosb
from aiosb import Message, emulator

from ._harness import report, run

BATCH = 1000
OPERATIONS = 200
RUNS = 3


async def _fill(ns: aiosb.Namespace, depth: int) -> None:
    async with ns.sender("q") as sender:
        for start in range(0, depth, BATCH):
            await sender.send([Message(b"x" * 10) for _ in range(min(BATCH, depth - start))])


async def at_depth(depth: int) -> dict[str, float]:
    """Microseconds per operation with ``depth`` messages in the queue."""
    emulator.reset()
    async with aiosb.connect("memory://scaling") as ns:
        await ns.create_queue("q")
        await _fill(ns, depth)
        costs: dict[str, float] = {}
        async with ns.sender("q") as sender:
            start = time.perf_counter()
            for _ in range(OPERATIONS):
                await sender.send(Message(b"y"))
            costs["send"] = (time.perf_counter() - start) / OPERATIONS * 1e6
        async with ns.receiver("q") as receiver:
            middle = (await receiver.peek(max_messages=1, from_sequence_number=depth // 2))[0]
            start = time.perf_counter()
            for _ in range(OPERATIONS):
                await receiver.peek(max_messages=10, from_sequence_number=middle.sequence_number)
            costs["peek 10"] = (time.perf_counter() - start) / OPERATIONS * 1e6
            start = time.perf_counter()
            for _ in range(OPERATIONS):
                (got,) = await receiver.receive(max_messages=1, max_wait=0)
                await receiver.complete(got)
            costs["receive+complete"] = (time.perf_counter() - start) / OPERATIONS * 1e6
        start = time.perf_counter()
        for _ in range(20):
            await ns.runtime_properties("q")
        costs["runtime properties"] = (time.perf_counter() - start) / 20 * 1e6
        return costs


async def with_waiters(waiters: int) -> float:
    """Microseconds per send and delivery with ``waiters`` receives long-polling."""
    emulator.reset()
    async with aiosb.connect("memory://scaling-waiters") as ns:
        await ns.create_queue("q")
        got = 0
        done = asyncio.Event()

        async def wait(receiver: Any) -> None:
            nonlocal got
            while True:
                batch = await receiver.receive(max_messages=1, max_wait=60)
                got += len(batch)
                if got >= OPERATIONS:
                    done.set()

        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            tasks = [asyncio.create_task(wait(receiver)) for _ in range(waiters)]
            await asyncio.sleep(0.01)
            async with ns.sender("q") as sender:
                start = time.perf_counter()
                for _ in range(OPERATIONS):
                    await sender.send(Message(b"z"))
                    await asyncio.sleep(0)
                await asyncio.wait_for(done.wait(), 60)
                elapsed = time.perf_counter() - start
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return elapsed / OPERATIONS * 1e6


def _least(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each operation's least cost over ``runs``."""
    return {operation: min(r[operation] for r in runs) for operation in runs[0]}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deep", action="store_true", help="also 10^6 messages")
    args = parser.parse_args(argv)
    depths = [1_000, 100_000] + ([1_000_000] if args.deep else [])
    rows = []
    summary: dict[str, float] = {}
    by_depth = {depth: _least([run(lambda d=depth: at_depth(d)) for _ in range(RUNS)])
                for depth in depths}
    for operation in by_depth[depths[0]]:
        row: dict[str, Any] = {"operation": operation}
        for depth in depths:
            row[f"us at {depth:,}"] = by_depth[depth][operation]
        growth = by_depth[depths[-1]][operation] / by_depth[depths[0]][operation]
        row["growth"] = growth
        row["flat"] = "PASS" if growth <= 2 else "MISS"
        summary[f"{operation}_growth"] = growth
        rows.append(row)
    waiting = {n: min(run(lambda n=n: with_waiters(n)) for _ in range(RUNS))
               for n in (1, 100, 1000)}
    row = {"operation": "send+delivery, receivers waiting"}
    for n, cost in waiting.items():
        row[f"us with {n}"] = cost
    growth = waiting[1000] / waiting[1]
    row["growth"] = growth
    row["flat"] = "PASS" if growth <= 2 else "MISS"
    summary["waiters_growth"] = growth
    rows.append(row)
    report("scaling", "Scaling: cost per operation as the work grows (embedded)", rows, summary)
    return summary


if __name__ == "__main__":
    main()
