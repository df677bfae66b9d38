"""One message as the broker holds it (:class:`_Record`), and the small vocabulary every
part of the broker shares: record states, lock-token ids, dead-letter reasons, time
conversions.

This is the bottom of the emulator: it imports only the vocabulary of :mod:`aiosb`
(``message``, ``entities``), never another emulator module.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import os

from ..entities import NEVER
from ..message import Message, ReceivedMessage

__all__ = [
    "AVAILABLE",
    "DEFERRED",
    "GONE",
    "INF",
    "LOCKED",
    "MAX_DELIVERY_EXCEEDED",
    "SCHEDULED",
    "TTL_EXPIRED",
]

INF = math.inf
#: The dead-letter reason of a message that expired (EX-10, EX-11).
TTL_EXPIRED = "TTLExpiredException"
#: The dead-letter reason of a message delivered ``max_delivery_count`` times.
MAX_DELIVERY_EXCEEDED = "MaxDeliveryCountExceeded"
#: The dead-letter reason of a message a subscription's filter failed on (Service Bus
#: gives the exception's type, FilterException, as the reason, its message as the
#: description).
FILTER_EXCEPTION = "FilterException"

# Record states.
AVAILABLE, LOCKED, DEFERRED, SCHEDULED, GONE = range(5)

_STATE_NAMES = {
    AVAILABLE: "active",
    LOCKED: "active",
    DEFERRED: "deferred",
    SCHEDULED: "scheduled",
    GONE: "active",
}

_UTC = _dt.UTC
#: A time to live this long or longer means never (as TimeSpan.MaxValue does): past it,
#: an expiry instant would lie beyond the year 9999, which no datetime can hold.
_FAR_S = min(NEVER.total_seconds(), 2.0**37)  # about 4,355 years


def _seconds(delta: _dt.timedelta) -> float:
    """A duration in seconds; ``INF`` for one that means never."""
    seconds = delta.total_seconds()
    return INF if seconds >= _FAR_S else seconds


def _utc(ts: float | None) -> _dt.datetime | None:
    """UTC epoch seconds as an aware datetime (``None`` stays ``None``)."""
    return None if ts is None else _dt.datetime.fromtimestamp(ts, _UTC)


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

    @property
    def time_to_live(self) -> _dt.timedelta | None:
        """The message's time to live (the name :class:`~aiosb.Message` gives it)."""
        return self.ttl_delta()

    @property
    def scheduled_enqueue_time(self) -> _dt.datetime | None:
        """When the message is scheduled for (the name :class:`~aiosb.Message` gives it)."""
        return self.scheduled

    def ttl_delta(self) -> _dt.timedelta | None:
        ttl = self.ttl
        if ttl == INF:
            return None
        cached = self.ttl_td
        if cached is None or cached.total_seconds() != ttl:
            cached = self.ttl_td = _dt.timedelta(seconds=ttl)
        return cached


_new = object.__new__
