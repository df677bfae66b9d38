"""Issue 36, point 3: a batch of the shape the SDKs send is read straight into the
broker's columns (``columns_of``), as the HTTP transport's batches are; it must give
exactly what reading each message (``messages_of``) gives, and step aside for any
message it cannot hold."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiosb.errors import ServiceBusError
from aiosb.message import Message
from aiosb.protocol import check_columns
from aiosb.server.amqp._batch_columns import columns_of, read_columns
from aiosb.server.amqp.codec import DecodeError, Described, Symbol, ULong, encode
from aiosb.server.amqp.messages import messages_of
from aiosb.server.amqp.performatives import BATCH_FORMAT

PROPERTIES, APP, DATA, HEADER = 0x73, 0x74, 0x75, 0x70

texts = st.one_of(st.none(), st.text(max_size=20), st.text("ab-", min_size=1, max_size=8))
app = st.one_of(st.none(), st.dictionaries(
    st.text("abcdefghij", min_size=1, max_size=5),
    st.one_of(st.integers(-5, 5), st.text(max_size=5), st.booleans(), st.floats(0, 1)),
    max_size=3))


@st.composite
def sdk_messages(draw) -> bytes:
    fields = [draw(texts), None, draw(texts), draw(texts), draw(texts), draw(texts),
              draw(st.one_of(st.none(), st.sampled_from(["application/json", "text/plain"])).map(
                  lambda c: None if c is None else Symbol(c))),
              None, None, None, draw(texts), None, draw(texts)]
    while fields and fields[-1] is None and draw(st.booleans()):
        fields.pop()
    out = encode(Described(ULong(PROPERTIES), fields))
    props = draw(app)
    if props is not None:
        out += encode(Described(ULong(APP), props))
    return out + encode(Described(ULong(DATA), draw(st.binary(max_size=40))))


def batch(inner: list[bytes]) -> bytes:
    return encode(Described(ULong(PROPERTIES), ["batch-id"])) + b"".join(
        encode(Described(ULong(DATA), m)) for m in inner)


def as_messages(bodies: list[bytes], columns: dict) -> list[Message]:
    """A column is a list of each message's value, or one value every message has."""
    return [Message(body, **{name: values[i] if isinstance(values, list) else values
                             for name, values in columns.items()})
            for i, body in enumerate(bodies)]


def fields(message: Message) -> dict:
    return {f.name: getattr(message, f.name) for f in dataclasses.fields(Message)}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(sdk_messages(), min_size=1, max_size=6))
def test_columns_give_what_message_by_message_gives(inner):
    payload = batch(inner)
    try:
        expected = [fields(m) for m in messages_of(payload, BATCH_FORMAT)]
    except Exception as exc:  # refused field by field: the columns are refused too
        got = columns_of(payload, BATCH_FORMAT)
        if got is not None:
            with pytest.raises(type(exc)):
                as_messages(*got)
        return
    got = columns_of(payload, BATCH_FORMAT)
    assert got is not None
    assert [fields(m) for m in as_messages(*got)] == expected


@pytest.mark.parametrize("odd", [
    encode(Described(ULong(HEADER), [True])),  # a header: durable, ttl
    encode(Described(ULong(0x72), {Symbol("x-opt-partition-key"): "k"})),
    encode(Described(ULong(PROPERTIES), [None, b"user"])),  # user-id
    encode(Described(ULong(0x77), "a value body")),
    encode(Described(ULong(DATA), b"a second data section")),
], ids=["header", "annotations", "user-id", "value", "two-data"])
def test_a_message_columns_cannot_hold_sends_the_batch_field_by_field(odd):
    plain = encode(Described(ULong(PROPERTIES), ["m1"])) + encode(Described(ULong(DATA), b"x"))
    assert columns_of(batch([plain]), BATCH_FORMAT) is not None
    assert columns_of(batch([plain, odd + encode(Described(ULong(DATA), b"y"))
                             if odd[2] != DATA else plain + odd]), BATCH_FORMAT) is None


def test_one_message_or_a_batch_goes_as_columns_and_no_other_format():
    plain = encode(Described(ULong(PROPERTIES), ["m1"])) + encode(Described(ULong(DATA), b"x"))
    assert columns_of(plain, 0) == ([b"x"], {"message_id": ["m1"]})
    assert columns_of(batch([plain]), BATCH_FORMAT) == ([b"x"], {"message_id": ["m1"]})
    assert columns_of(plain, 7) is None


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(sdk_messages())
def test_one_message_as_columns_is_what_reading_it_gives(message):
    try:
        (expected,) = messages_of(message, 0)
    except Exception as exc:
        got = columns_of(message, 0)
        if got is not None:
            with pytest.raises(type(exc)):
                as_messages(*got)
        return
    got = columns_of(message, 0)
    assert got is not None
    assert [fields(m) for m in as_messages(*got)] == [fields(expected)]


@st.composite
def look_alike_batches(draw) -> list[bytes]:
    """Messages as one SDK sender makes them: the same properties but for a string id
    of their own (any length), bodies of any size (a data section of either width), and
    now and then a message that differs after its data section or in its list's count."""
    rest = [None, draw(texts), draw(texts), None, None, None, None, None, None,
            draw(texts), None, draw(texts)]
    out = []
    for _ in range(draw(st.integers(1, 8))):
        fields = [draw(st.text(min_size=1, max_size=150)), *rest]
        message = encode(Described(ULong(PROPERTIES), fields)) + encode(Described(ULong(
            DATA), draw(st.one_of(st.binary(max_size=20), st.binary(min_size=250)))))
        if message[3] == 0xC0 and draw(st.integers(0, 9)) == 0:  # the same bytes, a count
            message = message[:5] + bytes([draw(st.integers(0, 20))]) + message[6:]  # of its own
        odd = draw(st.integers(0, 19))
        if odd == 0:
            message += encode(Described(ULong(0x78), {Symbol("k"): 1}))  # a footer
        elif odd == 1:
            message += encode(Described(ULong(DATA), b"a second data section"))
        out.append(message)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(look_alike_batches())
def test_look_alike_messages_read_quickly_give_what_message_by_message_gives(inner):
    """#36: the properties after a message's id are read once for the messages that
    share them; each message's id, body and what follows its body are still its own."""
    payload = batch(inner)
    try:
        expected = [fields(m) for m in messages_of(payload, BATCH_FORMAT)]
    except Exception as exc:
        got = columns_of(payload, BATCH_FORMAT)
        if got is not None:
            with pytest.raises(type(exc)):
                as_messages(*got)
        return
    for _ in range(2):  # the second time, every message's rest has been seen
        got = columns_of(payload, BATCH_FORMAT)
        if got is None:  # what columns cannot hold: field by field, as ever
            assert any(m.amqp_extra for m in messages_of(payload, BATCH_FORMAT))
            continue
        assert [fields(m) for m in as_messages(*got)] == expected


def test_an_id_longer_than_its_list_is_not_read_quickly():
    """#36: the quick reading trusts no length the field-by-field one would refuse."""
    only_id = encode(Described(ULong(PROPERTIES), ["abc"])) + encode(Described(ULong(DATA), b"x"))
    assert columns_of(batch([only_id, only_id]), BATCH_FORMAT) is not None  # the rest seen
    # A list of 3 bytes (its count, the id's code and length) whose id says 3 bytes: the
    # data section, where the list ends, would be read as the id too.
    crafted = b"\x00Ss\xc0\x03\x01\xa1\x03" + b"\x00Su\xa0\x01x"
    with pytest.raises(DecodeError):
        messages_of(batch([crafted]), BATCH_FORMAT)
    assert columns_of(batch([crafted]), BATCH_FORMAT) is None
    assert columns_of(batch([only_id, crafted]), BATCH_FORMAT) is None
    assert columns_of(crafted, 0) is None


def test_a_batch_cut_short_is_not_read_quickly():
    """#36: a last data section that says more bytes than the transfer holds is refused
    as the field-by-field reading refuses it, not read up to where the bytes end."""
    plain = encode(Described(ULong(PROPERTIES), ["m1"])) + encode(Described(ULong(DATA), b"xy"))
    whole = batch([plain, plain])
    assert columns_of(whole, BATCH_FORMAT) is not None  # the rest seen, whole
    # The outer section says one byte more, the inner body one more too: only the
    # transfer's end, one byte early, says the batch is cut short.
    inner = plain[:-3] + b"\x03xyz"
    cut = batch([plain]) + b"\x00Su\xa0" + bytes([len(inner)]) + inner[:-1]
    with pytest.raises(DecodeError):
        messages_of(cut, BATCH_FORMAT)
    assert columns_of(cut, BATCH_FORMAT) is None


@st.composite
def same_size_batches(draw) -> list[bytes]:
    """Messages as one SDK sender makes them, all of one size (ids of one length, bodies
    of one size: what the quick reading takes a byte position at a time across them),
    now and then with one byte of a message after the first changed, anywhere."""
    rest = [None, draw(texts), None, None, None, None, None, None, None, draw(texts)]
    id_size = draw(st.one_of(st.integers(0, 40), st.integers(125, 131)))  # the limit: 128
    body_size = draw(st.sampled_from([0, 1, 64, 300]))
    lead = draw(st.sampled_from(["", "é", "€"]))  # ids of one size, not all ASCII
    out = [encode(Described(ULong(PROPERTIES), [
        lead + draw(st.text("0123456789abcdef-", min_size=id_size, max_size=id_size)),
        *rest]))
        + encode(Described(ULong(DATA), draw(st.binary(min_size=body_size,
                                                       max_size=body_size))))
        for _ in range(draw(st.integers(2, 12)))]
    out = _Inner(out)
    if draw(st.booleans()):
        k = draw(st.integers(1, len(out) - 1))
        at = draw(st.integers(0, len(out[k]) - 1))
        before = out[k]
        out[k] = out[k][:at] + bytes([draw(st.integers(0, 255))]) + out[k][at + 1:]
        out.changed = out[k] != before
    return out


class _Inner(list[bytes]):
    """A batch's messages; ``changed``: one of them had a byte changed (the others are
    as one sender makes them)."""

    changed = False


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(same_size_batches())
def test_messages_of_one_size_read_at_once_give_what_message_by_message_gives(inner):
    """#36: a batch of messages alike in size is read with a check of each byte position
    across them all; any message that differs from the first but in its id and body
    (its lengths, its rest, a section's code) is read as it is, never as the first."""
    payload = batch(inner)
    try:
        expected = [fields(m) for m in messages_of(payload, BATCH_FORMAT)]
    except Exception as exc:
        for _ in range(2):
            got = columns_of(payload, BATCH_FORMAT)
            if got is not None:
                with pytest.raises(type(exc)):
                    as_messages(*got)
        return
    for _ in range(2):  # the second time, the first message's rest has been seen
        got = columns_of(payload, BATCH_FORMAT)
        if got is None:  # read message by message: always right; for a batch as a
            # sender makes it, only when a message has more than the columns hold
            assert inner.changed or any(m.amqp_extra for m in messages_of(payload, BATCH_FORMAT))
            continue
        assert [fields(m) for m in as_messages(*got)] == expected


def _checked(bodies: list[bytes], columns: dict) -> type[Exception] | None:
    try:
        check_columns(bodies, columns)
    except ServiceBusError as exc:
        return type(exc)
    return None


def _alike_passes_as_its_first(payload: bytes) -> None:
    """A batch read_columns calls alike passes the checks of a message (the server checks
    only its first message then) exactly when every message of it passes them."""
    for _ in range(2):  # the second time, the first message's rest has been seen
        read = read_columns(payload, BATCH_FORMAT)
        if read is None or not read[2]:
            continue
        bodies, columns, _alike = read
        first = {name: value[:1] if isinstance(value, list) else value
                 for name, value in columns.items()}
        assert _checked(bodies[:1], first) == _checked(bodies, columns)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(same_size_batches())
def test_alike_messages_pass_the_checks_as_their_first_does(inner):
    """#36: the server checks the first message of a batch of messages alike (each the
    first but for an ASCII id of its length and its body) for them all."""
    _alike_passes_as_its_first(batch(inner))


def test_ids_of_one_size_not_all_ascii_are_not_alike():
    """65 two-byte letters are 65 characters, 130 ASCII bytes 130 (over the limit of
    128): ids of one size in bytes are of one length only where they are all ASCII."""
    rest = [None] * 12
    inner = [encode(Described(ULong(PROPERTIES), [mid, *rest])) + encode(
        Described(ULong(DATA), b"body")) for mid in ("é" * 65, "a" * 130, "b" * 130)]
    _alike_passes_as_its_first(batch(inner))
    read = read_columns(batch(inner), BATCH_FORMAT)
    assert read is not None and read[1]["message_id"][1] == "a" * 130
    assert _checked(read[0], read[1]) is not None
