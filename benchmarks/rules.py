"""Rules (issue 14): what subscription filters cost per rule per message.

A topic with 20 subscriptions, each taking the messages of one value of a property
(``region = 'r7'``, as a SQL filter, and again as a correlation filter), takes 100,000
messages sent in batches of 100; each message matches one subscription, so every message
is stored once. The baseline, measured in the same run, is the same sends to a topic with
one subscription and its ``$Default`` rule: one stored copy a message, no filter
evaluated. Routing cost per rule per message = (time with rules - baseline) / (messages x
20). Target: under 10 µs, far below the send itself (the baseline per message).
"""

from __future__ import annotations

import argparse

import aiosb
from aiosb import CorrelationRuleFilter, Message, RuleProperties, SqlRuleFilter, emulator

from ._harness import Stopwatch, loops, report, run

BATCH = 100
SUBSCRIPTIONS = 20


async def send_all(kind: str, batches: list[list[Message]]) -> float:
    """Create the topic and its subscriptions, then time the sends."""
    emulator.reset()
    async with aiosb.connect("memory://bench-rules") as ns:
        await ns.create_topic("t")
        if kind == "baseline":
            await ns.create_subscription("t", "all")
        for i in range(SUBSCRIPTIONS if kind != "baseline" else 0):
            if kind == "sql":
                rule_filter: SqlRuleFilter | CorrelationRuleFilter = SqlRuleFilter(
                    f"region = 'r{i}'"
                )
            else:
                rule_filter = CorrelationRuleFilter(properties={"region": f"r{i}"})
            await ns.create_subscription(
                "t", f"s{i}", default_rule=RuleProperties("by-region", rule_filter)
            )
        async with ns.sender("t") as sender:
            with Stopwatch() as sw:
                for batch in batches:
                    await sender.send(batch)
        total = 0
        for sub in await ns.list_subscriptions("t"):
            counts = await ns.runtime_properties(f"t/subscriptions/{sub.name}")
            total += counts.active_message_count
        expected = sum(len(b) for b in batches)
        assert total == expected, f"{kind}: {total} stored, {expected} sent"
        return sw.seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    count = args.messages // BATCH * BATCH
    batches = [
        [Message(b"x" * 64, application_properties={"region": f"r{(b * BATCH + i) % 20}",
                                                     "n": i})
         for i in range(BATCH)]
        for b in range(count // BATCH)
    ]
    rows = []
    summary: dict[str, float] = {}
    for loop in loops():
        timings = {
            kind: sorted(run(lambda k=kind: send_all(k, batches), loop) for _ in range(args.repeat))
            for kind in ("baseline", "sql", "correlation")
        }
        base = timings["baseline"]
        for kind in ("sql", "correlation"):
            per_rule = [
                (t - b) / (count * SUBSCRIPTIONS) * 1e6
                for t, b in zip(timings[kind], base, strict=True)
            ]
            rows.append({
                "case": f"20 {kind} filters",
                "loop": loop,
                "us_per_rule_per_msg_min": min(per_rule),
                "us_per_rule_per_msg_median": sorted(per_rule)[len(per_rule) // 2],
                "us_per_rule_per_msg_max": max(per_rule),
                "msgs_per_s": count / timings[kind][0],
            })
            summary[f"{loop}_{kind}_us_per_rule_per_msg"] = min(per_rule)
        rows.append({"case": "baseline: 1 subscription, $Default", "loop": loop,
                     "us_per_msg_send": base[0] / count * 1e6, "msgs_per_s": count / base[0]})
        summary[f"{loop}_baseline_us_per_msg"] = base[0] / count * 1e6
    summary["target_us_per_rule_per_msg"] = 10.0
    report("rules", f"Rules: {SUBSCRIPTIONS} filtered subscriptions, {count:,} messages", rows,
           summary)
    return summary


if __name__ == "__main__":
    main()
