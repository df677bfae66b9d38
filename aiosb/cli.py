"""The ``aiosb`` command: ``aiosb demo`` (and, as they land, ``serve`` and ``bench``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import timedelta

from . import __version__, emulator
from .client import connect
from .errors import ServiceBusError
from .message import Message

__all__ = ["main"]


def _say(text: str) -> None:
    print(text, flush=True)


async def demo(orders: int = 1000, ttl: float = 2.0) -> dict[str, int]:
    """A tour of the embedded emulator: sends through a transient outage, receives,
    expiry into the dead-letter queue. Returns the final counts."""
    broker = emulator.namespace("aiosb-demo")
    async with connect("memory://aiosb-demo", operation_timeout=10) as ns:
        if await ns.queue_exists("orders"):
            await ns.delete_queue("orders")
        await ns.create_queue(
            "orders",
            default_message_time_to_live=timedelta(seconds=ttl),
            dead_lettering_on_message_expiration=True,
            lock_duration=timedelta(seconds=30),
        )
        _say(f"[1/4] queue 'orders' on memory://aiosb-demo: TTL {ttl:g} s, dead-letter on expiry")

        loop = asyncio.get_running_loop()
        fault = broker.faults.fail("orders", kind="transient", operations=["send"])
        loop.call_later(0.3, fault.heal)
        start = loop.time()
        async with ns.sender("orders") as sender:
            for first in range(0, orders, 100):
                batch = [
                    Message(f"order {i}", message_id=f"order-{i}", subject="order")
                    for i in range(first, min(first + 100, orders))
                ]
                await sender.send(batch)
        _say(
            f"[2/4] sent {orders} orders in batches of 100 through a 0.3 s transient outage "
            f"(retried with backoff; {loop.time() - start:.2f} s)"
        )

        handled = 0
        async with ns.receiver("orders") as receiver:
            while handled < orders * 9 // 10:
                want = min(100, orders * 9 // 10 - handled)
                batch = await receiver.receive(max_messages=want, max_wait=1)
                await receiver.complete(batch)
                handled += len(batch)
        _say(f"[3/4] handled and completed {handled}; the rest wait past their time to live")

        await asyncio.sleep(ttl + 0.1)
        async with ns.receiver("orders", sub_queue="deadletter") as dlq:
            dead = await dlq.receive(max_messages=orders, max_wait=1)
            reasons = {m.dead_letter_reason for m in dead}
            await dlq.complete(dead)
        _say(
            f"[4/4] {len(dead)} expired orders surfaced in the dead-letter queue "
            f"({', '.join(sorted(reasons)) or '-'})"
        )

        counts = await ns.runtime_properties("orders")
        report = {
            "sent": orders,
            "completed": handled,
            "dead_lettered_on_expiry": len(dead),
            "still_active": counts.active_message_count,
        }
    _say("\nreport")
    for key, value in report.items():
        _say(f"  {key:<24} {value:>6}")
    lost = orders - handled - len(dead) - report["still_active"]
    _say(f"  {'unaccounted':<24} {lost:>6}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aiosb`` console script."""
    parser = argparse.ArgumentParser(prog="aiosb", description="asyncio-native Azure Service Bus")
    parser.add_argument("--version", action="version", version=f"aiosb {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cmd = commands.add_parser("demo", help="run the demonstration on the embedded emulator")
    demo_cmd.add_argument("--orders", type=int, default=1000, help="how many orders to send")
    demo_cmd.add_argument("--ttl", type=float, default=2.0, help="time to live, in seconds")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            if args.orders < 10 or args.ttl < 1:
                parser.error("--orders must be at least 10 and --ttl at least 1 second")
            asyncio.run(demo(args.orders, args.ttl))
    except ServiceBusError as exc:
        print(f"aiosb: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
