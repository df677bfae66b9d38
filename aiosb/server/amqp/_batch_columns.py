"""The messages of a transfer as the broker's columns (#36): the shape the official SDKs
send most (a properties list of strings, application properties, one data section) read
with no object per message, as the HTTP transport's batches are; anything else is
:func:`.messages.messages_of`'s, field by field."""

from __future__ import annotations

import itertools
import operator
from typing import Any

from .codec import decode, decode_typed
from .messages import APP_PROPERTIES, DATA, PROPERTIES, application_properties
from .performatives import BATCH_FORMAT

__all__ = ["columns_of", "read_columns"]

#: Properties fields by position, as columns (by field name of Message) take them; the
#: other positions must be null for a message to go as columns (they go to amqp_extra).
_PROPERTY_COLUMNS = {0: "message_id", 2: "to", 3: "subject", 4: "reply_to",
                     5: "correlation_id", 6: "content_type", 10: "session_id",
                     12: "reply_to_session_id"}
_COLUMN_NAMES = (*_PROPERTY_COLUMNS.values(), "application_properties")
_STR_LENGTH = {0xA1: 1, 0xA3: 1, 0xB1: 4, 0xB3: 4}  # str8, sym8, str32, sym32
_u32 = int.from_bytes


def columns_of(payload: bytes, message_format: int) -> tuple[list[bytes], dict[str, Any]] | None:
    """:func:`read_columns`'s bodies and columns."""
    read = read_columns(payload, message_format)
    return None if read is None else (read[0], read[1])


def read_columns(payload: bytes, message_format: int
                 ) -> tuple[list[bytes], dict[str, Any], bool] | None:
    """The messages of a transfer (one, or a batch's) as the broker's columns (bodies, and
    by field name a list of each message's value), when each has the shape the SDKs send
    most: a
    properties section of strings, application properties, and one data section. Read
    with no object per message and no second look at its bytes (#36: a batch of 100
    over AMQP cost the server several times what it costs over HTTP, which sends
    columns). ``None`` when any message has more (a header, annotations, another body,
    a typed id ...): :func:`.messages.messages_of` reads those, field by field.

    The third item says the messages are alike: each is the first but for its id, ASCII
    of the first one's length, and its body (bytes): each passes the checks a message
    passes (:func:`aiosb.protocol.check_columns`) if the first does.
    """
    try:
        if message_format == 0:  # one message (#50: what the SDKs send one at a time)
            row = _message_row(payload)
            if row is None:
                return None
            return [row[0]], {name: [value] for name, value in zip(_COLUMN_NAMES, row[1:],
                                                                      strict=True)
                              if value is not None}, False
        if message_format == BATCH_FORMAT:
            alike = _look_alikes(payload)
            if alike is not None:
                return alike
            rows = [_message_row(message) for message in _data_sections(payload)]
        else:
            return None
    except (IndexError, UnicodeDecodeError, ValueError):  # DecodeError is a ValueError
        return None  # messages_of says what is wrong, if anything is
    if not rows or None in rows:
        return None
    bodies, *fields = map(list, zip(*rows, strict=True))
    columns = {
        name: values for name, values in zip(_COLUMN_NAMES, fields, strict=True)
        if values.count(None) != len(values)
    }
    return bodies, columns, False


def _data_sections(payload: bytes) -> list[bytes]:
    """The data sections of a batch (each a whole message), the rest skipped."""
    out: list[bytes] = []
    append = out.append
    pos, end = 0, len(payload)
    while pos < end:
        if payload[pos:pos + 3] == b"\x00Su":  # a data section
            c = payload[pos + 3]
            if c == 0xA0:
                n, start = payload[pos + 4], pos + 5
            elif c == 0xB0:
                n, start = _u32(payload[pos + 4:pos + 8]), pos + 8
            else:
                raise ValueError("a data section that is not binary")
            pos = start + n
            if pos > end:
                raise ValueError("a data section cut short")
            append(payload[start:pos])
        else:
            _, pos = decode(payload, pos)  # the batch's own properties, say
    return out


_NO_TEXTS: list[str | None] = [None] * 13
_row_texts = operator.itemgetter(*_PROPERTY_COLUMNS)
_tail_texts = operator.itemgetter(*list(_PROPERTY_COLUMNS)[1:])
#: What follows a string message-id in a properties list (its bytes) as the columns'
#: values, with the list's count: each SDK message has an id of its own, and the same
#: rest (the SDKs send a uuid and twelve nulls). Bounded: emptied when full.
_TAILS: dict[bytes, tuple[int, tuple[str | None, ...]]] = {}
_TAILS_KEPT = 256
_NO_TAIL = (0, ())


def _quick(buf: bytes, at: int, end: int) -> tuple[bytes, str, tuple[Any, ...]] | None:
    """The message from ``at`` to ``end`` of ``buf`` in the shape the official SDKs send
    most, read in a few steps (#36): a properties list8 whose first item is a str8 id and
    whose rest was seen before (:data:`_TAILS`), then one data section to the message's
    end. Its body, its id and the rest's entry; ``None`` for any other shape."""
    if end > len(buf) or buf[at + 3] != 0xC0 or buf[at + 6] != 0xA1 \
            or buf[at:at + 3] != b"\x00Ss":
        return None
    rest = at + 8 + buf[at + 7]  # past the id
    data = at + 5 + buf[at + 4]  # past the list
    tail = _TAILS.get(buf[rest:data]) if rest <= data else None
    if tail is None or tail[0] != buf[at + 5] or buf[data:data + 3] != b"\x00Su":
        return None
    c = buf[data + 3]
    if c == 0xA0 and data + 5 + buf[data + 4] == end:
        return buf[data + 5:end], buf[at + 8:rest].decode(), tail
    if c == 0xB0 and data + 8 + _u32(buf[data + 4:data + 8]) == end:
        return buf[data + 8:end], buf[at + 8:rest].decode(), tail
    return None


def _look_alikes(payload: bytes) -> tuple[list[bytes], dict[str, Any], bool] | None:
    """The columns of a batch whose messages all have the quick shape (:func:`_quick`)
    and one rest after their ids (what one SDK sender sends): the bodies, the ids, and
    the rest's values once for all; ``None`` for any other batch. Read in place, in one
    loop: no message is cut out of the batch first, and the rest is compared where it
    lies (#36: this loop is the most an SDK batch costs the server beside the broker).
    Alike (:func:`read_columns`) when read at once (:func:`_strided`) with ASCII ids."""
    bodies: list[bytes] = []
    ids: list[str] = []
    add_body, add_id, starts = bodies.append, ids.append, payload.startswith
    rest: bytes | None = None  # the first message's, which every other's must be
    shared: tuple[int, tuple[str | None, ...]] = _NO_TAIL
    size = count = 0
    alike = False
    pos, end = 0, len(payload)
    while pos < end:
        if not starts(b"\x00Su", pos):  # not a data section
            _, pos = decode(payload, pos)  # the batch's own properties, say
            continue
        c, section = payload[pos + 3], pos
        if c == 0xA0:
            at, pos = pos + 5, pos + 5 + payload[pos + 4]
        elif c == 0xB0:
            at, pos = pos + 8, pos + 8 + _u32(payload[pos + 4:pos + 8])
        else:
            return None
        # The message, at to pos: a properties list8 of a str8 id and the rest, then
        # one data section to its end (_quick's shape).
        if pos > end or not starts(b"\x00Ss\xc0", at) or payload[at + 6] != 0xA1:
            return None
        after_id = at + 8 + payload[at + 7]
        data = at + 5 + payload[at + 4]  # past the list
        if rest is None:
            if after_id > data:
                return None
            rest = payload[after_id:data]
            shared = _TAILS.get(rest, _NO_TAIL)
            size, count = len(rest), shared[0]
            if shared is _NO_TAIL:
                return None
        if data - after_id != size or payload[at + 5] != count or not starts(rest, after_id):
            return None
        if starts(b"\x00Su\xa0", data):
            body = data + 5
            if body + payload[data + 4] != pos:
                return None
        elif starts(b"\x00Su\xb0", data):
            body = data + 8
            if body + _u32(payload[data + 4:body]) != pos:
                return None
        else:
            return None
        add_body(payload[body:pos])
        add_id(payload[at + 8:after_id].decode())
        if len(ids) == 1:
            ascii_ids = _strided(payload, section, pos - section, at + 8, after_id, body,
                                 bodies, ids)
            if ascii_ids is not None:
                alike = ascii_ids and ids[0].isascii()
                break
    if shared is _NO_TAIL:
        return None
    columns: dict[str, Any] = {"message_id": ids}
    for name, value in zip(_COLUMN_NAMES[1:], shared[1], strict=False):
        if value is not None:
            columns[name] = value  # one value, every message's
    return bodies, columns, alike


def _strided(payload: bytes, start: int, stride: int, id_at: int, id_end: int, body: int,
             bodies: list[bytes], ids: list[str]) -> bool | None:
    """Read the messages after a batch's first into ``bodies`` and ``ids`` when each is
    the first one's size and every byte of theirs but their ids and bodies is the first
    one's (the same shape, lengths and rest, so each reads as the first did): checked a
    byte position at a time across all of them, and cut out with no loop in Python
    (#36: a batch of messages alike, what an SDK sender sends most): whether the ids
    read are ASCII. ``None``, with nothing read, for any other batch: :func:`_look_alikes`
    reads on message by message.

    The first message's data section is ``stride`` bytes from ``start``, its id from
    ``id_at`` to ``id_end``, its body from ``body`` to its end.
    """
    begin, end = start + stride, len(payload)
    count, left = divmod(end - begin, stride)
    if left or not count:
        return None
    for at in itertools.chain(range(start, id_at), range(id_end, body)):
        if payload[at + stride::stride] != payload[at:at + 1] * count:
            return None
    id_size, size, beyond = id_end - id_at, stride - (body - start), stride * (count + 1)
    # Cut from the batch as text at once (#36: a decode per id cost twice as much); as
    # ASCII, which Latin-1 reads as UTF-8 does (the SDKs' ids are uuids), else id by id.
    text = payload.decode("latin-1")
    more = [text[at:at + id_size] for at in range(id_at + stride, id_at + beyond, stride)]
    ascii_ids = "".join(more).isascii()
    if not ascii_ids:
        try:
            more = [payload[at:at + id_size].decode()
                    for at in range(id_at + stride, id_at + beyond, stride)]
        except UnicodeDecodeError:
            return None
    ids += more
    bodies += [payload[at:at + size] for at in range(body + stride, body + beyond, stride)]
    return ascii_ids


def _message_row(buf: bytes) -> tuple[Any, ...] | None:
    """One message as a row (body, the property columns' values, its application
    properties); ``None`` if it has more than the columns hold: the quick shape
    (:func:`_quick`), else section by section (:func:`_sections_row`)."""
    quick = _quick(buf, 0, len(buf))
    if quick is not None:
        body, mid, tail = quick
        return (body, mid, *tail[1], None)
    return _sections_row(buf)


def _sections_row(buf: bytes) -> tuple[Any, ...] | None:
    """:func:`_message_row`, section by section."""
    pos, end = 0, len(buf)
    body: bytes | None = None
    texts: list[str | None] = _NO_TEXTS
    props: dict[str, Any] | None = None
    while pos < end:
        if buf[pos] != 0 or buf[pos + 1] != 0x53:
            return None
        code = buf[pos + 2]
        pos += 3
        if code == DATA:
            if body is not None:
                return None  # several data sections: amqp_extra keeps them
            c = buf[pos]
            if c == 0xA0:
                n, pos = buf[pos + 1], pos + 2
            elif c == 0xB0:
                n, pos = _u32(buf[pos + 1:pos + 5]), pos + 5
            else:
                return None
            if pos + n > end:
                return None
            body, pos = buf[pos:pos + n], pos + n
        elif code == PROPERTIES:
            c = buf[pos]
            if c == 0x45:
                pos += 1
                continue
            if c == 0xC0:
                count, items_end, pos = buf[pos + 2], pos + 2 + buf[pos + 1], pos + 3
            elif c == 0xD0:
                count, pos = _u32(buf[pos + 5:pos + 9]), pos + 9
                items_end = pos - 4 + _u32(buf[pos - 8:pos - 4])
            else:
                return None
            if count > 13 or items_end > end:
                return None
            texts = [None] * 13
            first = buf[pos] == 0xA1 and c == 0xC0
            for i in range(count):
                if items_end - pos == count - i == buf.count(0x40, pos, items_end):
                    pos = items_end  # the rest are nulls
                    break
                c = buf[pos]
                if c == 0x40:
                    pos += 1
                    continue
                width = _STR_LENGTH.get(c)
                if width is None or i not in _PROPERTY_COLUMNS:
                    return None  # a typed id, a time, user-id ...: field by field
                n = buf[pos + 1] if width == 1 else _u32(buf[pos + 1:pos + 5])
                start = pos + 1 + width
                pos = start + n
                if pos > items_end:
                    return None
                texts[i] = buf[start:pos].decode()
                if first and i == 0:
                    id_end = pos
            if pos != items_end:
                return None
            if first:  # the rest of such a list, for the next message (_message_row)
                if len(_TAILS) >= _TAILS_KEPT:
                    _TAILS.clear()
                _TAILS[buf[id_end:items_end]] = (count, _tail_texts(texts))
        elif code == APP_PROPERTIES:  # each value of its AMQP type (#47)
            value, pos = decode_typed(buf, pos)
            if not isinstance(value, dict):
                return None
            props = application_properties(value) if value else None
        else:
            return None
    if body is None:
        return None
    return (body, *_row_texts(texts), props)
