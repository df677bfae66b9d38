"""S-1: the embedded emulator, send -> receive -> complete in batches of 100.

Target (quality.md): at least 150,000 messages/s; reported as a ratio to a bare
``deque`` append+popleft of the same message objects, measured in the same run.
Measured on a plain queue and on a partitioned one (16 fragments, keyless messages:
each batch goes round robin to one fragment, each receive gathers across them).
"""

from __future__ import annotations

import argparse
from collections import deque

import aiosb
from aiosb import Message, emulator

from ._harness import MIN_RUNS, Stopwatch, best_rate, check, loops, report, round_trips, run

BATCH = 100


def bare_deque(messages: list[Message], rounds: int) -> float:
    """The floor: put and get the same objects through a deque, in batches."""
    queue: deque[Message] = deque()
    with Stopwatch() as sw:
        for _ in range(rounds):
            for message in messages:
                queue.append(message)
            for _ in range(len(messages)):
                queue.popleft()
    return sw.seconds


async def emulator_round_trip(
    messages: list[Message], rounds: int, queue: str, partitioned: bool = False
) -> float:
    async with aiosb.connect("memory://bench-s1") as ns:
        return await round_trips(ns, queue, messages, rounds, enable_partitioning=partitioned)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    args.repeat = max(args.repeat, MIN_RUNS)
    rounds = args.messages // BATCH
    count = rounds * BATCH
    messages = [Message(b"x" * 64, application_properties={"i": i}) for i in range(BATCH)]

    rows = []
    deque_rate = best_rate(count, [bare_deque(messages, rounds) for _ in range(args.repeat)])
    rows.append({"case": "bare deque put+get", "loop": "-", **deque_rate})
    summary: dict[str, float] = {}
    checks = []
    for loop in loops():
        for label, partitioned in (("", False), ("partitioned_", True)):
            emulator.reset()
            timings = [
                run(lambda p=partitioned: emulator_round_trip(messages, rounds, "q", p), loop)
                for _ in range(args.repeat)
            ]
            rate = best_rate(count, timings)
            case = f"emulator send/receive/complete{' (16 fragments)' if partitioned else ''}"
            rows.append({"case": case, "loop": loop, **rate})
            checks.append(check("S-1", f"{case} [{loop}]", [count / t for t in timings],
                                150_000, unit="msgs/s"))
            summary[f"s1_{label}{loop}_msgs_per_s"] = rate["best_per_s"]
            summary[f"s1_{label}{loop}_ratio_to_deque"] = (
                rate["best_per_s"] / deque_rate["best_per_s"]
            )
    summary["target_msgs_per_s"] = 150_000
    report("s1_emulator", f"S-1: {count:,} messages in batches of {BATCH}", rows, summary,
           checks)
    return summary


if __name__ == "__main__":
    main()
