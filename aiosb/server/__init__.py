"""Everything ``aiosb serve`` is: :func:`serve` assembles it from a :class:`ServerConfig`
(the command's flags as one value) and owns its start and stop, in the running loop.

    async with aiosb.server.serve(ServerConfig(port=0)) as running:  # every port free
        async with aiosb.connect(running.http.namespace_url("contoso")) as ns:
            ...

Its parts, in layers (a contract holds them: the listener knows no protocol, the HTTP plane
no explorer, the AMQP front end no HTTP; this module puts them together):

- :mod:`.listener`: the ports (accept, first-byte routing, TLS, deadlines, one
  connection budget);
- :mod:`.http`: the HTTP plane (REST, management, fault injection, metrics), on the
  HTTP port, and on the AMQP ports for the requests that open with an HTTP method;
- :mod:`.explorer`: the Service Bus Explorer, a site the HTTP plane serves;
- :mod:`.amqp`: the AMQP 1.0 front end, on the AMQP ports and at
  ``/$servicebus/websocket`` of the HTTP plane (AMQP over WebSockets);
- :mod:`.tls`: the certificate and key; :mod:`.msconfig`: Microsoft's ``Config.json``;
- :mod:`.process`: ``aiosb serve`` in a child process (:class:`~.process.ServerProcess`).

What a process serving alone needs besides (``aiosb serve`` does it; a library user's
process does not want it) is here too: :func:`log_to_stdout`, :func:`tune_gc` and
:class:`Signals`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..auth import DEV_KEY, MICROSOFT_DEV_KEY, key_table
from ..client import connect
from . import tls as _tls
from .config import MICROSOFT_AMQP_PORT, ServerConfig

if TYPE_CHECKING:
    from aiohttp import web

    from .amqp.front_end import AmqpServer
    from .http import ServedEmulator

__all__ = [
    "GC_YOUNG_THRESHOLD",
    "HEALTH_PATH",
    "Running",
    "ServerConfig",
    "Signals",
    "log_to_stdout",
    "serve",
    "tune_gc",
]

#: Where Microsoft's emulator answers its health check (on its HTTP port, 5300).
HEALTH_PATH = "/health"


@dataclass(frozen=True, slots=True)
class Running:
    """A running server (what :func:`serve` gives): where each port is, and the facts
    the banner says.

    Attributes:
        config: What it was made from.
        http: The HTTP plane (its URL, credential and connection strings).
        amqp: The AMQP front end (its ports and connection strings); None without AMQP.
        certificate: The HTTPS port's certificate (PEM file); None over plain HTTP.
        amqp_certificate: The certificate the AMQP ports present to clients that open
            with TLS (management over HTTPS, AMQP over TLS); None: they have none.
        also_key: Microsoft's development key, accepted too (``microsoft``, no ``key``).
        said: What applying ``config.config`` (``Config.json``) did, a line each.
    """

    config: ServerConfig
    http: ServedEmulator
    amqp: AmqpServer | None
    certificate: str | None = None
    amqp_certificate: str | None = None
    also_key: str | None = None
    said: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """The HTTP plane's base URL (``http://127.0.0.1:5380``)."""
        return self.http.url

    @property
    def http_port(self) -> int:
        """The HTTP port (the one picked when 0 was asked for)."""
        return int(self.http.url.rsplit(":", 1)[1])

    @property
    def amqp_port(self) -> int:
        """The AMQP port; 0 without AMQP."""
        return 0 if self.amqp is None else self.amqp.port

    @property
    def amqps_port(self) -> int:
        """The AMQP-over-TLS port; 0 without one."""
        return 0 if self.amqp is None else self.amqp.tls_port

    def banner(self) -> list[str]:
        """What ``aiosb serve`` prints once it listens: where each port is, how to
        connect, and what was made (:class:`~aiosb.server.process.ServerProcess` reads
        it; its last line is the one that says ``aiosb.connect(``)."""
        config, url, amqp = self.config, self.url, self.amqp
        key = config.key or DEV_KEY
        lines = [f"aiosb emulator server listening on {url}"]
        asked = config.ports
        served_on = (("HTTP", asked.http, self.http_port),
                     ("AMQP", asked.amqp, self.amqp_port),
                     ("AMQP over TLS", asked.amqps, self.amqps_port))
        for what, port, bound in served_on:
            if port and bound and bound != port:
                ours = [other for other, _, on in served_on if on == port]
                by = (f"this server's {ours[0]} port" if ours
                      else "taken by another process (another aiosb serve?)")
                lines.append(f"  port {port} is {by}: {what} on port {bound} instead")
        if self.certificate is not None:
            lines.append(f"  HTTPS, certificate {self.certificate}; namespace "
                         f"{config.namespace} at the root, for the official administration "
                         "clients:")
            lines.append(f"    Endpoint=sb://localhost:{self.http_port};SharedAccessKeyName="
                         f"{config.key_name};SharedAccessKey={key} "
                         f"(connection_verify={self.certificate!r})")
        lines.append("  event loop: "
                     f"{type(asyncio.get_running_loop()).__module__.split('.')[0]}")
        lines.append(f"  namespace {config.namespace} at the root ({url}/orders/messages is "
                     "its queue orders);")
        lines.append(f"  other namespaces exist on first use: {url}/NAME (e.g. {url}/contoso)")
        if config.key is None:
            lines.append(f"  signed with the well-known development key {config.key_name} / "
                         f"{DEV_KEY}")
            lines.append("  (for local use only; pass --key to choose your own)")
        if config.data_dir is not None:
            lines.append(f"  durable: every acknowledged operation is kept in {config.data_dir} ("
                         + ("flushed to the disk: survives the machine crashing)" if config.fsync
                            else "survives the server being killed; --fsync: the machine "
                            "crashing too)"))
        lines += [f"  {line}" for line in self.said]
        if config.microsoft:
            at = "" if amqp is None or amqp.port == MICROSOFT_AMQP_PORT else f":{amqp.port}"
            also = self.also_key
            lines.append(f"  as Microsoft's emulator: health at {url}{HEALTH_PATH}"
                         + (f"; its key {MICROSOFT_DEV_KEY} is accepted too:" if also else ":"))
            lines.append(f"    Endpoint=sb://localhost{at};SharedAccessKeyName={config.key_name};"
                         f"SharedAccessKey={also or config.key};UseDevelopmentEmulator=true;")
        lines.append(f"  connection string: {self.http.connection_string('contoso')}")
        if amqp is not None:
            lines.append(f"  AMQP 1.0 (the official SDKs) on port {amqp.port}, namespace "
                         f"{config.namespace}:")
            lines.append(f"    {amqp.connection_string()}")
            cert = self.amqp_certificate
            if cert is not None:
                lines.append("    and management (the administration clients) over HTTPS at "
                             f"the same port, certificate {cert}")
                lines.append(f"    (trust it: connection_verify={cert!r}, or SSL_CERT_FILE / "
                             "NODE_EXTRA_CA_CERTS in the environment)")
                if amqp.tls_port:
                    lines.append(f"  AMQP over TLS on port {amqp.tls_port}, as to a namespace "
                                 "on Azure (the same certificate): "
                                 f"{amqp.connection_string(tls=True)}")
            else:
                lines.append("    (management at this port needs a certificate: pip install "
                             "aiosb[tls], or --tls-cert and --tls-key)")
        if config.metrics:
            lines.append(f"  Prometheus metrics: {url}/metrics")
        if config.explorer:
            lines.append(f"  Service Bus Explorer in the browser: {url}/explorer/ (sign in "
                         "with a key of the server's)")
        from .http._hosts import AllowedHosts

        names = ", ".join(sorted(AllowedHosts(config.host, config.allow_hosts).names))
        lines.append(f"  HTTP answers for {names} and IP addresses; any other Host gets 421 "
                     "(DNS rebinding; add a name with --allow-host NAME)")
        if config.host in ("0.0.0.0", "::", ""):
            lines.append("    on every interface: a name other machines reach this one by (a "
                         "compose service's, a DNS name) needs --allow-host")
        if not config.quiet:
            lines.append("  a line per request follows (--quiet turns them off)")
        namespace_url = self.http.namespace_url("contoso")
        if self.certificate is None:
            lines.append(f"  python: aiosb.connect({namespace_url!r}"
                         + ("" if config.key is None
                            else f", credential=({config.key_name!r}, KEY)") + ")")
        else:  # https is a real namespace's scheme: the credential and extensions are said
            shown = repr(DEV_KEY) if config.key is None else "KEY"
            lines.append(f"  python (SSL_CERT_FILE={self.certificate} in the environment): "
                         f"aiosb.connect({namespace_url!r}, credential=({config.key_name!r}, "
                         f"{shown}), extensions=True)")
        return lines


def _certificates(config: ServerConfig) -> tuple[tuple[str, str] | None,
                                                   tuple[str, str] | None]:
    """The TLS material (certificate, key) of the HTTP port and of the AMQP ports: the
    files given, else with ``tls`` a self-signed pair in ``tls_dir``; the AMQP ports
    answer TLS with the management API (#34) with the HTTP port's, or without one with
    the self-signed pair, made once, where ``cryptography`` is installed.

    Raises:
        aiosb.server.tls.UnsafeTlsFolder: ``tls_dir`` is not a folder of the user's own.
        ImportError: ``tls`` without ``cryptography``.
    """
    folder = config.tls_dir or _tls.default_dir()  # per user, not the working directory
    https = None
    if config.tls_cert is not None and config.tls_key is not None:
        https = (config.tls_cert, config.tls_key)
    elif config.tls:
        cert, key = _tls.self_signed(folder, reuse=True)
        https = (str(cert), str(key))
    amqps = https
    if amqps is None and config.amqp:
        with contextlib.suppress(ImportError):
            cert, key = _tls.self_signed(folder, reuse=True)
            amqps = (str(cert), str(key))
    return https, amqps


async def _health(_request: web.Request) -> web.StreamResponse:
    """``GET /health``, answered as Microsoft's emulator answers it (unsigned)."""
    from aiohttp import web

    return web.json_response({"status": "healthy", "message": "Service is healthy."})


@contextlib.asynccontextmanager
async def serve(config: ServerConfig | None = None) -> AsyncIterator[Running]:
    """Serve ``aiosb serve``'s whole server in the running loop, for the ``async with``
    block: the HTTP plane (with the explorer, unless ``config.explorer`` is off), the
    AMQP front end on its ports (with the HTTP plane's management API reached there
    too, over TLS where there is a certificate), on one listener; ``config.config``'s
    entities made before it listens. On leaving, every port stops and every connection
    closes (durable data is flushed first).

    Raises:
        OSError: A port is taken (the AMQP ports: the message says which and what to
            do); a default port that is taken gives way instead (``config.ports``).
        aiosb.server.tls.UnsafeTlsFolder: The TLS folder is not the user's own.
        aiosb.server.msconfig.ConfigError: ``config.config`` does not fit the namespace.
        ImportError: An extra a flag needs is not installed (``metrics``, ``tls``).
    """
    # The parts are imported here, not with the package: `aiosb demo`, `aiosb --help`
    # (which read ServerConfig) and ServerProcess users load none of the server.
    from . import msconfig
    from .amqp._websocket import PATH as WEBSOCKET_PATH
    from .amqp._websocket import websocket_handler
    from .amqp.front_end import serve_amqp
    from .explorer import Explorer
    from .http import REQUEST_FIRST_BYTES, Handler, MakeSite
    from .http import serve as serve_http

    config = ServerConfig() if config is None else config
    namespace = config.served_namespace
    key = config.key or DEV_KEY
    also = MICROSOFT_DEV_KEY if config.microsoft and config.key is None else None
    https, amqps = _certificates(config)
    said: list[str] = []

    async def prepare() -> None:
        assert config.config is not None
        async with connect(f"memory://{namespace}") as ns:
            said.extend(await msconfig.apply(ns, config.config))

    amqp: AmqpServer | None = None  # AMQP over WebSockets finds it here once it listens
    routes: dict[str, Handler] = {
        WEBSOCKET_PATH: websocket_handler(lambda: None if amqp is None else amqp.serve_stream),
    }
    if config.microsoft:
        routes[HEALTH_PATH] = _health
    sites: list[MakeSite] = [Explorer] if config.explorer else []
    host, (http_port, amqp_port, amqps_port, soft) = config.host, config.ports
    # A default that another of these ports was named at gives way before it is tried
    # (HTTP is bound first: ``--amqp-port 5380`` would find 5380 taken by HTTP); the
    # banner says whose port it is.
    named = {port for which, port in (("http", http_port), ("amqp", amqp_port),
                                      ("amqps", amqps_port)) if which not in soft and port}
    if "http" in soft and http_port in named:
        http_port = 0
    if "amqp" in soft and amqp_port in named:
        amqp_port = 0
    if "amqps" in soft and amqps_port in named:
        amqps_port = 0
    async with serve_http(
        host, http_port, key_name=config.key_name, key=key, data_dir=config.data_dir,
        fsync=config.fsync, keys=config.keys, log_requests=not config.quiet,
        metrics=config.metrics, ssl_context=None if https is None else _tls.context(*https),
        root=namespace, routes=routes, also_key=also,
        prepare=None if config.config is None else prepare, sites=sites,
        allow_hosts=config.allow_hosts, free_if_taken="http" in soft,
    ) as http, contextlib.AsyncExitStack() as stack:
        if amqp_port is not None:
            secure = amqps_port if amqps is not None else None
            try:
                amqp = await stack.enter_async_context(serve_amqp(
                    host, amqp_port, namespace=namespace,
                    keys=key_table(config.key_name, key, config.keys, also=also),
                    journal=http.journal, tls=None if amqps is None else _tls.context(*amqps),
                    others=[(REQUEST_FIRST_BYTES, http.route)], tls_port=secure,
                    listener=http.listener, free_if_taken="amqp" in soft,
                    tls_free_if_taken="amqps" in soft,
                ))
            except OSError as exc:  # say which of the ports, and what to do
                raise OSError(
                    exc.errno,
                    f"{exc.strerror or exc}; choose other ports with --amqp-port and "
                    "--amqps-port, or serve HTTP alone with --no-amqp",
                    f"{host}:{amqp_port} (AMQP)"
                    + ("" if secure is None else f" or {host}:{secure} (AMQP over TLS)"),
                ) from exc
        yield Running(config, http, amqp, None if https is None else https[0],
                      None if amqps is None else amqps[0], also, tuple(said))


#: The youngest generation's threshold while serving: a batch of 100 messages makes a few
#: thousand objects, and at Python's default (700) the collector ran several times per
#: batch, a third of the time of a send in profiles; messages hold no reference cycles,
#: so collecting less often costs little memory.
GC_YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """The garbage collection of a process that serves (``aiosb serve``; never in a
    library user's process): what start-up made (modules, the app) is frozen out of
    every collection, and the young generation is collected every
    :data:`GC_YOUNG_THRESHOLD` objects."""
    import gc

    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def log_to_stdout() -> None:
    """aiosb's log lines (a request each, state changes) on stdout, as they happen."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("aiosb")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


class Signals:
    """SIGTERM or SIGINT, as an awaitable, from when it is made (in the running loop):
    a server stops cleanly on either (a process in the background ignores SIGINT, and
    service managers send SIGTERM)."""

    def __init__(self, *, stdin: bool = False) -> None:
        self._event = asyncio.Event()
        self._signal = ""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._got, sig.name)
        if stdin:  # the end of standard input counts too: the parent that held it died
            threading.Thread(target=self._read_stdin, args=(loop,), daemon=True,
                             name="aiosb-stdin").start()

    def _read_stdin(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(OSError, ValueError):
            while os.read(sys.stdin.fileno(), 65536):
                pass
        with contextlib.suppress(RuntimeError):  # the loop closed first: stopping anyway
            loop.call_soon_threadsafe(self._got, "standard input closed")

    def _got(self, name: str) -> None:
        self._signal = self._signal or name
        self._event.set()

    async def wait(self) -> str:
        """The name of the first signal received (``"SIGINT"``, ``"SIGTERM"``), or
        ``"standard input closed"`` (``stdin``)."""
        await self._event.wait()
        return self._signal
