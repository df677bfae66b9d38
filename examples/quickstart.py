"""Quickstart: a queue on the embedded emulator, one batch in, one batch out.

Run: python examples/quickstart.py
"""

import asyncio
from datetime import timedelta

import aiosb
from aiosb import Message


async def main() -> None:
    async with aiosb.connect("memory://contoso") as ns:
        await ns.create_queue(
            "orders",
            default_message_time_to_live=timedelta(hours=1),
            dead_lettering_on_message_expiration=True,
        )
        async with ns.sender("orders") as sender:
            await sender.send(Message(b"hello", subject="greeting"))
            await sender.send([Message(b"a"), Message(b"b")])  # one batch

        async with ns.receiver("orders") as receiver:  # peek-lock by default
            for msg in await receiver.receive(max_messages=10, max_wait=timedelta(seconds=5)):
                print(f"#{msg.sequence_number} {msg.body!r} expires {msg.expires_at:%H:%M:%S}")
                await receiver.complete(msg)

        counts = await ns.runtime_properties("orders")
        print(f"active messages left: {counts.active_message_count}")


if __name__ == "__main__":
    asyncio.run(main())
