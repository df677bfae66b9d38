"""Issue 16: an entity's counts are kept as messages come and go (reading them looks at
no message), and always equal what looking at every message finds: through sends,
schedules and their cancelling and activation, locks, completes, abandons, defers,
deferred receives, dead letters, expiry and a durable reload."""

from __future__ import annotations

import asyncio
import datetime as _dt
import random

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb.emulator._record import AVAILABLE, LOCKED, SCHEDULED
from aiosb.emulator.durable import Journal

pytestmark = pytest.mark.looptime


def counts_by_scan(store) -> tuple[int, int, int]:
    """What ``store.counts()`` should say, found by looking at every message."""
    active = deferred = scheduled = 0
    for rec in store.records.values():
        if rec.deferred:
            deferred += 1
        elif rec.state in (AVAILABLE, LOCKED):
            active += 1
        elif rec.state == SCHEDULED:
            scheduled += 1
    return active, deferred, scheduled


def _check(name: str) -> None:
    for entity in emulator.namespace(name)._entities.values():
        for store in entity.stores():
            assert store.counts() == counts_by_scan(store), (entity.path, store.fragment)


async def _churn(ns: aiosb.Namespace, name: str, rng: random.Random) -> None:
    ttl = _dt.timedelta(seconds=30)
    async with ns.sender("q") as sender:
        await sender.send([Message(f"{i}".encode(), time_to_live=ttl if i % 5 == 0 else None)
                           for i in range(300)])
        at = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=20)
        seqs = await sender.schedule([Message(b"later") for _ in range(20)], at)
        await sender.cancel_scheduled(seqs[:7])
    _check(name)
    deferred = []
    async with ns.receiver("q") as receiver:
        for _ in range(6):
            batch = await receiver.receive(max_messages=rng.randint(5, 40), max_wait=0)
            for msg in batch:
                choice = rng.randrange(4)
                if choice == 0:
                    await receiver.complete(msg)
                elif choice == 1:
                    await receiver.abandon(msg)
                elif choice == 2:
                    await receiver.defer(msg)
                    deferred.append(msg.sequence_number)
                else:
                    await receiver.dead_letter(msg, reason="test")
            _check(name)
        again = await receiver.receive_deferred(deferred[: len(deferred) // 2])
        for i, msg in enumerate(again):
            await (receiver.complete(msg) if i % 2 else receiver.abandon(msg))
        _check(name)
    await asyncio.sleep(40)  # scheduled ones activate, short-lived ones expire
    async with ns.receiver("q") as receiver:
        await receiver.receive(max_messages=1, max_wait=0)  # runs what is due
    _check(name)


async def test_counts_are_kept_as_messages_come_and_go(tmp_path):
    journal = Journal(tmp_path)
    await journal.open()
    emulator.use_journal(journal)
    try:
        async with aiosb.connect("memory://counts", operation_timeout=60) as ns:
            await ns.create_queue("q", dead_lettering_on_message_expiration=True,
                                  lock_duration=_dt.timedelta(seconds=5))
            await _churn(ns, "counts", random.Random(3))
        await journal.commit()
        emulator.use_journal(None)
        await journal.aclose()
        emulator.reset()
        journal = Journal(tmp_path)
        await journal.open()
        await journal.load()
        emulator.use_journal(journal)
        _check("counts")  # as the journal gave them back
        async with aiosb.connect("memory://counts") as ns:
            counts = await ns.runtime_properties("q")
        store = emulator.namespace("counts")._entities["q"].fragments[0]
        assert (counts.active_message_count, counts.deferred_message_count) == \
            counts_by_scan(store)[:2]
    finally:
        emulator.use_journal(None)
        await journal.aclose()
