"""``POST /{namespace}/$reset`` (#51): what the ``aiosb_server`` fixture empties the
namespace with between tests: faults healed, queues and topics gone with their
messages and subscriptions, other namespaces untouched, what ``prepare`` made at start
made again (``--config``), kept by a durable server, and the Manage right needed."""

from __future__ import annotations

import aiohttp

import aiosb
from aiosb import Message, SasCredential
from aiosb.server.http import DEV_KEY, DEV_KEY_NAME, serve

ROOT = "sbemulatorns"


async def _post(url: str, namespace: str, key: tuple[str, str] = (DEV_KEY_NAME, DEV_KEY)
                ) -> tuple[int, str]:
    token = SasCredential(*key).token(f"{url}/{namespace}")
    async with aiohttp.ClientSession() as session, session.post(
            f"{url}/{namespace}/$reset", headers={"Authorization": token}) as answer:
        return answer.status, await answer.text()


async def test_reset_empties_the_namespace_it_names_and_no_other():
    """Issue #51: queues, topics (their subscriptions) and faults of the namespace go;
    another namespace keeps its entities."""
    async with serve() as server:
        async with aiosb.connect(server.namespace_url("shop")) as ns, \
                aiosb.connect(server.namespace_url("other")) as other:
            await ns.create_queue("orders")
            await ns.create_topic("events")
            await ns.create_subscription("events", "audit")
            async with ns.sender("orders") as sender:
                await sender.send(Message(b"left over"))
            await other.create_queue("kept")
            await ns.transport.faults.fail("orders")  # type: ignore[attr-defined]
            status, text = await _post(server.url, "shop")
            assert (status, text) == (200, '{"deleted": 2}')
            assert await ns.transport.faults.active() == []  # type: ignore[attr-defined]
            assert [q.name for q in await ns.list_queues()] == []
            assert [t.name for t in await ns.list_topics()] == []
            assert [q.name for q in await other.list_queues()] == ["kept"]
            await ns.create_queue("orders")  # a name of the last test, made anew: empty
            assert (await ns.runtime_properties("orders")).active_message_count == 0


async def test_reset_makes_again_what_prepare_made_at_start(tmp_path):
    """Issue #51: the root namespace gets its starting entities back (a Config.json's),
    empty; a durable server keeps the reset across a restart."""

    async def prepare() -> None:
        async with aiosb.connect(f"memory://{ROOT}") as ns:
            await ns.create_queue("preloaded")

    data = tmp_path / "data"
    async with serve(root=ROOT, prepare=prepare, data_dir=data) as server:
        async with aiosb.connect(server.namespace_url(ROOT)) as ns:
            await ns.create_queue("made-by-a-test")
            async with ns.sender("preloaded") as sender:
                await sender.send(Message(b"left over"))
            assert (await _post(server.url, ROOT))[0] == 200
            assert [q.name for q in await ns.list_queues()] == ["preloaded"]
            assert (await ns.runtime_properties("preloaded")).active_message_count == 0
    async with serve(root=ROOT, data_dir=data) as server:
        async with aiosb.connect(server.namespace_url(ROOT)) as ns:
            assert [q.name for q in await ns.list_queues()] == ["preloaded"]
            assert (await ns.runtime_properties("preloaded")).active_message_count == 0


async def test_reset_needs_the_manage_right():
    """Issue #51: a key with Send alone cannot empty a namespace."""
    async with serve(keys={"sender": ("c2VuZGVy", ("Send",))}) as server:
        async with aiosb.connect(server.namespace_url("shop")) as ns:
            await ns.create_queue("orders")
            status, _ = await _post(server.url, "shop", ("sender", "c2VuZGVy"))
            assert status == 401
            assert [q.name for q in await ns.list_queues()] == ["orders"]
