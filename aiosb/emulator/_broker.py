"""The embedded broker: namespaces, entities and message stores.

Design, in short:

* A namespace owns its entities (queues, topics, subscriptions). An entity has one
  fragment, or 16 (2 on premium) when partitioned (PT-4); a subscription has its
  topic's. Each fragment of a queue or subscription has a main store and a dead-letter
  store; a topic's fragments store only its scheduled messages, and it fans every
  message out to its subscriptions, in the same fragment. A sent message goes to the
  fragment its key hashes to, or round robin when it has none (PT-6 to PT-10); the
  fragment index is the high bits of its sequence number, so sequence numbers find
  their fragment.
* A session-enabled entity keeps each session's messages in a store of their own, in
  the fragment the session id hashes to; the fragment's main store then holds only
  scheduled messages. A session has a state and a lock of its own.
* A store keeps its messages by sequence number. Available messages wait in sequence
  order (a deque for new ones, a heap for returned ones); locked ones are indexed by
  lock token. Every deadline (lock expiry, message expiry, scheduled activation) goes on
  the store's timeline, a heap with lazy deletion that is compacted as it grows.
* The namespace keeps one timeline of stores and entities with something due, and one
  ``loop.call_at`` timer for its earliest entry while a connection is open. Each
  operation also runs what is due before it acts, so results are exact whether or not
  the timer has fired yet.
* All state changes are synchronous; only fault injection and long-poll receives
  await. Concurrent calls are therefore safe without locks.

Time is UTC epoch seconds read from the event loop clock (:class:`~aiosb._clock.LoopClock`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import itertools
import math
import os
import re
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Any

from .._clock import CLOCK
from ..entities import (
    FRAGMENTS,
    NEVER,
    TIERS,
    RuntimeProperties,
    parse_entity_path,
)
from ..errors import (
    EntityAlreadyExists,
    EntityNotFound,
    EntityUnavailable,
    InvalidArgument,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessageSizeExceeded,
    OperationTimeout,
    PartitionUnavailable,
    QuotaExceeded,
    SessionCannotBeLocked,
    SessionLockLost,
)
from ..message import PING_CONTENT_TYPE, Message, ReceivedMessage, check_partition_key
from ..protocol import (
    ManagementRequest,
    ReceiveRequest,
    SessionInfo,
    SessionRequest,
    Settlement,
)
from ._faults import Fault, Faults

if TYPE_CHECKING:
    from ._durable import Journal

__all__ = ["EmulatorNamespace", "TTL_EXPIRED", "MAX_DELIVERY_EXCEEDED"]

INF = math.inf
TTL_EXPIRED = "TTLExpiredException"
MAX_DELIVERY_EXCEEDED = "MaxDeliveryCountExceeded"
_NEVER_S = NEVER.total_seconds()
_UTC = _dt.UTC
_MAX_FORWARD_HOPS = 4
_MAX_ENTITIES = 10_000
_MAX_PARTITIONED = 100
#: A partitioned entity's sequence numbers carry the fragment index in these high bits.
FRAGMENT_SHIFT = 48
_NAMESPACE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,49}")

# Record states.
AVAILABLE, LOCKED, DEFERRED, SCHEDULED, GONE = range(5)
# Timeline kinds. A _LOCKS entry holds the records locked until its instant by one
# receive or renew, so a batch of 100 costs one heap push, not 100. A record whose lock
# was settled, or renewed to another instant, is skipped when the entry comes due.
_EXPIRE = object()
_ACTIVATE = object()
_LOCKS = object()


#: A time to live this long or longer means never (as TimeSpan.MaxValue does): past it,
#: an expiry instant would lie beyond the year 9999, which no datetime can hold.
_FAR_S = min(_NEVER_S, 2.0**37)  # about 4,355 years


def _seconds(delta: _dt.timedelta) -> float:
    seconds = delta.total_seconds()
    return INF if seconds >= _FAR_S else seconds


def _utc(ts: float | None) -> _dt.datetime | None:
    return None if ts is None else _dt.datetime.fromtimestamp(ts, _UTC)


def _hash(key: str) -> int:
    """A hash of a partition key that is the same in every process and run (PT-9)."""
    return zlib.crc32(key.encode("utf-8"))


class _Ids:
    """Cheap unique ids shaped like GUIDs: a random prefix and a counter."""

    __slots__ = ("_count", "_prefix")

    def __init__(self) -> None:
        raw = os.urandom(10).hex()
        self._prefix = f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-%012x"
        self._count = itertools.count(1)

    def __call__(self) -> str:
        return self._prefix % next(self._count)


class _Record:
    """One message held by a store: the sent fields plus broker state."""

    __slots__ = (
        "body",
        "content_type",
        "correlation_id",
        "deferred",
        "delivery_count",
        "dl_desc",
        "dl_reason",
        "dl_source",
        "enqueued",
        "expires",
        "frag",
        "key",
        "lock_token",
        "locked_until",
        "message_id",
        "partition_key",
        "props",
        "reply_to",
        "reply_to_session_id",
        "scheduled",
        "seq",
        "session_id",
        "size",
        "state",
        "subject",
        "to",
        "ttl",
        "ttl_td",
    )

    def __init__(self, msg: Message, message_id: str, size: int) -> None:
        self.body = msg.body
        self.message_id = message_id
        self.session_id = msg.session_id
        self.partition_key = msg.partition_key
        ttl = msg.time_to_live
        self.ttl = INF if ttl is None else _seconds(ttl)
        self.ttl_td = ttl
        self.scheduled = msg.scheduled_enqueue_time
        self.content_type = msg.content_type
        self.correlation_id = msg.correlation_id
        self.subject = msg.subject
        self.reply_to = msg.reply_to
        self.reply_to_session_id = msg.reply_to_session_id
        self.to = msg.to
        props = msg.application_properties
        self.props = dict(props) if props else None
        self.size = size
        self.seq = 0
        self.enqueued = 0.0
        self.expires: float | None = None
        self.delivery_count = 0
        self.lock_token: str | None = None
        self.locked_until: float | None = None
        self.state = AVAILABLE
        self.deferred = False
        self.dl_reason: str | None = None
        self.dl_desc: str | None = None
        self.dl_source: str | None = None
        self.frag = 0
        self.key: str | None = None

    def clone(self) -> _Record:
        """A fresh copy with the sent fields and times, and no delivery state."""
        new = _Record.__new__(_Record)
        for name in _Record.__slots__:
            setattr(new, name, getattr(self, name))
        if self.props:
            new.props = dict(self.props)
        new.delivery_count = 0
        new.lock_token = None
        new.locked_until = None
        new.state = AVAILABLE
        new.deferred = False
        return new

    def received(self, entity_path: str) -> ReceivedMessage:
        """The plain-data view handed to a receiver (built slot by slot: this is the
        hot path of every receive, and a keyword call costs four times as much)."""
        m = _new(ReceivedMessage)
        m.body = self.body
        m.message_id = self.message_id
        m.session_id = self.session_id
        m.partition_key = self.partition_key
        m.time_to_live = self.ttl_delta()
        m.scheduled_enqueue_time = self.scheduled
        m.content_type = self.content_type
        m.correlation_id = self.correlation_id
        m.subject = self.subject
        m.reply_to = self.reply_to
        m.reply_to_session_id = self.reply_to_session_id
        m.to = self.to
        props = self.props
        m.application_properties = dict(props) if props else {}
        m.sequence_number = self.seq
        m.enqueued_timestamp = self.enqueued
        m.expires_timestamp = self.expires
        m.delivery_count = self.delivery_count
        m.lock_token = self.lock_token
        m.locked_until_timestamp = self.locked_until
        m.dead_letter_reason = self.dl_reason
        m.dead_letter_error_description = self.dl_desc
        m.dead_letter_source = self.dl_source
        m.state = "deferred" if self.deferred else _STATE_NAMES[self.state]
        m.entity_path = entity_path
        return m

    def ttl_delta(self) -> _dt.timedelta | None:
        ttl = self.ttl
        if ttl == INF:
            return None
        cached = self.ttl_td
        if cached is None or cached.total_seconds() != ttl:
            cached = self.ttl_td = _dt.timedelta(seconds=ttl)
        return cached


_new = object.__new__


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


_STATE_NAMES = {
    AVAILABLE: "active",
    LOCKED: "active",
    DEFERRED: "deferred",
    SCHEDULED: "scheduled",
    GONE: "active",
}


class _Store:
    """The messages of one fragment of a queue, subscription, dead-letter queue or topic
    schedule, or of one session."""

    __slots__ = (
        "_compact_at",
        "_order",
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
        ns: EmulatorNamespace,
        entity: _Entity,
        is_dlq: bool,
        fragment: int = 0,
        session: _Session | None = None,
    ) -> None:
        self.ns = ns
        self.entity = entity
        self.is_dlq = is_dlq
        self.fragment = fragment
        self.session = session
        self.seqs = entity.seqs[fragment]
        self.path = entity.path + ("/$DeadLetterQueue" if is_dlq else "")
        self.records: dict[int, _Record] = {}
        self.ready: deque[_Record] = deque()
        self.returned: list[tuple[int, _Record]] = []
        self.locked: dict[str, _Record] = {}
        self.timeline: list[tuple[float, int, object, Any]] = []
        self.waiters: list[asyncio.Future[None]] = []
        self.due = INF
        self.scheduled = 0
        self.size = 0
        self._order = itertools.count()
        self._compact_at = 1024

    # -- timeline ------------------------------------------------------------------

    def _push(self, when: float, kind: object, rec: _Record) -> None:
        heappush(self.timeline, (when, next(self._order), kind, rec))
        if when < self.due:
            self.due = when
            self.ns._register(when, self)
        if len(self.timeline) > self._compact_at:
            self._compact()

    @staticmethod
    def _live(kind: object, item: Any, when: float) -> bool:
        if kind is _EXPIRE:  # a locked message keeps its entry: the lock may end first
            return item.state in (AVAILABLE, DEFERRED, LOCKED) and item.expires == when
        if kind is _ACTIVATE:
            return item.state == SCHEDULED
        return any(_holds(rec, when) for rec in item)

    def _compact(self) -> None:
        self.timeline = [e for e in self.timeline if self._live(e[2], e[3], e[0])]
        heapify(self.timeline)
        self._compact_at = 2 * len(self.timeline) + 1024

    def on_due(self, now: float) -> None:
        """Run every deadline that has come: lock expiries, expiries, activations."""
        timeline = self.timeline
        while timeline and timeline[0][0] <= now:
            when, _, kind, item = heappop(timeline)
            if kind is _LOCKS:
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

    # -- adding --------------------------------------------------------------------

    def add(self, rec: _Record, now: float) -> None:
        """Store ``rec`` as available (it has its sequence number and times set)."""
        rec.state = AVAILABLE
        self.records[rec.seq] = rec
        self.size += rec.size
        self.entity.bytes += rec.size
        ready = self.ready
        if ready and rec.seq < ready[-1].seq:  # an activated scheduled message
            heappush(self.returned, (rec.seq, rec))
        else:
            ready.append(rec)
        if rec.expires is not None and not self.is_dlq:
            self._push(rec.expires, _EXPIRE, rec)
        if self.waiters or self.session:
            self.wake()
        if self.ns.journal is not None:
            self.ns.journal.record(self, rec)

    def add_scheduled(self, rec: _Record) -> None:
        """Hold ``rec`` until its enqueue time (EX-5)."""
        rec.state = SCHEDULED
        self.records[rec.seq] = rec
        self.size += rec.size
        self.entity.bytes += rec.size
        self.scheduled += 1
        self._push(rec.enqueued, _ACTIVATE, rec)
        if self.ns.journal is not None:
            self.ns.journal.record(self, rec)

    def activate(self, rec: _Record, now: float) -> None:
        """A scheduled message's time has come: make it available (or fan it out)."""
        self.scheduled -= 1
        self.remove(rec)
        self.ns._deliver(self.entity, rec, now, 0, keep_seq=True)

    def make_available(self, rec: _Record) -> None:
        """Return ``rec`` to the available messages, in sequence order."""
        if self.ns.journal is not None:
            self.ns.journal.record(self, rec)
        if rec.deferred:
            rec.state = DEFERRED
            return
        rec.state = AVAILABLE
        heappush(self.returned, (rec.seq, rec))
        if self.waiters or self.session:
            self.wake()

    def wake(self) -> None:
        """Wake every long-poll receive waiting on this store (and, for a session's
        store, every receiver waiting for the next available session)."""
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

    def remove(self, rec: _Record) -> None:
        rec.state = GONE
        if self.records.pop(rec.seq, None) is not None:
            self.size -= rec.size
            self.entity.bytes -= rec.size
            if self.ns.journal is not None:
                self.ns.journal.record(self, rec)

    def expire(self, rec: _Record, now: float) -> None:
        """Expiry has come for an unlocked message: dead-letter or drop it (EX-10)."""
        self.remove(rec)
        if self.entity.props.dead_lettering_on_message_expiration:
            self.ns._dead_letter(
                self, rec, TTL_EXPIRED, "The message expired and was dead lettered.", now
            )

    def lapse(self, rec: _Record, now: float) -> None:
        """An unlocked message is past its expiry: expire it, or in a session, the
        whole session (EX-12), once a listener is there (EX-13)."""
        if self.session is None:
            self.expire(rec, now)
        else:
            self.session.expire(now)

    def defer(self, rec: _Record, now: float, props: dict[str, Any] | None = None) -> None:
        """Set a locked message aside for ``receive_deferred``: no delivery-count check,
        since deferring is not a failed delivery; expiry still applies (EX-3)."""
        self.locked.pop(rec.lock_token, None)  # type: ignore[arg-type]
        rec.lock_token = None
        rec.locked_until = None
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
        self.locked.pop(rec.lock_token, None)  # type: ignore[arg-type]
        rec.lock_token = None
        rec.locked_until = None
        if props:
            rec.props = {**(rec.props or {}), **props}
        if self.is_dlq:
            self.make_available(rec)
            return
        if rec.expires is not None and rec.expires <= now:  # EX-3, EX-11
            rec.state = AVAILABLE  # unlocked: a session's expiry takes it too (EX-12)
            self.lapse(rec, now)
        elif rec.delivery_count >= self.entity.props.max_delivery_count:
            self.remove(rec)
            self.ns._dead_letter(
                self,
                rec,
                MAX_DELIVERY_EXCEEDED,
                f"The message could not be consumed after {rec.delivery_count} delivery attempts.",
                now,
            )
        else:
            self.make_available(rec)

    # -- receiving -----------------------------------------------------------------

    def take(self, count: int, lock_seconds: float | None, now: float) -> list[ReceivedMessage]:
        """Take up to ``count`` available messages, in sequence order, and hand them out."""
        recs: list[_Record] = []
        ready, returned = self.ready, self.returned
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
    ) -> list[ReceivedMessage]:
        """Take deferred messages by sequence number (all must be deferred)."""
        return self.hand_out(self.find(seqs, DEFERRED, "deferred"), lock_seconds, now)

    def hand_out(
        self, recs: list[_Record], lock_seconds: float | None, now: float
    ) -> list[ReceivedMessage]:
        """Deliver ``recs``: lock them for ``lock_seconds``, or delete them if it is
        ``None`` (receive-and-delete)."""
        path = self.path
        out = []
        if lock_seconds is None:
            for rec in recs:
                rec.delivery_count += 1
                self.remove(rec)
                out.append(rec.received(path))
            return out
        until = now + lock_seconds
        new_token = self.ns._ids
        locked = self.locked
        for rec in recs:
            rec.delivery_count += 1
            token = new_token()
            rec.state = LOCKED
            rec.lock_token = token
            rec.locked_until = until
            locked[token] = rec
            out.append(rec.received(path))
        if recs:
            self._push(until, _LOCKS, recs)
            journal = self.ns.journal
            if journal is not None:
                for rec in recs:
                    journal.record(self, rec)
        return out

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
        """(active including locked, deferred, scheduled)."""
        active = deferred = 0
        for rec in self.records.values():
            if rec.deferred:
                deferred += 1
            elif rec.state in (AVAILABLE, LOCKED):
                active += 1
        return active, deferred, self.scheduled

    def close(self) -> None:
        """The entity is gone: wake waiters so they see it."""
        self.wake()
        self.timeline.clear()


class _Session:
    """One session of a session-enabled queue or subscription: its messages (a store in
    the fragment its id hashes to), its state, and its lock."""

    __slots__ = ("entity", "id", "lock", "locked_until", "state", "store")

    def __init__(self, entity: _Entity, session_id: str) -> None:
        self.entity = entity
        self.id = session_id
        fragment = _hash(session_id) % entity.nfrag if entity.nfrag > 1 else 0  # PT-6
        self.store = _Store(entity.ns, entity, False, fragment, self)
        self.state: bytes | None = None
        self.lock: str | None = None
        self.locked_until = 0.0

    def __repr__(self) -> str:
        return f"<_Session {self.entity.path}:{self.id} locked={self.lock is not None}>"

    def lock_for(self, lock: str, now: float, until: float) -> None:
        """Take the session lock (an accept): the entity has one more listener."""
        self.lock = lock
        self.locked_until = until
        self.entity.ns._register(until, self)
        self.entity.add_listener(+1, now)

    def renew(self, until: float) -> None:
        """Extend the session lock and the locks of the messages received under it."""
        self.locked_until = until
        self.entity.ns._register(until, self)
        store = self.store
        recs = list(store.locked.values())
        for rec in recs:
            rec.locked_until = until
        if recs:
            store._push(until, _LOCKS, recs)
            journal = self.entity.ns.journal
            if journal is not None:
                for rec in recs:
                    journal.record(store, rec)

    def release(self, now: float) -> None:
        """Give the session up (or its lock expired): its locked messages come back."""
        if self.lock is None:
            return
        self.lock = None
        store = self.store
        for rec in list(store.locked.values()):
            store.unlock(rec, now)
        self.entity.add_listener(-1, now)
        _wake(store.waiters)  # a receive waiting in the session learns it is gone
        _wake(self.entity.session_waiters)
        self.entity.forget_if_idle(self)

    def on_due(self, now: float) -> None:
        if self.lock is not None and self.locked_until <= now and not self.entity.deleted:
            self.release(now)

    def expire(self, now: float) -> None:
        """EX-12: a message of the session is past its TTL, so all of them expire; EX-13:
        only while a receiver is accepting sessions on the entity (else it waits)."""
        entity = self.entity
        if not entity.listeners:
            entity.expiry_pending.add(self)
            return
        store = self.store
        journal = entity.ns.journal
        for rec in list(store.records.values()):
            if rec.expires is None or rec.expires > now:
                rec.expires = now
                if journal is not None and rec.state == LOCKED:
                    journal.record(store, rec)
            if rec.state in (AVAILABLE, DEFERRED):
                store.expire(rec, now)
            # a locked message expires when its lock ends (EX-3)
        entity.forget_if_idle(self)

    def due_expiry(self, now: float) -> bool:
        """Whether a message of the session is past its TTL."""
        return any(
            r.expires is not None and r.expires <= now and r.state != LOCKED
            for r in self.store.records.values()
        )


class _Entity:
    """A queue, topic or subscription."""

    def __init__(
        self, ns: EmulatorNamespace, kind: str, path: str, props: Any, now: float, nfrag: int = 1
    ):
        self.ns = ns
        self.kind = kind
        self.path = path
        self.key = path.lower()
        self.props = props
        self.created = self.updated = self.activity = now
        self.deleted = False
        self.bytes = 0  # held over every store
        self.nfrag = nfrag
        self.seqs = [itertools.count((f << FRAGMENT_SHIFT) + 1) for f in range(nfrag)]
        self.rr = itertools.count(int.from_bytes(os.urandom(1)))  # keyless sends
        self.rr_receive = itertools.count()  # where a receive starts gathering
        self.topic: _Entity | None = None
        self.subscriptions: dict[str, _Entity] = {}
        self.dup: dict[str, float] = {}
        self.dup_order: deque[tuple[float, str]] = deque()
        self.sessions: dict[str, _Session] = {}
        self.session_waiters: list[asyncio.Future[None]] = []
        self.listeners = 0
        self.expiry_pending: set[_Session] = set()
        self.apply(props)
        self.fragments = [_Store(ns, self, False, f) for f in range(nfrag)]
        self.dlqs = [_Store(ns, self, True, f) for f in range(nfrag)] if kind != "topic" else []
        self._idle_armed = INF
        self.arm_idle()

    def apply(self, props: Any) -> None:
        """Take a (validated) description into force."""
        self.props = props
        self.sessionful = bool(getattr(props, "requires_session", False))
        self.plain = self.kind == "queue" and not props.forward_to and not self.sessionful
        self.ttl = _seconds(props.default_message_time_to_live)
        self.lock_seconds = (
            props.lock_duration.total_seconds() if hasattr(props, "lock_duration") else 0.0
        )
        self.idle = _seconds(props.auto_delete_on_idle)
        self.dup_window = (
            props.duplicate_detection_history_time_window.total_seconds()
            if getattr(props, "requires_duplicate_detection", False)
            else 0.0
        )

    def stores(self) -> list[_Store]:
        """Every store: fragments, dead-letter queues, sessions."""
        return self.fragments + self.dlqs + [s.store for s in self.sessions.values()]

    def main_stores(self) -> list[_Store]:
        """The stores that hold active messages: fragments and sessions."""
        return self.fragments + [s.store for s in self.sessions.values()]

    def fragment_for(self, rec: _Record) -> int:
        """The fragment a forwarded or fanned-out message goes to here: its key's
        (PT-19), else round robin."""
        n = self.nfrag
        if n == 1:
            return 0
        key = rec.key
        if key is None:
            key = rec.session_id if rec.session_id is not None else rec.partition_key
            if key is None and self.dup_window:
                key = rec.message_id
        return _hash(key) % n if key is not None else next(self.rr) % n

    # -- sessions --------------------------------------------------------------------

    def session(self, session_id: str) -> _Session:
        """The session with this id, made on first use."""
        found = self.sessions.get(session_id)
        if found is None:
            found = self.sessions[session_id] = _Session(self, session_id)
        return found

    def forget_if_idle(self, session: _Session) -> None:
        """Drop a session that holds nothing: no messages, no state, no lock."""
        if session.lock is None and session.state is None and not session.store.records:
            if self.sessions.get(session.id) is session:
                del self.sessions[session.id]
            self.expiry_pending.discard(session)

    def add_listener(self, delta: int, now: float) -> None:
        """A receiver starts or stops accepting sessions (EX-13); the first one lets the
        session expiries that waited for a listener happen."""
        self.listeners += delta
        if self.listeners > 0 and self.expiry_pending:
            pending, self.expiry_pending = self.expiry_pending, set()
            for session in pending:
                if session.due_expiry(now):
                    session.expire(now)

    # -- auto delete on idle (EX-14..16) -------------------------------------------

    def arm_idle(self) -> None:
        if self.idle == INF:
            return
        when = self.activity + self.idle
        if when < self._idle_armed:
            self._idle_armed = when
            self.ns._register(when, self)

    def on_due(self, now: float) -> None:
        self._idle_armed = INF
        if self.deleted or self.idle == INF:
            return
        if self.busy():
            self.activity = now
        if self.activity + self.idle <= now:
            self.ns._delete_entity(self)
        else:
            self.arm_idle()

    def busy(self) -> bool:
        """Whether the entity counts as in use though no operation touched it."""
        if getattr(self.props, "forward_to", None):  # EX-16
            return True
        if self.listeners or any(s.listeners for s in self.subscriptions.values()):
            return True
        stores = self.main_stores()
        if self.kind == "topic":
            for sub in self.subscriptions.values():
                stores += sub.main_stores()
        return any(s.scheduled or any(not f.done() for f in s.waiters) for s in stores)

    def touch(self, now: float) -> None:
        """Record activity (EX-15); activity on a subscription counts for its topic."""
        self.activity = now
        if self.topic is not None:
            self.topic.activity = now

    # -- duplicate detection -------------------------------------------------------

    def is_duplicate(self, message_id: str, now: float) -> bool:
        order, seen = self.dup_order, self.dup
        horizon = now - self.dup_window
        while order and order[0][0] <= horizon:
            _, old = order.popleft()
            if seen.get(old, INF) <= horizon:
                del seen[old]
        if message_id in seen:
            return True
        seen[message_id] = now
        order.append((now, message_id))
        return False

    def description(self) -> Any:
        """A copy of the description with times, as ``get`` returns it."""
        desc = dataclasses.replace(
            self.props,
            created_at_utc=_utc(self.created),
            updated_at_utc=_utc(self.updated),
            accessed_at_utc=_utc(self.activity),
        )
        if getattr(desc, "enable_partitioning", False) and self.ns.tier == "standard":
            desc.max_size_in_megabytes *= FRAGMENTS["standard"]  # PT-4
        return desc


class EmulatorNamespace:
    """One emulated Service Bus namespace.

    Get one with :func:`aiosb.emulator.namespace`; connect to it with
    ``aiosb.connect("memory://NAME")``. Two connections to the same name in one process
    share it.

    Attributes:
        name: The namespace name.
        tier: ``"standard"`` (default), ``"premium"`` or ``"basic"``.
        faults: The fault injection API (:class:`~aiosb.emulator.Faults`).
        max_message_size: The largest message and batch, in bytes (256 KB on standard).
    """

    def __init__(self, name: str, tier: str = "standard") -> None:
        if not isinstance(name, str) or not _NAMESPACE_NAME.fullmatch(name):
            raise InvalidArgument(
                f"namespace name {name!r} is not valid: use 1 to 50 letters, digits and "
                "hyphens, starting with a letter."
            )
        if tier not in TIERS:
            raise InvalidArgument(f"tier is {tier!r}; it must be one of {', '.join(TIERS)}.")
        self.name = name
        self.tier = tier
        self.max_message_size = 1024 * 1024 if tier == "premium" else 256 * 1024
        self.clock = CLOCK
        self.faults = Faults(name, self._wake_all, self._fragment_count)
        self._ids = _Ids()
        self._entities: dict[str, _Entity] = {}
        self._paths: dict[tuple[str, str | None], tuple[str, bool]] = {}
        self._timeline: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self._next_due = INF
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users = 0
        self._handle: asyncio.TimerHandle | None = None
        self._handle_when = INF
        self.journal: Journal | None = None  # durable mode (aiosb serve --data-dir)

    def __repr__(self) -> str:
        return (
            f"<EmulatorNamespace {self.name} tier={self.tier} entities={len(self._entities)} "
            f"connections={self._users}>"
        )

    # -- lifetime and time ----------------------------------------------------------

    def attach(self) -> None:
        """A connection opens: bind to the running loop and arm the timer."""
        loop = asyncio.get_running_loop()
        if self._users and self._loop is not loop and not self._loop.is_closed():  # type: ignore[union-attr]
            raise InvalidOperation(
                f"memory://{self.name} is open in another event loop; an embedded emulator "
                "namespace serves one loop at a time (serve it with 'aiosb serve' to share "
                "it across loops and processes)."
            )
        if self._loop is not loop:
            self._users = 0
            self._cancel_timer()
        self._loop = loop
        self._users += 1
        self._rearm()

    def detach(self) -> None:
        """A connection closes: the last one stops the timer."""
        self._users = max(0, self._users - 1)
        if not self._users:
            self._cancel_timer()
            self._loop = None

    def detach_all(self) -> None:
        """Forget every connection (the namespace is being reset)."""
        self._users = 0
        self._cancel_timer()
        self._loop = None
        self._wake_all()

    def _cancel_timer(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._handle_when = INF

    def now(self) -> float:
        """UTC seconds now, after running everything that is due."""
        now = self.clock.now()
        if now >= self._next_due:
            self._run_due(now)
        return now

    def _register(self, when: float, target: Any) -> None:
        heappush(self._timeline, (when, next(self._order), target))
        if when < self._next_due:
            self._next_due = when
            self._rearm()

    def _run_due(self, now: float) -> None:
        timeline = self._timeline
        while timeline and timeline[0][0] <= now:
            target = heappop(timeline)[2]
            target.on_due(now)
        self._next_due = timeline[0][0] if timeline else INF
        self._rearm()

    def _rearm(self) -> None:
        loop = self._loop
        when = self._next_due
        if loop is None or when == INF or when >= self._handle_when:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle_when = when
        self._handle = loop.call_at(self.clock.loop_time(when), self._on_timer)

    def _on_timer(self) -> None:
        when = self._handle_when
        self._handle = None
        self._handle_when = INF
        now = self.clock.now()
        if now < when:  # float rounding at the timer's edge: the deadline has come
            self.clock.advance_to(when)
            now = when
        self._run_due(now)

    def _wake_all(self) -> None:
        for entity in list(self._entities.values()):
            for store in entity.stores():
                store.wake()
            _wake(entity.session_waiters)

    def _fragment_count(self, path: str) -> int:
        entity, dlq = self._resolve(path)
        if entity.kind == "subscription" or dlq:
            raise InvalidArgument(
                f"fail_fragment takes a queue or topic; {path!r} shares the fragments (and "
                "fragment faults) of its topic or queue."
            )
        return entity.nfrag

    # -- lookup --------------------------------------------------------------------

    def _resolve(self, path: str, sub_queue: str | None = None) -> tuple[_Entity, bool]:
        """The entity for ``path`` and whether its dead-letter queue is meant."""
        cached = self._paths.get((path, sub_queue))
        if cached is None:
            parsed = parse_entity_path(path, sub_queue)
            cached = (parsed.path.lower(), parsed.sub_queue is not None)
            if len(self._paths) > 10_000:
                self._paths.clear()
            self._paths[(path, sub_queue)] = cached
        entity = self._entities.get(cached[0])
        if entity is None:
            raise EntityNotFound(
                f"The messaging entity {path!r} does not exist in namespace {self.name!r}."
            )
        return entity, cached[1]

    def _receivable(self, path: str, sub_queue: str | None, operation: str) -> tuple[_Entity, bool]:
        """The entity to receive or settle on, and whether its dead-letter queue is meant."""
        entity, dlq = self._resolve(path, sub_queue)
        if entity.kind == "topic":
            raise InvalidOperation(
                f"Cannot {operation} from topic {path!r}: receive from one of its "
                "subscriptions ('{topic}/subscriptions/{name}')."
            )
        status = entity.props.status
        if status in ("Disabled", "ReceiveDisabled"):
            raise EntityUnavailable(f"The entity {path!r} is {status}: it cannot {operation}.")
        return entity, dlq

    def _session_entity(self, path: str) -> _Entity:
        """The session-enabled queue or subscription at ``path``."""
        entity, dlq = self._receivable(path, None, "accept a session")
        if dlq or not entity.sessionful:
            raise InvalidOperation(
                f"{path!r} is not session-enabled: create it with requires_session=True, "
                "or receive without a session_id."
            )
        return entity

    def _down(self, operation: str, path: str) -> dict[int, Fault] | None:
        """The fragments of ``path`` that are down for ``operation`` (``None``: none)."""
        if not self.faults.active:
            return None
        return self.faults.fragment_faults(operation, path) or None

    def _held(self, entity: _Entity, session_id: str, lock: str | None, now: float) -> _Session:
        """The session ``session_id``, if ``lock`` holds it; else SessionLockLost."""
        if not entity.sessionful:
            raise InvalidOperation(
                f"{entity.path!r} does not require sessions: receive without a session_id."
            )
        session = entity.sessions.get(session_id)
        if lock is None:
            raise SessionLockLost(
                f"Session {session_id!r} of {entity.path!r} was not accepted: accept it "
                "(open the session receiver) before receiving or settling."
            )
        if session is None or session.lock != lock or session.locked_until <= now:
            raise SessionLockLost(
                f"The lock on session {session_id!r} of {entity.path!r} is not held: it "
                "expired, was released, or another receiver holds the session now."
            )
        return session

    # -- data operations -----------------------------------------------------------

    async def send(
        self, path: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        """Enqueue ``messages`` on a queue or topic as one batch (all or none).

        With ``transaction``, they are one transaction's sends (PT-16 to PT-18).
        """
        entity, records, now = await self._prepare_send(path, messages, transaction)
        for rec in records:
            if rec is None:  # a ping: accepted, never delivered (PN-14)
                continue
            if entity.dup_window and entity.is_duplicate(rec.message_id, now):
                continue
            at = rec.scheduled
            if at is not None and at.timestamp() > now:
                self._schedule(entity, rec, at.timestamp())
                continue
            rec.enqueued = now
            if entity.plain:  # the common case, inlined: a queue that keeps what it gets
                ttl = rec.ttl if rec.ttl < entity.ttl else entity.ttl
                rec.ttl = ttl
                rec.expires = None if ttl == INF else now + ttl
                store = entity.fragments[rec.frag]
                rec.seq = next(store.seqs)
                store.add(rec, now)
            else:
                self._deliver(entity, rec, now, 0)

    async def _prepare_send(
        self, path: str, messages: Sequence[Message], transaction: bool = False
    ) -> tuple[_Entity, list[_Record | None], float]:
        """Check the faults, validate the batch and choose each message's fragment; a
        fragment in the way raises or, for a timeout fault, is waited out and the whole
        preparation done again. Returns the entity (touched), the records and the time."""
        faults = self.faults
        while True:
            if faults.active:
                await faults.check("send", path)
            now = self.now()
            entity = self._send_target(path)
            records = self._records(entity, messages, transaction)
            if entity.nfrag == 1:
                break
            blocked = self._route(entity, records, self._down("send", path))
            if blocked is None:
                break
            await faults.apply(blocked, "send", path)
        entity.touch(now)
        return entity, records, now

    def _route(
        self, entity: _Entity, records: list[_Record | None], down: dict[int, Fault] | None
    ) -> Fault | None:
        """Choose each record's fragment (PT-6 to PT-10); return the fault in the way of a
        keyed message, or of every fragment, if there is one."""
        n = entity.nfrag
        keyless = -1
        for rec in records:
            if rec is None:
                continue
            key = rec.key
            if key is not None:  # pinned: its fragment or nothing (PT-9)
                frag = _hash(key) % n
                if down is not None and frag in down:
                    return down[frag]
            else:  # one round-robin fragment for the keyless part of a batch (PT-10)
                if keyless < 0:
                    for _ in range(n):
                        keyless = next(entity.rr) % n
                        if down is None or keyless not in down:
                            break
                    else:
                        return next(iter(down.values()))  # type: ignore[union-attr]
                frag = keyless
            rec.frag = frag
        return None

    async def schedule(self, path: str, messages: Sequence[Message]) -> list[int]:
        """Schedule messages; return their sequence numbers (EX-5)."""
        for msg in messages:
            if isinstance(msg, Message) and msg.scheduled_enqueue_time is None:
                raise InvalidArgument(
                    "schedule needs each message's scheduled_enqueue_time to be set."
                )
        entity, records, now = await self._prepare_send(path, messages)
        return [
            self._schedule(entity, rec, max(rec.scheduled.timestamp(), now))
            for rec in records
            if rec is not None
        ]

    def _by_fragment(self, entity: _Entity, seqs: Sequence[int]) -> dict[int, list[int]]:
        """Sequence numbers grouped by the fragment their high bits name."""
        groups: dict[int, list[int]] = {}
        for seq in seqs:
            if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
                raise InvalidArgument(f"sequence number {seq!r} is not a positive integer.")
            groups.setdefault(min(seq >> FRAGMENT_SHIFT, entity.nfrag - 1), []).append(seq)
        return groups

    async def cancel_scheduled(self, path: str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages (all named ones must be scheduled)."""
        faults = self.faults
        while True:
            if faults.active:
                await faults.check("send", path)
            now = self.now()
            entity = self._send_target(path)
            groups = self._by_fragment(entity, sequence_numbers)
            down = self._down("send", path)
            blocked = next((down[f] for f in groups if down is not None and f in down), None)
            if blocked is None:
                break
            await faults.apply(blocked, "send", path)
        found = [
            (entity.fragments[f], entity.fragments[f].find(seqs, SCHEDULED, "scheduled"))
            for f, seqs in groups.items()
        ]
        entity.touch(now)
        for store, recs in found:
            for rec in recs:
                store.scheduled -= 1
                store.remove(rec)

    async def receive(self, path: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        """Receive, peek, or fetch deferred messages; long-polls up to ``max_wait``.

        A partitioned entity's receive gathers from every fragment that is up (PT-12); a
        peek answers from one fragment and up to the response size limit, so it may
        return fewer than asked (PT-13).
        """
        count = request.max_messages
        if not isinstance(count, int) or count < 1:
            raise InvalidArgument(f"max_messages is {count!r}; it must be at least 1.")
        max_wait = request.max_wait
        deadline = None
        loop = asyncio.get_running_loop()
        if max_wait is not None:
            if max_wait < 0:
                raise InvalidArgument(f"max_wait is {max_wait} seconds; it must not be negative.")
            deadline = loop.time() + max_wait
        lock = request.mode == "peek_lock"
        faults = self.faults
        while True:
            if faults.active:
                await faults.check("receive", path)
            now = self.now()
            entity, dlq = self._receivable(path, request.sub_queue, "receive")
            entity.touch(now)
            session = None
            if request.session_id is not None and not dlq:
                if request.peek and request.session_lock is None:
                    if not entity.sessionful:
                        raise InvalidOperation(
                            f"{entity.path!r} does not require sessions: peek without a session_id."
                        )
                    browsed = entity.sessions.get(request.session_id)
                    stores = [] if browsed is None else [browsed.store]
                else:
                    session = self._held(entity, request.session_id, request.session_lock, now)
                    stores = [session.store]
            elif entity.sessionful and not dlq and not request.peek:
                raise InvalidOperation(
                    f"{entity.path!r} requires sessions: receive with a session receiver "
                    "(session_id=... or aiosb.NEXT_AVAILABLE_SESSION)."
                )
            elif dlq:
                stores = entity.dlqs
            else:
                stores = entity.main_stores() if request.peek else entity.fragments
            down = self._down("receive", path)
            if request.peek:
                return self._peek(stores, count, request.from_sequence_number, down)
            if session is not None:
                lock_seconds = session.locked_until - now if lock else None
            else:
                lock_seconds = entity.lock_seconds if lock else None
            if request.sequence_numbers is not None:
                found_or_fault = self._take_deferred(
                    entity, stores, request.sequence_numbers, lock_seconds, now, down, path
                )
                if isinstance(found_or_fault, Fault):
                    await faults.apply(found_or_fault, "receive", path)
                    continue
                return found_or_fault
            if len(stores) == 1:
                if down is not None and stores[0].fragment in down:
                    await faults.apply(down[stores[0].fragment], "receive", path)
                    continue
                found = stores[0].take(count, lock_seconds, now)
            else:
                live = [s for s in stores if down is None or s.fragment not in down]
                if not live:
                    await faults.apply(next(iter(down.values())), "receive", path)  # type: ignore[union-attr]
                    continue
                start = next(entity.rr_receive) % len(live)  # PT-12: any fragment yields
                found = []
                for store in live[start:] + live[:start]:
                    found += store.take(count - len(found), lock_seconds, now)
                    if len(found) >= count:
                        break
                stores = live
            if found:
                return found
            if deadline is None:
                remaining = None
            else:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return found
            if session is not None:  # wake when the session lock ends, to say so
                lock_left = session.locked_until - now
                remaining = lock_left if remaining is None else min(remaining, lock_left)
            fut = loop.create_future()
            for store in stores:
                store.waiters.append(fut)
            try:
                async with asyncio.timeout(remaining):
                    await fut
            except TimeoutError:
                if session is not None and (deadline is None or loop.time() < deadline):
                    # The session lock ended first: say so on the next pass, with the
                    # clock at that instant whatever the float rounding of the timer.
                    self.clock.advance_to(session.locked_until)
                    continue
                return []
            finally:
                if not fut.done():
                    fut.cancel()
                for store in stores:  # a timed-out or cancelled wait leaves nothing behind
                    try:
                        store.waiters.remove(fut)
                    except ValueError:
                        pass

    def _take_deferred(
        self,
        entity: _Entity,
        stores: list[_Store],
        seqs: Sequence[int],
        lock_seconds: float | None,
        now: float,
        down: dict[int, Fault] | None,
        path: str,
    ) -> list[ReceivedMessage] | Fault:
        """Deferred messages by sequence number, from the fragments their numbers name;
        or the fault of a fragment they need that is down."""
        if len(stores) == 1 and stores[0].session is not None:
            groups = {0: list(seqs)}
            by_frag = {0: stores[0]}
        else:
            groups = self._by_fragment(entity, seqs)
            by_frag = {s.fragment: s for s in stores if s.session is None}
        for f in groups:
            store = by_frag.get(f)
            if down is not None and store is not None and store.fragment in down:
                return down[store.fragment]
        found = []
        for f, group in groups.items():
            store = by_frag.get(f)
            if store is None:
                raise MessageNotFound(
                    f"No deferred message with sequence number {group[0]} in {path!r}."
                )
            found.append((store, store.find(group, DEFERRED, "deferred")))
        out: list[ReceivedMessage] = []
        for store, recs in found:
            out += store.hand_out(recs, lock_seconds, now)
        return out

    def _peek(
        self, stores: list[_Store], count: int, from_seq: int, down: dict[int, Fault] | None
    ) -> list[ReceivedMessage]:
        """Browse from ``from_seq``: from the first fragment with messages there, and no
        more than one response holds (PT-13)."""
        live = [s for s in stores if down is None or s.fragment not in down]
        if stores and not live:  # every fragment is down: that is no empty entity
            raise PartitionUnavailable(
                f"Every fragment of {stores[0].path!r} is unavailable; nothing to browse."
            )
        candidates = [
            rec for store in live for rec in store.records.values() if rec.seq >= from_seq
        ]
        if not candidates:
            return []
        fragment = min(rec.seq for rec in candidates) >> FRAGMENT_SHIFT
        recs = sorted(
            (r for r in candidates if r.seq >> FRAGMENT_SHIFT == fragment), key=lambda r: r.seq
        )
        out = []
        budget = self.max_message_size
        for rec in recs[:count]:
            budget -= rec.size
            if out and budget < 0:
                break
            msg = rec.received(stores[0].path)
            msg.lock_token = None
            msg.locked_until_timestamp = None
            out.append(msg)
        return out

    async def settle(self, path: str, settlement: Settlement) -> list[float] | None:
        """Complete, abandon, dead-letter, defer or renew locked messages."""
        faults = self.faults
        while True:
            if faults.active:
                await faults.check("receive", path)
            now = self.now()
            entity, dlq = self._receivable(path, settlement.sub_queue, "settle")
            action = settlement.action
            if action == "dead_letter" and dlq:
                raise InvalidOperation(
                    f"Messages in the dead-letter queue of {entity.path!r} cannot be "
                    "dead-lettered again."
                )
            session = None
            if settlement.session_id is not None and not dlq:
                session = self._held(entity, settlement.session_id, settlement.session_lock, now)
                stores = [session.store]
                if action == "renew":
                    raise InvalidOperation(
                        "Messages received in a session are locked with the session: renew "
                        "the session's lock (receiver.session.renew_lock())."
                    )
            else:
                stores = entity.dlqs if dlq else entity.fragments
            found = []
            store = stores[0]  # a batch's locks are mostly in one store: look there first
            for token in dict.fromkeys(settlement.lock_tokens):  # one settlement per lock
                rec = store.locked.get(token)
                if rec is None:
                    for store in stores:
                        rec = store.locked.get(token)
                        if rec is not None:
                            break
                if rec is None or rec.locked_until <= now:  # type: ignore[operator]
                    raise MessageLockLost(
                        f"The lock {token!r} is not held on {stores[0].path!r}: it expired, "
                        "the message was settled already, or it was received from another "
                        "entity or session."
                    )
                found.append((store, rec))
            down = self._down("receive", path)
            blocked = next(
                (down[s.fragment] for s, _ in found if down is not None and s.fragment in down),
                None,
            )
            if blocked is None:
                break
            await faults.apply(blocked, "receive", path)
        entity.touch(now)
        props = settlement.properties_to_modify
        if action == "complete":
            for store, rec in found:
                del store.locked[rec.lock_token]  # type: ignore[arg-type]
                store.remove(rec)
        elif action == "abandon":
            for store, rec in found:
                store.unlock(rec, now, props)
        elif action == "defer":
            for store, rec in found:
                store.defer(rec, now, props)
        elif action == "dead_letter":
            for store, rec in found:
                del store.locked[rec.lock_token]  # type: ignore[arg-type]
                store.remove(rec)
                if props:
                    rec.props = {**(rec.props or {}), **props}
                self._dead_letter(store, rec, settlement.reason, settlement.description, now)
        elif action == "renew":
            until = now + entity.lock_seconds
            renewed: dict[_Store, list[_Record]] = {}
            for store, rec in found:
                rec.locked_until = until
                renewed.setdefault(store, []).append(rec)
            for store, recs in renewed.items():
                store._push(until, _LOCKS, recs)
                if self.journal is not None:
                    for rec in recs:
                        self.journal.record(store, rec)
            return [until] * len(found)
        else:
            raise InvalidArgument(f"unknown settlement action {action!r}.")
        if session is not None:
            entity.forget_if_idle(session)
        return None

    # -- sessions --------------------------------------------------------------------

    async def session(self, path: str, request: SessionRequest) -> SessionInfo:
        """Accept, renew or release a session, or read or write its state."""
        action = request.action
        if action not in ("accept", "renew", "get_state", "set_state", "release"):
            raise InvalidArgument(f"unknown session action {action!r}.")
        if request.state is not None and not isinstance(request.state, bytes | bytearray):
            raise InvalidArgument(f"session state must be bytes or None, not {request.state!r}.")
        sid = request.session_id
        if sid is not None and (not isinstance(sid, str) or not 0 < len(sid) <= 128):
            raise InvalidArgument(f"session_id {sid!r} must be a string of 1 to 128 characters.")
        if action == "accept" and sid is None:
            return await self._accept_next(path, request.max_wait)
        if sid is None:
            raise InvalidArgument(f"session {action} needs the session_id.")
        faults = self.faults
        while True:
            if faults.active:
                await faults.check("receive", path)
            now = self.now()
            entity = self._session_entity(path)
            down = self._down("receive", path)
            if action == "release":
                session = entity.sessions.get(sid)
                if session is not None and session.lock == request.lock:
                    session.release(now)
                return SessionInfo(sid)
            home = _hash(sid) % entity.nfrag if entity.nfrag > 1 else 0
            if down is None or home not in down:
                break
            await faults.apply(down[home], "receive", path)
        entity.touch(now)
        if action == "accept":
            session = entity.session(sid)
            if session.lock is not None and session.locked_until > now:
                raise SessionCannotBeLocked(
                    f"Session {sid!r} of {entity.path!r} is locked by another receiver "
                    "until its lock is released or expires."
                )
            until = now + entity.lock_seconds
            session.lock_for(self._ids(), now, until)
            if session.due_expiry(now):
                session.expire(now)
            return SessionInfo(sid, session.lock, until)
        session = self._held(entity, sid, request.lock, now)
        if action == "renew":
            until = now + entity.lock_seconds
            session.renew(until)
            return SessionInfo(sid, session.lock, until)
        if action == "set_state":
            session.state = None if request.state is None else bytes(request.state)
            if self.journal is not None:
                self.journal.session(session)
        return SessionInfo(sid, session.lock, session.locked_until, session.state)

    async def _accept_next(self, path: str, max_wait: float | None) -> SessionInfo:
        """Lock the next session with messages and no lock, waiting up to ``max_wait``
        for one; a receiver waiting here is a listener (EX-13)."""
        if max_wait is not None and max_wait < 0:
            raise InvalidArgument(f"max_wait is {max_wait} seconds; it must not be negative.")
        loop = asyncio.get_running_loop()
        deadline = None if max_wait is None else loop.time() + max_wait
        faults = self.faults
        listening: _Entity | None = None
        try:
            while True:
                if faults.active:
                    await faults.check("receive", path)
                now = self.now()
                entity = self._session_entity(path)
                entity.touch(now)
                if listening is not entity:
                    if listening is not None:
                        listening.add_listener(-1, now)
                    entity.add_listener(+1, now)
                    listening = entity
                down = self._down("receive", path)
                for session in list(entity.sessions.values()):
                    if session.lock is not None or (
                        down is not None and session.store.fragment in down
                    ):
                        continue
                    if session.store.has_available():
                        until = now + entity.lock_seconds
                        session.lock_for(self._ids(), now, until)
                        return SessionInfo(session.id, session.lock, until)
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise OperationTimeout(
                        f"No session of {entity.path!r} became available within {max_wait:g} s."
                    )
                fut = loop.create_future()
                entity.session_waiters.append(fut)
                try:
                    async with asyncio.timeout(remaining):
                        await fut
                except TimeoutError:  # the deadline, whatever the float rounding
                    raise OperationTimeout(
                        f"No session of {entity.path!r} became available within {max_wait:g} s."
                    ) from None
                finally:
                    if not fut.done():
                        fut.cancel()
                    try:
                        entity.session_waiters.remove(fut)
                    except ValueError:
                        pass
        finally:
            if listening is not None:
                listening.add_listener(-1, self.clock.now())

    # -- management ----------------------------------------------------------------

    async def manage(self, request: ManagementRequest) -> Any:
        """Create, get, update, delete or list entities, or read their counts."""
        if self.faults.active:
            await self.faults.check("manage", request.path)
        now = self.now()
        action, kind = request.action, request.kind
        if action == "runtime":
            return self._runtime(request.path, now)
        if action == "list":
            return self._list(kind, request.path)
        if kind not in ("queue", "topic", "subscription"):
            raise InvalidArgument(f"unknown entity kind {kind!r}.")
        if action == "create":
            return self._create(kind, request.properties, now)
        entity = self._lookup(kind, request.path)
        if action == "get":
            return entity.description()
        down = self._down("manage", entity.path)
        if down is not None:  # PT-14: changes act on every fragment
            await self.faults.apply(next(iter(down.values())), action, entity.path)
            return await self.manage(request)
        if action == "update":
            return self._update(entity, request.properties, now)
        if action == "delete":
            self._delete_entity(entity)
            return None
        raise InvalidArgument(f"unknown management action {action!r}.")

    def _lookup(self, kind: str, path: str) -> _Entity:
        try:
            entity, dlq = self._resolve(path)
        except EntityNotFound:
            entity, dlq = None, False
        if entity is None or entity.kind != kind or dlq:
            raise EntityNotFound(f"The {kind} {path!r} does not exist in namespace {self.name!r}.")
        return entity

    def _create(self, kind: str, props: Any, now: float) -> Any:
        props = props.normalised(self.tier)
        if kind == "subscription":
            topic = self._lookup("topic", props.topic_name)
            path = f"{topic.path}/subscriptions/{props.name}"
            props.topic_name = topic.path
        else:
            topic = None
            path = props.name
        if path.lower() in self._entities:
            existing = self._entities[path.lower()]
            raise EntityAlreadyExists(
                f"A {existing.kind} named {path!r} exists already in namespace {self.name!r}."
            )
        for target_name in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(props, target_name, None)
            if target is not None:
                self._forward_target(target, target_name)
        if kind != "subscription":
            if self.tier != "premium" and len(self._entities) >= _MAX_ENTITIES:
                raise QuotaExceeded(
                    f"Namespace {self.name!r} has {_MAX_ENTITIES} entities, the most it may hold."
                )
            partitioned = sum(
                1 for e in self._entities.values() if getattr(e.props, "enable_partitioning", False)
            )
            if (
                props.enable_partitioning
                and self.tier == "standard"
                and (partitioned >= _MAX_PARTITIONED)
            ):
                raise QuotaExceeded(
                    f"Namespace {self.name!r} has {_MAX_PARTITIONED} partitioned entities, "
                    "the most a standard namespace may hold (PT-5)."
                )
        if kind == "subscription":
            nfrag = topic.nfrag  # type: ignore[union-attr]
        elif props.enable_partitioning:
            nfrag = FRAGMENTS[self.tier]
        else:
            nfrag = 1
        entity = _Entity(self, kind, path, props, now, nfrag)
        if topic is not None:
            entity.topic = topic
            topic.subscriptions[entity.key] = entity
            topic.touch(now)
        self._entities[entity.key] = entity
        if self.journal is not None:
            self.journal.entity(entity)
        return entity.description()

    def _forward_target(self, name: str, what: str) -> _Entity:
        entity = self._entities.get(name.lower())
        if entity is None or entity.kind == "subscription":
            raise EntityNotFound(
                f"{what} names {name!r}, which is not a queue or topic in namespace {self.name!r}."
            )
        return entity

    def _update(self, entity: _Entity, props: Any, now: float) -> Any:
        fixed = entity.props.changed_fixed(props)  # before the checks that depend on them
        if fixed:
            raise InvalidOperation(
                f"{', '.join(fixed)} of {entity.path!r} cannot change after creation (PT-3)."
            )
        props = props.normalised(self.tier)
        if entity.kind == "subscription":
            props.topic_name = entity.topic.path  # type: ignore[union-attr]
        for target_name in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(props, target_name, None)
            if target is not None:
                self._forward_target(target, target_name)
        entity.apply(props)
        if self.journal is not None:
            self.journal.entity(entity)
        entity.updated = now
        entity.touch(now)
        entity._idle_armed = INF
        entity.arm_idle()
        return entity.description()

    def _delete_entity(self, entity: _Entity) -> None:
        if entity.deleted:
            return
        entity.deleted = True
        self._entities.pop(entity.key, None)
        if self.journal is not None:
            self.journal.entity_gone(entity)
        for sub in list(entity.subscriptions.values()):
            self._delete_entity(sub)
        if entity.topic is not None:
            entity.topic.subscriptions.pop(entity.key, None)
        for store in entity.stores():
            store.close()
        _wake(entity.session_waiters)

    def _list(self, kind: str | None, topic: str) -> list[Any]:
        """Descriptions in name order (case-insensitive, as names are), so that pages of
        a listing over HTTP are stable."""
        if kind == "subscription":
            found: Iterable[_Entity] = self._lookup("topic", topic).subscriptions.values()
        else:
            found = (e for e in self._entities.values() if e.kind == kind)
        return [e.description() for e in sorted(found, key=lambda e: e.path.lower())]

    def _runtime(self, path: str, now: float) -> RuntimeProperties:
        """Counts summed over every fragment and session (PT-14)."""
        entity, _ = self._resolve(path)
        active = deferred = scheduled = 0
        for store in entity.main_stores():
            a, d, s = store.counts()
            active, deferred, scheduled = active + a, deferred + d, scheduled + s
        dead = sum(len(store.records) for store in entity.dlqs)
        size = entity.bytes
        if entity.kind == "topic":
            size += sum(sub.bytes for sub in entity.subscriptions.values())
        down = self._down("receive", entity.path) or self._down("send", entity.path) or {}
        return RuntimeProperties(
            name=entity.path,
            active_message_count=active,
            scheduled_message_count=scheduled,
            dead_letter_message_count=dead,
            deferred_message_count=deferred,
            total_message_count=active + deferred + scheduled + dead,
            size_in_bytes=size,
            subscription_count=len(entity.subscriptions),
            created_at_utc=_utc(entity.created),
            updated_at_utc=_utc(entity.updated),
            accessed_at_utc=_utc(entity.activity),
            fragment_count=entity.nfrag,
            available_fragments=entity.nfrag - len(down),
        )

    # -- the message path ------------------------------------------------------------

    def _send_target(self, path: str) -> _Entity:
        entity, dlq = self._resolve(path)
        if entity.kind == "subscription" or dlq:
            raise InvalidOperation(f"Cannot send to {path!r}: send to a queue or topic.")
        status = entity.props.status
        if status in ("Disabled", "SendDisabled"):
            raise EntityUnavailable(f"The entity {path!r} is {status}: it cannot take sends.")
        return entity

    def _records(
        self, entity: _Entity, messages: Sequence[Message], transaction: bool = False
    ) -> list[_Record | None]:
        """Validate a whole batch (or transaction), then build its records (``None`` for
        pings), each with its partition key (PT-6 to PT-8)."""
        limit = self.max_message_size
        total = 0
        out: list[_Record | None] = []
        requires_session = entity.sessionful or (
            entity.kind == "topic" and any(s.sessionful for s in entity.subscriptions.values())
        )
        by_message_id = entity.dup_window > 0
        ids = self._ids
        for msg in messages:
            if not isinstance(msg, Message):
                raise InvalidArgument(f"can only send Message objects, not {type(msg).__name__}.")
            size = msg.size
            if size > limit:
                raise MessageSizeExceeded(
                    f"A message of {size} bytes is over the {limit} byte limit of "
                    f"namespace {self.name!r} ({self.tier} tier)."
                )
            total += size
            if msg.content_type == PING_CONTENT_TYPE:
                out.append(None)
                continue
            if requires_session and msg.session_id is None:
                raise InvalidOperation(
                    f"{entity.path!r} requires sessions (or has a subscription that does): "
                    "set session_id on every message."
                )
            check_partition_key(msg.session_id, msg.partition_key)  # fields may change
            rec = _Record(msg, msg.message_id or ids(), size)
            key = msg.session_id
            if key is None:
                key = msg.partition_key
                if key is None and by_message_id:
                    key = rec.message_id
            rec.key = key
            out.append(rec)
        if transaction:
            self._check_transaction(entity, out)
        elif len(out) > 1 and total > limit:
            raise MessageSizeExceeded(
                f"A batch of {len(out)} messages and {total} bytes is over the {limit} byte "
                f"limit of namespace {self.name!r}; send fewer messages at once."
            )
        if entity.kind == "queue":
            capacity = entity.props.max_size_in_megabytes * 1024 * 1024
            if entity.props.enable_partitioning and self.tier == "standard":
                capacity *= FRAGMENTS["standard"]
            held = entity.bytes
            if held + total > capacity:
                raise QuotaExceeded(
                    f"{entity.path!r} is full: it holds {held} bytes and may "
                    f"hold {capacity}; receive some messages first."
                )
        return out

    def _check_transaction(self, entity: _Entity, records: list[_Record | None]) -> None:
        """PT-16 to PT-18: a transaction on a partitioned entity goes to one fragment, so
        every message needs a partition key, and the same one."""
        if entity.nfrag == 1:
            return
        keys = {rec.key for rec in records if rec is not None}
        if None in keys:
            raise InvalidOperation(
                f"{entity.path!r} is partitioned: every message of a transaction needs a "
                "partition key (session_id, partition_key, or a message_id with duplicate "
                "detection), and the same one (PT-16). Nothing was sent."
            )
        if len(keys) > 1:
            sessions = {rec.session_id for rec in records if rec is not None} - {None}
            what = (
                f"{len(sessions)} sessions ({', '.join(sorted(map(repr, sessions)))}); a "
                "partitioned entity takes one session per transaction (PT-17)"
                if len(sessions) > 1
                else f"{len(keys)} partition keys ({', '.join(sorted(map(repr, keys)))}); they "
                "must all be the same (PT-16)"
            )
            raise InvalidOperation(
                f"A transaction on partitioned {entity.path!r} has {what}. Nothing was sent."
            )

    def _schedule(self, entity: _Entity, rec: _Record, at: float) -> int:
        """Hold ``rec`` in its fragment's main store until ``at`` (EX-5)."""
        store = entity.fragments[rec.frag]
        rec.seq = next(store.seqs)
        rec.enqueued = at
        self._stamp_expiry(entity, rec)
        store.add_scheduled(rec)
        return rec.seq

    def _stamp_expiry(self, entity: _Entity, rec: _Record) -> None:
        ttl = rec.ttl if rec.ttl < entity.ttl else entity.ttl  # EX-7, EX-9
        rec.ttl = ttl
        rec.expires = None if ttl == INF else rec.enqueued + ttl  # EX-1, EX-5

    def _deliver(
        self, entity: _Entity, rec: _Record, now: float, hops: int, keep_seq: bool = False
    ) -> None:
        """Put ``rec`` into ``entity``: forward it, fan it out, or store it."""
        if entity.deleted:
            return
        forward = getattr(entity.props, "forward_to", None)
        if forward and hops < _MAX_FORWARD_HOPS:
            target = self._entities.get(forward.lower())
            if target is not None and target.kind != "subscription":
                self._stamp_expiry(entity, rec)
                target.touch(now)
                rec.frag = target.fragment_for(rec)  # PT-19: the key carries over
                self._deliver(target, rec, now, hops + 1)
                return
        self._stamp_expiry(entity, rec)
        if entity.kind == "topic":  # subscriptions share their topic's fragments
            subs = list(entity.subscriptions.values())
            for i, sub in enumerate(subs):
                copy = rec if i == len(subs) - 1 else rec.clone()
                self._deliver(sub, copy, now, hops)  # numbered by the subscription
            return
        frag = rec.frag
        if frag >= entity.nfrag:
            frag = rec.frag = entity.fragment_for(rec)
        if entity.sessionful:
            if rec.session_id is None:  # forwarded here without one: nowhere to go
                self._dead_letter(
                    entity.fragments[frag],
                    rec,
                    "SessionIdIsMissing",
                    f"{entity.path!r} requires sessions and the message has no session_id.",
                    now,
                )
                return
            store = entity.session(rec.session_id).store
        else:
            store = entity.fragments[frag]
        if not keep_seq:
            rec.seq = next(store.seqs)
        store.add(rec, now)

    def _dead_letter(
        self, store: _Store, rec: _Record, reason: str | None, description: str | None, now: float
    ) -> None:
        """Move ``rec`` (already removed from ``store``) to its fragment's dead-letter
        queue, or where ``forward_dead_lettered_messages_to`` says."""
        entity = store.entity
        copy = rec.clone()
        copy.dl_reason = reason
        copy.dl_desc = description
        copy.dl_source = copy.dl_source or entity.path
        copy.expires = None  # dead letters do not expire
        copy.delivery_count = rec.delivery_count
        target_name = getattr(entity.props, "forward_dead_lettered_messages_to", None)
        if target_name:
            target = self._entities.get(target_name.lower())
            if target is not None and target.kind != "subscription":
                copy.ttl = INF
                copy.enqueued = now
                copy.frag = target.fragment_for(copy)
                self._deliver(target, copy, now, 1)
                return
        dlq = entity.dlqs[store.fragment]
        copy.seq = next(dlq.seqs)
        dlq.add(copy, now)
