"""A PySpark data source for Service Bus: format ``"aiosb"`` (batch and streaming).

Register it on a session, then read and write as with any source::

    import aiosb.spark
    aiosb.spark.register(spark)

    (df.write.format("aiosb")                       # one message per row
       .option("namespace", "http://127.0.0.1:5380/contoso")
       .option("entity", "orders")
       .option("secondary", "http://127.0.0.1:5380/fabrikam")   # optional: paired
       .mode("append").save())

    rows = (spark.read.format("aiosb")
              .option("namespace", url).option("entity", "orders")
              .option("max_messages", 10_000).load())

Written columns, one per field of :class:`~aiosb.Message`: ``body`` (binary or string,
required) and optionally ``message_id``, ``session_id``, ``partition_key``,
``time_to_live_seconds`` (a number), ``scheduled_enqueue_time`` (a timestamp),
``content_type``, ``correlation_id``, ``subject``, ``reply_to``, ``reply_to_session_id``,
``to`` and ``properties`` (a map with string keys). Rows read have :data:`READ_SCHEMA`:
those columns (properties as strings), then ``sequence_number``, ``enqueued_time``,
``expires_at``, ``delivery_count``, ``dead_letter_reason``,
``dead_letter_error_description``, ``dead_letter_source``, ``state`` and
``entity_path``.

Delivery: writes are at least once; a retried task sends its rows again with the same
MessageIds (derived from the write, the partition and the row's position when the row
has none; from the query id and micro-batch id when streaming), so an entity with
``requires_duplicate_detection`` keeps one copy. Reads: see :mod:`aiosb.spark._read`
and :mod:`aiosb.spark._stream`; rows read reach Spark as Arrow record batches.
Options are checked on the driver; a bad one fails with one sentence naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from ..errors import InvalidArgument
from ._arrow import pack
from ._columns import READ_SCHEMA, WRITE_COLUMNS
from ._options import (
    ReadOptions,
    StreamReadOptions,
    WriteOptions,
    read_options,
    stream_read_options,
    write_options,
)
from ._read import read_partition, refuse_retry, shares
from ._stream import StreamSource
from ._write import (
    WriteResult,
    check_write_schema,
    new_write_id,
    summarize,
    write_task,
)

__all__ = ["READ_SCHEMA", "WRITE_COLUMNS", "AiosbDataSource", "register"]

log = logging.getLogger("aiosb.spark")


def register(spark: Any) -> None:
    """Register the ``"aiosb"`` format on a SparkSession (that one only). Optional: the
    installed module :mod:`pyspark_aiosb` lets Spark find the format in every session."""
    spark.dataSource.register(AiosbDataSource)


class AiosbDataSource(DataSource):
    """Service Bus queues, topics and subscriptions as a Spark data source."""

    @classmethod
    def name(cls) -> str:
        return "aiosb"

    def schema(self) -> str:
        return READ_SCHEMA

    def writer(self, schema: Any, overwrite: bool) -> _Writer:
        _no_overwrite(overwrite)
        check_write_schema(schema)
        return _Writer(write_options(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> _StreamWriter:
        _no_overwrite(overwrite)
        check_write_schema(schema)
        return _StreamWriter(write_options(self.options))

    def reader(self, schema: Any) -> _Reader:
        return _Reader(read_options(self.options))

    def streamReader(self, schema: Any) -> _StreamReader:
        return _StreamReader(stream_read_options(self.options))


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise InvalidArgument(
            "the aiosb sink only appends (a queue cannot be overwritten); use mode('append')."
        )


class _Result(WriterCommitMessage):
    """A task's counts, as the commit message Spark hands the driver."""

    def __init__(self, result: WriteResult) -> None:
        self.result = result


def _results(messages: Sequence[WriterCommitMessage | None]) -> list[WriteResult | None]:
    return [m.result if isinstance(m, _Result) else None for m in messages]


class _Writer(DataSourceArrowWriter):
    """``df.write``: every task's rows acknowledged before it returns."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.write_id = new_write_id(options)  # made on the driver, the same in retries

    def write(self, iterator: Iterator[Any]) -> _Result:
        return _Result(write_task(self.options, iterator, self.write_id))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, rows, batches, size = summarize(_results(messages))
        log.info(
            "aiosb: wrote %d rows (%d bytes) in %d batches from %d tasks to %r (write %s)",
            rows,
            size,
            batches,
            tasks,
            self.options.connection.entity,
            self.write_id,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, rows, _, _ = summarize(_results(messages))
        log.warning(
            "aiosb: write %s to %r failed; %d tasks had sent %d rows, which stay sent "
            "(at least once: write again with message_id_prefix=%r to let duplicate "
            "detection drop the copies)",
            self.write_id,
            self.options.connection.entity,
            tasks,
            rows,
            self.write_id,
        )


class _StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: MessageIds from the query id, batch id and row position."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> _Result:
        from pyspark import TaskContext

        context = TaskContext.get()
        query = batch = None
        if context is not None:
            query = context.getLocalProperty("sql.streaming.queryId")
            batch = context.getLocalProperty("streaming.sql.batchId")
        prefix = self.options.message_id_prefix or query or "query"
        return _Result(write_task(self.options, iterator, f"{prefix}-{batch}"))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, rows, batches, _ = summarize(_results(messages))
        log.info(
            "aiosb: micro-batch %d: %d rows in %d batches from %d tasks to %r",
            batchId,
            rows,
            batches,
            tasks,
            self.options.connection.entity,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, rows, _, _ = summarize(_results(messages))
        log.warning(
            "aiosb: micro-batch %d failed after %d tasks sent %d rows; Spark replays it "
            "with the same MessageIds",
            batchId,
            tasks,
            rows,
        )


class _Reader(DataSourceReader):
    """``spark.read``: ``partitions`` tasks share ``max_messages`` (one task to peek)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        parts = 1 if self.options.mode == "peek" else self.options.partitions
        return [InputPartition(share) for share in shares(self.options.max_messages, parts)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if self.options.mode != "peek":
            from pyspark import TaskContext

            context = TaskContext.get()
            refuse_retry(context.attemptNumber() if context is not None else 0)
        return read_partition(self.options, partition.value)


class _StreamReader(DataSourceStreamReader):
    """``spark.readStream``: messages completed only when Spark commits their batch."""

    def __init__(self, options: StreamReadOptions) -> None:
        self.options = options
        self._source: StreamSource | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a pickled copy for read(): it must not carry the driver's receiver.
        return {"options": self.options, "_source": None}

    @property
    def source(self) -> StreamSource:
        if self._source is None:
            self._source = StreamSource(self.options)
        return self._source

    def initialOffset(self) -> dict[str, int]:
        return {"admitted": 0}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.options.max_messages_per_trigger)

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        begin = int((start or {}).get("admitted", 0))
        rows = getattr(limit, "max_rows", None)
        if limit is None:  # Spark before 4.2: no admission control, use the option
            rows = self.options.max_messages_per_trigger
        return {"admitted": self.source.latest(begin, rows)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        parts = self.source.batches(int(start["admitted"]), int(end["admitted"]))
        # Packed: what every row shares travels once (#39), see ``_arrow.Packed``.
        return [InputPartition([pack(b) for b in batches]) for batches in parts]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Arrow record batches, as Spark takes them.
        return (packed.batch() for packed in partition.value)

    def commit(self, end: dict[str, int]) -> None:
        # Completed on the loop while Spark goes on to the next micro-batch (#39).
        self.source.commit(int(end["admitted"]), wait=False)
        log.info("aiosb: completing the messages up to offset %s", end["admitted"])

    def stop(self) -> None:
        if self._source is not None:
            self._source.stop()
