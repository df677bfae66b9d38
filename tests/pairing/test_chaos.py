"""R-1, R-2: randomised outage schedules, many senders, many seeds.

Invariant: every acknowledged message reaches the primary exactly once (more only
where a move was interrupted between send and complete), never without its MessageId;
nothing that was refused appears; no ping reaches a receiver; the backlog drains.
"""

from __future__ import annotations

import asyncio
import collections
import random
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions, emulator, errors
from aiosb.message import PING_CONTENT_TYPE

pytestmark = pytest.mark.looptime

ENTITIES = ("orders", "invoices")
SENDERS = 6
SENDS_PER_SENDER = 40
CHAOS_SECONDS = 600


async def chaos(rng: random.Random, p_broker, s_broker, backlog: list[str]) -> None:
    """Flap outages of primary entities, the primary namespace and backlog queues."""
    loop = asyncio.get_running_loop()
    end = loop.time() + CHAOS_SECONDS
    while loop.time() < end:
        await asyncio.sleep(rng.uniform(1, 30))
        target = rng.random()
        kind = rng.choice(["unavailable", "unavailable", "timeout", "transient"])
        if target < 0.45:
            fault = p_broker.faults.fail(rng.choice(ENTITIES), kind=kind)
        elif target < 0.6:
            fault = p_broker.faults.fail(kind=kind)
        elif target < 0.85:
            operations = rng.choice([["send"], ["receive"], ["send", "receive"]])
            fault = s_broker.faults.fail(rng.choice(backlog), kind=kind, operations=operations)
        else:  # both sides at once
            fault = p_broker.faults.fail(rng.choice(ENTITIES), kind=kind)
            loop.call_later(rng.uniform(1, 60), s_broker.faults.fail(rng.choice(backlog)).heal)
        loop.call_later(rng.uniform(0.5, 90), fault.heal)
    p_broker.faults.heal()
    s_broker.faults.heal()


async def sender_task(rng, paired, index, acked, refused) -> None:
    async with paired.sender(ENTITIES[index % 2]) as sender:
        for i in range(SENDS_PER_SENDER):
            await asyncio.sleep(rng.uniform(0, CHAOS_SECONDS / SENDS_PER_SENDER))
            count = rng.choice([1, 1, 1, 5])
            batch = [
                Message(f"{index}-{i}-{j}", message_id=f"{index}-{i}-{j}")
                for j in range(count)
            ]
            try:
                await sender.send(batch if count > 1 else batch[0])
            except errors.BacklogUnavailable:
                refused.update(m.message_id for m in batch)
                continue
            acked.update(m.message_id for m in batch)


@pytest.mark.parametrize("seed", range(12))
async def test_r1_no_acknowledged_message_is_lost_under_random_outages(seed):
    rng = random.Random(seed)
    random.seed(seed)  # the runtime's own random choices (rotation, jitter)
    p_name, s_name = f"chaos-p{seed}", f"chaos-s{seed}"
    options = PairedNamespaceOptions(
        backlog_queue_count=3,
        failover_interval=timedelta(seconds=rng.choice([0, 2, 10])),
        ping_primary_interval=timedelta(seconds=5),
        syphon_retry_interval=timedelta(seconds=1),
        enable_syphon=True,
    )
    acked: set[str] = set()
    refused: set[str] = set()
    async with aiosb.connect(f"memory://{p_name}", operation_timeout=5) as primary, \
            aiosb.connect(f"memory://{s_name}", operation_timeout=5) as secondary:
        for entity in ENTITIES:
            await primary.create_queue(entity)
        async with primary.pair(secondary, options) as paired:
            events = paired.events()
            p_broker, s_broker = emulator.namespace(p_name), emulator.namespace(s_name)
            await asyncio.gather(
                chaos(rng, p_broker, s_broker, list(paired.backlog_queues)),
                *(sender_task(rng, paired, i, acked, refused) for i in range(SENDERS)),
            )
            # Everything healed: give pings and the syphon time to bring all home.
            await asyncio.sleep(5 * 60)
            stats = paired.stats
        # Messages whose move was interrupted between send and complete (G-3).
        interrupted = sum(
            [e.count async for e in events if e.kind == "syphon_failed" and "complete" in e.detail]
        )
        received = collections.Counter()
        for entity in ENTITIES:
            async with primary.receiver(entity, mode="receive_and_delete") as receiver:
                while batch := await receiver.receive(max_messages=100, max_wait=0):
                    for msg in batch:
                        assert msg.content_type != PING_CONTENT_TYPE
                        assert msg.message_id is not None
                        received[msg.message_id] += 1
        leftovers = 0
        for index in range(options.backlog_queue_count):
            counts = await secondary.runtime_properties(
                f"{p_name}/x-servicebus-transfer/{index}"
            )
            leftovers += counts.total_message_count
    assert acked, "the run acknowledged nothing"
    assert stats.failovers > 0, "the schedule never failed anything over"
    lost = acked - set(received)
    assert not lost, f"seed {seed}: {len(lost)} acknowledged messages lost: {sorted(lost)[:5]}"
    phantoms = set(received) - acked
    assert not phantoms, f"seed {seed}: messages that were refused arrived: {phantoms}"
    duplicates = sum(n - 1 for n in received.values())
    assert duplicates <= interrupted, f"seed {seed}: {duplicates} duplicates, {interrupted} moves"
    assert leftovers == 0
