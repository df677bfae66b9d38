"""The data source's options: parsed and checked once, on the driver, into plain data.

Every problem is one sentence naming the option, raised before any task starts.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..auth import is_connection_string
from ..errors import InvalidArgument
from ..pairing import PairedNamespaceOptions

#: Options every use takes.
COMMON = {"namespace", "entity", "key_name", "key", "operation_timeout_seconds"}
#: Options of writes (batch and streaming).
WRITE = COMMON | {
    "secondary",
    "secondary_key_name",
    "secondary_key",
    "backlog_queue_count",
    "failover_interval_seconds",
    "ping_primary_interval_seconds",
    "max_batch_messages",
    "max_in_flight",
    "message_id_prefix",
}
#: Options of batch reads.
READ = COMMON | {"max_messages", "partitions", "max_wait_seconds", "mode", "sub_queue"}
#: Options of streaming reads.
STREAM_READ = COMMON | {
    "max_messages_per_trigger",
    "max_buffered_messages",
    "partitions",
    "max_wait_seconds",
    "sub_queue",
}
#: The default ``max_buffered_messages`` holds this many micro-batches (at least
#: 100,000 messages): the one Spark has yet to commit, the one it plans, and the one
#: after, received ahead while Spark runs the one it planned.
ROOM_TRIGGERS = 3
#: Options Spark itself may hand a data source, never ours to refuse.
_SPARK_OWN = {"path", "checkpointlocation", "queryname"}


@dataclass(frozen=True)
class Connection:
    """Where to send or receive: picklable, so executors can open their own."""

    namespace: str
    entity: str
    credential: tuple[str, str] | None = None
    secondary: str | None = None
    secondary_credential: tuple[str, str] | None = None
    pairing: PairedNamespaceOptions | None = None
    operation_timeout: float = 60.0

    def connect_options(self) -> dict[str, Any]:
        return {"operation_timeout": self.operation_timeout}


@dataclass(frozen=True)
class WriteOptions:
    connection: Connection
    max_batch_messages: int = 1000
    max_in_flight: int = 4
    message_id_prefix: str | None = None


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    max_messages: int = 1000
    partitions: int = 2
    max_wait: float = 5.0
    mode: str = "complete"
    sub_queue: str | None = None


@dataclass(frozen=True)
class StreamReadOptions:
    connection: Connection
    max_messages_per_trigger: int = 1000
    max_buffered_messages: int = 100_000
    partitions: int = 2
    max_wait: float = 1.0
    sub_queue: str | None = None


class _Reader:
    """Reads options by name, case-insensitively, as Spark hands them over."""

    def __init__(self, options: Mapping[str, str], allowed: set[str], what: str) -> None:
        self.values = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(k for k in self.values if k not in allowed and k not in _SPARK_OWN)
        if unknown:
            raise InvalidArgument(
                f"the aiosb data source does not know the option {unknown[0]!r} for a "
                f"{what}; it takes {', '.join(sorted(allowed))}."
            )

    def text(self, name: str, default: str | None = None, *, required: bool = False) -> Any:
        value = self.values.get(name)
        if value is None or str(value).strip() == "":
            if required:
                raise InvalidArgument(
                    f"the aiosb data source needs the option {name!r} "
                    f'(.option("{name}", ...)).'
                )
            return default
        return str(value).strip()

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise InvalidArgument(
                f"the option {name!r} is {raw!r}; it must be a whole number from {low} "
                f"to {high}."
            )
        return value

    def seconds(self, name: str, default: float, low: float, high: float) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # NaN fails too
            raise InvalidArgument(
                f"the option {name!r} is {raw!r}; it must be a number of seconds from "
                f"{low:g} to {high:g}."
            )
        return value

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        raw = self.text(name, default)
        if raw.lower() not in choices:
            raise InvalidArgument(
                f"the option {name!r} is {raw!r}; it must be one of {', '.join(choices)}."
            )
        return str(raw.lower())

    def credential(self, key_name: str, key: str) -> tuple[str, str] | None:
        name, secret = self.text(key_name), self.text(key)
        if (name is None) != (secret is None):
            given, missing = (key_name, key) if name is not None else (key, key_name)
            raise InvalidArgument(
                f"the option {given!r} is set but {missing!r} is not; give both or neither."
            )
        return None if name is None else (name, secret)

    def connection(self, *, pairing: bool) -> Connection:
        namespace = self.text("namespace", required=True)
        entity = self.text("entity", required=True)
        if not namespace.lower().startswith(("memory://", "http://", "https://", "sb://")) and (
            not is_connection_string(namespace)
        ):
            raise InvalidArgument(
                f"the option 'namespace' is {namespace!r}; give a URL (http://HOST:PORT/NAME "
                "for aiosb serve, https://NAME.servicebus.windows.net, memory://NAME) or a "
                "connection string."
            )
        secondary = self.text("secondary") if pairing else None
        paired_options = None
        if secondary is not None:
            defaults = PairedNamespaceOptions()
            paired_options = PairedNamespaceOptions(
                backlog_queue_count=self.integer(
                    "backlog_queue_count", defaults.backlog_queue_count, 1, 100
                ),
                failover_interval=_dt.timedelta(
                    seconds=self.seconds(
                        "failover_interval_seconds",
                        defaults.failover_interval.total_seconds(),
                        0.0,
                        3600.0,
                    )
                ),
                ping_primary_interval=_dt.timedelta(
                    seconds=self.seconds(
                        "ping_primary_interval_seconds",
                        defaults.ping_primary_interval.total_seconds(),
                        1.0,
                        1800.0,
                    )
                ),
                enable_syphon=False,  # run the syphon in one long-lived process, not per task
            )
        else:
            for name in sorted(WRITE - COMMON):
                if name.startswith(("secondary_", "backlog_", "failover_", "ping_")) and (
                    self.text(name) is not None
                ):
                    raise InvalidArgument(
                        f"the option {name!r} applies to a pairing; set 'secondary' as well."
                    )
        return Connection(
            namespace=namespace,
            entity=entity,
            credential=self.credential("key_name", "key"),
            secondary=secondary,
            secondary_credential=self.credential("secondary_key_name", "secondary_key")
            if secondary
            else None,
            pairing=paired_options,
            operation_timeout=self.seconds("operation_timeout_seconds", 60.0, 0.001, 3600.0),
        )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse a write's options (batch or streaming)."""
    r = _Reader(options, WRITE, "write")
    prefix = r.text("message_id_prefix")
    if prefix is not None and len(prefix) > 64:
        raise InvalidArgument(
            f"the option 'message_id_prefix' is {len(prefix)} characters long; at most 64 "
            "leave room for the row's position within the 128 character MessageId."
        )
    return WriteOptions(
        connection=r.connection(pairing=True),
        max_batch_messages=r.integer("max_batch_messages", 1000, 1, 100_000),
        max_in_flight=r.integer("max_in_flight", 4, 1, 64),
        message_id_prefix=prefix,
    )


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse a batch read's options."""
    r = _Reader(options, READ, "batch read")
    return ReadOptions(
        connection=r.connection(pairing=False),
        max_messages=r.integer("max_messages", 1000, 1, 10_000_000),
        partitions=r.integer("partitions", 2, 1, 1024),
        max_wait=r.seconds("max_wait_seconds", 5.0, 0.0, 3600.0),
        mode=r.choice("mode", "complete", ("complete", "peek")),
        sub_queue=_sub_queue(r),
    )


def stream_read_options(options: Mapping[str, str]) -> StreamReadOptions:
    """Parse a streaming read's options."""
    r = _Reader(options, STREAM_READ, "streaming read")
    per_trigger = r.integer("max_messages_per_trigger", 1000, 1, 10_000_000)
    # Room for three micro-batches: Spark plans the next before it commits the last,
    # and the one after is received ahead meanwhile (S-11, #39).
    buffered = r.integer("max_buffered_messages", max(100_000, ROOM_TRIGGERS * per_trigger),
                         1, 100_000_000)
    if buffered < per_trigger:
        raise InvalidArgument(
            f"the option 'max_buffered_messages' is {buffered}; it must be at least "
            f"'max_messages_per_trigger' ({per_trigger})."
        )
    return StreamReadOptions(
        connection=r.connection(pairing=False),
        max_messages_per_trigger=per_trigger,
        max_buffered_messages=buffered,
        partitions=r.integer("partitions", 2, 1, 1024),
        max_wait=r.seconds("max_wait_seconds", 1.0, 0.0, 600.0),
        sub_queue=_sub_queue(r),
    )


def _sub_queue(r: _Reader) -> str | None:
    value = r.text("sub_queue")
    if value is None:
        return None
    if value.lower() != "deadletter":
        raise InvalidArgument(
            f"the option 'sub_queue' is {value!r}; the only sub-queue is 'deadletter'."
        )
    return "deadletter"
