"""The pairing runtime: :class:`PairedNamespace` owns and supervises the actors of a
pairing, and keeps the one entity-health state they all read.

* **Entity health** (:mod:`.health`): one entry per entity, shared by every sender of
  the pairing; every failure signal (a send error, a timeout, a missed ping, a syphon
  move that failed) goes through :meth:`PairedNamespace._report`.
* **Paired senders and the backlog rotation** (:mod:`.sender`): a queue that fails
  leaves the rotation for every sender (PN-6 step 4, PN-13) and may rejoin after a while.
* **Ping actors** (:mod:`.ping`): one per FAILED_OVER entity, alive only while it is
  (PN-14, PN-15); they report each ping's outcome through a callback.
* **Syphon** (:mod:`.syphon`): one pump per backlog queue, long-polling (PN-16), moving
  messages home with their properties and remaining time to live restored (PN-17, G-2,
  G-5).
* **Close and fault coordination** between the two namespaces (PN-18).

Every task belongs to the :class:`PairedNamespace`: leaving its context stops all of
them. Senders and syphon pumps see the pairing only through a :class:`Hub`; ping actors
only through their two callbacks.

Imports the client (:mod:`aiosb.client`, :mod:`aiosb._inflight`), the vocabulary and
every other module of :mod:`aiosb.pairing`; never the emulator. :mod:`aiosb.client`
imports this package only inside :meth:`aiosb.Namespace.pair`.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from .._clock import CLOCK
from .._inflight import InFlight
from ..client import Namespace
from ..errors import (
    ClientClosed,
    EntityAlreadyExists,
    EntityNotFound,
    InvalidOperation,
    ServiceBusError,
)
from ..message import Message
from ._common import (
    _PARTNER_GRACE,
    _ROUTINE,
    BACKLOG_QUEUE_PROPERTIES,
    Emit,
    PairingEvent,
    PairingStats,
    _Counters,
    _Entry,
    _Subscriber,
    is_outage,
    log,
)
from .health import Action, Health, Signal, transition
from .options import PairedNamespaceOptions
from .ping import PingActor
from .sender import PairedSender, _Rotation
from .syphon import _SyphonPump

__all__ = [
    "BACKLOG_QUEUE_PROPERTIES",
    "Hub",
    "PairedNamespace",
    "PairedSender",
    "PairingEvent",
    "PairingStats",
    "is_outage",
]


#: The open pairings, which :mod:`aiosb.telemetry` observes (their counters, read when
#: metrics are collected; nothing is counted twice, nothing added on the send path).
OPEN: weakref.WeakSet[PairedNamespace] = weakref.WeakSet()


@dataclass(frozen=True, slots=True, eq=False)
class Hub:
    """The pairing as its senders and syphon pumps see it, and all they take from it.

    Shared state (the entity health entries, the rotation, the counters) is read and
    updated in place; a change of health goes through ``failed`` and ``succeeded``,
    which end in :meth:`PairedNamespace._report` (one entry point for failure). The
    fields are bound methods and shared objects, read directly: no indirection is added
    on the send path.
    """

    primary: Namespace
    secondary: Namespace
    options: PairedNamespaceOptions
    counters: _Counters
    inflight: InFlight
    """The pairing's operations in flight: closing the pairing ends them."""
    rotation: _Rotation
    senders: set[PairedSender]
    """The open senders, closed with the pairing."""
    entry: Callable[[str], _Entry]
    """The shared health entry of an entity (made on first use)."""
    entries: dict[str, _Entry]
    """Every entry made so far, by lower-case path (read only)."""
    failed: Callable[[_Entry, ServiceBusError], None]
    """An outage of the entity (:func:`~._common.is_outage`) was seen."""
    succeeded: Callable[[_Entry], None]
    """A send to the entity's primary succeeded."""
    emit: Emit
    ensure_backlog_queue: Callable[[str], Coroutine[Any, Any, None]]
    """Create a backlog queue found missing (PN-8: only if missing)."""
    wake: Callable[[], asyncio.Event]
    """The event the next recovery of an entity sets (parked messages may move)."""


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
        self._pings: dict[_Entry, PingActor] = {}
        self._state = "new"
        self._wake_syphon = asyncio.Event()
        self._partner_timer: asyncio.TimerHandle | None = None
        self._inflight = InFlight()
        self._hub = Hub(
            primary=primary,
            secondary=secondary,
            options=options,
            counters=self._counters,
            inflight=self._inflight,
            rotation=self._rotation,
            senders=self._senders,
            entry=self._entry,
            entries=self._entries,
            failed=self._failed,
            succeeded=self._succeeded,
            emit=self._emit,
            ensure_backlog_queue=self._ensure_backlog_queue,
            wake=self._syphon_wake,
        )

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
        OPEN.add(self)

    async def aclose(self) -> None:
        """Stop every ping actor and syphon pump and close the senders (idempotent)."""
        if self._state == "closed":
            return
        self._state = "closed"
        OPEN.discard(self)
        self._inflight.close("the pairing was closed")
        for entry in self._entries.values():
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
        pings, self._pings = list(self._pings.values()), {}
        for ping in pings:
            ping.stop()
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
                    self._start_ping(entry)
            elif action is Action.STOP_PING:
                ping = self._pings.pop(entry, None)
                if ping is not None:
                    ping.stop()
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

    # -- ping actors (PN-3, PN-10, PN-14, PN-15) ---------------------------------------------

    def _start_ping(self, entry: _Entry) -> None:
        """Start the ping actor of an entity that just failed over."""
        options = self.options
        ping = PingActor(
            entry.path,
            self._send_ping,
            functools.partial(self._ping_outcome, entry),
            interval=options.ping_primary_interval.total_seconds(),
            timeout=options.ping_timeout.total_seconds(),
        )
        self._pings[entry] = ping
        ping.start(self._spawn)

    async def _send_ping(self, entity: str, ping: Message, timeout: float) -> None:  # noqa: ASYNC109
        self._counters.pings_sent += 1
        primary = self.primary
        await primary.execute(primary.transport.send, entity, [ping], timeout=timeout)

    def _ping_outcome(self, entry: _Entry, error: ServiceBusError | None) -> None:
        if error is None:
            self._report(entry, Signal.PING_OK)
            return
        self._counters.pings_failed += 1
        self._emit("ping_failed", entry.path, str(error))
        self._report(entry, Signal.PING_FAILED)

    # -- failure and success signals from senders and the syphon --------------------------------

    def _failed(self, entry: _Entry, exc: ServiceBusError) -> None:
        log.debug("send to %s failed: %s", entry.path, exc)
        self._report(entry, Signal.SEND_FAILED)

    def _succeeded(self, entry: _Entry) -> None:
        if entry.state.health is not Health.HEALTHY:
            self._report(entry, Signal.SEND_OK)

    # -- syphon (PN-16, PN-17, G-2, G-3, G-5) ----------------------------------------------------

    async def _syphon(self, path: str) -> None:
        """One pump per backlog queue; see :class:`~.syphon._SyphonPump`."""
        await _SyphonPump(self._hub, path).run()

    def _syphon_wake(self) -> asyncio.Event:
        """The event the next recovery sets (a new one after each)."""
        return self._wake_syphon

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
