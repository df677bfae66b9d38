"""S-3, S-4 and S-9: the HTTP transport against the emulator server.

* S-3: single-message sends through ``aiosb.connect("http://...")`` to ``aiosb serve``,
  against a bare aiohttp POST endpoint (read the body, answer 201) driven by a bare
  aiohttp client with the same body, the same concurrency, in the same run. Target: at
  least 0.6 times the bare rate.
* S-4: batches of 100 messages sent, received (peek-lock) and completed over HTTP.
  Target: at least 50,000 messages/s. Measured two ways: round trips (send a batch,
  receive it, complete it, then the next: one request at a time, so latency-bound),
  and streaming, as an application runs: producers and consumers at the same time,
  ``--in-flight`` of each (throughput: messages/s sent and received and completed).
* S-9: both on asyncio's loop and on uvloop; the ratio is reported.
* S-10, durable mode (#39): S-4 streaming against ``aiosb serve --data-dir`` beside an
  in-memory ``aiosb serve``, run by run in turn, with each server's CPU per batch and
  the durable one's journal writes (group commits) per second. Target: durable at
  least 0.5 times in-memory, on the worst run. Measured quiet and again under
  contention (#50: ``--contention N`` busy processes, 1 by default, each a Python loop
  spinning at normal priority: :class:`~._harness.BusyLoad`), each load judged on its
  own; the rows give, per load, the durable server's serving process and its journal
  writer apart, the client's CPU, the cores each held and the busy processes' cores.
  What sets the ratio is the CPU a batch of the whole chain (client, serving process,
  writer) in the CPU the other work leaves: durable costs the serving process about
  1.25 ms a batch against 0.8 in memory and the writer about 0.33 (the client about
  0.47 either way), whether the machine is quiet or not; the ratio falls where the load
  changes between the two runs of a pair, not under steady contention.

S-3 and S-4 run with server and client in one process and one loop, as in the
conformance suite, so that the bare reference is measured the same way. S-4 is also
measured against a separate ``aiosb serve`` process (what the spec's "against aiosb
serve" describes, and how Spark executors use it): client and server then each have a
core. Against that process the benchmark also reads the CPU seconds both processes
spent per batch of 100 (from ``/proc``, on Linux): on a shared machine those vary far
less than the wall-clock rates, so they show what a change to the code did.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
from collections.abc import Iterator
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

import aiosb
from aiosb import Message, emulator
from aiosb.server.http import serve
from aiosb.server.process import ServerProcess

from ._harness import (
    MIN_RUNS,
    BusyLoad,
    Stopwatch,
    best_rate,
    check,
    child_pids,
    cpu_seconds,
    loops,
    report,
    round_trips,
    run,
)

BATCH = 100
BODY = b"x" * 64


async def _spread(count: int, concurrency: int, one) -> None:
    """Run ``one()`` ``count`` times, ``concurrency`` at a time."""
    per, extra = divmod(count, concurrency)

    async def worker(n: int) -> None:
        for _ in range(n):
            await one()

    await asyncio.gather(*(worker(per + (i < extra)) for i in range(concurrency)))


async def bare_aiohttp(count: int, concurrency: int) -> float:
    """The reference: a bare aiohttp endpoint and client, nothing else."""

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=201)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/bench/q/messages"
    try:
        async with aiohttp.ClientSession() as session:

            async def one() -> None:
                async with session.post(url, data=BODY) as response:
                    await response.read()
                    assert response.status == 201

            await one()  # warm the connection pool
            with Stopwatch() as sw:
                await _spread(count, concurrency, one)
    finally:
        await runner.cleanup()
    return sw.seconds


async def aiosb_single_sends(count: int, concurrency: int) -> float:
    async with serve() as server, aiosb.connect(server.namespace_url("bench")) as ns:
        if not await ns.queue_exists("q"):
            await ns.create_queue("q")
        async with ns.sender("q") as sender:
            message = Message(BODY)

            async def one() -> None:
                await sender.send(message)

            await one()
            with Stopwatch() as sw:
                await _spread(count, concurrency, one)
    return sw.seconds


async def aiosb_batches(rounds: int) -> float:
    async with serve() as server:
        return await aiosb_batches_at(server.namespace_url("bench"), rounds)


async def aiosb_batches_at(url: str, rounds: int) -> float:
    """S-4 against a server that runs elsewhere (``url`` is a namespace URL)."""
    messages = [Message(BODY, application_properties={"i": i}) for i in range(BATCH)]
    async with aiosb.connect(url) as ns:
        return await round_trips(ns, "q", messages, rounds)


async def aiosb_streaming(rounds: int, in_flight: int) -> float:
    async with serve() as server:
        return await aiosb_streaming_at(server.namespace_url("bench"), rounds, in_flight)


async def aiosb_streaming_at(url: str, rounds: int, in_flight: int) -> float:
    """Seconds for ``in_flight`` producers to send ``rounds`` batches while as many
    consumers receive (peek-lock, long polls) and complete every message."""
    messages = [Message(BODY, application_properties={"i": i}) for i in range(BATCH)]
    total = rounds * BATCH
    async with aiosb.connect(url) as ns:
        if not await ns.queue_exists("q"):
            await ns.create_queue("q")
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            received = completed = 0
            done = asyncio.Event()  # every message completed, or a consumer failed

            async def produce() -> None:
                await sender.send(messages)

            async def consume() -> None:
                nonlocal received, completed
                try:
                    while received < total:
                        got = await receiver.receive(max_messages=BATCH, max_wait=5)
                        if got:
                            received += len(got)
                            await receiver.complete(got)
                            completed += len(got)
                            if completed >= total:  # not received: others may still complete
                                done.set()
                except Exception:
                    done.set()
                    raise

            with Stopwatch() as sw:
                consumers = [asyncio.ensure_future(consume()) for _ in range(in_flight)]
                try:
                    await _spread(rounds, in_flight, produce)
                    await done.wait()
                finally:
                    for task in consumers:
                        task.cancel()
                    ended = await asyncio.gather(*consumers, return_exceptions=True)
                for result in ended:
                    if isinstance(result, Exception):
                        raise result
        left = (await ns.runtime_properties("q")).total_message_count
    if received != total or left:
        raise AssertionError(f"sent {total}, received {received}, {left} left")
    return sw.seconds


#: CPU seconds (user + system) of a process so far (``None``: this one), from ``/proc``.
_cpu_seconds = cpu_seconds


def _tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of process ``pid`` and of its children so far (a durable server's
    journal writer is a process of its own: its work is the server's), from ``/proc``."""
    total = _cpu_seconds(pid)
    if total is None:
        return None
    for child in child_pids(pid):
        total += _tree_cpu_seconds(child) or 0.0
    return total


class _Served(NamedTuple):
    """An ``aiosb serve`` process: its base URL and process id."""

    url: str
    pid: int


@contextlib.contextmanager
def served_elsewhere() -> Iterator[_Served]:
    """An ``aiosb serve`` process on a free port (quiet: a line per request would cost
    the server CPU; HTTP only), stopped with SIGTERM."""
    with ServerProcess(args=["--no-amqp"]) as server:
        yield _Served(server.url, server.pid)


def _elsewhere(served: _Served, name: str, rounds: int, runs: list[Any], loop: str
               ) -> tuple[dict[str, float], list[float]]:
    """Run each of ``runs`` (``run(url)`` -> coroutine) against ``served`` and give the
    best and median rates, with the CPU milliseconds per batch of the server process and
    of this one (the client) in the fastest run; and the rate of each run."""
    timings, cpu = [], []
    for i, one in enumerate(runs):
        server0, client0 = _tree_cpu_seconds(served.pid), _cpu_seconds()
        timings.append(run(lambda one=one, i=i: one(f"{served.url}/{name}{i}"), loop))
        server1, client1 = _tree_cpu_seconds(served.pid), _cpu_seconds()
        cpu.append(None if server0 is None else (server1 - server0, client1 - client0))
    out = best_rate(rounds * BATCH, timings)
    fastest = cpu[timings.index(min(timings))]
    if fastest is not None:
        out["server_ms_per_batch"] = 1000 * fastest[0] / rounds
        out["client_ms_per_batch"] = 1000 * fastest[1] / rounds
    return out, [rounds * BATCH / t for t in timings]


async def _journal_writes(url: str) -> float:
    """The durable server's group commits so far (``aiosb_journal_writes_total``)."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as answer:
        text = await answer.text()
    for line in text.splitlines():
        if line.startswith("aiosb_journal_writes_total "):
            return float(line.split()[1])
    raise RuntimeError(f"{url} reports no journal writes: is it durable (--data-dir)?")


#: The servers S-10 compares, in the order each round runs them: in memory, durable by
#: default (``synchronous=NORMAL``: survives the process being killed; judged), durable
#: with ``--fsync`` (``synchronous=FULL``: survives the machine crashing; reported).
_S10_SERVERS = (("in memory", None), ("durable", []), ("durable --fsync", ["--fsync"]))


def _load_name(busy: int) -> str:
    """How a set of S-10 runs is loaded: ``quiet`` or ``N busy process(es)``."""
    return "quiet" if not busy else f"{busy} busy process{'es' if busy > 1 else ''}"


def durable_beside_memory(rounds: int, in_flight: int, repeat: int, loop: str,
                          contention: int = 0
                          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """S-4 streaming against an in-memory ``aiosb serve``, a durable one and a durable
    one with ``--fsync``, in turn, round by round: rows (rates, server CPU per batch,
    commits per second; the durable ones' ratios to in memory, run by run) and the
    S-10 check, on the default durable mode (``--fsync``'s ratio is reported, not
    judged: #39).

    With ``contention`` (#50), each round runs the three servers quiet and then again
    under a competing CPU load (:class:`~._harness.BusyLoad`: that many busy processes,
    started for those runs and stopped after them), and S-10 is judged on each load
    apart. The rows say per load where the CPU went: the durable server's serving
    process and its journal writer apart (milliseconds per batch of 100), the cores the
    server held while it ran (its CPU seconds over the run's wall seconds), the busy
    processes' cores, and the group commits (frames the writer answered) per second and
    messages per commit."""
    import tempfile

    loads = [0, contention] if contention else [0]
    keys = [(busy, name) for busy in loads for name, _ in _S10_SERVERS]
    samples: dict[tuple[int, str], dict[str, list[float]]] = {
        key: {"rate": [], "server_ms": [], "serving_ms": [], "writer_ms": [], "cores": [],
              "client_ms": [], "client_cores": [], "commits": [], "busy_cores": []}
        for key in keys}
    with contextlib.ExitStack() as stack:
        servers = []
        for name, extra in _S10_SERVERS:
            args = ["--no-amqp"]
            if extra is not None:
                data = stack.enter_context(tempfile.TemporaryDirectory(prefix="aiosb-bench-"))
                args += ["--metrics", "--data-dir", data, *extra]
            servers.append((name, extra is not None,
                            stack.enter_context(ServerProcess(args=args))))
        for i in range(repeat):
            for busy in loads:
                with BusyLoad(busy) as load:
                    for name, durable, server in servers:
                        one = samples[(busy, name)]
                        url = f"{server.url}/dur{i}b{busy}"
                        writes0 = run(lambda s=server: _journal_writes(s.url)) if durable else 0
                        main0, tree0 = _cpu_seconds(server.pid), _tree_cpu_seconds(server.pid)
                        client0 = _cpu_seconds()
                        seconds = run(lambda url=url: aiosb_streaming_at(url, rounds, in_flight),
                                      loop)
                        main1, tree1 = _cpu_seconds(server.pid), _tree_cpu_seconds(server.pid)
                        client1 = _cpu_seconds()
                        one["rate"].append(rounds * BATCH / seconds)
                        if None not in (main0, tree0, main1, tree1, client0, client1):
                            client = client1 - client0
                            one["client_ms"].append(1000 * client / rounds)
                            one["client_cores"].append(client / seconds)
                            tree = tree1 - tree0
                            main_cpu = main1 - main0
                            one["server_ms"].append(1000 * tree / rounds)
                            one["serving_ms"].append(1000 * main_cpu / rounds)
                            one["writer_ms"].append(1000 * (tree - main_cpu) / rounds)
                            one["cores"].append(tree / seconds)
                        if durable:
                            writes = run(lambda s=server: _journal_writes(s.url)) - writes0
                            one["commits"].append(writes / seconds)
                share = load.cpu_share()
                if busy and share is not None:
                    for name, _ in _S10_SERVERS:
                        samples[(busy, name)]["busy_cores"].append(share)
    rows: list[dict[str, Any]] = []
    checks = []
    for busy, name in keys:
        one = samples[(busy, name)]
        values = one["rate"]
        memory = samples[(busy, "in memory")]["rate"]
        suffix = f", {_load_name(busy)}" if contention else ""
        row: dict[str, Any] = {
            "case": f"S-4 streaming x{in_flight}, aiosb serve {name}{suffix}", "loop": loop,
            "min_per_s": min(values), "median_per_s": statistics.median(values),
            "max_per_s": max(values)}
        if name != "in memory":  # the ratio run by run: min / median / max
            ratios = [d / m for d, m in zip(values, memory, strict=True)]
            row["ratio_to_memory"] = (f"{min(ratios):.2f} / {statistics.median(ratios):.2f}"
                                      f" / {max(ratios):.2f}")
        if one["server_ms"]:
            row["server_ms_per_batch"] = min(one["server_ms"])
            row["server_cores"] = statistics.median(one["cores"])
            if name != "in memory":  # the serving process and its writer apart
                row["serving_ms_per_batch"] = min(one["serving_ms"])
                row["writer_ms_per_batch"] = min(one["writer_ms"])
            row["client_ms_per_batch"] = min(one["client_ms"])
            row["client_cores"] = statistics.median(one["client_cores"])
        if one["commits"]:
            row["commits_per_s"] = statistics.median(one["commits"])
            row["messages_per_commit"] = (statistics.median(values)
                                          / max(row["commits_per_s"], 1e-9))
        if one["busy_cores"]:
            row["busy_cores"] = statistics.median(one["busy_cores"])
        rows.append(row)
        # Judged: the default durable mode, on each load. With --fsync the ratio is in
        # its row (reported, not judged: #39).
        if name == "durable":
            under = f", under contention ({_load_name(busy)})" if busy else ""
            checks.append(check(
                "S-10", f"S-4 streaming x{in_flight}: durable / in memory, run by run"
                f"{under} [{loop}]",
                [d / m for d, m in zip(values, memory, strict=True)], 0.5, unit="ratio"))
    return rows, checks


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sends", type=int, default=5_000, help="single sends for S-3")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--messages", type=int, default=50_000, help="messages for S-4")
    parser.add_argument("--in-flight", type=int, default=4,
                        help="S-4 streaming: producers, and as many consumers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--durable-messages", type=int, default=200_000,
                        help="messages a run of S-10 streams (a run of 50,000 lasts half a "
                        "second in memory: such runs moved 52k-113k msg/s in one invocation)")
    parser.add_argument("--contention", type=int, default=1, metavar="N",
                        help="S-10 is measured quiet and again with N busy processes "
                        "competing for the CPU (each a Python loop spinning at normal "
                        "priority, started for those runs: 1 takes half of a 2-core "
                        "machine, the realistic case); 0: quiet only")
    parser.add_argument("--durable-only", action="store_true",
                        help="run only S-10, durable mode beside in memory (results in "
                        "http-durable.json)")
    args = parser.parse_args(argv)
    args.repeat = max(args.repeat, MIN_RUNS)
    rounds = args.messages // BATCH
    durable_rounds = args.durable_messages // BATCH
    count = rounds * BATCH
    rows = []
    summary: dict[str, float] = {}
    checks = []
    if args.durable_only:
        for loop in loops():
            durable_rows, durable_checks = durable_beside_memory(
                durable_rounds, args.in_flight, args.repeat, loop, args.contention)
            rows += durable_rows
            checks += durable_checks
        report("http-durable", f"S-10: S-4 streaming ({durable_rounds * BATCH:,} messages in "
               f"batches "
               f"of {BATCH}, {args.in_flight} producers + consumers), durable beside in memory"
               + (f", quiet and under contention ({_load_name(args.contention)})"
                  if args.contention else ""),
               rows, summary, checks)
        return summary
    for loop in loops():
        emulator.reset()
        # S-3: bare and aiosb interleaved, one ratio per round, so load that comes and
        # goes on a shared machine falls on both sides of each ratio.
        bare_t, single_t = [], []
        for _ in range(args.repeat):
            bare_t.append(run(lambda: bare_aiohttp(args.sends, args.concurrency), loop))
            single_t.append(run(lambda: aiosb_single_sends(args.sends, args.concurrency), loop))
        bare, single = best_rate(args.sends, bare_t), best_rate(args.sends, single_t)
        checks.append(check("S-3", f"HTTP single sends / bare aiohttp [{loop}]",
                            [b / s for b, s in zip(bare_t, single_t, strict=True)], 0.6,
                            unit="ratio"))
        emulator.reset()
        batches_t = [run(lambda: aiosb_batches(rounds), loop) for _ in range(args.repeat)]
        streaming_t = [
            run(lambda: aiosb_streaming(rounds, args.in_flight), loop)
            for _ in range(args.repeat)
        ]
        batches, streaming = best_rate(count, batches_t), best_rate(count, streaming_t)
        emulator.reset()
        with served_elsewhere() as served:
            elsewhere, elsewhere_rates = _elsewhere(served, "rt", rounds, [
                lambda url: aiosb_batches_at(url, rounds) for _ in range(args.repeat)
            ], loop)
            streaming_elsewhere, streaming_elsewhere_rates = _elsewhere(served, "st", rounds, [
                lambda url: aiosb_streaming_at(url, rounds, args.in_flight)
                for _ in range(args.repeat)
            ], loop)
        for case, rates in (
            ("round trips, in process", [count / t for t in batches_t]),
            ("round trips, aiosb serve process", elsewhere_rates),
            (f"streaming x{args.in_flight}, in process", [count / t for t in streaming_t]),
            (f"streaming x{args.in_flight}, aiosb serve process", streaming_elsewhere_rates),
        ):
            checks.append(check("S-4", f"{case} [{loop}]", rates, 50_000, unit="msgs/s"))
        rows.append({"case": "S-3 bare aiohttp POST", "loop": loop, **bare})
        rows.append({"case": "S-3 aiosb HTTP single sends", "loop": loop, **single})
        rows.append({"case": "S-4 aiosb HTTP batches of 100 (send+receive+complete)",
                     "loop": loop, **batches})
        rows.append({"case": "S-4 the same against an aiosb serve process",
                     "loop": loop, **elsewhere})
        rows.append({"case": f"S-4 streaming, {args.in_flight} producers + consumers",
                     "loop": loop, **streaming})
        rows.append({"case": "S-4 streaming against an aiosb serve process",
                     "loop": loop, **streaming_elsewhere})
        summary[f"s3_{loop}_bare_per_s"] = bare["best_per_s"]
        summary[f"s3_{loop}_aiosb_per_s"] = single["best_per_s"]
        summary[f"s3_{loop}_ratio_to_bare"] = single["best_per_s"] / bare["best_per_s"]
        summary[f"s4_{loop}_msgs_per_s"] = batches["best_per_s"]
        summary[f"s4_{loop}_serve_process_msgs_per_s"] = elsewhere["best_per_s"]
        summary[f"s4_{loop}_streaming_msgs_per_s"] = streaming["best_per_s"]
        summary[f"s4_{loop}_streaming_serve_process_msgs_per_s"] = (
            streaming_elsewhere["best_per_s"]
        )
        durable_rows, durable_checks = durable_beside_memory(
            durable_rounds, args.in_flight, args.repeat, loop, args.contention)
        rows += durable_rows
        checks += durable_checks
    if "uvloop" in loops():
        summary["s9_s3_uvloop_over_asyncio"] = (
            summary["s3_uvloop_aiosb_per_s"] / summary["s3_asyncio_aiosb_per_s"]
        )
        summary["s9_s4_uvloop_over_asyncio"] = (
            summary["s4_uvloop_msgs_per_s"] / summary["s4_asyncio_msgs_per_s"]
        )
    summary["s3_target_ratio"] = 0.6
    summary["s4_target_msgs_per_s"] = 50_000
    report(
        "http",
        f"S-3/S-4/S-9: {args.sends:,} single sends (concurrency {args.concurrency}), "
        f"{rounds * BATCH:,} messages in batches of {BATCH}",
        rows,
        summary,
        checks,
    )
    return summary


if __name__ == "__main__":
    main()
