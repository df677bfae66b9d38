"""Issue #47: a message an AMQP client sent keeps each application property's AMQP type
through a pairing's failover and the syphon's move home (PN-17, G-5), over the memory
transport and over HTTP (aiosb's JSON, its tagged values): what an AMQP receiver then
gets is, value by value, the bytes that were sent."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest
from amqp_server.typed import PAYLOAD, SENT, WIRE, annotations_of, properties_of

import aiosb
from aiosb import emulator
from aiosb.server.amqp._receiving import delivery_payload
from aiosb.server.amqp.messages import messages_of
from aiosb.server.http import serve
from aiosb.transport import http as _http  # noqa: F401  (see test_pairing_http)

from .conftest import backlog_contents, drain, syphon_options

pytestmark = pytest.mark.looptime


@asynccontextmanager
async def outage(primary, transport: str):
    """The primary unavailable for the block: the broker's faults, or the server's."""
    if transport == "memory":
        with emulator.namespace("typedp").faults.fail():
            yield
        return
    fault = await primary.transport.faults.fail("orders")
    yield
    await primary.transport.faults.heal(fault)


@asynccontextmanager
async def namespaces(transport: str):
    if transport == "memory":
        async with aiosb.connect("memory://typedp") as primary, \
                aiosb.connect("memory://typeds") as secondary:
            yield primary, secondary
        return
    async with serve() as server, \
            aiosb.connect(server.namespace_url("typedp"), operation_timeout=5) as primary, \
            aiosb.connect(server.namespace_url("typeds"), operation_timeout=5) as secondary:
        yield primary, secondary


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_the_syphon_moves_each_type_home_as_it_was_sent(transport):
    async with namespaces(transport) as (primary, secondary):
        await primary.create_queue("orders")
        async with primary.pair(secondary, syphon_options()) as paired:
            async with paired.sender("orders") as sender:
                async with outage(primary, transport):
                    await sender.send(messages_of(PAYLOAD, 0))
                    env = SimpleNamespace(secondary=secondary)
                    (parked,) = await backlog_contents(env, paired)
                    assert parked.application_properties.keys() >= WIRE.keys()
            await asyncio.sleep(15)  # a ping lands, the syphon moves the message home
            assert paired.stats.syphon_moved == 1
        (got,) = await drain(primary, "orders")
    back = delivery_payload(got)
    # each property's type, in its compact encoding; the annotations as they were sent
    assert (properties_of(back), annotations_of(back)) == (WIRE, SENT)
