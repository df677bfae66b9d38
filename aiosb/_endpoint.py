"""Where a namespace is and how to reach it: one value (:class:`Endpoint`), parsed once
where a URL or a connection string enters (:func:`aiosb.connect`, or a transport's
``from_url``), and handed to the transport, which takes nothing else and hands it on
(its links, its management, its error sentences).

It carries the scheme and kind of transport, host and port, whether TLS is spoken, the
credential, the management address, the certificate to trust, the proxy to go through
and the URL's query. Nothing below :func:`aiosb.connect` parses a URL or a connection
string again.

A proxy (:class:`Proxy`) is given explicitly (``proxy="http://user:pw@host:port"``), or,
for the HTTP transport, taken from the environment as curl and requests take it:
``HTTPS_PROXY`` for TLS, ``HTTP_PROXY`` for plain HTTP, never for a host ``NO_PROXY``
names (lower-case names too); ``proxy=False`` turns the environment's off. AMQP goes
through a proxy only when given one: the SDK then speaks AMQP over WebSockets.
"""

from __future__ import annotations

import base64
import os
import ssl
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

from .auth import SasCredential, is_connection_string, parse_connection_string
from .errors import InvalidArgument

__all__ = ["AMQPS_PORT", "AMQP_PORT", "Endpoint", "Proxy", "Verify"]

#: Plain AMQP, as the development emulators speak it (the SDK's default for them).
AMQP_PORT = 5672
#: AMQP over TLS, as every real namespace speaks it.
AMQPS_PORT = 5671

#: What to trust: a CA file (PEM), or an ``ssl.SSLContext``; ``None``: the machine's.
Verify = str | os.PathLike[str] | ssl.SSLContext | None


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: TLS goes through it in a ``CONNECT`` tunnel."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str, where: str = "proxy") -> Proxy:
        """A proxy from ``http://[user:password@]host[:port]`` (``host:port`` alone too).

        Raises:
            InvalidArgument: Not such a URL, an ``https://`` proxy, or a bad port.
        """
        if not isinstance(url, str) or not url.strip():
            raise InvalidArgument(f"{where} must be a URL such as http://proxy:3128, not {url!r}.")
        text = url.strip() if "://" in url else f"http://{url.strip()}"
        parts = urllib.parse.urlsplit(text)
        if parts.scheme.lower() != "http":
            raise InvalidArgument(
                f"{where} is {url!r}: aiosb reaches a proxy over plain HTTP "
                "(http://host:port), and tunnels TLS through it with CONNECT."
            )
        try:
            port = parts.port or 80
        except ValueError:
            raise InvalidArgument(f"{where} is {url!r}: its port is not a number.") from None
        if not parts.hostname:
            raise InvalidArgument(f"{where} is {url!r}: it names no host.")
        unquote = urllib.parse.unquote
        return cls(
            parts.hostname, port,
            None if parts.username is None else unquote(parts.username),
            None if parts.password is None else unquote(parts.password),
        )

    @classmethod
    def from_environment(cls, host: str, tls: bool) -> Proxy | None:
        """The proxy the environment names for ``host`` (``HTTPS_PROXY`` for TLS,
        ``HTTP_PROXY`` otherwise), unless ``NO_PROXY`` exempts it."""
        proxies = urllib.request.getproxies_environment()
        url = proxies.get("https" if tls else "http")
        if not url or urllib.request.proxy_bypass(host):  # NO_PROXY (on Linux)
            return None
        return cls.parse(url, "HTTPS_PROXY" if tls else "HTTP_PROXY")

    @property
    def address(self) -> str:
        """``host:port`` (an IPv6 host in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` header's value, if the proxy has a user."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def for_sdk(self, *, aio: bool = True) -> dict[str, Any]:
        """The ``http_proxy`` dictionary of the official SDK. Its aio client joins host and
        port into aiohttp's ``proxy=``, which needs a scheme: ``http://`` is put before
        the host there (a bare host, as its samples give, is an invalid URL to aiohttp)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        out: dict[str, Any] = {
            "proxy_hostname": f"http://{host}" if aio else self.host, "proxy_port": self.port,
        }
        if self.username is not None:
            out["username"] = self.username
            out["password"] = self.password or ""
        return out

    def __repr__(self) -> str:  # never the password
        user = f"{self.username}:***@" if self.username is not None else ""
        return f"Proxy(http://{user}{self.address})"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a namespace is and how to reach it (see the module's doc).

    Attributes:
        kind: ``"memory"``, ``"http"`` (the emulator server or the REST protocol) or
            ``"amqp"`` (the official SDK).
        scheme: ``memory``, ``http``, ``https`` or ``sb``.
        host: The host (``""`` for memory), as given (case kept).
        port: The port given; ``None``: the scheme's default.
        tls: Whether TLS is spoken (https, AMQP but to a development emulator).
        path: The URL's path (an HTTP namespace's), without slashes at its ends.
        name: memory: the namespace's name; others: ``""`` (the transport names it).
        emulator: ``UseDevelopmentEmulator=true``: plain AMQP, the port kept.
        connection_string: As given, for the SDK; ``None`` for a URL.
        credential: The credential given or the connection string's key; for AMQP any
            credential the SDK takes.
        verify: The certificate to trust.
        proxy: The proxy to go through.
        query: The URL's query parameters, in order (``memory://NAME?tier=premium``).
    """

    kind: Literal["memory", "http", "amqp"]
    scheme: str
    host: str
    port: int | None = None
    tls: bool = False
    path: str = ""
    name: str = ""
    emulator: bool = False
    connection_string: str | None = None
    credential: Any = None
    verify: Verify = None
    proxy: Proxy | None = None
    query: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(
        cls,
        url: str,
        credential: Any = None,
        *,
        verify: Verify = None,
        proxy: str | Proxy | Literal[False] | None = None,
    ) -> Endpoint:
        """The endpoint ``url`` (a URL or a connection string) names.

        Args:
            url: What :func:`aiosb.connect` takes.
            credential: A :class:`~aiosb.SasCredential` (any SDK credential for AMQP).
            verify: A CA file (PEM) or an ``ssl.SSLContext`` to trust.
            proxy: A proxy URL or :class:`Proxy`; ``None``: the environment's;
                ``False``: none.

        Raises:
            InvalidArgument: A URL, connection string, CA file or proxy aiosb cannot use.
        """
        if not isinstance(url, str) or not url:
            raise InvalidArgument(f"connect needs a URL or connection string, not {url!r}.")
        if verify is not None and not isinstance(verify, ssl.SSLContext):
            if not isinstance(verify, (str, os.PathLike)) or not os.path.isfile(verify):
                raise InvalidArgument(
                    f"connection_verify is {verify!r}: no such file (give the CA "
                    "certificate, PEM, that the endpoint's certificate is checked against, "
                    "or an ssl.SSLContext)."
                )
            verify = os.fspath(verify)
        connection_string: str | None = None
        emulator = False
        if is_connection_string(url):
            parts = parse_connection_string(url)
            target = parts["Endpoint"]
            emulator = any(  # as the SDK reads it
                key.lower() == "usedevelopmentemulator" and value == "true"
                for key, value in parts.items()
            )
            if urllib.parse.urlsplit(target).scheme.lower() in ("http", "https"):
                # What `aiosb serve` prints: the emulator server, over HTTP, with its key.
                if credential is None and "SharedAccessKey" in parts:
                    credential = SasCredential(
                        parts.get("SharedAccessKeyName", ""), parts["SharedAccessKey"]
                    )
                elif credential is None and "SharedAccessSignature" in parts:
                    raise InvalidArgument(
                        "over HTTP aiosb signs each request with a shared access key: give "
                        "SharedAccessKeyName and SharedAccessKey, not a SharedAccessSignature."
                    )
                url = target.rstrip("/")
            else:
                connection_string = url
                url = target
        split = urllib.parse.urlsplit(url)
        scheme = split.scheme.lower()
        kind: Literal["memory", "http", "amqp"]
        if scheme == "memory":
            kind = "memory"
        elif scheme in ("http", "https"):
            kind = "http"
        elif scheme == "sb" or connection_string is not None:
            kind = "amqp"
        else:
            raise InvalidArgument(
                f"unsupported URL {url!r}: use memory://NAME, http://HOST:PORT/NAME, "
                "https://NAME.servicebus.windows.net or a connection string."
            )
        try:
            port = split.port
        except ValueError:
            raise InvalidArgument(f"the endpoint {split.netloc!r} has no valid port.") from None
        host = split.netloc.rpartition("@")[2]
        host = host[1:].partition("]")[0] if host.startswith("[") else host.partition(":")[0]
        tls = scheme == "https" if kind == "http" else kind == "amqp" and not emulator
        query = tuple(urllib.parse.parse_qsl(split.query))
        if kind == "memory":
            name = split.netloc or split.path.strip("/")
            return cls("memory", "memory", "", name=name, query=query)
        found: Proxy | None
        if proxy is False:
            found = None
        elif isinstance(proxy, Proxy):
            found = proxy
        elif proxy is not None:
            found = Proxy.parse(proxy)
        elif kind == "http":
            found = Proxy.from_environment(host, tls)
        else:  # AMQP goes through a proxy only over WebSockets: when asked to
            found = None
        return cls(
            kind, scheme, host, port, tls, split.path.strip("/"), "", emulator,
            connection_string, credential, verify, found, query,
        )

    @property
    def netloc(self) -> str:
        """``host[:port]`` as given (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``scheme://host[:port]/path`` (what an HTTP transport requests under)."""
        path = f"/{self.path}" if self.path else ""
        return f"{self.scheme}://{self.netloc}{path}"

    @property
    def management_url(self) -> str:
        """Where the management API answers: an HTTP endpoint's own URL; for AMQP,
        HTTPS at the same host and port (as on Azure; ``aiosb serve`` answers TLS at
        its AMQP port), at 443 when no port is given."""
        if self.kind == "http":
            return self.base_url
        return f"https://{self.netloc}"

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context to connect with: the one given, or the machine's trust
        (with the CA file given, if one is)."""
        if isinstance(self.verify, ssl.SSLContext):
            return self.verify
        if self.verify is not None:
            return ssl.create_default_context(cafile=os.fspath(self.verify))
        return ssl.create_default_context()
