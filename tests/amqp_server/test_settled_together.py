"""Dispositions the client settled already are settled at the broker together, at the
turn of the loop (#36: the SDKs settle each message with a disposition of its own), and
that changes nothing a client can see: each is settled, a lost lock among them keeps
none of the others unsettled, and what the connection does next sees them settled.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from azure.servicebus.aio import ServiceBusClient

from aiosb import emulator
from aiosb.message import Message
from aiosb.protocol import Settlement
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import UInt

from .conftest import NAMESPACE, drain
from .test_hostile import Raw

pytestmark = pytest.mark.timeout(60)


def _count_settlements(monkeypatch: pytest.MonkeyPatch) -> list[Settlement]:
    ns = emulator.namespace(NAMESPACE)
    seen: list[Settlement] = []
    settle = ns.settle

    async def counting(path: str, settlement: Settlement) -> Any:
        seen.append(settlement)
        return await settle(path, settlement)

    monkeypatch.setattr(ns, "settle", counting)
    return seen


async def _receive(client: Raw, server: Any, count: int) -> list[tuple[int, bytes]]:
    """Attach a peek-lock receiver on q1, give credit, read ``count`` deliveries."""
    await client.open()
    await client.begin()
    await client.put_token(server.port, "q1")
    client.attach_receiver(UInt(0), "q1", mode=0)
    client.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(0), UInt(5000),
                                  UInt(0), UInt(0), UInt(count)))
    deliveries = []
    async with asyncio.timeout(10):
        while len(deliveries) < count:
            code, fields = await client.read()
            if code == p.TRANSFER:
                deliveries.append((int(fields[1]), bytes(fields[2])))
    return deliveries


def _accept(client: Raw, delivery_id: int, settled: bool = True) -> None:
    client.send(0, p.performative(p.DISPOSITION, True, UInt(delivery_id), None, settled,
                                  p.performative(p.ACCEPTED)))


async def test_a_burst_of_settled_dispositions_is_one_settlement(server, monkeypatch):
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(f"m{i}".encode()) for i in range(50)])
    seen = _count_settlements(monkeypatch)
    client = await Raw.to(server)
    deliveries = await _receive(client, server, 50)
    for delivery_id, _tag in deliveries:
        _accept(client, delivery_id)  # one write: the fifty reach the server together
    await client.writer.drain()
    async with asyncio.timeout(10):
        while await drain("q1", peek=True) or sum(len(s.lock_tokens) for s in seen) < 50:
            await asyncio.sleep(0.01)
    assert [s.action for s in seen] == ["complete"] * len(seen)
    assert len(seen) < 5, [len(s.lock_tokens) for s in seen]
    client.writer.close()


async def test_a_lost_lock_in_the_burst_keeps_none_of_the_others(server, monkeypatch):
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(f"m{i}".encode()) for i in range(6)])
    client = await Raw.to(server)
    deliveries = await _receive(client, server, 6)
    # The third's lock is lost before its disposition arrives (settled another way).
    third = str(uuid.UUID(bytes_le=deliveries[2][1]))
    await ns.settle("q1", Settlement("complete", [third]))
    seen = _count_settlements(monkeypatch)
    for delivery_id, _tag in deliveries:
        _accept(client, delivery_id)
    await client.writer.drain()
    async with asyncio.timeout(10):
        while await drain("q1", peek=True):
            await asyncio.sleep(0.01)
    assert any(third in s.lock_tokens and len(s.lock_tokens) > 1 for s in seen)
    client.writer.close()


async def test_what_follows_a_settled_disposition_sees_it_settled(server, monkeypatch):
    """The SDK completes (settled, no answer awaited) then peeks over $management on the
    same connection: the peek must not show the completed messages, however long the
    broker takes to settle them."""
    ns = emulator.namespace(NAMESPACE)
    settle = ns.settle

    async def slowly(path: str, settlement: Settlement) -> Any:
        await asyncio.sleep(0.2)
        return await settle(path, settlement)

    monkeypatch.setattr(ns, "settle", slowly)
    await ns.send("q1", [Message(f"m{i}".encode()) for i in range(20)])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as sb, \
            sb.get_queue_receiver("q1", prefetch_count=20) as receiver:
        got: list[Any] = []
        while len(got) < 20:
            got += await receiver.receive_messages(max_message_count=20, max_wait_time=5)
        for message in got[:15]:
            await receiver.complete_message(message)
        left = await receiver.peek_messages(  # from the first: it peeks on from its last
            max_message_count=50, sequence_number=min(m.sequence_number for m in got))
        assert sorted(b"".join(m.body) for m in left) == sorted(
            b"".join(m.body) for m in got[15:])


async def test_the_next_frame_is_answered_only_once_they_are_settled(server, monkeypatch):
    """Settled dispositions then a close, in one write, with a broker slow to settle:
    the close is answered after the settlements, never before."""
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(f"m{i}".encode()) for i in range(10)])
    settle = ns.settle

    async def slowly(path: str, settlement: Settlement) -> Any:
        await asyncio.sleep(0.2)
        return await settle(path, settlement)

    client = await Raw.to(server)
    deliveries = await _receive(client, server, 10)
    monkeypatch.setattr(ns, "settle", slowly)
    for delivery_id, _tag in deliveries:
        _accept(client, delivery_id)
    client.send(0, p.performative(p.CLOSE))
    async with asyncio.timeout(10):
        while (await client.read())[0] not in (p.CLOSE, "eof"):
            pass
    assert await drain("q1", peek=True) == []
    client.writer.close()
