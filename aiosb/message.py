"""Messages: what an application sends (:class:`Message`) and receives (:class:`ReceivedMessage`).

Both are plain data: they never hold a connection, pickle cleanly, and can be built
on one thread (a Spark executor) and sent from another.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

from .errors import InvalidArgument, InvalidOperation

__all__ = [
    "MAX_ID_LENGTH",
    "MESSAGE_FIELDS",
    "PING_CONTENT_TYPE",
    "RECEIVED_FIELDS",
    "TEXT_FIELDS",
    "Message",
    "PropertyValue",
    "ReceivedMessage",
    "builder",
    "column_reader",
    "copier",
    "field_of",
    "fields_of",
    "one_or_many",
]

M = TypeVar("M", bound="Message")
T = TypeVar("T")

#: MessageId, SessionId and PartitionKey are at most this many characters.
MAX_ID_LENGTH = 128

#: The content type of a ping (PN-14): a broker never delivers such a message.
PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"

#: Types an application property may hold (the AMQP simple types Service Bus keeps).
PropertyValue = str | int | float | bool | bytes | None | _dt.datetime | _dt.timedelta | uuid.UUID

#: The whole numbers a property may be: AMQP's long and ulong between them.
LONG_MIN, ULONG_MAX = -(2**63), 2**64 - 1
_PROPERTY_TYPES = (str, int, float, bool, bytes, type(None), _dt.datetime, _dt.timedelta, uuid.UUID)
_UTC = _dt.UTC
#: Every field of a :class:`Message`, in declaration order, and the kind of value it
#: holds: ``bytes`` (the body), ``text`` (a string or None), ``duration`` (a timedelta or
#: None), ``instant`` (an aware datetime or None), ``properties`` (the application
#: properties), ``amqp`` (AMQP-encoded sections, or None). The one list of a message's
#: fields: every converter (the wire codecs, the AMQP mapping, the durable rows, the
#: backlog rewrite, Spark's columns) derives its fields from it, and
#: tests/test_field_table.py sends a message with every field set through each of them,
#: so a field added here that a converter forgets fails a test.
MESSAGE_FIELDS: dict[str, str] = {
    "body": "bytes",
    "message_id": "text",
    "session_id": "text",
    "partition_key": "text",
    "time_to_live": "duration",
    "scheduled_enqueue_time": "instant",
    "content_type": "text",
    "correlation_id": "text",
    "subject": "text",
    "reply_to": "text",
    "reply_to_session_id": "text",
    "to": "text",
    "application_properties": "properties",
    "amqp_extra": "amqp",
}
#: The broker's fields a :class:`ReceivedMessage` adds, in declaration order, and their
#: kinds: ``int``, ``seconds`` (UTC epoch seconds, a float; None where optional) or
#: ``text``.
RECEIVED_FIELDS: dict[str, str] = {
    "sequence_number": "int",
    "enqueued_timestamp": "seconds",
    "expires_timestamp": "seconds",
    "delivery_count": "int",
    "lock_token": "text",
    "locked_until_timestamp": "seconds",
    "dead_letter_reason": "text",
    "dead_letter_error_description": "text",
    "dead_letter_source": "text",
    "state": "text",
    "entity_path": "text",
}


def fields_of(kind: str, table: dict[str, str] = MESSAGE_FIELDS) -> tuple[str, ...]:
    """The fields of ``table`` holding ``kind``, in order."""
    return tuple(name for name, of in table.items() if of == kind)


def field_of(kind: str) -> str:
    """The one field of a :class:`Message` holding ``kind`` (``bytes``, ``duration``,
    ``instant``, ``properties``).

    Raises:
        LookupError: No field, or several, hold it: a converter that assumes one field
            of the kind must learn the others.
    """
    names = fields_of(kind)
    if len(names) != 1:
        raise LookupError(f"Message has {len(names)} fields of kind {kind!r}: {names}.")
    return names[0]


#: The text fields of a :class:`Message`, in their order (ids first).
TEXT_FIELDS = fields_of("text")
_FREE_TEXT = TEXT_FIELDS[4:]  # checked here; the ids and content type have rules of their own


def check_partition_key(session_id: str | None, partition_key: str | None) -> None:
    """PT-7: a PartitionKey set beside a SessionId must equal it.

    Raises:
        InvalidOperation: Both set and different.
    """
    if partition_key is not None and session_id is not None and partition_key != session_id:
        raise InvalidOperation(
            f"partition_key {partition_key!r} differs from session_id "
            f"{session_id!r}; when both are set they must be equal (PT-7)."
        )


def _check_text(name: str, value: object) -> None:
    """A string every protocol can carry: UTF-8, so no lone surrogates."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"{name} holds a lone surrogate ({value!r:.60}), which is not text any "
                "protocol can carry."
            ) from None


def _check_id(name: str, value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, not {type(value).__name__}.")
    _check_text(name, value)
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArgument(
            f"{name} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}."
        )


#: What an application property name may be: an HTTP token, since the REST protocol
#: carries properties as headers (RFC 9110 tchar).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_GOOD_NAMES: set[str] = set()


def property_name_ok(name: object) -> bool:
    """Whether :class:`Message` takes ``name`` as an application property name."""
    return name in _GOOD_NAMES or (isinstance(name, str) and bool(_TOKEN.fullmatch(name)))


def content_type_ok(value: object) -> bool:
    """Whether :class:`Message` takes ``value`` as a content type (or it is ``None``)."""
    return value is None or (isinstance(value, str) and value.isascii() and value.isprintable())


def _check_property_name(name: object) -> None:
    if not isinstance(name, str):
        raise InvalidArgument(f"application property names must be strings, not {name!r}.")
    if not property_name_ok(name):
        raise InvalidArgument(
            f"application property name {name!r} is not allowed: names are letters, digits "
            "and !#$%&'*+-.^_`|~ only, since the REST protocol carries them as HTTP headers."
        )
    if len(_GOOD_NAMES) < 10_000:
        _GOOD_NAMES.add(name)


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode())
    if isinstance(value, bytes):
        return len(value)
    if value is None:
        return 1
    if isinstance(value, uuid.UUID):
        return 16
    return 8


@dataclass(slots=True, eq=False)
class Message:
    """A message to send.

    Args:
        body: The payload; ``str`` is encoded as UTF-8, ``None`` is an empty body.
        message_id: The application's id; at most 128 characters. The sender assigns a
            unique one when it is ``None`` (duplicate detection and partitioning key on it).
        session_id: The session, for session-enabled entities; at most 128 characters.
        partition_key: Pins the message to one fragment of a partitioned entity; must
            equal ``session_id`` when both are set (PT-7).
        time_to_live: How long the message lives after it is enqueued (EX-1); capped by
            the entity's ``default_message_time_to_live`` (EX-7). ``None`` means the
            entity default.
        scheduled_enqueue_time: Enqueue the message at this instant (timezone-aware).
        content_type: MIME type of the body.
        correlation_id: Correlation identifier.
        subject: Application-specific label.
        reply_to: Address to reply to.
        reply_to_session_id: Session to reply to.
        to: Address the message is for.
        application_properties: Custom properties (str keys; simple values). Each
            travels as an AMQP type: a plain value as its Python type's (an ``int`` as
            an int when it fits 32 bits, else a long; :mod:`aiosb.values`), a typed
            value of :mod:`aiosb.values` (``Long``, ``UByte``, ``Symbol`` ...) as its
            own, which is what a property an AMQP client sent is, so that it goes back
            to AMQP receivers as it came (#47).
        amqp_extra: What an AMQP sender put in the message that no field above holds,
            as AMQP-encoded sections (``None``: nothing): a value or sequence body, or
            several data sections (:attr:`body` then holds them flattened: the data
            joined, a binary or string value as its bytes, anything else as the
            encoded body sections); the header's durable, priority and first-acquirer;
            delivery annotations; message annotations of the sender's own; the
            properties no field holds (user-id, content-encoding, group-sequence, a
            message or correlation id that is not a string; not the creation and
            absolute expiry times, which the SDKs derive from the time to live); the
            footer. aiosb's AMQP front end fills it and delivers it
            back in place, so what an AMQP client sends, an AMQP client receives; the
            broker, the journal, pairing's syphon and the aiosb wire carry it; the
            Service Bus REST protocol cannot (a REST receiver gets :attr:`body`).
            Build it with nothing but what a received message gave. :attr:`size` does
            not count it (the body counts once, flattened; an AMQP link bounds the
            whole message by its max-message-size).

    Raises:
        InvalidArgument: An id over 128 characters, a naive datetime, a non-positive
            time to live, or a property of a type Service Bus cannot carry.
        InvalidOperation: ``session_id`` and ``partition_key`` both set and different.
    """

    body: bytes = b""
    _: KW_ONLY
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live: _dt.timedelta | None = None
    scheduled_enqueue_time: _dt.datetime | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    to: str | None = None
    application_properties: dict[str, PropertyValue] = field(default_factory=dict)
    amqp_extra: bytes | None = None

    def __post_init__(self) -> None:
        body = self.body
        if type(body) is not bytes:
            if body is None:
                self.body = b""
            elif isinstance(body, str):
                _check_text("body", body)
                self.body = body.encode()
            elif isinstance(body, (bytearray, memoryview)):
                self.body = bytes(body)
            else:
                raise InvalidArgument(f"body must be bytes or str, not {type(body).__name__}.")
        if self.message_id == "":
            raise InvalidArgument(
                "message_id is empty; give one, or None to let the sender assign one."
            )
        _check_id("message_id", self.message_id)
        _check_id("session_id", self.session_id)
        _check_id("partition_key", self.partition_key)
        check_partition_key(self.session_id, self.partition_key)
        ttl = self.time_to_live
        if ttl is not None:
            if not isinstance(ttl, _dt.timedelta):
                raise InvalidArgument(
                    f"time_to_live must be a timedelta, not {type(ttl).__name__}."
                )
            if ttl <= _dt.timedelta(0):
                raise InvalidArgument(f"time_to_live must be positive, not {ttl}.")
        for name in _FREE_TEXT:
            value = getattr(self, name)
            if value is not None and type(value) is str and not value.isascii():
                _check_text(name, value)
        if self.content_type == "":
            self.content_type = None  # no content type, as every protocol says it
        if not content_type_ok(self.content_type):
            raise InvalidArgument(
                f"content_type {self.content_type!r} is not allowed: a content type is "
                "printable ASCII."
            )
        at = self.scheduled_enqueue_time
        if at is not None and (not isinstance(at, _dt.datetime) or at.tzinfo is None):
            raise InvalidArgument(
                f"scheduled_enqueue_time must be a timezone-aware datetime, not {at!r}."
            )
        props = self.application_properties
        if props:
            if not isinstance(props, dict):
                raise InvalidArgument(
                    f"application_properties must be a dict, not {type(props).__name__}."
                )
            for key, value in props.items():
                if key not in _GOOD_NAMES:
                    _check_property_name(key)
                if type(value) is str and not value.isascii():
                    _check_text(f"application property {key!r}", value)
                if not isinstance(value, _PROPERTY_TYPES):
                    raise InvalidArgument(
                        f"application property {key!r} has a value of type "
                        f"{type(value).__name__}, which Service Bus cannot carry."
                    )
                if isinstance(value, int) and not LONG_MIN <= value <= ULONG_MAX:
                    raise InvalidArgument(
                        f"application property {key!r} is {value}: a whole number "
                        "Service Bus carries fits 64 bits (AMQP's long or ulong)."
                    )
                if isinstance(value, _dt.datetime) and value.tzinfo is None:
                    raise InvalidArgument(
                        f"application property {key!r} must be a timezone-aware "
                        f"datetime (an AMQP timestamp is an instant), not {value!r}."
                    )
        elif props is None:
            self.application_properties = {}
        extra = self.amqp_extra
        if extra is not None and type(extra) is not bytes:
            if not isinstance(extra, (bytes, bytearray, memoryview)):
                raise InvalidArgument(
                    f"amqp_extra must be bytes or None, not {type(extra).__name__}."
                )
            self.amqp_extra = bytes(extra) or None

    @property
    def size(self) -> int:
        """The size Service Bus counts against its limit: body plus properties, in bytes."""
        size = len(self.body)
        mid = self.message_id
        if mid is not None:  # often the one text set: spelled out (#16)
            size += len(mid) if mid.__class__ is str and mid.isascii() else texts_size((mid,))
        texts = (
            self.session_id, self.partition_key, self.content_type, self.correlation_id,
            self.subject, self.reply_to, self.reply_to_session_id, self.to,
        )
        if texts != _NO_TEXTS:  # mostly none are set: one comparison in C (#16)
            size += texts_size(texts)
        props = self.application_properties
        return size + properties_size(props) if props else size


_NO_TEXTS = (None,) * (len(TEXT_FIELDS) - 1)


def texts_size(texts: Iterable[Any]) -> int:
    """The bytes text fields add to a message's :attr:`~Message.size` (``None``: a
    field not set, no bytes)."""
    size = 0
    for text in texts:
        if text is not None:
            size += len(text) if text.__class__ is str and text.isascii() else _value_size(text)
    return size


def properties_size(props: dict[str, Any]) -> int:
    """The bytes application properties add to a message's :attr:`~Message.size`:
    names and values."""
    size = 0
    key: Any  # checked by type() below, which mypy does not narrow on
    value: Any
    kind: type
    for key, value in props.items():
        kind = type(key)
        if kind is str and key.isascii():
            size += len(key)
        else:
            size += _value_size(key)
        kind = type(value)
        if kind is int or kind is float or kind is bool:
            size += 8
        elif kind is str and value.isascii():
            size += len(value)
        else:
            size += _value_size(value)
    return size


@dataclass(slots=True, eq=False)
class ReceivedMessage(Message):
    """A message as a receiver (or a peek) sees it: the sent fields plus broker state.

    Times are kept as UTC epoch seconds (``*_timestamp``) and exposed as timezone-aware
    datetimes (``enqueued_time``, ``expires_at``, ``locked_until``).

    Attributes:
        sequence_number: The broker-assigned, entity-unique sequence number.
        enqueued_timestamp: When the message was enqueued (for a scheduled message, its
            scheduled time; EX-5).
        expires_timestamp: When it expires (``None``: never; EX-1).
        delivery_count: How many times it was delivered (locked) so far.
        lock_token: The peek-lock token; ``None`` in receive-and-delete mode and peeks.
        locked_until_timestamp: When the lock expires, if locked.
        dead_letter_reason: Why it was dead-lettered (``TTLExpiredException`` on expiry).
        dead_letter_error_description: The description given with the reason.
        dead_letter_source: The entity it was dead-lettered from (after forwarding).
        state: ``"active"``, ``"deferred"`` or ``"scheduled"``.
        entity_path: The entity (and sub-queue) it was received from.
    """

    sequence_number: int = 0
    enqueued_timestamp: float = 0.0
    expires_timestamp: float | None = None
    delivery_count: int = 0
    lock_token: str | None = None
    locked_until_timestamp: float | None = None
    dead_letter_reason: str | None = None
    dead_letter_error_description: str | None = None
    dead_letter_source: str | None = None
    state: str = "active"
    entity_path: str = ""

    def __post_init__(self) -> None:  # built from validated data: nothing to check
        pass

    @property
    def enqueued_time(self) -> _dt.datetime:
        """When the message was enqueued (UTC)."""
        return _dt.datetime.fromtimestamp(self.enqueued_timestamp, _UTC)

    @property
    def expires_at(self) -> _dt.datetime | None:
        """When the message expires (UTC), or ``None`` if it never does."""
        ts = self.expires_timestamp
        return None if ts is None else _dt.datetime.fromtimestamp(ts, _UTC)

    @property
    def locked_until(self) -> _dt.datetime | None:
        """When the peek-lock expires (UTC), or ``None`` if the message is not locked."""
        ts = self.locked_until_timestamp
        return None if ts is None else _dt.datetime.fromtimestamp(ts, _UTC)


def _check_tables() -> None:
    """The tables above list exactly the dataclasses' fields, in order."""
    sent = [f.name for f in dataclasses.fields(Message)]
    received = [f.name for f in dataclasses.fields(ReceivedMessage)][len(sent) :]
    if sent != list(MESSAGE_FIELDS) or received != list(RECEIVED_FIELDS):
        raise TypeError(
            "MESSAGE_FIELDS and RECEIVED_FIELDS must list the fields of Message and "
            f"ReceivedMessage in order: Message has {sent}, ReceivedMessage adds {received}."
        )


_check_tables()


def _compiled(source: str, names: Sequence[str], known: Iterable[str], **env: Any) -> Any:
    """The function ``source`` defines, compiled with ``env`` as its globals, once every
    name it sets or reads is known: the one way the helpers below make code from field
    names (as :mod:`dataclasses` builds ``__init__``; a loop of ``getattr``/``setattr``
    costs several times as much per message).

    Raises:
        ValueError: A name that is not a known field.
    """
    fields = set(known)
    unknown = [name for name in names if name not in fields]
    if unknown:
        raise ValueError(f"not message fields: {unknown}.")
    namespace: dict[str, Any] = dict(env)
    exec(source, namespace)
    return namespace[source.split("(", 1)[0].removeprefix("def ")]


def copier(names: Sequence[str]) -> Callable[[Any, Any], None]:
    """A function ``copy(source, target)`` that sets each named field of ``target`` to
    ``source``'s, for paths that run per message (the syphon, every receive).

    Raises:
        ValueError: A name that is not a field of :class:`ReceivedMessage`.
    """
    body = "".join(f"    target.{name} = source.{name}\n" for name in names) or "    pass\n"
    copy: Callable[[Any, Any], None] = _compiled(
        "def copy(source, target):\n" + body, names, _ALL_FIELDS
    )
    return copy


def builder(
    cls: type[M], names: Sequence[str], *, dicts: Sequence[str] = ()
) -> Callable[[Iterable[Sequence[Any]]], list[M]]:
    """A function ``build(rows)`` that makes one ``cls`` per row, setting the named
    fields to the row's values in order, unchecked: for data a broker or a checked
    decoder produced, on paths that build every message of a batch. A ``None`` in a
    field named in ``dicts`` becomes a dict of the message's own.

    Raises:
        ValueError: A name that is not a field of ``cls``.
    """
    values = [f"v{i}" for i in range(len(names))]
    sets = "".join(
        f"        m.{name} = {{}} if {v} is None else {v}\n" if name in dicts
        else f"        m.{name} = {v}\n"
        for name, v in zip(names, values, strict=True)
    )
    source = (
        "def build(rows, new=new, cls=cls):\n"
        "    out = []\n"
        "    append = out.append\n"
        f"    for ({', '.join(values)},) in rows:\n"
        "        m = new(cls)\n"
        f"{sets}"
        "        append(m)\n"
        "    return out\n"
    )
    known = [f.name for f in dataclasses.fields(cls)]
    build: Callable[[Iterable[Sequence[Any]]], list[M]] = _compiled(
        source, names, known, new=object.__new__, cls=cls
    )
    return build


def column_reader(names: Sequence[str]) -> Callable[[Sequence[Any]], tuple[list[Any], ...]]:
    """A function ``read(messages)`` giving one list per named field, the field's value
    in each message, in order: the columns of a batch (a comprehension per field costs
    half as much as ``map(attrgetter)``).

    Raises:
        ValueError: A name that is not a field of :class:`ReceivedMessage`.
    """
    lists = "".join(f"[m.{name} for m in messages], " for name in names)
    read: Callable[[Sequence[Any]], tuple[list[Any], ...]] = _compiled(
        f"def read(messages):\n    return ({lists})\n", names, _ALL_FIELDS
    )
    return read


_ALL_FIELDS = (*MESSAGE_FIELDS, *RECEIVED_FIELDS)


def one_or_many(value: object, cls: type[T], what: str) -> list[T]:
    """``value`` as a list of ``cls``: itself alone, or the items of a list (any iterable
    but text, bytes and mappings), every one a ``cls``; ``what`` names the operation for
    the error. The check runs in C for a batch: sends and settlements come through here.

    Raises:
        InvalidArgument: Not a ``cls`` nor an iterable of them; the sentence names the
            type given (and the first item that is not one).
    """
    if isinstance(value, cls):
        return [value]
    if isinstance(value, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        value, Iterable
    ):
        raise InvalidArgument(
            f"{what} takes a {cls.__name__} or a list of them, not {type(value).__name__}."
        )
    items = list(value)
    if not all(map(isinstance, items, itertools.repeat(cls))):
        at, bad = next((i, v) for i, v in enumerate(items) if not isinstance(v, cls))
        raise InvalidArgument(
            f"{what} takes {cls.__name__} objects; item {at} of the list is a "
            f"{type(bad).__name__}."
        )
    return items
