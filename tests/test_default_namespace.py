"""Issue 15: ``aiosb serve`` serves its default namespace (``--namespace``, default
``sbemulatorns``) at the root of plain HTTP as well, beside the ``/NAME/...`` prefixes:
``/orders/messages`` is queue ``orders`` of the default namespace, as on a namespace's
own host, while ``/contoso/orders/messages`` stays queue ``orders`` of ``contoso``.

Which reading a path gets is :func:`aiosb.server.http._requests.reads_at_root`; the
table below pins it, and the server tests show both readings reach the right broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import aiohttp
import pytest
from yarl import URL

import aiosb
from aiosb import SasCredential, emulator
from aiosb.server.http import DEV_KEY, DEV_KEY_NAME, serve
from aiosb.server.http._requests import reads_at_root
from aiosb.server.process import ServerProcess

ROOT = "defaultns"
_EXISTING = {"contoso", ROOT}
_ROOT_ENTITIES = {"orders", "billing"}  # "billing/eu" too: its first segment is "billing"


@pytest.mark.parametrize(("path", "at_root"), [
    ((), True),  # GET / : nothing to do, said about the default namespace
    (("$Resources", "queues"), True),
    (("$namespaceinfo",), True),
    (("$faults",), True),
    (("orders",), True),  # PUT /orders creates queue orders (one segment: no namespace)
    (("neworders",), True),
    (("orders", "messages"), True),  # an entity of the default namespace
    (("billing", "eu", "messages"), True),  # the first segment of one
    (("contoso", "orders", "messages"), False),  # an existing namespace
    (("Contoso", "orders"), False),  # namespaces are case-insensitive
    (("defaultns", "orders", "messages"), False),  # the default one, by its name
    (("fresh-ns", "orders"), False),  # could be a namespace: one on first use
    (("my_queue", "messages"), True),  # no namespace is called that (underscore)
    (("orders.v2", "messages"), True),  # nor that (period)
    (("9lives", "messages"), True),  # nor that (starts with a digit)
])
def test_which_paths_are_read_at_the_root(path, at_root):
    got = reads_at_root(
        path,
        lambda name: name.lower() in _EXISTING,
        lambda first: first.lower() in _ROOT_ENTITIES,
    )
    assert got is at_root


@pytest.fixture
async def http() -> AsyncIterator[SimpleNamespace]:
    """A plain-HTTP server with ``ROOT`` as its default namespace, and raw requests."""
    emulator.namespace(ROOT)
    async with serve(root=ROOT) as server, aiohttp.ClientSession() as session:
        credential = SasCredential(DEV_KEY_NAME, DEV_KEY)

        async def call(method, path, **kw):
            headers = {"Authorization": credential.token(f"{server.url}{path}")}
            headers.update(kw.pop("headers", {}))
            url = URL(f"{server.url}{path}", encoded=True)
            async with session.request(method, url, headers=headers, **kw) as response:
                body = await response.read()
                return SimpleNamespace(status=response.status, body=body,
                                       text=body.decode("utf-8", "replace"))

        yield SimpleNamespace(server=server, call=call)


_QUEUE = (
    '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
    '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/'
    'connect"/></content></entry>'
)


async def test_the_root_is_the_default_namespace_and_prefixes_name_others(http):
    """REST at the root and aiosb under /NAME reach the same queue of the default
    namespace; /contoso/... is another namespace's queue of the same name."""
    made = await http.call("PUT", "/orders", data=_QUEUE,
                           headers={"Content-Type": "application/atom+xml"})
    assert made.status == 201, made.text
    assert emulator.namespace(ROOT).has_entity_under("orders")
    sent = await http.call("POST", "/orders/messages", data=b"at the root")
    assert sent.status == 201, sent.text
    async with aiosb.connect(http.server.namespace_url("contoso")) as contoso:
        await contoso.create_queue("orders")
        await contoso.sender("orders").send(aiosb.Message(b"in contoso"))
    async with aiosb.connect(http.server.namespace_url(ROOT)) as ns:
        async with ns.receiver("orders") as receiver:
            (got,) = await receiver.receive(max_messages=1, max_wait=1)
            await receiver.complete(got)
        assert got.body == b"at the root"
        (props,) = [q for q in await ns.list_queues() if q.name == "orders"]
    got = await http.call("DELETE", "/contoso/orders/messages/head?timeout=1")
    assert (got.status, got.body) == (200, b"in contoso")
    listing = await http.call("GET", "/$Resources/queues")
    assert listing.status == 200 and "<title type=\"text\">orders</title>" in listing.text
    assert props.name == "orders"


async def test_a_name_no_namespace_could_have_is_a_root_entity(http):
    """``my_queue`` cannot name a namespace, so ``/my_queue/messages`` is the default
    namespace's queue, even before it exists: the error names it there."""
    missing = await http.call("POST", "/my_queue/messages", data=b"x")
    assert missing.status == 410, missing.text
    assert "my_queue" in missing.text and ROOT in missing.text
    assert not emulator.exists("my_queue")


async def test_aiosb_serve_prints_and_serves_the_default_namespace_at_the_root():
    with ServerProcess(args=["--namespace", "shop"]) as server:
        assert f"namespace shop at the root ({server.url}/orders/messages" in server.banner
        async with aiosb.connect(f"{server.url}/shop") as ns:
            await ns.create_queue("orders")
            credential = SasCredential(DEV_KEY_NAME, DEV_KEY)
            async with aiohttp.ClientSession() as session:
                url = f"{server.url}/orders/messages"
                headers = {"Authorization": credential.token(url)}
                async with session.post(url, data=b"root", headers=headers) as response:
                    assert response.status == 201, await response.text()
            async with ns.receiver("orders") as receiver:
                (got,) = await receiver.receive(max_messages=1, max_wait=5)
    assert got.body == b"root"
