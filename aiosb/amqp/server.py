"""The AMQP 1.0 listener: :func:`serve_amqp` serves one emulator namespace to the
official Service Bus SDKs, in the running event loop.

    async with serve_amqp(port=5672) as server:
        print(server.connection_string())   # what ServiceBusClient takes
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

from .. import emulator
from ..auth import DEV_KEY, DEV_KEY_NAME, RIGHTS, SasChecker
from ..emulator import Journal
from .connection import Connection

__all__ = ["AmqpServer", "serve_amqp"]


class AmqpServer:
    """A running AMQP listener.

    Attributes:
        host: The address it listens on.
        port: The port it listens on (the one picked when 0 was asked for).
        namespace: The emulator namespace every connection uses.
    """

    def __init__(self, host: str, namespace: str,
                 keys: dict[str, tuple[str, frozenset[str]]],
                 journal: Journal | None = None) -> None:
        self.host = host
        self.port = 0
        self.namespace = namespace
        self.keys = keys
        self.ns = emulator.namespace(namespace)
        self._checker = SasChecker(keys)
        self._journal = journal
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[Connection] = set()

    def connection_string(self) -> str:
        """What an official SDK's ``from_connection_string`` takes to reach this server
        (signed with the first key; TLS off, as ``UseDevelopmentEmulator`` says)."""
        name, (key, _rights) = next(iter(self.keys.items()))
        return (
            f"Endpoint=sb://localhost:{self.port};SharedAccessKeyName={name};"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true"
        )

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
    keys: dict[str, tuple[str, frozenset[str]]] | None = None,
    journal: Journal | None = None,
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
    """
    server = AmqpServer(host, namespace, keys or {DEV_KEY_NAME: (DEV_KEY, frozenset(RIGHTS))},
                        journal)
    server.ns.attach()
    try:
        listener = await asyncio.start_server(server._serve, host, port)
        try:
            server.port = listener.sockets[0].getsockname()[1]
            yield server
        finally:
            listener.close()
            await server._stop()
            await listener.wait_closed()
    finally:
        server.ns.detach()
