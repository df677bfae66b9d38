"""Find what waits (#50, item 3): the timeline of the official aio SDK's patterns against
``aiosb serve``, frame by frame, and whose each gap is.

Between the SDK and a :class:`~aiosb.server.process.ServerProcess` this puts a relay of
its own, in a process of its own (so neither the SDK's loop nor the GIL delays its
clock): it timestamps each AMQP frame when its last byte reached the relay (when its
writer had written it) and when the relay passed it on. The SDK's own frame log
(``logging_enable=True``; logger ``azure.servicebus._pyamqp`` at DEBUG: ``->`` a frame
sent, ``<-`` a frame the SDK read) says when the SDK read each frame. So each frame from
the server shows when the server WROTE it and when the SDK READ it, and the wall time of
a phase is split, gap by gap between the frames on the wire, by who moved next:

* **server**: the gap before a frame the server wrote (a request in -> its answer out);
* **wire**: the relay's own time passing a frame on (loopback, and the relay);
* **SDK**: the gap before a frame the SDK wrote, and after the last frame to the phase's
  end (an answer had arrived -> the SDK read it, acted, or returned).

The phases, each printed as a timeline (runs of like frames folded into one line):

* **open / send / close**: a sender's open (``get_queue_sender`` and ``__aenter__``), one
  ``send_messages``, its ``close``;
* **a gathered batch**: a receiver with ``prefetch_count=100``, ``receive_messages(
  max_message_count=100)``, then the 100 completions at once (``asyncio.gather``) and
  their dispositions, as the SDK's changelog recommends; the consumer loop's rate is 100
  over the batch's wall time;
* **a batch completed each in turn**: the same, each completion awaited in turn.

Where the SDK waits, these lines of azure-servicebus 7.15 (aio) do it (read from its
source; the timeline shows their periods): opening a link, ``client_ready_async`` reads
one frame a call and the open loop sleeps ``asyncio.sleep(0.05)`` between calls
(``aio/_servicebus_sender_async.py`` line 242, ``aio/_servicebus_receiver_async.py`` line
388); a settlement waits in ``_wait_for_disposition_outcome`` (``_pyamqp/aio/
_receiver_async.py`` line 154) calling ``connection.listen(wait=False)``, a read of one
frame bounded by the socket timeout (``asyncio.wait_for(self.read(), timeout)``,
``_pyamqp/aio/_transport_async.py`` line 73; ``SOCKET_TIMEOUT = 0.2``,
``_pyamqp/constants.py`` line 91) and queued on the transport's ``socket_lock`` (line
88): with the completions gathered, once every disposition has been read the read
holding the lock gets nothing, and the completions queued behind it time out with it,
0.2 s after their call began (the row's ``completions_over_100ms``);
closing, ``close_async`` awaits the keep-alive task (``_pyamqp/aio/_client_async.py``
line 293), which sleeps a second a turn (line 154).

Rows (reported, not judged: the SDK's waits are not the server's to remove): for each
phase the run of the median wall time (``wall_ms``, with the least and greatest of the
``--repeat`` runs), of which the server's, the wire's and the SDK's ms; and the consumer
loop's rates, gathered and each in turn. The one check
(``#50``) holds what is the server's to hold: its share of the gathered batch's wall time
at most 0.25 on the worst run (it answers each disposition at once; the batch waits on
the SDK). ``./dev bench timeline`` (about 15 s); ``--repeat`` runs of each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiosb
from aiosb import Message
from aiosb.server.process import ServerProcess

from ._harness import MIN_RUNS, check, report, run

BATCH = 100
BODY = b"x" * 100
SDK_LOGGER = "azure.servicebus._pyamqp"

#: AMQP performatives (and SASL frames) by descriptor code, named as the SDK's log names
#: them (``OpenFrame`` -> ``Open``)
PERFORMATIVES = {
    0x10: "Open", 0x11: "Begin", 0x12: "Attach", 0x13: "Flow", 0x14: "Transfer",
    0x15: "Disposition", 0x16: "Detach", 0x17: "End", 0x18: "Close",
    0x40: "SASLMechanism", 0x41: "SASLInit", 0x42: "SASLChallenge", 0x43: "SASLResponse",
    0x44: "SASLOutcome",
}

#: frames whose runs are folded into one line of a timeline whichever way they go
FOLDED = {"Transfer", "Disposition"}

#: where the SDK waits (azure-servicebus 7.15, aio), by phase
SDK_WAITS = {
    "open": "client_ready_async reads one frame a call; the open loop sleeps "
            "asyncio.sleep(0.05) between calls (aio/_servicebus_sender_async.py:242, "
            "aio/_servicebus_receiver_async.py:388)",
    "close": "close_async awaits the keep-alive task, which sleeps asyncio.sleep(1) a "
             "turn (_pyamqp/aio/_client_async.py:293 and :154)",
    "gathered": "each settlement waits in _wait_for_disposition_outcome calling "
                "connection.listen(wait=False) (_pyamqp/aio/_receiver_async.py:154): "
                "asyncio.wait_for(transport.read(), SOCKET_TIMEOUT = 0.2 s) "
                "(_pyamqp/aio/_transport_async.py:73, _pyamqp/constants.py:91), read() "
                "queued on the transport's socket_lock (:88); once every disposition is "
                "in, the read holding the lock gets nothing, and it and the calls queued "
                "behind it time out together, 0.2 s after they began",
    "each": "none: each settlement's read returns with its disposition",
    "send": "none: the send returns with its disposition",
}


# The relay, in a process of its own --------------------------------------------------


@dataclass
class Frame:
    """One AMQP frame on the wire: its connection (numbered as accepted), ``"c>s"`` (from
    the SDK) or ``"s>c"`` (from the server), its name, when its last byte reached the
    relay (``t_in``, ``time.time()``) and when the relay had passed it on (``t_out``);
    ``read``: when the SDK logged it (sent or read), once matched."""

    conn: int
    way: str
    name: str
    t_in: float
    t_out: float
    read: float | None = None


def _frames(buffer: bytearray) -> list[str]:
    """Cut the whole frames (and protocol headers) off the front of ``buffer``: their
    names."""
    names = []
    while True:
        if buffer[:4] == b"AMQP":
            if len(buffer) < 8:
                break
            names.append("Header")
            del buffer[:8]
            continue
        if len(buffer) < 8:
            break
        size = int.from_bytes(buffer[:4], "big")
        if len(buffer) < size:
            break
        body = bytes(buffer[4 * buffer[4]:size])
        del buffer[:size]
        if not body:
            names.append("Empty")
        elif body[:2] == b"\x00\x53":  # described, smallulong code
            names.append(PERFORMATIVES.get(body[2], f"0x{body[2]:02x}"))
        elif body[:2] == b"\x00\x80":  # described, ulong code
            code = int.from_bytes(body[2:10], "big")
            names.append(PERFORMATIVES.get(code, f"0x{code:x}"))
        else:
            names.append("?")
    return names


def _relay_main(host: str, port: int, control: Connection) -> None:
    """The relay process: listen on 127.0.0.1 (a free port, sent on ``control``), pass
    each connection's bytes on to ``host:port`` both ways, timestamping each frame; on
    ``"take"`` from ``control``, send the frames so far (and forget them); on ``"stop"``,
    end."""
    asyncio.run(_relay(host, port, control))


async def _relay(host: str, port: int, control: Connection) -> None:
    frames: list[Frame] = []
    connections = 0
    stop = asyncio.Event()

    async def pump(conn: int, way: str, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
        buffer = bytearray()
        try:
            while data := await reader.read(65536):
                t_in = time.time()
                writer.write(data)
                t_out = time.time()
                buffer += data
                frames.extend(Frame(conn, way, name, t_in, t_out) for name in _frames(buffer))
            if writer.can_write_eof():
                writer.write_eof()  # half closed: the answers the other way still pass
        except (ConnectionError, OSError):
            pass

    async def accept(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        server_r, server_w = await asyncio.open_connection(host, port)
        for sock in (client_w, server_w):
            raw = sock.get_extra_info("socket")
            if raw is not None:
                import socket
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(pump(connections, "c>s", client_r, server_w),
                                 pump(connections, "s>c", server_r, client_w))
        finally:
            server_w.close()
            client_w.close()

    def on_control() -> None:
        what = control.recv()
        if what == "take":
            control.send(list(frames))
            frames.clear()
        else:
            stop.set()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    asyncio.get_running_loop().add_reader(control.fileno(), on_control)
    control.send(server.sockets[0].getsockname()[1])
    async with server:
        await stop.wait()


class Relay:
    """``with Relay(host, port) as relay``: the relay process; ``relay.port`` to connect
    to; ``relay.take()``: the frames passed since the last take."""

    def __init__(self, host: str, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._control, child = ctx.Pipe()
        self._proc = ctx.Process(target=_relay_main, args=(host, port, child), daemon=True)

    def __enter__(self) -> Relay:
        self._proc.start()
        if not self._control.poll(30):
            self._proc.kill()
            raise RuntimeError("the relay did not start")
        self.port: int = self._control.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._control.send("stop")
        except OSError:
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    def take(self) -> list[Frame]:
        self._control.send("take")
        frames: list[Frame] = self._control.recv()
        return frames


# The SDK's frame log ---------------------------------------------------------------------

_LOGGED = re.compile(r"^(->|<-) (?:(\w+?)(?:Frame)?\(|(EmptyFrame))")


class FrameLog(logging.Handler):
    """The SDK's frame log lines: ``(time.time(), "c>s" or "s>c", name)``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        matched = _LOGGED.match(record.getMessage())
        if matched:
            way = "c>s" if matched[1] == "->" else "s>c"
            name = "Empty" if matched[3] else matched[2]
            self.lines.append((record.created, way, name))

    def take(self) -> list[tuple[float, str, str]]:
        lines, self.lines = self.lines, []
        return lines


def _match(frames: list[Frame], lines: list[tuple[float, str, str]]) -> None:
    """Give each frame the time the SDK logged it: the k-th logged frame of a name and
    way is the k-th such frame on the wire (one connection's frames keep their order)."""
    queues: dict[tuple[str, str], list[Frame]] = {}
    for frame in frames:
        queues.setdefault((frame.way, frame.name), []).append(frame)
    for created, way, name in lines:
        waiting = queues.get((way, name))
        if waiting:
            waiting.pop(0).read = created


# The SDK's waits, by the line that waits -------------------------------------------------


class SdkWaits:
    """``with SdkWaits() as waits``: while the block runs, ``asyncio.sleep`` and
    ``asyncio.wait_for`` (as the SDK calls them, through the ``asyncio`` module) are
    wrapped to record each sleep, and each ``wait_for`` that timed out, called from the
    SDK's code: by the SDK line that called it (the innermost frame under ``azure/``),
    the count and the longest single wait. ``waits.take()``: those so far (and forget
    them). The wrappers cost a stack walk a call, off the frames' clock."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, float, str], list[tuple[float, float]]] = {}

    def __enter__(self) -> SdkWaits:
        self._sleep, self._wait_for = asyncio.sleep, asyncio.wait_for
        sleep, wait_for, seen = self._sleep, self._wait_for, self._seen

        async def timed_sleep(delay: float, *args: Any, **kwargs: Any) -> Any:
            line, start = _sdk_line(), time.time()
            try:
                return await sleep(delay, *args, **kwargs)
            finally:
                if line and delay:
                    seen.setdefault(("sleep", delay, line), []).append((start, time.time()))

        async def timed_wait_for(awaitable: Any, timeout: float | None,  # noqa: ASYNC109
                                 **kwargs: Any) -> Any:
            line, start = _sdk_line(), time.time()
            try:
                return await wait_for(awaitable, timeout, **kwargs)
            except TimeoutError:
                if line and timeout is not None:
                    seen.setdefault(("wait_for timed out", timeout, line), []).append(
                        (start, time.time()))
                raise

        asyncio.sleep = timed_sleep
        asyncio.wait_for = timed_wait_for  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.sleep, asyncio.wait_for = self._sleep, self._wait_for

    def take(self, start: float = 0.0, end: float = 0.0) -> list[tuple[str, float, str, int,
                                                                        float]]:
        """``(what, its argument, the SDK's file:line, count, longest seconds)``, the
        longest first, of the waits that began at ``start`` or later, or that ended as
        the phase did (within 10 ms of ``end``: a wait begun before it that it awaited,
        as ``close_async`` awaits the keep-alive task's sleep); and forget them all."""
        taken = []
        for (what, arg, line), spans in self._seen.items():
            kept = [b - a for a, b in spans if a >= start or abs(b - end) < 0.01]
            if kept:
                taken.append((what, arg, line, len(kept), max(kept)))
        self._seen.clear()
        return sorted(taken, key=lambda w: -w[4])


def _sdk_line() -> str:
    """The innermost caller in the SDK's code (``azure/...py:LINE``), or ``""``."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if f"{os.sep}azure{os.sep}" in name:
            return f"azure{name.rsplit(f'{os.sep}azure', 1)[1]}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


# A phase: its timeline, and whose its gaps are -----------------------------------------


@dataclass
class Phase:
    """One timed part: its key (its row, :data:`ROWS`), its name, start and end
    (``time.time()``), its frames, and marks (``(time, what)``: a completion returned,
    say)."""

    key: str
    name: str
    start: float
    end: float
    frames: list[Frame]
    marks: list[tuple[float, str]] = field(default_factory=list)
    returned: list[float] = field(default_factory=list)  # each completion's seconds
    waits: list[tuple[str, float, str, int, float]] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return self.end - self.start

    def shares(self) -> dict[str, float]:
        """The wall seconds split by who moved next: server, wire, SDK (they sum to the
        wall time)."""
        shares = {"server": 0.0, "wire": 0.0, "sdk": 0.0}
        at = self.start
        for frame in sorted(self.frames, key=lambda f: f.t_in):
            t_in, t_out = min(max(frame.t_in, self.start), self.end), \
                min(max(frame.t_out, self.start), self.end)
            if t_in > at:
                shares["server" if frame.way == "s>c" else "sdk"] += t_in - at
                at = t_in
            if t_out > at:
                shares["wire"] += t_out - at
                at = t_out
        shares["sdk"] += max(self.end - at, 0.0)
        return shares

    def print(self) -> None:
        """The timeline: ms from the phase's start; runs of like frames folded."""
        print(f"\n== {self.name}: {1000 * self.wall:.1f} ms")
        print(f"  {'wire ms':>9} {'SDK ms':>9}  {'waited':>7}  {'gap before':>13}  frame")
        print("  (wire: the frame reached the relay, its writer had written it; SDK: the SDK "
              "logged it, sent or read; waited: from the relay passing it on to the SDK "
              "reading it; gap before: from the frame before to this one, and whose: the "
              "side that wrote this one)")
        events: list[tuple[float, str, Frame | None]] = [
            (f.t_in, "", f) for f in self.frames] + [(t, what, None) for t, what in self.marks]
        events.sort(key=lambda e: e[0])
        run_: list[Frame] = []
        last_out = [self.start]  # when the frame before the run had passed the relay

        def flush() -> None:
            if not run_:
                return
            first, last = run_[0], run_[-1]
            gap = max(first.t_in - last_out[0], 0.0)
            whose = f"{1000 * gap:6.1f} {'server' if first.way == 's>c' else 'SDK'}"
            last_out[0] = max(f.t_out for f in run_)
            read = [f.read for f in run_ if f.read is not None]
            waited = [f.read - f.t_out for f in run_ if f.way == "s>c" and f.read is not None]
            wire = f"{self._ms(first.t_in):9.1f}"
            sdk = f"{self._ms(first.read):9.1f}" if first.read is not None else f"{'':>9}"
            shown = f"{1000 * waited[0]:7.1f}" if len(run_) == 1 and waited else f"{'':>7}"
            if len(run_) == 1:
                what = f"{'->' if first.way == 'c>s' else '<-'} {first.name}"
            else:
                sent = sum(f.way == "c>s" for f in run_)
                what = " ".join(part for part in (
                    f"-> {first.name} x{sent}" if sent else "",
                    f"<- {first.name} x{len(run_) - sent}" if len(run_) > sent else ""))
                what += f" (wire until {self._ms(last.t_in):.1f}"
                if read:
                    what += f", SDK until {self._ms(max(read)):.1f}"
                if waited:
                    what += (f"; each <- waited for the SDK {1000 * statistics.median(waited):.1f}"
                             f" ms median, {1000 * max(waited):.1f} max")
                what += ")"
            print(f"  {wire} {sdk}  {shown}  {whose:>13}  {what}")
            run_.clear()

        for t, what, frame in events:
            if frame is None:
                flush()
                print(f"  {self._ms(t):9.1f} {'':>9}  {'':>7}  {'':>13}  -- {what}")
            elif run_ and run_[0].name == frame.name and frame.name in FOLDED:
                run_.append(frame)
            elif run_ and (run_[0].way, run_[0].name) == (frame.way, frame.name):
                run_.append(frame)
            else:
                flush()
                run_.append(frame)
        flush()
        shares = self.shares()
        print(f"  -- end at {1000 * self.wall:.1f} ms: server {1000 * shares['server']:.1f} ms, "
              f"wire {1000 * shares['wire']:.1f} ms, SDK {1000 * shares['sdk']:.1f} ms")
        for what, arg, line, count, longest in self.waits:
            print(f"  the SDK waited: {what}({arg:g}) at {line}: {count}x, the longest "
                  f"{1000 * longest:.1f} ms")
        if self.key in SDK_WAITS:
            print(f"  why (read from the SDK's source): {SDK_WAITS[self.key]}")

    def _ms(self, t: float | None) -> float:
        return 0.0 if t is None else 1000 * (t - self.start)


# The phases --------------------------------------------------------------------------------


class Recorder:
    """Times phases: the relay's frames and the SDK's log lines of each, matched."""

    def __init__(self, relay: Relay, log: FrameLog, waits: SdkWaits) -> None:
        self._relay, self._log, self._waits = relay, log, waits
        self.phases: list[Phase] = []

    def settle(self) -> None:
        """Forget what passed between phases."""
        self._relay.take()
        self._log.take()
        self._waits.take()

    async def phase(self, key: str, name: str,
                    body: Callable[[list[tuple[float, str]], list[float]],
                                   Awaitable[Any]]) -> Phase:
        """Time ``body(marks, returned)`` (``marks``: ``(time, what)`` to show in the
        timeline; ``returned``: how long each completion's call took), with the frames
        that passed meanwhile, matched to the SDK's log, and the SDK's waits."""
        await asyncio.sleep(0.05)  # the frames of what came before have passed
        self.settle()
        marks: list[tuple[float, str]] = []
        returned: list[float] = []
        start = time.time()
        await body(marks, returned)
        end = time.time()
        await asyncio.sleep(0.02)
        # and the frames just after (within 15 ms): what the SDK wrote without waiting for
        # it to leave, and the answers to it (shown; the split counts up to the end only)
        frames = [f for f in self._relay.take() if f.t_in <= end + 0.015]
        _match(frames, self._log.take())
        waits = self._waits.take(start, end)
        phase = Phase(key, name, start, end, frames, marks, returned, waits)
        self.phases.append(phase)
        return phase


async def sdk_phases(connection: str, queue: str, recorder: Recorder, repeat: int) -> None:
    """The phases, ``repeat`` times each: a sender's open, send, close; then a receiver's
    open and its batches, gathered and each in turn, alternating."""
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(connection,
                                                       logging_enable=True) as client:
        for _ in range(repeat):
            holder: dict[str, Any] = {}

            async def open_(marks: list[tuple[float, str]], returned: list[float],
                            h: dict[str, Any] = holder) -> None:
                h["sender"] = client.get_queue_sender(queue)
                await h["sender"].__aenter__()

            async def send(marks: list[tuple[float, str]], returned: list[float],
                            h: dict[str, Any] = holder) -> None:
                await h["sender"].send_messages(ServiceBusMessage(BODY))

            async def close(marks: list[tuple[float, str]], returned: list[float],
                            h: dict[str, Any] = holder) -> None:
                await h["sender"].close()

            await recorder.phase("open", "open (a sender)", open_)
            await recorder.phase("send", "send (one message)", send)
            await recorder.phase("close", "close (the sender)", close)

        receiver = client.get_queue_receiver(queue, prefetch_count=BATCH)

        async def open_receiver(marks: list[tuple[float, str]], returned: list[float]) -> None:
            await receiver.__aenter__()

        await recorder.phase("open-receiver", "open (a receiver, prefetch 100)", open_receiver)
        try:
            async def batch(marks: list[tuple[float, str]], returned: list[float],
                            gathered: bool) -> None:
                got: list[Any] = []
                while len(got) < BATCH:  # a busy machine's SDK returns what came first
                    more = await receiver.receive_messages(
                        max_message_count=BATCH - len(got), max_wait_time=5)
                    marks.append((time.time(), f"receive_messages returned {len(more)}"))
                    if not more:
                        raise RuntimeError(f"the SDK received {len(got)} of {BATCH}")
                    got += more

                async def complete(message: Any) -> float:
                    began = time.time()
                    await receiver.complete_message(message)
                    returned.append(time.time() - began)
                    return time.time()

                if gathered:
                    done = sorted(await asyncio.gather(*(complete(m) for m in got)))
                else:
                    done = [await complete(m) for m in got]
                marks.append((done[0], "the first completion returned"))
                marks.append((done[len(done) // 2 - 1], f"{len(done) // 2} completions returned"))
                marks.append((done[-2], f"{len(done) - 1} completions returned"))
                marks.append((done[-1], "the last completion returned"))

            # a first batch off the record: the link's credit is in flight, as in a loop
            await batch([], [], True)
            for _ in range(repeat):
                await recorder.phase("gathered", "a batch of 100, completions gathered",
                                     lambda marks, returned: batch(marks, returned, True))
                await recorder.phase("each", "a batch of 100, completed each in turn",
                                     lambda marks, returned: batch(marks, returned, False))
        finally:
            await receiver.close()


async def what_if(connection: str, queue: str, recorder: Recorder, repeat: int) -> None:
    """The proof of the SDK's waits: the phases they slow, ``repeat`` times each, with a
    sender and a receiver made to skip them (``get_queue_sender(keep_alive=0)``: no
    keep-alive task for ``close_async`` to await; ``get_queue_receiver(socket_timeout=
    0.02)``: a read that gets nothing gives up after 20 ms, not 200). Not advice for
    production: the keep-alive keeps an idle connection open, and the socket timeout
    bounds every read."""
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(connection,
                                                       logging_enable=True) as client:
        for _ in range(repeat):
            sender = client.get_queue_sender(queue, keep_alive=0)
            await sender.__aenter__()
            await sender.send_messages(ServiceBusMessage(BODY))

            async def close(marks: list[tuple[float, str]], returned: list[float],
                            s: Any = sender) -> None:
                await s.close()

            await recorder.phase("close-no-keep-alive", "close (the sender), keep_alive=0",
                                 close)
        async with client.get_queue_receiver(queue, prefetch_count=BATCH,
                                             socket_timeout=0.02) as receiver:

            async def batch(marks: list[tuple[float, str]], returned: list[float]) -> None:
                got = await receiver.receive_messages(max_message_count=BATCH, max_wait_time=5)
                if len(got) != BATCH:
                    raise RuntimeError(f"the SDK received {len(got)} of {BATCH}")

                async def complete(message: Any) -> float:
                    began = time.time()
                    await receiver.complete_message(message)
                    returned.append(time.time() - began)
                    return time.time()

                done = sorted(await asyncio.gather(*(complete(m) for m in got)))
                marks.append((done[-1], "the last completion returned"))

            await batch([], [])  # off the record, as above
            for _ in range(repeat):
                await recorder.phase("gathered-short-timeout",
                                     "a batch of 100, completions gathered, socket_timeout=0.02",
                                     batch)


async def _fill(url: str, queue: str, count: int) -> None:
    """``count`` messages into ``queue`` (created if missing) over HTTP, off the record."""
    async with aiosb.connect(url) as ns:
        if not await ns.queue_exists(queue):
            await ns.create_queue(queue)
        sender = ns.sender(queue)
        for start in range(0, count, 1000):  # a batch within the namespace's 256 KB
            await sender.send([Message(BODY, message_id=str(uuid.uuid4()))
                               for _ in range(min(1000, count - start))])


ROWS = {  # phase key -> the row's name
    "open": "open a sender (get_queue_sender, __aenter__)",
    "send": "send one message on an open sender",
    "close": "close the sender",
    "open-receiver": "open a receiver (prefetch 100)",
    "gathered": "a batch of 100: receive (prefetch 100), the completions gathered",
    "each": "a batch of 100: receive (prefetch 100), completed each in turn",
    "close-no-keep-alive": "what if: close the sender, made with keep_alive=0",
    "gathered-short-timeout": "what if: a batch of 100, the completions gathered, the "
                              "receiver made with socket_timeout=0.02",
}


def measure(repeat: int, *, show: bool = True) -> tuple[list[dict[str, Any]],
                                                        list[dict[str, Any]], dict[str, Any]]:
    """Run the phases ``repeat`` times against a server of their own: rows, checks,
    summary; with ``show``, print the last timeline of each phase."""
    log = FrameLog()
    logger = logging.getLogger(SDK_LOGGER)
    level = logger.level
    logger.addHandler(log)
    logger.setLevel(logging.DEBUG)
    try:
        with ServerProcess() as server:
            endpoint = re.search(r"sb://([^:/;]+):(\d+)", server.amqp_connection_string)
            assert endpoint is not None, server.amqp_connection_string
            with Relay(endpoint[1], int(endpoint[2])) as relay:
                queue = "timeline"
                run(lambda: _fill(f"{server.url}/sbemulatorns", queue,
                                  BATCH * (3 * repeat + 5)))
                connection = server.amqp_connection_string.replace(
                    endpoint[0], f"sb://127.0.0.1:{relay.port}")
                with SdkWaits() as waits:
                    recorder = Recorder(relay, log, waits)
                    run(lambda: sdk_phases(connection, queue, recorder, repeat))
                    run(lambda: what_if(connection, queue, recorder, repeat))
    finally:
        logger.removeHandler(log)
        logger.setLevel(level)
    by_key: dict[str, list[Phase]] = {}
    for phase in recorder.phases:
        by_key.setdefault(phase.key, []).append(phase)
    if show:
        for phases in by_key.values():
            phases[-1].print()
    rows = []
    for key, name in ROWS.items():
        phases = by_key[key]
        median = sorted(phases, key=lambda p: p.wall)[(len(phases) - 1) // 2]
        shares = median.shares()
        rows.append({  # the run of the median wall time, its split summing to it
            "case": name,
            "wall_ms": 1000 * median.wall,
            "server_ms": 1000 * shares["server"],
            "wire_ms": 1000 * shares["wire"],
            "sdk_ms": 1000 * shares["sdk"],
            "min_wall_ms": min(1000 * p.wall for p in phases),
            "max_wall_ms": max(1000 * p.wall for p in phases),
            "runs": len(phases),
            "frames": len(median.frames),
        })
        if phases[0].returned:  # a batch: how many completions waited out the socket timeout
            rows[-1]["completions_over_100ms"] = statistics.median(
                sum(t > 0.1 for t in p.returned) for p in phases)
    for key in ("gathered", "each"):
        rates = [BATCH / p.wall for p in by_key[key]]
        rows.append({"case": f"consumer loop rate: {ROWS[key][len('a batch of 100: '):]}",
                     "min": min(rates), "median": statistics.median(rates), "max": max(rates),
                     "unit": "msgs/s", "runs": len(rates)})
    server_shares = [p.shares()["server"] / p.wall for p in by_key["gathered"]]
    checks = []
    if len(server_shares) >= MIN_RUNS:
        checks.append(check("#50", "the server's share of a gathered batch's wall time (it "
                            "answers at once; what waits is the SDK's)", server_shares, 0.25,
                            at_most=True, unit="share"))
    summary: dict[str, Any] = {
        f"sdk_waits_{key}": SDK_WAITS[key] for key in ("open", "close", "gathered")}
    summary |= {"repeat": repeat,
               "gathered_over_each_rate": statistics.median(
                   p.wall for p in by_key["each"]) / statistics.median(
                   p.wall for p in by_key["gathered"])}
    return rows, checks, summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5,
                        help=f"runs of each phase (default 5; the check needs {MIN_RUNS})")
    parser.add_argument("--quiet", action="store_true", help="rows only, no timelines")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows, checks, summary = measure(max(args.repeat, 1), show=not args.quiet)
    summary["seconds"] = time.perf_counter() - started
    report("timeline", "What waits (#50): the official aio SDK against aiosb serve, "
           "through a timestamping relay (the run of the median wall time; ms)", rows,
           summary, checks)
    return summary


if __name__ == "__main__":
    main()
