"""The pairing runtime: shared entity health, ping actors, backlog rotation, syphon pumps.

Each piece owns its task and its state, and every task belongs to the
:class:`PairedNamespace`'s task group: leaving its context stops all of them.

* **Entity health** (:mod:`.health`): one entry per entity, shared by every sender of
  the pairing; every failure signal (a send error, a timeout, a missed ping, a syphon
  move that failed) goes through :meth:`PairedNamespace._report`.
* **Ping actors**: one per FAILED_OVER entity, alive only while it is (PN-14, PN-15).
* **Backlog rotation**: the backlog queues in use; a queue that fails leaves it for every
  sender (PN-6 step 4, PN-13) and may rejoin after a while.
* **Syphon**: one pump per backlog queue, long-polling (PN-16), moving messages home with
  their properties and remaining time to live restored (PN-17, G-2, G-5).
* **Close and fault coordination** between the two namespaces (PN-18).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import logging
import random
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, fields
from typing import Any

from .._clock import CLOCK
from .._inflight import InFlight
from .._send import SendingLink
from ..client import Namespace
from ..entities import NEVER
from ..errors import (
    BacklogUnavailable,
    ClientClosed,
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
from ..message import PING_CONTENT_TYPE, Message, ReceivedMessage
from .health import HEALTHY, Action, EntityState, Health, Signal, transition
from .options import PairedNamespaceOptions
from .rewrite import restore, to_backlog

__all__ = [
    "BACKLOG_QUEUE_PROPERTIES",
    "PairedNamespace",
    "PairedSender",
    "PairingEvent",
    "PairingStats",
    "is_outage",
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
_SYPHON_BATCH = 100
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
    __slots__ = tuple(f.name for f in fields(PairingStats))

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def snapshot(self) -> PairingStats:
        return PairingStats(**{name: getattr(self, name) for name in self.__slots__})


class _Entry:
    """The shared health of one entity: what every sender of the pairing reads."""

    __slots__ = ("changed", "healthy", "path", "ping_task", "state", "timer")

    def __init__(self, path: str) -> None:
        self.path = path
        self.state: EntityState = HEALTHY
        self.healthy = True  # state.health is HEALTHY, read by every send
        self.timer: asyncio.TimerHandle | None = None
        self.ping_task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()


class _Rotation:
    """The backlog queues in use, shared by every sender of a pairing (PN-6, PN-13)."""

    def __init__(self, paths: list[str], rejoin_after: float) -> None:
        self.paths = paths
        self.removed: dict[str, float] = {}  # path -> when it may rejoin
        self.rejoin_after = rejoin_after

    def active(self, now: float) -> list[str]:
        for path, when in list(self.removed.items()):
            if when <= now:
                del self.removed[path]
        return [p for p in self.paths if p not in self.removed]

    def usable(self, path: str) -> bool:
        return path not in self.removed

    def pick(self, now: float, exclude: set[str]) -> str | None:
        """A random queue in rotation, else (last resort) a removed one, not in ``exclude``."""
        choices = [p for p in self.active(now) if p not in exclude]
        if not choices:
            choices = [p for p in self.removed if p not in exclude]
        return random.choice(choices) if choices else None

    def fail(self, path: str, now: float) -> bool:
        """Take ``path`` out; return whether it was in."""
        was_in = path not in self.removed
        self.removed[path] = now + self.rejoin_after
        return was_in

    def restore(self, path: str) -> bool:
        return self.removed.pop(path, None) is not None


class PairedNamespace:
    """A primary namespace paired with a secondary for send availability.

    Made by :meth:`aiosb.Namespace.pair`; an async context manager. Entering creates (or
    finds) the backlog queues and starts the syphon if enabled; leaving stops every task
    the pairing started.

    Attributes:
        primary: The primary namespace.
        secondary: The secondary namespace, home of the backlog queues.
        options: The :class:`PairedNamespaceOptions` in force.
    """

    def __init__(
        self, primary: Namespace, secondary: Namespace, options: PairedNamespaceOptions
    ) -> None:
        if not isinstance(options, PairedNamespaceOptions):
            raise InvalidOperation(f"options must be PairedNamespaceOptions, not {options!r}.")
        self.primary = primary
        self.secondary = secondary
        self.options = options
        self._interval = options.failover_interval.total_seconds()
        self._entries: dict[str, _Entry] = {}
        self._counters = _Counters()
        self._rotation = _Rotation([], options.ping_primary_interval.total_seconds())
        self._tasks: set[asyncio.Task[Any]] = set()
        self._running = False  # tasks may be started (between open and aclose)
        self._subscribers: list[_Subscriber] = []
        self._senders: set[PairedSender] = set()
        self._state = "new"
        self._wake_syphon = asyncio.Event()
        self._partner_timer: asyncio.TimerHandle | None = None
        self._inflight = InFlight()

    def __repr__(self) -> str:
        down = [e.path for e in self._entries.values() if e.state.health is not Health.HEALTHY]
        return (
            f"<PairedNamespace {self.primary.name}->{self.secondary.name} {self._state} "
            f"backlog={len(self.backlog_queues)} unhealthy={down}>"
        )

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> PairedNamespace:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Create or find the backlog queues (PN-1, PN-7, PN-8), start the syphon."""
        if self._state != "new":
            raise ClientClosed("a PairedNamespace opens once; pair again for a new one.")
        self._state = "opening"
        self._running = True
        try:
            self._rotation.paths = await self._backlog_queues()
            if self.options.enable_syphon:
                for path in self._rotation.paths:
                    self._spawn(self._syphon(path), f"syphon {path}")
                self.primary.on_close(self._partner_closed)
                self.secondary.on_close(self._partner_closed)
        except BaseException:
            await self.aclose()
            raise
        self._state = "open"

    async def aclose(self) -> None:
        """Stop every ping actor and syphon pump and close the senders (idempotent)."""
        if self._state == "closed":
            return
        self._state = "closed"
        self._inflight.close("the pairing was closed")
        for entry in self._entries.values():
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
            entry.ping_task = None
        if self._partner_timer is not None:
            self._partner_timer.cancel()
        self._running = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for sender in list(self._senders):
            await sender.aclose()
        if tasks:
            await asyncio.wait(tasks)
        for subscriber in self._subscribers:
            subscriber.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Start a task the pairing owns: cancelled and awaited by :meth:`aclose`.

        The pairing keeps its own set rather than a TaskGroup entered in ``open()``: a
        group's parent would be the caller's task, which a failing child would cancel.
        Every actor handles its own errors; one that escapes is logged, not spread.
        """
        if not self._running:
            coro.close()
            raise ClientClosed("the pairing is closed.")
        task = asyncio.get_running_loop().create_task(coro, name=f"aiosb {name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "%s stopped: %r", task.get_name(), task.exception(), exc_info=task.exception()
            )

    def _check_open(self) -> None:
        if self._state != "open":
            raise ClientClosed(f"the pairing is {self._state}; use 'async with primary.pair(...)'.")

    # -- public surface ------------------------------------------------------------------

    @property
    def backlog_queues(self) -> list[str]:
        """The backlog queue paths in rotation now."""
        return self._rotation.active(CLOCK.now()) if self._running else list(self._rotation.paths)

    @property
    def stats(self) -> PairingStats:
        """A snapshot of the counters."""
        return self._counters.snapshot()

    def sender(self, entity: str) -> PairedSender:
        """A sender for ``entity`` that fails over to the backlog queues (PN-2, PN-9)."""
        self._check_open()
        return PairedSender(self, entity)

    def is_available(self, entity: str) -> bool:
        """Whether sends to ``entity`` go to the primary (it has not failed over)."""
        return self._entry(entity).state.health is not Health.FAILED_OVER

    def health(self, entity: str) -> Health:
        """The entity's :class:`~aiosb.pairing.Health`."""
        return self._entry(entity).state.health

    def mark_healthy(self, entity: str) -> None:
        """Declare ``entity`` healthy by hand: sends go to the primary at once."""
        self._report(self._entry(entity), Signal.MARK_HEALTHY)

    def events(self) -> AsyncIterator[PairingEvent]:
        """An async iterator of every state change from now on; it ends on close."""
        subscriber = _Subscriber()
        if self._state == "closed":
            subscriber.close()
        else:
            self._subscribers.append(subscriber)
        return subscriber.iterate(self._subscribers)

    # -- health: the one entry point -----------------------------------------------------

    def _entry(self, entity: str) -> _Entry:
        key = entity.lower()
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(entity)
        return entry

    def _report(self, entry: _Entry, signal: Signal, now: float | None = None) -> None:
        """Every health signal of every entity comes through here (style lesson 5)."""
        if now is None:
            now = CLOCK.now()
        old = entry.state
        new, actions = transition(old, signal, now, self._interval)
        entry.state = new
        entry.healthy = new.health is Health.HEALTHY
        for action in actions:
            if action is Action.START_TIMER:
                if self._running:
                    loop = asyncio.get_running_loop()
                    entry.timer = loop.call_later(self._interval, self._interval_elapsed, entry)
            elif action is Action.CANCEL_TIMER:
                if entry.timer is not None:
                    entry.timer.cancel()
                    entry.timer = None
            elif action is Action.START_PING:
                if self._running:
                    entry.ping_task = self._spawn(self._ping(entry), f"ping {entry.path}")
            elif action is Action.STOP_PING:
                task, entry.ping_task = entry.ping_task, None
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
        if new.health is not old.health:
            self._health_changed(entry, old.health, new.health, signal)

    def _interval_elapsed(self, entry: _Entry) -> None:
        entry.timer = None
        since = entry.state.suspect_since
        now = CLOCK.now()
        if since is not None:  # the timer fired at its instant; float rounding aside
            now = max(now, since + self._interval)
        self._report(entry, Signal.INTERVAL_ELAPSED, now)

    def _health_changed(self, entry: _Entry, old: Health, new: Health, signal: Signal) -> None:
        counters = self._counters
        if new is Health.FAILED_OVER:
            counters.failovers += 1
            self._emit("failover", entry.path, "sends now go to the backlog queues")
        elif new is Health.SUSPECT:
            self._emit("suspect", entry.path, f"a send failed; failover in {self._interval:g} s")
        elif old is Health.FAILED_OVER:
            counters.recoveries += 1
            self._emit("recovered", entry.path, f"sends go to the primary again ({signal.value})")
        if new is Health.HEALTHY:  # parked backlog messages for it can move now
            self._wake_syphon.set()
            self._wake_syphon = asyncio.Event()
        changed, entry.changed = entry.changed, asyncio.Event()
        changed.set()

    def _emit(self, kind: str, entity: str | None, detail: str, count: int = 0) -> None:
        event = PairingEvent(
            kind, entity, _dt.datetime.fromtimestamp(CLOCK.now(), _dt.UTC), detail, count
        )
        level = logging.INFO if kind in _ROUTINE else logging.WARNING
        log.log(level, "%s %s: %s", kind, entity or "-", detail)
        for subscriber in self._subscribers:
            subscriber.put(event)

    # -- backlog queues --------------------------------------------------------------------

    async def _backlog_queues(self) -> list[str]:
        """Find or create each backlog queue; a queue found with other properties is
        used as it is (PN-8)."""
        paths = []
        for index in range(self.options.backlog_queue_count):
            path = f"{self.primary.name}/x-servicebus-transfer/{index}"
            try:
                try:
                    found = await self.secondary.get_queue(path)
                except EntityNotFound:
                    try:
                        await self.secondary.create_queue(path, **BACKLOG_QUEUE_PROPERTIES)
                    except EntityAlreadyExists:  # another process made it meanwhile
                        pass
                    self._emit("backlog_queue_ready", path, "created")
                else:
                    differs = [
                        name
                        for name, value in BACKLOG_QUEUE_PROPERTIES.items()
                        if getattr(found, name) != value
                    ]
                    if differs:
                        self._emit(
                            "backlog_queue_differs",
                            path,
                            f"exists with other {', '.join(differs)}; used as it is",
                        )
            except ServiceBusError as exc:
                if not is_outage(exc):
                    raise
                # The secondary is down now: keep the queue; a failed send removes it.
                self._emit("backlog_queue_removed", path, f"could not be checked: {exc.message}")
            paths.append(path)
        return paths

    # -- ping actor --------------------------------------------------------------------------

    async def _ping(self, entry: _Entry) -> None:
        """Ping ``entry`` every ping interval until a ping is delivered (PN-3, PN-14)."""
        interval = self.options.ping_primary_interval.total_seconds()
        timeout = self.options.ping_timeout.total_seconds()
        primary = self.primary
        while entry.ping_task is asyncio.current_task():
            await asyncio.sleep(interval)
            ping = Message(
                b"",
                content_type=PING_CONTENT_TYPE,
                time_to_live=_dt.timedelta(seconds=1),
                session_id=uuid.uuid4().hex,
            )
            self._counters.pings_sent += 1
            try:
                await primary.execute(primary.transport.send, entry.path, [ping], timeout=timeout)
            except Exception as exc:  # an actor never dies of a failed ping
                if not isinstance(exc, ServiceBusError):
                    log.exception("ping of %s failed unexpectedly", entry.path)
                    exc = ServiceBusError(repr(exc))
                self._counters.pings_failed += 1
                self._emit("ping_failed", entry.path, str(exc))
                self._report(entry, Signal.PING_FAILED)
                if isinstance(exc, ClientClosed):
                    return
                continue
            self._report(entry, Signal.PING_OK)
            return

    # -- failure and success signals from senders and the syphon --------------------------------

    def _failed(self, entry: _Entry, exc: ServiceBusError) -> None:
        log.debug("send to %s failed: %s", entry.path, exc)
        self._report(entry, Signal.SEND_FAILED)

    def _succeeded(self, entry: _Entry) -> None:
        if entry.state.health is not Health.HEALTHY:
            self._report(entry, Signal.SEND_OK)

    # -- syphon (PN-16, PN-17, G-2, G-3, G-5) ----------------------------------------------------

    async def _syphon(self, path: str) -> None:
        """One pump per backlog queue; see :class:`_SyphonPump`."""
        await _SyphonPump(self, path).run()

    async def _ensure_backlog_queue(self, path: str) -> None:
        """Create a backlog queue that turned out to be missing (PN-8: only if missing)."""
        try:
            await self.secondary.create_queue(path, **BACKLOG_QUEUE_PROPERTIES)
        except EntityAlreadyExists:
            return
        self._emit("backlog_queue_ready", path, "created (it was missing)")

    # -- close and fault coordination (PN-18) ------------------------------------------------

    def _partner_closed(self, namespace: Namespace) -> None:
        if self._state != "open":
            return
        other = self.secondary if namespace is self.primary else self.primary
        self._emit("partner_closed", namespace.name, f"{other.name} must close within 5 s")
        if other.closed or self._state == "closed":
            return
        loop = asyncio.get_running_loop()
        self._partner_timer = loop.call_later(_PARTNER_GRACE, self._fault_partner, other, namespace)

    def _fault_partner(self, other: Namespace, closed: Namespace) -> None:
        self._partner_timer = None
        if other.closed or not self._running:
            return
        reason = f"its paired namespace {closed.name!r} closed and it stayed open (PN-18)"
        self._emit("faulted", other.name, reason)
        self._spawn(other.fault(reason), f"fault {other.name}")


class PairedSender(SendingLink):
    """A sender that goes to the primary while it works and to the backlog when it
    does not (PN-9, PN-10, G-1). Safe under many concurrent ``send`` calls.

    While the entity is healthy a send is exactly a plain send (S-2). A send that
    fails with a non-transient error or a timeout starts the failover timer; until
    failover engages it waits with backoff and tries again, then goes to the backlog.
    It raises :class:`~aiosb.errors.BacklogUnavailable` only when the primary and every
    backlog queue are down; a batch goes to one place as one batch.
    """

    def __init__(self, paired: PairedNamespace, entity: str) -> None:
        super().__init__(entity)
        self.paired = paired
        self._entry = paired._entry(entity)
        self._backlog = paired._rotation.pick(CLOCK.now(), set())  # PN-13: random, per sender
        paired._senders.add(self)

    def __repr__(self) -> str:
        return (
            f"<PairedSender {self.entity} {self._entry.state.health.value} backlog={self._backlog}>"
        )

    async def aclose(self) -> None:
        """Close the sender (idempotent)."""
        self._closed = True
        self.paired._senders.discard(self)

    async def _send_now(self, messages: list[Message], transaction: bool = False) -> None:
        entry = self._entry
        if entry.healthy:  # S-2: the healthy path is a plain send, as deep as Sender's
            try:
                await self._send_primary(messages, transaction)
            except ServiceBusError as exc:
                if not is_outage(exc):
                    raise
                self.paired._failed(entry, exc)
            else:
                self.paired._counters.primary_sends += 1
                return
            await self._send_slowly(messages, 1, transaction)
        else:
            await self._send_slowly(messages, 0, transaction)

    async def _send_slowly(self, messages: list[Message], attempt: int, transaction: bool) -> None:
        """The degraded path, which closing the pairing ends with ClientClosed (the
        healthy path's one call is tracked by the namespace's ``execute``)."""
        inflight = self.paired._inflight
        task = asyncio.current_task()
        inflight.enter(task)
        try:
            await self._send_degraded(messages, attempt, transaction)
        except asyncio.CancelledError:
            error = inflight.closed_error(task)
            if error is not None:
                raise error from None
            raise
        finally:
            inflight.exit(task)

    def _send_primary(
        self, messages: list[Message], transaction: bool
    ) -> Coroutine[Any, Any, None]:
        """The one primary send of both paths: exactly what a plain Sender does."""
        primary = self.paired.primary
        link = self.paired._inflight
        if transaction:
            return primary.execute(
                primary.transport.send, self.entity, messages, transaction=True, link=link
            )
        return primary.execute(primary.transport.send, self.entity, messages, link=link)

    async def _send_degraded(
        self, messages: list[Message], attempt: int, transaction: bool = False
    ) -> None:
        """The slow path: retry the primary with backoff until failover engages (G-1)."""
        paired, entry = self.paired, self._entry
        primary = paired.primary
        while True:
            if entry.state.health is Health.FAILED_OVER:
                await self._send_backlog(messages)
                return
            if attempt:
                delay = primary.retry_delay(attempt)
                await _wait_for(entry.changed.wait(), delay)
                if entry.state.health is Health.FAILED_OVER:
                    continue
            attempt += 1
            try:
                await self._send_primary(messages, transaction)
            except ServiceBusError as exc:
                if not is_outage(exc):
                    raise
                paired._failed(entry, exc)
                continue
            paired._succeeded(entry)
            paired._counters.primary_sends += 1
            return

    async def _send_backlog(self, messages: list[Message]) -> None:
        """Send the rewritten batch to this sender's backlog queue, rotating on failure."""
        paired = self.paired
        secondary = paired.secondary
        rotation = paired._rotation
        now = CLOCK.now()
        limit = secondary.transport.max_message_size
        copies = [to_backlog(m, self.entity, now, limit) for m in messages]
        total = sum(c.size for c in copies) if len(copies) > 1 else 0
        if total > limit:
            raise MessageSizeExceeded(
                f"A batch of {len(copies)} messages for {self.entity!r} is "
                f"{total} bytes once rewritten for the backlog, over "
                f"the {limit} byte limit (PN-12); send smaller batches."
            )
        tried: set[str] = set()
        last: ServiceBusError | None = None
        while True:
            path = self._backlog
            if path is None or path in tried or not rotation.usable(path):
                path = self._backlog = rotation.pick(CLOCK.now(), tried)
            if path is None:
                raise BacklogUnavailable(
                    f"{self.entity!r} is unavailable in {paired.primary.name!r} and all "
                    f"{len(rotation.paths)} backlog queues in {secondary.name!r} failed"
                    + (f" (last: {last.message})" if last else "")
                    + "; the message was not sent."
                ) from last
            try:
                try:
                    await secondary.execute(secondary.transport.send, path, copies)
                except EntityNotFound:  # not created at open (the secondary was down)
                    await paired._ensure_backlog_queue(path)
                    await secondary.execute(secondary.transport.send, path, copies)
            except ServiceBusError as exc:
                if isinstance(exc, (MessageSizeExceeded, ClientClosed)):
                    raise
                last = exc
                tried.add(path)
                if rotation.fail(path, CLOCK.now()):
                    paired._counters.backlog_queues_removed += 1
                    paired._emit("backlog_queue_removed", path, exc.message)
                continue
            if rotation.restore(path):
                paired._emit("backlog_queue_restored", path, "a send succeeded")
            paired._counters.backlog_sends += 1
            paired._counters.backlog_messages += len(copies)
            return


class _SyphonPump:
    """Moves one backlog queue's messages home, for as long as the pairing is open.

    It long-polls (PN-16), sends each entity's messages to the primary and only then
    completes them (PN-17). Messages for an entity that is not healthy are parked:
    kept locked (their locks renewed at half-life) rather than abandoned, so their
    delivery counts do not climb (PN-17). A failed move is retried after the syphon
    retry interval while the entity is only suspect, and waits for recovery once it has
    failed over.
    """

    def __init__(self, paired: PairedNamespace, path: str) -> None:
        self.paired = paired
        self.path = path
        self.receiver = paired.secondary.receiver(path)
        self.parked: dict[_Entry, list[ReceivedMessage]] = {}
        self.retry_at: dict[_Entry, float] = {}
        options = paired.options
        self.wait = options.syphon_receive_wait.total_seconds()
        self.retry = options.syphon_retry_interval.total_seconds()
        self.lock = BACKLOG_QUEUE_PROPERTIES["lock_duration"].total_seconds()

    async def run(self) -> None:
        paired, counters = self.paired, self.paired._counters
        try:
            try:  # PN-8: a queue found with another lock duration is used as it is
                found = await paired.secondary.get_queue(self.path)
                self.lock = found.lock_duration.total_seconds()
            except ServiceBusError:
                pass
            while True:
                try:
                    await self.step()
                except ClientClosed:
                    return
                except ServiceBusError as exc:
                    counters.syphon_failures += 1
                    paired._emit("syphon_failed", self.path, exc.message)
                    if isinstance(exc, EntityNotFound):
                        await _quietly(paired._ensure_backlog_queue(self.path))
                    await asyncio.sleep(self.retry)
                except Exception as exc:  # the pump outlives a bug's blast
                    log.exception("syphon of %s failed unexpectedly", self.path)
                    counters.syphon_failures += 1
                    paired._emit("syphon_failed", self.path, repr(exc))
                    await asyncio.sleep(self.retry)
        finally:
            await self.receiver.aclose()

    async def step(self) -> None:
        """Move what may move, then receive (or wait) once."""
        wake = self.paired._wake_syphon  # taken first: a recovery from here on wakes us
        await self.unpark()
        budget = self.budget()
        if sum(len(v) for v in self.parked.values()) >= _PARK_LIMIT:
            await _wait_for(wake.wait(), budget)
            return
        batch = await _race(
            self.receiver.receive(max_messages=_SYPHON_BATCH, max_wait=budget), wake
        )
        if batch is None:  # an entity recovered: move what is parked
            return
        self.paired._counters.syphon_receives += 1
        if batch:
            await self.move(batch)

    def movable(self, entry: _Entry, now: float) -> bool:
        """Healthy; or suspect with its retry due (a failed move retries, PN-16)."""
        health = entry.state.health
        if health is Health.HEALTHY:
            return True
        return health is Health.SUSPECT and self.retry_at.get(entry, 0.0) <= now

    def budget(self) -> float:
        """How long to wait now: until a parked lock needs renewing or a retry is due."""
        if not self.parked:
            return self.wait
        now = CLOCK.now()
        first_lock = min(
            m.locked_until_timestamp or now for msgs in self.parked.values() for m in msgs
        )
        until = min(self.wait, first_lock - now - self.lock / 2)
        for entry in self.parked:
            if entry in self.retry_at and entry.state.health is Health.SUSPECT:
                until = min(until, self.retry_at[entry] - now)
        return max(until, 0.0)

    async def unpark(self) -> None:
        """Move parked messages whose entity may take them; renew the others' locks."""
        now = CLOCK.now()
        for entry, msgs in list(self.parked.items()):
            if self.movable(entry, now):
                del self.parked[entry]
                await self.move_group(entry, msgs)
        now = CLOCK.now()
        for entry, msgs in list(self.parked.items()):
            kept = []
            for msg in msgs:
                if (msg.locked_until_timestamp or now) - now <= self.lock / 2:
                    try:
                        await self.receiver.renew_lock(msg)
                    except ServiceBusError:
                        continue  # the lock is gone: the message comes back by itself
                kept.append(msg)
            if kept:
                self.parked[entry] = kept
            else:
                del self.parked[entry]

    async def move(self, batch: list[ReceivedMessage]) -> None:
        """Group a received batch by destination; move or park each group."""
        groups: dict[_Entry, list[ReceivedMessage]] = collections.defaultdict(list)
        for msg in batch:
            entity = msg.application_properties.get("x-ms-path")
            if not isinstance(entity, str) or not entity:
                await self.dead_letter([msg], "NoBacklogPath", "it has no x-ms-path property")
                continue
            groups[self.paired._entry(entity)].append(msg)
        now = CLOCK.now()
        for entry, msgs in groups.items():
            if entry in self.parked or not self.movable(entry, now):
                self.parked.setdefault(entry, []).extend(msgs)  # PN-17: not while unavailable
            else:
                await self.move_group(entry, msgs)

    async def move_group(self, entry: _Entry, msgs: list[ReceivedMessage]) -> None:
        """Send ``msgs`` to ``entry``'s primary entity, then complete them in the backlog.

        On an outage the rest of the group is parked at once: nothing more is sent to an
        entity that just failed (PN-17).
        """
        paired = self.paired
        now = CLOCK.now()
        ready: list[tuple[ReceivedMessage, Message]] = []
        expired: list[ReceivedMessage] = []
        malformed: list[ReceivedMessage] = []
        for msg in msgs:
            restored = restore(msg, now)
            if restored.entity is None:
                malformed.append(msg)
            elif restored.message is None:
                expired.append(msg)
            else:
                ready.append((msg, restored.message))
        if malformed:
            await self.dead_letter(
                malformed, "MalformedBacklogMessage", "its x-ms-* properties are invalid"
            )
        if expired:
            await self.dead_letter(
                expired, "TTLExpiredException", "it expired while it waited in the backlog (G-2)"
            )
        primary = paired.primary
        # Groups are at most a syphon batch; one too large as a whole is split in two.
        pending = [ready[i : i + _SYPHON_BATCH] for i in range(0, len(ready), _SYPHON_BATCH)]
        while pending:
            chunk = pending.pop(0)
            try:
                await primary.execute(primary.transport.send, entry.path, [m for _, m in chunk])
            except ServiceBusError as exc:
                if isinstance(exc, ClientClosed):
                    raise
                if isinstance(exc, MessageSizeExceeded) and len(chunk) > 1:
                    half = len(chunk) // 2
                    pending[:0] = [chunk[:half], chunk[half:]]
                    continue
                paired._counters.syphon_failures += 1
                if is_outage(exc):
                    paired._failed(entry, exc)
                    rest = [m for c in [chunk, *pending] for m, _ in c]
                    self.parked.setdefault(entry, []).extend(rest)
                    self.retry_at[entry] = CLOCK.now() + self.retry
                    paired._emit("syphon_failed", entry.path, f"move failed, parked: {exc.message}")
                    return
                # Retrying cannot help: surface it where people look.
                await self.dead_letter([m for m, _ in chunk], type(exc).__name__, exc.message)
                continue
            self.retry_at.pop(entry, None)
            paired._succeeded(entry)
            try:
                await self.receiver.complete([m for m, _ in chunk])
            except ServiceBusError as exc:
                # Sent but not completed: it will be moved again; the MessageId lets a
                # primary with duplicate detection drop the copy (G-3).
                paired._emit(
                    "syphon_failed", entry.path, f"complete failed: {exc.message}", len(chunk)
                )
            paired._counters.syphon_moved += len(chunk)
            paired._emit("syphon_moved", entry.path, f"moved {len(chunk)} messages", len(chunk))

    async def dead_letter(self, msgs: list[ReceivedMessage], reason: str, description: str) -> None:
        """Dead-letter backlog messages that cannot be moved, with a reason."""
        paired = self.paired
        done = 0
        for msg in msgs:
            try:
                await self.receiver.dead_letter(msg, reason, description)
            except ServiceBusError as exc:
                paired._emit("syphon_failed", self.path, f"dead-letter failed: {exc.message}")
                continue
            done += 1
        paired._counters.syphon_dead_lettered += done
        paired._emit("syphon_dead_lettered", self.path, f"{reason}: {description}", done)


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


async def _race(receive: Coroutine[Any, Any, list[ReceivedMessage]], wake: asyncio.Event):
    """The receive's result, or ``None`` if ``wake`` is set first (receive cancelled).

    Whatever happens, the receive does not outlive this call: a leftover long poll
    would lock backlog messages nobody will move. A receive that finished in the same
    instant as the wake still hands its messages over.
    """
    receive_task = asyncio.ensure_future(receive)
    wake_task = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({receive_task, wake_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (receive_task, wake_task):
            if not task.done():
                task.cancel()
        await asyncio.wait({receive_task, wake_task})
    if receive_task.cancelled():
        return None
    return receive_task.result()
