"""Throughput that holds over a long run (#50, item 4): ``./dev bench soak``.

Three patterns run at once, for ``--minutes`` (10), against one ``aiosb serve`` (in
memory, HTTP and AMQP) in a child process (:class:`~aiosb.server.process.ServerProcess`):

* ``sdk-send``: the official aio SDK sending one message at a time, as a request handler
  does: ``await sender.send_messages(ServiceBusMessage(body))``, into queue ``soak-send``;
* ``sdk-receive``: the official aio SDK receiving with prefetch 100,
  ``receive_messages(100)``, and completing each message, each completion awaited, from
  queue ``soak-receive``;
* ``http-streaming``: S-4 streaming (:func:`benchmarks.http.aiosb_streaming_at`: 4
  producers and 4 consumers at the same time, batches of 100, aiosb's HTTP transport),
  called again and again, 20,000 messages a call, on queue ``q`` of its own namespace.

Each pattern runs in a process of its own (this module with ``--pattern NAME``), so that
a 10-minute soak takes about 10 minutes, not 30, and no pattern's client shares a loop
with another's. Each connects and opens its links first, says it is ready, and starts
when told, so the first minute measures the server, not connecting. The streaming client
runs at niceness 10 (``--streaming-nice``): it runs flat out, and at the same priority,
on two cores, it took the SDK clients' share (they moved 150-850 messages/s each, the
rate of the scheduler's turns, not of the SDK or the server); niced, they run at their
own pace (about 1,000-1,300 messages/s each here) and streaming takes the CPU they leave.

**What the receiver receives, and where the sender's messages go**: a fourth process,
the keeper (aiosb's HTTP transport), keeps ``soak-receive`` stocked (topped up to 5,000
messages, in batches of 100, whenever it falls below) and sweeps ``soak-send`` (receive
and delete, 1,000 a call). Chosen over letting the SDK sender feed the receiver because
the two patterns then each run at their own pace: fed by the sender, the receiver would
be held to the sender's rate (or the queue would grow, and with it the server's memory,
whenever the sender is the faster), and what is judged is each pattern's own rate holding
and the server's memory staying flat, which needs both queues to stay bounded. The
keeper's work is the same every minute (about as many messages as the two SDK patterns
move), so it is in the server's CPU without tilting one minute against another.

Every minute (a "minute" is ``--minutes`` * 60 / ``--buckets`` seconds; ``--buckets`` is
``max(5, minutes)``, so a short run, ``--minutes 0.2``, still has five), the rows give
each pattern's rate (messages/s) and the server's resident memory (``VmRSS``) and CPU (the
share of one core it used that minute), from ``/proc``.

Checks (the harness judges the worst of at least three values):

* per pattern, **the rate holds**: each of the last three minutes' rate over the first
  minute's, at least 0.9 (so the worst of the last three minutes is judged);
* **memory flat after warm-up**: the server's RSS at the end of each of the last three
  minutes over its RSS at the end of minute 2, at most 1.1.

Run: ``./dev bench soak`` (10 minutes, plus about 15 s to start), or with options
``python -m benchmarks.soak [--minutes M] [--buckets N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiosb
from aiosb import Message
from aiosb.server.process import ServerProcess

from ._harness import check, report
from .http import BATCH, BODY, _tree_cpu_seconds, aiosb_streaming_at

PATTERNS = ("sdk-send", "sdk-receive", "http-streaming")
KEEPER = "keeper"
NAMESPACE = "sbemulatorns"  # the one the AMQP connection string names
SEND_QUEUE, RECEIVE_QUEUE = "soak-send", "soak-receive"
STOCK = 5_000  # messages the keeper keeps in RECEIVE_QUEUE
SWEEP = 1_000  # messages the keeper takes from SEND_QUEUE a call
STREAMING_ROUNDS = 200  # batches of 100 an S-4 streaming call sends and receives
STREAMING_IN_FLIGHT = 4
STREAMING_NICE = 10  # the streaming client's niceness: it takes what the others leave
HOLD, FLAT = 0.9, 1.1  # the targets: rate last/first, RSS last/minute 2


class _Clock:
    """The shared schedule: ``start`` (seconds since the epoch), ``bucket`` seconds a
    "minute", ``buckets`` of them; counts what finished in each bucket."""

    def __init__(self, start: float, bucket: float, buckets: int) -> None:
        self.start, self.bucket, self.buckets = start, bucket, buckets
        self.end = start + bucket * buckets
        self.counts = [0.0] * buckets

    def add(self, count: float, at: float) -> None:
        """``count`` operations finished at ``at``."""
        k = int((at - self.start) // self.bucket)
        if 0 <= k < self.buckets:
            self.counts[k] += count

    def spread(self, count: float, began: float, ended: float) -> None:
        """``count`` operations done evenly between ``began`` and ``ended`` (a streaming
        call's messages, shared among the buckets it overlaps)."""
        span = max(ended - began, 1e-9)
        for k in range(self.buckets):
            lo = self.start + k * self.bucket
            overlap = min(ended, lo + self.bucket) - max(began, lo)
            if overlap > 0:
                self.counts[k] += count * overlap / span


async def _sdk_send(http: str, amqp: str, ready: Any) -> list[float]:
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(amqp) as client, \
            client.get_queue_sender(SEND_QUEUE) as sender:
        await sender.send_messages(ServiceBusMessage(BODY))  # the link is open
        clock = await ready()
        while time.time() < clock.end:
            await sender.send_messages(ServiceBusMessage(BODY))
            clock.add(1, time.time())
        return clock.counts


async def _sdk_receive(http: str, amqp: str, ready: Any) -> list[float]:
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(amqp) as client, \
            client.get_queue_receiver(RECEIVE_QUEUE, prefetch_count=BATCH) as receiver:
        for message in await receiver.receive_messages(max_message_count=1, max_wait_time=5):
            await receiver.complete_message(message)  # the link is open and flowing
        clock = await ready()
        while time.time() < clock.end:
            batch = await receiver.receive_messages(max_message_count=BATCH, max_wait_time=5)
            if not batch:
                raise RuntimeError(f"{RECEIVE_QUEUE} ran dry: the keeper fell behind")
            for message in batch:
                await receiver.complete_message(message)
                clock.add(1, time.time())
        return clock.counts


async def _http_streaming(http: str, amqp: str, ready: Any) -> list[float]:
    url = f"{http}/soak-streaming"
    await aiosb_streaming_at(url, 1, STREAMING_IN_FLIGHT)  # the queue exists, warm
    clock = await ready()
    while (began := time.time()) < clock.end:
        seconds = await aiosb_streaming_at(url, STREAMING_ROUNDS, STREAMING_IN_FLIGHT)
        ended = time.time()
        # The call's messages flowed through its timed part, which ends the call
        clock.spread(STREAMING_ROUNDS * BATCH, max(began, ended - seconds), ended)
    return clock.counts


async def _keeper(http: str, amqp: str, ready: Any) -> list[float]:
    async with aiosb.connect(f"{http}/{NAMESPACE}") as ns, \
            ns.sender(RECEIVE_QUEUE) as feeder, \
            ns.receiver(SEND_QUEUE, mode="receive_and_delete") as sweeper:
        batch = [Message(BODY) for _ in range(BATCH)]

        async def keep() -> None:
            depth = (await ns.runtime_properties(RECEIVE_QUEUE)).active_message_count
            for _ in range(max(0, STOCK - depth) // BATCH):
                await feeder.send(batch)
            while len(await sweeper.receive(max_messages=SWEEP, max_wait=0)) == SWEEP:
                pass

        await keep()  # stocked before anyone starts
        clock = await ready()
        while time.time() < clock.end:
            await keep()
            clock.add(1, time.time())
            await asyncio.sleep(0.05)
        return clock.counts


_RUNNERS = {"sdk-send": _sdk_send, "sdk-receive": _sdk_receive,
            "http-streaming": _http_streaming, KEEPER: _keeper}


def _pattern_main(name: str, http: str, amqp: str, nice: int) -> None:
    """A pattern's process: at niceness ``nice``, set up, print ``ready``, read the
    schedule (``start bucket buckets``) from standard input, run, print the counts a
    bucket as JSON."""
    if nice:
        os.nice(nice)

    async def ready() -> _Clock:
        print("ready", flush=True)
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        start, bucket, buckets = line.split()
        clock = _Clock(float(start), float(bucket), int(buckets))
        await asyncio.sleep(max(0.0, clock.start - time.time()))
        return clock

    counts = asyncio.run(_RUNNERS[name](http, amqp, ready))
    print(json.dumps({"pattern": name, "counts": counts}), flush=True)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def soak(minutes: float, buckets: int, streaming_nice: int = STREAMING_NICE
         ) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Run the patterns for ``minutes`` against one server, the streaming client at
    niceness ``streaming_nice``: rows (one a bucket), a summary and the checks."""
    bucket = minutes * 60 / buckets
    root = Path(__file__).resolve().parents[1]
    with ServerProcess() as server:
        http = server.url

        async def setup() -> None:
            async with aiosb.connect(f"{http}/{NAMESPACE}") as ns:
                for queue in (SEND_QUEUE, RECEIVE_QUEUE):
                    await ns.create_queue(queue)

        asyncio.run(setup())
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "benchmarks.soak", "--pattern", name, "--http", http,
                 "--amqp", server.amqp_connection_string,
                 "--nice", str(streaming_nice if name == "http-streaming" else 0)],
                cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for name in (*PATTERNS, KEEPER)
        }
        try:
            for name, proc in procs.items():
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"the {name} pattern did not start (exit {proc.wait()})")
            start = time.time() + 0.5
            for proc in procs.values():
                assert proc.stdin is not None
                proc.stdin.write(f"{start!r} {bucket!r} {buckets}\n")
                proc.stdin.flush()
            time.sleep(max(0.0, start - time.time()))
            cpu0 = _tree_cpu_seconds(server.pid) or 0.0
            rss: list[float] = []
            cores: list[float] = []
            for k in range(buckets):
                time.sleep(max(0.0, start + (k + 1) * bucket - time.time()))
                cpu1 = _tree_cpu_seconds(server.pid) or 0.0
                rss.append(_rss_mb(server.pid))
                cores.append((cpu1 - cpu0) / bucket)
                cpu0 = cpu1
            counts: dict[str, list[float]] = {}
            for name, proc in procs.items():
                out, _ = proc.communicate(timeout=60 + bucket)
                if proc.returncode:
                    raise RuntimeError(f"the {name} pattern failed (exit {proc.returncode})")
                counts[name] = json.loads(out.strip().splitlines()[-1])["counts"]
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    rates = {name: [c / bucket for c in counts[name]] for name in PATTERNS}
    for name, values in rates.items():
        if not values[0]:  # no ratio to judge: a run that failed to start is no PASS
            raise RuntimeError(f"the {name} pattern moved nothing in the first minute")
    rows = [{"minute": k + 1, **{f"{name} msgs/s": rates[name][k] for name in PATTERNS},
             "server_rss_mb": rss[k], "server_cpu_cores": cores[k]} for k in range(buckets)]
    checks = [
        check("#50", f"{name}: each of the last 3 minutes' rate / the first minute's",
              [rate / rates[name][0] for rate in rates[name][-3:]], HOLD,
              unit="ratio")
        for name in PATTERNS
    ]
    checks.append(check("#50", "server RSS at the end of each of the last 3 minutes / at "
                        "the end of minute 2", [r / rss[1] for r in rss[-3:]], FLAT,
                        at_most=True, unit="ratio"))
    summary: dict[str, Any] = {"minutes": minutes, "buckets": buckets,
                               "bucket_seconds": bucket, "streaming_nice": streaming_nice}
    for name in PATTERNS:
        summary[f"{name}_first_msgs_per_s"] = rates[name][0]
        summary[f"{name}_last_msgs_per_s"] = rates[name][-1]
    summary["server_rss_mb_minute_2"] = rss[1]
    summary["server_rss_mb_last"] = rss[-1]
    summary["keeper_rounds"] = sum(counts[KEEPER])
    return rows, summary, checks


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="how long all the patterns run, at once (default 10)")
    parser.add_argument("--buckets", type=int, default=None,
                        help="the run's \"minutes\": the rates and RSS a bucket (default: "
                        "max(5, minutes); at least 5: minute 2 and the last three)")
    parser.add_argument("--streaming-nice", type=int, default=STREAMING_NICE,
                        help="the niceness of the HTTP streaming client's process (0: the "
                        "same priority as the SDK clients')")
    parser.add_argument("--pattern", choices=(*PATTERNS, KEEPER), help=argparse.SUPPRESS)
    parser.add_argument("--nice", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--http", help=argparse.SUPPRESS)
    parser.add_argument("--amqp", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pattern:
        _pattern_main(args.pattern, args.http, args.amqp, args.nice)
        return {}
    buckets = args.buckets or max(5, round(args.minutes))
    if buckets < 5:
        parser.error("--buckets must be at least 5 (minute 2 and the last three are judged)")
    rows, summary, checks = soak(args.minutes, buckets, args.streaming_nice)
    report("soak", f"#50: {args.minutes:g} minutes of the SDK's one-at-a-time patterns and "
           f"HTTP streaming at once, against one aiosb serve (in memory), a row a "
           f"{summary['bucket_seconds']:g} s \"minute\"", rows, summary, checks)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
