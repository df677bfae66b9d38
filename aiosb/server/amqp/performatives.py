"""AMQP 1.0 performatives, delivery states and errors: their codes, their fields, and the
map from :mod:`aiosb.errors` to the AMQP conditions the official SDKs turn into their
own exceptions.

A performative travels as a described list; :func:`parse` gives its code and its fields
(padded with ``None`` to the full count), :func:`performative` builds one from fields,
with every field on the wire (:data:`WRITTEN_FIELDS`).
"""

from __future__ import annotations

from typing import Any

from ... import errors
from .codec import (
    DecodeError,
    Described,
    Raw,
    Symbol,
    ULong,
    decode,
    put_compound,
    put_uint,
    put_variable,
)

__all__ = [
    "ACCEPTED",
    "ATTACH",
    "BATCH_FORMAT",
    "BEGIN",
    "CLOSE",
    "DETACH",
    "DISPOSITION",
    "END",
    "FLOW",
    "MODIFIED",
    "OPEN",
    "REJECTED",
    "RELEASED",
    "SASL_INIT",
    "SASL_MECHANISMS",
    "SASL_OUTCOME",
    "SOURCE",
    "TARGET",
    "TRANSFER",
    "WRITTEN_FIELDS",
    "accepted",
    "address",
    "amqp_error",
    "condition",
    "parse",
    "performative",
    "rejected",
    "whole",
]

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
ERROR = 0x1D
RECEIVED, ACCEPTED, REJECTED, RELEASED, MODIFIED = range(0x23, 0x28)
SOURCE, TARGET = 0x28, 0x29

#: The message format of a batch: one transfer whose data sections are messages.
BATCH_FORMAT = 0x80013700

#: How many fields each performative has (a peer may leave trailing ones off the wire).
FIELD_COUNT = {
    OPEN: 10, BEGIN: 8, ATTACH: 14, FLOW: 11, TRANSFER: 11, DISPOSITION: 6, DETACH: 3,
    END: 1, CLOSE: 1, SASL_MECHANISMS: 1, SASL_INIT: 3, SASL_CHALLENGE: 1,
    SASL_RESPONSE: 1, SASL_OUTCOME: 2,
}
#: How many fields each described list aiosb writes carries: all of them, nulls where
#: absent (#47). AMQP lets a sender leave trailing nulls off, but pyamqp before
#: azure-servicebus 7.15 indexes the fields it reads: an open's properties (``frame[9]``),
#: a detach's error (``frame[2]``), an end's or a close's error, a SASL outcome's
#: additional data, an attach's properties (``frame[13]``), a transfer's payload (put
#: after its eleventh field: a short transfer's payload is read as its ``more``), an
#: error's info. Every performative, delivery state, terminus and error, whole.
WRITTEN_FIELDS = {
    **FIELD_COUNT, ERROR: 3, RECEIVED: 2, ACCEPTED: 0, REJECTED: 1, RELEASED: 0,
    MODIFIED: 3, SOURCE: 11, TARGET: 7,
}


def whole(value: Any) -> Any:
    """A described list a peer sent (a terminus, a delivery state) as aiosb writes its
    own, with each field :data:`WRITTEN_FIELDS` counts (what the answering attach and a
    disposition's echo send back); any other value as it is."""
    if isinstance(value, Described) and isinstance(value.value, list):
        count = WRITTEN_FIELDS.get(value.descriptor) if isinstance(
            value.descriptor, int) else None
        if count is not None and len(value.value) < count:
            return Described(value.descriptor, [*value.value,
                                                *[None] * (count - len(value.value))])
    return value


def parse(body: bytes) -> tuple[int, list[Any], int]:
    """A frame body's performative: its code, its fields and where its payload starts.

    Raises:
        DecodeError: The body is not a described list with a known code.
    """
    quick = _quick(body)
    return quick if quick is not None else _parsed(body)


def _parsed(body: bytes) -> tuple[int, list[Any], int]:
    """:func:`parse` by the general decoder."""
    value, end = decode(body, 0)
    if not isinstance(value, Described) or not isinstance(value.value, list):
        raise DecodeError("a frame body is not a performative (a described list).")
    code = value.descriptor
    count = FIELD_COUNT.get(code) if isinstance(code, int) else None
    if count is None:
        raise DecodeError(f"unknown performative {code!r}.")
    fields = value.value
    if len(fields) < count:
        fields.extend([None] * (count - len(fields)))
    return code, fields, end


_u32 = int.from_bytes


def _quick(body: bytes) -> tuple[int, list[Any], int] | None:
    """:func:`parse` for a performative of the common shape, a list8 of nulls, booleans,
    small unsigned ints and short binaries (a transfer as the SDKs send it: #36, one per
    batch), read in one loop; ``None`` for any other, which :func:`decode` reads (and
    says what is wrong with)."""
    if len(body) < 6 or body[0] or body[1] != 0x53 or body[3] != 0xC0:
        return None
    code = body[2]
    count = FIELD_COUNT.get(code)
    end = 5 + body[4]
    if count is None or end > len(body):
        return None
    fields: list[Any] = []
    append = fields.append
    pos = 6
    try:
        for _ in range(body[5]):
            c = body[pos]
            if c == 0x40:
                append(None)
                pos += 1
            elif c == 0x52 or c == 0x50:  # smalluint, ubyte
                append(body[pos + 1])
                pos += 2
            elif c == 0x70:  # uint
                append(_u32(body[pos + 1:pos + 5]))
                pos += 5
            elif c == 0x56:  # boolean
                append(body[pos + 1] != 0)
                pos += 2
            elif c == 0x41 or c == 0x42:  # true, false
                append(c == 0x41)
                pos += 1
            elif c == 0x43:  # uint0
                append(0)
                pos += 1
            elif c == 0xA0:  # vbin8
                start = pos + 2
                pos = start + body[pos + 1]
                append(body[start:pos])
            else:
                return None
    except IndexError:
        return None
    if pos != end:
        return None  # an item past the list's end, or the list longer than its items
    if len(fields) < count:
        fields.extend([None] * (count - len(fields)))
    return code, fields, end


def performative(code: int, *fields: Any) -> Described:
    """The performative (or delivery state, terminus, error) ``code`` with ``fields``,
    followed by a null for each field not given (:data:`WRITTEN_FIELDS`)."""
    missing = WRITTEN_FIELDS[code] - len(fields)
    return Described(ULong(code), [*fields, *(None,) * missing] if missing > 0
                     else list(fields))


#: A transfer's last six fields: ``more`` (true, or null on a delivery's last frame),
#: then rcv-settle-mode, state, resume, aborted and batchable, null.
_MORE, _LAST = b"\x41" + b"\x40" * 5, b"\x40" * 6


def transfer(handle: int, delivery_id: int, tag: bytes, settled: bool,
             more: bool = False) -> Raw:
    """A transfer performative as it goes on the wire: what
    ``performative(TRANSFER, UInt(handle), UInt(delivery_id), tag, UInt(0), settled,
    more or None)`` encodes to (all eleven fields), written directly (#36: one per
    delivery)."""
    body = bytearray()
    put_uint(body, handle)
    put_uint(body, delivery_id)
    put_variable(body, 0xA0, 0xB0, tag)
    body += b"\x43\x41" if settled else b"\x43\x42"  # message-format 0, settled
    body += _MORE if more else _LAST
    out = bytearray(b"\x00\x53\x14")
    put_compound(out, 0xC0, 0xD0, 11, body)
    return Raw(out)


def accepted(delivery_id: int, last: int | None = None, *, role: bool = True) -> Raw:
    """A disposition settling ``delivery_id`` (to ``last``) as accepted, as it goes on
    the wire: what ``performative(DISPOSITION, role, UInt(delivery_id), last and
    UInt(last), True, performative(ACCEPTED))`` encodes to (all six fields), written
    directly: a receiver's (``role``) for each transfer an SDK sends unsettled (#36), a
    sender's for each message an SDK completes (#50)."""
    body = bytearray(b"\x41" if role else b"\x42")
    put_uint(body, delivery_id)
    if last is None:
        body += b"\x40"
    else:
        put_uint(body, last)
    # settled, accepted (an empty list), batchable: null
    body += b"\x41\x00\x53\x24\x45\x40"
    out = bytearray(b"\x00\x53\x15")
    put_compound(out, 0xC0, 0xD0, 6, body)
    return Raw(out)


def address(terminus: Any) -> str | None:
    """The address of a source or target (a described list), or ``None``."""
    if isinstance(terminus, Described) and isinstance(terminus.value, list) and terminus.value:
        found = terminus.value[0]
        return found if isinstance(found, str) else None
    return None


def amqp_error(condition_: str, description: str | None = None,
               info: dict[Any, Any] | None = None) -> Described:
    """An AMQP error: ``condition_`` (a symbol) and a ``description``, with all three
    fields on the wire (the Python SDK indexes the info field of a rejection)."""
    return Described(ULong(ERROR), [Symbol(condition_), description, info])


#: The error info entry naming the exact :mod:`aiosb.errors` class of a failure (an
#: aiosb extension, the twin of the HTTP server's ``x-aiosb-error`` header). The
#: condition stays the one the SDKs know, so that they classify and retry as they
#: would against Service Bus; aiosb's AMQP transport reads the class back.
ERROR_INFO = "x-aiosb-error"


def error_of(exc: errors.ServiceBusError, path: str | None = None) -> Described:
    """The AMQP error for an aiosb error met on entity ``path``: its condition, sentence
    (:func:`description`) and class."""
    return amqp_error(condition(exc), description(exc, path),
                      {Symbol(ERROR_INFO): type(exc).__name__})


#: The service's sentence for a missing entity. The JavaScript SDK knows a missing
#: entity by it (MessagingEntityNotFound): it takes ``amqp:not-found`` alone for a
#: communication problem.
_NOT_FOUND = "The messaging entity {path!r} could not be found: {message}"


def description(exc: errors.ServiceBusError, path: str | None = None) -> str:
    """The sentence an AMQP error carries for ``exc``, met on entity ``path``: its
    message, which for a missing entity (or rule, or subscription) begins as the
    service's does."""
    message = exc.message
    if isinstance(exc, errors.EntityNotFound) and path and "could not be found" not in message:
        return _NOT_FOUND.format(path=path, message=message)
    return message


def rejected(condition_: str, description: str | None = None) -> Described:
    """The rejected outcome carrying an error."""
    return performative(REJECTED, amqp_error(condition_, description))


def rejected_with(exc: errors.ServiceBusError, path: str | None = None) -> Described:
    """The rejected outcome carrying an aiosb error met on ``path`` (:func:`error_of`)."""
    return performative(REJECTED, error_of(exc, path))


_VENDOR = "com.microsoft:"
#: Each aiosb error class and the condition the SDKs map to the same meaning (the most
#: specific class first).
_CONDITIONS: tuple[tuple[type[errors.ServiceBusError], str], ...] = (
    (errors.ServerBusy, _VENDOR + "server-busy"),
    (errors.OperationTimeout, _VENDOR + "timeout"),
    (errors.TransientError, _VENDOR + "server-busy"),  # the SDKs retry it
    (errors.EntityNotFound, "amqp:not-found"),
    (errors.EntityAlreadyExists, _VENDOR + "entity-already-exists"),
    (errors.EntityUnavailable, _VENDOR + "entity-disabled"),
    (errors.MessageNotFound, _VENDOR + "message-not-found"),
    (errors.MessageSizeExceeded, "amqp:link:message-size-exceeded"),
    (errors.QuotaExceeded, "amqp:resource-limit-exceeded"),
    (errors.InvalidArgument, _VENDOR + "argument-error"),
    (errors.InvalidOperation, "amqp:not-allowed"),
    (errors.Unauthorized, "amqp:unauthorized-access"),
    (errors.MessageLockLost, _VENDOR + "message-lock-lost"),
    (errors.SessionLockLost, _VENDOR + "session-lock-lost"),
    (errors.SessionCannotBeLocked, _VENDOR + "session-cannot-be-locked"),
)


def condition(exc: errors.ServiceBusError) -> str:
    """The AMQP error condition for an aiosb error."""
    for cls, found in _CONDITIONS:
        if isinstance(exc, cls):
            return found
    return "amqp:internal-error"
