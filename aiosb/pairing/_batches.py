"""The two kinds of batch the syphon moves (:meth:`.syphon._SyphonPump.send` takes
either): restored messages, and a received batch restored as columns, with no message
object per message (#16); and how a batch is cut into chunks the primary takes.

Imports the vocabulary and :mod:`.rewrite`; the syphon for types only (it imports this
module).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .._clock import CLOCK
from ..message import ReceivedMessage
from ..protocol import ColumnTransport, Settlement, received_from_columns
from .rewrite import restore

if TYPE_CHECKING:
    from .syphon import _SyphonPump

__all__ = ["Columns", "Messages", "chunks", "cut"]


class Messages:
    """A batch of restored messages to send, as :meth:`.syphon._SyphonPump.send` takes it."""

    __slots__ = ("msgs", "pump")

    def __init__(self, pump: _SyphonPump, msgs: list[ReceivedMessage]) -> None:
        self.pump = pump
        self.msgs = msgs

    def __len__(self) -> int:
        return len(self.msgs)

    def messages(self, lo: int, hi: int) -> list[ReceivedMessage]:
        return cut(self.msgs, lo, hi)

    def body_sizes(self) -> list[int]:
        return [len(m.body) for m in self.msgs]

    def send(self, path: str, lo: int, hi: int) -> Awaitable[None]:
        primary = self.pump.hub.primary
        return primary.execute(primary.transport.send, path, self.messages(lo, hi))

    def complete(self, lo: int, hi: int) -> Awaitable[None]:
        return self.pump.receiver.complete(self.messages(lo, hi))

    def locked_until(self, lo: int, hi: int) -> float:
        """When the first lock of messages ``lo`` to ``hi`` ends (UTC seconds)."""
        return min(
            (m.locked_until_timestamp or 0.0 for m in self.messages(lo, hi)), default=0.0
        )

    def ages(self) -> bool:
        """Whether a message has a time to live or a schedule, which waiting changes."""
        return any(
            m.time_to_live is not None or m.scheduled_enqueue_time is not None
            for m in self.msgs
        )


class Columns:
    """A received batch restored as columns (:func:`.rewrite.restore_columns`), to send
    as :meth:`.syphon._SyphonPump.send` takes it, with no message object per message: those are
    made only for messages that cannot be sent (parked or dead-lettered)."""

    __slots__ = ("bodies", "columns", "gives", "made", "pump", "sent")

    def __init__(
        self,
        pump: _SyphonPump,
        gives: ColumnTransport,
        bodies: list[bytes],
        columns: dict[str, Any],
        sent: dict[str, Any],
    ) -> None:
        self.pump, self.gives = pump, gives
        self.bodies, self.columns, self.sent = bodies, columns, sent
        self.made: list[ReceivedMessage] | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    def body_sizes(self) -> list[int]:
        return list(map(len, self.bodies))

    def messages(self, lo: int, hi: int) -> list[ReceivedMessage]:
        """Messages ``lo`` to ``hi``, restored (made once, for the whole batch)."""
        if self.made is None:
            self.made = received_from_columns(self.bodies, self.columns)
            now = CLOCK.now()
            for msg in self.made:
                restore(msg, now)
        return self.made[lo:hi]

    def send(self, path: str, lo: int, hi: int) -> Awaitable[None]:
        primary = self.pump.hub.primary
        return primary.execute(
            self.gives.send_columns, path, cut(self.bodies, lo, hi), _slice(self.sent, lo, hi)
        )

    def complete(self, lo: int, hi: int) -> Awaitable[list[float] | None]:
        pump = self.pump
        settlement = Settlement("complete", cut(self.columns["lock_token"], lo, hi))
        secondary = pump.hub.secondary
        return secondary.execute(secondary.transport.settle, pump.path, settlement)

    def locked_until(self, lo: int, hi: int) -> float:
        """When the first lock of messages ``lo`` to ``hi`` ends (UTC seconds)."""
        column = self.columns.get("locked_until_timestamp")
        if column.__class__ is not list:
            return column or 0.0
        return min((t or 0.0 for t in cut(column, lo, hi)), default=0.0)

    def ages(self) -> bool:
        """Whether a message has a time to live (columns are never scheduled)."""
        ttls = self.sent.get("time_to_live")
        return ttls.__class__ is list or ttls is not None


def chunks(sizes: list[int], most: int, limit: int) -> list[tuple[int, int]]:
    """The ranges to send a batch in: at most ``most`` messages each, and, where the
    bodies alone would pass the primary's ``limit`` in bytes, as many as fit under it
    (one at least): a backlog of large messages is not refused a chunk at a time (#16)."""
    whole = len(sizes)
    if sum(sizes) <= limit:
        return [(i, min(i + most, whole)) for i in range(0, whole, most)]
    out = []
    lo = total = 0
    for i, size in enumerate(sizes):
        if i > lo and (i - lo == most or total + size > limit):
            out.append((lo, i))
            lo, total = i, 0
        total += size
    out.append((lo, whole))
    return out


def cut(values: list[Any], lo: int, hi: int) -> list[Any]:
    return values if hi - lo == len(values) else values[lo:hi]


def _slice(columns: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """Messages ``lo`` to ``hi`` of a batch's columns (a list each, or one value)."""
    return {
        name: cut(column, lo, hi) if column.__class__ is list else column
        for name, column in columns.items()
    }
