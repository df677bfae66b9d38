"""A small harness: run a coroutine on a chosen loop, time it, print a table, write JSON.

Each target is checked on the *worst* of several runs (#16): a target counts as met only
when every run meets it, so an "at least" target is checked on the minimum and an "at
most" target on the maximum. :func:`check` gives min, median, max, the target and
PASS/MISS; :func:`report` prints those and writes them to ``results/NAME.json`` under
``"checks"``, so a script can read them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiosb
import aiosb.cli

RESULTS = Path(__file__).parent / "results"


def loops() -> list[str]:
    """The event loops available here: asyncio's, and uvloop's where installed."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


def run(main: Callable[[], Coroutine[Any, Any, Any]], loop: str = "asyncio") -> Any:
    """Run ``main()`` to completion on a fresh loop of the given kind."""
    return aiosb.cli.run(main(), loop)


MIN_RUNS = 3


def check(sid: str, case: str, values: list[float], target: float, *, at_most: bool = False,
          unit: str = "") -> dict[str, Any]:
    """One S-id's verdict over ``values`` (one per run, at least :data:`MIN_RUNS`):
    min, median, max, the target (``>= target``, or ``<= target`` when ``at_most``) and
    ``pass``, judged on the worst run (the minimum, or the maximum when ``at_most``)."""
    if len(values) < MIN_RUNS:
        raise ValueError(f"{sid} {case}: {len(values)} runs; at least {MIN_RUNS} are needed")
    worst = max(values) if at_most else min(values)
    return {
        "id": sid,
        "case": case,
        "runs": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "target": f"{'<=' if at_most else '>='} {_fmt(float(target))}",
        "target_value": target,
        "at_most": at_most,
        "judged_on": "max" if at_most else "min",
        "pass": worst <= target if at_most else worst >= target,
        "unit": unit,
    }


def best_rate(count: int, timings: list[float]) -> dict[str, float]:
    """Rates from repeated timings of ``count`` operations: best and median."""
    return {
        "best_per_s": count / min(timings),
        "median_per_s": count / statistics.median(timings),
    }


class Stopwatch:
    """``with Stopwatch() as sw: ...``; then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


#: What a busy process of :class:`BusyLoad` runs: a pure-Python loop that never sleeps
#: (one core's worth of demand, user time), and that every million turns (some tens of
#: milliseconds) makes its one system call, to end if the benchmark that started it is
#: gone (killed, say: no loop is left spinning). ``{parent}``: the benchmark's process id.
BUSY_LOOP = """import os
while os.getppid() == {parent}:
    for _ in range(1_000_000):
        pass
"""


class BusyLoad:
    """``with BusyLoad(n) as load: ...``: a competing CPU load for the block (#50).

    ``n`` processes, each a fresh interpreter (``python -I -S -c``) spinning in
    :data:`BUSY_LOOP`, at the priority this process runs at (normal, nice 0, unless the
    benchmark was started niced), not pinned to a core: the scheduler shares the cores
    between them and the measured processes as it shares them with any other work of
    the machine. One busy process on a 2-core machine takes half of it: the realistic
    case of a test server beside a build or a test run. Killed when the block ends
    (and gone soon after this process, however it ends);
    ``load.cpu_share()`` is the cores they held meanwhile (CPU seconds over wall
    seconds, from ``/proc``; ``None`` without it), which says how hard they competed.
    """

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._procs: list[subprocess.Popen[bytes]] = []
        self._cpu0 = 0.0
        self._start = self._end = 0.0
        self._cpu1: float | None = None

    def __enter__(self) -> BusyLoad:
        for _ in range(self.processes):
            self._procs.append(subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", BUSY_LOOP.format(parent=os.getpid())],
                stdin=subprocess.DEVNULL))
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cpu1 = self._cpu()
        self._end = time.perf_counter()
        for proc in self._procs:
            proc.kill()
        for proc in self._procs:
            proc.wait()

    def _cpu(self) -> float | None:
        total = 0.0
        for proc in self._procs:
            seconds = cpu_seconds(proc.pid)
            if seconds is None:
                return None
            total += seconds
        return total

    def cpu_share(self) -> float | None:
        """The cores the busy processes held from start to end (0 without any)."""
        if not self._procs:
            return 0.0
        cpu = self._cpu1 if self._cpu1 is not None else self._cpu()
        end = self._end or time.perf_counter()
        return None if cpu is None else cpu / max(end - self._start, 1e-9)


def cpu_seconds(pid: int | None = None) -> float | None:
    """CPU seconds (user + system) of a process so far (``None``: this one), from
    ``/proc``; ``None`` where there is no ``/proc`` (or no such process)."""
    try:
        with open(f"/proc/{pid or 'self'}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(name: str, title: str, rows: list[dict[str, Any]], summary: dict[str, Any],
           checks: list[dict[str, Any]] | None = None) -> None:
    """Print ``rows`` as a table, then ``checks`` (from :func:`check`) with PASS/MISS,
    and write them with ``summary`` to results/NAME.json."""
    print(f"\n{title}")
    _table(rows)
    for key, value in summary.items():
        print(f"{key}: {_fmt(value)}")
    if checks:
        print()
        _table([
            {"id": c["id"], "case": c["case"], "runs": c["runs"], "min": c["min"],
             "median": c["median"], "max": c["max"], "unit": c["unit"], "target": c["target"],
             "verdict": f"{'PASS' if c['pass'] else 'MISS'} (on the {c['judged_on']})"}
            for c in checks
        ])
    RESULTS.mkdir(exist_ok=True)
    payload = {
        "benchmark": name,
        "aiosb": aiosb.__version__,
        "python": platform.python_version(),
        "system": platform.system(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "summary": summary,
        "checks": checks or [],
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))


def _table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    columns = list(dict.fromkeys(c for row in rows for c in row))  # a row may lack some
    widths = [max(len(c), *(len(_fmt(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(
            _fmt(row.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)
        ))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3f}"
    return str(value)


async def round_trips(ns: Any, queue: str, messages: list[Any], rounds: int, **props: Any) -> float:
    """Seconds for ``rounds`` of send ``messages`` (one batch) -> receive them -> complete
    them on ``queue`` of the open namespace ``ns`` (created with ``props`` if missing)."""
    if not await ns.queue_exists(queue):
        await ns.create_queue(queue, **props)
    async with ns.sender(queue) as sender, ns.receiver(queue) as receiver:
        with Stopwatch() as sw:
            for _ in range(rounds):
                await sender.send(messages)
                received = await receiver.receive(max_messages=len(messages), max_wait=0)
                await receiver.complete(received)
        assert len(received) == len(messages)
    return sw.seconds


def child_pids(pid: int) -> list[int]:
    """The process ids of ``pid``'s children (a durable ``aiosb serve``'s journal writer:
    its work and memory are the server's), from ``/proc``; none where it cannot tell."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return [int(child) for child in listing.read().split()]
    except OSError:
        return []
