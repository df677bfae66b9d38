"""Session operations: accept (a named session, or the next available one), renew,
release, get and set state (:func:`session`), the listing of an entity's sessions
(:func:`listing`; with each one's state, lock and messages: :func:`statuses`), and the
check that a receive or settlement holds its session's lock (:func:`held`).

The session itself (its store, state, lock) is :class:`~._entity._Session`. A receiver
accepting sessions is a listener of its entity, which lets session expiry happen
(EX-12, EX-13).

Imports: :mod:`._entity`, :mod:`._partitions`, :mod:`._namespace` (never the broker).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..errors import (
    InvalidArgument,
    InvalidOperation,
    OperationTimeout,
    SessionCannotBeLocked,
    SessionLockLost,
)
from ..protocol import SessionInfo, SessionRequest
from ._entity import _Entity, _Session
from ._namespace import Namespace
from ._partitions import home

__all__ = ["SessionStatus", "held", "listing", "session", "statuses"]


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
        mine.state_set = now
        if ns.journal is not None:
            ns.journal.session(mine)
    return SessionInfo(sid, mine.lock, mine.locked_until, mine.state)


async def listing(ns: Namespace, path: str, state_set_after: object) -> list[str]:
    """The ids of the sessions of ``path`` in id order: those holding a message (other
    than a scheduled one) or a state; with ``state_set_after`` (UTC seconds), those whose
    state was set after it, as Service Bus's get-message-sessions has it."""
    if state_set_after is not None and (
        isinstance(state_set_after, bool) or not isinstance(state_set_after, int | float)
    ):
        raise InvalidArgument(
            f"list sessions takes None or a time in UTC seconds, not {state_set_after!r:.40}."
        )
    if ns.faults.active:
        await ns.faults.check("receive", path)
    now = ns.now()
    entity = session_entity(ns, path)
    entity.touch(now)
    found = []
    for sid, held_session in entity.sessions.items():
        if state_set_after is None:
            active, deferred, _ = held_session.store.counts()
            if active or deferred or held_session.state is not None:
                found.append(sid)
        elif held_session.state_set > state_set_after:
            found.append(sid)
    return sorted(found)


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """A session as :meth:`~aiosb.emulator.EmulatorNamespace.session_statuses` reads it.

    Attributes:
        session_id: Its id.
        state: Its state (``None``: none set).
        locked: Whether a receiver holds its lock now.
        message_count: The messages it holds (scheduled ones included).
    """

    session_id: str
    state: bytes | None
    locked: bool
    message_count: int


async def statuses(ns: Namespace, path: str) -> list[SessionStatus]:
    """The sessions :func:`listing` names (``state_set_after`` none), each with its
    state, lock and messages, read without locking any: a browse, as a peek is, that
    neither takes nor disturbs a receiver's lock."""
    ids = await listing(ns, path, None)
    now = ns.now()
    sessions = session_entity(ns, path).sessions
    out = []
    for sid in ids:
        found = sessions.get(sid)
        if found is None:
            out.append(SessionStatus(sid, None, False, 0))
            continue
        out.append(SessionStatus(
            sid, found.state, found.lock is not None and found.locked_until > now,
            len(found.store.records),
        ))
    return out


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
