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
from collections.abc import Iterable
from typing import Any, Generic, TypeVar, overload

from ..entities import NEVER
from ..message import Message, ReceivedMessage, properties_size, texts_size

T = TypeVar("T")

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

# Record states. AVAILABLE is 0, the one falsy state: a store tests a batch with any().
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
    """Cheap unique ids shaped like GUIDs: a random prefix and a counter.

    Ids are handed out in blocks of 4,096: the block's number is formatted once and each
    id of it adds three hex digits (a receive locks a batch: formatting each token on its
    own cost more than the rest of its lock, #16)."""

    __slots__ = ("_blocks", "_prefix")

    def __init__(self) -> None:
        raw = os.urandom(10).hex()
        self._prefix = f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-%09x"
        self._blocks = itertools.count(1)

    def __call__(self) -> str:
        return self.many(1)[0]

    def many(self, count: int) -> list[str]:
        """``count`` new ids at once."""
        out: list[str] = []
        while len(out) < count:
            head = self._prefix % next(self._blocks)
            out += map(head.__add__, _BLOCK[: count - len(out)])
        return out


#: The last three hex digits of the ids of a block.
_BLOCK = [f"{i:03x}" for i in range(4096)]


#: A record's fields as rows of the durable store name them (:meth:`_Record.blank` and
#: the properties below give every one of them, whatever the record keeps in slots).
FIELDS = (
    "amqp_extra", "body", "content_type", "correlation_id", "deferred", "delivery_count", "dl_desc",
    "dl_reason", "dl_source", "enqueued", "expires", "frag", "key", "lock_token",
    "locked_until", "message_id", "partition_key", "props", "reply_to",
    "reply_to_session_id", "scheduled", "seq", "session_id", "size", "state", "subject",
    "to", "ttl", "ttl_td",
)

# The fields a message seldom sets, held in one tuple (``_Record._opt``), in this order;
# a record with none of them set shares :data:`_NO_OPT` (#16: a resident message costs
# one slot for all of them, not twelve).
_OPT = (
    "session_id", "partition_key", "content_type", "correlation_id", "subject", "reply_to",
    "reply_to_session_id", "to", "scheduled", "amqp_extra", "dl_reason", "dl_desc",
    "dl_source",
)
_NO_OPT: tuple[Any, ...] = (None,) * len(_OPT)
#: Where ``scheduled`` is in ``_opt`` (read inline on the send path); the text fields a
#: message's size counts come before it, the AMQP sections after it.
AT = _OPT.index("scheduled")
EXTRA = _OPT.index("amqp_extra")

#: A broker-assigned MessageId is kept as its number (an int, not a 36-character
#: string: #16) and spelled out when read. The prefix is random per process, the counter
#: shared by every namespace of the process, so ids stay unique. ``auto_ids`` is rebound
#: when the counter moves (:func:`adopt_auto_ids`): call it as ``_record.auto_ids()``.
_raw = os.urandom(10).hex()
_AUTO_ID = f"{_raw[:8]}-{_raw[8:12]}-{_raw[12:16]}-{_raw[16:20]}-%012x"
_auto = itertools.count(1)
auto_ids = _auto.__next__


def auto_id_prefix() -> str:
    """What every broker-assigned MessageId of this process starts with."""
    return _AUTO_ID[: -len("%012x")]


def adopt_auto_ids(prefix: str, high: int) -> bool:
    """Spell broker-assigned MessageIds with ``prefix`` from now on, numbering them above
    ``high``, if this process has handed out none yet (the durable journal, whose rows
    keep such ids as their numbers under ``prefix``: #39); whether it did. The counter
    is set at once, however high ``high`` is (#39: it was skipped one id at a time)."""
    global _AUTO_ID, _auto, auto_ids
    if next(_auto) != 1:  # some were handed out, spelled with the prefix they had
        return False
    _AUTO_ID = prefix + "%012x"
    _auto = itertools.count(max(1, high + 1))
    auto_ids = _auto.__next__
    return True

#: Time-to-live timedeltas by their seconds, so that a record keeps a float and a
#: receive does not build a timedelta per message (bounded: cleared when full).
_DELTAS: dict[float, _dt.timedelta] = {}


def _delta(ttl: float) -> _dt.timedelta:
    delta = _DELTAS.get(ttl)
    if delta is None:
        if len(_DELTAS) >= 4096:
            _DELTAS.clear()
        delta = _DELTAS[ttl] = _dt.timedelta(seconds=ttl)
    return delta


class _Opt(Generic[T]):
    """A field kept in a record's ``_opt`` tuple (read and written like a slot)."""

    __slots__ = ("at",)

    def __init__(self, at: int) -> None:
        self.at = at

    @overload
    def __get__(self, rec: None, owner: type) -> _Opt[T]: ...
    @overload
    def __get__(self, rec: _Record, owner: type) -> T: ...
    def __get__(self, rec: _Record | None, owner: type) -> T | _Opt[T]:
        if rec is None:
            return self
        value: T = rec._opt[self.at]
        return value

    def __set__(self, rec: _Record, value: T) -> None:
        opt = rec._opt
        if opt[self.at] is value:
            return
        new: list[Any] = list(opt)
        new[self.at] = value
        rec._opt = _NO_OPT if new.count(None) == len(new) else tuple(new)


class _Record:
    """One message held by a store: the sent fields plus broker state.

    Kept small (#16): the fields a message seldom sets share one tuple (``_opt``, read
    through the properties below), a broker-assigned MessageId is a number, and the
    time to live is a float (its timedelta comes from a shared table)."""

    __slots__ = (
        "_mid",
        "_opt",
        "body",
        "deferred",
        "delivery_count",
        "enqueued",
        "expires",
        "frag",
        "key",
        "lock_token",
        "locked_until",
        "props",
        "seq",
        "size",
        "state",
        "ttl",
    )
    _opt: tuple[Any, ...]
    _mid: str | int
    body: bytes
    deferred: bool
    delivery_count: int
    enqueued: float
    expires: float | None
    frag: int
    #: The partition key chosen when the message was sent (PT-6 to PT-8, PT-19).
    key: str | None
    lock_token: str | None
    locked_until: float | None
    props: dict[str, Any] | None
    seq: int
    size: int
    state: int
    ttl: float

    session_id = _Opt[str | None](_OPT.index("session_id"))
    partition_key = _Opt[str | None](_OPT.index("partition_key"))
    content_type = _Opt[str | None](_OPT.index("content_type"))
    correlation_id = _Opt[str | None](_OPT.index("correlation_id"))
    subject = _Opt[str | None](_OPT.index("subject"))
    reply_to = _Opt[str | None](_OPT.index("reply_to"))
    reply_to_session_id = _Opt[str | None](_OPT.index("reply_to_session_id"))
    to = _Opt[str | None](_OPT.index("to"))
    scheduled = _Opt[_dt.datetime | None](AT)
    amqp_extra = _Opt[bytes | None](EXTRA)
    dl_reason = _Opt[str | None](_OPT.index("dl_reason"))
    dl_desc = _Opt[str | None](_OPT.index("dl_desc"))
    dl_source = _Opt[str | None](_OPT.index("dl_source"))

    @classmethod
    def blank(cls) -> _Record:
        """A record with every field ``None``, to be filled field by field (the durable
        store reloading a row: :data:`FIELDS`)."""
        rec = _new(cls)
        for name in cls.__slots__:
            setattr(rec, name, None)
        rec._opt = _NO_OPT
        return rec

    @property
    def message_id(self) -> str:
        mid = self._mid
        return mid if isinstance(mid, str) else _AUTO_ID % mid

    @message_id.setter
    def message_id(self, value: str) -> None:
        self._mid = value

    @property
    def ttl_td(self) -> _dt.timedelta | None:
        """The time to live as a timedelta (as rows of the durable store name it)."""
        return self.ttl_delta()

    @ttl_td.setter
    def ttl_td(self, value: _dt.timedelta | None) -> None:
        if value is not None and self.ttl is not None and self.ttl != INF:
            _DELTAS.setdefault(self.ttl, value)

    def clone(self) -> _Record:
        """A fresh copy with the sent fields and times, and no delivery state."""
        new = _new(_Record)
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
        """The plain-data view handed to a receiver (:func:`received_messages`)."""
        return received_messages([self], entity_path)[0]

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
        return None if ttl == INF or ttl is None else _delta(ttl)



def record_of(msg: Message, message_id: str | int, size: int | None = None) -> _Record:
    """A record of ``msg``, with ``message_id`` (the message's, or a number the broker
    gives it) and ``size`` (by default the message's :attr:`~aiosb.Message.size`,
    worked out from the fields as they are read: the send path, #16)."""
    rec = _new(_Record)
    opt: tuple[Any, ...] = (
        msg.session_id, msg.partition_key, msg.content_type, msg.correlation_id,
        msg.subject, msg.reply_to, msg.reply_to_session_id, msg.to,
        msg.scheduled_enqueue_time, msg.amqp_extra, None, None, None,
    )
    _fill(
        rec, msg.body, message_id, msg.message_id, msg.time_to_live,
        _NO_OPT if opt == _NO_OPT else opt, msg.application_properties, size,
    )
    return rec


def _fill(
    rec: _Record,
    body: bytes,
    message_id: str | int,
    user_id: str | None,
    ttl: _dt.timedelta | None,
    opt: tuple[Any, ...],
    props: dict[str, Any] | None,
    size: int | None,
) -> None:
    """Set every slot of a new record: the sent fields (``opt`` is :data:`_NO_OPT` when
    none of its fields is set; ``user_id`` the message's own id, ``message_id`` what the
    record keeps) and a fresh broker state. ``size`` is worked out here by default, from
    the fields as they are read (the send path, #16)."""
    rec.body = body
    rec._mid = message_id
    if ttl is None:
        rec.ttl = INF
    else:
        rec.ttl = seconds = _seconds(ttl)
        if seconds != INF:
            _DELTAS.setdefault(seconds, ttl)
    rec._opt = opt
    if size is None:
        size = len(body)
        if opt is not _NO_OPT:
            size += texts_size((user_id, *opt[:AT]))
        elif user_id is not None:  # an id alone, the common case: spelled out
            size += (
                len(user_id) if user_id.__class__ is str and user_id.isascii()
                else texts_size((user_id,))
            )
        if props:
            size += properties_size(props)
    # Slots of their own: a tuple holding a dict is tracked by the garbage collector,
    # and a key is set on every message of an entity with duplicate detection.
    rec.props = dict(props) if props else None
    rec.key = None
    rec.size = size
    rec.seq = 0
    rec.enqueued = 0.0
    rec.expires = None
    rec.delivery_count = 0
    rec.lock_token = None
    rec.locked_until = None
    rec.state = AVAILABLE
    rec.deferred = False
    rec.frag = 0




def records_from_columns(bodies: list[bytes], columns: dict[str, Any]) -> list[_Record]:
    """What ``record_of(msg, msg.message_id or auto_ids())`` makes of each message, for
    messages given as columns, with no message object per message (the syphon's move,
    #16): ``columns`` holds, by field name of :class:`~aiosb.Message`, a list with each
    message's value, or one value every message has; a field left out is ``None``
    (:func:`received_columns` gives such columns). The values are taken as they are
    (checked where they came from)."""
    n = len(bodies)
    get = columns.get
    texts = [get(name) for name in _OPT_SENT]
    opts: Iterable[tuple[Any, ...]]
    if texts.count(None) == len(texts):
        opts = itertools.repeat(_NO_OPT, n)
    else:
        opts = [
            _NO_OPT if opt == _NO_OPT else opt
            for opt in (
                (*row, *_NO_STATE) for row in zip(*(_listed(c, n) for c in texts), strict=True)
            )
        ]
    out = []
    new = _new
    for body, mid, opt, ttl, props in zip(
        bodies,
        _listed(get("message_id"), n),
        opts,
        _listed(get("time_to_live"), n),
        _listed(get("application_properties"), n),
        strict=True,
    ):
        rec = new(_Record)
        _fill(rec, body, mid or auto_ids(), mid, ttl, opt, props, None)
        out.append(rec)
    return out


def _listed(column: Any, n: int) -> list[Any]:
    """A column as a list of ``n`` values."""
    return column if column.__class__ is list else [column] * n


#: The fields of :class:`~aiosb.ReceivedMessage` that ``_opt`` holds, in its order
#: (:func:`received_messages` sets them in this order too).
_OPT_FIELDS = (
    "session_id", "partition_key", "content_type", "correlation_id", "subject", "reply_to",
    "reply_to_session_id", "to", "scheduled_enqueue_time", "amqp_extra",
    "dead_letter_reason", "dead_letter_error_description", "dead_letter_source",
)


#: The sent fields ``_opt`` holds, by their Message names and in its order (the rest of
#: it is broker state: the dead-letter fields).
_OPT_SENT = _OPT_FIELDS[: EXTRA + 1]
_NO_STATE = (None,) * (len(_OPT) - len(_OPT_SENT))

#: The properties column's entry for a message with none (read, never changed).
_NO_PROPS: dict[str, Any] = {}


def received_messages(
    recs: list[_Record], entity_path: str, peek: bool = False
) -> list[ReceivedMessage]:
    """The messages a receive (or, with ``peek``, a peek: no lock) hands out, one per
    record: built slot by slot (a keyword call costs four times as much), in one loop
    with no call per message (every receive comes through here, #16)."""
    out: list[ReceivedMessage] = []
    append = out.append
    new, cls, auto, names, inf, delta = _new, ReceivedMessage, _AUTO_ID, _STATE_NAMES, INF, _delta
    for rec in recs:
        m = new(cls)
        m.body = rec.body
        mid = rec._mid
        m.message_id = mid if mid.__class__ is str else auto % mid
        (
            m.session_id, m.partition_key, m.content_type, m.correlation_id, m.subject,
            m.reply_to, m.reply_to_session_id, m.to, m.scheduled_enqueue_time,
            m.amqp_extra, m.dead_letter_reason, m.dead_letter_error_description,
            m.dead_letter_source,
        ) = rec._opt
        ttl = rec.ttl
        m.time_to_live = None if ttl == inf else delta(ttl)
        props = rec.props
        m.application_properties = props.copy() if props else {}
        m.sequence_number = rec.seq
        m.enqueued_timestamp = rec.enqueued
        m.expires_timestamp = rec.expires
        m.delivery_count = rec.delivery_count
        if peek:
            m.lock_token = m.locked_until_timestamp = None
        else:
            m.lock_token = rec.lock_token
            m.locked_until_timestamp = rec.locked_until
        m.state = "deferred" if rec.deferred else names[rec.state]
        m.entity_path = entity_path
        append(m)
    return out


def received_columns(
    recs: list[_Record], entity_path: str, peek: bool = False
) -> tuple[list[bytes], dict[str, Any]]:
    """What ``[rec.received(entity_path) for rec in recs]`` holds, column by column,
    with no message object per record (the server's batch answer, #16): the bodies, and
    by field name of :class:`~aiosb.ReceivedMessage` (``application_properties`` for
    the properties) a list with each message's value or one value every message has; a
    field left out has its default for every message. A peek's columns carry no lock.
    The columns share what the records hold: read them, do not change them.
    """
    n = len(recs)
    columns: dict[str, Any] = {
        "message_id": [
            mid if mid.__class__ is str else _AUTO_ID % mid for mid in [r._mid for r in recs]
        ],
    }
    opts = [r._opt for r in recs]
    if opts.count(_NO_OPT) != n:
        columns.update(zip(_OPT_FIELDS, map(list, zip(*opts, strict=True)), strict=True))
    ttls = [r.ttl for r in recs]
    if ttls.count(INF) != n:
        columns["time_to_live"] = [None if t == INF else _delta(t) for t in ttls]
    props = [r.props for r in recs]
    if any(props):
        # The records' own dicts, not copies (#16: an object per message for the garbage
        # collector to count): a record's properties are replaced, never changed.
        columns["application_properties"] = [p or _NO_PROPS for p in props]
    columns["sequence_number"] = [r.seq for r in recs]
    columns["enqueued_timestamp"] = [r.enqueued for r in recs]
    columns["expires_timestamp"] = [r.expires for r in recs]
    columns["delivery_count"] = [r.delivery_count for r in recs]
    if not peek:
        columns["lock_token"] = [r.lock_token for r in recs]
        columns["locked_until_timestamp"] = [r.locked_until for r in recs]
    columns["state"] = ["deferred" if r.deferred else _STATE_NAMES[r.state] for r in recs]
    columns["entity_path"] = entity_path
    return [r.body for r in recs], columns


_new = object.__new__
