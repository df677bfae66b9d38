"""The ``aiosb`` command: ``aiosb demo``, ``aiosb serve`` (and, as it lands, ``bench``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from . import __version__, emulator
from .client import connect
from .errors import ServiceBusError
from .message import Message

__all__ = ["main", "run"]

T = TypeVar("T")


def _say(text: str) -> None:
    print(text, flush=True)


async def demo(
    orders: int = 160, interval: float = 0.05, outage: tuple[float, float] = (2.0, 5.0),
    svg: str | None = "aiosb-demo-timeline.svg",
) -> dict[str, int]:
    """Failover and recovery, end to end, on the embedded emulator.

    A sender sends ``orders`` messages, one every ``interval`` seconds, to a primary
    queue paired with a secondary namespace; the primary queue is down during
    ``outage`` (seconds from the start). Sends fail over to the backlog, pings find the
    primary back, and the syphon moves the backlog home. Returns the final counts.
    """
    from .pairing import PairedNamespaceOptions

    broker = emulator.namespace("contoso")
    broker.faults.heal()
    async with connect("memory://contoso", operation_timeout=5) as primary, connect(
        "memory://fabrikam", operation_timeout=5
    ) as secondary:
        if await primary.queue_exists("orders"):
            await primary.delete_queue("orders")
        await primary.create_queue("orders", requires_duplicate_detection=True)
        options = PairedNamespaceOptions(
            backlog_queue_count=4,
            failover_interval=timedelta(seconds=1),
            ping_primary_interval=timedelta(seconds=1),
            enable_syphon=True,
        )
        loop = asyncio.get_running_loop()
        start = loop.time()

        def at() -> str:
            return f"[{loop.time() - start:5.2f}s]"

        _say(f"{at()} memory://contoso/orders paired with memory://fabrikam "
             "(failover 1 s, ping 1 s, syphon on)")
        async with primary.pair(secondary, options) as paired:
            where: list[tuple[float, str]] = []
            moved: list[float] = []
            expected = [orders]  # backlog sends to see moved home; known once all are sent
            drained = asyncio.Event()

            async def watch() -> None:
                async for event in paired.events():
                    if event.kind == "syphon_moved":
                        moved.extend([loop.time() - start] * event.count)
                        if len(moved) >= expected[0]:
                            drained.set()
                    if event.kind in ("suspect", "failover", "recovered", "syphon_moved"):
                        _say(f"{at()} {event.kind:<13} {event.detail}")

            async with asyncio.TaskGroup() as owned:  # the watcher ends with the demo
                watcher = owned.create_task(watch())

                def down() -> None:
                    broker.faults.fail("orders")
                    _say(f"{at()} outage        contoso/orders goes down")

                def up() -> None:
                    broker.faults.heal()
                    _say(f"{at()} heal          contoso/orders is back")

                loop.call_later(outage[0], down)
                loop.call_later(outage[1], up)
                async with paired.sender("orders") as sender:
                    for i in range(orders):
                        await asyncio.sleep(max(0.0, start + i * interval - loop.time()))
                        before = paired.stats.backlog_sends
                        sent_at = loop.time() - start
                        await sender.send(Message(f"order {i}".encode(), message_id=f"order-{i}"))
                        went = "B" if paired.stats.backlog_sends > before else "P"
                        where.append((sent_at, went))
                expected[0] = sum(1 for _, w in where if w == "B")
                if len(moved) >= expected[0]:
                    drained.set()
                try:
                    async with asyncio.timeout(DRAIN_SECONDS):
                        await drained.wait()
                except TimeoutError:
                    _say(f"{at()} the syphon had not moved everything home after "
                         f"{DRAIN_SECONDS:g} s; counting what arrived")
                stats = paired.stats
                watcher.cancel()
        arrived: set[str | None] = set()
        async with primary.receiver("orders", mode="receive_and_delete") as receiver:
            while batch := await receiver.receive(max_messages=100, max_wait=0):
                arrived.update(m.message_id for m in batch)
    report = {
        "sent": orders,
        "to_primary": sum(1 for _, w in where if w == "P"),
        "to_backlog": sum(1 for _, w in where if w == "B"),
        "moved_home": stats.syphon_moved,
        "arrived": len(arrived),
        "lost": orders - len(arrived & {f"order-{i}" for i in range(orders)}),
    }
    total = max(t for t, _ in where) + interval
    _say("\n" + timeline(where, moved, outage, total))
    if svg:
        picture = timeline_svg(where, moved, outage, total)
        await asyncio.to_thread(Path(svg).write_text, picture, encoding="utf-8")
        _say(f"(timeline picture written to {svg})")
    _say("\nreport")
    for key, value in report.items():
        _say(f"  {key:<12} {value:>6}")
    return report


def timeline(
    where: list[tuple[float, str]], moved: list[float], outage: tuple[float, float], total: float
) -> str:
    """A text picture: where each send went over time, the outage, the syphon."""
    width = 64
    step = total / width

    def row(marks: list[float], char: str) -> str:
        cells = ["."] * width
        for t in marks:
            cells[min(int(t / step), width - 1)] = char
        return "".join(cells)

    down = "".join("#" if outage[0] <= (i + 0.5) * step < outage[1] else "_" for i in range(width))
    # Each label is the time at the left edge of its column, to a tenth of a second
    # (whole seconds cut it short by up to one: the picture's marks drifted off it).
    scale = "".join(f"{i * step:.1f}s".ljust(8) for i in range(0, width, 8))[:width]
    return "\n".join(
        [
            f"{'time':<9}{scale}",
            f"{'outage':<9}{down}",
            f"{'primary':<9}{row([t for t, w in where if w == 'P'], 'P')}",
            f"{'backlog':<9}{row([t for t, w in where if w == 'B'], 'B')}",
            f"{'syphon':<9}{row(moved, 'S')}",
        ]
    )


def timeline_svg(
    where: list[tuple[float, str]], moved: list[float], outage: tuple[float, float], total: float
) -> str:
    """The same picture as SVG: one tick per message, lanes for primary, backlog, syphon."""
    scale = 800 / total
    lanes = {"P": 40, "B": 80, "S": 120}
    colours = {"P": "#2b7bb9", "B": "#e0892b", "S": "#3a9d5d"}
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="900" height="170" font-family="sans-serif"'
        ' font-size="12">',
        f'<rect x="{80 + outage[0] * scale:.1f}" y="20" '
        f'width="{(outage[1] - outage[0]) * scale:.1f}" height="120" fill="#f3d6d6"/>',
        f'<text x="{80 + outage[0] * scale:.1f}" y="15">primary down</text>',
    ]
    for label, lane in (("primary", "P"), ("backlog", "B"), ("syphon", "S")):
        parts.append(f'<text x="5" y="{lanes[lane] + 5}">{label}</text>')
    marks = [(t, w) for t, w in where] + [(t, "S") for t in moved]
    for t, lane in marks:
        x = 80 + t * scale
        y = lanes[lane]
        parts.append(
            f'<line x1="{x:.1f}" y1="{y - 10}" x2="{x:.1f}" y2="{y + 10}" '
            f'stroke="{colours[lane]}" stroke-width="2"/>'
        )
    for second in range(int(total) + 1):
        parts.append(f'<text x="{80 + second * scale:.1f}" y="160">{second}s</text>')
    parts.append("</svg>")
    return "\n".join(parts)


LOOPS = ("auto", "uvloop", "asyncio")
#: How long the demo waits for the syphon to bring the backlog home.
DRAIN_SECONDS = 30.0


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


async def serve_forever(
    host: str,
    port: int,
    key_name: str,
    key: str | None,
    data_dir: str | None = None,
    keys: dict[str, tuple[str, tuple[str, ...]]] | None = None,
) -> None:
    """Serve the emulator over HTTP until interrupted, printing how to connect."""
    from .emulator.server import DEV_KEY, serve

    async with serve(
        host, port, key_name=key_name, key=key or DEV_KEY, data_dir=data_dir, keys=keys
    ) as served:
        stopped = _Stopped()  # before the banner: a signal may follow it at once
        _say(f"aiosb emulator server listening on {served.url}")
        _say(f"  event loop: {type(asyncio.get_running_loop()).__module__.split('.')[0]}")
        _say(f"  namespaces exist on first use: {served.url}/NAME (e.g. {served.url}/contoso)")
        if key is None:
            _say(f"  signed with the well-known development key {key_name} / {DEV_KEY}")
            _say("  (for local use only; pass --key to choose your own)")
        if data_dir is not None:
            _say(f"  durable: every acknowledged operation is kept in {data_dir}")
        _say(f"  connection string: {served.connection_string('contoso')}")
        _say(f"  python: aiosb.connect({served.namespace_url('contoso')!r}"
             + ("" if key is None else f", credential=({key_name!r}, KEY)") + ")")
        got = await stopped.wait()
        _say(f"aiosb serve: {got}, stopping (durable data is flushed first)")
    _say("bye")
    if got == "SIGINT":
        raise KeyboardInterrupt  # exits 130, as Ctrl-C does


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
        "--svg", default="aiosb-demo-timeline.svg", help="where to write the timeline picture"
    )
    serve_cmd = commands.add_parser(
        "serve", help="serve the emulator over HTTP (the Service Bus REST protocol)",
        formatter_class=defaults,
    )
    for command in (demo_cmd, serve_cmd):
        command.add_argument("--loop", choices=LOOPS, default="auto",
                             help="event loop: uvloop where installed (auto), or asyncio's")
    serve_cmd.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    serve_cmd.add_argument("--port", type=int, default=5380, help="port (0 picks a free one)")
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
    serve_cmd.add_argument("--data-dir", default=None,
                           help="keep everything in a SQLite database in this directory "
                           "(durable across restarts); default: in memory")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            if not 0 <= args.port <= 65535:
                parser.error("--port must be between 0 and 65535")
            keys: dict[str, tuple[str, tuple[str, ...]]] = {}
            for option, right in ((args.send_key, "Send"), (args.listen_key, "Listen")):
                for text in option:
                    name, sep, secret = text.partition("=")
                    if not sep or not name or not secret:
                        parser.error(f"--{right.lower()}-key takes NAME=KEY, not {text!r}")
                    keys[name] = (secret, (right,))
            run(serve_forever(args.host, args.port, args.key_name, args.key, args.data_dir,
                              keys), args.loop)
        if args.command == "demo":
            if args.orders < 10:
                parser.error("--orders must be at least 10")
            report = run(demo(args.orders, svg=args.svg or None), args.loop)
            if report["lost"]:
                return 1
    except ServiceBusError as exc:
        print(f"aiosb: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # the port is taken, the host unknown ...
        print(f"aiosb: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
