"""Issue 48, item 1: one listener owns every port of ``aiosb serve`` (:mod:`aiosb.server.listener`).
Attacked as a hostile peer would: a silent TCP peer, a slow TLS handshake, a TLS peer
silent after its handshake are each closed within their phase's deadline, and on stop;
a flood past the connection budget on the AMQP port closes its idle connections for an
HTTP client, which is served. The HTTP port, the AMQP port (TLS by its first byte) and
the AMQPS port share one budget, as ``aiosb serve`` opens them."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import aiosb
from aiosb.server import listener
from aiosb.server.amqp.front_end import AmqpServer, serve_amqp
from aiosb.server.explorer import Explorer
from aiosb.server.http import REQUEST_FIRST_BYTES, ServedEmulator, serve

pytest.importorskip("cryptography")
pytestmark = pytest.mark.timeout(60)

NAMESPACE = "listened"
#: What each patched deadline is in these tests, and how much later than it a close
#: may come (a loaded machine of two cores).
DEADLINE, LATE = 0.3, 2.0


@dataclass
class Stack:
    http: ServedEmulator
    amqp: AmqpServer
    cert: Path

    @property
    def http_port(self) -> int:
        return int(self.http.url.rsplit(":", 1)[1])

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """HTTP, AMQP (TLS by its first byte) and AMQPS on one listener, as
    :func:`aiosb.server.serve` opens them."""
    from aiosb.server.tls import context, self_signed

    cert, key = self_signed(tmp_path)
    async with serve(root=NAMESPACE) as http, serve_amqp(
            namespace=NAMESPACE, listener=http.listener, tls_port=0, tls=context(cert, key),
            others=[(REQUEST_FIRST_BYTES, http.route)]) as amqp:
        yield Stack(http, amqp, Path(cert))


async def _closed_after(reader: asyncio.StreamReader) -> float:
    """Seconds until the server closes the connection (reads to the end)."""
    began = time.monotonic()
    async with asyncio.timeout(DEADLINE + LATE + 10):
        while await reader.read(65536):
            pass
    return time.monotonic() - began


@pytest.mark.parametrize("where", ["amqp", "http", "amqps"])
async def test_a_silent_tcp_peer_is_closed_within_the_first_byte_deadline(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, where: str):
    """Connected and silent: on the AMQP port its first byte is waited for to choose
    TLS, on the others the stream's; either way it holds a descriptor for
    FIRST_BYTE_SECONDS at most (AMQPS: the TLS handshake's deadline)."""
    monkeypatch.setattr(listener, "FIRST_BYTE_SECONDS", DEADLINE)
    monkeypatch.setattr(listener, "TLS_HANDSHAKE_SECONDS", DEADLINE)
    port = {"amqp": stack.amqp.port, "http": stack.http_port, "amqps": stack.amqp.tls_port}
    reader, writer = await asyncio.open_connection("127.0.0.1", port[where])
    try:
        assert await _closed_after(reader) < DEADLINE + LATE
    finally:
        writer.close()


@pytest.mark.parametrize("where", ["amqp", "amqps"])
async def test_a_slow_tls_handshake_is_closed_within_its_deadline(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, where: str):
    """A ClientHello's first bytes, then nothing: the handshake is given
    TLS_HANDSHAKE_SECONDS."""
    monkeypatch.setattr(listener, "TLS_HANDSHAKE_SECONDS", DEADLINE)
    port = stack.amqp.port if where == "amqp" else stack.amqp.tls_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x16\x03\x01\x02\x00\x01")  # a record of 512 bytes, 6 of them sent
    try:
        assert await _closed_after(reader) < DEADLINE + LATE
    finally:
        writer.close()


@pytest.mark.parametrize("where", ["amqp", "amqps"])
async def test_a_tls_peer_silent_after_its_handshake_is_closed_within_the_deadline(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, where: str):
    """The slowloris of #48: one handshake held a descriptor for ever (``_FirstByte``
    had no timer). Now the first byte inside TLS is waited for
    TLS_FIRST_BYTE_SECONDS."""
    monkeypatch.setattr(listener, "TLS_FIRST_BYTE_SECONDS", DEADLINE)
    port = stack.amqp.port if where == "amqp" else stack.amqp.tls_port
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=stack.tls(), server_hostname="localhost")
    try:
        assert await _closed_after(reader) < DEADLINE + LATE
    finally:
        writer.close()


async def test_every_connection_in_every_phase_is_closed_when_the_server_stops(
        tmp_path: Path):
    """A silent TCP peer, one in its TLS handshake, one silent after it, an HTTP
    connection handed over at the AMQP port, and an HTTP request in progress whose
    client reads nothing (its handler blocked writing the answer): none outlives the
    server (the deadlines left at their defaults, far longer than the test), and the
    stop takes no longer than ``SHUTDOWN_SECONDS`` (review of #48: it took two minutes,
    aiohttp's graceful shutdown waiting 60 s twice for the blocked handler)."""
    from aiosb.server.http import SHUTDOWN_SECONDS
    from aiosb.server.tls import context, self_signed

    cert, key = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    async with serve(root=NAMESPACE, sites=[Explorer]) as http:
        async with serve_amqp(namespace=NAMESPACE, listener=http.listener,
                              tls=context(cert, key),
                              others=[(REQUEST_FIRST_BYTES, http.route)]) as amqp:
            silent = await asyncio.open_connection("127.0.0.1", amqp.port)
            shaking = await asyncio.open_connection("127.0.0.1", amqp.port)
            shaking[1].write(b"\x16\x03\x01\x02\x00\x01")
            after = await asyncio.open_connection("127.0.0.1", amqp.port, ssl=trust,
                                                  server_hostname="localhost")
            handed = await asyncio.open_connection("127.0.0.1", amqp.port)
            handed[1].write(b"GET /$Resources/queues HTTP/1.1\r\nHost: x\r\n")  # unfinished
            unread = await _never_reading(int(http.url.rsplit(":", 1)[1]))
            await asyncio.sleep(0.3)
            assert len(http.listener.budget) == 5  # type: ignore[union-attr]
            assert not all(c.idle() for c in http.listener.budget._held)  # type: ignore[union-attr]
        began = time.monotonic()
    assert time.monotonic() - began < SHUTDOWN_SECONDS + LATE
    for reader, writer in (silent, shaking, after, handed, unread):
        try:
            assert await _closed_after(reader) < LATE
        finally:
            writer.close()
    assert len(http.listener.budget) == 0  # type: ignore[union-attr]


async def _never_reading(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that pipelines requests for a large answer (the explorer's script) and
    reads nothing: the server's handler blocks writing, a request in progress."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /explorer/explorer.js HTTP/1.1\r\nHost: localhost\r\n\r\n" * 400)
    return reader, writer


async def test_a_flood_on_the_amqp_port_makes_room_for_an_http_client(stack: Stack):
    """Past the budget (shared by every port), silent connections on the AMQP port
    are closed, oldest first, to let newcomers in: the listener never holds more than
    its cap, and a signed HTTP client is served in the middle of the flood."""
    budget = stack.http.listener.budget  # type: ignore[union-attr]
    budget.cap = 40
    flood = [await asyncio.open_connection("127.0.0.1", stack.amqp.port) for _ in range(100)]
    try:
        await asyncio.sleep(0.2)
        assert len(budget) <= budget.cap
        async with aiosb.connect(stack.http.url + f"/{NAMESPACE}", operation_timeout=10) as ns:
            await ns.create_queue("still-served")
            assert await ns.queue_exists("still-served")
        closed = 0
        for reader, _ in flood[:50]:  # the oldest made room
            async with asyncio.timeout(LATE):
                closed += await reader.read(1) == b""
        assert closed == 50
        assert len(budget) <= budget.cap
    finally:
        for _, writer in flood:
            writer.close()


async def test_a_signed_amqp_connection_is_never_closed_to_make_room(stack: Stack):
    """Idle first: an AMQP connection that put a token is someone's, a silent one is
    not; a flood closes the silent ones and leaves the signed one (the SDK would
    reconnect unseen: the server's connection is checked to be the same)."""
    from azure.servicebus.aio import ServiceBusClient

    async with aiosb.connect(stack.http.url + f"/{NAMESPACE}") as ns:
        await ns.create_queue("q")
    budget = stack.http.listener.budget  # type: ignore[union-attr]
    async with ServiceBusClient.from_connection_string(
            stack.amqp.connection_string()) as client:
        async with client.get_queue_sender("q") as sender:
            signed = set(stack.amqp._connections)
            assert signed and all(c.tokens.signed_in for c in signed)
            budget.cap = len(budget) + 5
            flood = [await asyncio.open_connection("127.0.0.1", stack.amqp.port)
                     for _ in range(30)]
            try:
                await asyncio.sleep(0.2)
                from azure.servicebus import ServiceBusMessage

                await sender.send_messages(ServiceBusMessage(b"on the signed connection"))
                assert signed <= stack.amqp._connections
            finally:
                for _, writer in flood:
                    writer.close()
    (message,) = await aiosb.emulator.namespace(NAMESPACE).receive(
        "q", aiosb.protocol.ReceiveRequest(mode="receive_and_delete", max_wait=0))
    assert message.body == b"on the signed connection"


async def test_without_add_reader_the_amqp_port_still_tells_tls_by_its_first_byte(
        stack: Stack, monkeypatch: pytest.MonkeyPatch):
    """Windows' proactor loop has no ``add_reader``: the first byte is looked for
    again every little while instead, and TLS and AMQP are told apart as ever."""
    loop = asyncio.get_running_loop()

    def no_readers(*_args: object) -> None:
        raise NotImplementedError

    monkeypatch.setattr(loop, "add_reader", no_readers)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", stack.amqp.port, ssl=stack.tls(), server_hostname="localhost")
    writer.write(b"GET /$Resources/queues HTTP/1.1\r\nHost: localhost\r\n"
                 b"Connection: close\r\n\r\n")
    async with asyncio.timeout(10):
        answer = await reader.read()
    assert answer.startswith(b"HTTP/1.1 ")  # the management API, over TLS
    writer.close()
    async with aiosb.connect(f"{stack.http.url}/{NAMESPACE}") as ns:
        await ns.create_queue("plain-amqp")
    async with aiosb.connect(stack.amqp.connection_string(), operation_timeout=10) as ns:
        async with ns.sender("plain-amqp") as sender:
            await sender.send(aiosb.Message(b"over plain AMQP"))


def test_a_port_taken_gives_way_only_where_asked():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(OSError):
            listener.bind("127.0.0.1", taken)
        (sock,) = listener.bind("127.0.0.1", taken, free_if_taken=True)
        with sock:
            assert sock.getsockname()[1] not in (taken, 0)


async def test_an_http_request_never_finished_is_closed_within_the_http_deadline(
        monkeypatch: pytest.MonkeyPatch):
    """After the listener's phases, the protocol's own: an HTTP connection must bring a
    complete request within the HTTP server's IDLE_SECONDS (read when it starts)."""
    from aiosb.server import http as http_server

    monkeypatch.setattr(http_server, "IDLE_SECONDS", DEADLINE)
    async with serve() as http:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", int(http.url.rsplit(":", 1)[1]))
        writer.write(b"GET /$Resources/queues HTTP/1.1\r\nHost: localhost\r\n")
        try:
            assert await _closed_after(reader) < DEADLINE + LATE
        finally:
            writer.close()
