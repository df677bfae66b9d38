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
    "Restored",
    "restore",
    "to_backlog",
]

SESSION_ID = "x-ms-sessionid"
TIME_TO_LIVE = "x-ms-timetolive"
SCHEDULED = "x-ms-scheduledenqueuetimeutc"
PATH = "x-ms-path"
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


#: What :func:`restore` gives: the destination entity (``x-ms-path``), or ``None`` if
#: the message is not one aiosb wrote (no path, or a session id over 128 characters);
#: and the message to send there, or ``None`` if it expired (or is not aiosb's).
Restored = tuple[str | None, Message | None]


def restore(received: ReceivedMessage, now: float) -> Restored:
    """Undo the rewrite of a backlog message, with the time to live that remains:
    ``(entity, message)`` (:data:`Restored`).

    A schedule in the past is dropped, so the message is sent at once (G-5).
    """
    # This runs for every message the syphon moves (#16): a plain tuple back, and when
    # x-ms-path is the only property (no session, no schedule), no dict work at all.
    source = received.application_properties
    entity = source.get(PATH)
    if not isinstance(entity, str) or not entity:
        return None, None
    at: _dt.datetime | None = None
    session_id: str | None = None
    if len(source) == 1:
        props: dict[str, PropertyValue] = {}
    else:
        props = dict(source)
        del props[PATH]
        value = props.pop(SESSION_ID, None)
        if isinstance(value, str) and value:
            if len(value) > MAX_ID_LENGTH:
                return None, None  # not a message aiosb wrote
            session_id = value
        props.pop(TIME_TO_LIVE, None)
        at = _schedule(props.pop(SCHEDULED, None), now)
    ttl = None
    expires = received.expires_timestamp
    if expires is not None:
        left = expires - (now if at is None else at.timestamp())
        if expires <= now or left <= 0:
            return entity, None
        ttl = _dt.timedelta(seconds=left)
    partition_key = received.partition_key
    if session_id is not None and partition_key is not None and partition_key != session_id:
        partition_key = session_id  # PT-7: the session is the key
    # Built field by field: every field comes from a message the broker accepted.
    message = _new(Message)
    _copy_restored(received, message)
    message.session_id = session_id
    message.partition_key = partition_key
    message.time_to_live = ttl
    message.scheduled_enqueue_time = at
    message.application_properties = props
    return entity, message


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
#: The fields a restored message takes as they are from the backlog copy.
_RESTORED = frozenset(
    ("session_id", "partition_key", "time_to_live", "scheduled_enqueue_time",
     "application_properties")
)
_copy_restored = copier([name for name in MESSAGE_FIELDS if name not in _RESTORED])
