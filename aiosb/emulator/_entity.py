"""An entity (:class:`_Entity`: a queue, topic or subscription) and the sessions of a
session-enabled one (:class:`_Session`).

An entity has its fragments' stores (a main store and a dead-letter store each; a
topic's hold only its scheduled messages), its sessions, its idle timer (EX-14 to
EX-16) and its duplicate-detection window. It takes a message in by
:meth:`_Entity.deliver`: it forwards it (``forward_to``, PT-19), fans it out to its
subscriptions (a topic), or stores it in the fragment, or the session, it belongs to.
A session has a store of its own in the fragment its id hashes to (PT-6), a state, and
a lock; the session *operations* (accept, renew, state, release) are in
:mod:`._sessions`.

An entity knows the namespace only through :class:`EntityHost` (timer, ids, journal,
tier, the entity table for forwarding), so that it can be made and tested alone.

Imports: :mod:`._record`, :mod:`._partitions`, :mod:`._store` (never the broker).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from ..entities import FRAGMENTS
from ..sql import FilterEvaluationError
from ._partitions import fragment_for, home, sequence_numbers
from ._record import (
    AVAILABLE,
    DEFERRED,
    FILTER_EXCEPTION,
    INF,
    LOCKED,
    _Record,
    _seconds,
    _utc,
)
from ._rules import Rules, apply_action, view_of
from ._store import _Store, _wake
from ._surroundings import Recorder, StoreHost

__all__ = ["EntityHost", "EntityJournal"]

_MAX_FORWARD_HOPS = 4


class EntityJournal(Recorder, Protocol):
    """The durable journal, as entities and sessions report to it."""

    def entity(self, entity: _Entity) -> None:
        """``entity`` was created or updated."""

    def entity_gone(self, entity: _Entity) -> None:
        """``entity`` was deleted, with its messages and sessions."""

    def session(self, session: _Session) -> None:
        """``session``'s state changed."""


class EntityHost(StoreHost, Protocol):
    """What an entity needs of its namespace."""

    @property
    def tier(self) -> str:
        """The namespace tier (``standard``, ``premium`` or ``basic``)."""

    @property
    def journal(self) -> EntityJournal | None:
        """The durable journal, if the namespace is kept on disk."""

    @property
    def _entities(self) -> dict[str, _Entity]:
        """Every entity of the namespace, by lower-case path (where messages forward to)."""


class _Session:
    """One session of a session-enabled queue or subscription: its messages (a store in
    the fragment its id hashes to), its state, and its lock."""

    __slots__ = ("entity", "id", "lock", "locked_until", "state", "state_set", "store")

    def __init__(self, entity: _Entity, session_id: str) -> None:
        self.entity = entity
        self.id = session_id
        fragment = home(session_id, entity.nfrag)  # PT-6
        self.store = _Store(entity.ns, entity, False, fragment, self)
        self.state: bytes | None = None
        #: When the state was last set (UTC seconds; 0: never, or before a restart).
        self.state_set = 0.0
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
        store.renew(until, list(store.locked.values()))

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
        self, ns: EntityHost, kind: str, path: str, props: Any, now: float, nfrag: int = 1
    ) -> None:
        self.ns = ns
        self.kind = kind
        self.path = path
        self.key = path.lower()
        self.props = props
        self.created = self.updated = self.activity = now
        self.deleted = False
        self.bytes = 0  # held over every store
        self.nfrag = nfrag
        self.seqs: list[Iterator[int]] = [sequence_numbers(f) for f in range(nfrag)]
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
        #: A subscription's rules (``$Default`` takes everything until told otherwise).
        self.rules: Rules | None = Rules(None, now) if kind == "subscription" else None
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
        self.lock_seconds: float = (
            props.lock_duration.total_seconds() if hasattr(props, "lock_duration") else 0.0
        )
        self.idle = _seconds(props.auto_delete_on_idle)
        self.dup_window: float = (
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

    # -- taking a message in ---------------------------------------------------------

    def stamp_expiry(self, rec: _Record) -> None:
        """Apply the entity's default time to live and set the expiry instant."""
        ttl = rec.ttl if rec.ttl < self.ttl else self.ttl  # EX-7, EX-9
        rec.ttl = ttl
        rec.expires = None if ttl == INF else rec.enqueued + ttl  # EX-1, EX-5

    def schedule(self, rec: _Record, at: float) -> int:
        """Hold ``rec`` in its fragment's main store until ``at`` (EX-5); return its
        sequence number."""
        store = self.fragments[rec.frag]
        rec.seq = next(store.seqs)
        rec.enqueued = at
        self.stamp_expiry(rec)
        store.add_scheduled(rec)
        return rec.seq

    def deliver(self, rec: _Record, now: float, hops: int, keep_seq: bool = False) -> None:
        """Take ``rec`` in: forward it, fan it out, or store it."""
        if self.deleted:
            return
        forward = getattr(self.props, "forward_to", None)
        if forward:
            target = self.ns._entities.get(forward.lower())
            if target is not None and target.kind != "subscription":
                self.stamp_expiry(rec)
                if hops >= _MAX_FORWARD_HOPS:  # a loop (an entity may forward to itself)
                    frag = rec.frag = fragment_for(self, rec)
                    self.dead_letter(frag, rec, "MaxTransferHopCountExceeded",
                                     f"the message was forwarded {hops} times, the most "
                                     "Service Bus forwards one.", now, forward=False)
                    return
                target.touch(now)
                rec.frag = fragment_for(target, rec)  # PT-19: the key carries over
                target.deliver(rec, now, hops + 1)
                return
        self.stamp_expiry(rec)
        if self.kind == "topic":  # subscriptions share their topic's fragments
            self.fan_out(rec, now, hops)
            return
        frag = rec.frag
        if frag >= self.nfrag:
            frag = rec.frag = fragment_for(self, rec)
        if self.sessionful:
            if rec.session_id is None:  # forwarded here without one: nowhere to go
                self.dead_letter(
                    frag,
                    rec,
                    "SessionIdIsMissing",
                    f"{self.path!r} requires sessions and the message has no session_id.",
                    now,
                )
                return
            store = self.session(rec.session_id).store
        else:
            store = self.fragments[frag]
        if not keep_seq:
            rec.seq = next(store.seqs)
        store.add(rec, now)

    def fan_out(self, rec: _Record, now: float, hops: int) -> None:
        """A topic's message to each subscription whose rules take it: one copy per
        subscription, or per matching rule with an action (each copy its own)."""
        # Every subscription's copies are made before any is delivered: a filter or
        # action that fails for this message touches that subscription only (a dead
        # letter, or nothing), never the others, and never the sender.
        plan: list[tuple[_Entity, _Record | None]] = []  # None: a plain copy of rec
        view = None
        for sub in self.subscriptions.values():
            rules = sub.rules
            assert rules is not None
            if rules.everything:
                plan.append((sub, None))
                continue
            if view is None:
                view = view_of(rec)
            try:
                plain, actions = rules.route(rec, view)
                copies = [rec.clone() for _ in actions]
                for (name, action), copy in zip(actions, copies, strict=True):
                    apply_action(name, action, copy)
            except FilterEvaluationError as exc:
                if sub.props.dead_lettering_on_filter_evaluation_exceptions:
                    # As Service Bus: the reason is the exception's type, the
                    # description its message.
                    sub.dead_letter(rec.frag, rec, FILTER_EXCEPTION, str(exc), now)
                continue
            if plain:
                plan.append((sub, None))
            plan.extend((sub, copy) for copy in copies)
        last = len(plan) - 1
        for i, (sub, made) in enumerate(plan):
            copy = made if made is not None else rec if i == last else rec.clone()
            sub.deliver(copy, now, hops)  # numbered by the subscription

    def dead_letter(
        self,
        fragment: int,
        rec: _Record,
        reason: str | None,
        description: str | None,
        now: float,
        *,
        forward: bool = True,
    ) -> None:
        """Move ``rec`` (already removed from a store of ``fragment``) to the fragment's
        dead-letter queue, or (``forward``) where ``forward_dead_lettered_messages_to``
        says."""
        copy = rec.clone()
        copy.dl_reason = reason
        copy.dl_desc = description
        copy.dl_source = copy.dl_source or self.path
        copy.expires = None  # dead letters do not expire
        copy.delivery_count = rec.delivery_count
        target_name = getattr(self.props, "forward_dead_lettered_messages_to", None)
        if target_name and forward:
            target = self.ns._entities.get(target_name.lower())
            if target is not None and target.kind != "subscription":
                copy.ttl = INF
                copy.enqueued = now
                copy.frag = fragment_for(target, copy)
                target.deliver(copy, now, 1)
                return
        dlq = self.dlqs[fragment]
        copy.seq = next(dlq.seqs)
        dlq.add(copy, now)

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

    def rearm_idle(self) -> None:
        """The idle time may have changed (an update): arm the timer afresh."""
        self._idle_armed = INF
        self.arm_idle()

    def on_due(self, now: float) -> None:
        self._idle_armed = INF
        if self.deleted or self.idle == INF:
            return
        if self.busy():
            self.activity = now
        if self.activity + self.idle <= now:
            self.delete()
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

    def delete(self) -> None:
        """Delete the entity (and a topic's subscriptions): out of the namespace's
        table and the journal; every waiting receive wakes to find it gone."""
        if self.deleted:
            return
        self.deleted = True
        ns = self.ns
        ns._entities.pop(self.key, None)
        if ns.journal is not None:
            ns.journal.entity_gone(self)
        for sub in list(self.subscriptions.values()):
            sub.delete()
        if self.topic is not None:
            self.topic.subscriptions.pop(self.key, None)
        for store in self.stores():
            store.close()
        _wake(self.session_waiters)

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
