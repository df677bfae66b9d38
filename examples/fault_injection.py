"""Fault injection: drive an outage from a test or a script.

The emulator's faults make every failure path reachable on demand: an outage
(non-transient), a namespace that stops answering (timeout), or a blip (transient,
retried by the client within its operation timeout).

Run: python examples/fault_injection.py
"""

import asyncio

import aiosb
from aiosb import Message, emulator, errors


async def main() -> None:
    broker = emulator.namespace("faulty")
    async with aiosb.connect("memory://faulty", operation_timeout=1) as ns:
        await ns.create_queue("orders")
        async with ns.sender("orders") as sender:
            with broker.faults.fail("orders"):
                try:
                    await sender.send(Message(b"x"))
                except errors.EntityUnavailable as exc:
                    print(f"outage   -> {type(exc).__name__} (retryable={exc.retryable})")

            with broker.faults.fail("orders", kind="timeout"):
                try:
                    await sender.send(Message(b"x"))
                except errors.OperationTimeout as exc:
                    print(f"timeout  -> {type(exc).__name__} after the 1 s operation timeout")

            blip = broker.faults.fail("orders", kind="transient")
            asyncio.get_running_loop().call_later(0.2, blip.heal)
            await sender.send(Message(b"x"))
            print("blip     -> retried with backoff, then sent")

        counts = await ns.runtime_properties("orders")
        print(f"messages in the queue: {counts.active_message_count}")


if __name__ == "__main__":
    asyncio.run(main())
