"""The message store of one fragment of a queue, subscription, dead-letter queue or
topic schedule, or of one session (:class:`_Store`).

A store keeps its messages by sequence number (:class:`~._held.Held`). Available
messages wait in sequence order (a deque for new ones, a heap for returned ones); locked
ones are indexed by lock token. Every deadline (lock expiry, message expiry, scheduled
activation) goes on the store's timeline, a heap with lazy deletion that is compacted
as it grows; the store registers its earliest deadline with the namespace's timer,
which calls :meth:`_Store.on_due`.

A store knows its surroundings only through the small protocols of
:mod:`._surroundings`: the namespace (:class:`StoreHost`: timer, lock-token ids,
journal), its entity (:class:`StoreOwner`: where messages go next, its settings) and its
session (:class:`StoreSession`).

Imports: :mod:`._record`, :mod:`._held` and :mod:`._surroundings` only (never the
entity or the broker).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from heapq import heapify, heappop, heappush
from operator import attrgetter
from typing import Any

from ..errors import MessageNotFound
from ._held import Held
from ._record import (
    AVAILABLE,
    DEFERRED,
    GONE,
    INF,
    LOCKED,
    MAX_DELIVERY_EXCEEDED,
    SCHEDULED,
    TTL_EXPIRED,
    _Record,
)
from ._surroundings import StoreHost, StoreOwner, StoreSession

__all__: list[str] = []

# Timeline kinds. A _LOCKS entry holds the records locked until its instant by one
# receive or renew, so a batch of 100 costs one heap push, not 100. A record whose lock
# was settled, or renewed to another instant, is skipped when the entry comes due.
_EXPIRE = object()
_ACTIVATE = object()
_LOCKS = object()

#: One timeline entry: when, a tie-breaker, the kind, and a record (or, for _LOCKS, the
#: records of one receive or renew).
_Entry = tuple[float, int, object, _Record | list[_Record]]


_state = attrgetter("state")
_size = attrgetter("size")


def _holds(rec: _Record, when: float) -> bool:
    """Whether ``rec`` is still locked, by a lock that ends at ``when``."""
    return rec.state == LOCKED and rec.locked_until == when


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    """Wake every future in ``waiters`` and empty the list (in place: lists are shared)."""
    if waiters:
        woken = waiters[:]
        waiters.clear()
        for fut in woken:
            if not fut.done():
                fut.set_result(None)


def _wake_one(waiters: list[asyncio.Future[None]]) -> None:
    """Wake the longest-waiting future in ``waiters`` that is still waiting (one message
    became available: one receive is enough to take it, #16). Futures already woken
    (through another fragment of the same receive) are dropped on the way."""
    while waiters:
        fut = waiters.pop(0)
        if not fut.done():
            fut.set_result(None)
            return


class _Store:
    """The messages of one fragment of a queue, subscription, dead-letter queue or topic
    schedule, or of one session."""

    __slots__ = (
        "_compact_at",
        "_groups",
        "_order",
        "deferred",
        "due",
        "entity",
        "fragment",
        "is_dlq",
        "locked",
        "ns",
        "path",
        "ready",
        "records",
        "returned",
        "scheduled",
        "seqs",
        "session",
        "size",
        "timeline",
        "waiters",
    )

    def __init__(
        self,
        ns: StoreHost,
        entity: StoreOwner,
        is_dlq: bool,
        fragment: int = 0,
        session: StoreSession | None = None,
    ) -> None:
        self.ns = ns
        self.entity = entity
        self.is_dlq = is_dlq
        self.fragment = fragment
        self.session = session
        self.seqs = entity.seqs[fragment]
        self.path = entity.path + ("/$DeadLetterQueue" if is_dlq else "")
        self.records = Held()
        self.ready: deque[_Record] = deque()
        self.returned: list[tuple[int, _Record]] = []
        self.locked: dict[str, _Record] = {}
        self.timeline: list[_Entry] = []
        self.waiters: list[asyncio.Future[None]] = []
        self.due = INF
        self.scheduled = 0
        #: Deferred messages held (locked ones included), kept as they come and go so
        #: that counts are read without looking at every message.
        self.deferred = 0
        self.size = 0
        self._order = itertools.count()
        self._compact_at = 1024
        #: The lock groups not yet due, by their instant: [records still locked, the
        #: records]. A group whose records are all settled is emptied at once, so a
        #: completed message is freed then, not when its lock would have ended (#16).
        self._groups: dict[float, list[Any]] = {}

    # -- timeline ------------------------------------------------------------------

    def _push(self, when: float, kind: object, item: _Record | list[_Record]) -> None:
        heappush(self.timeline, (when, next(self._order), kind, item))
        if when < self.due:
            self.due = when
            self.ns._register(when, self)
        if len(self.timeline) > self._compact_at:
            self._compact()

    @staticmethod
    def _live(kind: object, item: _Record | list[_Record], when: float) -> bool:
        if isinstance(item, list):  # _LOCKS
            return any(_holds(rec, when) for rec in item)
        if kind is _EXPIRE:  # a locked message keeps its entry: the lock may end first
            return item.state in (AVAILABLE, DEFERRED, LOCKED) and item.expires == when
        return item.state == SCHEDULED  # _ACTIVATE

    def _compact(self) -> None:
        self.timeline = [e for e in self.timeline if self._live(e[2], e[3], e[0])]
        heapify(self.timeline)
        self._compact_at = 2 * len(self.timeline) + 1024

    def on_due(self, now: float) -> None:
        """Run every deadline that has come: lock expiries, expiries, activations."""
        timeline = self.timeline
        while timeline and timeline[0][0] <= now:
            when, _, kind, item = heappop(timeline)
            if isinstance(item, list):  # _LOCKS
                group = self._groups.get(when)
                if group is not None and group[1] is item:
                    del self._groups[when]
                for rec in item:
                    if _holds(rec, when):
                        self.unlock(rec, now)
            elif not self._live(kind, item, when):
                continue
            elif kind is _EXPIRE:
                if item.state != LOCKED:  # EX-3: the lock's end applies expiry (unlock)
                    self.lapse(item, now)
            else:
                self.activate(item, now)
        self.due = timeline[0][0] if timeline else INF
        if self.due < INF:
            self.ns._register(self.due, self)

    def lock_until(self, until: float, recs: list[_Record]) -> None:
        """Put the end of the locks of ``recs`` (one receive or renew, locked until
        ``until``) on the timeline."""
        group = self._groups.get(until)
        if group is None:
            recs = list(recs)
            self._groups[until] = [len(recs), recs]
            self._push(until, _LOCKS, recs)
        else:  # the same instant as another receive's: one entry for both
            group[0] += len(recs)
            group[1].extend(recs)

    def _settled(self, until: float | None, count: int = 1) -> None:
        """``count`` records locked until ``until`` are no longer: when none of their
        group is, let go of the group's records."""
        if until is None:
            return
        group = self._groups.get(until)
        if group is None:
            return
        group[0] -= count
        if group[0] <= 0:
            del self._groups[until]
            recs = group[1]
            # A check (counts only help): first of the states alone, in C, since this
            # runs for every message completed (#16).
            if LOCKED not in map(_state, recs) or not any(_holds(r, until) for r in recs):
                recs.clear()

    # -- adding --------------------------------------------------------------------

    def add(self, rec: _Record, now: float) -> None:
        """Store ``rec`` as available (it has its sequence number and times set)."""
        rec.state = AVAILABLE
        self.records.add(rec)
        self.size += rec.size
        self.entity.bytes += rec.size
        ready = self.ready
        if ready and rec.seq < ready[-1].seq:  # an activated scheduled message
            heappush(self.returned, (rec.seq, rec))
        else:
            ready.append(rec)
        if rec.expires is not None and not self.is_dlq:
            self._push(rec.expires, _EXPIRE, rec)
        if self.session is not None:
            self.wake()
        elif self.waiters:
            _wake_one(self.waiters)
        if self.ns.journal is not None:
            self.ns.journal.record(self, rec)

    def add_run(self, recs: list[_Record], now: float) -> None:
        """Store ``recs`` as available: :meth:`add` for a send's batch to this store
        (numbered in increasing order, mostly consecutively above every number held;
        times set), in one pass (#16); one record (a single send) as :meth:`add` stores it,
        which costs it less."""
        if len(recs) == 1:
            self.add(recs[0], now)
            return
        for rec in recs:
            rec.state = AVAILABLE
        self.records.add_run(recs)
        size = sum(map(_size, recs))
        self.size += size
        self.entity.bytes += size
        ready = self.ready
        if ready and recs[0].seq < ready[-1].seq:
            for rec in recs:  # numbered below some here: each in its place, as add puts it
                heappush(self.returned, (rec.seq, rec))
        else:
            ready.extend(recs)
        if not self.is_dlq:
            for rec in recs:
                if rec.expires is not None:
                    self._push(rec.expires, _EXPIRE, rec)
        if self.session is not None:
            self.wake()
        else:
            waiters = self.waiters
            for _ in range(min(len(recs), len(waiters))):
                _wake_one(waiters)
        if self.ns.journal is not None:
            self.ns.journal.records(self, recs)

    def add_scheduled(self, rec: _Record) -> None:
        """Hold ``rec`` until its enqueue time (EX-5)."""
        rec.state = SCHEDULED
        self.records.add(rec)
        self.size += rec.size
        self.entity.bytes += rec.size
        self.scheduled += 1
        self._push(rec.enqueued, _ACTIVATE, rec)
        if self.ns.journal is not None:
            self.ns.journal.record(self, rec)

    def add_held(self, rec: _Record) -> None:
        """Take back a locked or deferred ``rec`` as it was (the journal reloading it);
        its lock's end is put on the timeline by :meth:`lock_until`."""
        if self.records.add(rec) and rec.deferred:
            self.deferred += 1
        self.size += rec.size
        self.entity.bytes += rec.size
        if rec.expires is not None and not self.is_dlq:
            self._push(rec.expires, _EXPIRE, rec)
        if rec.state == LOCKED and rec.lock_token is not None:
            self.locked[rec.lock_token] = rec

    def activate(self, rec: _Record, now: float) -> None:
        """A scheduled message's time has come: make it available (or fan it out)."""
        self.scheduled -= 1
        self.remove((rec,))
        self.entity.deliver(rec, now, 0, keep_seq=True)

    def make_available(self, rec: _Record) -> None:
        """Return ``rec`` to the available messages, in sequence order."""
        if self.ns.journal is not None:
            self.ns.journal.record(self, rec)
        if rec.deferred:
            rec.state = DEFERRED
            return
        rec.state = AVAILABLE
        heappush(self.returned, (rec.seq, rec))
        if self.session is not None:
            self.wake()
        elif self.waiters:
            _wake_one(self.waiters)

    def wake(self) -> None:
        """Wake every long-poll receive waiting on this store (and, for a session's
        store, every receiver waiting for the next available session). A message that
        becomes available in a store without a session wakes one receive instead
        (:func:`_wake_one`); this is for what every waiter must see (the entity is gone,
        a fault came or went) and for sessions."""
        _wake(self.waiters)
        if self.session is not None:
            _wake(self.entity.session_waiters)

    def has_available(self) -> bool:
        """Whether a receive would find a message (dropping stale queue entries)."""
        ready, returned = self.ready, self.returned
        while ready and ready[0].state != AVAILABLE:
            ready.popleft()
        while returned and returned[0][1].state != AVAILABLE:
            heappop(returned)
        return bool(ready or returned)

    # -- removing ------------------------------------------------------------------

    def from_sequence(self, seq: int) -> Iterator[_Record]:
        """The records held from sequence number ``seq`` on, in order: a bisection and
        then only what is read, however deep the store."""
        return self.records.from_sequence(seq)

    def remove(self, recs: Sequence[_Record]) -> None:
        """Drop ``recs`` from the store (settled, expired, activated or cancelled), and
        the locks of those still locked: one call and one pass for a whole batch, since
        completion runs for every message (#16)."""
        found = self.records.discard([rec.seq for rec in recs])
        locked = self.locked
        size = deferred = 0
        # A batch's locks mostly end at one instant (one receive): its lock group is
        # counted down once per run of equal instants, not once per record.
        run_until: float | None = None
        run = 0
        for rec in found:
            if rec.state == LOCKED:
                until = rec.locked_until
                if until is not None:
                    locked.pop(rec.lock_token, None)  # type: ignore[arg-type]
                    if until == run_until:
                        run += 1
                    else:
                        self._settled(run_until, run)
                        run_until, run = until, 1
            rec.state = GONE
            size += rec.size
            if rec.deferred:
                deferred += 1
        self._settled(run_until, run)
        if len(found) != len(recs):  # some not held (removed already): gone all the same
            for rec in recs:
                rec.state = GONE
        self.deferred -= deferred
        self.size -= size
        self.entity.bytes -= size
        if self.ns.journal is not None:
            self.ns.journal.records(self, recs)

    def expire(self, rec: _Record, now: float) -> None:
        """Expiry has come for an unlocked message: dead-letter or drop it (EX-10)."""
        self.remove((rec,))
        if self.entity.props.dead_lettering_on_message_expiration:
            self.entity.dead_letter(
                self.fragment, rec, TTL_EXPIRED, "The message expired and was dead lettered.", now
            )

    def lapse(self, rec: _Record, now: float) -> None:
        """An unlocked message is past its expiry: expire it, or in a session, the
        whole session (EX-12), once a listener is there (EX-13)."""
        if self.session is None:
            self.expire(rec, now)
        else:
            self.session.expire(now)

    def _release(self, rec: _Record, props: dict[str, Any] | None) -> None:
        """Drop ``rec``'s lock and merge ``props`` into its application properties."""
        token = rec.lock_token
        if token is not None:
            self.locked.pop(token, None)
        until = rec.locked_until
        rec.lock_token = None
        rec.locked_until = None
        self._settled(until)
        if props:
            rec.props = {**(rec.props or {}), **props}

    def defer(self, rec: _Record, now: float, props: dict[str, Any] | None = None) -> None:
        """Set a locked message aside for ``receive_deferred``: no delivery-count check,
        since deferring is not a failed delivery; expiry still applies (EX-3)."""
        self._release(rec, None)
        if not rec.deferred:
            self.deferred += 1
        rec.deferred = True
        if props:
            rec.props = {**(rec.props or {}), **props}
        rec.state = DEFERRED  # before lapse: a session's expiry takes unlocked ones only
        if not self.is_dlq and rec.expires is not None and rec.expires <= now:
            self.lapse(rec, now)
        elif self.ns.journal is not None:
            self.ns.journal.record(self, rec)

    def unlock(self, rec: _Record, now: float, props: dict[str, Any] | None = None) -> None:
        """The lock ended without completion (abandoned or expired)."""
        self._release(rec, props)
        if self.is_dlq:
            self.make_available(rec)
            return
        if rec.expires is not None and rec.expires <= now:  # EX-3, EX-11
            rec.state = AVAILABLE  # unlocked: a session's expiry takes it too (EX-12)
            self.lapse(rec, now)
        elif rec.delivery_count >= self.entity.props.max_delivery_count:
            self.remove((rec,))
            self.entity.dead_letter(
                self.fragment,
                rec,
                MAX_DELIVERY_EXCEEDED,
                f"The message could not be consumed after {rec.delivery_count} delivery attempts.",
                now,
            )
        else:
            self.make_available(rec)

    # -- receiving -----------------------------------------------------------------

    def take(self, count: int, lock_seconds: float | None, now: float) -> list[_Record]:
        """Take up to ``count`` available messages, in sequence order, and hand them out."""
        ready, returned = self.ready, self.returned
        if not returned and self.due > now and ready:
            # The common case, with no step per record in Python (#16): nothing returned
            # to take in order among the new, nothing due (so nothing has expired: every
            # expiry is on the timeline), and the front of the line all available. One
            # expiry leaves the timeline undone: a session's, waiting for a listener
            # (EX-13); a take from a session's store holds the session's lock, and taking
            # it made a listener, which carried out the waiting expiries first.
            popleft = ready.popleft
            recs = [popleft() for _ in range(min(count, len(ready)))]
            if not any(map(_state, recs)):  # AVAILABLE is 0
                return self.hand_out(recs, lock_seconds, now)
            ready.extendleft(reversed(recs))  # some were not: one by one, below
        recs = []
        while len(recs) < count:
            if returned and (not ready or returned[0][0] < ready[0].seq):
                rec = heappop(returned)[1]
            elif ready:
                rec = ready.popleft()
            else:
                break
            if rec.state != AVAILABLE:
                continue
            expires = rec.expires
            if expires is not None and expires <= now and not self.is_dlq:
                self.lapse(rec, now)
                if self.session is not None:  # EX-12 took the whole session
                    recs = [r for r in recs if r.state == AVAILABLE]
                continue
            recs.append(rec)
        return self.hand_out(recs, lock_seconds, now)

    def take_deferred(
        self, seqs: Sequence[int], lock_seconds: float | None, now: float
    ) -> list[_Record]:
        """Take deferred messages by sequence number (all must be deferred)."""
        return self.hand_out(self.find(seqs, DEFERRED, "deferred"), lock_seconds, now)

    def hand_out(
        self, recs: list[_Record], lock_seconds: float | None, now: float
    ) -> list[_Record]:
        """Deliver ``recs``: lock them for ``lock_seconds``, or delete them if it is
        ``None`` (receive-and-delete). The caller reads what it hands out of them at
        once (:func:`._record.received_messages`, :func:`._record.received_columns`)."""
        if lock_seconds is None:
            for rec in recs:
                rec.delivery_count += 1
            self.remove(recs)
            return recs
        until = now + lock_seconds
        tokens = self.ns._ids.many(len(recs))
        for rec, token in zip(recs, tokens, strict=True):
            rec.delivery_count += 1
            rec.state = LOCKED
            rec.lock_token = token
            rec.locked_until = until
        self.locked.update(zip(tokens, recs, strict=True))
        if recs:
            self.lock_until(until, recs)
            journal = self.ns.journal
            if journal is not None:
                journal.locked(self, recs)
        return recs

    def renew(self, until: float, recs: list[_Record]) -> None:
        """Extend the locks of ``recs`` (locked here) to ``until``."""
        for rec in recs:
            before, rec.locked_until = rec.locked_until, until
            self._settled(before)
        if recs:
            self.lock_until(until, recs)
            journal = self.ns.journal
            if journal is not None:
                journal.locked(self, recs)

    def find(self, seqs: Sequence[int], state: int, what: str) -> list[_Record]:
        """The records with these sequence numbers, all in ``state``, or MessageNotFound."""
        recs = []
        for seq in dict.fromkeys(seqs):  # a number given twice means one message
            rec = self.records.get(seq)
            if rec is None or rec.state != state:
                raise MessageNotFound(
                    f"No {what} message with sequence number {seq} in {self.path!r}."
                )
            recs.append(rec)
        return recs

    def counts(self) -> tuple[int, int, int]:
        """(active including locked, deferred, scheduled): every message held is one
        of them, so no message is looked at."""
        return len(self.records) - self.deferred - self.scheduled, self.deferred, self.scheduled

    def close(self) -> None:
        """The entity is gone: wake waiters so they see it."""
        self.wake()
        self.timeline.clear()
        self._groups.clear()
