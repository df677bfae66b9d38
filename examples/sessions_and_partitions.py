"""Sessions on a partitioned queue, one fragment down, and a transaction.

Orders are sessions: every line of an order carries the order id as session_id, so the
lines stay in order and live in one fragment of the partitioned queue. With one
fragment down, orders that hash there cannot be sent (PartitionUnavailable, retried
until the operation timeout) while the others flow; keyless messages would simply go
round it. A worker takes whichever order is available next and keeps its progress in
the session state.

Run: python examples/sessions_and_partitions.py
"""

import asyncio

import aiosb
from aiosb import Message, emulator, errors
from aiosb.emulator import FRAGMENT_SHIFT


async def main() -> None:
    async with aiosb.connect("memory://shop", operation_timeout=1) as ns:
        await ns.create_queue("orders", enable_partitioning=True, requires_session=True)
        props = await ns.runtime_properties("orders")
        print(f"orders: {props.fragment_count} fragments")

        async with ns.sender("orders") as sender:
            for order in ("order-1", "order-2", "order-3"):
                async with sender.transaction():  # all lines of an order, or none
                    for line in range(3):
                        await sender.send(
                            Message(f"{order} line {line}".encode(), session_id=order)
                        )

        # Which fragment holds order-2? Its sequence numbers say (top 16 bits).
        async with ns.receiver("orders") as browser:
            peeked = await browser.peek(9)
        home = {m.session_id: m.sequence_number >> FRAGMENT_SHIFT for m in peeked}
        print("fragments:", ", ".join(f"{s} -> {f}" for s, f in sorted(home.items())))

        with emulator.namespace("shop").faults.fail_fragment("orders", home["order-2"]):
            async with ns.sender("orders") as sender:
                try:
                    await sender.send(Message(b"order-2 line 3", session_id="order-2"))
                except errors.OperationTimeout as exc:
                    print(f"order-2 while its fragment is down: {type(exc.__cause__).__name__}")
                others = [s for s, f in home.items() if f != home["order-2"]]
                for order in others:
                    await sender.send(Message(f"{order} line 3".encode(), session_id=order))
                print(f"sent line 3 of {', '.join(sorted(others))} meanwhile")

        for _ in range(3):
            async with ns.receiver(
                "orders", session_id=aiosb.NEXT_AVAILABLE_SESSION, session_wait=1
            ) as worker:
                lines = await worker.receive(max_messages=10, max_wait=0)
                await worker.complete(lines)
                await worker.session.set_state(f"{len(lines)} lines done".encode())
                state = (await worker.session.get_state()).decode()
                print(f"{worker.session_id}: {[m.body.decode()[-6:] for m in lines]} ({state})")


if __name__ == "__main__":
    asyncio.run(main())
