"""Hypothesis strategies for the AMQP front end, built from the codec's own types (#36).

Structure-aware: a client's input is drawn as an SDK-like script (protocol headers, SASL,
OPEN, BEGIN, ``$cbs`` put-token, senders and receivers on the namespace's entities,
transfers of real messages, flows, dispositions, ``$management`` requests, DETACH, END,
CLOSE) whose steps hypothesis drops, repeats, reorders and mutates, field by field,
with any AMQP value of the codec's types in any field; now and then bytes are flipped or
the input is cut short. So the fuzzer reaches the state machines' deep states (an
attached link with credit, an unsettled delivery) and not only the frame reader.

Why hypothesis rather than atheris alone: the frames are nested typed values, which
byte mutation rarely keeps well-formed past the first performative; hypothesis builds
them well-formed and shrinks a finding to its smallest input. Coverage guidance comes
from atheris in the campaign (``./dev fuzz``), which drives these same strategies
(``fuzz_one_input``) besides mutating the recorded SDK sessions byte by byte.
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from typing import Any

from hypothesis import strategies as st

from aiosb.auth import DEV_KEY, DEV_KEY_NAME, SasCredential
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import (
    AMQP_HEADER,
    SASL_HEADER,
    Array,
    Byte,
    Char,
    Described,
    Float32,
    Int,
    Raw,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    encode,
    frame,
)

from .harness import NAMESPACE

HEADER, DELIVERY_ANNOTATIONS, ANNOTATIONS, PROPERTIES, APP, DATA, SEQUENCE, VALUE, FOOTER = (
    range(0x70, 0x79)
)
ADDRESSES = [
    "q1", "sq", "dq", "t1", "t1/Subscriptions/s1", "q1/$DeadLetterQueue",
    "t1/Subscriptions/s1/$DeadLetterQueue", "$cbs", "q1/$management", "sq/$management",
    "t1/Subscriptions/s1/$management", "nope", "", "amqps://localhost/q1", "q1/$Transfer",
]
MANAGEMENT_OPERATIONS = [
    f"com.microsoft:{op}" for op in (
        "renew-lock", "update-disposition", "peek-message", "receive-by-sequence-number",
        "schedule-message", "cancel-scheduled-message", "renew-session-lock",
        "get-session-state", "set-session-state", "get-message-sessions", "add-rule",
        "remove-rule", "enumerate-rules", "no-such-operation",
    )
]
MANAGEMENT_KEYS = [
    "lock-tokens", "disposition-status", "deadletter-reason", "deadletter-description",
    "from-sequence-number", "message-count", "sequence-numbers", "receiver-settle-mode",
    "messages", "session-id", "session-state", "skip", "top", "rule-name",
    "rule-description", "sql-filter", "correlation-filter", "expression", "properties-to-modify",
]

ascii_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
symbols = ascii_text.map(Symbol)
small = st.integers(0, 4)
timestamps = st.datetimes(min_value=_dt.datetime(1970, 1, 1), max_value=_dt.datetime(2100, 1, 1),
                          timezones=st.just(_dt.UTC)).map(
    lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))

scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(),
    st.integers(0, 2**8 - 1).map(UByte), st.integers(0, 2**16 - 1).map(UShort),
    st.integers(0, 2**32 - 1).map(UInt), st.integers(0, 2**64 - 1).map(ULong),
    st.integers(-(2**7), 2**7 - 1).map(Byte), st.integers(-(2**15), 2**15 - 1).map(Short),
    st.integers(-(2**31), 2**31 - 1).map(Int), st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32).map(Float32), st.floats(), st.characters().map(Char),
    st.text(max_size=16), symbols, st.binary(max_size=24), st.uuids(), timestamps,
    st.binary(min_size=4, max_size=4).map(lambda b: Raw(b"\x74" + b)),  # a decimal32
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(symbols, st.text(max_size=6), st.integers(0, 9).map(ULong)),
                        inner, max_size=4),
        st.builds(Described, st.one_of(st.integers(0, 0x80).map(ULong), symbols), inner),
        st.lists(st.integers(0, 2**32 - 1).map(UInt), max_size=4).map(
            lambda items: Array(UInt, items)),
        st.lists(symbols, max_size=3).map(lambda items: Array(Symbol, items)),
    ),
    max_leaves=10,
)


def _field(draw: Any, plausible: st.SearchStrategy[Any]) -> Any:
    """A field: most often what a client would send there, now and then anything."""
    return draw(st.one_of(plausible, plausible, plausible, plausible, plausible, values))


#: One expiry for every token of the run: a token signed anew at each draw varies in
#: length (its signature, URL-quoted), and hypothesis needs the same draws to make the
#: same input when it replays one.
_EXPIRY = int(time.time()) + 6 * 3600


def _token(path: str) -> str:
    return SasCredential(DEV_KEY_NAME, DEV_KEY).token(f"sb://localhost/{path}",
                                                      expiry=_EXPIRY)


@st.composite
def messages(draw: Any) -> bytes:
    """An encoded message: the sections a client sends, any of them odd."""
    out = bytearray()
    if draw(st.booleans()):
        out += encode(Described(ULong(HEADER), [
            _field(draw, st.booleans()), _field(draw, st.integers(0, 9).map(UByte)),
            _field(draw, st.one_of(st.none(), st.integers(1, 10**7).map(UInt))),
        ]))
    if draw(st.booleans()):
        notes = draw(st.dictionaries(st.sampled_from([
            Symbol("x-opt-partition-key"), Symbol("x-opt-scheduled-enqueue-time"),
            Symbol("x-opt-via-partition-key"), Symbol("custom")]),
            st.one_of(ascii_text, timestamps, values), max_size=3))
        out += encode(Described(ULong(ANNOTATIONS), notes))
    if draw(st.booleans()):
        props = [_field(draw, st.one_of(ascii_text, st.uuids(), st.integers(0, 99).map(ULong))),
                 None, _field(draw, ascii_text), _field(draw, ascii_text), None,
                 _field(draw, ascii_text), _field(draw, symbols), None, None, None,
                 _field(draw, st.one_of(st.none(), st.sampled_from(["s-1", "s-2"])))]
        out += encode(Described(ULong(PROPERTIES), props))
    if draw(st.booleans()):
        out += encode(Described(ULong(APP), draw(st.dictionaries(
            st.one_of(ascii_text, scalars), values, max_size=4))))
    body = draw(st.sampled_from(["data", "value", "sequence", "none", "junk"]))
    if body == "data":
        for chunk in draw(st.lists(st.binary(max_size=40), min_size=1, max_size=3)):
            out += encode(Described(ULong(DATA), chunk))
    elif body == "value":
        out += encode(Described(ULong(VALUE), draw(values)))
    elif body == "sequence":
        out += encode(Described(ULong(SEQUENCE), draw(st.lists(values, max_size=3))))
    elif body == "junk":
        out += draw(st.binary(max_size=30))
    if draw(st.integers(0, 9)) == 0:
        out += encode(Described(ULong(FOOTER), draw(st.dictionaries(symbols, values, max_size=2))))
    return bytes(out)


@st.composite
def management_request(draw: Any) -> bytes:
    """A ``$management`` request: an operation and a map of keys it may or may not take."""
    operation = draw(st.sampled_from(MANAGEMENT_OPERATIONS))
    body = draw(st.dictionaries(st.sampled_from(MANAGEMENT_KEYS), st.one_of(
        values, st.lists(st.uuids(), max_size=3).map(lambda ids: Array(uuid.UUID, ids)),
        st.lists(st.integers(0, 50), max_size=3).map(lambda ns: Array(int, ns)),
        st.lists(messages().map(lambda m: {"message": m, "message-id": "m"}), max_size=2),
    ), max_size=4))
    return (encode(Described(ULong(PROPERTIES), [draw(ascii_text), None, None, None,
                                                 "reply-to-link"]))
            + encode(Described(ULong(APP), {"operation": operation, "type": "entity-mgmt"}))
            + encode(Described(ULong(VALUE), body)))


@st.composite
def cbs_request(draw: Any) -> bytes:
    path = draw(st.sampled_from(ADDRESSES))
    token = draw(st.one_of(st.just(_token(path)), st.just(_token("")), ascii_text))
    props = draw(st.fixed_dictionaries({}, optional={
        "operation": st.one_of(st.just("put-token"), ascii_text),
        "type": st.one_of(st.just("jwt"), st.just("servicebus.windows.net:sastoken"), values),
        "name": st.one_of(st.just(f"sb://localhost/{path}"), values),
        "expiration": values,
    }))
    return (encode(Described(ULong(PROPERTIES), ["cbs-1", None, None, None, "cbs-reply"]))
            + encode(Described(ULong(APP), props)) + encode(Described(ULong(VALUE), token)))


def _terminus(code: int, address: str, session: Any = None) -> Described:
    fields: list[Any] = [address]
    if session is not None:
        fields += [None, None, None, None, None,
                   {Symbol("com.microsoft:session-filter"): session}]
    return Described(ULong(code), fields)


@st.composite
def performatives(draw: Any) -> bytes:
    """One frame with a performative whose fields are mostly plausible."""
    code = draw(st.sampled_from([p.BEGIN, p.ATTACH, p.ATTACH, p.FLOW, p.FLOW, p.TRANSFER,
                                 p.TRANSFER, p.DISPOSITION, p.DETACH, p.END, p.CLOSE, p.OPEN]))
    channel = draw(st.one_of(st.just(0), small))
    handle = _field(draw, small.map(UInt))
    fields: list[Any]
    payload = b""
    if code == p.OPEN:
        fields = [_field(draw, ascii_text), _field(draw, st.just("localhost")),
                  _field(draw, st.integers(0, 2**20).map(UInt)),
                  _field(draw, st.integers(0, 9).map(UShort)),
                  _field(draw, st.integers(0, 200_000).map(UInt))]
    elif code == p.BEGIN:
        fields = [_field(draw, st.one_of(st.none(), small.map(UShort))),
                  _field(draw, st.integers(0, 2**32 - 1).map(UInt)),
                  _field(draw, st.integers(0, 5000).map(UInt)),
                  _field(draw, st.integers(0, 5000).map(UInt)),
                  _field(draw, st.integers(0, 2**32 - 1).map(UInt))]
    elif code == p.ATTACH:
        role = draw(st.booleans())
        address = draw(st.sampled_from(ADDRESSES))
        session = draw(st.one_of(st.none(), st.none(), st.just("s-1"), values))
        fields = [_field(draw, ascii_text), handle, _field(draw, st.just(role)),
                  _field(draw, st.integers(0, 2).map(UByte)),
                  _field(draw, st.integers(0, 1).map(UByte)),
                  _field(draw, st.just(_terminus(p.SOURCE, address, session if role else None))),
                  _field(draw, st.just(_terminus(p.TARGET, address))),
                  None, None, _field(draw, st.integers(0, 2**32 - 1).map(UInt)),
                  _field(draw, st.integers(0, 2**20).map(ULong)), None, None,
                  _field(draw, st.dictionaries(symbols, values, max_size=2))]
    elif code == p.FLOW:
        fields = [_field(draw, st.integers(0, 2**32 - 1).map(UInt)),
                  _field(draw, st.integers(0, 5000).map(UInt)),
                  _field(draw, st.integers(0, 2**32 - 1).map(UInt)),
                  _field(draw, st.integers(0, 5000).map(UInt)), handle,
                  _field(draw, st.integers(0, 2**32 - 1).map(UInt)),
                  _field(draw, st.integers(0, 300).map(UInt)),
                  None, _field(draw, st.booleans()), _field(draw, st.booleans())]
    elif code == p.TRANSFER:
        fields = [handle, _field(draw, st.integers(0, 2**32 - 1).map(UInt)),
                  _field(draw, st.binary(min_size=0, max_size=16)),
                  _field(draw, st.sampled_from([UInt(0), UInt(p.BATCH_FORMAT)])),
                  _field(draw, st.booleans()), _field(draw, st.booleans())]
        kind = draw(st.sampled_from(["message", "message", "batch", "cbs", "management"]))
        if kind == "message":
            payload = draw(messages())
        elif kind == "batch":
            inner = draw(st.lists(messages(), min_size=1, max_size=3))
            payload = b"".join(encode(Described(ULong(DATA), m)) for m in inner)
        elif kind == "cbs":
            payload = draw(cbs_request())
        else:
            payload = draw(management_request())
    elif code == p.DISPOSITION:
        state = draw(st.one_of(
            st.just(p.performative(p.ACCEPTED)), st.just(p.performative(p.RELEASED)),
            st.builds(lambda err: p.performative(p.REJECTED, err),
                      st.one_of(st.none(), st.just(p.amqp_error("com.microsoft:dead-letter")),
                                values)),
            st.builds(lambda failed, here, notes: p.performative(p.MODIFIED, failed, here,
                                                                  notes),
                      st.booleans(), st.booleans(),
                      st.one_of(st.none(), st.dictionaries(ascii_text, values, max_size=2))),
            values))
        first = draw(st.integers(0, 2**32 - 1))
        fields = [_field(draw, st.booleans()), _field(draw, st.just(UInt(first))),
                  _field(draw, st.integers(first, min(first + 8, 2**32 - 1)).map(UInt)),
                  _field(draw, st.booleans()), state]
    elif code == p.DETACH:
        fields = [handle, _field(draw, st.booleans())]
    else:
        fields = [_field(draw, st.one_of(st.none(), st.just(p.amqp_error("amqp:x"))))]
    while fields and fields[-1] is None and draw(st.booleans()):
        fields.pop()
    return frame(channel, Described(ULong(code), fields), payload)


def _sasl_init(mechanism: Any) -> bytes:
    return frame(0, p.performative(p.SASL_INIT, mechanism), kind=1)


def _sdk_script(draw: Any) -> list[bytes]:
    """The frames an SDK session sends, in order: open, begin, put-token, a sender and a
    receiver with credit (what the mutations start from)."""
    queue = draw(st.sampled_from(["q1", "t1", "sq", "t1/Subscriptions/s1", "dq"]))
    receive_from = "t1/Subscriptions/s1" if queue == "t1" else queue
    return [
        frame(0, p.performative(p.OPEN, "fuzz", "localhost", UInt(65536), UShort(8),
                                UInt(60_000))),
        frame(0, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000), UInt(9))),
        frame(0, p.performative(p.ATTACH, "cbs-s", UInt(0), False, UByte(1), UByte(0),
                                _terminus(p.SOURCE, "$cbs"), _terminus(p.TARGET, "$cbs"))),
        frame(0, p.performative(p.ATTACH, "cbs-r", UInt(1), True, UByte(1), UByte(0),
                                _terminus(p.SOURCE, "$cbs"), _terminus(p.TARGET, "cbs-reply"))),
        frame(0, p.performative(p.FLOW, UInt(0), UInt(5000), UInt(0), UInt(5000), UInt(1),
                                UInt(0), UInt(10))),
        frame(0, p.performative(p.TRANSFER, UInt(0), UInt(0), b"t0", UInt(0), True),
              encode(Described(ULong(PROPERTIES), ["cbs-1", None, None, None, "cbs-reply"]))
              + encode(Described(ULong(APP), {"operation": "put-token", "type": "jwt",
                                              "name": f"sb://localhost/{queue}"}))
              + encode(Described(ULong(VALUE), _token(queue)))),
        frame(0, p.performative(p.ATTACH, "snd", UInt(2), False, UByte(0), UByte(1),
                                _terminus(p.SOURCE, "client"), _terminus(p.TARGET, queue))),
        frame(0, p.performative(p.TRANSFER, UInt(2), UInt(1), b"t1", UInt(0), False),
              draw(messages())),
        frame(0, p.performative(p.ATTACH, "rcv", UInt(3), True, UByte(0), UByte(1),
                                _terminus(p.SOURCE, receive_from,
                                          "s-1" if queue == "sq" else None),
                                _terminus(p.TARGET, "client"))),
        frame(0, p.performative(p.FLOW, UInt(2), UInt(5000), UInt(2), UInt(5000), UInt(3),
                                UInt(0), UInt(draw(st.integers(0, 20))))),
        frame(0, p.performative(p.DISPOSITION, True, UInt(0), UInt(draw(small)), True,
                                p.performative(p.ACCEPTED))),
        frame(0, p.performative(p.DETACH, UInt(3), True)),
        frame(0, p.performative(p.END)),
        frame(0, p.performative(p.CLOSE)),
    ]


@st.composite
def client_inputs(draw: Any) -> bytes:
    """A whole client input: headers, then an SDK-like script mutated, then maybe cut."""
    start = draw(st.sampled_from(["sasl"] * 6 + ["amqp"] * 3 + ["odd"]))
    out = bytearray()
    if start == "sasl":
        mechanism = draw(st.sampled_from(["ANONYMOUS", "MSSBCBS", "other"]))
        out += SASL_HEADER + _sasl_init(
            Symbol(mechanism) if mechanism != "other" else draw(st.one_of(symbols, values)))
        out += AMQP_HEADER
    elif start == "amqp":
        out += AMQP_HEADER
    else:
        out += draw(st.one_of(st.binary(max_size=8), st.just(b"AMQP\x03\x01\x00\x00"),
                              st.just(b"AMQP\x00\x01\x00\x01")))
    script = _sdk_script(draw)
    # Mostly the whole script; now and then its steps in any order (after OPEN and
    # BEGIN, more often than not, so that the deeper states are reached).
    # The ending (DETACH, END, CLOSE) more often left off: a close in the same input
    # ends the connection before deliveries and dispositions, which come from tasks.
    steps = list(range(len(script) - (3 if draw(st.integers(0, 4)) < 3 else 0)))
    if draw(st.integers(0, 3)) == 0:
        head = [0, 1] if draw(st.integers(0, 3)) else []
        steps = head + draw(st.lists(st.sampled_from(range(len(script))), max_size=20))
    chosen = [script[i] for i in steps]
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0 if draw(st.integers(0, 9)) == 0 else min(2, len(chosen)),
                              len(chosen)))
        chosen.insert(at, draw(performatives()))
    if draw(st.integers(0, 5)) == 0:
        chosen.insert(draw(st.integers(0, len(chosen))), frame(0, None))  # a heartbeat
    for piece in chosen:
        out += piece
    if out and draw(st.integers(0, 4)) == 0:  # flip a few bytes
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(out) - 1))
            out[at] = draw(st.integers(0, 255))
    if out and draw(st.integers(0, 6)) == 0:
        del out[draw(st.integers(0, len(out) - 1)):]
    return bytes(out)


@st.composite
def mutated_corpus(draw: Any, files: list[bytes]) -> bytes:
    """A recorded SDK session with a few bytes changed, inserted or removed."""
    data = bytearray(draw(st.sampled_from(files)))
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        if how == "set":
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif how == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        else:
            del data[at:]
    return bytes(data)


__all__ = ["NAMESPACE", "client_inputs", "messages", "mutated_corpus", "performatives"]
