"""The ``aiosb`` command: ``aiosb demo``, and ``aiosb serve``, whose flags it parses into
a :class:`~aiosb.server.config.ServerConfig` that :func:`aiosb.server.serve` serves."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from . import __version__
from ._demo import DRAIN_SECONDS, demo, timeline, timeline_svg
from .errors import ServiceBusError
from .server import ServerConfig, Signals, log_to_stdout, msconfig, serve, tune_gc
from .server.config import LOOPS
from .server.tls import UnsafeTlsFolder

__all__ = ["DRAIN_SECONDS", "demo", "main", "run", "timeline", "timeline_svg"]

T = TypeVar("T")


def _say(text: str) -> None:
    print(text, flush=True)


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


async def serve_forever(config: ServerConfig, *, stdin: bool = False) -> None:
    """``aiosb serve``: serve ``config`` (:func:`aiosb.server.serve`) until SIGINT or
    SIGTERM (or, with ``stdin``, the end of standard input), with its log on stdout
    (unless ``quiet``), having printed the banner."""
    if not config.quiet:
        log_to_stdout()
    async with serve(config) as running:
        stopped = Signals(stdin=stdin)  # before the banner: a signal may follow it at once
        tune_gc()
        for line in running.banner():
            _say(line)
        got = await stopped.wait()
        _say(f"aiosb serve: {got}, stopping (durable data is flushed first)")
    _say("bye")
    if got == "SIGINT":
        raise KeyboardInterrupt  # exits 130, as Ctrl-C does


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
    serve_cmd.add_argument("--stop-when-stdin-closes", action="store_true",
                           help="stop when standard input ends: a parent that started the "
                                "server with a pipe there (ServerProcess, the pytest "
                                "fixture) takes it along when it dies, even by SIGKILL")
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
    at = args.command  # where it serves, for an OSError
    try:
        if args.command == "serve":
            config = _server_config(parser, args)
            if isinstance(config, int):
                return config
            at = f"{config.host}:{config.ports.http}"
            run(serve_forever(config, stdin=args.stop_when_stdin_closes), args.loop)
        if args.command == "demo":
            if args.orders < 10:
                parser.error("--orders must be at least 10")
            report = run(demo(args.orders, svg=args.svg or None, png=args.png or None),
                         args.loop)
            if report["lost"]:
                return 1
    except ServiceBusError as exc:
        if args.command == "serve" and args.config is not None:
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
    except UnsafeTlsFolder as exc:  # #48: a key only in a folder of the user's own
        print(f"aiosb: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the port is taken, the host unknown ...
        where = exc.filename or at
        print(f"aiosb: cannot serve on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def _server_config(parser: argparse.ArgumentParser, args: argparse.Namespace
                   ) -> ServerConfig | int:
    """``aiosb serve``'s flags as a :class:`ServerConfig`, with ``--config``'s file read
    (its warnings said); an exit status where the file is bad; what the flags get wrong
    is the parser's error (exit status 2)."""
    config = None
    if args.config is not None:
        try:
            config = msconfig.load(args.config)
        except msconfig.ConfigError as exc:
            print(f"aiosb: {args.config}: {exc}", file=sys.stderr)
            return 2
        for warning in config.warnings:
            print(f"aiosb: {args.config}: {warning}", file=sys.stderr)
    keys: dict[str, tuple[str, tuple[str, ...]]] = {}
    for option, right in ((args.send_key, "Send"), (args.listen_key, "Listen")):
        for text in option:
            name, sep, secret = text.partition("=")
            if not sep or not name or not secret:
                parser.error(f"--{right.lower()}-key takes NAME=KEY, not {text!r}")
            keys[name] = (secret, (right,))
    try:
        return ServerConfig(
            host=args.host, port=args.port, amqp_port=args.amqp_port,
            amqps_port=args.amqps_port, amqp=not args.no_amqp, key_name=args.key_name,
            key=args.key, keys=keys, namespace=args.namespace, data_dir=args.data_dir,
            fsync=args.fsync, tls=args.tls, tls_cert=args.tls_cert, tls_key=args.tls_key,
            tls_dir=args.tls_dir, config=config, microsoft=args.microsoft_emulator,
            explorer=not args.no_explorer, metrics=args.metrics, quiet=args.quiet,
            allow_hosts=tuple(args.allow_host), loop=args.loop,
        )
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
