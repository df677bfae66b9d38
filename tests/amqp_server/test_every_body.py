"""Issue 34, point 3: every AMQP body and section. What an AMQP client sends, an AMQP
client receives: value and sequence bodies, several data sections, the header's fields,
delivery and message annotations, the properties no field holds, and the footer, bit for
bit; aiosb's own ReceivedMessage and the REST protocol give the body flattened."""

from __future__ import annotations

import datetime as _dt
import uuid

import aiohttp
import pytest
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType

import aiosb
from aiosb import Message, emulator
from aiosb.auth import SasCredential
from aiosb.protocol import ReceiveRequest
from aiosb.server.amqp._receiving import delivery_payload
from aiosb.server.amqp.codec import (
    Byte,
    Described,
    Float32,
    Raw,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    elements,
    encode,
)
from aiosb.server.amqp.messages import messages_of, sections_of
from aiosb.server.http import serve

from .conftest import NAMESPACE, drain

pytestmark = pytest.mark.timeout(60)

HEADER, DELIVERY_ANNOTATIONS, ANNOTATIONS, PROPERTIES, APP, DATA, SEQUENCE, VALUE, FOOTER = (
    range(0x70, 0x79)
)
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def section(code: int, value: object) -> bytes:
    return encode(Described(ULong(code), value))


def value_of(raw: bytes) -> bytes:
    """The encoded value of one encoded section (past its descriptor)."""
    assert raw[:2] == b"\x00\x53"
    return raw[3:]


#: A message using every section, with types a Python decoder would flatten (ubyte,
#: short, float32, symbol values, a decimal) so that only bit-for-bit keeping passes.
DECIMAL = b"\x84" + bytes(range(8))
SENT = {
    "header": section(HEADER, [True, UByte(9), UInt(60_000), True, UInt(0)]),
    "delivery": section(DELIVERY_ANNOTATIONS, {Symbol("da-key"): Byte(-3)}),
    "notes": section(ANNOTATIONS, {
        Symbol("x-opt-partition-key"): "pk", Symbol("custom"): UShort(7),
        Symbol("x-opt-sequence-number"): 999,  # the broker's: replaced, not kept
    }),
    "properties": section(PROPERTIES, [
        uuid.UUID(int=5), b"user", "to-1", "subj", None, ULong(77), Symbol("text/plain"),
        Symbol("gzip"), EPOCH + _dt.timedelta(days=20_000), EPOCH + _dt.timedelta(days=1),
        None, UInt(3),
    ]),
    "app": section(APP, {"k": "v"}),
    "body": section(SEQUENCE, [b"message", Float32(1.5), True])
    + section(SEQUENCE, [Raw(DECIMAL), Symbol("s")]),
    "footer": section(FOOTER, {Symbol("footer-key"): "footer-value"}),
}


def payload(**parts: bytes) -> bytes:
    return b"".join({**SENT, **parts}[name] for name in SENT)


async def through_the_broker(wire: bytes, path: str = "q1") -> bytes:
    """``wire`` read as the front end reads a transfer, held by the broker, and delivered
    as the front end writes a delivery."""
    (msg,) = messages_of(wire, 0)
    ns = emulator.namespace(NAMESPACE)
    await ns.send(path, [msg])
    request = ReceiveRequest(mode="receive_and_delete", max_messages=1, max_wait=0)
    (got,) = await ns.receive(path, request)
    return delivery_payload(got)


async def test_every_section_comes_back_bit_for_bit(server):
    back = sections_of(await through_the_broker(payload()))
    sent = sections_of(payload())
    assert back.raw_body == sent.raw_body  # both sequences, the decimal and float32 intact
    assert back.raw_footer == SENT["footer"]
    assert back.raw_delivery_annotations == SENT["delivery"]
    header, _ = elements(back.raw_header)
    assert (header[0], header[1], header[3]) == (b"\x41", b"\x50\x09", b"\x41")
    assert back.header[2] == 60_000 and back.header[4] == 0  # the broker's fields
    notes = dict(zip(*[iter(elements(back.raw_annotations)[0])] * 2, strict=True))
    assert notes[Raw(encode(Symbol("custom")))] == encode(UShort(7))
    assert back.annotations["x-opt-partition-key"] == "pk"
    assert back.annotations["x-opt-sequence-number"] != 999
    props, _ = elements(back.raw_properties)
    want, _ = elements(sent.raw_properties)
    for i in (0, 1, 5, 7, 11):  # the ids kept typed (uuid, ulong), and the rest
        assert props[i] == want[i], i
    assert back.properties[2:4] == ["to-1", "subj"]
    assert back.application_properties == {"k": "v"}


@pytest.mark.parametrize(("body", "flat"), [
    (section(DATA, b"aa") + section(DATA, b"bb"), b"aabb"),
    (section(VALUE, b"bin"), b"bin"),
    (section(VALUE, "text"), b"text"),
    (section(VALUE, {b"key": [-123, b"data", False]}),
     section(VALUE, {b"key": [-123, b"data", False]})),
    (section(SEQUENCE, [1, 2]), section(SEQUENCE, [1, 2])),
], ids=["data-sections", "binary-value", "string-value", "map-value", "sequence"])
async def test_what_received_message_and_rest_give(server, body, flat):
    """ReceivedMessage.body: data joined, a binary or string value as its bytes, any
    other body as its encoded sections; amqp_extra keeps the sections themselves."""
    wire = section(PROPERTIES, ["m-1"]) + body
    (msg,) = messages_of(wire, 0)
    assert msg.body == flat
    assert msg.amqp_extra == body
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.sender("q1").send(msg)
        async with ns.receiver("q1", mode="receive_and_delete") as receiver:
            (got,) = await receiver.receive(max_wait=0)
    assert (got.body, got.amqp_extra) == (flat, body)
    assert sections_of(delivery_payload(got)).raw_body == body


async def test_a_plain_message_carries_nothing_extra(server):
    (msg,) = messages_of(section(PROPERTIES, ["m-1"]) + section(DATA, b"x"), 0)
    assert msg.amqp_extra is None


async def test_the_rest_protocol_gives_the_flattened_body_and_the_http_transport_all():
    value = section(VALUE, {b"k": 1})
    async with serve() as server:
        url = server.namespace_url("restbodies")
        token = SasCredential(server.key_name, server.key).token(url)
        async with aiosb.connect(url) as ns, aiohttp.ClientSession(
            headers={"Authorization": token}
        ) as http:
            await ns.create_queue("q")
            await ns.sender("q").send(
                [Message(value, amqp_extra=value), Message(value, amqp_extra=value)]
            )
            got = await http.delete(f"{url}/q/messages/head?timeout=1")
            assert got.status == 200, await got.text()
            assert await got.read() == value
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                (other,) = await receiver.receive(max_wait=1)
            assert other.amqp_extra == value  # aiosb's own wire carries it


async def test_a_forwarded_and_dead_lettered_message_keeps_its_sections(server):
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.create_queue("dest")
        await ns.create_queue("fwd", forward_to="dest")
        await ns.sender("fwd").send(Message(b"x", amqp_extra=SENT["footer"]))
        async with ns.receiver("dest") as receiver:
            (got,) = await receiver.receive(max_wait=1)
            await receiver.dead_letter(got, reason="r")
        async with ns.receiver("dest", sub_queue="deadletter") as receiver:
            (dead,) = await receiver.receive(max_wait=1)
    assert dead.amqp_extra == SENT["footer"]


async def test_amqp_extra_that_is_not_amqp_is_delivered_without_it(server, caplog):
    """A client of aiosb's wire could send anything: the message is delivered from its
    fields, and the log says why."""
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.sender("q1").send(Message(b"body", amqp_extra=b"\xff junk"))
    (got,) = await drain("q1")
    back = sections_of(delivery_payload(got))
    assert back.data == [b"body"] and back.raw_footer is None
    assert "not AMQP sections" in caplog.text


@pytest.mark.parametrize("descriptor", ["amqp:amqp-value:*", "amqp:footer:map"])
def test_symbolic_section_descriptors_are_read_as_their_codes(descriptor):
    wire = encode(Described(Symbol(descriptor), "v"))
    body = b""
    if descriptor.startswith("amqp:footer"):  # with a body: one with none is marked so
        wire = encode(Described(Symbol(descriptor), {Symbol("f"): 1}))
        body = encode(Described(ULong(0x75), b"b"))
    (msg,) = messages_of(body + wire, 0)
    assert msg.amqp_extra == wire


# -- the official SDK, end to end: the sample's three messages -------------------------


async def test_the_sdk_sample_of_annotated_messages_round_trips(server):
    """What azure-servicebus's send_and_receive_amqp_annotated_message sample sends,
    received by the SDK with every section as sent."""
    conn = server.connection_string()
    data = AmqpAnnotatedMessage(
        data_body=[b"aa", b"bb", b"cc"], delivery_annotations={"delivery_annotation_key": "value"},
        application_properties={"body_type": "data"},
    )
    sequence = AmqpAnnotatedMessage(
        sequence_body=[b"message", 123.456, True], footer={"footer_key": "footer_value"},
        properties={"subject": "sequence"}, application_properties={"body_type": "sequence"},
    )
    value = AmqpAnnotatedMessage(
        value_body={b"key": [-123, b"data", False]}, header={"priority": 10},
        annotations={"annotation_key": "value"}, application_properties={"body_type": "value"},
    )
    async with ServiceBusClient.from_connection_string(conn) as client:
        async with client.get_queue_sender("q1") as sender:
            await sender.send_messages([data, sequence, value])
        async with client.get_queue_receiver("q1", max_wait_time=2) as receiver:
            got = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
            for message in got:
                await receiver.complete_message(message)
    assert len(got) == 3
    by_type = {m.application_properties[b"body_type"]: m.raw_amqp_message for m in got}
    d, s, v = by_type[b"data"], by_type[b"sequence"], by_type[b"value"]
    assert d.body_type == AmqpMessageBodyType.DATA and list(d.body) == [b"aa", b"bb", b"cc"]
    assert d.delivery_annotations[b"delivery_annotation_key"] == b"value"
    assert s.body_type == AmqpMessageBodyType.SEQUENCE
    assert list(s.body) == [[b"message", 123.456, True]]
    assert s.footer[b"footer_key"] == b"footer_value"
    assert s.properties.subject == b"sequence"
    assert v.body_type == AmqpMessageBodyType.VALUE
    assert v.body == {b"key": [-123, b"data", False]}
    assert v.header.priority == 10
    assert v.annotations[b"annotation_key"] == b"value"


async def test_the_amqp_transport_carries_the_sections_over_the_sdk(server):
    """aiosb's AMQP transport (the official SDK underneath) sends and receives the
    sections too: the syphon of a pairing over AMQP moves such a message whole."""
    body = section(SEQUENCE, [b"bin", "text", 1.5])
    footer = section(FOOTER, {Symbol("f"): "v"})
    notes = {Symbol("custom"): "c"}
    extra = section(ANNOTATIONS, notes) + body + footer
    async with aiosb.connect(server.connection_string()) as ns:
        await ns.sender("q1").send(Message(body, subject="s", amqp_extra=extra))
        async with ns.receiver("q1") as receiver:
            (got,) = await receiver.receive(max_wait=5)
            await receiver.complete(got)
    back = sections_of(got.amqp_extra)
    assert back.sequence == [[b"bin", "text", 1.5]]
    assert back.annotations == notes
    assert sections_of(back.raw_footer).raw_footer == footer
    assert (got.body, got.subject) == (body, "s")


def test_a_section_the_server_cannot_hold_is_one_sentence():
    """What the front end rejects a transfer with (amqp:decode-error and this text)."""
    from aiosb.server.amqp.codec import DecodeError

    with pytest.raises(DecodeError, match="unknown message section 121"):
        messages_of(section(0x79, "what is this"), 0)
    with pytest.raises(DecodeError, match="not a described value"):
        messages_of(encode("a bare string"), 0)
