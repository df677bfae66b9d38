"""The embedded broker: :class:`EmulatorNamespace`, one emulated namespace.

The namespace is a façade: its methods are the Transport protocol's (send, schedule,
cancel_scheduled, receive, settle, session, manage; :mod:`aiosb.protocol`), each handed
to the module of its concern. What lives where:

* :mod:`._record`: one message as the broker holds it, record states, ids, time helpers.
* :mod:`._partitions`: the partition router: fragments of a message, a session, a
  sequence number; batches, transactions and receives across fragments (PT-*).
* :mod:`._store`: the messages of one fragment or session: sequence order, locks, and
  the timeline of lock ends, expiries and activations (EX-*).
* :mod:`._entity`: a queue, topic or subscription (fragments, forwarding, fan-out,
  dead-lettering, idle timer, duplicate window) and its sessions.
* the operations (sending, delivery, sessions, management): below, as functions over
  the namespace's :class:`~._namespace.Namespace` protocol (next: files of their own).
* :mod:`._namespace`: the protocol by which the operations and the journal see a
  namespace; :mod:`._durable`: the journal (durable mode).

The namespace itself keeps the entity table, resolves paths, and keeps time: one
timeline of the stores, sessions and entities with something due, and one
``loop.call_at`` timer for its earliest entry while a connection is open. Each
operation also runs what is due before it acts, so results are exact whether or not the
timer has fired yet.

All state changes are synchronous; only fault injection and long-poll receives await.
Concurrent calls are therefore safe without locks.

Time is UTC epoch seconds read from the event loop clock (:class:`~aiosb._clock.LoopClock`).

Imports: every emulator module above but :mod:`._durable` (and no transport, client or
server: it implements the contract of :mod:`aiosb.protocol`).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Iterable, Sequence
from heapq import heappop, heappush
from typing import Any

from .._clock import CLOCK
from ..entities import FRAGMENTS, TIERS, RuntimeProperties, parse_entity_path
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
from ._entity import EntityJournal, _Entity, _Session
from ._faults import Fault, Faults
from ._namespace import Namespace
from ._partitions import FRAGMENT_SHIFT, by_fragment, check_transaction, gather_order, home, route
from ._record import DEFERRED, INF, SCHEDULED, _Ids, _Record, _utc
from ._store import Due, _Store, _wake

__all__ = ["EmulatorNamespace"]

_NAMESPACE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,49}")


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
        self._timeline: list[tuple[float, int, Due]] = []
        self._order = itertools.count()
        self._next_due = INF
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users = 0
        self._handle: asyncio.TimerHandle | None = None
        self._handle_when = INF
        self.journal: EntityJournal | None = None  # durable mode (aiosb serve --data-dir)

    def __repr__(self) -> str:
        return (
            f"<EmulatorNamespace {self.name} tier={self.tier} entities={len(self._entities)} "
            f"connections={self._users}>"
        )

    # -- the Transport protocol -------------------------------------------------------

    async def send(
        self, path: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        """Enqueue ``messages`` on a queue or topic as one batch (all or none).

        With ``transaction``, they are one transaction's sends (PT-16 to PT-18).
        """
        await send(self, path, messages, transaction)

    async def schedule(self, path: str, messages: Sequence[Message]) -> list[int]:
        """Schedule messages; return their sequence numbers (EX-5)."""
        return await schedule(self, path, messages)

    async def cancel_scheduled(self, path: str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages (all named ones must be scheduled)."""
        await cancel_scheduled(self, path, sequence_numbers)

    async def receive(self, path: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        """Receive, peek, or fetch deferred messages; long-polls up to ``max_wait``.

        A partitioned entity's receive gathers from every fragment that is up (PT-12); a
        peek answers from one fragment and up to the response size limit, so it may
        return fewer than asked (PT-13).
        """
        return await receive(self, path, request)

    async def settle(self, path: str, settlement: Settlement) -> list[float] | None:
        """Complete, abandon, dead-letter, defer or renew locked messages."""
        return await settle(self, path, settlement)

    async def session(self, path: str, request: SessionRequest) -> SessionInfo:
        """Accept, renew or release a session, or read or write its state."""
        return await session(self, path, request)

    async def manage(self, request: ManagementRequest) -> Any:
        """Create, get, update, delete or list entities, or read their counts."""
        return await manage(self, request)

    # -- lifetime and time ----------------------------------------------------------

    def attach(self) -> None:
        """A connection opens: bind to the running loop and arm the timer."""
        loop = asyncio.get_running_loop()
        current = self._loop
        if self._users and current is not None and current is not loop and not current.is_closed():
            raise InvalidOperation(
                f"memory://{self.name} is open in another event loop; an embedded emulator "
                "namespace serves one loop at a time (serve it with 'aiosb serve' to share "
                "it across loops and processes)."
            )
        if current is not loop:
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

    def _register(self, when: float, target: Due) -> None:
        """Call ``target.on_due`` once ``when`` has come."""
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

    # -- faults ----------------------------------------------------------------------

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

    def _down(self, operation: str, path: str) -> dict[int, Fault] | None:
        """The fragments of ``path`` that are down for ``operation`` (``None``: none)."""
        if not self.faults.active:
            return None
        return self.faults.fragment_faults(operation, path) or None

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


# -- sending -------------------------------------------------------------------


async def send(
    ns: Namespace, path: str, messages: Sequence[Message], transaction: bool = False
) -> None:
    """Enqueue ``messages`` on a queue or topic as one batch (all or none)."""
    entity, records, now = await prepare(ns, path, messages, transaction)
    for rec in records:
        if rec is None:  # a ping: accepted, never delivered (PN-14)
            continue
        if entity.dup_window and entity.is_duplicate(rec.message_id, now):
            continue
        at = rec.scheduled
        if at is not None and at.timestamp() > now:
            entity.schedule(rec, at.timestamp())
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
            entity.deliver(rec, now, 0)


async def schedule(ns: Namespace, path: str, messages: Sequence[Message]) -> list[int]:
    """Schedule messages; return their sequence numbers (EX-5)."""
    for msg in messages:
        if isinstance(msg, Message) and msg.scheduled_enqueue_time is None:
            raise InvalidArgument("schedule needs each message's scheduled_enqueue_time to be set.")
    entity, records, now = await prepare(ns, path, messages)
    seqs = []
    for rec in records:
        if rec is None:
            continue
        at = rec.scheduled  # set on every message: checked above
        seqs.append(entity.schedule(rec, now if at is None else max(at.timestamp(), now)))
    return seqs


async def cancel_scheduled(ns: Namespace, path: str, sequence_numbers: Sequence[int]) -> None:
    """Cancel scheduled messages (all named ones must be scheduled)."""
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("send", path)
        now = ns.now()
        entity = send_target(ns, path)
        groups = by_fragment(sequence_numbers, entity.nfrag)
        down = ns._down("send", path)
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


async def prepare(
    ns: Namespace, path: str, messages: Sequence[Message], transaction: bool = False
) -> tuple[_Entity, list[_Record | None], float]:
    """Check the faults, validate the batch and choose each message's fragment; a
    fragment in the way raises or, for a timeout fault, is waited out and the whole
    preparation done again. Returns the entity (touched), the records and the time."""
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("send", path)
        now = ns.now()
        entity = send_target(ns, path)
        records = build(ns, entity, messages, transaction)
        if entity.nfrag == 1:
            break
        blocked = route(records, entity.nfrag, entity.rr, ns._down("send", path))
        if blocked is None:
            break
        await faults.apply(blocked, "send", path)
    entity.touch(now)
    return entity, records, now


def send_target(ns: Namespace, path: str) -> _Entity:
    """The queue or topic at ``path``, if it takes sends."""
    entity, dlq = ns._resolve(path)
    if entity.kind == "subscription" or dlq:
        raise InvalidOperation(f"Cannot send to {path!r}: send to a queue or topic.")
    status = entity.props.status
    if status in ("Disabled", "SendDisabled"):
        raise EntityUnavailable(f"The entity {path!r} is {status}: it cannot take sends.")
    return entity


def build(
    ns: Namespace, entity: _Entity, messages: Sequence[Message], transaction: bool = False
) -> list[_Record | None]:
    """Validate a whole batch (or transaction), then build its records (``None`` for
    pings), each with its partition key (PT-6 to PT-8)."""
    limit = ns.max_message_size
    total = 0
    out: list[_Record | None] = []
    requires_session = entity.sessionful or (
        entity.kind == "topic" and any(s.sessionful for s in entity.subscriptions.values())
    )
    by_message_id = entity.dup_window > 0
    ids = ns._ids
    for msg in messages:
        if not isinstance(msg, Message):
            raise InvalidArgument(f"can only send Message objects, not {type(msg).__name__}.")
        size = msg.size
        if size > limit:
            raise MessageSizeExceeded(
                f"A message of {size} bytes is over the {limit} byte limit of "
                f"namespace {ns.name!r} ({ns.tier} tier)."
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
        # The partition key (PT-6 to PT-8), chosen here, inline: this runs per message.
        key = msg.session_id
        if key is None:
            key = msg.partition_key
            if key is None and by_message_id:
                key = rec.message_id
        rec.key = key
        out.append(rec)
    if transaction:
        check_transaction(entity.path, entity.nfrag, out)
    elif len(out) > 1 and total > limit:
        raise MessageSizeExceeded(
            f"A batch of {len(out)} messages and {total} bytes is over the {limit} byte "
            f"limit of namespace {ns.name!r}; send fewer messages at once."
        )
    if entity.kind == "queue":
        capacity = entity.props.max_size_in_megabytes * 1024 * 1024
        if entity.props.enable_partitioning and ns.tier == "standard":
            capacity *= FRAGMENTS["standard"]  # PT-4
        held = entity.bytes
        if held + total > capacity:
            raise QuotaExceeded(
                f"{entity.path!r} is full: it holds {held} bytes and may "
                f"hold {capacity}; receive some messages first."
            )
    return out


# -- sessions ------------------------------------------------------------------


def session_entity(ns: Namespace, path: str) -> _Entity:
    """The session-enabled queue or subscription at ``path``."""
    entity, dlq = ns._receivable(path, None, "accept a session")
    if dlq or not entity.sessionful:
        raise InvalidOperation(
            f"{path!r} is not session-enabled: create it with requires_session=True, "
            "or receive without a session_id."
        )
    return entity


def held(entity: _Entity, session_id: str, lock: str | None, now: float) -> _Session:
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


async def session(ns: Namespace, path: str, request: SessionRequest) -> SessionInfo:
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
        return await accept_next(ns, path, request.max_wait)
    if sid is None:
        raise InvalidArgument(f"session {action} needs the session_id.")
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("receive", path)
        now = ns.now()
        entity = session_entity(ns, path)
        down = ns._down("receive", path)
        if action == "release":
            found = entity.sessions.get(sid)
            if found is not None and found.lock == request.lock:
                found.release(now)
            return SessionInfo(sid)
        fragment = home(sid, entity.nfrag)
        if down is None or fragment not in down:
            break
        await faults.apply(down[fragment], "receive", path)
    entity.touch(now)
    if action == "accept":
        accepted = entity.session(sid)
        if accepted.lock is not None and accepted.locked_until > now:
            raise SessionCannotBeLocked(
                f"Session {sid!r} of {entity.path!r} is locked by another receiver "
                "until its lock is released or expires."
            )
        until = now + entity.lock_seconds
        accepted.lock_for(ns._ids(), now, until)
        if accepted.due_expiry(now):
            accepted.expire(now)
        return SessionInfo(sid, accepted.lock, until)
    mine = held(entity, sid, request.lock, now)
    if action == "renew":
        until = now + entity.lock_seconds
        mine.renew(until)
        return SessionInfo(sid, mine.lock, until)
    if action == "set_state":
        mine.state = None if request.state is None else bytes(request.state)
        if ns.journal is not None:
            ns.journal.session(mine)
    return SessionInfo(sid, mine.lock, mine.locked_until, mine.state)


async def accept_next(ns: Namespace, path: str, max_wait: float | None) -> SessionInfo:
    """Lock the next session with messages and no lock, waiting up to ``max_wait``
    for one; a receiver waiting here is a listener (EX-13)."""
    if max_wait is not None and max_wait < 0:
        raise InvalidArgument(f"max_wait is {max_wait} seconds; it must not be negative.")
    loop = asyncio.get_running_loop()
    deadline = None if max_wait is None else loop.time() + max_wait
    faults = ns.faults
    listening: _Entity | None = None
    try:
        while True:
            if faults.active:
                await faults.check("receive", path)
            now = ns.now()
            entity = session_entity(ns, path)
            entity.touch(now)
            if listening is not entity:
                if listening is not None:
                    listening.add_listener(-1, now)
                entity.add_listener(+1, now)
                listening = entity
            down = ns._down("receive", path)
            for candidate in list(entity.sessions.values()):
                if candidate.lock is not None or (
                    down is not None and candidate.store.fragment in down
                ):
                    continue
                if candidate.store.has_available():
                    until = now + entity.lock_seconds
                    candidate.lock_for(ns._ids(), now, until)
                    return SessionInfo(candidate.id, candidate.lock, until)
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
            listening.add_listener(-1, ns.clock.now())


# -- delivery ------------------------------------------------------------------


async def receive(ns: Namespace, path: str, request: ReceiveRequest) -> list[ReceivedMessage]:
    """Receive, peek, or fetch deferred messages; long-polls up to ``max_wait``."""
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
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("receive", path)
        now = ns.now()
        entity, dlq = ns._receivable(path, request.sub_queue, "receive")
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
                session = held(entity, request.session_id, request.session_lock, now)
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
        down = ns._down("receive", path)
        if request.peek:
            return _peek(ns.max_message_size, stores, count, request.from_sequence_number, down)
        if session is not None:
            lock_seconds = session.locked_until - now if lock else None
        else:
            lock_seconds = entity.lock_seconds if lock else None
        if request.sequence_numbers is not None:
            found_or_fault = _take_deferred(
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
            if down is None:
                live = stores
            else:
                live = [s for s in stores if s.fragment not in down]
                if not live:
                    await faults.apply(next(iter(down.values())), "receive", path)
                    continue
            found = []
            for store in gather_order(live, entity.rr_receive):  # PT-12
                found += store.take(count - len(found), lock_seconds, now)
                if len(found) >= count:
                    break
            stores = live
        if found:
            return found
        waited = await _wait(ns, stores, session, now, deadline)
        if waited is None:
            return found
        if not waited:
            return []


async def _wait(
    ns: Namespace,
    stores: list[_Store],
    session: _Session | None,
    now: float,
    deadline: float | None,
) -> bool | None:
    """Wait for a message in ``stores`` (a long poll) until ``deadline`` (loop time), or
    until the session's lock ends. Returns whether to look again: ``True`` when woken
    or the session lock ended first, ``False`` when the deadline came while waiting,
    ``None`` when it had come already."""
    loop = asyncio.get_running_loop()
    if deadline is None:
        remaining = None
    else:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return None
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
            # The session lock ended first: say so on the next pass, with the clock at
            # that instant whatever the float rounding of the timer.
            ns.clock.advance_to(session.locked_until)
            return True
        return False
    finally:
        if not fut.done():
            fut.cancel()
        for store in stores:  # a timed-out or cancelled wait leaves nothing behind
            try:
                store.waiters.remove(fut)
            except ValueError:
                pass
    return True


def _take_deferred(
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
        groups = by_fragment(seqs, entity.nfrag)
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
    budget: int,
    stores: list[_Store],
    count: int,
    from_seq: int,
    down: dict[int, Fault] | None,
) -> list[ReceivedMessage]:
    """Browse from ``from_seq``: from the first fragment with messages there, and no
    more than one response holds (``budget`` bytes, PT-13)."""
    live = [s for s in stores if down is None or s.fragment not in down]
    if stores and not live:  # every fragment is down: that is no empty entity
        raise PartitionUnavailable(
            f"Every fragment of {stores[0].path!r} is unavailable; nothing to browse."
        )
    candidates = [rec for store in live for rec in store.records.values() if rec.seq >= from_seq]
    if not candidates:
        return []
    fragment = min(rec.seq for rec in candidates) >> FRAGMENT_SHIFT
    recs = sorted(
        (r for r in candidates if r.seq >> FRAGMENT_SHIFT == fragment), key=lambda r: r.seq
    )
    out: list[ReceivedMessage] = []
    for rec in recs[:count]:
        budget -= rec.size
        if out and budget < 0:
            break
        msg = rec.received(stores[0].path)
        msg.lock_token = None
        msg.locked_until_timestamp = None
        out.append(msg)
    return out


async def settle(ns: Namespace, path: str, settlement: Settlement) -> list[float] | None:
    """Complete, abandon, dead-letter, defer or renew locked messages."""
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("receive", path)
        now = ns.now()
        entity, dlq = ns._receivable(path, settlement.sub_queue, "settle")
        action = settlement.action
        if action == "dead_letter" and dlq:
            raise InvalidOperation(
                f"Messages in the dead-letter queue of {entity.path!r} cannot be "
                "dead-lettered again."
            )
        session = None
        if settlement.session_id is not None and not dlq:
            session = held(entity, settlement.session_id, settlement.session_lock, now)
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
            # a locked record has its locked_until: `or 0.0` only tells mypy so
            if rec is None or (rec.locked_until or 0.0) <= now:
                raise MessageLockLost(
                    f"The lock {token!r} is not held on {stores[0].path!r}: it expired, "
                    "the message was settled already, or it was received from another "
                    "entity or session."
                )
            found.append((store, rec, token))
        down = ns._down("receive", path)
        blocked = next(
            (down[s.fragment] for s, _, _ in found if down is not None and s.fragment in down),
            None,
        )
        if blocked is None:
            break
        await faults.apply(blocked, "receive", path)
    entity.touch(now)
    props = settlement.properties_to_modify
    if action == "complete":
        for store, rec, token in found:
            del store.locked[token]
            store.remove(rec)
    elif action == "abandon":
        for store, rec, _ in found:
            store.unlock(rec, now, props)
    elif action == "defer":
        for store, rec, _ in found:
            store.defer(rec, now, props)
    elif action == "dead_letter":
        for store, rec, token in found:
            del store.locked[token]
            store.remove(rec)
            if props:
                rec.props = {**(rec.props or {}), **props}
            entity.dead_letter(store.fragment, rec, settlement.reason, settlement.description, now)
    elif action == "renew":
        until = now + entity.lock_seconds
        renewed: dict[_Store, list[_Record]] = {}
        for store, rec, _ in found:
            renewed.setdefault(store, []).append(rec)
        for store, recs in renewed.items():
            store.renew(until, recs)
        return [until] * len(found)
    else:
        raise InvalidArgument(f"unknown settlement action {action!r}.")
    if session is not None:
        entity.forget_if_idle(session)
    return None


# -- manage --------------------------------------------------------------------


_MAX_ENTITIES = 10_000
_MAX_PARTITIONED = 100


async def manage(ns: Namespace, request: ManagementRequest) -> Any:
    """Create, get, update, delete or list entities, or read their counts."""
    if ns.faults.active:
        await ns.faults.check("manage", request.path)
    now = ns.now()
    action, kind = request.action, request.kind
    if action == "runtime":
        return runtime(ns, request.path)
    if action == "list":
        return listing(ns, kind, request.path)
    if kind not in ("queue", "topic", "subscription"):
        raise InvalidArgument(f"unknown entity kind {kind!r}.")
    if action == "create":
        return create(ns, kind, request.properties, now)
    entity = lookup(ns, kind, request.path)
    if action == "get":
        return entity.description()
    down = ns._down("manage", entity.path)
    if down is not None:  # PT-14: changes act on every fragment
        await ns.faults.apply(next(iter(down.values())), action, entity.path)
        return await manage(ns, request)
    if action == "update":
        return update(ns, entity, request.properties, now)
    if action == "delete":
        entity.delete()
        return None
    raise InvalidArgument(f"unknown management action {action!r}.")


def lookup(ns: Namespace, kind: str, path: str) -> _Entity:
    """The ``kind`` (queue, topic or subscription) at ``path``, or EntityNotFound."""
    try:
        entity, dlq = ns._resolve(path)
    except EntityNotFound:
        found, dlq = None, False
    else:
        found = entity
    if found is None or found.kind != kind or dlq:
        raise EntityNotFound(f"The {kind} {path!r} does not exist in namespace {ns.name!r}.")
    return found


def create(ns: Namespace, kind: str, props: Any, now: float) -> Any:
    """Make an entity from its (checked and normalised) description."""
    props = props.normalised(ns.tier)
    entities = ns._entities
    topic = None
    if kind == "subscription":
        topic = lookup(ns, "topic", props.topic_name)
        path = f"{topic.path}/subscriptions/{props.name}"
        props.topic_name = topic.path
    else:
        path = props.name
    if path.lower() in entities:
        existing = entities[path.lower()]
        raise EntityAlreadyExists(
            f"A {existing.kind} named {path!r} exists already in namespace {ns.name!r}."
        )
    for target_name in ("forward_to", "forward_dead_lettered_messages_to"):
        target = getattr(props, target_name, None)
        if target is not None:
            forward_target(ns, target, target_name)
    if kind != "subscription":
        if ns.tier != "premium" and len(entities) >= _MAX_ENTITIES:
            raise QuotaExceeded(
                f"Namespace {ns.name!r} has {_MAX_ENTITIES} entities, the most it may hold."
            )
        partitioned = sum(
            1 for e in entities.values() if getattr(e.props, "enable_partitioning", False)
        )
        if props.enable_partitioning and ns.tier == "standard" and partitioned >= _MAX_PARTITIONED:
            raise QuotaExceeded(
                f"Namespace {ns.name!r} has {_MAX_PARTITIONED} partitioned entities, "
                "the most a standard namespace may hold (PT-5)."
            )
    if topic is not None:
        nfrag = topic.nfrag  # a subscription shares its topic's fragments
    elif props.enable_partitioning:
        nfrag = FRAGMENTS[ns.tier]
    else:
        nfrag = 1
    entity = _Entity(ns, kind, path, props, now, nfrag)
    if topic is not None:
        entity.topic = topic
        topic.subscriptions[entity.key] = entity
        topic.touch(now)
    entities[entity.key] = entity
    if ns.journal is not None:
        ns.journal.entity(entity)
    return entity.description()


def forward_target(ns: Namespace, name: str, what: str) -> _Entity:
    """The queue or topic ``name`` that ``what`` (a forwarding setting) names."""
    entity = ns._entities.get(name.lower())
    if entity is None or entity.kind == "subscription":
        raise EntityNotFound(
            f"{what} names {name!r}, which is not a queue or topic in namespace {ns.name!r}."
        )
    return entity


def update(ns: Namespace, entity: _Entity, props: Any, now: float) -> Any:
    """Put a changed description in force (what may change: PT-3)."""
    fixed = entity.props.changed_fixed(props)  # before the checks that depend on them
    if fixed:
        raise InvalidOperation(
            f"{', '.join(fixed)} of {entity.path!r} cannot change after creation (PT-3)."
        )
    props = props.normalised(ns.tier)
    if entity.topic is not None:  # a subscription
        props.topic_name = entity.topic.path
    for target_name in ("forward_to", "forward_dead_lettered_messages_to"):
        target = getattr(props, target_name, None)
        if target is not None:
            forward_target(ns, target, target_name)
    entity.apply(props)
    if ns.journal is not None:
        ns.journal.entity(entity)
    entity.updated = now
    entity.touch(now)
    entity.rearm_idle()
    return entity.description()


def listing(ns: Namespace, kind: str | None, topic: str) -> list[Any]:
    """Descriptions in name order (case-insensitive, as names are), so that pages of
    a listing over HTTP are stable."""
    if kind == "subscription":
        found: Iterable[_Entity] = lookup(ns, "topic", topic).subscriptions.values()
    else:
        found = (e for e in ns._entities.values() if e.kind == kind)
    return [e.description() for e in sorted(found, key=lambda e: e.path.lower())]


def runtime(ns: Namespace, path: str) -> RuntimeProperties:
    """Counts summed over every fragment and session (PT-14)."""
    entity, _ = ns._resolve(path)
    active = deferred = scheduled = 0
    for store in entity.main_stores():
        a, d, s = store.counts()
        active, deferred, scheduled = active + a, deferred + d, scheduled + s
    dead = sum(len(store.records) for store in entity.dlqs)
    size = entity.bytes
    if entity.kind == "topic":
        size += sum(sub.bytes for sub in entity.subscriptions.values())
    down = ns._down("receive", entity.path) or ns._down("send", entity.path) or {}
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
