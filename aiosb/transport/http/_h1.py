"""The HTTP transport's client: HTTP/1.1 over asyncio, with httptools (llhttp, the parser
Node.js uses) reading the answers (#16).

aiohttp's client cost about 150 µs of CPU a request on the 2-core machine, three
times what this costs (45-55 µs, measured against the same server in another process);
a round trip of the benchmark's (send, receive, complete) is three requests, one after
another. What the transport needs of a client is small: requests with a body of bytes,
answers read whole, connections kept alive and shared, TLS. So this does that and no
more: no redirects (the transport refuses a 3xx), no cookies, no compression (it asks
for none), no ``Expect: 100-continue``, no HEAD (an answer without the body its length
announces). A request that meets a kept-alive connection
the server closed is sent once more on a new one when it is idempotent.

A connection serves one request at a time. It goes back to the pool when its answer
is read whole and the server keeps it alive; a request cancelled or failed midway
closes its connection, since what is left on it is unknown.

Through an HTTP proxy (:class:`~aiosb._endpoint.Proxy`), TLS goes in a ``CONNECT`` tunnel
(RFC 9110, 9.3.6) and plain HTTP as requests in absolute form, each with the proxy's
``Proxy-Authorization`` when it has a user. A proxy that refuses is
:class:`ProxyRefused`, naming its answer. Imports only the standard library, httptools,
multidict and yarl (and the Proxy value).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import NamedTuple, cast

import httptools
from multidict import CIMultiDict
from yarl import URL

from ..._endpoint import Proxy

__all__ = ["Answer", "Broken", "ConnectFailed", "Pool", "ProxyRefused"]

#: Methods whose request carries a Content-Length even without a body (as aiohttp's).
_BODIED = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Methods a request may be sent again for, when a kept-alive connection turns out to
#: have been closed by the server before it read a byte of it (RFC 9110, 9.2.2).
_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "HEAD", "OPTIONS"})
#: The most bytes an answer's status line and headers may take (a REST answer carries
#: a message's properties as headers: 64 KB of them at most, as Service Bus allows).
MAX_HEAD = 1 << 20
#: What may not stand in a header (a request splitting into two otherwise).
_UNSAFE = ("\r", "\n", "\x00")


class Answer(NamedTuple):
    """An HTTP answer, read whole."""

    status: int
    reason: str
    headers: CIMultiDict[str]
    body: bytes


class ConnectFailed(OSError):
    """No connection was made (refused, no such host, a TLS handshake that failed);
    ``os_error`` is why. Nothing was sent."""

    def __init__(self, where: str, os_error: BaseException) -> None:
        super().__init__(f"cannot connect to {where}: {os_error or type(os_error).__name__}")
        self.os_error = os_error


class ProxyRefused(ConnectFailed):
    """The proxy answered a ``CONNECT`` with ``status`` (407: it wants credentials, 403:
    it forbids the destination, 502: it could not reach it). Nothing was sent."""

    def __init__(self, proxy: str, where: str, status: int, reason: str) -> None:
        self.status = status
        error = ConnectionRefusedError(f"the proxy {proxy} answered {status} {reason}")
        super().__init__(where, error)


class _Tunnel(asyncio.Protocol):
    """The proxy's answer to a ``CONNECT``, read up to the end of its head."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._head = bytearray()

    def data_received(self, data: bytes) -> None:
        self._head += data
        if self.answer.done():
            return
        end = self._head.find(b"\r\n\r\n")
        if end >= 0:
            self.answer.set_result(bytes(self._head[:end]))
        elif len(self._head) > MAX_HEAD:
            self.answer.set_exception(OSError("the proxy's answer to CONNECT has no end"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(exc or ConnectionResetError(
                "the proxy closed the connection before it answered CONNECT"))


class Broken(OSError):
    """The connection failed after the request went out, or the answer was not HTTP:
    the request may or may not have been carried out."""


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class _Connection(asyncio.Protocol):
    """One connection: its answer is parsed as the bytes arrive."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Answer] | None = None
        self._reason = ""
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._headed = False  # the answer's headers are all in
        self._head_size = 0
        self.answered = False  # a byte of an answer arrived on this connection
        self.closed = False
        self.keep = False  # the server keeps the connection alive after this answer
        self.idle_since = 0.0

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Broken(f"the server's answer is not HTTP/1.1 ({exc})"))
            self.close()

    def eof_received(self) -> bool:
        self.closed = True  # at once: the pool must not hand it out before it is lost
        return False  # close: a half-closed connection serves no next request

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if exc is None and self._headed and self._until_close():  # not cut by a reset
            self.keep = False
            self._finish()
            return
        self._fail(Broken(
            f"the server closed the connection before it answered ({exc})" if exc
            else "the server closed the connection before it answered"
        ))

    # -- httptools callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None:  # an answer to no request: nothing on it can be trusted
            self._fail(Broken("the server answered a request it was not sent"))
            self.close()

    def on_status(self, status: bytes) -> None:
        self._reason += _text(status)
        self._headed_bytes(len(status))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.add(_text(name), _text(value))
        self._headed_bytes(len(name) + len(value))

    def _headed_bytes(self, count: int) -> None:
        self._head_size += count
        if self._head_size > MAX_HEAD:
            self._fail(Broken(f"the server's answer has over {MAX_HEAD} bytes of headers"))
            self.close()

    def on_headers_complete(self) -> None:
        self._headed = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if 100 <= self._parser.get_status_code() < 200:  # informational: the answer follows
            self._reset()
            return
        self.keep = self._parser.should_keep_alive()
        self._finish()

    # -- the connection's side -----------------------------------------------------------

    def _until_close(self) -> bool:
        """Whether the answer's body ends with the connection (no length, not chunked)."""
        return "Content-Length" not in self._headers and "Transfer-Encoding" not in self._headers

    def _reset(self) -> None:
        """Ready for the next answer."""
        self._reason, self._headers, self._body, self._headed = "", CIMultiDict(), [], False
        self._head_size = 0

    def _finish(self) -> None:
        waiter, self._waiter = self._waiter, None
        answer = Answer(
            self._parser.get_status_code(), self._reason, self._headers, b"".join(self._body)
        )
        self._reset()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def send(self, request: bytes) -> asyncio.Future[Answer]:
        """Write ``request`` (a whole HTTP request); the future is its answer."""
        assert self._transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.keep = False
        self._transport.write(request)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class Pool:
    """Kept-alive connections to one origin (``scheme://host:port`` of ``base``), at
    most ``limit`` requests at a time; a connection idle for ``keepalive`` seconds is
    closed rather than used again."""

    def __init__(
        self,
        base: URL,
        *,
        limit: int = 64,
        keepalive: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        if base.scheme not in ("http", "https") or not base.host:
            raise ValueError(f"{base} is not an http:// or https:// URL")
        self._host = base.raw_host or base.host
        self._port = base.port or (443 if base.scheme == "https" else 80)
        self._tls = base.scheme == "https"
        self._where = f"{base.scheme}://{base.raw_authority}"
        named = f"[{self._host}]" if ":" in self._host else self._host  # IPv6 in brackets
        default = self._port == (443 if self._tls else 80)
        self._host_header = named if default else f"{named}:{self._port}"
        self._named = named
        self._ssl: ssl.SSLContext | None = ssl_context
        self._proxy = proxy
        # Plain HTTP through a proxy: requests name the whole URL (absolute form).
        self._origin = "" if proxy is None or self._tls else f"http://{self._host_header}"
        self._proxy_auth = None if proxy is None else proxy.authorization
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit)
        self._keepalive = keepalive
        self._closed = False

    async def request(
        self,
        method: str,
        url: URL,
        headers: dict[str, str],
        body: bytes | None = None,
    ) -> Answer:
        """Send one request (``url``: its path and query are used) and read its answer.

        Raises:
            ValueError: A header name or value with a line break or a NUL in it.
            ConnectFailed: No connection could be made; nothing was sent.
            Broken: The connection failed, or the answer was not HTTP.
        """
        request = self._encode(method, url, headers, body)
        async with self._slots:
            connection, reused = await self._connection()
            try:
                return await self._exchange(connection, request)
            except Broken:
                # A kept-alive connection the server closed as this request went out:
                # nothing of it was read, so an idempotent one goes once more, anew.
                if not (reused and not connection.answered and method in _IDEMPOTENT):
                    raise
            return await self._exchange(await self._connect(), request)

    async def _exchange(self, connection: _Connection, request: bytes) -> Answer:
        """Send ``request`` on ``connection`` and read its answer; the connection goes
        back to the pool if it may serve another."""
        self._busy.add(connection)
        try:
            answer = await connection.send(request)
        except BaseException:
            connection.close()  # what is left on it is unknown: a cancel, a failure
            raise
        finally:
            self._busy.discard(connection)
        if connection.keep and not connection.closed and not self._closed:
            connection.idle_since = time.monotonic()
            connection.answered = False
            self._idle.append(connection)
        else:
            connection.close()
        return answer

    def _encode(
        self, method: str, url: URL, headers: dict[str, str], body: bytes | None
    ) -> bytes:
        lines = [
            f"{method} {self._origin}{url.raw_path_qs} HTTP/1.1",
            f"Host: {self._host_header}",
            "Accept-Encoding: identity",  # an answer in any other encoding is not read
        ]
        if self._origin and self._proxy_auth:
            lines.append(f"Proxy-Authorization: {self._proxy_auth}")
        for name, value in headers.items():
            if any(c in name or c in value for c in _UNSAFE):
                raise ValueError(f"header {name!r} has a line break or a NUL in it")
            lines.append(f"{name}: {value}")
        if body is not None or method in _BODIED:
            lines.append(f"Content-Length: {len(body) if body is not None else 0}")
        lines += ("", "")
        head = "\r\n".join(lines).encode("utf-8")
        return head + body if body else head

    async def _connection(self) -> tuple[_Connection, bool]:
        """A kept-alive connection that is still open and fresh, or a new one; and
        whether it was kept alive."""
        if self._closed:
            raise Broken(f"the connections to {self._where} are closed")
        stale = time.monotonic() - self._keepalive
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and connection.idle_since > stale:
                return connection, True
            connection.close()
        return await self._connect(), False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            if self._proxy is not None and self._tls:
                connection = await self._tunnel(loop, self._proxy)
            elif self._proxy is not None:
                _, connection = await loop.create_connection(
                    _Connection, self._proxy.host, self._proxy.port
                )
            else:
                _, connection = await loop.create_connection(
                    _Connection, self._host, self._port, ssl=self._ssl if self._tls else None
                )
        except ConnectFailed:
            raise
        except OSError as exc:
            via = f" through the proxy {self._proxy.address}" if self._proxy else ""
            raise ConnectFailed(f"{self._where}{via}", exc) from exc
        if self._closed:  # closed while it connected
            connection.close()
            raise Broken(f"the connections to {self._where} are closed")
        return connection

    async def _tunnel(self, loop: asyncio.AbstractEventLoop, proxy: Proxy) -> _Connection:
        """A TLS connection to the origin inside a ``CONNECT`` tunnel through ``proxy``."""
        transport, tunnel = await loop.create_connection(_Tunnel, proxy.host, proxy.port)
        try:
            target = f"{self._named}:{self._port}"
            head = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
            if proxy.authorization:
                head.append(f"Proxy-Authorization: {proxy.authorization}")
            transport.write(("\r\n".join(head) + "\r\n\r\n").encode())
            answer = await tunnel.answer
            status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
            version, _, rest = status_line.partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/") or not code.isdigit():
                raise OSError(f"the proxy {proxy.address} answered CONNECT with "
                              f"{status_line[:80]!r}, not HTTP")
            if not 200 <= int(code) < 300:
                raise ProxyRefused(proxy.address, self._where, int(code), reason)
            connection = _Connection()
            assert self._ssl is not None
            secure = await loop.start_tls(
                transport, connection, self._ssl, server_hostname=self._host
            )
            if secure is None:  # pragma: no cover - the loop closed
                raise OSError("the TLS handshake through the proxy did not finish")
            connection.connection_made(secure)
            return connection
        except BaseException:
            transport.close()
            raise

    async def close(self) -> None:
        """Close every connection; requests on them fail with :class:`Broken`."""
        self._closed = True
        for connection in [*self._idle, *self._busy]:
            connection.close()
        self._idle.clear()
        await asyncio.sleep(0)  # the transports close on the next turn of the loop
