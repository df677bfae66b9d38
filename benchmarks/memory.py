"""Memory per resident message (#16): what the embedded broker holds for each message
sent and not yet received, with a 10-byte body.

Measured with :mod:`tracemalloc`, so the number is deterministic (no wall clock, no
resident-set noise): N messages (each its own 10-byte body, the broker assigning each
MessageId) are sent in batches of 100 into a plain queue, and the growth of traced
memory, after a garbage collection, is divided by N. The body is counted: the broker
keeps it. The target is under 300 bytes.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import aiosb
from aiosb import Message, emulator

from ._harness import MIN_RUNS, check, report, run

BATCH = 100
TARGET_BYTES = 300


async def resident_bytes(count: int, properties: bool = False, body: int = 10) -> float:
    """Bytes of traced memory per message held by a queue after ``count`` sends of
    ``body``-byte messages."""
    async with aiosb.connect("memory://bench-memory") as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            # Warm up: whatever the first send allocates once is not per message.
            await sender.send([Message(b"warming-up")])
            async with ns.receiver("q") as receiver:
                await receiver.complete(await receiver.receive(max_messages=1, max_wait=0))
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for start in range(0, count, BATCH):
                    await sender.send([
                        Message(b"%0*d" % (body, i), application_properties={"i": i} if properties
                                else None)
                        for i in range(start, start + BATCH)
                    ])
                gc.collect()
                after = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
        await ns.delete_queue("q")
    return (after - before) / count


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=MIN_RUNS)
    args = parser.parse_args(argv)
    args.repeat = max(args.repeat, MIN_RUNS)
    count = args.messages // BATCH * BATCH
    rows = []
    summary: dict[str, float] = {}
    checks = []
    for label, properties in (("10-byte body", False), ("10-byte body, one property", True)):
        values = []
        for _ in range(args.repeat):
            emulator.reset()
            values.append(run(lambda p=properties: resident_bytes(count, p)))
        rows.append({"case": label, "messages": count, "bytes_per_message": min(values)})
        key = "bytes_per_message" + ("_with_property" if properties else "")
        summary[key] = min(values)
        if not properties:  # the target is the plain case's; the other is for reference
            checks.append(check("#16", f"resident bytes per message ({label})", values,
                                TARGET_BYTES, at_most=True, unit="bytes"))
    summary["target_bytes_per_message"] = TARGET_BYTES
    report("memory", f"Memory per resident message: {count:,} messages in a queue", rows,
           summary, checks)
    return summary


if __name__ == "__main__":
    main()
