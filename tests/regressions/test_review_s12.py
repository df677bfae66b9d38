"""Regressions from the review of the issue 18 fixes: each failed before its fix."""

from __future__ import annotations

import asyncio
import pickle
import zoneinfo
from datetime import datetime

import aiohttp
import pytest

import aiosb
from aiosb import Message, errors
from aiosb.auth import SasCredential
from aiosb.emulator._record import FIELDS
from aiosb.emulator.durable._rows import decode_record
from aiosb.server.http import _right_needed, serve
from aiosb.wire import aiosb_json as _json


async def test_a_header_too_long_for_http_clients_is_refused_not_deleted():
    async with serve() as server:
        url = server.namespace_url("long")
        async with aiosb.connect(url) as ns:
            await ns.create_queue("q")
            await ns.sender("q").send(Message(b"x", application_properties={"note": "n" * 9000}))
            token = SasCredential(server.key_name, server.key).token(url)
            async with aiohttp.ClientSession(headers={"Authorization": token}) as http:
                got = await http.delete(f"{url}/q/messages/head?timeout=1")
                assert got.status == 400 and "over the 8000" in await got.text()
            assert (await ns.runtime_properties("q")).active_message_count == 1


async def test_a_receive_and_delete_in_flight_at_close_keeps_what_it_took():
    async with serve() as server, aiosb.connect(server.namespace_url("rd")) as ns:
        await ns.create_queue("q")
        await ns.sender("q").send(Message(b"important"))
        await ns.transport.faults.delay("q", 0.3, operations=["receive"])
        receiver = ns.receiver("q", mode="receive_and_delete")
        taking = asyncio.create_task(receiver.receive(max_wait=5))
        await asyncio.sleep(0.1)
        await receiver.aclose()
        assert [m.body for m in await asyncio.wait_for(taking, 5)] == [b"important"]


def test_the_batch_fast_path_refuses_what_message_refuses():
    one = {"body": "eA==", "body_sizes": [1]}
    with pytest.raises(errors.InvalidArgument, match="lone surrogate"):
        _json.decode_batch({**one, "subject": "\ud800"})
    with pytest.raises(errors.InvalidArgument, match="lone surrogate"):
        _json.decode_batch({**one, "properties": [{"p": "\udfff"}]})
    assert _json.decode_batch({**one, "content_type": ""})[0].content_type is None


async def test_a_prefetch_count_no_receive_can_take_is_refused_when_the_receiver_is_made():
    async with aiosb.connect("memory://pf") as ns:
        with pytest.raises(errors.InvalidArgument, match="prefetch_count is 20000"):
            ns.receiver("q", prefetch_count=20_000)


def test_a_legacy_row_scheduled_in_a_named_zone_is_read_and_nothing_else_is_looked_up():
    fields = {name: None for name in FIELDS}
    fields["scheduled"] = datetime(2030, 1, 1, tzinfo=zoneinfo.ZoneInfo("Europe/Amsterdam"))
    assert decode_record(pickle.dumps(fields))["scheduled"] == fields["scheduled"]

    class Sneaky:
        def __reduce__(self):
            return (getattr, (zoneinfo.ZoneInfo, "__init_subclass__"))

    with pytest.raises(errors.InvalidArgument, match="looks up '__init_subclass__'"):
        decode_record(pickle.dumps({"x": Sneaky()}))


def test_every_faults_path_needs_manage():
    for segs in [("$faults",), ("$faults", "messages"), ("$faults", "$aiosb"),
                 ("$faults", "q", "messages", "head")]:
        assert _right_needed("DELETE", segs) == "Manage"
