"""Which ``Host`` the HTTP server answers (#48): the defence against DNS rebinding.

A page of another site cannot read the server's answers (the browser's same-origin
policy), unless its own name comes to resolve to the server: a rebinding page, first
served from ``attacker.test``, then re-resolved to ``127.0.0.1``, is *same-origin* with
the server as far as the browser knows, and its requests carry ``Host: attacker.test``
and ``Origin: http://attacker.test``, which agree with each other. What no rebinding page
can send is a ``Host`` of the server's own: so every request whose ``Host`` is not one
of the server's names is answered 421 (Misdirected Request) before anything else
(:func:`middleware`: every route, the explorer, REST, management, ``/metrics``, AMQP
over WebSockets).

The server's names (:class:`AllowedHosts`): ``localhost``, any IP address written as
one (``127.0.0.1``, ``[::1]``, ``192.168.1.5``: an address cannot be re-resolved, so a
page at one is at the server itself), the host the server listens on when it is a name,
and the names the user adds (``aiosb serve --allow-host NAME``), each with any port. A
request without ``Host`` (HTTP/1.0, which no browser sends) is answered as before.
"""


from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The names every server answers to, besides IP addresses.
LOOPBACK_NAMES = ("localhost",)
#: The status a foreign ``Host`` gets (RFC 9110: the server is not configured to
#: answer for that name).
MISDIRECTED = 421


def host_name(host: str) -> str:
    """The name of a ``Host`` value (``name[:port]``, ``[v6]:port``), lower-cased, without
    the port, brackets or a trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
    elif host.count(":") == 1:
        name, colon, port = host.partition(":")
        rest = colon + port
    else:
        name, rest = host, ""
    if rest and not (rest[0] == ":" and rest[1:].isdigit()):
        return host  # not name[:port]: matches no name
    return name.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    return True


class AllowedHosts:
    """The names the server answers to (see the module's docstring).

    Args:
        listen: The host the server listens on (``--host``): a name is added; an address
            (``0.0.0.0`` included) adds nothing, as addresses are answered anyway.
        names: The names the user adds (``--allow-host``), with or without a port.
    """

    def __init__(self, listen: str | None = None, names: Iterable[str] = ()) -> None:
        given = [host_name(n) for n in ([listen] if listen else []) + list(names)]
        self.names = frozenset(LOOPBACK_NAMES) | {n for n in given if n and not _is_address(n)}

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header is the server's to answer."""
        if host is None:
            return True
        name = host_name(host)
        return name in self.names or _is_address(name)

    def allows_origin(self, origin: str) -> bool:
        """Whether a page of ``origin`` (``scheme://host[:port]``) is at one of the
        server's names."""
        try:
            parts = urllib.parse.urlsplit(origin.strip())
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and bool(parts.netloc) and self.allows(
            parts.netloc)

    def middleware(self, refused: Callable[[web.Request, int], None] | None = None
                   ) -> Middleware:
        """An aiohttp middleware answering a foreign ``Host`` 421 before any handler
        runs; ``refused(request, status)`` is told of each (the request log)."""

        @web.middleware
        async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
            host = request.headers.get("Host")
            status, said = MISDIRECTED, refusal(str(host))
            if self.allows(host):
                origin = request.headers.get("Origin")
                if (origin is None or request.headers.get("Upgrade", "").lower() != "websocket"
                        or self.allows_origin(origin)):
                    return await handler(request)
                status = 403
                said = (f"A WebSocket from a page of {origin[:100]!r} is refused: this "
                        "server takes WebSockets from pages at localhost, IP addresses and "
                        "the names given with aiosb serve --allow-host NAME.\n")
            if refused is not None:
                refused(request, status)
            return web.Response(status=status, text=said, headers={
                "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})

        return check_host


def refusal(host: str) -> str:
    """The one sentence a foreign ``Host`` is answered with."""
    return (f"This server does not answer for the host {host[:100]!r}: it answers for "
            "localhost, IP addresses and the names given with aiosb serve --allow-host "
            "NAME (a page reached by another name could be DNS rebinding).\n")
