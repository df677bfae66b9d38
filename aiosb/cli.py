"""The ``aiosb`` command: ``aiosb demo``, ``aiosb serve`` (and, as it lands, ``bench``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from . import __version__
from ._demo import DRAIN_SECONDS, demo, timeline, timeline_svg
from .auth import MICROSOFT_DEV_KEY
from .client import connect
from .errors import ServiceBusError

__all__ = ["DRAIN_SECONDS", "demo", "main", "run", "timeline", "timeline_svg"]

T = TypeVar("T")


def _say(text: str) -> None:
    print(text, flush=True)


LOOPS = ("auto", "uvloop", "asyncio")


def _runner(loop: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """What runs a coroutine on the event loop ``--loop`` asks for: ``auto`` is uvloop
    where it is installed (S-9), else asyncio's own."""
    if loop not in LOOPS:
        raise ValueError(f"--loop must be one of {', '.join(LOOPS)}, not {loop!r}.")
    if loop == "asyncio":
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        if loop == "auto":
            return asyncio.run
        raise ServiceBusError(
            "--loop uvloop needs the uvloop package (pip install uvloop); it is not "
            "installed (uvloop does not run on Windows)."
        ) from None
    return uvloop.run


def run(main: Coroutine[Any, Any, T], loop: str = "auto") -> T:
    """Run ``main`` to completion on a new event loop of the kind ``loop`` names."""
    try:
        runner = _runner(loop)
    except (ValueError, ServiceBusError):
        main.close()  # never run: no "coroutine was never awaited" warning
        raise
    return runner(main)


#: Where Microsoft's emulator answers its health check (on its HTTP port, 5300).
HEALTH_PATH = "/health"
#: Microsoft's ports, as its emulator listens: AMQP (no TLS) and HTTP.
MICROSOFT_AMQP_PORT, MICROSOFT_HTTP_PORT = 5672, 5300
#: ``aiosb serve``'s default ports: HTTP, AMQP, AMQP over TLS (the SDKs' 5671). A port
#: left to its default that is taken (by another ``aiosb serve``, or by a port of this
#: server the user named) gives way to a free port, said in the banner; a port the user
#: named, and with ``--microsoft-emulator`` Microsoft's, is served or an error.
HTTP_PORT, AMQP_PORT, AMQPS_PORT = 5380, 5672, 5671


def _port_variable(environ: Mapping[str, str], name: str, default: int) -> int:
    """The port ``name`` in ``environ`` gives, else ``default``: how Microsoft's emulator
    is moved (its compose file passes ``EMULATOR_HTTP_PORT`` and ``EMULATOR_AMQP_PORT`` to
    the container), taken by ``--microsoft-emulator`` where no flag gives the port.

    Raises :class:`ValueError`, naming the variable, for a value that is not a port."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or not 0 < int(text) <= 65535:
        raise ValueError(f"{name}={text!r} in the environment is not a port (1-65535); "
                         "unset it, or give the port with a flag")
    return int(text)


async def _health(_request: Any) -> Any:
    """``GET /health``, answered as Microsoft's emulator answers it (unsigned)."""
    from aiohttp import web

    return web.json_response({"status": "healthy", "message": "Service is healthy."})


async def serve_forever(
    host: str,
    port: int,
    key_name: str,
    key: str | None,
    data_dir: str | None = None,
    keys: dict[str, tuple[str, tuple[str, ...]]] | None = None,
    quiet: bool = False,
    metrics: bool = False,
    amqp_port: int | None = None,
    namespace: str = "sbemulatorns",
    tls: tuple[str, str] | None = None,
    amqp_tls: tuple[str, str] | None = None,
    amqps_port: int | None = None,
    config: Any = None,
    microsoft: bool = False,
    explorer: bool = True,
    fsync: bool = False,
    allow_hosts: tuple[str, ...] = (),
    free_if_taken: Collection[str] = (),
) -> None:
    """Serve the emulator over HTTP (and AMQP 1.0 on ``amqp_port``, for the official SDKs)
    until interrupted, printing how to connect and (unless ``quiet``) a line per
    request. ``tls`` (certificate, key) makes the HTTP port HTTPS; ``amqp_tls`` (the
    same, or another) makes the AMQP port answer a client that opens with TLS with the
    HTTPS management API, so that one connection string reaches both (#34), and
    ``amqps_port`` (with ``amqp_tls``) serve AMQP over TLS, as the SDKs speak it to a
    namespace on Azure. ``config`` (an :class:`aiosb.server.msconfig.EmulatorConfig`) is made
    in the namespace before the server listens; ``microsoft`` answers as Microsoft's
    emulator does besides (``GET /health``, its development key); ``explorer`` serves the
    Service Bus Explorer, a web page, at ``/explorer/``; ``allow_hosts``: names the HTTP
    server answers to besides localhost, IP addresses and ``host`` (DNS rebinding).
    ``free_if_taken``: which ports (``"http"``, ``"amqp"``, ``"amqps"``) were left to
    their defaults, which give way to free ones where they are taken (the banner says
    by what); a port the user named that is taken is an error."""
    from .auth import key_table
    from .server.amqp._websocket import PATH, websocket_handler
    from .server.amqp.front_end import AmqpServer, serve_amqp
    from .server.http import DEV_KEY, serve
    from .server.http._hosts import AllowedHosts

    if not quiet:
        _log_to_stdout()
    also = MICROSOFT_DEV_KEY if microsoft and key is None else None
    table = key_table(key_name, key or DEV_KEY, keys, also=also)
    said: list[str] = []

    async def prepare() -> None:
        if config is not None:
            from .server import msconfig

            async with connect(f"memory://{namespace}") as ns:
                said.extend(await msconfig.apply(ns, config))
    ssl_context = None
    from .server.tls import context

    if tls is not None:
        ssl_context = context(*tls)
    amqp: AmqpServer | None = None  # AMQP over WebSockets finds it here once it listens
    websocket = websocket_handler(lambda: None if amqp is None else amqp._serve)
    routes: dict[str, Any] = {PATH: websocket}
    if microsoft:
        routes[HEALTH_PATH] = _health
    async with serve(
        host, port, key_name=key_name, key=key or DEV_KEY, data_dir=data_dir, fsync=fsync,
        keys=keys,
        log_requests=not quiet, metrics=metrics, ssl_context=ssl_context,
        root=namespace, routes=routes, also_key=also, prepare=prepare, explorer=explorer,
        allow_hosts=allow_hosts,
        free_if_taken="http" in free_if_taken,
    ) as served, contextlib.AsyncExitStack() as stack:
        if amqp_port is not None:
            try:
                management = None
                if served.route is not None:
                    tls_context = None if amqp_tls is None else context(*amqp_tls)
                    management = (served.route, tls_context)
                secure = amqps_port if amqp_tls is not None else None
                amqp = await stack.enter_async_context(serve_amqp(
                    host, amqp_port, namespace=namespace, keys=table, journal=served.journal,
                    management=management, tls_port=secure, listener=served.listener,
                    free_if_taken="amqp" in free_if_taken,
                    tls_free_if_taken="amqps" in free_if_taken,
                ))
            except OSError as exc:  # say which of the ports, and what to do
                raise OSError(
                    exc.errno,
                    f"{exc.strerror or exc}; choose other ports with --amqp-port and "
                    "--amqps-port, or serve HTTP alone with --no-amqp",
                    f"{host}:{amqp_port} (AMQP)"
                    + ("" if amqp_tls is None else f" or {host}:{amqps_port} (AMQP over TLS)"),
                ) from exc
        stopped = _Stopped()  # before the banner: a signal may follow it at once
        _tune_gc()
        _say(f"aiosb emulator server listening on {served.url}")
        served_on = (("HTTP", port, int(served.url.rsplit(":", 1)[1])),
                     ("AMQP", amqp_port, 0 if amqp is None else amqp.port),
                     ("AMQP over TLS", amqps_port, 0 if amqp is None else amqp.tls_port))
        for what, asked, bound in served_on:
            if asked and bound and bound != asked:
                ours = [other for other, _, on in served_on if on == asked]
                by = (f"this server's {ours[0]} port" if ours
                      else "taken by another process (another aiosb serve?)")
                _say(f"  port {asked} is {by}: {what} on port {bound} instead")
        if tls is not None:
            _say(f"  HTTPS, certificate {tls[0]}; namespace {namespace} at the root, for the "
                 "official administration clients:")
            _say(f"    Endpoint=sb://localhost:{served.url.rsplit(':', 1)[1]};"
                 f"SharedAccessKeyName={key_name};SharedAccessKey={key or DEV_KEY} "
                 f"(connection_verify={tls[0]!r})")
        _say(f"  event loop: {type(asyncio.get_running_loop()).__module__.split('.')[0]}")
        _say(f"  namespace {namespace} at the root ({served.url}/orders/messages is its queue "
             "orders);")
        _say(f"  other namespaces exist on first use: {served.url}/NAME (e.g. "
             f"{served.url}/contoso)")
        if key is None:
            _say(f"  signed with the well-known development key {key_name} / {DEV_KEY}")
            _say("  (for local use only; pass --key to choose your own)")
        if data_dir is not None:
            _say(f"  durable: every acknowledged operation is kept in {data_dir} ("
                 + ("flushed to the disk: survives the machine crashing)" if fsync else
                    "survives the server being killed; --fsync: the machine crashing too)"))
        for line in said:
            _say(f"  {line}")
        if microsoft:
            at = "" if amqp is None or amqp.port == MICROSOFT_AMQP_PORT else f":{amqp.port}"
            _say(f"  as Microsoft's emulator: health at {served.url}{HEALTH_PATH}"
                 + (f"; its key {MICROSOFT_DEV_KEY} is accepted too:" if also else ":"))
            _say(f"    Endpoint=sb://localhost{at};SharedAccessKeyName={key_name};"
                 f"SharedAccessKey={also or key};UseDevelopmentEmulator=true;")
        _say(f"  connection string: {served.connection_string('contoso')}")
        if amqp is not None:
            _say(f"  AMQP 1.0 (the official SDKs) on port {amqp.port}, namespace {namespace}:")
            _say(f"    {amqp.connection_string()}")
            if amqp_tls is not None:
                _say(f"    and management (the administration clients) over HTTPS at the "
                     f"same port, certificate {amqp_tls[0]}")
                _say(f"    (trust it: connection_verify={amqp_tls[0]!r}, or SSL_CERT_FILE / "
                     "NODE_EXTRA_CA_CERTS in the environment)")
                if amqp.tls_port:
                    _say(f"  AMQP over TLS on port {amqp.tls_port}, as to a namespace on Azure "
                         f"(the same certificate): {amqp.connection_string(tls=True)}")
            else:
                _say("    (management at this port needs a certificate: pip install "
                     "aiosb[tls], or --tls-cert and --tls-key)")
        if metrics:
            _say(f"  Prometheus metrics: {served.url}/metrics")
        if explorer:
            _say(f"  Service Bus Explorer in the browser: {served.url}/explorer/ (sign in with "
                 "a key of the server's)")
        names = ", ".join(sorted(AllowedHosts(host, allow_hosts).names))
        _say(f"  HTTP answers for {names} and IP addresses; any other Host gets 421 (DNS "
             "rebinding; add a name with --allow-host NAME)")
        if host in ("0.0.0.0", "::", ""):
            _say("    on every interface: a name other machines reach this one by (a compose "
                 "service's, a DNS name) needs --allow-host")
        if not quiet:
            _say("  a line per request follows (--quiet turns them off)")
        if tls is None:
            _say(f"  python: aiosb.connect({served.namespace_url('contoso')!r}"
                 + ("" if key is None else f", credential=({key_name!r}, KEY)") + ")")
        else:  # https is a real namespace's scheme: the credential and extensions are said
            shown = repr(DEV_KEY) if key is None else "KEY"
            _say(f"  python (SSL_CERT_FILE={tls[0]} in the environment): aiosb.connect("
                 f"{served.namespace_url('contoso')!r}, credential=({key_name!r}, {shown}), "
                 "extensions=True)")
        got = await stopped.wait()
        _say(f"aiosb serve: {got}, stopping (durable data is flushed first)")
    _say("bye")
    if got == "SIGINT":
        raise KeyboardInterrupt  # exits 130, as Ctrl-C does


#: The youngest generation's threshold while serving: a batch of 100 messages makes a few
#: thousand objects, and at Python's default (700) the collector ran several times per
#: batch, a third of the time of a send in profiles; messages hold no reference cycles,
#: so collecting less often costs little memory.
GC_YOUNG_THRESHOLD = 20_000


def _tune_gc() -> None:
    """The server's garbage collection, chosen for it (never in a library user's
    process): what start-up made (modules, the app) is frozen out of every collection,
    and the young generation is collected every :data:`GC_YOUNG_THRESHOLD` objects."""
    import gc

    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def _log_to_stdout() -> None:
    """aiosb's log lines (a request each, state changes) on stdout, as they happen."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("aiosb")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


class _Stopped:
    """SIGTERM or SIGINT, as an awaitable: the server stops cleanly on either (a process
    in the background ignores SIGINT, and service managers send SIGTERM)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._signal = ""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._got, sig.name)

    def _got(self, name: str) -> None:
        self._signal = self._signal or name
        self._event.set()

    async def wait(self) -> str:
        await self._event.wait()
        return self._signal


def _ports(http: int | None, amqp: int | None, amqps: int | None,
           microsoft: bool) -> tuple[int, int, int, frozenset[str]]:
    """The HTTP, AMQP and AMQP-over-TLS ports to serve on, from those the user named
    (``None``: not named), and which of them (``"http"``, ``"amqp"``, ``"amqps"``) were
    left to their defaults, and so give way to free ports if taken: what the user named
    never moves, whatever its number. A port named 0 makes every port not named 0 as
    well: a server on free ports takes none of the well-known ones (a second server, a
    test suite beside another). With ``microsoft``, Microsoft's ports, or those its
    environment variables name, all as named: an application left unchanged would
    reach whatever else holds them (Microsoft's emulator in Docker), so a taken one is
    an error, not moved."""
    environ = os.environ if microsoft else {}
    if http is None and environ.get("EMULATOR_HTTP_PORT", "").strip():
        http = _port_variable(environ, "EMULATOR_HTTP_PORT", MICROSOFT_HTTP_PORT)
    if amqp is None and environ.get("EMULATOR_AMQP_PORT", "").strip():
        amqp = _port_variable(environ, "EMULATOR_AMQP_PORT", MICROSOFT_AMQP_PORT)
    free = 0 in (http, amqp, amqps)
    soft: set[str] = set()

    def default(which: str, port: int) -> int:
        if free:
            return 0
        if not microsoft:
            soft.add(which)
        return port

    if http is None:
        http = default("http", MICROSOFT_HTTP_PORT if microsoft else HTTP_PORT)
    if amqp is None:
        amqp = default("amqp", MICROSOFT_AMQP_PORT if microsoft else AMQP_PORT)
    if amqps is None:
        amqps = default("amqps", AMQPS_PORT)
    return http, amqp, amqps, frozenset(soft)


class _ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default; an option without one says in its help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, [], False):
            return action.help
        return super()._get_help_string(action)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aiosb`` console script."""
    defaults = _ShowDefaults
    parser = argparse.ArgumentParser(
        prog="aiosb", description="asyncio-native Azure Service Bus", formatter_class=defaults
    )
    parser.add_argument("--version", action="version", version=f"aiosb {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cmd = commands.add_parser(
        "demo", help="failover and recovery, end to end, on the embedded emulator",
        formatter_class=defaults,
    )
    demo_cmd.add_argument("--orders", type=int, default=160, help="how many orders to send")
    demo_cmd.add_argument(
        "--svg", default="aiosb-demo-timeline.svg", help="where to write the picture (SVG)"
    )
    demo_cmd.add_argument(
        "--png", default="aiosb-demo-timeline.png",
        help="where to write the picture as PNG (needs matplotlib: pip install aiosb[plot])",
    )
    serve_cmd = commands.add_parser(
        "serve", help="serve the emulator over HTTP (the Service Bus REST protocol)",
        formatter_class=defaults,
    )
    for command in (demo_cmd, serve_cmd):
        command.add_argument("--loop", choices=LOOPS, default="auto",
                             help="event loop: uvloop where installed (auto), or asyncio's")
    serve_cmd.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    serve_cmd.add_argument("--port", type=int, default=None,
                           help="port (0 picks a free one; default 5380, or 5300 with "
                           "--microsoft-emulator, or its EMULATOR_HTTP_PORT where set). A "
                           "port given as 0 makes every port not given free too; a default "
                           "port that is taken gives way to a free one, said (not with "
                           "--microsoft-emulator)")
    serve_cmd.add_argument("--key-name", default="RootManageSharedAccessKey",
                           help="shared access key name requests must be signed with")
    serve_cmd.add_argument("--key", default=None,
                           help="the key (default: the well-known development key)")
    serve_cmd.add_argument("--send-key", action="append", default=[], metavar="NAME=KEY",
                           help="also accept this key, with Send rights only "
                           "(repeatable; none by default)")
    serve_cmd.add_argument("--listen-key", action="append", default=[], metavar="NAME=KEY",
                           help="also accept this key, with Listen rights only "
                           "(repeatable; none by default)")
    serve_cmd.add_argument("--amqp-port", type=int, default=None,
                           help="port for AMQP 1.0, what the official SDKs speak (0 picks a "
                           "free one; default 5672, or EMULATOR_AMQP_PORT where set with "
                           "--microsoft-emulator)")
    serve_cmd.add_argument("--amqps-port", type=int, default=None,
                           help="port for AMQP over TLS, as the SDKs speak to a namespace on "
                           "Azure (with a certificate: see --tls-dir; 0 picks a free one; "
                           "default 5671, none with --microsoft-emulator)")
    serve_cmd.add_argument("--no-amqp", action="store_true", help="serve HTTP only")
    serve_cmd.add_argument("--namespace", default=None,
                           help="the default namespace: AMQP connections use it, and HTTP "
                           "serves it at the root beside /NAME/... prefixes (default: "
                           "--config's, else sbemulatorns)")
    serve_cmd.add_argument("--tls-cert", default=None,
                           help="serve HTTPS with this certificate (PEM): what the official "
                           "administration clients need")
    serve_cmd.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    serve_cmd.add_argument("--tls", action="store_true",
                           help="serve HTTPS with a self-signed certificate for localhost, made "
                           "in --tls-dir (needs cryptography: pip install aiosb[tls])")
    serve_cmd.add_argument("--tls-dir", default=None,
                           help="where --tls (and, without --tls, the AMQP port's management "
                           "over HTTPS) keeps its self-signed certificate and key, a folder "
                           "of yours only (default: per user, $XDG_STATE_HOME/aiosb/tls or "
                           "~/.local/state/aiosb/tls; see docs/server.md)")
    serve_cmd.add_argument("--quiet", action="store_true",
                           help="no line per request (they are on by default)")
    serve_cmd.add_argument("--metrics", action="store_true",
                           help="serve Prometheus metrics at /metrics (needs prometheus-client: "
                           "pip install aiosb[metrics])")
    serve_cmd.add_argument("--data-dir", default=None,
                           help="keep everything in a SQLite database in this directory "
                           "(durable across restarts); default: in memory")
    serve_cmd.add_argument("--fsync", action="store_true",
                           help="with --data-dir: flush each commit to the disk before "
                           "answering (SQLite synchronous=FULL), so that what is acknowledged "
                           "survives the machine crashing, not only the server being killed; "
                           "slower")
    serve_cmd.add_argument("--config", default=None, metavar="CONFIG_JSON",
                           help="make the entities of Microsoft's emulator's Config.json at "
                           "start (again at every start: created, updated, said)")
    serve_cmd.add_argument("--microsoft-emulator", action="store_true",
                           help="listen and answer as Microsoft's emulator: AMQP on 5672, "
                           "HTTP on 5300 with GET /health, its development key SAS_KEY_VALUE "
                           "accepted too, no AMQP over TLS unless --amqps-port is given")
    serve_cmd.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                           help="a name clients reach the HTTP port by, besides localhost and IP "
                           "addresses (repeatable; any other Host is answered 421)")
    serve_cmd.add_argument("--no-explorer", action="store_true",
                           help="do not serve the Service Bus Explorer web page at /explorer/")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            microsoft = args.microsoft_emulator
            amqps_given = args.amqps_port is not None
            try:
                args.port, args.amqp_port, args.amqps_port, soft = _ports(
                    args.port, args.amqp_port, args.amqps_port, microsoft)
            except ValueError as exc:
                parser.error(str(exc))
            config = None
            if args.config is not None:
                from .server import msconfig

                try:
                    config = msconfig.load(args.config)
                except msconfig.ConfigError as exc:
                    print(f"aiosb: {args.config}: {exc}", file=sys.stderr)
                    return 2
                for warning in config.warnings:
                    print(f"aiosb: {args.config}: {warning}", file=sys.stderr)
                if args.namespace is not None and args.namespace != config.namespace:
                    parser.error(f"--namespace {args.namespace} but {args.config} names "
                                 f"{config.namespace}: give one")
            if args.namespace is None:
                args.namespace = config.namespace if config is not None else "sbemulatorns"
            if args.fsync and args.data_dir is None:
                parser.error("--fsync goes with --data-dir (in memory, nothing is written)")
            if not 0 <= args.port <= 65535:
                parser.error("--port must be between 0 and 65535")
            if not 0 <= args.amqp_port <= 65535:
                parser.error("--amqp-port must be between 0 and 65535")
            if not 0 <= args.amqps_port <= 65535:
                parser.error("--amqps-port must be between 0 and 65535")
            tls = None
            if (args.tls_cert is None) != (args.tls_key is None):
                parser.error("--tls-cert and --tls-key go together")
            from .server.tls import UnsafeTlsFolder, default_dir, self_signed

            tls_dir = args.tls_dir or default_dir()  # per user, not the working directory
            try:
                if args.tls_cert is not None:
                    tls = (args.tls_cert, args.tls_key)
                elif args.tls:
                    cert, tls_key = self_signed(tls_dir, reuse=True)
                    tls = (str(cert), str(tls_key))
                amqp_tls = tls
                if amqp_tls is None and not args.no_amqp:
                    # The AMQP port answers TLS with the management API (#34): with the
                    # certificate in --tls-dir, made once, where cryptography is installed.
                    with contextlib.suppress(ImportError):
                        cert, tls_key = self_signed(tls_dir, reuse=True)
                        amqp_tls = (str(cert), str(tls_key))
            except UnsafeTlsFolder as exc:  # #48: a key only in a folder of the user's own
                print(f"aiosb: {exc}", file=sys.stderr)
                return 2
            keys: dict[str, tuple[str, tuple[str, ...]]] = {}
            for option, right in ((args.send_key, "Send"), (args.listen_key, "Listen")):
                for text in option:
                    name, sep, secret = text.partition("=")
                    if not sep or not name or not secret:
                        parser.error(f"--{right.lower()}-key takes NAME=KEY, not {text!r}")
                    keys[name] = (secret, (right,))
            run(serve_forever(args.host, args.port, args.key_name, args.key, args.data_dir,
                              keys, quiet=args.quiet, metrics=args.metrics,
                              amqp_port=None if args.no_amqp else args.amqp_port,
                              namespace=args.namespace, tls=tls, amqp_tls=amqp_tls,
                              amqps_port=None if microsoft and not amqps_given
                              else args.amqps_port,
                              config=config, microsoft=microsoft,
                              explorer=not args.no_explorer, fsync=args.fsync,
                              allow_hosts=tuple(args.allow_host),
                              free_if_taken=soft),
                args.loop)
        if args.command == "demo":
            if args.orders < 10:
                parser.error("--orders must be at least 10")
            report = run(demo(args.orders, svg=args.svg or None, png=args.png or None),
                         args.loop)
            if report["lost"]:
                return 1
    except ServiceBusError as exc:
        if args.command == "serve" and args.config is not None:
            from .server import msconfig

            if isinstance(exc, msconfig.ConfigError):  # the file against the namespace
                print(f"aiosb: {args.config}: {exc}", file=sys.stderr)
                return 2
        print(f"aiosb: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except ImportError as exc:  # an extra that is not installed (--metrics)
        print(f"aiosb: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the port is taken, the host unknown ...
        where = exc.filename or f"{args.host}:{args.port}"
        print(f"aiosb: cannot serve on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
