"""#49: one parser reads a fault's JSON for ``POST /{ns}/$faults`` and for the
explorer's ``POST /explorer/api/faults``, "what one refuses, the other does". A field
the parser does not know (a typo: ``fragmnet``) is refused by the fault API, but the
explorer drops it before the parser sees it and injects another fault than asked: an
outage of the whole entity, every operation, for a one-fragment fault mistyped."""

from __future__ import annotations

import json

import aiohttp
import pytest

import aiosb
from aiosb import emulator
from aiosb.server.explorer import Explorer
from aiosb.server.http import serve

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("body", [
    pytest.param({"entity": "p", "fragmnet": 1}, id="fragment misspelt"),
    pytest.param({"entity": "p", "operation": ["send"]}, id="operations misspelt"),
])
async def test_the_explorer_refuses_a_field_the_fault_api_refuses(body):
    """#49: a fault body with a field the fault API does not know is a 400 there; the
    explorer must refuse it too, not inject a fault of every operation on the entity."""
    ns = "typos"
    async with serve(sites=[Explorer]) as server:
        async with aiosb.connect(server.namespace_url(ns)) as client:
            await client.create_queue("p", enable_partitioning=True)
        signed = {"Authorization": server.credential.token(f"{server.url}/{ns}")}
        async with aiohttp.ClientSession(server.url) as http:
            async with http.post(f"/{ns}/$faults", data=json.dumps(body),
                                 headers=signed) as answer:
                api = (answer.status, await answer.text())
        assert emulator.namespace(ns).faults.active == []
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(server.url, cookie_jar=jar) as http:
            origin = {"Origin": server.url}
            async with http.post("/explorer/api/signin", json={
                    "key_name": server.key_name, "key": server.key},
                    headers={**origin, "X-Aiosb-Explorer": "1"}) as answer:
                assert answer.status == 200
                csrf = (await answer.json())["csrf"]
            async with http.post("/explorer/api/faults", json={"ns": ns, **body},
                                 headers={**origin, "X-Aiosb-Csrf": csrf}) as answer:
                explorer = (answer.status, await answer.text())
        injected = [(f.entity, f.kind, sorted(f.operations), f.fragment)
                    for f in emulator.namespace(ns).faults.active]
        emulator.namespace(ns).faults.heal()
    assert api[0] == 400, api
    assert explorer[0] == 400 and injected == [], (explorer, injected)
