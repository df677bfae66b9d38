"""The syphon: one pump per backlog queue moves the backlog home (PN-4, PN-16, PN-17,
G-2, G-3, G-5).

A pump takes one :class:`~.runtime.Hub` from its pairing and nothing else: the
namespaces and options, the shared entity health, the counters, the wake-up event of
recoveries, and the callbacks through which it reports a failed or successful move.

Imports the vocabulary, :mod:`._common`, :mod:`.health` and :mod:`.rewrite`; the
runtime for types only (the runtime imports this module); never the emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from .._clock import CLOCK
from ..errors import (
    ClientClosed,
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessageSizeExceeded,
    ServiceBusError,
    Unauthorized,
)
from ..message import ReceivedMessage
from ..protocol import ColumnTransport, ReceiveRequest, Settlement, received_from_columns
from ._batches import Columns, Messages, chunks
from ._common import (
    _PARK_LIMIT,
    BACKLOG_QUEUE_PROPERTIES,
    _Entry,
    _first,
    _quietly,
    _wait_for,
    is_outage,
    log,
    syphon_batch,
)
from .health import Health
from .rewrite import EXPIRED, PATH, Refused, refresh, restore, restore_columns

if TYPE_CHECKING:
    from .runtime import Hub


class _SyphonPump:
    """Moves one backlog queue's messages home, for as long as the pairing is open.

    It long-polls (PN-16), sends each entity's messages to the primary and only then
    completes them (PN-17). Messages for an entity that is not healthy are parked:
    kept locked (their locks renewed at half-life) rather than abandoned, so their
    delivery counts do not climb (PN-17). A failed move is retried after the syphon
    retry interval while the entity is only suspect, and waits for recovery once it has
    failed over.
    """

    def __init__(self, hub: Hub, path: str) -> None:
        self.hub = hub
        self.path = path
        self.receiver = hub.secondary.receiver(path)
        self.parked: dict[_Entry, list[ReceivedMessage]] = {}
        #: Messages left deferred in the backlog queue, by sequence number and entity:
        #: parked beyond the limit, they wait there unlocked (the queue expires them,
        #: G-2) so that what waits behind them can move (PN-17).
        self.deferred: dict[_Entry, set[int]] = {}
        #: Whether to search the backlog queue for deferred messages it does not know of
        #: (:meth:`search`): at the start, what an earlier run left; later, one taken
        #: back whose lock ended, which the queue keeps deferred.
        self.search_due = True
        #: Whether this pump has deferred messages, or found some deferred.
        self.defers = False
        self.retry_at: dict[_Entry, float] = {}
        options = hub.options
        self.wait = options.syphon_receive_wait.total_seconds()
        self.retry = options.syphon_retry_interval.total_seconds()
        self.lock: float = BACKLOG_QUEUE_PROPERTIES["lock_duration"].total_seconds()
        self.batch = syphon_batch(hub.primary.url, hub.secondary.url)
        #: Whether the last receive brought messages (the next one need not wait).
        self.more = False
        #: The long poll in flight, left out by a wake-up or a wait's end (:meth:`poll`).
        self.polling: asyncio.Task[list[ReceivedMessage]] | None = None
        #: The transports a batch may move through as columns, no message object per
        #: message (#16): the backlog's receives columns and the primary's sends them.
        takes, gives = hub.secondary.transport, hub.primary.transport
        self.columns = (
            (takes, gives)
            if isinstance(takes, ColumnTransport) and isinstance(gives, ColumnTransport)
            else None
        )

    async def run(self) -> None:
        hub, counters = self.hub, self.hub.counters
        try:
            try:  # PN-8: a queue found with another lock duration is used as it is
                found = await hub.secondary.get_queue(self.path)
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
                    hub.emit("syphon_failed", self.path, exc.message)
                    self.search_due |= self.defers  # what it took back may be deferred again
                    if isinstance(exc, EntityNotFound):
                        await _quietly(hub.ensure_backlog_queue(self.path))
                    await asyncio.sleep(self.retry)
                except Exception as exc:  # the pump outlives a bug's blast
                    log.exception("syphon of %s failed unexpectedly", self.path)
                    counters.syphon_failures += 1
                    hub.emit("syphon_failed", self.path, repr(exc))
                    await asyncio.sleep(self.retry)
        finally:
            await self.release_parked()
            await self.receiver.aclose()

    async def release_parked(self) -> None:
        """At the pump's end, end the long poll left out (:meth:`poll`) and give back
        what is parked and what the poll brought (abandoned, in one request), so that
        the next syphon of this queue takes it at once rather than after its locks run
        out (a lock's end would count the same delivery). Bounded: a close does not
        wait on a backlog that is down; what is not given back keeps its lock."""
        msgs = [m for group in self.parked.values() for m in group]
        self.parked.clear()
        task, self.polling = self.polling, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is None:
                msgs += task.result()
        if not msgs:
            return
        with contextlib.suppress(ServiceBusError, TimeoutError):
            await asyncio.wait_for(self.receiver.abandon(msgs), _RELEASE_WAIT)

    async def step(self) -> None:
        """Move what may move, then receive (or wait) once."""
        wake = self.hub.wake()  # taken first: a recovery from here on wakes us
        if self.search_due:
            await self.search()
        await self.unpark()
        budget = self.budget()
        if self.parked and sum(map(len, self.parked.values())) >= _PARK_LIMIT:
            # Deferred, the parked let the syphon reach what is behind them, if another
            # entity may take its messages; else (all down: a regional outage) reading
            # the whole backlog to defer it would double its traffic for nothing.
            if not self.others_movable() or not await self.defer_parked():
                if self.polling is None:
                    await _wait_for(wake.wait(), budget)
                    return
                # A long poll is out: what it brings is taken (and parked) as it comes.
        batch: list[ReceivedMessage] | None
        if self.polling is None and self.more and self.columns is not None:
            # In a run of full batches, each moves as columns where it can (#16).
            count = await self.move_columns(*self.columns)
            self.more = count > 0
            self.hub.counters.syphon_receives += 1
            if count:
                await asyncio.sleep(0)
            return
        if self.polling is None and self.more:
            # The last receive brought messages, so more are likely waiting: take them
            # at once, without the long poll's race against the wake-up (two tasks per
            # batch and a waiter to cancel, about a tenth of a drain's time: #16). An empty
            # answer ends the run; the long poll follows, so an idle syphon still polls
            # only as PN-16 allows.
            batch = await self.receiver.receive(max_messages=self.batch, max_wait=0)
        else:
            batch = await self.poll(wake, budget)
            if batch is None:  # an entity recovered, or a wait ended: move what may move
                return
        self.more = bool(batch)
        self.hub.counters.syphon_receives += 1
        if batch:
            await self.move(batch)
            # A move on an in-process namespace never waits, so a long drain would hold
            # the loop from its first batch to its last: the application's own sends,
            # pings and timers go on between batches.
            await asyncio.sleep(0)

    async def poll(self, wake: asyncio.Event, budget: float) -> list[ReceivedMessage] | None:
        """The long poll's answer (PN-16), or ``None`` if ``wake`` is set (an entity
        recovered) or ``budget`` runs out first. The poll is then left out, not cancelled,
        its answer taken at a later step: an answer on its way has its messages locked,
        and a receive cancelled then (over HTTP, its connection dropped) would leave them
        locked for nobody for a lock's minute (PN-17). Only the pump's end stops it; the
        pump settles on the receiver meanwhile (over the SDK's AMQP link, between slices)."""
        task = self.polling
        if task is None:
            task = self.polling = asyncio.ensure_future(
                self.receiver.receive(max_messages=self.batch, max_wait=budget)
            )
        if not await _first(task, wake, budget):
            return None
        self.polling = None
        return task.result()

    def movable(self, entry: _Entry, now: float) -> bool:
        """Healthy or suspect, and no failed move's retry pending (PN-16)."""
        health = entry.state.health
        if health is not Health.HEALTHY and health is not Health.SUSPECT:
            return False
        return not self.retry_at or self.retry_at.get(entry, 0.0) <= now

    def budget(self) -> float:
        """How long to wait now: until a parked lock needs renewing, a parked message
        expires or a retry is due."""
        if not self.parked:
            now = CLOCK.now()
            due = [
                self.retry_at[e] - now for e in self.deferred
                if e in self.retry_at and e.state.health in _RETRIED
            ]
            return max(min([self.wait, *due]), 0.0)
        now = CLOCK.now()
        first_lock = min(
            m.locked_until_timestamp or now for msgs in self.parked.values() for m in msgs
        )
        first_expiry = min(
            (m.expires_timestamp for msgs in self.parked.values() for m in msgs
             if m.expires_timestamp is not None),
            default=now + self.wait,
        )
        until = min(self.wait, first_lock - now - self.lock / 2, first_expiry - now)
        for entry in [*self.parked, *self.deferred]:
            if entry in self.retry_at and entry.state.health in _RETRIED:
                until = min(until, self.retry_at[entry] - now)
        return max(until, 0.0)

    async def unpark(self) -> None:
        """Move parked messages whose entity may take them; keep the others fresh
        (:meth:`freshen`: the expired dead-lettered, the locks renewed)."""
        now = CLOCK.now()
        for entry, seqs in list(self.deferred.items()):
            if self.movable(entry, now):
                del self.deferred[entry]
                await self.undefer(entry, seqs)
        if not self.parked:
            return
        now = CLOCK.now()
        for entry, msgs in list(self.parked.items()):
            if self.movable(entry, now):
                del self.parked[entry]
                await self.move_group(entry, msgs)
        now = CLOCK.now()
        renew_by = now + self.lock / 2
        for entry, msgs in list(self.parked.items()):
            if not any(
                (m.locked_until_timestamp or now) <= renew_by
                or (m.expires_timestamp is not None and m.expires_timestamp <= now)
                for m in msgs
            ):
                continue
            kept = await self.freshen(msgs)
            if kept:
                self.parked[entry] = kept
            else:
                del self.parked[entry]

    async def freshen(self, msgs: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """Bring restored messages that waited (parked, or the rest of a slow move) up to
        date: dead-letter those whose time ran out (G-2: a parked message is locked, so
        the backlog queue cannot expire it), bring the others' time to live and schedule
        up to now (:func:`.rewrite.refresh`) and renew the locks past half their time, in
        one request (G-3: a move after its lock ran out makes a duplicate). Gives those
        still alive and held; a message whose lock is gone comes back by itself (to the
        queue, or, taken back from deferral, deferred again: :meth:`hold`)."""
        now = CLOCK.now()
        alive: list[ReceivedMessage] = []
        expired: list[ReceivedMessage] = []
        for msg in msgs:
            (alive if refresh(msg, now) else expired).append(msg)
        if expired:
            await self.dead_letter(expired, EXPIRED.reason, EXPIRED.description)
        half = now + self.lock / 2
        due = [m for m in alive if (m.locked_until_timestamp or now) <= half]
        if not due:
            return alive
        held = await self.hold(due)
        if len(held) == len(due):
            return alive
        lost = {id(m) for m in due} - {id(m) for m in held}
        return [m for m in alive if id(m) not in lost]

    def others_movable(self) -> bool:
        """Whether an entity with nothing parked may take messages now."""
        now = CLOCK.now()
        return any(
            entry not in self.parked and self.movable(entry, now)
            for entry in self.hub.entries.values()
        )

    async def defer_parked(self) -> bool:
        """Leave the parked messages deferred in the backlog queue, so that the syphon
        goes on to what waits behind them: an entity down for long must not hold up the
        others' moves (PN-17). Whether it could (a backlog read over the REST protocol
        cannot defer; the syphon then waits, as before, for a recovery)."""
        for entry, msgs in list(self.parked.items()):
            kept = await self.freshen(msgs)  # locks held, the expired dead-lettered
            try:
                if kept:  # one request for them all
                    secondary = self.hub.secondary
                    settlement = Settlement("defer", [m.lock_token for m in kept if m.lock_token])
                    await secondary.execute(secondary.transport.settle, self.path, settlement)
            except ClientClosed:
                raise
            except ServiceBusError as exc:
                log.info("syphon of %s cannot defer what it parked (%s); it waits instead",
                         self.path, exc.message)
                self.parked[entry] = kept
                return False
            del self.parked[entry]
            self.deferred.setdefault(entry, set()).update(m.sequence_number for m in kept)
            self.defers = True
            log.info("syphon of %s deferred %d messages for %s, still unavailable",
                     self.path, len(kept), entry.path)
        return True

    async def undefer(self, entry: _Entry, numbers: set[int]) -> None:
        """Take the messages deferred for ``entry`` back, a batch at a time, and move
        them (:meth:`move`); those left when it fails again stay deferred. A message no
        longer there (expired into the dead-letter queue, or moved) is passed over."""
        seqs = sorted(numbers)
        for i in range(0, len(seqs), self.batch):
            if i:
                await asyncio.sleep(0)  # the application's tasks run between batches
            if not self.movable(entry, CLOCK.now()):
                self.deferred.setdefault(entry, set()).update(seqs[i:])
                return
            part = seqs[i:i + self.batch]
            try:
                msgs = await self.receiver.receive_deferred(part)
            except MessageNotFound:
                msgs = []
                for seq in part:
                    with contextlib.suppress(MessageNotFound):
                        msgs += await self.receiver.receive_deferred(seq)
            except ServiceBusError:
                self.deferred.setdefault(entry, set()).update(seqs[i:])
                raise
            if msgs:
                await self.move(msgs)

    async def search(self) -> None:
        """Find the messages deferred in the backlog queue (a peek through it: those
        whose state is deferred), to take back as their entities allow: what an earlier
        run left, or one taken back whose lock ended (the queue keeps it deferred). Only
        where the queue counts some deferred, or cannot count; a backlog that cannot be
        browsed (REST) is not searched."""
        self.search_due = False
        secondary = self.hub.secondary
        try:
            counts = await secondary.runtime_properties(self.path)
            if not counts.deferred_message_count:
                return
        except ClientClosed:
            raise
        except ServiceBusError:
            pass  # no counts here (management elsewhere): browse
        start = 0
        try:
            while page := await self.receiver.peek(_SEARCH_PAGE, from_sequence_number=start):
                for msg in page:
                    path = msg.application_properties.get(PATH)
                    if msg.state == "deferred" and isinstance(path, str) and path:
                        entry = self.hub.entry(path)
                        self.deferred.setdefault(entry, set()).add(msg.sequence_number)
                        self.defers = True
                start = page[-1].sequence_number + 1
                await asyncio.sleep(0)
        except InvalidOperation:  # the REST protocol browses nothing
            pass

    async def hold(self, msgs: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """Renew the locks of ``msgs``: in one request, else one by one (some lock is
        gone, or the queue blinked). Gives those whose lock is renewed; one taken back
        from deferral whose lock is gone is deferred again, and searched for."""
        try:
            await self.receiver.renew_lock(msgs)
            return msgs
        except ClientClosed:
            raise
        except ServiceBusError:
            if len(msgs) == 1:
                self.search_due |= msgs[0].state == "deferred"
                return []
        held = []
        for msg in msgs:
            try:
                await self.receiver.renew_lock(msg)
            except ClientClosed:
                raise
            except ServiceBusError:
                if msg.state == "deferred":  # back to deferred, not to the queue
                    self.search_due = True
                continue
            held.append(msg)
        return held

    async def move(self, batch: list[ReceivedMessage]) -> None:
        """Restore a received batch (in place: :func:`.rewrite.restore`) and group it by
        destination; move or park each group."""
        now = CLOCK.now()
        outcomes = [restore(msg, now) for msg in batch]
        groups: dict[str, list[ReceivedMessage]] = {}
        refused: dict[Refused, list[ReceivedMessage]] = {}
        first = outcomes[0]
        if first.__class__ is str and len(set(outcomes)) == 1:
            groups[first] = batch  # the common case: one entity, no loop
        else:
            for msg, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, str):
                    groups.setdefault(outcome, []).append(msg)
                else:
                    refused.setdefault(outcome, []).append(msg)
        # Restored as of ``now``, good until the first wait: a group sent after a
        # dead-letter or an earlier group's move (seconds, over a network) has its time
        # to live and schedule brought up to date first (G-2).
        fresh = not refused
        for why, msgs in refused.items():
            await self.dead_letter(msgs, why.reason, why.description)
        for entity, msgs in groups.items():
            entry = self.hub.entry(entity)
            if entry in self.parked or not self.movable(entry, now):
                # PN-17: not while unavailable
                self.parked.setdefault(entry, []).extend(msgs)
            elif fresh:
                await self.send(entry, Messages(self, msgs))
                fresh = False
            else:
                await self.move_group(entry, msgs)

    async def move_columns(self, takes: ColumnTransport, gives: ColumnTransport) -> int:
        """Receive a batch as columns and, in the common case (:func:`.rewrite.restore_columns`:
        one entity, healthy, nothing in a session, scheduled or expired), send it on as
        columns and complete it (:meth:`send`); any other batch goes the way of messages
        (:meth:`move`). Gives how many messages were received."""
        request = ReceiveRequest(max_messages=self.batch, max_wait=0)
        bodies, columns = await self.hub.secondary.execute(
            takes.receive_columns, self.path, request
        )
        count = len(bodies)
        if not count:
            return 0
        now = CLOCK.now()
        restored = restore_columns(columns, now)
        entry = None if restored is None else self.hub.entry(restored[0])
        if restored is None or entry is None or entry in self.parked or not self.movable(
            entry, now
        ):
            await self.move(received_from_columns(bodies, columns))
        else:
            await self.send(entry, Columns(self, gives, bodies, columns, restored[1]))
        return count

    async def move_group(self, entry: _Entry, msgs: list[ReceivedMessage]) -> None:
        """Move restored messages for ``entry`` after a wait (parked while it was
        unavailable, or a later group of a batch): their time to live and schedule are
        brought up to now first (:func:`.rewrite.refresh`)."""
        alive = await self.freshen(msgs)
        if alive:
            await self.send(entry, Messages(self, alive))

    async def send(self, entry: _Entry, batch: Messages | Columns) -> None:
        """Send a restored batch to ``entry``'s primary entity, then complete it in the
        backlog.

        On an outage the rest is parked at once: nothing more is sent to an entity that
        just failed (PN-17).
        """
        hub = self.hub
        # At most a syphon batch at a time, and chunks whose bodies alone fit the
        # primary's limit; a chunk too large as a whole all the same is split in two.
        limit = hub.primary.transport.max_message_size
        whole = len(batch)
        pending = chunks(batch.body_sizes(), self.batch, limit)
        as_of = CLOCK.now()
        while pending:
            lo, hi = pending.pop(0)
            now = CLOCK.now()
            if now - as_of >= _STALE and (
                batch.ages() or batch.locked_until(lo, whole) <= now + self.lock / 2
            ):
                # A slow primary: what is left waited. Its times to live (G-2) and locks
                # (G-3) are brought up to date before more of it is sent.
                batch = Messages(self, await self.freshen(batch.messages(lo, whole)))
                whole = len(batch)
                pending = chunks(batch.body_sizes(), self.batch, limit)
                as_of = CLOCK.now()
                continue
            try:
                await batch.send(entry.path, lo, hi)
            except ServiceBusError as exc:
                if isinstance(exc, ClientClosed):
                    raise
                if isinstance(batch, Columns) and isinstance(
                    exc, InvalidArgument | InvalidOperation
                ):
                    # Columns are checked as new messages are; a message the backlog
                    # took may not pass (a field changed after its checks). As messages
                    # the batch meets the primary's own verdict, message by message.
                    batch = Messages(self, batch.messages(0, whole))
                    pending.insert(0, (lo, hi))
                    continue
                if isinstance(exc, MessageSizeExceeded) and hi - lo > 1:
                    mid = (lo + hi) // 2
                    pending[:0] = [(lo, mid), (mid, hi)]
                    continue
                hub.counters.syphon_failures += 1
                if is_outage(exc) or isinstance(exc, Unauthorized):
                    # Unauthorized: a credential to fix (PN-6) and the move to retry;
                    # messages acknowledged to the application are never dead-lettered
                    # for it.
                    if is_outage(exc):
                        hub.failed(entry, exc)
                    rest = [m for a, b in [(lo, hi), *pending] for m in batch.messages(a, b)]
                    self.parked.setdefault(entry, []).extend(rest)
                    self.retry_at[entry] = CLOCK.now() + self.retry
                    hub.emit("syphon_failed", entry.path, f"move failed, parked: {exc.message}")
                    return
                # Retrying cannot help: surface it where people look.
                await self.dead_letter(batch.messages(lo, hi), type(exc).__name__, exc.message)
                continue
            await self.moved(entry, batch, lo, hi)

    async def moved(self, entry: _Entry, batch: Messages | Columns, lo: int, hi: int) -> None:
        """Messages ``lo`` to ``hi`` of ``batch`` were sent to ``entry``: complete them in
        the backlog, and count and report the move.

        A completion refused by an outage or a transient fault is tried again after the
        syphon retry interval while the messages' locks hold, for at most a quarter of
        the lock duration, so that parked messages' locks (renewed at half-life) hold
        meanwhile: a backlog queue that blinks must not bring a moved batch back for a
        second move (G-3: only what cannot be completed in time is moved again)."""
        hub = self.hub
        count = hi - lo
        self.retry_at.pop(entry, None)
        hub.succeeded(entry)
        started = CLOCK.now()
        last_try: float | None = None
        while True:
            try:
                await batch.complete(lo, hi)
                break
            except ServiceBusError as exc:
                if last_try is None:  # the locks are read only if a complete fails
                    last_try = min(batch.locked_until(lo, hi), started + self.lock / 4)
                    last_try -= self.retry
                if (
                    (is_outage(exc) or exc.retryable)
                    and not isinstance(exc, MessageLockLost | ClientClosed)
                    and CLOCK.now() <= last_try
                ):
                    log.debug("completing %d moved messages failed (%s); trying again in "
                              "%g s", count, exc.message, self.retry)
                    await asyncio.sleep(self.retry)
                    continue
                # Sent but not completed: it will be moved again; the MessageId lets a
                # primary with duplicate detection drop the copy (G-3). One taken back
                # from deferral stays deferred: searched for again.
                hub.emit("syphon_failed", entry.path, f"complete failed: {exc.message}", count)
                self.search_due |= self.defers
                break
        hub.counters.syphon_moved += count
        hub.emit("syphon_moved", entry.path, f"moved {count} messages", count)

    async def dead_letter(self, msgs: list[ReceivedMessage], reason: str, description: str) -> None:
        """Dead-letter backlog messages that cannot be moved, with a reason."""
        hub = self.hub
        done = 0
        for msg in msgs:
            try:
                await self.receiver.dead_letter(msg, reason, description)
            except ServiceBusError as exc:
                hub.emit("syphon_failed", self.path, f"dead-letter failed: {exc.message}")
                self.search_due |= msg.state == "deferred"
                continue
            done += 1
        hub.counters.syphon_dead_lettered += done
        hub.emit("syphon_dead_lettered", self.path, f"{reason}: {description}", done)


#: Seconds a pump's end waits for its parked messages to be given back.
_RELEASE_WAIT = 2.0
#: The healths in which a failed move is retried after the syphon retry interval.
_RETRIED = (Health.HEALTHY, Health.SUSPECT)
#: Messages a peek of :meth:`_SyphonPump.search` asks for.
_SEARCH_PAGE = 500
#: Seconds a move's later chunks may wait before the rest is brought up to date
#: (:meth:`_SyphonPump.freshen`): their times to live are off by less than that.
_STALE = 1.0
