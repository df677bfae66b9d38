"""A queue's structures stay bounded over a long run (#50, item 4: throughput that holds):
what a stream of messages leaves behind once each is completed is not kept per message,
however many went through, so a server that runs for ten minutes works on the same
sizes in its last minute as in its first."""

from __future__ import annotations

import aiosb
from aiosb import Message, emulator


async def test_a_long_stream_with_a_backlog_leaves_no_structure_grown_by_its_messages():
    """150,000 messages, sent ten batches ahead of the receiver (a backlog of 1,000, as
    S-4 streaming's producers run ahead of its consumers), each received in peek-lock and
    completed: afterwards the store holds nothing, its page index (``Held._keys``), lock
    groups and timeline, and the namespace's timer, are as small as after a few
    batches."""
    broker = emulator.namespace("long-run")
    async with aiosb.connect("memory://long-run") as ns:
        await ns.create_queue("q")
        batch = [Message(b"x" * 64, application_properties={"i": i}) for i in range(100)]
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            for _ in range(10):
                await sender.send(batch)
            for _ in range(1_500):
                await sender.send(batch)
                got = await receiver.receive(max_messages=100, max_wait=0)
                assert len(got) == 100
                await receiver.complete(got)
            for _ in range(10):
                await receiver.complete(await receiver.receive(max_messages=100, max_wait=0))
        store = broker._entities["q"].fragments[0]
        assert len(store.records) == 0 and store.locked == {} and not store.ready
        held = store.records
        assert held._pages == {} and len(held._keys) <= 64 + 2  # pruned as pages go
        assert store._groups == {}  # a lock group goes with its last completion
        assert len(store.timeline) <= 1024 + 10  # compacted as it grows (1,510 receives)
        assert len(broker._timeline) <= 10  # the namespace's timer: one entry a store
