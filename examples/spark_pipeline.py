"""A Spark pipeline through a paired namespace, across an outage, proved exactly once.

1. Starts an ``aiosb serve`` emulator on a free port: namespaces ``contoso`` (primary)
   and ``fabrikam`` (secondary, home of the backlog queues).
2. A Spark job on ``local[2]`` generates events and writes them with the ``"aiosb"``
   data source, paired: while the primary queue is down (an outage injected through the
   server's fault endpoint in the middle of the write), executors keep sending into the
   backlog queues of the secondary.
3. The syphon (run here, on the driver) moves the backlog home once the primary is back.
4. Spark reads every message back and proves with aggregations that each event arrived
   exactly once by MessageId: per-key counts equal what was generated, no gaps, no
   duplicates.

Run: python examples/spark_pipeline.py [--events N]   (needs Java 17 and the spark extra)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from datetime import timedelta

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this Python's pyarrow

import aiosb
from aiosb import PairedNamespaceOptions
from aiosb.bridge import Bridge
from aiosb.server.process import ServerProcess

KEYS = 16
PAIRING = {"failover_interval_seconds": "0.5", "ping_primary_interval_seconds": "1",
           "backlog_queue_count": "4"}


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


async def syphon(
    primary_url: str, secondary_url: str, stop: asyncio.Event
) -> aiosb.PairedNamespace:
    """Run the pairing's syphon until ``stop`` is set; return the pairing (for its stats)."""
    async with aiosb.connect(primary_url) as primary, aiosb.connect(secondary_url) as secondary:
        options = PairedNamespaceOptions(
            backlog_queue_count=int(PAIRING["backlog_queue_count"]),
            failover_interval=timedelta(seconds=float(PAIRING["failover_interval_seconds"])),
            ping_primary_interval=timedelta(seconds=1),
            enable_syphon=True,
            syphon_receive_wait=timedelta(seconds=1),
        )
        async with primary.pair(secondary, options) as paired:
            await stop.wait()
        return paired


def outage(bridge: Bridge, primary_url: str, events: int, seconds: float) -> threading.Thread:
    """Take the primary queue down for ``seconds`` once a fifth of the events are in."""

    def run() -> None:
        with bridge.connect(primary_url) as ns:
            faults = ns.transport.faults
            while ns.runtime_properties("events").active_message_count < events // 5:
                time.sleep(0.05)
            fault = bridge.run(faults.fail("events", operations=("send",)))
            say(f"outage: the primary queue refuses sends for {seconds:g} s")
            time.sleep(seconds)
            bridge.run(faults.heal(fault))
            say("outage over: the primary queue takes sends again")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def backlog_depth(bridge: Bridge, secondary_url: str) -> int:
    with bridge.connect(secondary_url) as ns:
        return sum(ns.runtime_properties(q.name).active_message_count for q in ns.list_queues())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="events to generate")
    parser.add_argument("--outage", type=float, default=3.0, help="outage length, seconds")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import aiosb.spark

    bridge = Bridge.shared()
    with ServerProcess() as server:
        primary_url, secondary_url = f"{server.url}/contoso", f"{server.url}/fabrikam"
        say(f"aiosb serve at {server.url}: primary {primary_url}, secondary {secondary_url}")
        with bridge.connect(primary_url) as ns:
            ns.create_queue("events", requires_duplicate_detection=True,
                            max_size_in_megabytes=5120)
        stop = bridge.run(_event())
        pairing = bridge.submit(syphon(primary_url, secondary_url, stop))

        say("starting Spark on local[2]")
        spark = (SparkSession.builder.master("local[2]").appName("aiosb-pipeline")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        aiosb.spark.register(spark)

        events = spark.range(0, args.events, numPartitions=8).select(
            F.concat(F.lit("evt-"), F.col("id").cast("string")).alias("message_id"),
            F.to_json(F.struct("id", (F.col("id") % KEYS).alias("key"))).alias("body"),
            F.create_map(F.lit("key"), (F.col("id") % KEYS).cast("string")).alias("properties"),
            F.lit("application/json").alias("content_type"),
        )
        watcher = outage(bridge, primary_url, args.events, args.outage)
        say(f"writing {args.events:,} events through the pairing")
        started = time.monotonic()
        writer = (events.write.format("aiosb").option("namespace", primary_url)
                  .option("entity", "events").option("secondary", secondary_url))
        for name, value in PAIRING.items():
            writer = writer.option(name, value)
        writer.mode("append").save()
        took = time.monotonic() - started
        say(f"written and acknowledged in {took:.1f} s ({args.events / took:,.0f} rows/s)")
        watcher.join(60)

        deadline = time.monotonic() + 120
        with bridge.connect(primary_url) as ns:
            while True:
                home = ns.runtime_properties("events").active_message_count
                left = backlog_depth(bridge, secondary_url)
                if (left == 0 and home >= args.events) or time.monotonic() > deadline:
                    break
                say(f"syphon: {left:,} messages still in the backlog, {home:,} home")
                time.sleep(1)
        bridge.run(_set(stop))
        stats = bridge.wait(pairing, 30).stats
        say(f"syphon moved {stats.syphon_moved:,} messages home; backlog now {left:,}")

        say("reading every message back with Spark")
        read = (spark.read.format("aiosb").option("namespace", primary_url)
                .option("entity", "events").option("max_messages", args.events + 1000)
                .option("partitions", 4).option("max_wait_seconds", 2).load()).cache()
        arrived = read.count()
        distinct = read.select("message_id").distinct().count()
        per_key = {r["key"]: r["count"] for r in
                   read.groupBy(read.properties["key"].alias("key")).count().collect()}
        expected = {r["key"]: r["count"] for r in
                    events.groupBy(events.properties["key"].alias("key")).count().collect()}
        missing = events.select("message_id").join(read.select("message_id"), "message_id",
                                                   "left_anti").count()
        spark.stop()

    lost, duplicates = missing, arrived - distinct
    say(f"per key: {len(per_key)} keys, counts {'match' if per_key == expected else 'DIFFER'}")
    print(f"\n{args.events:,} sent, {distinct:,} arrived, {lost:,} lost, "
          f"{duplicates:,} duplicates; {stats.syphon_moved:,} went through the backlog.")
    ok = lost == 0 and duplicates == 0 and per_key == expected and distinct == args.events
    print("exactly once: yes" if ok else "exactly once: NO")
    return 0 if ok else 1


async def _event() -> asyncio.Event:
    return asyncio.Event()


async def _set(event: asyncio.Event) -> None:
    event.set()


if __name__ == "__main__":
    sys.exit(main())
