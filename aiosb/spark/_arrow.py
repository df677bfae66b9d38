"""Received messages as Arrow record batches of :data:`~aiosb.spark.READ_SCHEMA` (#39).

A read hands Spark ``pyarrow.RecordBatch`` objects rather than a Python tuple per row:
Spark takes a batch as it is, where it converts each tuple's cells one by one (a
converter call per cell), and a batch is built here from the columns a receive gives
(:meth:`aiosb.protocol.ColumnTransport.receive_columns`: by field name a list with each
message's value, or one value all share) a column at a time, with no object per message.
The cells are those :func:`aiosb.spark._columns.to_row` gives (a unit test holds the two
to the same rows).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..message import MESSAGE_FIELDS, RECEIVED_FIELDS, ReceivedMessage
from ._columns import READ_COLUMNS, _text

__all__ = ["Packed", "arrow_schema", "message_columns", "pack", "to_batch"]

#: Each field's kind (``bytes``, ``text``, ``seconds``, ...).
_KINDS = {**MESSAGE_FIELDS, **RECEIVED_FIELDS}
#: A field a batch's columns leave out has its default.
_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(ReceivedMessage)
}


@functools.cache
def arrow_schema() -> pa.Schema:
    """:data:`.READ_SCHEMA` as Spark's own Arrow schema (which it checks batches against)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        BinaryType,
        DataType,
        DoubleType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    types: dict[str, DataType] = {
        "binary": BinaryType(),
        "string": StringType(),
        "double": DoubleType(),
        "bigint": LongType(),
        "timestamp": TimestampType(),
        "map<string,string>": MapType(StringType(), StringType()),
    }
    struct = StructType([StructField(name, types[ddl]) for name, ddl, _, _ in READ_COLUMNS])
    return to_arrow_schema(struct, timezone="UTC")


def message_columns(
    messages: list[ReceivedMessage],
) -> tuple[list[bytes], dict[str, list[Any]]]:
    """Messages as the bodies and the columns of their fields (what a transport without
    ``receive_columns`` gives, and what a peek gives)."""
    return [m.body for m in messages], {
        field: [getattr(m, field) for m in messages] for field in _KINDS if field != "body"
    }


def to_batch(bodies: list[bytes], columns: Mapping[str, Any]) -> pa.RecordBatch:
    """One record batch of :data:`.READ_SCHEMA` with a row per body."""
    schema = arrow_schema()
    n = len(bodies)
    arrays = []
    for i, (_, _, field, _) in enumerate(READ_COLUMNS):
        values = bodies if field == "body" else columns.get(field, _DEFAULTS.get(field))
        arrays.append(_array(_KINDS[field], values, n, schema.field(i).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _array(kind: str, values: Any, n: int, type_: pa.DataType) -> pa.Array:
    if type(values) is not list:  # one value every message has
        if values is None and kind != "properties":
            return pa.nulls(n, type_)
        values = [values] * n
    if kind == "properties":  # never null: a message without properties has an empty map
        if not any(values):
            offsets = pa.array([0] * (n + 1), pa.int32())
            empty = pa.array([], pa.string())
            return pa.MapArray.from_arrays(offsets, empty, empty, type=type_)
        return pa.array(
            [[(k, _text(v)) for k, v in props.items()] if props else [] for props in values],
            type_,
        )
    if values.count(None) == n:
        return pa.nulls(n, type_)
    if kind == "duration":
        return pa.array([None if v is None else v.total_seconds() for v in values], type_)
    if kind == "seconds":  # UTC epoch seconds, to the microsecond as datetime rounds them
        # As datetime.fromtimestamp: whole seconds, then the exact fraction rounded half
        # to even (seconds * 1e6 in float64 loses the last microsecond near 1.8e15).
        stamps = pa.array(values, pa.float64())
        whole = pc.floor(stamps)
        fraction = pc.round(pc.multiply(pc.subtract(stamps, whole), 1e6),
                            round_mode="half_to_even")
        micros = pc.add(pc.multiply(pc.cast(whole, pa.int64()), 1_000_000),
                        pc.cast(fraction, pa.int64()))
        return pc.cast(micros, type_)
    return pa.array(values, type_)


class Packed:
    """A record batch of :data:`.READ_SCHEMA` as a streaming read's partition carries it to
    an executor (#39): the columns whose rows differ as they are, and of each column
    every row shares (all null, an empty map each, or one value) only that value, which
    :meth:`batch` spreads back over the rows. Most of a message's fields are unused or
    alike (a session, a subject, the state, the entity, ...): a micro-batch of 50,000
    rows went to the executors as 11.4 MB of pickled Arrow, each copied through the
    JVM's task, where the columns that differ are about half of it. The body is always
    carried as it is (payloads differ; a constant one is no case to save on)."""

    __slots__ = ("arrays", "rows", "same")

    def __init__(self, rows: int, arrays: dict[int, pa.Array], same: dict[int, Any]) -> None:
        self.rows = rows
        self.arrays = arrays  # column index: its rows
        self.same = same  # column index: what every row holds (a length-1 array; None: null)

    def batch(self) -> pa.RecordBatch:
        """The record batch, every row of every column."""
        schema = arrow_schema()
        arrays = []
        for i, field in enumerate(schema):
            if i in self.arrays:
                arrays.append(self.arrays[i])
                continue
            value = self.same[i]
            if value is None:
                arrays.append(pa.nulls(self.rows, field.type))
            elif isinstance(value, str):  # _EMPTY
                arrays.append(_empty_maps(self.rows, field.type))
            else:
                arrays.append(pa.repeat(value[0], self.rows))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


#: What every row of a map column holds when each is empty.
_EMPTY = "empty map"


def _empty_maps(n: int, type_: pa.DataType) -> pa.Array:
    empty = pa.array([], pa.string())
    return pa.MapArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), empty, empty,
                                   type=type_)


def pack(batch: pa.RecordBatch) -> Packed:
    """``batch`` (of :data:`.READ_SCHEMA`, its own buffers, not a slice of a larger one's)
    as a :class:`Packed`."""
    n = batch.num_rows
    arrays: dict[int, pa.Array] = {}
    same: dict[int, Any] = {}
    for i, (name, column) in enumerate(zip(batch.schema.names, batch.columns, strict=True)):
        if n and column.null_count == n:
            same[i] = None
        elif name == "body" or not n or column.null_count:
            arrays[i] = column
        elif pa.types.is_map(column.type):
            if column.offsets[0] == column.offsets[-1]:
                same[i] = _EMPTY
            else:
                arrays[i] = column
        else:
            low, high = pc.min_max(column).values()
            if low == high:
                same[i] = column.take([0])  # a copy: a slice pickles its whole buffers
            else:
                arrays[i] = column
    return Packed(n, arrays, same)
