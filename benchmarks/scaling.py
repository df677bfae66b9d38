"""Scaling (issue 16): what one operation costs as the work grows, on the embedded
emulator. For queue depths of 10^3 and 10^5 messages (10^6 with --deep): a send, a
receive-and-complete, a peek of 10 from the middle, and the runtime properties; and for
1, 100 and 1,000 receivers long-polling one queue, a send and its delivery. The curve
should be flat: each operation within 2x from the smallest case to the largest. Each
cost is the least of three runs (a machine's hiccup in one run is no curve).

Durable mode at depth (issue 39): a durable ``aiosb
serve`` holding 10^4, 10^5 and 10^6 stored messages of 100-byte bodies (filled in
process: the fill is not measured), restarted three times each as a process of its own:
how soon it listens (target: 5 s), how soon it serves the first message (checked to be
the first) and has loaded them all; its memory per stored message, measured as the
in-memory figure of ``benchmarks.memory`` is (traced by :mod:`tracemalloc` while a fresh
process loads the store; target: that figure, measured in the same run, plus the 100-byte
body) and as resident set (the server's less an empty server's, over the messages;
beside it, what an in-memory queue holding the same messages adds to its process's
resident set: the resident set counts the allocator's rounding, which traced bytes do
not, for both alike); and its bytes
on disk per message after a clean stop (target: twice the message's size as the broker
counts it), judged on the worst run. ``--durable-only`` runs just these (results in
``scaling-durable.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import aiosb
from aiosb import Message, emulator

from ._harness import check, child_pids, report, run
from .memory import resident_bytes

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


BODY = 100  # bytes: the messages
#: Targets of #39: listening within this many seconds of a restart; bytes on disk at
#: most this many times the message's own size.
LISTEN_S = 5.0
DISK_RATIO = 2.0


async def _durable_fill(data: Path, depth: int) -> int:
    """``depth`` messages of ``BODY`` bytes into queue ``q`` of namespace ``depth`` of a
    durable server kept in ``data`` (sent in process: the fill is not what is measured);
    the size the broker counts for each."""
    from aiosb.server.http import serve

    async with serve(data_dir=data) as server:
        async with aiosb.connect(server.namespace_url("depth")) as ns:
            await ns.create_queue("q")
        async with aiosb.connect("memory://depth") as ns:
            async with ns.sender("q") as sender:
                for start in range(0, depth, BATCH):
                    await sender.send([Message(b"%0*d" % (BODY, i))
                                       for i in range(start, min(depth, start + BATCH))])
            size = (await ns.runtime_properties("q")).size_in_bytes
    emulator.reset()
    return size // depth


def _rss(pid: int, children: bool = False) -> int:
    """Resident bytes of process ``pid``, with its children's (``children``: a durable
    server's journal writer is a process of its own; its memory is the server's)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                own = int(line.split()[1]) * 1024
                break
        else:  # an exited child not yet waited for holds no memory
            own = 0
    if not children:
        return own
    return own + sum(_rss(kid, children=True) for kid in child_pids(pid))


def _restart(data: Path, depth: int) -> dict[str, float]:
    """Start ``aiosb serve --data-dir data`` (a process of its own) and measure: seconds
    until it listens, until it serves the first message (checked to be the first), until
    it has loaded every one (its count answers), and its resident bytes then."""
    start = time.perf_counter()
    proc, url = _spawn(data)
    try:
        listen = time.perf_counter() - start

        async def serve_them() -> tuple[float, float]:
            async with aiosb.connect(f"{url}/depth", operation_timeout=600) as ns:
                async with ns.receiver("q") as receiver:
                    (first,) = await receiver.peek(1)
                    served = time.perf_counter() - start
                    assert first.body == b"%0*d" % (BODY, 0), "not served in order"
                count = (await ns.runtime_properties("q")).active_message_count
                assert count == depth, f"{count} of {depth} messages after the restart"
                return served, time.perf_counter() - start

        served, loaded = asyncio.run(serve_them())
        return {"listen_s": listen, "first_s": served, "loaded_s": loaded,
                "rss": float(_rss(proc.pid, children=True))}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


async def _in_memory_bytes(count: int, body: int) -> float:
    """Traced bytes per message an in-memory queue holds for ``count`` messages of
    ``body`` bytes (as :mod:`benchmarks.memory` measures its figure)."""
    emulator.reset()
    try:
        return await resident_bytes(count, body=body)
    finally:
        emulator.reset()


def durable_at_depth(depths: list[int], runs: int) -> tuple[
        list[dict[str, Any]], dict[str, float], list[dict[str, Any]]]:
    """#39: a durable ``aiosb serve`` restarted ``runs`` times at each depth: rows (min /
    median / max of each figure), a summary, and the checks (listening within
    :data:`LISTEN_S`; resident bytes per stored message at most the in-memory figure
    plus the body; bytes on disk per message at most :data:`DISK_RATIO` times its
    size)."""
    figure = run(lambda: _in_memory_bytes(100_000, 10))  # the in-memory figure (#16)
    same = run(lambda: _in_memory_bytes(100_000, BODY))  # the same, these messages
    rows: list[dict[str, Any]] = []
    summary: dict[str, float] = {"in_memory_bytes_per_message_10_byte_body": figure,
                                 f"in_memory_bytes_per_message_{BODY}_byte_body": same}
    for depth in depths:  # what an in-memory queue holding the same costs, as resident
        summary[f"in_memory_{depth}_rss_per_message"] = _resident_in_memory_elsewhere(depth)
    checks = []
    root = Path(tempfile.mkdtemp(prefix="aiosb-depth-"))
    try:
        empty = root / "empty"
        for depth in depths:
            data = root / f"d{depth}"
            size = run(lambda d=depth, p=data: _durable_fill(p, d))  # type: ignore[misc]
            disk = sum(f.stat().st_size for f in data.iterdir()) / depth
            measured = []
            for _ in range(runs):
                shutil.rmtree(empty, ignore_errors=True)
                base = _empty_rss(empty)
                got = _restart(data, depth)
                got["rss_per_message"] = (got["rss"] - base) / depth
                got["traced_per_message"] = _elsewhere("--traced-restart", str(data), str(depth))
                measured.append(got)
            row: dict[str, Any] = {"operation": f"durable restart, {depth:,} stored"}
            for key in ("listen_s", "first_s", "loaded_s", "traced_per_message",
                        "rss_per_message"):
                values = sorted(m[key] for m in measured)
                row[key] = "{:.2f} / {:.2f} / {:.2f}".format(*_spread(values))
                summary[f"durable_{depth}_{key}_max"] = values[-1]
            row["in_memory_rss_per_message"] = summary[f"in_memory_{depth}_rss_per_message"]
            row["disk_per_message"] = disk
            row["message_size"] = size
            summary[f"durable_{depth}_disk_per_message"] = disk
            rows.append(row)
            checks.append(check("#39", f"restart listens, {depth:,} stored (s)",
                                [m["listen_s"] for m in measured], LISTEN_S, at_most=True,
                                unit="s"))
            checks.append(check(
                "#39", f"bytes per stored message after a restart, traced as the in-memory "
                f"figure is, {depth:,} stored (figure {figure:.0f} + body {BODY})",
                [m["traced_per_message"] for m in measured], figure + BODY, at_most=True,
                unit="bytes"))
            checks.append(check("#39", f"bytes on disk per message, {depth:,} stored "
                                f"(2 x its size, {size})", [disk] * runs, DISK_RATIO * size,
                                at_most=True, unit="bytes"))
            shutil.rmtree(data, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary["load_average"] = os.getloadavg()[0]
    return rows, summary, checks


async def _resident_in_memory(count: int) -> float:
    """Resident bytes per message this process gains holding ``count`` messages of
    ``BODY`` bytes in an in-memory queue (for comparison with a restarted durable server
    holding the same: measured the same way, in a process of its own)."""
    async with aiosb.connect("memory://resident") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send([Message(b"w")])
            gc.collect()
            before = _rss(os.getpid())
            for start in range(0, count, BATCH):
                await sender.send([Message(b"%0*d" % (BODY, i))
                                   for i in range(start, min(count, start + BATCH))])
        gc.collect()
        return (_rss(os.getpid()) - before) / count


async def _traced_restart(data: Path, depth: int) -> float:
    """Traced bytes per stored message that loading the durable store in ``data`` holds
    (:mod:`tracemalloc`, as :mod:`benchmarks.memory` measures the in-memory figure: no
    resident-set noise), once every message is loaded."""
    from aiosb.emulator.durable import Journal

    journal = Journal(data)
    await journal.open()
    try:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await journal.load()
            assert journal.recovery is not None
            await journal.recovery.wait_all()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    finally:
        await journal.aclose()
    return (after - before) / depth


def _elsewhere(*args: str) -> float:
    """This module's figure named by ``args``, worked out in a fresh process."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.scaling", *args],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def _resident_in_memory_elsewhere(count: int) -> float:
    """:func:`_resident_in_memory` in a fresh process."""
    return _elsewhere("--resident-in-memory", str(count))


def _empty_rss(data: Path) -> float:
    """Resident bytes of a durable ``aiosb serve`` holding nothing, once it has answered
    what :func:`_restart` asks (so that what that costs once is not counted per message)."""
    proc, url = _spawn(data)
    try:

        async def touch() -> None:  # what a restart's measure asks, of an empty queue
            async with aiosb.connect(f"{url}/depth") as ns:
                if not await ns.queue_exists("q"):
                    await ns.create_queue("q")
                async with ns.receiver("q") as receiver:
                    await receiver.peek(1)
                await ns.runtime_properties("q")

        asyncio.run(touch())
        return float(_rss(proc.pid, children=True))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def _spawn(data: Path) -> tuple[subprocess.Popen[str], str]:
    """``aiosb serve --data-dir data`` on a free port; returns once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--no-amqp", "--quiet",
         "--no-explorer", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError(f"aiosb serve did not start: {url!r}")
    return proc, url


def _spread(values: list[float]) -> tuple[float, float, float]:
    return values[0], values[len(values) // 2], values[-1]


def _least(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each operation's least cost over ``runs``."""
    return {operation: min(r[operation] for r in runs) for operation in runs[0]}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deep", action="store_true", help="also 10^6 messages")
    parser.add_argument("--durable-only", action="store_true",
                        help="only the durable server's restarts (#39)")
    parser.add_argument("--resident-in-memory", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--traced-restart", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.resident_in_memory:  # one figure, for a run in another process
        print(run(lambda: _resident_in_memory(args.resident_in_memory)))
        return {}
    if args.traced_restart:
        data, depth = args.traced_restart
        print(run(lambda: _traced_restart(Path(data), int(depth))))
        return {}
    depths = [1_000, 100_000] + ([1_000_000] if args.deep else [])
    rows: list[dict[str, Any]] = []
    summary: dict[str, float] = {}
    durable_depths = [10_000, 100_000, 1_000_000]  # the depth: about a minute
    durable_rows, durable_summary, checks = durable_at_depth(durable_depths, RUNS)
    if args.durable_only:
        report("scaling-durable", "Durable mode at depth: restart, memory, disk (aiosb serve)",
               durable_rows, durable_summary, checks)
        return durable_summary
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
    rows += durable_rows
    summary.update(durable_summary)
    report("scaling", "Scaling: cost per operation as the work grows (embedded), and durable "
           "mode at depth (aiosb serve)", rows, summary, checks)
    return summary


if __name__ == "__main__":
    main()
