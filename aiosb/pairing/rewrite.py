"""The backlog rewrite (PN-11) and its inverse, the syphon's restore (PN-17, G-2, G-5).

A backlog queue holds messages for many entities, so the properties that tie a message
to its entity move into application properties:

=========================  ================================
original                   stored as
=========================  ================================
SessionId                  ``x-ms-sessionid``
TimeToLive                 ``x-ms-timetolive`` (seconds)
ScheduledEnqueueTimeUtc    ``x-ms-scheduledenqueuetimeutc`` (ISO 8601)
(destination entity)       ``x-ms-path``
=========================  ================================

An application property of the message's own with one of those names (or beginning with
``x-ms-aiosb-user.``) travels as ``x-ms-aiosb-user.`` and its name, and is restored as it
was: PN-11's names are the rewrite's, not taken from the application.

The backlog copy is in no session and not scheduled. Unlike the classic SDK, its time to
live is what remains of the original's, so the absolute expiry is kept (G-2): the
backlog queue, which dead-letters on expiry, surfaces a message that ran out of time
while it waited, with reason ``TTLExpiredException``. The MessageId is kept, and given
one if it had none, so a primary with duplicate detection drops a copy that a crash
between send and complete may make (G-3).
"""

from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import MessageSizeExceeded
from ..message import (
    MAX_ID_LENGTH,
    MESSAGE_FIELDS,
    Message,
    PropertyValue,
    ReceivedMessage,
    copier,
)

__all__ = [
    "PATH",
    "SCHEDULED",
    "SESSION_ID",
    "TIME_TO_LIVE",
    "USER",
    "EXPIRED",
    "MALFORMED",
    "NO_PATH",
    "Refused",
    "refresh",
    "restore",
    "restore_columns",
    "to_backlog",
]

SESSION_ID = "x-ms-sessionid"
TIME_TO_LIVE = "x-ms-timetolive"
SCHEDULED = "x-ms-scheduledenqueuetimeutc"
PATH = "x-ms-path"
#: The prefix of an application's own property named as one of the above.
USER = "x-ms-aiosb-user."
_UTC = _dt.UTC


def to_backlog(message: Message, entity: str, now: float, limit: int) -> Message:
    """The backlog copy of ``message`` bound for ``entity``.

    Args:
        message: What the application sent.
        entity: The primary entity path it is for.
        now: UTC seconds now (when the copy is enqueued).
        limit: The secondary's message size limit, in bytes.

    Raises:
        MessageSizeExceeded: The copy no longer fits once the properties are added
            (PN-12); the sentence names both sizes and the limit.
    """
    props = dict(message.application_properties)
    if any(name in _ESCAPED or name.startswith(USER) for name in props):
        props = {_escape(name): value for name, value in props.items()}
    props[PATH] = entity
    if message.session_id is not None:
        props[SESSION_ID] = message.session_id
    ttl = message.time_to_live
    at = message.scheduled_enqueue_time
    if at is not None:
        props[SCHEDULED] = at.astimezone(_UTC).isoformat()
    remaining = None
    if ttl is not None:
        props[TIME_TO_LIVE] = ttl.total_seconds()
        start = max(now, at.timestamp()) if at is not None else now
        remaining = _dt.timedelta(seconds=max(start + ttl.total_seconds() - now, 0.001))
    # Built field by field from a message Message checked, with valid additions.
    copy = _new(Message)
    _copy_to_backlog(message, copy)
    copy.message_id = message.message_id or uuid.uuid4().hex
    copy.session_id = None  # in x-ms-sessionid: backlog queues have no sessions
    copy.time_to_live = remaining
    copy.scheduled_enqueue_time = None  # in x-ms-scheduledenqueuetimeutc
    copy.application_properties = props
    size = copy.size
    if size > limit:
        raise MessageSizeExceeded(
            f"A message of {message.size} bytes for {entity!r} is {size} bytes once the "
            f"backlog properties are added, over the {limit} byte limit (PN-12); make it "
            "smaller so that it can fail over."
        )
    return copy


@dataclass(frozen=True, slots=True)
class Refused:
    """Why :func:`restore` left a backlog message as it was: the syphon dead-letters it
    with this reason and description."""

    reason: str
    description: str


#: Not a message aiosb wrote: it has no ``x-ms-path`` (or not a name in it).
NO_PATH = Refused("NoBacklogPath", "it has no x-ms-path property")
#: Marked as aiosb's, with ``x-ms-*`` properties aiosb never writes.
MALFORMED = Refused("MalformedBacklogMessage", "its x-ms-* properties are invalid")
#: Its time to live ran out while it waited in the backlog (G-2).
EXPIRED = Refused("TTLExpiredException", "it expired while it waited in the backlog (G-2)")


def restore(received: ReceivedMessage, now: float) -> str | Refused:
    """Undo the rewrite of a backlog message, with the time to live that remains; give
    the entity it is for, or why it cannot go there (:class:`Refused`).

    The message is rewritten in place (a received message is a :class:`~aiosb.Message`,
    ready to send; its lock token and broker fields stay, for settling it in the
    backlog). This runs for every message the syphon moves, and a copy per message costs
    more than the rest of the rewrite and, above all, one more object for the garbage
    collector per message in flight (#16). A message refused is left as it was.

    A schedule in the past is dropped, so the message is sent at once (G-5).
    """
    props = received.application_properties
    entity = props.get(PATH)
    if not isinstance(entity, str) or not entity:
        return NO_PATH
    expires = received.expires_timestamp
    if len(props) == 1:  # x-ms-path alone: no session, no schedule, no time to live
        if expires is None:  # the common case, spelled out: this runs per message
            props.clear()
            received.session_id = received.time_to_live = None
            received.scheduled_enqueue_time = None
            return entity
        ttl = _remaining(expires, None, now)
        if ttl is False:
            return EXPIRED
        props.clear()
        received.session_id = received.scheduled_enqueue_time = None
        received.time_to_live = ttl
        return entity
    session_id: str | None = None
    value = props.get(SESSION_ID)
    if isinstance(value, str) and value:
        if len(value) > MAX_ID_LENGTH:
            return MALFORMED
        session_id = value
    at = _schedule(props.get(SCHEDULED), now)
    ttl = None if expires is None else _remaining(expires, at, now)
    if ttl is False:
        return EXPIRED
    for name in _MOVED:
        props.pop(name, None)
    if any(name.startswith(USER) for name in props):
        received.application_properties = _unescaped(props)
    partition_key = received.partition_key
    if session_id is not None and partition_key is not None and partition_key != session_id:
        received.partition_key = session_id  # PT-7: the session is the key
    received.session_id = session_id
    received.time_to_live = ttl
    received.scheduled_enqueue_time = at
    return entity


def restore_columns(columns: dict[str, Any], now: float) -> tuple[str, dict[str, Any]] | None:
    """:func:`restore` for a batch given as columns (what a transport's
    ``receive_columns`` gives), when it is the common case: every message bound for one
    entity, none in a session or scheduled, none expired. Gives that entity and the
    columns of the sent fields to send there, as :func:`restore` would rewrite each
    message; ``None`` for any other batch, which the messages themselves are for.

    The columns given are read, never changed (they may be the broker's own); the
    properties given back are new dicts. One pass per column, not per message (#16).
    """
    props = columns.get(_PROPERTIES)
    if props.__class__ is not list or not props:
        return None
    n = len(props)
    paths = [p.get(PATH) for p in props]
    entity = paths[0]
    if not isinstance(entity, str) or not entity or paths.count(entity) != n:
        return None
    restored: list[dict[str, PropertyValue] | None] | None = None
    if list(map(len, props)).count(1) != n:  # some carry more than x-ms-path
        restored = []
        for p in props:
            if SESSION_ID in p or SCHEDULED in p:
                return None
            kept = {k: v for k, v in p.items() if k not in _MOVED}
            if any(k.startswith(USER) for k in kept):
                kept = _unescaped(kept)
            restored.append(kept or None)
    ttls: list[_dt.timedelta | None] | None = None
    expires = columns.get("expires_timestamp")
    if expires is not None and expires.__class__ is not list:  # one value for all
        expires = [expires] * n
    if expires is not None and expires.count(None) != n:
        ttls = []
        for at in expires:
            ttl = None if at is None else _remaining(at, None, now)
            if ttl is False:
                return None
            ttls.append(ttl)
    sent = {name: columns[name] for name in _KEPT if name in columns}
    sent["time_to_live"] = ttls
    sent[_PROPERTIES] = restored
    return entity, sent


def refresh(message: ReceivedMessage, now: float) -> bool:
    """Bring a message :func:`restore` gave up to date at ``now``, after it waited (parked
    while its entity was unavailable): the time to live that is left until it expires, a
    schedule that has passed dropped. Whether it is still alive."""
    at = message.scheduled_enqueue_time
    if at is not None and at.timestamp() <= now:
        at = message.scheduled_enqueue_time = None
    ttl = _remaining(message.expires_timestamp, at, now)
    if ttl is False:
        return False
    message.time_to_live = ttl
    return True


def _remaining(
    expires: float | None, at: _dt.datetime | None, now: float
) -> _dt.timedelta | Literal[False] | None:
    """The time to live left at the enqueue (``at``, or ``now``) of a message that
    expires at ``expires``: ``None`` for never, ``False`` if it has expired (G-2)."""
    if expires is None:
        return None
    left = _dt.timedelta(seconds=expires - (now if at is None else at.timestamp()))
    if expires <= now or left <= _ZERO:  # (under a microsecond rounds to nothing)
        return False
    return left


_ZERO = _dt.timedelta(0)


def _escape(name: str) -> str:
    return USER + name if name in _ESCAPED or name.startswith(USER) else name


def _unescaped(props: dict[str, PropertyValue]) -> dict[str, PropertyValue]:
    return {name.removeprefix(USER): value for name, value in props.items()}


def _schedule(text: PropertyValue | None, now: float) -> _dt.datetime | None:
    """The scheduled time of ``x-ms-scheduledenqueuetimeutc``, or ``None`` if it is
    missing, unreadable, or not in the future (G-5)."""
    if not isinstance(text, str):
        return None
    try:
        at = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=_UTC)
    return at if at.timestamp() > now else None


_new = object.__new__
#: The fields a backlog copy keeps as they are: all but those the rewrite moves into
#: properties or recomputes (derived from aiosb.message.MESSAGE_FIELDS, so a new field
#: travels through the backlog unless it is named here).
_REWRITTEN = frozenset(
    ("message_id", "session_id", "time_to_live", "scheduled_enqueue_time",
     "application_properties")
)
_copy_to_backlog = copier([name for name in MESSAGE_FIELDS if name not in _REWRITTEN])
#: The backlog properties a restored message no longer carries.
_MOVED = (PATH, SESSION_ID, TIME_TO_LIVE, SCHEDULED)
_ESCAPED = frozenset(_MOVED)
_PROPERTIES = "application_properties"
#: The fields a restored message has as its backlog copy had them, the body aside (all
#: but those :func:`restore` sets).
_KEPT = [
    name for name in MESSAGE_FIELDS
    if name not in ("body", "session_id", "time_to_live", "scheduled_enqueue_time", _PROPERTIES)
]
