"""The listener that owns every port of ``aiosb serve`` (#48): it knows bytes, TLS and
deadlines, not the protocols above them (in the spirit of anyio's ``TLSListener``).

    listener = Listener()
    port = await listener.open("127.0.0.1", 5672, choose, tls=context, sniff_tls=True)
    ...
    await port.aclose()

A connection goes through phases, each with a deadline of its own (a module constant,
read when the phase begins):

1. accepted, on a port that takes TLS off only for clients that open with it
   (``sniff_tls``): its first byte is waited for and peeked at, not read
   (:data:`FIRST_BYTE_SECONDS`);
2. the TLS handshake, where the port or that first byte asks for TLS
   (:data:`TLS_HANDSHAKE_SECONDS`);
3. the first byte of the stream (inside TLS: :data:`TLS_FIRST_BYTE_SECONDS`, else
   :data:`FIRST_BYTE_SECONDS`), from which the port's ``choose`` picks a :class:`Route`:
   the protocol the connection is handed to, with what it has read (on a port several
   protocols share, :class:`FirstBytes`: each registers the bytes it opens with);
4. the protocol's open, which the protocol above times itself (AMQP:
   ``aiosb.server.amqp.connection.HANDSHAKE_SECONDS``, whatever carries it; HTTP: the HTTP
   server's ``IDLE_SECONDS``).

Every connection of every port of a listener counts once against its one
:class:`Budget` (:func:`max_connections`): at the cap a newcomer makes room by closing
the oldest connections that are idle (any connection not yet handed to a protocol, those
its :class:`Route` says are idle, or whose protocol carries one that is: :func:`carrying`,
and those whose writes have stalled for :data:`STALLED_SECONDS`), so however many
connections a hostile peer opens on one port, signed clients on every port are still
let in. Every accepted connection is tracked, and a port that closes closes them all.
An error of ``accept()`` never ends a port (:data:`ACCEPT_BACKOFF_SECONDS`).

Imports nothing of aiosb: it serves any protocol on any port.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import cast

__all__ = [
    "ACCEPT_BACKOFF_SECONDS",
    "FD_RESERVE",
    "FIRST_BYTE_SECONDS",
    "MAX_CONNECTIONS",
    "STALLED_SECONDS",
    "TLS_FIRST_BYTE_SECONDS",
    "TLS_HANDSHAKE_SECONDS",
    "Budget",
    "Choose",
    "FirstBytes",
    "Listener",
    "Port",
    "Route",
    "bind",
    "carried_idle",
    "carrying",
    "max_connections",
]

log = logging.getLogger("aiosb.server.listener")

#: Seconds a connection is given to send its first byte (before TLS, on a port that
#: looks at it to choose; and the first byte of a connection without TLS).
FIRST_BYTE_SECONDS = 10.0
#: Seconds a TLS handshake is given, from the connection's first byte.
TLS_HANDSHAKE_SECONDS = 10.0
#: Seconds a connection is given to send its first byte inside TLS, once the
#: handshake is done (a peer that shakes hands and falls silent holds a descriptor).
TLS_FIRST_BYTE_SECONDS = 10.0
#: The most connections a listener keeps at once, whatever the descriptor limit.
MAX_CONNECTIONS = 10_000
#: File descriptors kept free for everything but client connections (the durable
#: store and its writer, logs, the listening sockets).
FD_RESERVE = 64
#: The first byte of a TLS record that opens a handshake (RFC 8446, 5.1).
TLS_RECORD = 0x16
#: Seconds the accept loop waits after an error accept(2) does not list as the peer's
#: nor as a shortage (logged), before it accepts again: a port never stops for one.
ACCEPT_BACKOFF_SECONDS = 1.0
#: What accept(2) reports of the peer, or of the network, for one connection: that
#: connection is lost, the port accepts the next (Linux's accept(2), "Error handling").
_PEER_ERRORS = frozenset(
    getattr(errno, name) for name in (
        "ECONNABORTED", "ECONNRESET", "EPROTO", "ENETDOWN", "ENOPROTOOPT", "EHOSTDOWN",
        "ENONET", "EHOSTUNREACH", "EOPNOTSUPP", "ENETUNREACH", "EPERM", "EINTR", "EAGAIN",
        "ETIMEDOUT") if hasattr(errno, name))
#: What accept(2) reports when descriptors or memory run out.
_SHORTAGE_ERRORS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
#: Seconds a connection's writes may stay stalled (more written to it than its
#: transport's high-water mark, unread by the peer) before it counts as idle, closed
#: first to make room, whatever its protocol says: a peer that asks and never reads
#: (a request in progress, blocked on it, for ever) holds no place in the budget.
STALLED_SECONDS = 30.0
#: Where the loop cannot wait for a socket to be readable (Windows' proactor has no
#: ``add_reader``), how often a connection is looked at for its first byte.
_POLL_SECONDS = 0.05


def max_connections() -> int:
    """How many client connections a listener keeps at once: what the process's file
    descriptor limit allows, less :data:`FD_RESERVE`, and at most
    :data:`MAX_CONNECTIONS`."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            soft = MAX_CONNECTIONS + FD_RESERVE
    except (ImportError, OSError, ValueError):  # no such limit here (Windows)
        soft = 1024
    return max(16, min(MAX_CONNECTIONS, soft - FD_RESERVE))


def _never_idle(_protocol: asyncio.BaseProtocol) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Route:
    """A protocol a connection may be handed to.

    Attributes:
        factory: Makes the protocol for one connection (it gets ``connection_made``
            with the transport, then ``data_received`` with what was read).
        idle: Whether that protocol's connection may be closed to make room for a
            newcomer (nothing in progress a signed client asked for); by default never.
    """

    factory: Callable[[], asyncio.BaseProtocol]
    idle: Callable[[asyncio.BaseProtocol], bool] = _never_idle


#: What each protocol that carries another one says of its connection's idleness
#: (:func:`carrying`), by the protocol the listener handed the connection to.
_carried: dict[asyncio.BaseProtocol, Callable[[], bool]] = {}


@contextlib.contextmanager
def carrying(protocol: asyncio.BaseProtocol, idle: Callable[[], bool]) -> Iterator[None]:
    """For the ``with`` block, the connection of ``protocol`` (an HTTP server's) carries
    another protocol (AMQP inside a WebSocket) that ``idle()`` says is idle or not: the
    :class:`Route`'s ``idle`` asks :func:`carried_idle`, so that what a protocol carries
    counts as it would on a port of its own."""
    _carried[protocol] = idle
    try:
        yield
    finally:
        if _carried.get(protocol) is idle:
            del _carried[protocol]


def carried_idle(protocol: asyncio.BaseProtocol) -> bool | None:
    """Whether what ``protocol``'s connection carries is idle (:func:`carrying`); None
    if it carries nothing."""
    idle = _carried.get(protocol)
    return None if idle is None else idle()


#: What a port hands a connection to, chosen by its first byte (inside TLS, if any).
Choose = Callable[[int], Route]


class FirstBytes:
    """A port's :data:`Choose` shared by several protocols: each registers the first
    bytes it opens with (:meth:`add`), and a connection whose first byte is none of
    them goes to ``otherwise`` (the port's own protocol, which refuses in its own words
    what is not its). The listener knows no protocol: the protocols say how they are
    recognised."""

    __slots__ = ("_routes", "otherwise")

    def __init__(self, otherwise: Choose) -> None:
        self.otherwise = otherwise
        self._routes: dict[int, Route] = {}

    def add(self, first: Iterable[int], route: Route) -> None:
        """Hand connections whose first byte is among ``first`` to ``route``.

        Raises:
            ValueError: A byte another protocol registered already.
        """
        first = frozenset(first)
        taken = sorted(byte for byte in first if byte in self._routes)
        if taken:
            raise ValueError(f"first bytes {bytes(taken)!r} already go to another protocol")
        self._routes.update(dict.fromkeys(first, route))

    def __call__(self, first: int) -> Route:
        route = self._routes.get(first)
        return self.otherwise(first) if route is None else route


class _Connection:
    """One accepted connection, from its socket to the protocol it was handed to."""

    __slots__ = ("closed", "handed", "port", "protocol", "route", "sock", "stalled_at",
                 "task", "transport")

    def __init__(self, sock: socket.socket, port: Port) -> None:
        self.sock = sock
        self.port = port
        self.handed = False  # the socket is the loop's transport's (it closes it)
        self.closed = False
        self.transport: asyncio.BaseTransport | None = None
        self.route: Route | None = None
        self.protocol: asyncio.BaseProtocol | None = None
        self.task: asyncio.Task[None] | None = None
        self.stalled_at: float | None = None  # when its writes were first seen stalled

    def idle(self) -> bool:
        if self.route is None or self.protocol is None:
            return True  # no protocol has it yet: nothing is in progress
        return self.route.idle(self.protocol) or self.stalled()

    def stalled(self) -> bool:
        """Whether its writes have been seen stalled (its transport's write buffer
        above the high-water mark: the protocol is paused) for :data:`STALLED_SECONDS`,
        at every look since (a look: each time the budget looks for idle ones)."""
        transport = self.transport
        try:
            size = transport.get_write_buffer_size()  # type: ignore[union-attr]
            high = transport.get_write_buffer_limits()[1]  # type: ignore[union-attr]
        except (AttributeError, NotImplementedError, RuntimeError):
            return False  # no buffer to look at: never stalled
        now = asyncio.get_running_loop().time()
        if size <= high:
            self.stalled_at = None
            return False
        if self.stalled_at is None:
            self.stalled_at = now
        return now - self.stalled_at >= STALLED_SECONDS

    def gone(self) -> bool:
        transport = self.transport
        return self.closed or (transport is not None and transport.is_closing())

    def close(self) -> None:
        """Close it, in whatever phase it is."""
        self.closed = True
        transport = self.transport
        if transport is not None:
            cast(asyncio.Transport, transport).abort()
            return
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()  # waiting for a byte, or in the TLS handshake: its end closes
            return  # the socket, once the loop no longer watches it
        if not self.handed:
            self.sock.close()


class Budget:
    """One cap on the connections of every port of a listener (and so of every
    protocol, and whatever they carry: a WebSocket inside an HTTP connection counts
    as that one connection), with the idle closed first to make room.

    Args:
        cap: How many connections at most; by default :func:`max_connections`.
    """

    def __init__(self, cap: int | None = None) -> None:
        self.cap = max_connections() if cap is None else cap
        self._held: dict[_Connection, None] = {}  # oldest first
        self._tidy_at = 64

    def __len__(self) -> int:
        self._tidy()
        return len(self._held)

    def of(self, port: Port) -> list[_Connection]:
        """The connections ``port`` took that are held."""
        return [c for c in self._held if c.port is port]

    def admit(self, connection: _Connection) -> bool:
        """Count ``connection`` in, closing idle ones (oldest first) at the cap; False
        if it cannot be (every connection held is busy): the caller closes it."""
        held = self._held
        if len(held) >= min(self._tidy_at, self.cap):
            self._tidy()
        if len(held) >= self.cap:
            self.make_room(len(held) - self.cap + 1 + self.cap // 10)
        if len(held) >= self.cap:
            return False
        held[connection] = None
        return True

    def make_room(self, count: int) -> int:
        """Close up to ``count`` idle connections, the oldest first; how many."""
        closed = 0
        for connection in list(self._held):
            if closed >= count:
                break
            if connection.idle():
                connection.close()
                del self._held[connection]
                closed += 1
        if closed:
            log.warning("at the connection cap (%d): closed %d idle connections",
                        self.cap, closed)
        return closed

    def release(self, connection: _Connection) -> None:
        self._held.pop(connection, None)

    def _tidy(self) -> None:
        """Forget connections that ended (their protocols closed them): looked for when
        the count doubles, so counting costs nothing per connection."""
        for connection in [c for c in self._held if c.gone()]:
            del self._held[connection]
        self._tidy_at = max(64, 2 * len(self._held))


class Listener:
    """Owns the ports it opens, their connections and their one :class:`Budget`."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = Budget() if budget is None else budget

    async def open(self, host: str, port: int, choose: Choose, *,
                   tls: ssl.SSLContext | None = None, sniff_tls: bool = False,
                   free_if_taken: bool = False) -> Port:
        """Listen on ``host``:``port`` (0: a free port) and start accepting.

        Args:
            choose: The route of a connection, from its first byte (inside TLS, if any).
            tls: Take TLS off every connection with it; with ``sniff_tls``, only those
                whose first byte opens a TLS handshake (the others are served plain).
            free_if_taken: If ``port`` is taken, listen on a free one instead (a
                default port the user did not choose).
        """
        opened = Port(self, bind(host, port, free_if_taken=free_if_taken), choose, tls,
                      sniff_tls and tls is not None, port)
        opened.start()
        return opened


class Port:
    """A port a :class:`Listener` accepts on (one socket per address its host names).

    Attributes:
        asked: The port asked for (0: any).
        number: The port it listens on.
        numbers: Those of every socket (a host of two addresses, port 0: one each).
    """

    def __init__(self, listener: Listener, sockets: list[socket.socket], choose: Choose,
                 tls: ssl.SSLContext | None, sniff_tls: bool, asked: int) -> None:
        self.listener = listener
        self.sockets = sockets
        self.choose = choose
        self.tls = tls
        self.sniff_tls = sniff_tls
        self.asked = asked
        self.number: int = sockets[0].getsockname()[1]
        self.numbers = frozenset(sock.getsockname()[1] for sock in sockets)
        self._accepting: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._accepting = [asyncio.create_task(self._accept(sock)) for sock in self.sockets]

    async def stop_accepting(self) -> None:
        """Take no more connections (those taken go on)."""
        for task in self._accepting:
            task.cancel()
        await asyncio.gather(*self._accepting, return_exceptions=True)
        for sock in self.sockets:
            sock.close()

    async def aclose(self) -> None:
        """Stop accepting and close every connection the port took, in any phase."""
        await self.stop_accepting()
        budget = self.listener.budget
        mine = budget.of(self)
        for connection in mine:
            connection.close()
            budget.release(connection)
        tasks = [c.task for c in mine if c.task is not None and not c.task.done()]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        budget = self.listener.budget
        while True:
            try:
                sock, _ = await loop.sock_accept(listening)
            except OSError as exc:
                if exc.errno in _SHORTAGE_ERRORS:
                    log.warning("port %d: %s; closing idle connections", self.number, exc)
                    if not budget.make_room(1 + budget.cap // 10):
                        await asyncio.sleep(1.0)  # every one busy: wait for some to end
                elif exc.errno in _PEER_ERRORS or isinstance(exc, ConnectionError):
                    log.info("port %d: a connection was lost before it was accepted: %s",
                             self.number, exc)
                else:  # nothing a peer does: said, and the port goes on after a while
                    log.error("port %d: accept failed: %s; accepting again in %g s",
                              self.number, exc, ACCEPT_BACKOFF_SECONDS, exc_info=exc)
                    await asyncio.sleep(ACCEPT_BACKOFF_SECONDS)
                continue
            sock.setblocking(False)
            connection = _Connection(sock, self)
            if not budget.admit(connection):
                log.warning("port %d: %d connections, none idle: a new one refused",
                            self.number, budget.cap)
                sock.close()
                continue
            connection.task = asyncio.create_task(self._open(connection))

    async def _open(self, connection: _Connection) -> None:
        """Wait for the first byte where TLS is optional, take TLS off where asked,
        and give the stream to a :class:`_Gate`."""
        loop = asyncio.get_running_loop()
        sock = connection.sock
        tls = self.tls
        try:
            if tls is not None and self.sniff_tls:
                first = await _peek(sock, FIRST_BYTE_SECONDS)
                if not first:
                    self._drop(connection)
                    return
                if first[0] != TLS_RECORD:
                    tls = None
            connection.handed = True
            await loop.connect_accepted_socket(
                lambda: _Gate(self, connection, tls is not None), sock, ssl=tls,
                ssl_handshake_timeout=None if tls is None else TLS_HANDSHAKE_SECONDS)
        except TimeoutError:
            log.info("port %d: a connection sent nothing within %g s: closed",
                     self.number, FIRST_BYTE_SECONDS)
            self._drop(connection)
        except (OSError, ssl.SSLError) as exc:  # the handshake failed, or timed out
            log.info("port %d: a connection ended before it began: %s", self.number, exc)
            self._drop(connection)
        except BaseException:
            self._drop(connection)
            raise

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self.listener.budget.release(connection)


class _Gate(asyncio.Protocol):
    """The stream's first byte (inside TLS, if any), within its deadline: it chooses the
    route, and the connection, with what was read, is handed to that protocol."""

    def __init__(self, port: Port, connection: _Connection, tls: bool) -> None:
        self._port = port
        self._connection = connection
        self._tls = tls
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        connection = self._connection
        connection.transport = transport  # uvloop's TLS transport is no asyncio.Transport
        if connection.closed:  # closed while its TLS handshake ran
            cast(asyncio.Transport, transport).abort()
            return
        seconds = TLS_FIRST_BYTE_SECONDS if self._tls else FIRST_BYTE_SECONDS
        self._timer = asyncio.get_running_loop().call_later(seconds, self._silent, seconds)

    def _silent(self, seconds: float) -> None:
        log.info("port %d: a connection sent nothing%s within %g s: closed",
                 self._port.number, " after its TLS handshake" if self._tls else "", seconds)
        self._port._drop(self._connection)

    def data_received(self, data: bytes) -> None:
        connection = self._connection
        transport = connection.transport
        if self._timer is not None:
            self._timer.cancel()
        if transport is None or connection.closed:
            return
        route = self._port.choose(data[0])
        inner = route.factory()
        connection.route, connection.protocol = route, inner
        transport.set_protocol(inner)
        inner.connection_made(transport)
        inner.data_received(data)  # type: ignore[attr-defined]

    def eof_received(self) -> bool | None:
        return None  # closed before a byte: nothing to hand over

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._port._drop(self._connection)


async def _peek(sock: socket.socket, seconds: float) -> bytes:
    """The socket's first byte, left unread, once it comes within ``seconds`` (b"": the
    peer closed). Raises :class:`TimeoutError` past them."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(seconds):
        while True:
            try:
                return sock.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                pass
            readable: asyncio.Future[None] = loop.create_future()

            def ready(readable: asyncio.Future[None] = readable) -> None:
                if not readable.done():
                    readable.set_result(None)

            fd = sock.fileno()
            try:
                loop.add_reader(fd, ready)
            except NotImplementedError:  # Windows' proactor: look again in a while
                await asyncio.sleep(_POLL_SECONDS)
                continue
            try:
                await readable
            finally:
                loop.remove_reader(fd)


def bind(host: str, port: int, *, free_if_taken: bool = False) -> list[socket.socket]:
    """Listening sockets on ``host``:``port``, one for each address it names, as
    ``asyncio.start_server`` makes them (port 0: the port the first one was given, for
    all). ``free_if_taken``: a port in use by another process gives way to a free one.

    Raises:
        OSError: The port is taken (and not ``free_if_taken``), or the host unknown.
    """
    try:
        return _bind(host, port)
    except OSError as exc:
        if not (free_if_taken and port and exc.errno == errno.EADDRINUSE):
            raise
        log.info("port %d is taken: listening on a free one", port)
        return _bind(host, 0)


def _bind(host: str, port: int) -> list[socket.socket]:
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
            if sys.platform != "win32":  # reused at once after a restart; on Windows
                # the option would let a second server take a port in use
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

