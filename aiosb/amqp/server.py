"""The AMQP 1.0 listener: :func:`serve_amqp` serves one emulator namespace to the
official Service Bus SDKs, in the running event loop.

    async with serve_amqp(port=5672) as server:
        print(server.connection_string())   # what ServiceBusClient takes

One connection string reaches everything, as on Azure (#34): an SDK's administration
client given the data plane's connection string speaks HTTPS to the same host and port.
So the listener looks at each connection's first byte before anything reads it: a TLS
record (``0x16``, a ClientHello) has TLS taken off first (with the certificate of
``management``, the management API of ``aiosb serve``); then the first byte (inside TLS,
if any) chooses: an HTTP request (its method's first letter) goes to that server, as
the clients send that take ``UseDevelopmentEmulator=true`` for plain HTTP; anything
else to AMQP (``A``, its protocol header).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from typing import cast

from .. import emulator
from ..auth import DEV_KEY, DEV_KEY_NAME, RIGHTS, SasChecker
from ..emulator import Journal
from .connection import HANDSHAKE_SECONDS, Connection

__all__ = ["AmqpServer", "ManagementSite", "serve_amqp"]

log = logging.getLogger("aiosb.amqp")

#: The first byte of a TLS record that opens a handshake (RFC 8446, 5.1).
TLS_HANDSHAKE = 0x16
#: The first bytes of the HTTP methods management requests use.
HTTP_METHODS = frozenset(b"GPDHO")
#: An HTTP server for the listener to hand management connections to: its protocol
#: factory (an aiohttp server's) and the TLS context to present to clients that open
#: with TLS (``None``: such clients are answered in AMQP, and the log says why).
ManagementSite = tuple[Callable[[], asyncio.BaseProtocol], ssl.SSLContext | None]


class AmqpServer:
    """A running AMQP listener.

    Attributes:
        host: The address it listens on.
        port: The port it listens on (the one picked when 0 was asked for).
        namespace: The emulator namespace every connection uses.
    """

    def __init__(self, host: str, namespace: str,
                 keys: dict[str, tuple[str | tuple[str, ...], frozenset[str]]],
                 journal: Journal | None = None,
                 management: ManagementSite | None = None) -> None:
        self.host = host
        self.port = 0
        #: The port that is for TLS above all (AMQP over TLS, as the SDKs speak to any
        #: namespace not a development emulator: 5671); 0 if none. It routes as ``port``.
        self.tls_port = 0
        self.management = management
        self._routing: set[asyncio.Task[None]] = set()
        self.namespace = namespace
        self.keys = keys
        self.ns = emulator.namespace(namespace)
        self._checker = SasChecker(keys)
        self._journal = journal
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[Connection] = set()

    def connection_string(self, *, tls: bool = False) -> str:
        """What an official SDK's ``from_connection_string`` takes to reach this server
        (signed with the first key): TLS off, as ``UseDevelopmentEmulator`` says; or,
        with ``tls``, AMQP over TLS at :attr:`tls_port`, as to a namespace on Azure."""
        name, (secrets, _rights) = next(iter(self.keys.items()))
        key = secrets[0] if isinstance(secrets, tuple) else secrets
        if tls:
            return (f"Endpoint=sb://localhost:{self.tls_port};SharedAccessKeyName={name};"
                    f"SharedAccessKey={key}")
        return (
            f"Endpoint=sb://localhost:{self.port};SharedAccessKeyName={name};"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true"
        )

    async def _accept(self, listener: socket.socket) -> None:
        """Take each connection as it comes and route it by its first byte."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("AMQP listener: %s; accepting again in 1 s", exc)
                    await asyncio.sleep(1.0)  # out of descriptors: connections must end
                    continue
                raise
            conn.setblocking(False)
            task = asyncio.create_task(self._route(conn))
            self._routing.add(task)
            task.add_done_callback(self._routing.discard)

    async def _route(self, conn: socket.socket) -> None:
        """Wait for the connection's first byte without reading it, then hand the socket
        to TLS (the HTTPS server) or to AMQP. A connection silent for the handshake's
        time is let go, as an AMQP client that never opens is."""
        loop = asyncio.get_running_loop()
        try:
            readable: asyncio.Future[None] = loop.create_future()
            fd = conn.fileno()

            def ready() -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(fd, ready)
            try:
                async with asyncio.timeout(HANDSHAKE_SECONDS):
                    await readable
            finally:
                loop.remove_reader(fd)
            first = conn.recv(1, socket.MSG_PEEK)
        except (TimeoutError, OSError):
            conn.close()
            return
        except BaseException:
            conn.close()
            raise
        site = self.management
        http = None if site is None else site[0]
        tls = None if site is None or not first or first[0] != TLS_HANDSHAKE else site[1]
        if first and first[0] == TLS_HANDSHAKE and tls is None:  # AMQP answers with its
            # header: the client hears the port does not speak TLS (WRONG_VERSION_NUMBER)
            log.info("a TLS client on the AMQP port, which has no certificate: answered in "
                     "AMQP (aiosb serve answers TLS here with one: pip install aiosb[tls], "
                     "or --tls-cert and --tls-key)")
        try:  # TLS (if any) is taken off here; _FirstByte routes what is inside
            await loop.connect_accepted_socket(
                lambda: _FirstByte(self, http), conn, ssl=tls,
                ssl_handshake_timeout=None if tls is None else HANDSHAKE_SECONDS)
        except (OSError, ssl.SSLError) as exc:  # a handshake that failed: the client's
            log.info("a connection to the AMQP port ended before it began: %s", exc)
            conn.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:  # a peer gone without a word is found out, and let go
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        connection = Connection(self.ns, self._checker, reader, writer, self._journal)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._connections.add(connection)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # the server is stopping: the connection ends here, quietly
        finally:
            self._tasks.discard(task)
            self._connections.discard(connection)

    async def _stop(self) -> None:
        """Drop every connection (their tasks end on the closed socket), then wait."""
        for task in list(self._routing):
            task.cancel()
        for connection in list(self._connections):
            connection.writer.transport.abort()
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:
                task.cancel()


@contextlib.asynccontextmanager
async def serve_amqp(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    namespace: str = "sbemulatorns",
    keys: dict[str, tuple[str | tuple[str, ...], frozenset[str]]] | None = None,
    journal: Journal | None = None,
    management: ManagementSite | None = None,
    tls_port: int | None = None,
) -> AsyncIterator[AmqpServer]:
    """Listen for AMQP 1.0 on ``host``:``port`` (0: a free port) for ``namespace``.

    Args:
        host: The address to listen on.
        port: The port; 0 picks a free one (read it from the server's ``port``).
        namespace: The emulator namespace served (created on first use).
        keys: ``{key_name: (key, rights)}`` that tokens may be signed with; by default
            the development key with every right.
        journal: Durable mode (the HTTP server's journal): what a transfer, a receive or
            a disposition changed is on disk before the client is answered.
        management: Where a client that speaks HTTP goes (an HTTP server's protocol
            factory, and the TLS context presented to one that opens with TLS): the
            management API, so that the data plane's connection string reaches it too.
            Without it such a client is answered in AMQP.
        tls_port: Listen on this port too (0: a free one), where clients speak TLS:
            AMQP over TLS, as the SDKs speak it to a namespace on Azure (5671), and the
            management API over HTTPS; it needs ``management`` with a TLS context.
    """
    if tls_port is not None and (management is None or management[1] is None):
        raise ValueError("serve_amqp: tls_port needs management with a TLS context.")
    server = AmqpServer(host, namespace, keys or {DEV_KEY_NAME: (DEV_KEY, frozenset(RIGHTS))},
                        journal, management)
    server.ns.attach()
    try:
        listeners = _listen(host, port)
        try:
            server.port = listeners[0].getsockname()[1]
            if tls_port is not None:
                secure = _listen(host, tls_port)
                listeners += secure
                server.tls_port = secure[0].getsockname()[1]
            accepting = [asyncio.create_task(server._accept(sock)) for sock in listeners]
            try:
                yield server
            finally:
                for task in accepting:
                    task.cancel()
                await asyncio.gather(*accepting, return_exceptions=True)
                await server._stop()
        finally:
            for sock in listeners:
                sock.close()
    finally:
        server.ns.detach()


class _FirstByte(asyncio.Protocol):
    """The one place a connection's protocol is chosen, from its first byte (inside TLS,
    if the connection opened with it): an HTTP method's first letter goes to the HTTP
    server (the management API, and AMQP over WebSockets), anything else to AMQP (``A``,
    its header; what is no AMQP is refused there, in AMQP's words). It hands the
    connection, and what it has read, to the one it chose."""

    def __init__(self, server: AmqpServer,
                 http: Callable[[], asyncio.BaseProtocol] | None) -> None:
        self._server = server
        self._http = http
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # uvloop's TLS transport is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        inner: asyncio.BaseProtocol
        if self._http is not None and data[0] in HTTP_METHODS:
            inner = self._http()
        else:
            inner = asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._server._serve)
        transport.set_protocol(inner)
        inner.connection_made(transport)
        cast(asyncio.Protocol, inner).data_received(data)

    def eof_received(self) -> bool | None:
        return None  # closed before a byte: nothing to hand over


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on ``host``:``port``, one for each address it names, as
    ``asyncio.start_server`` makes them (the address reused at once after a restart;
    port 0: the port the first one was given, for all)."""
    found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(
                (f, k, p, "", a) for f, k, p, _, a in found):
            if socks and port == 0:  # the others on the port the first was given
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks
