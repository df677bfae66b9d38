"""A whole machine (#50): what serving from two processes would give on this machine.

``aiosb serve`` runs its front ends on one thread, so one core is its ceiling (0.91-0.96
of a core driven by rhea in #50). Spreading the serving over processes would need the
broker's state shared or split between them; before building any of that, this measures
the most it could give: the same load against **one** ``aiosb serve`` and against
**two** independent ones (each its own process, ports and namespaces: a perfect split,
with no cost for sharing anything), on the same machine.

The load is S-4 streaming (:func:`benchmarks.http.aiosb_streaming_at`: ``--in-flight``
producers sending batches of 100 over HTTP while as many consumers receive them,
peek-lock, and complete them), from ``--clients`` client processes at once (2 by
default), each on a queue of its own. With one server every client drives it; with two,
client ``i`` drives server ``i % 2``. The clients run on the same cores as the servers:
that is the point for a test server, whose clients (the tests) always share the machine
with it. Each client gets ready (connected, its queue made), then all start together;
the aggregate rate is every message sent, received and completed over the time from
the first start to the last end. Both set-ups run in turn, run by run, and the ratio
two / one is taken run by run; each run also reports the CPU cores the servers and the
clients held (CPU seconds over the run's wall seconds, from ``/proc``).

Judged (the verdict on the worst run): two processes are *worth their complexity for a
test server* only if they give at least :data:`WORTH` times the aggregate rate of one.
The check is that one process is enough: the ratio two / one **at most** :data:`WORTH`,
judged on the run most favourable to two processes (the maximum); a MISS would say
that splitting the serving is worth building. That bar is high on purpose: the gain
measured here is an upper bound (two servers that share nothing), and what it would cost
is not small (a namespace's entities split between processes, or a broker whose state
lives outside its process; forwarding, sessions and transactions across them; two
processes to start, stop and watch).

What bounds the ratio: with ``S`` the server's CPU a message and ``C`` the clients', two
servers on 2 cores can reach at most ``2 / (S + C)`` messages a second, one server at
most ``min(1 / S, 2 / (S + C))``, so the most two can give over one is ``2S / (S + C)``
where the server costs more than the clients, and nothing where the clients cost as
much as it or more. S-4 streaming costs the server about 8 µs a message and its Python
client about 4.5 (``http.json``): at most about 1.3, if the machine were idle. The
official SDK's one-at-a-time patterns cost their client about 270-300 µs a message
against the server's 100 (#50, ``amqp.json``): the clients are the limit, and a second
server gives nothing. A client cheaper than the server (rhea pipelined, in Node) would
gain the most, still under 2.

Measured while developing (2 cores shared with other work, 2 clients of 4 producers + 4
consumers, 100,000 messages each, uvloop): one server held 0.97 of a core (saturated)
at 117,000-122,000 messages/s, the two clients 0.58 of a core together; two servers
held 1.07 cores together, the clients 0.60, at 116,000-131,000 messages/s: ratio 0.99
/ 1.02 / 1.07 (min / median / max); at the defaults (200,000 messages a client, about
30 s in all) 1.06 / 1.13 / 1.15, one server at 0.78 of a core, two at 0.88 together,
the clients at 0.46 either way. The machine was full either way (what other work
left of it): on 2 cores a second server has no core of its own, and what it gains it
takes from the clients. **Verdict: not worth its complexity for a test server**, whose
clients (the tests, the SDK) share its machine and cost it as much CPU as it spends,
or more; it would pay only on a machine with cores to spare beyond the clients'.

    ./dev bench processes                       # 3 runs of 200,000 a client: about a minute
    ./dev bench processes --messages 20000      # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiosb
from aiosb.server.process import ServerProcess

from ._harness import MIN_RUNS, check, cpu_seconds, loops, report, run
from .http import BATCH, _tree_cpu_seconds, aiosb_streaming_at

#: The aggregate rate two server processes must reach, as a multiple of one's, to be
#: worth building for a test server (judged on the run most favourable to them).
WORTH = 1.5

ROOT = Path(__file__).resolve().parent.parent


def _drive(url: str, messages: int, in_flight: int, loop: str) -> None:
    """A client process: get ready (connect, make the queue), say ``ready``, wait for
    ``go`` on standard input, stream, then print what it did as JSON (start and end on
    the machine's monotonic clock, which every process shares; its CPU seconds)."""
    async def prepare() -> None:
        async with aiosb.connect(url) as ns:
            if not await ns.queue_exists("q"):
                await ns.create_queue("q")

    run(prepare, loop)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    cpu0 = cpu_seconds() or 0.0
    start = time.monotonic()
    run(lambda: aiosb_streaming_at(url, messages // BATCH, in_flight), loop)
    end = time.monotonic()
    print(json.dumps({"start": start, "end": end,
                      "cpu": (cpu_seconds() or 0.0) - cpu0}), flush=True)


def _clients(urls: list[str], messages: int, in_flight: int, loop: str
             ) -> tuple[float, float]:
    """Run a client process on each of ``urls`` at once: (wall seconds from the first
    start to the last end, the clients' CPU seconds)."""
    procs = [subprocess.Popen(
        [sys.executable, "-m", "benchmarks.processes", "--drive", url,
         "--messages", str(messages), "--in-flight", str(in_flight), "--loop", loop],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for url in urls]
    try:
        for proc in procs:  # every one ready before any starts
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a client did not get ready: {line!r}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        done = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode:
                raise RuntimeError(f"a client failed (exit code {proc.returncode})")
            done.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = max(d["end"] for d in done) - min(d["start"] for d in done)
    return wall, sum(d["cpu"] for d in done)


def _servers_cpu(servers: list[ServerProcess]) -> float | None:
    total = 0.0
    for server in servers:
        seconds = _tree_cpu_seconds(server.pid)
        if seconds is None:
            return None
        total += seconds
    return total


def one_against_two(messages: int, clients: int, in_flight: int, repeat: int, loop: str
                    ) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """``clients`` client processes streaming ``messages`` each against one ``aiosb
    serve`` and against two, in turn, ``repeat`` times: rows, summary, the check."""
    keys = ("1 server process", "2 server processes")
    samples: dict[str, dict[str, list[float]]] = {
        key: {"rate": [], "server_cores": [], "client_cores": []} for key in keys}
    with ServerProcess(args=["--no-amqp"]) as first, \
            ServerProcess(args=["--no-amqp"]) as second:
        for i in range(repeat):
            for key, servers in zip(keys, ([first], [first, second]), strict=True):
                urls = [f"{servers[c % len(servers)].url}/p{i}s{len(servers)}c{c}"
                        for c in range(clients)]
                cpu0 = _servers_cpu(servers)
                wall, client_cpu = _clients(urls, messages, in_flight, loop)
                cpu1 = _servers_cpu(servers)
                one = samples[key]
                one["rate"].append(clients * (messages // BATCH) * BATCH / wall)
                if cpu0 is not None and cpu1 is not None:
                    one["server_cores"].append((cpu1 - cpu0) / wall)
                one["client_cores"].append(client_cpu / wall)
    rows = []
    for key in keys:
        one = samples[key]
        row: dict[str, Any] = {
            "case": f"{clients} clients of S-4 streaming x{in_flight}, {key}", "loop": loop,
            "min_per_s": min(one["rate"]), "median_per_s": statistics.median(one["rate"]),
            "max_per_s": max(one["rate"])}
        if one["server_cores"]:
            row["server_cores"] = statistics.median(one["server_cores"])
        row["client_cores"] = statistics.median(one["client_cores"])
        rows.append(row)
    ratios = [two / one for one, two in zip(samples[keys[0]]["rate"], samples[keys[1]]["rate"],
                                            strict=True)]
    summary = {"ratio_min": min(ratios), "ratio_median": statistics.median(ratios),
               "ratio_max": max(ratios), "worth_target": WORTH,
               "verdict": ("worth it" if max(ratios) > WORTH
                           else "not worth its complexity for a test server")}
    return rows, summary, [check(
        "whole machine", f"aggregate rate, 2 server processes / 1, run by run: one process "
        f"is enough [{loop}]", ratios, WORTH, at_most=True, unit="ratio")]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages each client streams a run")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--in-flight", type=int, default=4,
                        help="each client's producers, and as many consumers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loop", choices=loops(), default=loops()[-1],
                        help="the clients' event loop (the servers run aiosb serve's "
                        "default: uvloop where installed)")
    parser.add_argument("--drive", metavar="URL", help=argparse.SUPPRESS)  # a client
    args = parser.parse_args(argv)
    if args.drive:
        _drive(args.drive, args.messages, args.in_flight, args.loop)
        return {}
    repeat = max(args.repeat, MIN_RUNS)
    rows, summary, checks = one_against_two(args.messages, args.clients, args.in_flight,
                                            repeat, args.loop)
    report("processes", f"A whole machine: {args.clients} clients streaming "
           f"{args.messages:,} messages each against 1 and 2 aiosb serve processes",
           rows, summary, checks)
    return summary


if __name__ == "__main__":
    main()
