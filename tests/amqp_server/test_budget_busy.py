"""Issue 48, item 1, after review: the one connection budget of every port cannot be
filled by unsigned clients that never count as idle. Before, an HTTP connection with a
request in progress was busy, so at the cap (every port shares it) newcomers on every
port were refused by (a) WebSockets that carry an unsigned AMQP connection (idle over
raw TCP, busy inside a WebSocket) and (b) clients that ask and never read their
answers (the handler blocked writing, in progress for ever)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest

from aiosb.server import listener
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp._websocket import PATH, websocket_handler
from aiosb.server.amqp.codec import Symbol, frame
from aiosb.server.amqp.front_end import AmqpServer, serve_amqp
from aiosb.server.explorer import Explorer
from aiosb.server.http import REQUEST_FIRST_BYTES, ServedEmulator, serve
from aiosb.server.listener import Budget, Listener

pytestmark = pytest.mark.timeout(60)

NAMESPACE = "busy"
CAP = 4
SASL = b"AMQP\x03\x01\x00\x00"
AMQP = b"AMQP\x00\x01\x00\x00"


@dataclass
class Stack:
    http: ServedEmulator
    amqp: AmqpServer

    @property
    def http_port(self) -> int:
        return int(self.http.url.rsplit(":", 1)[1])


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    """HTTP (with the explorer, and AMQP over WebSockets) and AMQP on one listener of
    a budget of CAP connections, as ``aiosb serve`` wires them."""
    started: list[AmqpServer] = []  # the HTTP server starts first, as in aiosb serve
    routes = {PATH: websocket_handler(lambda: started[0].serve_stream if started else None)}
    shared = Listener(Budget(CAP))
    async with serve(root=NAMESPACE, routes=routes, listener=shared, sites=[Explorer]) as http, \
            serve_amqp(namespace=NAMESPACE, listener=shared,
                       others=[(REQUEST_FIRST_BYTES, http.route)]) as amqp:
        started.append(amqp)
        yield Stack(http, amqp)


async def _served(port: int) -> bool:
    """Whether an HTTP request on ``port`` is answered (a refused newcomer is closed)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /$Resources/queues HTTP/1.1\r\nHost: localhost\r\n\r\n")
        async with asyncio.timeout(5):
            return (await reader.readline()).startswith(b"HTTP/1.1 ")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()


async def test_websockets_with_unsigned_amqp_inside_make_room_as_raw_amqp(stack: Stack):
    """#48 review 2a: CAP WebSockets, each carrying an AMQP connection that opened
    with SASL ANONYMOUS and never signed in, count as idle as the same connection over
    raw TCP does: a newcomer on the HTTP port and one on the AMQP port are served."""
    held = []
    async with aiohttp.ClientSession() as session:
        for _ in range(CAP):
            ws = await session.ws_connect(f"http://127.0.0.1:{stack.http_port}{PATH}",
                                          protocols=["AMQPWSB10"])
            held.append(ws)
            await ws.send_bytes(SASL)
            await ws.receive()
            await ws.send_bytes(frame(0, p.performative(
                p.SASL_INIT, Symbol("ANONYMOUS"), b"", "localhost"), kind=1))
            await ws.send_bytes(AMQP)
            await ws.send_bytes(frame(0, p.performative(p.OPEN, "x", "localhost")))
        await asyncio.sleep(0.3)
        budget = stack.http.listener.budget  # type: ignore[union-attr]
        assert len(budget) == CAP
        assert await _served(stack.http_port)
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.amqp.port)
        try:
            writer.write(SASL)
            async with asyncio.timeout(5):
                assert await reader.readexactly(8) == SASL
        finally:
            writer.close()
        for ws in held:
            await ws.close()


async def test_clients_that_never_read_their_answers_make_room_once_stalled(
        stack: Stack, monkeypatch: pytest.MonkeyPatch):
    """#48 review 2b: CAP clients pipeline requests for a large answer and read nothing
    (each handler blocked writing, a request in progress for ever). Once their writes
    have stalled for STALLED_SECONDS they count as idle: a newcomer is served."""
    monkeypatch.setattr(listener, "STALLED_SECONDS", 0.3)
    loop = asyncio.get_running_loop()
    socks = []
    try:
        for _ in range(CAP):
            sock = socket.socket()
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", stack.http_port))
            await loop.sock_sendall(
                sock, b"GET /explorer/explorer.js HTTP/1.1\r\nHost: localhost\r\n\r\n" * 400)
        await asyncio.sleep(0.5)
        budget = stack.http.listener.budget  # type: ignore[union-attr]
        assert len(budget) == CAP
        served = False
        for _ in range(10):  # the first look at a stalled connection starts its clock
            if served := await _served(stack.http_port):
                break
            await asyncio.sleep(0.3)
        assert served
    finally:
        for sock in socks:
            sock.close()
