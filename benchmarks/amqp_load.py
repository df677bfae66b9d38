"""The AMQP front end under load (#36): ``./dev bench amqp-load``.

1,000 concurrent AMQP connections by default (``--connections 10000`` where the
descriptor limit allows) to one ``aiosb serve`` in a process of its own, each with a
sender link and a peek-lock receiver link on one of the namespace's queues and topic
subscriptions (``--queues`` queues and ``--topics`` topics with two subscriptions each,
a few namespaces' worth), sending and receiving for ``--seconds`` after a warm-up; a few
official aio SDK clients (``--sdk``) send and receive among them. The many are a lean
client on aiosb's own codec (:class:`LeanConnection`): SASL ANONYMOUS, a ``$cbs``
put-token signed with the server's key, and the frames the SDKs send; 1,000 SDK clients
would not fit 2 cores.

Reported: messages lost (acknowledged by the server, never received: must be 0),
end-to-end latency p50/p99/max (send to receipt, one clock), the server's CPU per
message (send, delivery and settlement; from ``/proc``), its resident memory per
connection (connected and idle, over the server before) and its growth over the run
after warm-up (flat), and its file descriptors once every connection closed (back to
where they started).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiosb
from aiosb.auth import DEV_KEY, DEV_KEY_NAME, SasCredential
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import (
    AMQP_HEADER,
    SASL_HEADER,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    encode,
    frame,
)
from aiosb.server.amqp.messages import sections_of
from aiosb.server.process import ServerProcess

from ._harness import MIN_RUNS, check, report
from .http import _cpu_seconds

NAMESPACE = "sbemulatorns"
_HEAD = struct.Struct(">IBBH")
PROPERTIES, APP, DATA = 0x73, 0x74, 0x75
CREDIT = 50


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return soft


class Tally:
    """What every connection sent, had acknowledged and received, by message id."""

    def __init__(self) -> None:
        self.acked: set[str] = set()
        self.received: dict[str, float] = {}
        self.latencies: list[float] = []
        self.sent = 0
        self.refused = 0
        self.measuring = False
        self.done_sending = False
        #: Set once sending has stopped and every acknowledged message arrived.
        self.all_received = asyncio.Event()

    def got(self, message_id: str, sent_at: float) -> None:
        if message_id not in self.received:
            self.received[message_id] = sent_at
            if self.measuring:
                self.latencies.append(time.time() - sent_at)
        self.check_done()

    def check_done(self) -> None:
        if self.done_sending and not (self.acked - self.received.keys()):
            self.all_received.set()


class LeanConnection:
    """One AMQP connection on aiosb's own codec, with a sender and a peek-lock receiver."""

    def __init__(self, tally: Tally, target: str, source: str) -> None:
        self.tally = tally
        self.target, self.source = target, source
        self.credit = 0
        self.credit_given = asyncio.Event()
        self.next_delivery = 0
        self.link_sent = 0  # transfers on the sender link: its delivery count
        self.link_received = 0  # deliveries on the receiver link: its delivery count
        self.transfers_in = 0  # transfers the server sent on the session
        self.unacked: dict[int, str] = {}
        self.receive_credit = 0
        self.cbs_answered = asyncio.Event()
        self.attached = asyncio.Event()
        self.closed = False
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    def _send(self, body: Any, payload: bytes = b"", kind: int = 0) -> None:
        assert self.writer is not None
        self.writer.write(frame(0, body, payload, kind))

    async def open(self, port: int) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer.write(SASL_HEADER)
        await self.reader.readexactly(8)
        await self._frame()  # sasl-mechanisms
        self._send(p.performative(p.SASL_INIT, Symbol("ANONYMOUS")), kind=1)
        await self._frame()  # sasl-outcome
        self.writer.write(AMQP_HEADER)
        await self.reader.readexactly(8)
        self._send(p.performative(p.OPEN, str(uuid.uuid4()), "localhost", UInt(65536)))
        self._send(p.performative(p.BEGIN, None, UInt(0), UInt(100_000), UInt(100_000)))
        self._send(p.performative(p.ATTACH, "cbs-s", UInt(0), False, UByte(1), UByte(0),
                                  Described(ULong(p.SOURCE), ["$cbs"]),
                                  Described(ULong(p.TARGET), ["$cbs"])))
        self._send(p.performative(p.ATTACH, "cbs-r", UInt(1), True, UByte(1), UByte(0),
                                  Described(ULong(p.SOURCE), ["$cbs"]),
                                  Described(ULong(p.TARGET), ["cbs-reply"])))
        self._send(p.performative(p.FLOW, UInt(0), UInt(100_000), UInt(0), UInt(100_000),
                                  UInt(1), UInt(0), UInt(5)))
        token = SasCredential(DEV_KEY_NAME, DEV_KEY).token("sb://localhost/")
        self._transfer(0, encode(Described(ULong(PROPERTIES), ["cbs", None, None, None,
                                                                 "cbs-reply"]))
                       + encode(Described(ULong(APP), {
                           "operation": "put-token", "type": "jwt",
                           "name": "sb://localhost/"}))
                       + encode(Described(ULong(0x77), token)), settled=True)
        self._task = asyncio.create_task(self._frames())
        await asyncio.wait_for(self.cbs_answered.wait(), 60)
        self._send(p.performative(p.ATTACH, "snd", UInt(2), False, UByte(0), UByte(0),
                                  Described(ULong(p.SOURCE), ["client"]),
                                  Described(ULong(p.TARGET), [self.target])))
        self._send(p.performative(p.ATTACH, "rcv", UInt(3), True, UByte(0), UByte(1),
                                  Described(ULong(p.SOURCE), [self.source]),
                                  Described(ULong(p.TARGET), ["client"])))
        self._flow_receiver()
        await asyncio.wait_for(self.credit_given.wait(), 60)

    def _flow_receiver(self) -> None:
        """Credit for the receiver link, counted from the deliveries it had (AMQP 2.6.7:
        the receiver's delivery-count), at the session's next incoming transfer id."""
        self.receive_credit = CREDIT
        self._send(p.performative(
            p.FLOW, UInt(self.transfers_in & 0xFFFFFFFF), UInt(100_000),
            UInt(self.next_delivery), UInt(100_000), UInt(3),
            UInt(self.link_received & 0xFFFFFFFF), UInt(CREDIT)))

    def _transfer(self, handle: int, payload: bytes, *, settled: bool = False) -> int:
        delivery = self.next_delivery
        self.next_delivery = (delivery + 1) & 0xFFFFFFFF
        self._send(p.performative(p.TRANSFER, UInt(handle), UInt(delivery),
                                  delivery.to_bytes(4, "big"), UInt(0), settled), payload)
        return delivery

    async def send(self, message_id: str) -> None:
        while self.credit <= 0 and not self.closed:
            self.credit_given.clear()
            await self.credit_given.wait()
        if self.closed:
            return
        self.credit -= 1
        payload = (encode(Described(ULong(PROPERTIES), [message_id]))
                   + encode(Described(ULong(APP), {"t": time.time()}))
                   + encode(Described(ULong(DATA), b"x" * 64)))
        delivery = self._transfer(2, payload)
        self.link_sent += 1
        self.unacked[delivery] = message_id
        self.tally.sent += 1
        assert self.writer is not None
        await self.writer.drain()

    async def _frame(self) -> tuple[int, list[Any], bytes] | None:
        assert self.reader is not None
        head = await self.reader.readexactly(8)
        size, offset, _kind, _channel = _HEAD.unpack(head)
        body = (await self.reader.readexactly(size - 8))[offset * 4 - 8:]
        if not body:
            return None
        code, fields, end = p.parse(body)
        return code, fields, body[end:]

    async def _frames(self) -> None:
        try:
            while True:
                got = await self._frame()
                if got is not None:
                    self._on(*got)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed = True
            self.credit_given.set()

    def _on(self, code: int, fields: list[Any], payload: bytes) -> None:
        if code == p.TRANSFER:
            self.transfers_in += 1
        if code == p.FLOW and fields[4] == 2:
            delivery_count, credit = fields[5] or 0, fields[6] or 0
            self.credit = credit - (self.link_sent - delivery_count)
            if self.credit > 0:
                self.credit_given.set()
        elif code == p.TRANSFER and fields[0] == 1:
            self.cbs_answered.set()
        elif code == p.TRANSFER and fields[0] == 3:
            sections = sections_of(payload)
            props = sections.properties or []
            app = sections.application_properties or {}
            if props and isinstance(app.get("t"), float):
                self.tally.got(str(props[0]), app["t"])
            self._send(p.performative(p.DISPOSITION, True, fields[1], fields[1], True,
                                      p.performative(p.ACCEPTED)))
            self.receive_credit -= 1
            self.link_received += 1
            if self.receive_credit < CREDIT // 2:
                self._flow_receiver()
        elif code == p.DISPOSITION and fields[0] is True:
            first, last = fields[1], fields[2] if fields[2] is not None else fields[1]
            accepted = isinstance(fields[4], Described) and fields[4].descriptor == p.ACCEPTED
            for delivery in range(first, last + 1):
                message_id = self.unacked.pop(delivery, None)
                if message_id is not None:
                    if accepted:
                        self.tally.acked.add(message_id)
                    else:
                        self.tally.refused += 1

    async def close(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self._send(p.performative(p.CLOSE))
                await self.writer.drain()
            self.writer.close()
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 10)


async def _sdk_client(connection: str, entity: str, source: tuple[str, str | None],
                      tally: Tally, stop: asyncio.Event, interval: float) -> None:
    """An official aio SDK client sending and receiving among the lean ones."""
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(connection) as client:
        topic, sub = source
        receiver = (client.get_subscription_receiver(topic, sub) if sub
                    else client.get_queue_receiver(topic))
        async with client.get_queue_sender(entity) as sender, receiver:
            async def receive() -> None:
                while not stop.is_set() or tally.acked - tally.received.keys():
                    for message in await receiver.receive_messages(max_message_count=20,
                                                                   max_wait_time=1):
                        sent_at = message.application_properties.get(b"t")
                        if isinstance(sent_at, float):
                            tally.got(str(message.message_id), sent_at)
                        await receiver.complete_message(message)
                    if stop.is_set() and not (tally.acked - tally.received.keys()):
                        break

            receiving = asyncio.create_task(receive())
            while not stop.is_set():
                message_id = str(uuid.uuid4())
                await sender.send_messages(ServiceBusMessage(
                    b"x" * 64, message_id=message_id, application_properties={"t": time.time()}))
                tally.sent += 1
                tally.acked.add(message_id)
                await asyncio.sleep(interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(receiving, 30)


async def _load(server: ServerProcess, args: argparse.Namespace, say: Callable[[str], None]
                ) -> dict[str, Any]:
    queues = [f"load-q{i}" for i in range(args.queues)]
    topics = [f"load-t{i}" for i in range(args.topics)]
    async with aiosb.connect(f"{server.url}/{NAMESPACE}") as ns:
        for q in queues:
            await ns.create_queue(q, max_delivery_count=100)
        for t in topics:
            await ns.create_topic(t)
            for s in ("a", "b"):
                await ns.create_subscription(t, s, max_delivery_count=100)
    # Each connection sends to an entity and receives from one: a queue, or a topic and
    # one of its subscriptions (each topic message is received once per subscription:
    # only subscription "a"'s copy counts, "b"'s is received and settled all the same).
    routes: list[tuple[str, str]] = [(q, q) for q in queues]
    routes += [(t, f"{t}/Subscriptions/{s}") for t in topics for s in ("a", "b")]
    pid = server.pid
    port = int(server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0])
    base_rss, base_fds, base_cpu = _rss_kb(pid), _fds(pid), _cpu_seconds(pid) or 0.0
    tally = Tally()
    conns = [LeanConnection(tally, *routes[i % len(routes)]) for i in range(args.connections)]
    start = time.monotonic()
    for i in range(0, len(conns), 50):
        await asyncio.gather(*(c.open(port) for c in conns[i:i + 50]))
    opened_in = time.monotonic() - start
    await asyncio.sleep(2)
    idle_rss = _rss_kb(pid)
    say(f"{len(conns)} connections open in {opened_in:.1f} s; server RSS "
        f"{base_rss / 1024:.0f} -> {idle_rss / 1024:.0f} MB")
    stop = asyncio.Event()
    # A message from "b" subscriptions is received too but its id was counted once: the
    # receipt of either copy counts (lost means no copy arrived at all).
    sdk = [asyncio.create_task(_sdk_client(
        server.amqp_connection_string, routes[i % len(routes)][0],
        (routes[i % len(routes)][0], routes[i % len(routes)][1].rsplit("/", 1)[-1]
         if "/" in routes[i % len(routes)][1] else None),
        tally, stop, args.interval)) for i in range(args.sdk)]

    async def sender(conn: LeanConnection) -> None:
        await asyncio.sleep(random.uniform(0, args.interval))
        while not stop.is_set() and not conn.closed:
            await conn.send(str(uuid.uuid4()))
            await asyncio.sleep(args.interval)

    senders = [asyncio.create_task(sender(c)) for c in conns]
    await asyncio.sleep(args.warmup)
    tally.measuring = True
    cpu0, received0, rss_warm = _cpu_seconds(pid) or 0.0, len(tally.received), _rss_kb(pid)
    samples = [rss_warm]
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.seconds:
        await asyncio.sleep(5)
        samples.append(_rss_kb(pid))
        say(f"  {time.monotonic() - t0:5.0f} s: sent {tally.sent}, acked {len(tally.acked)}, "
            f"received {len(tally.received)}, server RSS {samples[-1] / 1024:.0f} MB")
    steady = time.monotonic() - t0
    cpu1, received1 = _cpu_seconds(pid) or 0.0, len(tally.received)
    tally.measuring = False
    stop.set()
    for task in senders:
        task.cancel()
    await asyncio.gather(*senders, return_exceptions=True)
    tally.done_sending = True
    tally.check_done()
    with contextlib.suppress(TimeoutError):  # what was acknowledged, received (or lost)
        await asyncio.wait_for(tally.all_received.wait(), 60)
    await asyncio.gather(*sdk, return_exceptions=True)
    lost = len(tally.acked - tally.received.keys())
    for i in range(0, len(conns), 100):
        await asyncio.gather(*(c.close() for c in conns[i:i + 100]))
    await asyncio.sleep(3)
    end_fds = _fds(pid)
    latencies = sorted(tally.latencies) or [0.0]
    moved = received1 - received0
    return {
        "connections": len(conns), "sdk_clients": args.sdk, "seconds": round(steady, 1),
        "sent": tally.sent, "acknowledged": len(tally.acked), "lost": lost,
        "refused": tally.refused, "messages_per_s": moved / steady,
        "latency_p50_ms": 1000 * latencies[len(latencies) // 2],
        "latency_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "latency_max_ms": 1000 * latencies[-1],
        "server_cpu_us_per_message": 1e6 * (cpu1 - cpu0) / max(moved, 1),
        "server_cpu_share": (cpu1 - cpu0) / steady,
        "rss_kb_per_connection": (idle_rss - base_rss) / len(conns),
        "rss_growth_after_warmup_mb": (max(samples) - rss_warm) / 1024,
        "rss_growth_share": (samples[-1] - rss_warm) / max(rss_warm, 1),
        "fds_before": base_fds, "fds_after": end_fds, "server_cpu_before_s": base_cpu,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--sdk", type=int, default=4, help="official SDK clients among them")
    parser.add_argument("--queues", type=int, default=40)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=120, help="the measured run")
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--interval", type=float, default=2.0,
                        help="seconds between one connection's sends")
    parser.add_argument("--repeat", type=int, default=MIN_RUNS,
                        help=f"runs, each on a fresh server (verdicts need {MIN_RUNS})")
    args = parser.parse_args(argv)
    limit = _raise_fd_limit(args.connections * 2 + 1000)
    if limit < args.connections + 200:
        raise SystemExit(f"the descriptor limit is {limit}: too few for {args.connections} "
                         "connections (raise ulimit -n)")
    runs = []
    for _ in range(args.repeat):
        with ServerProcess() as server:  # it inherits the raised descriptor limit
            result = asyncio.run(_load(server, args, print))
        runs.append(result)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()})
    rows = [{"case": f"run {i + 1}: {r['connections']} connections, {r['seconds']} s",
             **{k: v for k, v in r.items() if k not in ("connections", "seconds")}}
            for i, r in enumerate(runs)]
    checks = [
        check("#36", "messages lost (acknowledged, never received)",
              [r["lost"] for r in runs], 0, at_most=True, unit="messages"),
        check("#36", "server file descriptors after every connection closed, over before",
              [r["fds_after"] - r["fds_before"] for r in runs], 2, at_most=True, unit="fds"),
        check("#36", "server RSS growth over the measured run, share of the start",
              [r["rss_growth_share"] for r in runs], 0.10, at_most=True, unit="ratio"),
    ] if len(runs) >= MIN_RUNS else []
    summary = {k: runs[-1][k] for k in (
        "lost", "latency_p50_ms", "latency_p99_ms", "latency_max_ms",
        "server_cpu_us_per_message", "rss_kb_per_connection", "rss_growth_after_warmup_mb",
        "fds_before", "fds_after", "messages_per_s")}
    report("amqp-load", f"The AMQP front end under load: {args.connections} connections",
           rows, summary, checks)
    return summary


if __name__ == "__main__":
    main()
