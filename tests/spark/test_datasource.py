"""The ``"aiosb"`` data source on a real local Spark against ``aiosb serve`` (issue 12)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _queue(bridge, url, name, **props):
    with bridge.connect(url) as ns:
        ns.create_queue(name, **props)


def _drain(bridge, url, name) -> list:
    with bridge.connect(url) as ns, ns.receiver(name, mode="receive_and_delete") as r:
        got = []
        while batch := r.receive(max_messages=1000, max_wait=0):
            got.extend(batch)
        return got


def _count(bridge, url, name) -> int:
    with bridge.connect(url) as ns:
        return ns.runtime_properties(name).active_message_count


def _write(df, url, entity, **options):
    w = df.write.format("aiosb").option("namespace", url).option("entity", entity)
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


def test_rows_written_are_read_back_with_every_column(spark, url, bridge):
    _queue(bridge, url, "q")
    df = spark.range(1500).selectExpr(
        "cast(id as string) as body",
        "case when id % 2 = 0 then concat('m', id) end as message_id",
        "concat('s', id % 7) as subject",
        "'text/plain' as content_type",
        "map('k', cast(id % 3 as string), 'n', 'x') as properties",
        "cast(3600 as int) as time_to_live_seconds",
    )
    _write(df.repartition(3), url, "q")
    assert _count(bridge, url, "q") == 1500

    read = (
        spark.read.format("aiosb").option("namespace", url).option("entity", "q")
        .option("max_messages", 5000).option("partitions", 3).option("max_wait_seconds", 1)
        .load()
    )
    rows = read.collect()  # one action: a batch read consumes
    assert len(rows) == 1500
    by_body = {bytes(r.body).decode(): r for r in rows}
    assert set(by_body) == {str(i) for i in range(1500)}
    assert len({r.message_id for r in rows}) == 1500
    for i in (0, 1, 2, 1499):
        r = by_body[str(i)]
        if i % 2 == 0:
            assert r.message_id == f"m{i}"
        assert r.subject == f"s{i % 7}" and r.content_type == "text/plain"
        assert r.properties == {"k": str(i % 3), "n": "x"}
        assert r.delivery_count == 1 and r.sequence_number > 0
        assert abs((r.expires_at - r.enqueued_time) - timedelta(hours=1)) < timedelta(seconds=1)
    assert _count(bridge, url, "q") == 0  # completed once handed to Spark


def test_every_field_has_a_column_both_ways(spark, url, bridge):
    """Issue 13: the columns derive from aiosb.message.MESSAGE_FIELDS, so the fields the
    sink once left out (the scheduled enqueue time; on reading, the reply-to session, the
    time to live, the state) travel too, through Spark's own Arrow conversion."""
    _queue(bridge, url, "q")
    df = spark.range(3).selectExpr(
        "cast(id as string) as body",
        "'rs' as reply_to_session_id",
        "cast(90 as double) as time_to_live_seconds",
        "timestamp'2031-05-06 07:08:09Z' as scheduled_enqueue_time",
    )
    _write(df, url, "q")
    read = (
        spark.read.format("aiosb").option("namespace", url).option("entity", "q")
        .option("mode", "peek").option("max_messages", 10).load()
    )
    rows = read.collect()
    assert len(rows) == 3
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    for r in rows:
        assert r.reply_to_session_id == "rs" and r.time_to_live_seconds == 90.0
        assert r.state == "scheduled" and r.entity_path == "q"
        assert r.scheduled_enqueue_time.astimezone(UTC) == at


def test_peek_mode_reads_without_consuming(spark, url, bridge):
    _queue(bridge, url, "q")
    sender = bridge.sender(url, "q")
    sender.send([Message(str(i)) for i in range(30)])
    read = (
        spark.read.format("aiosb").option("namespace", url).option("entity", "q")
        .option("mode", "peek").option("max_messages", 100).load()
    )
    assert sorted(int(bytes(r.body)) for r in read.collect()) == list(range(30))
    assert _count(bridge, url, "q") == 30


def test_a_retried_batch_read_task_fails_loudly_rather_than_reading_nothing(
    spark, url, bridge, tmp_path
):
    """A complete-mode read consumes: a task that Spark retries (a UDF after the read
    failed once) cannot read again what its first attempt completed. It fails the job
    with a sentence saying so; it used to succeed with no rows (finding 7)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    _queue(bridge, url, "q")
    bridge.sender(url, "q").send([Message(str(i)) for i in range(300)])
    marker = str(tmp_path / "failed-once")

    @F.udf(T.StringType())
    def fail_once(body):
        if bytes(body) == b"250" and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("fail once")
        return "ok"

    read = (
        spark.read.format("aiosb").option("namespace", url).option("entity", "q")
        .option("max_messages", 300).option("partitions", 1).option("max_wait_seconds", 1)
        .load()
    )
    with pytest.raises(Exception, match="cannot be retried"):
        read.select(fail_once("body")).collect()
    assert os.path.exists(marker)


def _python_workers() -> list[int]:
    """The Python worker processes Spark forked from its ``pyspark.daemon``."""
    daemons, parents = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"pyspark.daemon" in cmdline:
            parents[int(entry)] = ppid
    daemons = {pid for pid, ppid in parents.items() if ppid not in parents}
    return [pid for pid, ppid in parents.items() if ppid in daemons]


def _kill_workers_once(bridge, url, entity, when: int) -> threading.Thread:
    """SIGKILL every Spark Python worker once ``entity`` holds ``when`` messages."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if _count(bridge, url, entity) >= when:
                for pid in _python_workers():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("dedupe", [False, True], ids=["plain", "duplicate-detection"])
def test_a_retried_write_task_sends_its_rows_again_with_the_same_ids(spark, url, bridge, dedupe):
    """At least once: tasks whose Python workers are killed mid-write lose nothing; their
    retries repeat the MessageIds, so an entity with duplicate detection keeps exactly
    one copy."""
    _queue(bridge, url, "q", requires_duplicate_detection=dedupe)
    n = 20_000
    df = spark.range(0, n, numPartitions=2).selectExpr("cast(id as string) as body")
    killer = _kill_workers_once(bridge, url, "q", when=2_000)
    _write(df, url, "q", max_batch_messages=50, max_in_flight=1)
    killer.join(5)
    got = _drain(bridge, url, "q")
    ids = Counter(m.message_id for m in got)
    assert {m.body.decode() for m in got} == {str(i) for i in range(n)}
    assert len(ids) == n
    if dedupe:
        assert len(got) == n
    else:
        assert len(got) > n  # the first attempts had sent rows before they died
        assert max(ids.values()) == 2


def test_streaming_sink_replaying_a_batch_repeats_its_message_ids(spark, url, bridge, tmp_path):
    """A micro-batch Spark runs again (no commit recorded) produces the same MessageIds,
    so duplicate detection makes the sink effectively once."""
    _queue(bridge, url, "plain")
    _queue(bridge, url, "dedup", requires_duplicate_detection=True)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(3):
        (source / f"{f}.txt").write_text("".join(f"{f}-{i}\n" for i in range(100)))

    def run(entity: str, checkpoint) -> None:
        query = (
            spark.readStream.format("text").load(str(source)).selectExpr("value as body")
            .writeStream.format("aiosb").option("namespace", url).option("entity", entity)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    for entity in ("plain", "dedup"):
        checkpoint = tmp_path / f"ck-{entity}"
        run(entity, checkpoint)
        shutil.rmtree(checkpoint / "commits")  # as if the driver died before committing
        run(entity, checkpoint)

    plain = Counter(m.message_id for m in _drain(bridge, url, "plain"))
    assert len(plain) == 300 and set(plain.values()) == {2}
    dedup = _drain(bridge, url, "dedup")
    assert sorted(m.body.decode() for m in dedup) == sorted(
        f"{f}-{i}" for f in range(3) for i in range(100)
    )


def _stream(spark, url, entity, handle, **options):
    reader = spark.readStream.format("aiosb").option("namespace", url).option("entity", entity)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().writeStream.foreachBatch(handle).trigger(processingTime="200 milliseconds")


def test_streaming_source_reads_everything_once_and_completes_what_spark_committed(
    spark, url, bridge, tmp_path
):
    _queue(bridge, url, "q")
    bridge.sender(url, "q").send([Message(str(i), message_id=str(i)) for i in range(95)])
    seen: list[str] = []

    def handle(batch_df, batch_id):
        seen.extend(bytes(r.body).decode() for r in batch_df.collect())

    query = _stream(
        spark, url, "q", handle, max_messages_per_trigger=20, max_wait_seconds=0.2
    ).option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        deadline = time.monotonic() + 90
        while len(seen) < 95 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(seen, key=int) == [str(i) for i in range(95)]
        # Committed batches are completed; at most the last is still held when we stop.
        deadline = time.monotonic() + 30
        while _count(bridge, url, "q") > 20 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    left = _drain(bridge, url, "q")
    assert len(left) <= 20
    assert {m.body.decode() for m in left} <= set(seen)  # delivered again: at least once


def test_streaming_source_completes_nothing_spark_did_not_commit(spark, url, bridge, tmp_path):
    """A query that dies in its third micro-batch: the messages of the batches Spark
    committed are gone, every other message is back in the queue at once."""
    _queue(bridge, url, "q", lock_duration=timedelta(minutes=5))
    bridge.sender(url, "q").send([Message(str(i), message_id=str(i)) for i in range(50)])
    batches: dict[int, list[str]] = {}

    def handle(batch_df, batch_id):
        bodies = [bytes(r.body).decode() for r in batch_df.collect()]
        if len(batches) == 2:
            raise RuntimeError("the sink fails on purpose")
        batches[batch_id] = bodies

    query = _stream(
        spark, url, "q", handle, max_messages_per_trigger=10, max_wait_seconds=0.2
    ).option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        with pytest.raises(Exception, match="the sink fails on purpose"):
            query.awaitTermination(90)
    finally:
        query.stop()
    committed = {b for bodies in batches.values() for b in bodies}
    assert len(committed) == 20
    # The source's process abandons on its way out, just after stop() returns here;
    # locked for 5 minutes, the uncommitted messages are back only if it did.
    left: set[str] = set()
    deadline = time.monotonic() + 30
    while len(left) < 30 and time.monotonic() < deadline:
        left |= {m.body.decode() for m in _drain(bridge, url, "q")}
        time.sleep(0.1)
    # Nothing uncommitted was completed (the locks were 5 minutes: they came back
    # because the source abandoned them on stop, not because they ran out).
    assert left >= {str(i) for i in range(50)} - committed
    assert left | committed == {str(i) for i in range(50)}


@pytest.mark.parametrize(
    ("options", "sentence"),
    [
        ({"entity": "q"}, "needs the option 'namespace'"),
        ({"namespace": "URL"}, "needs the option 'entity'"),
        ({"namespace": "URL", "entity": "q", "max_in_flight": "0"},
         "'max_in_flight' is '0'; it must be a whole number from 1 to 64"),
        ({"namespace": "URL", "entity": "q", "entitty": "x"},
         "does not know the option 'entitty'"),
        ({"namespace": "URL", "entity": "q", "key": "k"},
         "'key' is set but 'key_name' is not"),
        ({"namespace": "URL", "entity": "q", "failover_interval_seconds": "5"},
         "applies to a pairing; set 'secondary'"),
        ({"namespace": "ftp://x", "entity": "q"}, "the option 'namespace' is 'ftp://x'"),
    ],
)
def test_bad_write_options_fail_on_the_driver_with_one_sentence(spark, url, options, sentence):
    df = spark.range(3).selectExpr("cast(id as string) as body")
    w = df.write.format("aiosb").mode("append")
    for k, v in options.items():
        w = w.option(k, url if v == "URL" else v)
    with pytest.raises(Exception, match=sentence):
        w.save()


def test_bad_columns_and_modes_are_refused_before_anything_is_sent(spark, url, bridge):
    _queue(bridge, url, "q")
    good = spark.range(3).selectExpr("cast(id as string) as body")
    with pytest.raises(Exception, match="does not know the column 'messageId'"):
        _write(good.selectExpr("body", "'x' as messageId"), url, "q")
    with pytest.raises(Exception, match="needs a 'body' column"):
        _write(spark.range(3), url, "q")
    with pytest.raises(Exception, match="'subject' is bigint"):
        _write(good.selectExpr("body", "1L as subject"), url, "q")
    with pytest.raises(Exception, match="'properties' has array values"):
        _write(good.selectExpr("body", "map('k', array(1)) as properties"), url, "q")
    with pytest.raises(Exception, match="only appends"):
        good.write.format("aiosb").option("namespace", url).option("entity", "q").mode(
            "overwrite"
        ).save()
    with pytest.raises(Exception, match="'max_messages' is 'lots'"):
        spark.read.format("aiosb").option("namespace", url).option("entity", "q").option(
            "max_messages", "lots"
        ).load().collect()
    assert _count(bridge, url, "q") == 0


def test_a_row_too_large_fails_the_write_with_a_sentence(spark, url, bridge):
    _queue(bridge, url, "q")
    df = spark.range(1).selectExpr("repeat('x', 300000) as body")
    with pytest.raises(Exception, match=r"over the .* byte limit"):
        _write(df, url, "q")
    assert _count(bridge, url, "q") == 0


def test_a_stream_from_one_entity_into_another_as_the_readme_shows(spark, url, bridge, tmp_path):
    _queue(bridge, url, "orders")
    _queue(bridge, url, "audit")
    bridge.sender(url, "orders").send(
        [Message(str(i), message_id=f"o{i}", subject="order") for i in range(60)]
    )
    query = (
        spark.readStream.format("aiosb").option("namespace", url).option("entity", "orders")
        .option("max_messages_per_trigger", 25).option("max_wait_seconds", 0.2).load()
        .select("body", "message_id", "subject", "properties")
        .writeStream.format("aiosb").option("namespace", url).option("entity", "audit")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds").start()
    )
    try:
        deadline = time.monotonic() + 90
        while _count(bridge, url, "audit") < 60 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    audit = _drain(bridge, url, "audit")
    assert sorted(m.message_id for m in audit) == sorted(f"o{i}" for i in range(60))
    assert {m.subject for m in audit} == {"order"}


def test_the_format_is_found_in_every_session_without_registering(spark):
    """Registering a data source serves one session (SPARK-45600): a new session, as a
    job in another thread or notebook may use, would not find "aiosb". The installed
    ``pyspark_aiosb`` module is what Spark looks for in every session (SPARK-45917), so
    the format is found there and it is our own option check that answers."""
    other = spark.newSession()
    with pytest.raises(Exception, match="needs the option 'namespace'"):
        other.read.format("aiosb").load().collect()
    with pytest.raises(Exception, match="needs the option 'namespace'"):
        other.createDataFrame([("x",)], "body string").write.format("aiosb").mode("append").save()


def test_a_fresh_process_finds_the_format_with_the_project_installed_as_dev_installs_it(
        tmp_path):
    """#39: Spark looks for ``pyspark_*`` modules with pkgutil, which sees no import hook:
    with ``./dev``'s editable install (compat mode, a path entry) a fresh Python process
    and a fresh session that never registered the data source find ``"aiosb"``; it is
    our own option check that answers. Run in the project's own interpreter."""
    import subprocess
    import sys

    script = tmp_path / "fresh.py"
    script.write_text(
        "import os, sys, pkgutil\n"
        "os.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "print('found' if any(m.name == 'pyspark_aiosb' for m in pkgutil.iter_modules())\n"
        "      else 'not found')\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "try:\n"
        "    spark.read.format('aiosb').load().collect()\n"
        "except Exception as exc:\n"
        "    print('ANSWER', str(exc).replace(chr(10), ' ')[:2000])\n"
        "spark.stop()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.stdout.startswith("found"), done.stdout + done.stderr[-2000:]
    assert "needs the option 'namespace'" in done.stdout, done.stdout + done.stderr[-2000:]
