"""The columns of the ``aiosb`` data source, derived from the field tables of
:mod:`aiosb.message` (a field added there becomes a column here, or fails the
field-table test until it is given one).

Written columns, one per field of :class:`~aiosb.Message`: the body (``binary`` or
``string``), each text field (``string``), the time to live as ``time_to_live_seconds``
(any number), the scheduled enqueue time (``timestamp``) and ``properties`` (a map with
string keys). Read rows have every field of the message and of the broker's
(:data:`READ_SCHEMA`), but the lock: the data source settles what it reads.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

from ..entities import time_to_live_seconds
from ..errors import InvalidArgument
from ..message import MESSAGE_FIELDS, RECEIVED_FIELDS, ReceivedMessage

__all__ = ["READ_COLUMNS", "READ_SCHEMA", "WRITE_COLUMNS", "WRITE_FIELDS", "to_row"]

_UTC = _dt.UTC
_NUMBERS = ("byte", "short", "integer", "long", "float", "double", "decimal")


def _column_name(field: str, kind: str) -> str:
    if kind == "duration":
        return f"{field}_seconds"
    if kind == "properties":
        return "properties"
    return field


#: The Spark types each kind of field accepts when written.
_WRITE_TYPES: dict[str, tuple[str, ...]] = {
    "bytes": ("binary", "string"),
    "text": ("string",),
    "duration": _NUMBERS,
    "instant": ("timestamp",),
    "properties": ("map",),
    "amqp": ("binary",),
}
#: Columns a written DataFrame may have, and the Spark types each accepts.
WRITE_COLUMNS: dict[str, tuple[str, ...]] = {
    _column_name(field, kind): _WRITE_TYPES[kind] for field, kind in MESSAGE_FIELDS.items()
}
#: Each written column's field and kind.
WRITE_FIELDS: dict[str, tuple[str, str]] = {
    _column_name(field, kind): (field, kind) for field, kind in MESSAGE_FIELDS.items()
}


def written_value(column: str, kind: str, value: Any) -> Any:
    """A written cell as the field's value (``None`` stays ``None``).

    Raises:
        InvalidArgument: A time to live that is not positive, or too long.
    """
    if value is None:
        return None
    if kind == "duration":
        return time_to_live_seconds(column, value)
    if kind == "instant" and value.tzinfo is None:  # Arrow without a zone: UTC
        return value.replace(tzinfo=_UTC)
    if kind == "properties":
        return dict(value) or None
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _instant(ts: float | None) -> _dt.datetime | None:
    return None if ts is None else _dt.datetime.fromtimestamp(ts, _UTC)


def _seconds(delta: _dt.timedelta | None) -> float | None:
    return None if delta is None else delta.total_seconds()


def _as_is(value: Any) -> Any:
    return value


def _properties(props: dict[str, Any]) -> dict[str, str | None]:
    return {k: _text(v) for k, v in props.items()}


#: The read column of each broker field kept in rows, where its name is not the field's:
#: the instants, named as :class:`~aiosb.ReceivedMessage` names their datetimes.
_READ_NAMES = {
    "enqueued_timestamp": "enqueued_time",
    "expires_timestamp": "expires_at",
}
#: Broker fields rows leave out: the data source settles each message it reads.
_NOT_READ = frozenset(("lock_token", "locked_until_timestamp"))
_READ_KINDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "bytes": ("binary", _as_is),
    "text": ("string", _as_is),
    "duration": ("double", _seconds),
    "instant": ("timestamp", _as_is),
    "properties": ("map<string,string>", _properties),
    "amqp": ("binary", _as_is),
    "int": ("bigint", _as_is),
    "seconds": ("timestamp", _instant),
}


def _read_columns() -> list[tuple[str, str, str, Callable[[Any], Any]]]:
    columns = []
    for field, kind in MESSAGE_FIELDS.items():
        ddl, convert = _READ_KINDS[kind]
        columns.append((_column_name(field, kind), ddl, field, convert))
    for field, kind in RECEIVED_FIELDS.items():
        if field in _NOT_READ:
            continue
        ddl, convert = _READ_KINDS[kind]
        columns.append((_READ_NAMES.get(field, field), ddl, field, convert))
    names = [c[0] for c in columns]
    if len(set(names)) != len(names):  # pragma: no cover - a new field's name clashes
        raise InvalidArgument(f"two read columns share a name: {names}.")
    return columns


#: Each read column: its name, its Spark type, the field it shows and how.
READ_COLUMNS = _read_columns()
#: The schema of rows read (DDL).
READ_SCHEMA = ", ".join(f"`{name}` {ddl}" for name, ddl, _, _ in READ_COLUMNS)
_ROW = tuple((field, convert) for _, _, field, convert in READ_COLUMNS)


def to_row(m: ReceivedMessage) -> tuple[Any, ...]:
    """A received message as a row of :data:`READ_SCHEMA` (plain, picklable data): what
    each row of the reads' Arrow batches holds (:func:`aiosb.spark._arrow.to_batch`
    builds them a column at a time; a unit test holds the two to the same rows)."""
    return tuple([convert(getattr(m, field)) for field, convert in _ROW])
