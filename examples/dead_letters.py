"""Dead letters: expiry, poison messages, and explicit dead-lettering.

Shows the three ways a message reaches the dead-letter queue, each with its reason:
its time to live ran out (TTLExpiredException), it failed max_delivery_count times
(MaxDeliveryCountExceeded), or the application dead-lettered it.

Run: python examples/dead_letters.py
"""

import asyncio
from datetime import timedelta

import aiosb
from aiosb import Message


async def main() -> None:
    async with aiosb.connect("memory://dead-letters") as ns:
        await ns.create_queue(
            "jobs", max_delivery_count=2, dead_lettering_on_message_expiration=True
        )
        async with ns.sender("jobs") as sender:
            await sender.send(
                [
                    Message(b"too late", time_to_live=timedelta(milliseconds=200)),
                    Message(b"poison"),
                    Message(b"invalid"),
                ]
            )
        await asyncio.sleep(0.3)  # "too late" expires while nobody listens

        async with ns.receiver("jobs") as receiver:
            for _ in range(2):  # "poison" fails twice
                for msg in await receiver.receive(max_messages=10, max_wait=1):
                    if msg.body == b"invalid":
                        await receiver.dead_letter(msg, "Invalid", "no customer id")
                    else:
                        await receiver.abandon(msg)

        async with ns.receiver("jobs", sub_queue="deadletter") as dlq:
            for msg in await dlq.receive(max_messages=10, max_wait=1):
                print(f"{msg.body.decode():<9} {msg.dead_letter_reason}")
                await dlq.complete(msg)


if __name__ == "__main__":
    asyncio.run(main())
