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
request sent to one is sent to the server itself), the host the server listens on when
it is a name, and the names the user adds (``aiosb serve --allow-host NAME``), each with
any port. A request without ``Host`` (HTTP/1.0, which no browser sends) is answered as
before.

A WebSocket upgrade needs more (:meth:`AllowedHosts.allows_origin`): a browser opens a
WebSocket from any page to any address, with no CORS, naming the page in ``Origin``.
``Host`` names the server, ``Origin`` names the *page*, so "an IP address cannot be
re-pointed" says nothing of it: a page served from ``http://203.0.113.7/`` (an attacker's
server reached by its address, or any device on the LAN) is no page of this server's.
A page is accepted only at ``localhost``, a loopback address (``127.0.0.0/8``, ``::1``:
this machine), a name given with ``--allow-host`` (or the ``--host`` name), or exactly
the request's own origin (its scheme and ``Host``, port included): a page this server
served.
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
#: The port a page's ``Origin`` has when it names none.
DEFAULT_PORTS = {"http": 80, "https": 443}
#: The status a foreign ``Host`` gets (RFC 9110: the server is not configured to
#: answer for that name).
MISDIRECTED = 421
#: How many ``Host`` values the middleware keeps its verdict on (beyond, each is parsed).
VERDICTS_KEPT = 256


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


def is_loopback(address: str | None) -> bool:
    """Whether ``address`` is one of this machine's own (127.0.0.0/8, ``::1``, or
    either mapped into IPv6); a name, even ``localhost``, is not an address."""
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def origin_of(url: str) -> tuple[str, str, int] | None:
    """The scheme, name and port of an origin (``scheme://host[:port]``, the port its
    scheme's default when none is written); ``None`` for any other (``null``, a file,
    an extension's page, credentials in it)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc or "@" in parts.netloc:
        return None
    return parts.scheme, host_name(parts.netloc), port or DEFAULT_PORTS[parts.scheme]


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

    def allows_origin(self, origin: str, own: str | None = None) -> bool:
        """Whether a page of ``origin`` (``scheme://host[:port]``) may open a WebSocket
        to the server: a page at ``localhost``, a loopback address, one of the names
        the user gave (any port), or exactly at ``own``, the request's own origin
        (``scheme://`` and its ``Host``: a page the server served). Not any IP address:
        ``Origin`` names the page, not the server (see the module's docstring)."""
        page = origin_of(origin)
        if page is None:
            return False
        if page[1] in self.names or is_loopback(page[1]):
            return True
        return own is not None and page == origin_of(own)

    def middleware(self, refused: Callable[[web.Request, int], None] | None = None
                   ) -> Middleware:
        """An aiohttp middleware answering a foreign ``Host`` 421 before any handler
        runs; ``refused(request, status)`` is told of each (the request log)."""

        # The verdict on each Host value seen: a request pays a dict lookup, not a parse
        # (every request passes here, the hot path of sends and receives included).
        verdicts: dict[str | None, bool] = {}

        @web.middleware
        async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
            headers = request.headers
            host = headers.get("Host")
            allowed = verdicts.get(host)
            if allowed is None:
                allowed = self.allows(host)
                if len(verdicts) < VERDICTS_KEPT:
                    verdicts[host] = allowed
            if allowed and "Upgrade" not in headers:
                return await handler(request)
            status, said = MISDIRECTED, refusal(str(host))
            if allowed:
                origin = headers.get("Origin")
                if (origin is None or headers.get("Upgrade", "").lower() != "websocket"
                        or self.allows_origin(
                            origin, None if host is None else f"{request.scheme}://{host}")):
                    return await handler(request)
                status = 403
                said = (f"A WebSocket from a page of {origin[:100]!r} is refused: this "
                        "server takes WebSockets from pages at localhost, a loopback address, "
                        "the server itself and the names given with aiosb serve "
                        "--allow-host NAME.\n")
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
