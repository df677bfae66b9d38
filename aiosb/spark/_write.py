"""Writing rows as messages: batch (``df.write``) and streaming (``df.writeStream``).

Each task converts its Arrow record batches to :class:`~aiosb.Message` objects, packs them
into batches up to the namespace's size limit, keeps up to ``max_in_flight`` batches in
flight on the process's :meth:`Bridge.shared() <aiosb.bridge.Bridge.shared>` sender, and
returns only when every row is acknowledged. Delivery is at least once: a retried task
sends its rows again, with the same MessageIds (rows without a ``message_id`` get one
derived from the write, the partition and the row's position), so an entity with
duplicate detection keeps one copy.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..bridge import BlockingSender, Bridge
from ..errors import InvalidArgument, MessageSizeExceeded
from ..message import Message
from ._columns import WRITE_COLUMNS, WRITE_FIELDS, written_value
from ._options import WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("aiosb.spark")

#: Spark types a property value may have (what Service Bus can carry).
_PROPERTY_VALUE_TYPES = (
    "string", "byte", "short", "integer", "long", "float", "double", "boolean", "binary",
    "timestamp",
)
#: Room left in a batch per message for the properties a failover adds (PN-12).
_BACKLOG_ROOM = 160


def check_write_schema(schema: Any) -> None:
    """Refuse, on the driver, a DataFrame the sink cannot write: one sentence."""
    names = [f.name for f in schema.fields]
    if "body" not in names:
        raise InvalidArgument(
            f"the aiosb sink needs a 'body' column (binary or string); the DataFrame has "
            f"{', '.join(names) or 'no columns'}."
        )
    for f in schema.fields:
        accepted = WRITE_COLUMNS.get(f.name)
        if accepted is None:
            raise InvalidArgument(
                f"the aiosb sink does not know the column {f.name!r}; it writes "
                f"{', '.join(WRITE_COLUMNS)} (rename or drop the others)."
            )
        kind = f.dataType.typeName()
        if kind not in accepted:
            raise InvalidArgument(
                f"the column {f.name!r} is {f.dataType.simpleString()}; the aiosb sink "
                f"takes {' or '.join(accepted)} there."
            )
        if f.name == "properties":
            key = f.dataType.keyType.typeName()
            if key != "string":
                raise InvalidArgument(
                    f"the column 'properties' has {key} keys; property names are strings."
                )
            value = f.dataType.valueType.typeName()
            if value not in _PROPERTY_VALUE_TYPES:
                raise InvalidArgument(
                    f"the column 'properties' has {value} values; a property holds "
                    f"{', '.join(_PROPERTY_VALUE_TYPES)}."
                )


@dataclass
class WriteResult:
    """What one write task did: the commit message the driver's ``commit`` reports."""

    partition: int
    rows: int
    batches: int
    bytes: int


def _row_messages(
    batches: Iterable[pa.RecordBatch], ids: str
) -> Iterator[Message]:
    """The rows of Arrow record batches as messages, ids derived where none is given."""
    position = 0
    for batch in batches:
        columns = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        bodies = columns.pop("body")
        message_ids = columns.pop("message_id", None) or [None] * n
        plain: list[tuple[str, str, str, list[Any]]] = []  # text: the cell is the value
        converted: list[tuple[str, str, str, list[Any]]] = []
        for name, values in columns.items():
            field, kind = WRITE_FIELDS[name]
            (plain if kind == "text" else converted).append((name, field, kind, values))
        for i in range(n):
            kwargs: dict[str, Any] = {field: values[i] for _, field, _, values in plain}
            mid = message_ids[i]
            kwargs["message_id"] = mid if mid else f"{ids}{position + i}"  # "" as null
            try:
                for name, field, kind, values in converted:
                    value = written_value(name, kind, values[i])
                    if value is not None:
                        kwargs[field] = value
                yield Message(bodies[i], **kwargs)
            except InvalidArgument as exc:
                raise InvalidArgument(f"row {position + i} of this partition: {exc}") from None
        position += n


def send_partition(
    sender: BlockingSender,
    messages: Iterable[Message],
    max_batch_messages: int,
    max_in_flight: int,
) -> tuple[int, int, int]:
    """Send ``messages`` in size-bounded batches, up to ``max_in_flight`` at once, and
    return (rows, batches, bytes) once every one is acknowledged.

    Raises:
        MessageSizeExceeded: One message is over the limit on its own.
        Any send's error, after waiting for the others in flight.
    """
    limit = sender.max_message_size
    room = _BACKLOG_ROOM + len(sender.entity) if sender.paired else 0
    in_flight: deque[tuple[Future[None], list[Message]]] = deque()
    rows = batches = size_total = 0
    batch: list[Message] = []
    size = 0

    def settle_oldest() -> None:
        nonlocal batches
        future, sent = in_flight.popleft()
        try:
            Bridge.wait(future)
        except MessageSizeExceeded:
            if len(sent) == 1:
                raise
            # Over the broker's limit after all (a failover's added properties, a batch
            # limit under the message limit): halve until the parts fit.
            batches += resend_in_parts(sent)
            return
        batches += 1

    def resend_in_parts(sent: list[Message]) -> int:
        half = len(sent) // 2
        count = 0
        for part in (sent[:half], sent[half:]):
            try:
                sender.send(part)
                count += 1
            except MessageSizeExceeded:
                if len(part) == 1:
                    raise
                count += resend_in_parts(part)
        return count

    def submit(items: list[Message]) -> None:
        while len(in_flight) >= max_in_flight:
            settle_oldest()
        in_flight.append((sender.send_soon(items), items))

    try:
        for message in messages:
            cost = message.size + room
            if cost > limit:
                raise MessageSizeExceeded(
                    f"message {message.message_id!r} is {message.size} bytes, over the "
                    f"{limit - room} byte limit for {sender.entity!r}; make the row smaller."
                )
            if batch and (size + cost > limit or len(batch) >= max_batch_messages):
                submit(batch)
                batch, size = [], 0
            batch.append(message)
            size += cost
            rows += 1
            size_total += message.size
        if batch:
            submit(batch)
        while in_flight:
            settle_oldest()
    except BaseException:
        for future, _ in in_flight:  # let what was started finish before the task fails
            try:
                Bridge.wait(future)
            except Exception:  # the first error is the one to report
                pass
        raise
    return rows, batches, size_total


def _task() -> tuple[int, int]:
    """(partition id, attempt) of the running Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, 0
    return context.partitionId(), context.attemptNumber()


def _sender(options: WriteOptions) -> BlockingSender:
    c = options.connection
    return Bridge.shared().sender(
        c.namespace,
        c.entity,
        credential=c.credential,
        secondary=c.secondary,
        secondary_credential=c.secondary_credential,
        options=c.pairing,
        **c.connect_options(),
    )


def write_task(options: WriteOptions, batches: Iterable[pa.RecordBatch], ids: str) -> WriteResult:
    """One task's write: every row sent and acknowledged before it returns."""
    partition, _ = _task()
    rows, count, size = send_partition(
        _sender(options),
        _row_messages(batches, f"{ids}-{partition}-"),
        options.max_batch_messages,
        options.max_in_flight,
    )
    return WriteResult(partition=partition, rows=rows, batches=count, bytes=size)


def summarize(results: Iterable[WriteResult | None]) -> tuple[int, int, int, int]:
    """(tasks, rows, batches, bytes) over the tasks' commit messages."""
    done = [r for r in results if r is not None]
    return (
        len(done),
        sum(r.rows for r in done),
        sum(r.batches for r in done),
        sum(r.bytes for r in done),
    )


def new_write_id(options: WriteOptions) -> str:
    """The MessageId prefix of one write: the user's, or new for each write."""
    return options.message_id_prefix or uuid.uuid4().hex[:16]
