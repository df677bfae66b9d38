"""The AMQP 1.0 listener: :func:`serve_amqp` serves one emulator namespace to the
official Service Bus SDKs, in the running event loop.

    async with serve_amqp(port=5672) as server:
        print(server.connection_string())   # what ServiceBusClient takes

One connection string reaches everything, as on Azure (#34): an SDK's administration
client given the data plane's connection string speaks HTTPS to the same host and port.
So the ports are shared: each connection's first byte is looked at before anything
reads it (:mod:`aiosb.server.listener`, which also holds the deadlines before a protocol
has the connection, and the one connection budget of every port). A TLS record (a
ClientHello) has TLS taken off first, where the server is given a certificate
(``tls``); then the first byte (inside TLS, if any) chooses: the protocols that share
the port (``others``: ``aiosb serve``'s HTTP plane, :func:`aiosb.server.serve`) take the
bytes they registered, and AMQP everything else (``A``, its protocol header; what is no
AMQP is refused there, in AMQP's words). This module knows AMQP only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterable

from ... import emulator
from ...auth import DEV_KEY, DEV_KEY_NAME, RIGHTS, SasChecker
from ...emulator import Journal
from ..listener import TLS_RECORD, FirstBytes, Listener, Port, Route
from .connection import Connection

__all__ = ["AmqpServer", "Carrier", "Shared", "serve_amqp"]

log = logging.getLogger("aiosb.server.amqp")

#: Another protocol that shares the AMQP ports: the first bytes it opens with (inside
#: TLS, if any), and its route (``aiosb serve``: the HTTP plane, for the management API).
Shared = tuple[Iterable[int], Route]


class AmqpServer:
    """A running AMQP listener.

    Attributes:
        host: The address it listens on.
        port: The port it listens on (the one picked when 0 was asked for).
        namespace: The emulator namespace every connection uses.
    """

    def __init__(self, host: str, namespace: str,
                 keys: dict[str, tuple[str | tuple[str, ...], frozenset[str]]],
                 journal: Journal | None = None, tls: ssl.SSLContext | None = None,
                 others: Iterable[Shared] = ()) -> None:
        self.host = host
        self.port = 0
        #: The port that is for TLS above all (AMQP over TLS, as the SDKs speak to any
        #: namespace not a development emulator: 5671); 0 if none. It routes as ``port``.
        self.tls_port = 0
        #: What TLS is taken off with (None: a client that opens with TLS is answered
        #: in AMQP, and the log says why).
        self.tls = tls
        self._amqp = Route(lambda: _AmqpStream(self), _unsigned)
        #: The route of a connection, by its first byte: the protocols sharing the
        #: ports (``others``) by the bytes they registered, else AMQP.
        self.choose = FirstBytes(self._amqp_route)
        for first, route in others:
            self.choose.add(first, route)
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

    def _amqp_route(self, first: int) -> Route:
        """AMQP's route, for whatever no other protocol took (``A``, its header; what is
        no AMQP is refused there, in AMQP's words)."""
        if first == TLS_RECORD:  # TLS was not taken off: AMQP answers with its header,
            # and the client hears the port does not speak TLS (WRONG_VERSION_NUMBER)
            log.info("a TLS client on the AMQP port, which has no certificate: answered in "
                     "AMQP (aiosb serve answers TLS here with one: pip install aiosb[tls], "
                     "or --tls-cert and --tls-key)")
        return self._amqp

    async def serve_stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           stream: Carrier | _AmqpStream | None = None) -> None:
        """Serve one AMQP connection (over TCP, TLS, or a WebSocket), made known to
        ``stream`` (for the listener to tell whether it is idle: :func:`_unsigned`)."""
        sock = writer.get_extra_info("socket")
        if sock is not None:  # a peer gone without a word is found out, and let go
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        connection = Connection(self.ns, self._checker, reader, writer, self._journal)
        if stream is not None:
            stream.connection = connection
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
        """Drop every AMQP connection (their tasks end on the closed socket), then wait;
        the listener closes the rest."""
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
    tls: ssl.SSLContext | None = None,
    others: Iterable[Shared] = (),
    tls_port: int | None = None,
    listener: Listener | None = None,
    free_if_taken: bool = False,
    tls_free_if_taken: bool = False,
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
        tls: Take TLS off a client that opens with it (a ClientHello), presenting this
            context's certificate; without it such a client is answered in AMQP.
        others: Other protocols that share the ports, each with the first bytes it
            opens with (inside TLS, if any) and its route: ``aiosb serve``'s HTTP plane
            (the management API), so that the data plane's connection string reaches
            it too. AMQP takes every other byte.
        tls_port: Listen on this port too (0: a free one), where clients speak TLS:
            AMQP over TLS, as the SDKs speak it to a namespace on Azure (5671), and
            whatever of ``others`` comes over TLS; it needs ``tls``.
        listener: The listener to open the ports on (the HTTP server's: one connection
            budget for every port); by default one of its own.
        free_if_taken: If ``port`` is taken, listen on a free one instead (a default
            the user did not choose); else a taken port is an error.
        tls_free_if_taken: The same for ``tls_port``.
    """
    if tls_port is not None and tls is None:
        raise ValueError("serve_amqp: tls_port needs tls (a context with a certificate).")
    server = AmqpServer(host, namespace, keys or {DEV_KEY_NAME: (DEV_KEY, frozenset(RIGHTS))},
                        journal, tls, others)
    listener = Listener() if listener is None else listener
    server.ns.attach()
    ports: list[Port] = []
    try:
        ports.append(await listener.open(host, port, server.choose, tls=tls, sniff_tls=True,
                                         free_if_taken=free_if_taken))
        server.port = ports[0].number
        if tls_port is not None:
            ports.append(await listener.open(host, tls_port, server.choose, tls=tls,
                                             free_if_taken=tls_free_if_taken))
            server.tls_port = ports[1].number
        yield server
    finally:
        try:
            for opened in ports:
                await opened.stop_accepting()
            await server._stop()
            for opened in ports:
                await opened.aclose()
        finally:
            server.ns.detach()


class Carrier:
    """What carries an AMQP connection (a WebSocket), told the connection once it is
    made, so that the listener counts it as idle as a raw one (:func:`_unsigned`)."""

    __slots__ = ("connection",)

    def __init__(self) -> None:
        self.connection: Connection | None = None


class _AmqpStream(asyncio.StreamReaderProtocol):
    """The stream an AMQP :class:`~.connection.Connection` reads, and that connection
    (once made): whether the listener may close it to make room (:func:`_unsigned`)."""

    def __init__(self, server: AmqpServer) -> None:
        self.connection: Connection | None = None
        self._server = server
        super().__init__(asyncio.StreamReader(), self._connected)

    async def _connected(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        await self._server.serve_stream(reader, writer, self)


def _unsigned(protocol: asyncio.BaseProtocol | Carrier) -> bool:
    """An AMQP connection that has signed in to nothing yet (no token, no key): idle to
    the listener, which closes it first to make room; a signed one is someone's."""
    connection = getattr(protocol, "connection", None)
    return connection is None or not connection.tokens.signed_in
