"""Receiving and settling: receive (long-polled), peek, receive deferred messages, take
chosen messages by number (:func:`take`, for tools), and complete, abandon, dead-letter,
defer or renew locked ones.

A partitioned entity's receive gathers from every fragment that is up (PT-12); a peek
answers from one fragment and up to the response size limit (PT-13). Messages are taken
and settled a batch at a time, store by store (:class:`~._store._Store`).

Imports: :mod:`._record`, :mod:`._store`, :mod:`._entity`, :mod:`._partitions`,
:mod:`._sessions`, :mod:`._namespace`, :mod:`._faults` (never the broker).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from .._clock import TIMER_RESOLUTION
from ..errors import (
    InvalidArgument,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    PartitionUnavailable,
)
from ..message import ReceivedMessage
from ..protocol import ReceiveMode, ReceiveRequest, Settlement
from ._entity import _Entity, _Session
from ._faults import Fault
from ._namespace import Namespace
from ._partitions import FRAGMENT_SHIFT, by_fragment, gather_order
from ._record import AVAILABLE, DEFERRED, _Record, received_columns, received_messages
from ._sessions import held
from ._store import _Store, _wake_one

__all__ = ["receive", "settle", "take"]


async def receive(ns: Namespace, path: str, request: ReceiveRequest) -> list[ReceivedMessage]:
    """Receive, peek, or fetch deferred messages; long-polls up to ``max_wait``."""
    return received_messages(*await _receive(ns, path, request))


async def receive_columns(
    ns: Namespace, path: str, request: ReceiveRequest
) -> tuple[list[bytes], dict[str, Any]]:
    """What :func:`receive` gives, as columns (:func:`._record.received_columns`)."""
    return received_columns(*await _receive(ns, path, request))


async def take(
    ns: Namespace,
    path: str,
    sequence_numbers: Sequence[int],
    sub_queue: str | None = None,
    mode: ReceiveMode = "peek_lock",
) -> list[ReceivedMessage]:
    """The messages of ``path`` (or its ``sub_queue``) numbered ``sequence_numbers``
    that are there and not locked, deferred or not, and no other; a number with no
    such message is passed over. The receive by sequence numbers (faults, fragments,
    locks and deletion as :func:`receive` has them), for a tool that chose the messages
    from a peek: a dead letter is mostly neither deferred nor next."""
    request = ReceiveRequest(
        mode=mode, max_messages=max(1, len(sequence_numbers)), max_wait=0,
        sub_queue=sub_queue, sequence_numbers=sequence_numbers,
    )
    return received_messages(*await _receive(ns, path, request, _FREE))


#: The states a receive by sequence numbers takes: a client's, the deferred ones only
#: (Service Bus's receive-deferred); :func:`take`'s, any message not locked.
_DEFERRED, _FREE = (DEFERRED,), (AVAILABLE, DEFERRED)


async def _receive(
    ns: Namespace, path: str, request: ReceiveRequest, numbered: tuple[int, ...] = _DEFERRED
) -> tuple[list[_Record], str, bool]:
    """The records a receive hands out, the path they are received from, and whether
    it is a peek (whose records stay as they were): for the caller to read at once,
    before anything else runs. ``numbered``: the states of the messages a receive by
    sequence numbers takes (all of them must be there unless it is :data:`_FREE`)."""
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
    woken = False
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
        where = stores[0].path if stores else path
        if request.peek:
            return (
                _peek(ns.max_message_size, stores, count, request.from_sequence_number, down),
                where,
                True,
            )
        if session is not None:
            lock_seconds = session.locked_until - now if lock else None
        else:
            lock_seconds = entity.lock_seconds if lock else None
        if request.sequence_numbers is not None:
            found_or_fault = _take_numbered(
                entity, stores, request.sequence_numbers, lock_seconds, now, down, path,
                numbered,
            )
            if isinstance(found_or_fault, Fault):
                await faults.apply(found_or_fault, "receive", path)
                continue
            return found_or_fault, where, False
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
            return found, where, False
        # Woken, but another receive took the message first: wait again at the head of
        # the line, with the same deadline (#16).
        waited = await _wait(ns, stores, session, now, deadline, front=woken)
        if not waited:  # None: the deadline had come; False: it came while waiting
            return [], where, False
        woken = True


async def _wait(
    ns: Namespace,
    stores: list[_Store],
    session: _Session | None,
    now: float,
    deadline: float | None,
    front: bool = False,
) -> bool | None:
    """Wait for a message in ``stores`` (a long poll) until ``deadline`` (loop time), or
    until the session's lock ends. Returns whether to look again: ``True`` when woken
    or the session lock ended first, ``False`` when the deadline came while waiting,
    ``None`` when it had come already.

    A new message wakes one waiter (#16), the longest waiting; ``front`` puts this one
    back at the head of the line (it was woken, and found nothing). A waiter woken that
    will not look again (cancelled, or its deadline came at the same moment) passes its
    wake-up on, so that no message is left while a receive sleeps."""
    loop = asyncio.get_running_loop()
    if deadline is None:
        remaining = None
    else:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return None
    if session is not None:  # wake when the session lock ends, to say so
        # (Never under a millisecond: a timer that fired a hair early, looking again
        # for the rest, would on uvloop come round at once, again and again; the
        # namespace's timer ends the lock at its instant all the same.)
        lock_left = max(session.locked_until - now, TIMER_RESOLUTION)
        lock_first = remaining is None or lock_left < remaining
        remaining = lock_left if remaining is None else min(remaining, lock_left)
    else:
        lock_first = False
    fut = loop.create_future()
    for store in stores:
        if front:
            store.waiters.insert(0, fut)
        else:
            store.waiters.append(fut)
    looks = False  # whether the receive looks again once this returns
    try:
        async with asyncio.timeout(remaining):
            await fut
            looks = True
    except TimeoutError:
        # Which timer it was is known from what was armed, not from the loop's time
        # after it fired (a loop fires a timer a hair early or late; a deadline a hair
        # past the loop's time fires at once, and looking again then spun for ever).
        if lock_first:
            # The session lock's end, as it was when the wait began, came first: look
            # again, and the next pass checks the lock as it is now (renewed while this
            # waited, or ended: SessionLockLost). Never move the clock to the lock's
            # end: a renewal moved that, and the clock would run ahead (issue 33).
            looks = True
            return True
        return False
    finally:
        woken = fut.done() and not fut.cancelled()
        if not fut.done():
            fut.cancel()
        for store in stores:  # a timed-out or cancelled wait leaves nothing behind
            try:
                store.waiters.remove(fut)
            except ValueError:
                pass
        if woken and not looks:
            _pass_on(stores)
    return True


def _pass_on(stores: list[_Store]) -> None:
    """A woken receive will not look: wake another for each store that has a message."""
    for store in stores:
        if store.waiters and store.has_available():
            _wake_one(store.waiters)


def _take_numbered(
    entity: _Entity,
    stores: list[_Store],
    seqs: Sequence[int],
    lock_seconds: float | None,
    now: float,
    down: dict[int, Fault] | None,
    path: str,
    states: tuple[int, ...],
) -> list[_Record] | Fault:
    """Messages by sequence number, from the fragments their numbers name: deferred
    ones, all of them or MessageNotFound; or (``states`` is :data:`_FREE`) those
    there and not locked, passing over the rest. Or the fault of a fragment they need
    that is down."""
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
    found: list[tuple[_Store, list[_Record]]] = []
    for f, group in groups.items():
        store = by_frag.get(f)
        if states is _FREE:
            if store is not None:
                got = map(store.records.get, dict.fromkeys(group))
                found.append((store, [r for r in got if r is not None and r.state in states]))
            continue
        if store is None:
            raise MessageNotFound(
                f"No deferred message with sequence number {group[0]} in {path!r}."
            )
        found.append((store, store.find(group, DEFERRED, "deferred")))
    out: list[_Record] = []
    for store, recs in found:
        out += store.hand_out(recs, lock_seconds, now)
    return out


def _peek(
    budget: int,
    stores: list[_Store],
    count: int,
    from_seq: int,
    down: dict[int, Fault] | None,
) -> list[_Record]:
    """Browse from ``from_seq``: from the first fragment with messages there, and no
    more than one response holds (``budget`` bytes, PT-13)."""
    live = [s for s in stores if down is None or s.fragment not in down]
    if stores and not live:  # every fragment is down: that is no empty entity
        raise PartitionUnavailable(
            f"Every fragment of {stores[0].path!r} is unavailable; nothing to browse."
        )
    # Up to ``count`` from each store, each read from its index from ``from_seq`` on.
    candidates = [
        rec for store in live for rec in itertools.islice(store.from_sequence(from_seq), count)
    ]
    if not candidates:
        return []
    fragment = min(rec.seq for rec in candidates) >> FRAGMENT_SHIFT
    recs = sorted(
        (r for r in candidates if r.seq >> FRAGMENT_SHIFT == fragment), key=lambda r: r.seq
    )
    out: list[_Record] = []
    for rec in recs[:count]:
        budget -= rec.size
        if out and budget < 0:
            break
        out.append(rec)
    return out


_ACTIONS = frozenset(("complete", "abandon", "defer", "dead_letter", "renew", "release"))


async def settle(ns: Namespace, path: str, settlement: Settlement) -> list[float] | None:
    """Complete, abandon, dead-letter, defer, renew or release locked messages."""
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
        # The records by store, in the order given; a batch's locks are mostly in one
        # store, so that one is looked in first, and each token is looked up once.
        found: dict[_Store, list[_Record]] = {}
        store = stores[0]
        locked = store.locked
        recs = found[store] = []
        for token in dict.fromkeys(settlement.lock_tokens):  # one settlement per lock
            rec = locked.get(token)
            if rec is None:
                for other in stores:
                    rec = other.locked.get(token)
                    if rec is not None:
                        store, locked = other, other.locked
                        recs = found.setdefault(store, [])
                        break
            # a locked record has its locked_until: `or 0.0` only tells mypy so
            if rec is None or (rec.locked_until or 0.0) <= now:
                raise MessageLockLost(
                    f"The lock {token!r} is not held on {stores[0].path!r}: it expired, "
                    "the message was settled already, or it was received from another "
                    "entity or session."
                )
            recs.append(rec)
        if not found[stores[0]]:
            del found[stores[0]]
        down = ns._down("receive", path)
        blocked = None if down is None else next(
            (down[s.fragment] for s in found if s.fragment in down), None
        )
        if blocked is None:
            break
        await faults.apply(blocked, "receive", path)
    entity.touch(now)
    props = settlement.properties_to_modify
    if action not in _ACTIONS:
        raise InvalidArgument(f"unknown settlement action {action!r}.")
    if action == "renew":
        until = now + entity.lock_seconds
        for store, recs in found.items():
            store.renew(until, recs)
        return [until] * sum(map(len, found.values()))
    for store, recs in found.items():
        if action == "abandon":
            for rec in recs:
                store.unlock(rec, now, props)
            continue
        if action == "release":  # as if never delivered: the delivery is not counted
            for rec in recs:
                rec.delivery_count -= 1
                store.unlock(rec, now, props)
            continue
        if action == "defer":
            for rec in recs:
                store.defer(rec, now, props)
            continue
        store.remove(recs)  # complete or dead_letter: the records leave the store
        if action == "dead_letter":
            for rec in recs:
                if props:
                    rec.props = {**(rec.props or {}), **props}
                entity.dead_letter(
                    store.fragment, rec, settlement.reason, settlement.description, now
                )
    if session is not None:
        entity.forget_if_idle(session)
    return None
