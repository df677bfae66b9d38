"""Pairing benchmarks on the embedded emulator, in real time.

- S-2: paired sender on a healthy primary vs a plain sender, same entity, same run
  (target: at most 1.05x the time).
- S-5: failover latency, first failure -> first send accepted by a backlog queue
  (target: at most failover_interval + 250 ms).
- S-6: recovery latency, primary healed -> sends land on the primary again
  (target: at most ping_primary_interval + 250 ms).
- S-7: syphon drain rate, backlog -> primary, vs the plain send rate of the same
  transport (target: at least 0.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import time
from datetime import timedelta
from typing import Any

import aiosb
from aiosb import Message, PairedNamespaceOptions, emulator
from aiosb.pairing import Health
from aiosb.server.http import serve
from aiosb.server.process import ServerProcess

from ._harness import MIN_RUNS, check, loops, report, run

_names = iter(range(1_000_000))


async def _pair(options: PairedNamespaceOptions, base: str = "memory://"):
    """Two namespaces at ``base`` (``memory://``, or an ``aiosb serve`` URL and ``/``),
    paired, and the primary's broker (to inject faults into)."""
    n = next(_names)
    primary = aiosb.connect(f"{base}bench-p{n}", operation_timeout=5)
    secondary = aiosb.connect(f"{base}bench-s{n}", operation_timeout=5)
    await primary.open()
    await secondary.open()
    await primary.create_queue("orders")
    paired = primary.pair(secondary, options)
    await paired.open()
    local = base.startswith("memory://") or emulator.exists(f"bench-p{n}")
    return primary, secondary, paired, emulator.namespace(f"bench-p{n}") if local else None


async def _close(*things) -> None:
    for thing in things:
        await thing.aclose()


async def s2(sends: int, repeat: int) -> dict[str, float]:
    """Plain and paired single-message sends, interleaved rounds, best of each."""
    primary, secondary, paired, _ = await _pair(PairedNamespaceOptions(backlog_queue_count=2))
    message = Message(b"x" * 64)
    plain_sender = primary.sender("orders")
    paired_sender = paired.sender("orders")
    receiver = primary.receiver("orders", mode="receive_and_delete")
    best = {"plain": float("inf"), "paired": float("inf")}
    for round_ in range(repeat):
        order = [("plain", plain_sender), ("paired", paired_sender)]
        for name, sender in order if round_ % 2 else order[::-1]:
            start = time.perf_counter()
            for _ in range(sends):
                await sender.send(message)
            best[name] = min(best[name], time.perf_counter() - start)
            while await receiver.receive(max_messages=1000, max_wait=0):
                pass
    await _close(paired, primary, secondary)
    return {
        "plain_sends_per_s": sends / best["plain"],
        "paired_sends_per_s": sends / best["paired"],
        "paired_time_ratio": best["paired"] / best["plain"],
    }


async def s5_s6(interval: float, ping: float, phase: float) -> dict[str, float]:
    """Fail the primary entity under a steady sender; time failover and recovery, the
    primary healed ``phase`` (0 to 1) of a ping interval after the failover."""
    options = PairedNamespaceOptions(
        backlog_queue_count=2,
        failover_interval=timedelta(seconds=interval),
        ping_primary_interval=timedelta(seconds=ping),
    )
    primary, secondary, paired, broker = await _pair(options)
    sender = paired.sender("orders")
    loop = asyncio.get_running_loop()
    first_failure = None

    original = primary.transport.send

    async def watch(entity, messages):
        nonlocal first_failure
        try:
            await original(entity, messages)
        except aiosb.errors.ServiceBusError:
            if first_failure is None:
                first_failure = loop.time()
            raise

    primary.transport.send = watch
    await sender.send(Message(b"warm"))
    fault = broker.faults.fail("orders")
    backlog_before = paired.stats.backlog_sends
    while paired.stats.backlog_sends == backlog_before:
        await sender.send(Message(b"x"))
    failover_latency = loop.time() - first_failure
    await asyncio.sleep(ping * phase)  # heal at this point of the ping cycle
    fault.heal()
    healed = loop.time()
    primary_before = paired.stats.primary_sends
    while paired.stats.primary_sends == primary_before:
        await sender.send(Message(b"y"))
        await asyncio.sleep(0.005)
    recovery_latency = loop.time() - healed
    await _close(sender, paired, primary, secondary)
    return {
        "failover_interval_s": interval,
        "failover_latency_s": failover_latency,
        "failover_over_interval_ms": (failover_latency - interval) * 1000,
        "ping_interval_s": ping,
        "recovery_latency_s": recovery_latency,
        "recovery_over_ping_ms": (recovery_latency - ping) * 1000,
    }


async def s7(messages: int, http: bool = False, elsewhere: str | None = None
             ) -> dict[str, float]:
    """Fill the backlog during an outage, then time the syphon draining it home; over
    HTTP to an ``aiosb serve`` in this process when ``http``, or to the one at
    ``elsewhere`` (a URL: another process, as a deployment has it)."""
    if elsewhere is not None:
        return await _s7(messages, elsewhere + "/")
    if http:
        async with serve() as server:
            return await _s7(messages, server.url + "/")
    return await _s7(messages, "memory://")


async def _plain_send_seconds(primary: Any, messages: int, batch: list[Message]) -> float:
    """Seconds to send ``messages`` in batches of ``len(batch)`` on the primary (then
    emptied again): as many different messages as the drain moves, made before the clock
    starts (the same hundred objects sent again and again stay hot in the CPU's caches,
    which no application's messages, and no drained backlog, do: about 10% faster)."""
    size = len(batch)
    distinct = [Message(m.body) for _ in range(messages // size) for m in batch]
    gc.collect()  # each timed part starts from the same collector state: see _s7
    start = time.perf_counter()
    async with primary.sender("orders") as plain:
        for at in range(0, len(distinct), size):
            await plain.send(distinct[at:at + size])
    seconds = time.perf_counter() - start
    async with primary.receiver("orders", mode="receive_and_delete") as receiver:
        while await receiver.receive(max_messages=1000, max_wait=0):
            pass
    return seconds


async def _s7(messages: int, base: str) -> dict[str, float]:
    """The drain and its baseline, the plain send of the same number of messages, timed
    once before the drain and once after it (#16: a single short baseline made the
    ratio swing with whatever else the machine did then); the ratio divides by the
    mean of the two.

    Each timed part starts after a full garbage collection. A full collection of this
    process costs 25-30 ms, a third of a 50,000-message drain, and whether one fell
    inside a timed part or just before it was chance: without the common start the
    embedded ratio ran 0.47 to 0.74 across runs of the same code, with it 0.60 to 0.64.
    Collections the work itself causes are still timed."""
    options = PairedNamespaceOptions(
        backlog_queue_count=4,
        failover_interval=timedelta(0),
        ping_primary_interval=timedelta(seconds=1),
        enable_syphon=True,
    )
    primary, secondary, paired, broker = await _pair(options, base)
    batch = [Message(b"x" * 64) for _ in range(100)]
    before = await _plain_send_seconds(primary, messages, batch)

    remote = None if base.startswith("memory://") else primary.transport.faults
    fault = broker.faults.fail("orders") if remote is None else await remote.fail("orders")
    sender = paired.sender("orders")
    for _ in range(messages // 100):
        await sender.send(batch)
    assert paired.health("orders") is Health.FAILED_OVER
    if remote is None:
        fault.heal()
    else:
        await remote.heal(fault)
    events = paired.events()
    gc.collect()
    paired.mark_healthy("orders")  # start the drain now rather than at the next ping
    start = time.perf_counter()
    moved = 0  # counted from the events, not paired.stats: a snapshot an event costs
    async for event in events:
        if event.kind == "syphon_moved":
            moved += event.count
            if moved >= messages:
                break
    drain_rate = messages / (time.perf_counter() - start)
    async with primary.receiver("orders", mode="receive_and_delete") as receiver:
        while await receiver.receive(max_messages=1000, max_wait=0):
            pass
    after = await _plain_send_seconds(primary, messages, batch)
    plain_rate = messages / ((before + after) / 2)
    await _close(sender, paired, primary, secondary)
    return {
        "plain_send_msgs_per_s": plain_rate,
        "plain_send_before_msgs_per_s": messages / before,
        "plain_send_after_msgs_per_s": messages / after,
        "syphon_drain_msgs_per_s": drain_rate,
        "drain_to_send_ratio": drain_rate / plain_rate,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sends", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5, help="S-2 rounds within a run")
    parser.add_argument("--runs", type=int, default=MIN_RUNS, help="S-2 and S-7 runs")
    parser.add_argument("--drain", type=int, default=50_000)
    parser.add_argument("--drain-http", type=int, default=20_000)
    parser.add_argument("--phases", type=int, default=5, help="S-5/S-6 runs, random heal phases")
    args = parser.parse_args(argv)
    runs_n = max(args.runs, MIN_RUNS)
    summary: dict[str, Any] = {}
    rows = []
    checks = []
    for loop in loops():
        emulator.reset()
        r2s = [run(lambda: s2(args.sends, args.repeat), loop) for _ in range(runs_n)]
        for r2 in r2s:
            rows.append({"case": "S-2 plain send", "loop": loop,
                         "value": r2["plain_sends_per_s"], "unit": "sends/s"})
            rows.append({"case": "S-2 paired send", "loop": loop,
                         "value": r2["paired_sends_per_s"], "unit": "sends/s"})
        ratios = [r["paired_time_ratio"] for r in r2s]
        summary[f"s2_{loop}_paired_time_ratio"] = statistics.median(ratios)
        checks.append(check("S-2", f"paired/plain send time [{loop}]", ratios, 1.05,
                            at_most=True, unit="ratio"))
    # S-5/S-6 over several runs, the primary healed at random phases of the ping cycle:
    # a fixed phase could never show the worst case. The worst run is the one judged.
    phases = [random.random() for _ in range(max(args.phases, MIN_RUNS))]
    runs = []
    for phase in phases:
        emulator.reset()
        runs.append(run(lambda phase=phase: s5_s6(1.0, 1.0, phase), "asyncio"))
    worst5 = max(runs, key=lambda r: r["failover_over_interval_ms"])
    worst6 = max(runs, key=lambda r: r["recovery_over_ping_ms"])
    rows.append({"case": f"S-5 failover latency (worst of {len(runs)})", "loop": "asyncio",
                 "value": worst5["failover_latency_s"], "unit": "s (interval 1 s)"})
    rows.append({"case": f"S-6 recovery latency (worst of {len(runs)})", "loop": "asyncio",
                 "value": worst6["recovery_latency_s"], "unit": "s (ping 1 s)"})
    summary["s5_failover_over_interval_ms_worst"] = worst5["failover_over_interval_ms"]
    summary["s6_recovery_over_ping_ms_worst"] = worst6["recovery_over_ping_ms"]
    summary["s6_recovery_over_ping_ms_all"] = sorted(
        round(r["recovery_over_ping_ms"]) for r in runs
    )
    summary["s5_s6_heal_phases"] = [round(p, 2) for p in phases]
    checks.append(check("S-5", "failover latency over the interval [asyncio]",
                        [r["failover_over_interval_ms"] for r in runs], 250, at_most=True,
                        unit="ms"))
    checks.append(check("S-6", "recovery latency over the ping interval [asyncio]",
                        [r["recovery_over_ping_ms"] for r in runs], 250, at_most=True,
                        unit="ms"))
    # S-7 over HTTP twice: to an aiosb serve in this process (client and server share
    # one core and one garbage collector) and to one in another process, as the
    # emulator server or a namespace is deployed.
    with ServerProcess(args=["--no-amqp"]) as server:
        for transport, http, elsewhere, drain in (
            ("embedded", False, None, args.drain),
            ("HTTP", True, None, args.drain_http),
            ("HTTP, aiosb serve in another process", True, server.url, args.drain_http),
        ):
            r7s = []
            for _ in range(runs_n):
                emulator.reset()
                r7s.append(run(lambda h=http, e=elsewhere, d=drain: s7(d, h, e), "asyncio"))
            for r7 in r7s:
                rows.append({"case": f"S-7 plain send, {transport}", "loop": "asyncio",
                             "value": r7["plain_send_msgs_per_s"], "unit": "msgs/s"})
                rows.append({"case": f"S-7 syphon drain, {transport}", "loop": "asyncio",
                             "value": r7["syphon_drain_msgs_per_s"], "unit": "msgs/s"})
            drains = [r["drain_to_send_ratio"] for r in r7s]
            key = "s7_drain_to_send_ratio" + ("_http" if http else "")
            key += "_elsewhere" if elsewhere else ""
            summary[key] = statistics.median(drains)
            checks.append(check("S-7", f"syphon drain / plain send [asyncio, {transport}]", drains,
                                0.5, unit="ratio"))
    summary["targets"] = "S-2 <= 1.05, S-5 <= 250 ms, S-6 <= 250 ms, S-7 >= 0.5"
    report("pairing", "Pairing: S-2, S-5, S-6, S-7 (embedded emulator, real time)", rows, summary,
           checks)
    return summary


if __name__ == "__main__":
    main()
