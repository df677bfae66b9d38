"""AMQP over WebSockets, as Service Bus serves it (#34): an HTTPS upgrade at
``/$servicebus/websocket`` with the subprotocol ``AMQPWSB10``, each binary message
a run of AMQP bytes. What users behind firewalls and proxies take
(``transport_type=TransportType.AmqpOverWebsocket``): only port 443 goes out.

aiohttp does the WebSocket framing; :class:`_WebSocketTransport` presents the socket to
the AMQP :class:`~.connection.Connection` as the byte stream it reads and writes
elsewhere, so one connection code serves TCP, TLS and WebSockets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import WSMsgType, web

from ..listener import carrying
from ._links import MAX_FRAME
from .front_end import Carrier, _unsigned

__all__ = ["MAX_MESSAGE", "PATH", "SUBPROTOCOLS", "websocket_handler"]

#: Where Service Bus takes AMQP over WebSockets.
PATH = "/$servicebus/websocket"
#: The subprotocols of the AMQP WebSocket Binding (WSB 1.0, 2.1): the name the SDKs ask
#: for (Python's and JavaScript's: ``AMQPWSB10``) and the older one some clients send.
SUBPROTOCOLS = ("AMQPWSB10", "AMQPWebSockets")
#: The largest WebSocket message taken (a few AMQP frames of the largest size the server
#: takes: a client writes a frame, or a few, per message). Larger is refused as its
#: header arrives (close code 1009), before anything checks who sent it: the route sits
#: before authentication, which the AMQP connection inside does.
MAX_MESSAGE = 4 * MAX_FRAME
#: Bytes written and not yet sent past which the AMQP side is asked to wait.
_HIGH_WATER = 64 * 1024

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Carrier],
                Coroutine[Any, Any, None]]


def websocket_handler(
    serve: Callable[[], Serve | None],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler for :data:`PATH` that serves each WebSocket as an AMQP
    connection with ``serve()`` (an :class:`~.front_end.AmqpServer`'s ``serve_stream``,
    looked up when a client comes: the HTTP server starts before the AMQP one). The
    listener counts the WebSocket's connection as idle while its AMQP connection is
    unsigned, as it counts a raw AMQP connection (:func:`aiosb.server.listener.carrying`).
    """

    async def handle(request: web.Request) -> web.StreamResponse:
        asked = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if not set(asked) & set(SUBPROTOCOLS):
            raise web.HTTPBadRequest(
                text=f"AMQP over WebSockets takes the subprotocol {SUBPROTOCOLS[0]!r} "
                f"(Sec-WebSocket-Protocol); this request asked for "
                f"{', '.join(repr(p) for p in asked if p) or 'none'}.\n")
        served = serve()
        if served is None:
            raise web.HTTPServiceUnavailable(text="this server does not serve AMQP.\n")
        ws = web.WebSocketResponse(protocols=SUBPROTOCOLS, max_msg_size=MAX_MESSAGE, autoping=True)
        await ws.prepare(request)
        transport = _WebSocketTransport(ws, request)
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        writer = asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop())
        carrier = Carrier()
        connection = asyncio.create_task(served(reader, writer, carrier))
        try:
            with carrying(request.protocol, lambda: _unsigned(carrier)):
                await _relay(ws, transport, protocol, connection)
        finally:
            if not connection.done():
                connection.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await connection
            transport.abort()
            await transport.flushed()
            if not ws.closed:
                await ws.close()
        return ws

    return handle


async def _relay(ws: web.WebSocketResponse, transport: _WebSocketTransport,
                 protocol: asyncio.StreamReaderProtocol,
                 connection: asyncio.Task[None]) -> None:
    """Give each binary message to the AMQP connection until the WebSocket closes, then
    wait for the connection to end."""
    async for msg in ws:
        if msg.type == WSMsgType.BINARY:
            await transport.received(msg.data)
        elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
            break
        # text messages carry no AMQP: ignored, as the binding has only binary
    protocol.eof_received()  # the reader meets its end
    await connection


class _WebSocketTransport(asyncio.Transport):
    """A WebSocket as an asyncio transport for the AMQP stream: what is written goes
    out in binary messages (one per run of writes, by a task of its own, in order);
    what arrives goes to the protocol, and reading pauses while the protocol asks."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        super().__init__()
        self._ws = ws
        self._extra: dict[str, Any] = {
            "peername": request.transport.get_extra_info("peername") if request.transport
            else None,
            "sslcontext": request.transport.get_extra_info("sslcontext") if request.transport
            else None,
        }
        self._protocol: asyncio.BaseProtocol | None = None
        self._pending: list[bytes] = []
        self._size = 0
        self._closing = False
        self._paused_writing = False
        self._reading = asyncio.Event()
        self._reading.set()
        self._wake = asyncio.Event()
        self._sender = asyncio.create_task(self._send())

    # -- what the AMQP side calls -------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what was written, then close the WebSocket."""
        if not self._closing:
            self._closing = True
            self._wake.set()

    def abort(self) -> None:
        self._closing = True
        self._pending.clear()
        self._size = 0
        self._wake.set()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._pending.append(bytes(data))
        self._size += len(data)
        self._wake.set()
        if self._size > _HIGH_WATER and not self._paused_writing:
            self._paused_writing = True
            protocol = self._protocol
            if isinstance(protocol, asyncio.Protocol):
                protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return self._size

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    # -- the WebSocket side ---------------------------------------------------------------

    async def received(self, data: bytes) -> None:
        """Give ``data`` (a binary message) to the protocol, once it reads."""
        await self._reading.wait()
        protocol = self._protocol
        if isinstance(protocol, asyncio.Protocol) and not self._closing:
            protocol.data_received(data)

    async def flushed(self) -> None:
        """Wait for the sending task to end (after :meth:`close` or :meth:`abort`)."""
        self.close()
        with contextlib.suppress(Exception):
            await self._sender

    async def _send(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending:
                    chunk = b"".join(self._pending)
                    self._pending.clear()
                    self._size = 0
                    await self._ws.send_bytes(chunk)
                if self._paused_writing:
                    self._paused_writing = False
                    protocol = self._protocol
                    if isinstance(protocol, asyncio.Protocol):
                        protocol.resume_writing()
                if self._closing:
                    break
        except (ConnectionError, RuntimeError):  # the client went: nothing to send to
            self._closing = True
        finally:
            with contextlib.suppress(Exception):
                await self._ws.close()
            protocol = self._protocol
            if protocol is not None:
                protocol.connection_lost(None)
