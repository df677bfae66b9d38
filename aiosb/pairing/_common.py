"""What the pairing's actors share: events, counters, entity health entries, tuning
constants, the outage rule and small async helpers.

The sender (:mod:`.sender`), the ping (:mod:`.ping`), the syphon (:mod:`.syphon`) and
the runtime that owns them (:mod:`.runtime`) all import this module; it imports none of
them. It imports the vocabulary (:mod:`aiosb.errors`, :mod:`aiosb.message`,
:mod:`aiosb.entities`, :mod:`aiosb._clock`) and :mod:`.health`; never the emulator.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, fields
from typing import Any, Protocol

from .._clock import CLOCK
from ..entities import NEVER
from ..errors import (
    BacklogUnavailable,
    EntityAlreadyExists,
    EntityNotFound,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessageSizeExceeded,
    MessagingError,
    OperationTimeout,
    ServiceBusError,
    SessionCannotBeLocked,
    SessionLockLost,
    Unauthorized,
)
from .health import HEALTHY, EntityState

__all__ = [
    "BACKLOG_QUEUE_PROPERTIES",
    "MAX_UNREAD_EVENTS",
    "Emit",
    "PairingEvent",
    "PairingStats",
    "is_outage",
    "log",
]

log = logging.getLogger("aiosb.pairing")

#: The properties a backlog queue is created with (PN-7); all others are defaults.
BACKLOG_QUEUE_PROPERTIES: dict[str, Any] = {
    "max_size_in_megabytes": 5120,
    "max_delivery_count": 2**31 - 1,
    "default_message_time_to_live": NEVER,
    "auto_delete_on_idle": NEVER,
    "lock_duration": _dt.timedelta(minutes=1),
    "dead_lettering_on_message_expiration": True,
    "enable_batched_operations": True,
}
#: How many messages a syphon pump receives, sends and completes at a time (#16, by
#: measurement on S-7): over a network each move is three round trips, so a larger batch
#: moves more per trip (HTTP drain ~114k msgs/s at 200, ~130k at 500, ~145k at 1,000,
#: ~148k at 2,000; 1,000 is also the most the syphon keeps parked). In process a move
#: costs CPU per message and a fixed ~50 us a batch, so larger is better until the
#: garbage collector's young generation (700 objects) fills within one batch: a batch
#: moved as columns (:meth:`.syphon._SyphonPump.move_columns`) makes one object per
#: message, the primary's record, so past about 600 every batch triggers a collection
#: that promotes the whole batch (embedded drain ~525k msgs/s at 200, ~610k at 500,
#: ~410k-540k at 1,000).
_SYPHON_BATCH = 1000
_SYPHON_BATCH_IN_PROCESS = 500
_SYPHON_BATCH_REST = 100


def syphon_batch(primary: str, secondary: str) -> int:
    """The syphon's batch for a pairing of namespaces at these URLs: the in-process one
    when both are in this process (``memory://``); :data:`_SYPHON_BATCH_REST` when the
    backlog is read over the Service Bus REST protocol (``https://`` to a namespace: a
    round trip per message received and per message completed, so a large batch would
    hold its first locks for most of their minute); else the network one (aiosb serve's
    batch extension, AMQP), which receives and settles a batch in one round trip."""
    if primary.startswith("memory://") and secondary.startswith("memory://"):
        return _SYPHON_BATCH_IN_PROCESS
    if secondary.lower().startswith("https://"):
        return _SYPHON_BATCH_REST
    return _SYPHON_BATCH


_PARK_LIMIT = 1000
_PARTNER_GRACE = 5.0  # PN-18
_ROUTINE = frozenset({"recovered", "syphon_moved", "backlog_queue_ready"})
# Errors that are the caller's to fix: they never move traffic (PN-6).
_CALLER_ERRORS = (
    MessageSizeExceeded,
    InvalidOperation,
    Unauthorized,
    EntityNotFound,
    EntityAlreadyExists,
    MessageLockLost,
    SessionLockLost,
    SessionCannotBeLocked,
    MessageNotFound,
    BacklogUnavailable,
)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` signals an unavailable entity: a timeout (retries of transient
    errors that ran out included) or a non-transient messaging error that is not the
    caller's own (bad input, credentials, a missing entity). Server-busy and other
    transient errors never count by themselves (PN-6)."""
    if isinstance(exc, OperationTimeout):
        return True
    return isinstance(exc, MessagingError) and not isinstance(exc, _CALLER_ERRORS)


@dataclass(frozen=True, slots=True)
class PairingEvent:
    """One state change of a pairing (G-4); also logged on ``aiosb.pairing``.

    Attributes:
        kind: ``suspect``, ``failover``, ``recovered``, ``ping_failed``,
            ``backlog_queue_ready``, ``backlog_queue_differs``, ``backlog_queue_removed``,
            ``backlog_queue_restored``, ``syphon_moved``, ``syphon_dead_lettered``,
            ``syphon_failed``, ``partner_closed``, ``faulted``; and ``events_missed``
            (``count`` events were dropped because this reader fell behind).
        entity: The entity or backlog queue concerned, if any.
        at: When (UTC, from the loop clock).
        detail: A sentence for people.
        count: Messages concerned, where that applies.
    """

    kind: str
    entity: str | None
    at: _dt.datetime
    detail: str = ""
    count: int = 0


@dataclass(frozen=True, slots=True)
class PairingStats:
    """Counters of a pairing (a snapshot; ``paired.stats`` takes a new one)."""

    primary_sends: int = 0
    """Sends (single or batch) that went to the primary."""
    backlog_sends: int = 0
    """Sends that went to a backlog queue."""
    backlog_messages: int = 0
    """Messages put in backlog queues."""
    failovers: int = 0
    """Entities that failed over."""
    recoveries: int = 0
    """Entities that came back."""
    pings_sent: int = 0
    """Pings sent to unavailable entities."""
    pings_failed: int = 0
    """Pings that failed."""
    backlog_queues_removed: int = 0
    """Times a backlog queue left the rotation."""
    syphon_receives: int = 0
    """Receive calls the syphon made on backlog queues."""
    syphon_moved: int = 0
    """Messages the syphon moved to their primary entity."""
    syphon_dead_lettered: int = 0
    """Backlog messages dead-lettered (expired while waiting, or undeliverable)."""
    syphon_failures: int = 0
    """Failed syphon receives or moves (retried)."""


class _Counters:
    """The live counters behind :class:`PairingStats` (one attribute per field)."""

    __slots__ = tuple(f.name for f in fields(PairingStats))
    # The same names as PairingStats' fields, for the type checker (snapshot() would
    # fail at once on a name that is in one and not the other).
    primary_sends: int
    backlog_sends: int
    backlog_messages: int
    failovers: int
    recoveries: int
    pings_sent: int
    pings_failed: int
    backlog_queues_removed: int
    syphon_receives: int
    syphon_moved: int
    syphon_dead_lettered: int
    syphon_failures: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def snapshot(self) -> PairingStats:
        return PairingStats(**{name: getattr(self, name) for name in self.__slots__})


class _Entry:
    """The shared health of one entity: what every sender of the pairing reads."""

    __slots__ = ("changed", "healthy", "path", "state", "timer")

    def __init__(self, path: str) -> None:
        self.path = path
        self.state: EntityState = HEALTHY
        self.healthy = True  # state.health is HEALTHY, read by every send
        self.timer: asyncio.TimerHandle | None = None
        self.changed = asyncio.Event()  # replaced by a new one at each change of health


class Emit(Protocol):
    """How an actor announces a :class:`PairingEvent` (``PairedNamespace._emit``)."""

    def __call__(self, kind: str, entity: str | None, detail: str, count: int = 0) -> None: ...


async def _quietly(awaitable: Coroutine[Any, Any, Any]) -> None:
    try:
        await awaitable
    except ServiceBusError:
        pass


#: Events one ``events()`` reader may leave unread; past it the oldest are dropped and
#: the reader is told how many (an ``events_missed`` event) when it reads next.
MAX_UNREAD_EVENTS = 10_000


class _Subscriber:
    """One ``events()`` iterator: a bounded queue of events, ended by ``None`` on close."""

    def __init__(self) -> None:
        self._queue: collections.deque[PairingEvent | None] = collections.deque()
        self._ready = asyncio.Event()
        self._missed = 0

    def put(self, event: PairingEvent | None) -> None:
        if event is not None and len(self._queue) >= MAX_UNREAD_EVENTS:
            self._queue.popleft()
            self._missed += 1
        self._queue.append(event)
        self._ready.set()

    def close(self) -> None:
        self.put(None)

    async def iterate(self, registry: list[_Subscriber]) -> AsyncIterator[PairingEvent]:
        try:
            while True:
                while not self._queue:
                    self._ready.clear()
                    await self._ready.wait()
                if self._missed:
                    missed, self._missed = self._missed, 0
                    yield PairingEvent(
                        "events_missed",
                        None,
                        _dt.datetime.fromtimestamp(CLOCK.now(), _dt.UTC),
                        f"{missed} events were dropped: this reader fell more than "
                        f"{MAX_UNREAD_EVENTS} behind.",
                        missed,
                    )
                    continue
                event = self._queue.popleft()
                if event is None:
                    return
                yield event
        finally:
            if self in registry:
                registry.remove(self)


async def _wait_for(awaitable: Coroutine[Any, Any, Any], seconds: float) -> None:
    """Wait for ``awaitable`` at most ``seconds``; a timeout is not an error here."""
    try:
        async with asyncio.timeout(seconds):
            await awaitable
    except TimeoutError:
        pass


async def _first(task: asyncio.Future[Any], wake: asyncio.Event, seconds: float) -> bool:
    """Wait until ``task`` is done, ``wake`` is set or ``seconds`` pass; whether ``task``
    is done (an answer that came in the same instant as the wake is taken).

    ``task`` is never cancelled here: it is a receive, and one whose answer is on its way
    has had its messages locked by the broker; cancelled (over HTTP, its connection
    dropped), it would leave them locked for nobody until their locks end
    (:meth:`.syphon._SyphonPump.poll`).
    """
    if task.done():
        return True
    wake_task = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({task, wake_task}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        wake_task.cancel()
    return task.done()
