"""Issue #47: application properties come back over AMQP with the AMQP type they were
sent with, for every primitive type Service Bus accepts, as Service Bus keeps them (a
.NET receiver casting a ``long`` back to ``long`` depends on it): through the server,
after a durable restart, and what HTTP (the REST protocol's headers, aiosb's JSON) gives
for each type. The application-properties section is written with aiosb's own codec (and
wide encodings by hand: tests/amqp_server/typed.py) and sent on a connection written
frame by frame; the bytes of each value that comes back are compared with its type's
compact encoding of the value (the type is kept, not the sender's encoding; message
annotations, kept whole in ``amqp_extra``, come back as the bytes sent)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

import aiosb
from aiosb import emulator
from aiosb.auth import SasCredential
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp._receiving import delivery_payload
from aiosb.server.amqp.codec import (
    Byte,
    Char,
    Float32,
    Int,
    Long,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    encode,
)
from aiosb.server.amqp.front_end import serve_amqp
from aiosb.server.amqp.messages import messages_of
from aiosb.server.http import serve

from .test_hostile import Raw, _receiver, _sender
from .typed import PAYLOAD, READ, SENT, TYPED, WHEN, WIDE, WIRE, annotations_of, properties_of

pytestmark = pytest.mark.timeout(60)


def test_the_table_is_every_amqp_type_a_property_can_have():
    """The constructor of each entry: the test sends what it says it sends, each type's
    compact encodings and its wide ones (what aiosb's codec does not write: a long in
    eight bytes, an int in four, a string in a str32 ...), and expects the type back,
    in the compact encoding of the value (#47: the type is kept, not the encoding)."""
    assert {SENT[name][0] for name in SENT} == {
        0x51, 0x61, 0x54, 0x71, 0x55, 0x81, 0x50, 0x60, 0x70, 0x80, 0x72,
        0x82, 0x74, 0x84, 0x94, 0x73, 0x83, 0x98, 0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3, 0x41,
        0x56, 0x40,
    }
    assert {name: WIRE[name][0] for name in WIDE} == {
        "long-8": 0x55, "int-4": 0x54, "uint-4": 0x52, "uint-0": 0x43, "ulong-8": 0x53,
        "boolean-1": 0x41, "string-32": 0xA1, "symbol-32": 0xA3, "binary-32": 0xA0}


async def send_raw(server: Any, payload: bytes = PAYLOAD) -> None:
    """Send ``payload`` to q1 on a connection written frame by frame; accepted."""
    raw = await _sender(server)
    raw.send(0, p.performative(p.TRANSFER, UInt(0), UInt(0), b"t0", UInt(0), False), payload)
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.DISPOSITION:
            assert got[0] not in ("eof", p.CLOSE), got
    assert got[1][4].descriptor == p.ACCEPTED, got
    raw.writer.close()


async def receive_raw(server: Any) -> bytes:
    """One message received and deleted on q1, as the bytes of its sections."""
    raw: Raw = await _receiver(server, mode=1, credit=1)
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.TRANSFER:
            assert got[0] not in ("eof", p.CLOSE), got
    raw.writer.close()
    return raw.payload


async def test_each_type_comes_back_over_amqp_as_it_was_sent(server):
    """#47: a long 1 came back as an int; now every value of the properties is delivered
    as its type (in the compact encoding: a long sent in eight bytes comes back as 0x55
    01), and the annotations as the bytes they were sent as."""
    await send_raw(server)
    back = await receive_raw(server)
    assert (properties_of(back), annotations_of(back)) == (WIRE, SENT)


async def test_each_type_is_kept_through_a_durable_restart(tmp_path):
    """Written to the journal's rows and read back: the same types, the same bytes as
    before the restart, go out."""
    name = "typedns"
    for round_ in ("send", "receive"):
        async with serve(data_dir=tmp_path, root=name) as served, \
                serve_amqp(namespace=name, journal=served.journal) as server:
            if round_ == "send":
                async with aiosb.connect(served.namespace_url(name)) as ns:
                    await ns.create_queue("q1")
                await send_raw(server)
            else:
                back = await receive_raw(server)
                assert (properties_of(back), annotations_of(back)) == (WIRE, SENT)
        emulator.reset()  # what a restart leaves of the memory: nothing


#: What HTTP gives for each type: the REST protocol's custom property header (what a
#: real namespace's REST clients read), and aiosb's own JSON (the http:// transport):
#: the value, of its typed class where no plain Python type names the AMQP type.
HTTP = {
    "byte": ("-3", Byte(-3)),
    "short": ("-300", Short(-300)),
    "int": ("7", 7),
    "int-wide": ("70000", 70_000),
    "long": ("1", Long(1)),
    "long-wide": ("1099511627776", 2**40),
    "ubyte": ("200", UByte(200)),
    "ushort": ("60000", UShort(60_000)),
    "uint": ("4000000000", UInt(4_000_000_000)),
    "ulong": ("9223372036854775808", ULong(2**63)),
    "float": ("1.5", Float32(1.5)),
    "double": ("2.25", 2.25),
    "decimal32": ('"15"', TYPED["decimal32"]),
    "decimal64": ('"1"', TYPED["decimal64"]),
    "decimal128": ('"1.5"', TYPED["decimal128"]),
    "char": ('"\\u00e9"', Char("é")),
    "timestamp": ('"Tue, 02 Jan 2024 03:04:05 GMT"', WHEN),
    "uuid": ('"12345678-1234-5678-1234-567812345678"', TYPED["uuid"]),
    "binary": ('"b\'\\\\x00\\\\xff\'"', b"\x00\xff"),
    "string": ('"text"', "text"),
    "symbol": ('"sym"', Symbol("sym")),
    "boolean": ("true", True),
    "null": ('"None"', None),  # REST has no null: its text, as for a uuid
    # sent in a wide encoding: the same type
    "long-8": ("1", Long(1)),
    "int-4": ("7", 7),
    "uint-4": ("5", UInt(5)),
    "uint-0": ("0", UInt(0)),
    "ulong-8": ("5", ULong(5)),
    "boolean-1": ("true", True),
    "string-32": ('"text"', "text"),
    "symbol-32": ('"sym"', Symbol("sym")),
    "binary-32": ('"b\'\\\\x00\\\\xff\'"', b"\x00\xff"),
}


async def test_what_http_gives_for_each_type():
    """A message an AMQP client sent, received over REST and over aiosb's HTTP
    transport; and what the HTTP transport received, delivered over AMQP again, is
    what was sent."""
    assert HTTP.keys() == WIRE.keys()
    async with serve() as server:
        url = server.namespace_url("typedhttp")
        token = SasCredential(server.key_name, server.key).token(url)
        async with aiosb.connect(url) as ns, aiohttp.ClientSession(
            headers={"Authorization": token}
        ) as http:
            await ns.create_queue("q")
            await ns.sender("q").send(messages_of(PAYLOAD, 0) * 2)
            got = await http.delete(f"{url}/q/messages/head?timeout=1")
            assert got.status == 200, await got.text()
            headers = {name: got.headers.get(name) for name in WIRE}
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                (message,) = await receiver.receive(max_wait=1)
    assert headers == {name: rest for name, (rest, _) in HTTP.items()}
    props = message.application_properties
    assert {k: (v, type(v)) for k, v in props.items()} == {
        name: (value, type(value)) for name, (_, value) in HTTP.items()}
    back = delivery_payload(message)
    assert (properties_of(back), annotations_of(back)) == (WIRE, SENT)


def test_rest_headers_read_back_as_plain_values():
    """What a REST client sends as a header: a number is an int (an AMQP int when it
    fits 32 bits, else a long) or a double, a quoted text a string."""
    from aiosb.wire.rest import parse_custom_value

    assert [type(parse_custom_value(v)) for v in ("1", "1099511627776", "1.5", '"s"')] \
        == [int, int, float, str]
    assert json.loads(HTTP["char"][0]) == "é"


async def test_the_amqp_transport_receives_and_sends_each_type_again(server):
    """What a pairing's syphon does over AMQP (the official SDK underneath): receive a
    message through aiosb's client and send it again; an AMQP receiver then gets each
    value as it was first sent."""
    await send_raw(server)
    async with aiosb.connect(server.connection_string()) as ns:
        async with ns.receiver("q1") as receiver:
            (got,) = await receiver.receive(max_wait=5)
            await receiver.complete(got)
        assert {k: (v, type(v)) for k, v in got.application_properties.items()} == {
            k: (v, type(v)) for k, v in READ.items()}
        await ns.sender("q1").send(got)
    back = await receive_raw(server)
    # the annotations too went through the SDK's decoder and encoder: their types kept
    assert (properties_of(back), annotations_of(back)) == (WIRE, WIRE)


async def test_filters_see_a_typed_propertys_plain_value():
    """A long an AMQP client sent is a Long: SQL filters compute with its number and a
    correlation filter's int matches it, as when it was read as an int; a rule's action
    leaves the other properties' types alone."""
    from aiosb import CorrelationRuleFilter, RuleProperties, SqlRuleAction, SqlRuleFilter

    async with aiosb.connect("memory://typedrules") as ns:
        await ns.create_topic("t")
        await ns.create_subscription("t", "sql", default_rule=RuleProperties(
            "r", SqlRuleFilter("long = 1 AND long + 1 = 2 AND symbol = 'sym' AND "
                               "decimal128 > 1 AND ubyte IN (200, 201) AND char = 'é'"),
            SqlRuleAction("SET added = 5")))
        await ns.create_subscription("t", "correlation", default_rule=RuleProperties(
            "r", CorrelationRuleFilter(properties={"long": 1, "symbol": "sym"})))
        await ns.create_subscription("t", "none", default_rule=RuleProperties(
            "r", SqlRuleFilter("long = 2")))
        await ns.sender("t").send(messages_of(PAYLOAD, 0))
        got = {}
        for name in ("sql", "correlation", "none"):
            async with ns.receiver(f"t/subscriptions/{name}", mode="receive_and_delete") as r:
                got[name] = await r.receive(max_messages=2, max_wait=0)
    assert not got["none"]
    assert properties_of(delivery_payload(got["correlation"][0])) == WIRE
    sql = properties_of(delivery_payload(got["sql"][0]))
    assert sql.pop("added") == encode(Int(5))
    assert sql.pop("RuleName") == encode("r")  # what an action adds, as Service Bus does
    assert sql == WIRE
