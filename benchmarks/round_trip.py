"""The floor under one message at a time (#50): what a bare round trip costs a server.

A client that waits for each answer before it sends again (the official SDK's one
message a send, each awaited; a completion awaited before the next) costs the server a
round trip a message however little it does with the message: it wakes in the kernel's
wait (``epoll``), reads the frame, writes the answer. A server that pipelines pays
these once for many messages. This measures that floor on this machine, in the same
run as the cases it bounds: a bare echo server, on the event loop ``aiosb serve`` runs
(uvloop where installed, as ``--loop auto``), in a process of its own, answering each
frame of an SDK transfer's size with a disposition's (:data:`REQUEST`, :data:`ANSWER`
bytes), one at a time; its CPU per round trip comes from ``/proc``, as the server's
does. No server on this loop answers a message with less.

So a target of the form "one message at a time costs the server at most ``k`` times
what a pipelining client's message costs" cannot be met by a server that does the same
work on a message where ``(pipelined + round trip) / pipelined`` is over ``k``: one at a
time the work on a message is no less, and the round trip comes on top. :func:`bound`
gives that least ratio (for this server's pipelined cost: a server slower pipelined
would show a smaller one); ``./dev bench amqp`` reports it beside its #50 checks, the
round trips paced as the SDK's sends were. ``python -m benchmarks.round_trip`` prints
the floor alone (``--pace`` requests a second; ``--busy N`` beside N spinning
processes).

The same run also measures the cold factor (:func:`measure`): the bare server is asked,
in blocks taken in turn, for plain round trips and for round trips on which it does a
slice of ``aiosb serve``'s own work on an SDK message (:func:`_work`: the transfer's
payload read into columns and checked); the worked ones' cost above the plain ones',
over what that work takes in a loop in the same process, is the factor. A message that
comes alone finds the server's caches and branch predictors cold (the process slept,
or another ran), and the same Python takes a few times as long as in the loop a
pipelining client keeps hot; so one message at a time costs a server about ``cold *
work + round trip``. An estimate, not a floor: the factor is measured on one slice of
the work, and a pipelined cost holds more than the work.
"""

from __future__ import annotations

import argparse
import asyncio
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from ._harness import BusyLoad, cpu_seconds

__all__ = ["BareServer", "Floor", "bound", "measure", "round_trips"]

#: Bytes a round trip's request and answer carry: an SDK transfer of a 100-byte
#: message (what ``ServiceBusMessage`` puts on the wire), and a disposition.
REQUEST = 250
ANSWER = 30
#: The payload of the aio SDK's (7.15) transfer of ``ServiceBusMessage(b"x" * 100)``:
#: its properties (a message id, a uuid string, and twelve nulls), then its body, one
#: data section.
SDK_PAYLOAD = (b"\x00Ss\xc0\x33\x0d\xa1\x24" + b"257b15d1-00ac-4c4c-acbc-1651a70bc733"
               + b"\x40" * 12 + b"\x00Su\xa0\x64" + b"x" * 100)
#: Times the work is done in a loop, to time it hot.
_HOT = 20_000


def _work() -> None:
    """A slice of what ``aiosb serve`` does with each message sent to it (the front end's
    ``_deliver``): :data:`SDK_PAYLOAD` read into columns and checked, as a transfer's."""
    from aiosb.protocol import check_columns
    from aiosb.server.amqp._batch_columns import read_columns

    read = read_columns(SDK_PAYLOAD, 0)
    assert read is not None
    bodies, columns, _ = read
    check_columns(bodies, columns)


def serve(work: bool = False) -> None:
    """The bare server (in its own process): print the port, and with ``work`` the CPU
    microseconds :func:`_work` takes in a loop (else 0); answer every read with
    :data:`ANSWER` bytes (with ``work``, after doing :func:`_work` once) until stdin
    closes."""
    try:
        import uvloop
    except ImportError:  # as aiosb serve's --loop auto: asyncio where uvloop is missing
        uvloop = None

    answer = b"a" * ANSWER
    hot = 0.0
    if work:
        for _ in range(_HOT // 10):  # imported, and warm
            _work()
        started = time.process_time()
        for _ in range(_HOT):
            _work()
        hot = 1e6 * (time.process_time() - started) / _HOT

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            if work and data[:1] == WORKED[:1]:
                _work()
            self.transport.write(answer)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], hot, flush=True)
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes it
        server.close()

    if uvloop is not None:
        uvloop.run(main())
    else:
        asyncio.run(main())


#: Seconds the bare server has to start, and to answer a round trip, before the
#: benchmark gives up on it (a stopped process never hangs the benchmark).
PATIENCE = 30.0


class BareServer:
    """``with BareServer() as bare``: the bare server's process (``bare.pid``,
    ``bare.port``); it ends when the block does. With ``work``, it does :func:`_work`
    once a round trip, and ``bare.hot`` is what that takes in a loop (µs)."""

    def __init__(self, work: bool = False) -> None:
        self.work = work
        self.hot = 0.0

    def __enter__(self) -> BareServer:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.round_trip",
             "--serve-work" if self.work else "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parent.parent)  # where `benchmarks` is
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], PATIENCE)
        line = self._process.stdout.readline() if ready else ""
        said = line.split()
        if len(said) != 2 or not said[0].isdigit():
            self.__exit__()
            raise RuntimeError(f"the bare server did not start within {PATIENCE:g} s: "
                               f"{line!r}")
        self.port, self.hot = int(said[0]), float(said[1])
        self.pid = self._process.pid
        return self

    def __exit__(self, *exc: object) -> None:
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def _cpu(pid: int) -> float | None:
    """Seconds process ``pid`` has run on a CPU: ``/proc/PID/schedstat``'s nanoseconds
    (a floor of a few milliseconds a run is lost in ``stat``'s 10 ms ticks), else
    ``stat``'s, else ``None``."""
    try:
        with open(f"/proc/{pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return cpu_seconds(pid)


#: A request that asks a server with ``work`` to do :func:`_work` (any other: not).
WORKED = b"w" * REQUEST
_PLAIN = b"r" * REQUEST


class _Client:
    """A connection to a bare server (warmed by 100 round trips), asking one at a time."""

    def __init__(self, bare: BareServer) -> None:
        self._bare = bare
        self._sock = socket.create_connection(("127.0.0.1", bare.port), timeout=PATIENCE)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(100):
            self._one(_PLAIN)

    def _one(self, request: bytes) -> None:
        self._sock.sendall(request)
        got = 0
        while got < ANSWER:
            data = self._sock.recv(ANSWER - got)
            if not data:
                raise ConnectionError("the bare server closed the connection")
            got += len(data)

    def trips(self, count: int, per_second: float | None, request: bytes = _PLAIN
              ) -> float | None:
        """The server's CPU seconds over ``count`` round trips of ``request``."""
        interval = 1 / per_second if per_second else 0.0
        before = _cpu(self._bare.pid)
        due = time.perf_counter()
        for _ in range(count):
            if interval:
                due += interval
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            self._one(request)
        after = _cpu(self._bare.pid)
        return None if before is None or after is None else after - before

    def close(self) -> None:
        self._sock.close()


def round_trips(bare: BareServer, count: int, per_second: float | None = None
                ) -> float | None:
    """The bare server's CPU microseconds per round trip over ``count`` of them, one at
    a time (after 100 to warm up), each sent once the one before is answered and, with
    ``per_second``, no sooner than that pace allows (a client's pace: a server woken
    from a deeper idle costs more a wake-up); ``None`` where ``/proc`` cannot tell."""
    client = _Client(bare)
    try:
        spent = client.trips(count, per_second)
    finally:
        client.close()
    return None if spent is None else 1e6 * spent / count


class Floor(NamedTuple):
    """One run's floor (:func:`measure`): a bare round trip's CPU (µs; ``None`` where
    ``/proc`` cannot tell), the seconds its round trips took, and the cold factor
    (``None`` likewise)."""

    round_trip: float | None
    seconds: float
    cold: float | None


#: Blocks :func:`measure` takes its round trips in, plain and worked in turn.
BLOCKS = 10


def measure(count: int, per_second: float | None = None) -> Floor:
    """``count`` bare round trips at ``per_second`` and as many with :func:`_work` done
    once each, to one server, in blocks taken in turn (what the machine does meanwhile
    falls on both alike): the bare one's CPU a round trip, and how many times what the
    work takes in a loop it takes done once a round trip (the cold factor: over 1 on a
    machine where a woken process finds its caches cold)."""
    block = max(count // BLOCKS, 1)
    plain = worked = seconds = 0.0
    with BareServer(work=True) as bare:
        client = _Client(bare)
        try:
            for _ in range(BLOCKS):
                started = time.perf_counter()
                one = client.trips(block, per_second)
                seconds += time.perf_counter() - started
                two = client.trips(block, per_second, WORKED)
                if one is None or two is None:  # no /proc
                    return Floor(None, seconds, None)
                plain, worked = plain + one, worked + two
        finally:
            client.close()
    floor, working = 1e6 * plain / (block * BLOCKS), 1e6 * worked / (block * BLOCKS)
    return Floor(floor, seconds, (working - floor) / bare.hot if bare.hot > 0 else None)


def bound(pipelined: float, round_trip: float) -> float:
    """The least ratio of one message at a time over pipelined (server CPU per message)
    that a server with this pipelined cost could show: the same work on the message,
    and a round trip for each."""
    return (pipelined + round_trip) / pipelined


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-work", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=20_000, help="round trips a run")
    parser.add_argument("--repeat", type=int, default=3, help="runs")
    parser.add_argument("--pace", type=float, default=None,
                        help="round trips a second at most (default: as fast as answered)")
    parser.add_argument("--busy", type=int, default=0,
                        help="each run quiet, then beside N processes spinning (the floor "
                             "falls when the cores have other work: a woken idle core "
                             "costs the process it wakes for)")
    args = parser.parse_args(argv)
    if args.serve or args.serve_work:
        serve(work=args.serve_work)
        return {}
    costs: dict[str, list[float | None]] = {"quiet": [], "busy": []}
    with BareServer() as bare:
        for _ in range(args.repeat):
            for label in ("quiet", "busy") if args.busy else ("quiet",):
                with BusyLoad(args.busy if label == "busy" else 0):
                    time.sleep(0.2 if label == "busy" else 0)  # the spinners are up
                    started = time.perf_counter()
                    cost = round_trips(bare, args.count, args.pace)
                    rate = args.count / (time.perf_counter() - started)
                said = "not measured (no /proc)" if cost is None else f"{cost:.1f} us"
                print(f"a bare round trip ({label}): {said} of the server's CPU, {rate:,.0f}/s")
                costs[label].append(cost)
    floor = measure(args.count, args.pace)  # and the cold factor, quiet
    if floor.cold is not None:
        print(f"the cold factor: {floor.cold:.2f} (aiosb's work on an SDK message, once a "
              "round trip, over the same in a loop)")
    costs["cold"] = [floor.cold]
    return costs


if __name__ == "__main__":
    main()
