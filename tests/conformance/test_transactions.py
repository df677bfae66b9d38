"""Conformance: transactions, and their rules on partitioned entities (PT-16 to PT-18)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions, errors
from aiosb.emulator import FRAGMENT_SHIFT

pytestmark = pytest.mark.looptime


async def count(ns: aiosb.Namespace, entity: str) -> int:
    return (await ns.runtime_properties(entity)).active_message_count


async def received(ns: aiosb.Namespace, entity: str, **kw) -> list[aiosb.ReceivedMessage]:
    async with ns.receiver(entity, mode="receive_and_delete", **kw) as receiver:
        return await receiver.receive(max_messages=100, max_wait=0)


async def test_an_exception_inside_the_transaction_sends_nothing(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        with pytest.raises(RuntimeError):
            async with sender.transaction():
                await sender.send(Message(b"1"))
                raise RuntimeError("rolled back")
        assert await count(ns, "q") == 0


async def test_transaction_messages_are_limited_one_by_one_not_in_sum(ns):
    """A transaction is not a batch: each message must fit, not their sum."""
    await ns.create_queue("q")
    body = b"x" * 100_000
    async with ns.sender("q") as sender:
        with pytest.raises(errors.MessageSizeExceeded, match="batch"):
            await sender.send([Message(body) for _ in range(3)])
        async with sender.transaction():
            await sender.send([Message(body) for _ in range(3)])
    assert await count(ns, "q") == 3


async def test_a_plain_entity_takes_any_keys_in_one_transaction(ns):
    """PT-16 and PT-17 bind partitioned entities only."""
    await ns.create_queue("plain")
    await ns.create_queue("plain-sessions", requires_session=True)
    async with ns.sender("plain") as sender, sender.transaction():
        await sender.send([Message(b"a"), Message(b"b", partition_key="k")])
    async with ns.sender("plain-sessions") as sender, sender.transaction():
        await sender.send([Message(b"a", session_id="s1"), Message(b"b", session_id="s2")])
    assert await count(ns, "plain") == 2
    assert await count(ns, "plain-sessions") == 2


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([Message(b"a"), Message(b"b")], "needs a partition key"),
        ([Message(b"a", partition_key="k"), Message(b"b")], "needs a partition key"),
        ([Message(b"a", partition_key="k1"), Message(b"b", partition_key="k2")], "PT-16"),
    ],
    ids=["keyless", "one-keyless", "two-keys"],
)
async def test_partitioned_transactions_need_one_key(ns, messages, match):
    """PT-16: every message needs a key and the same one; otherwise nothing is sent."""
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender:
        with pytest.raises(errors.InvalidOperation, match=match):
            async with sender.transaction():
                await sender.send(messages)
    assert await count(ns, "p") == 0


async def test_a_partitioned_transaction_with_one_key_lands_in_one_fragment(ns):
    await ns.create_queue("p", enable_partitioning=True)
    async with ns.sender("p") as sender, sender.transaction():
        for i in range(10):
            await sender.send(Message(str(i).encode(), partition_key="order-9"))
    got = await received(ns, "p")
    assert [m.body for m in got] == [str(i).encode() for i in range(10)]
    assert len({m.sequence_number >> FRAGMENT_SHIFT for m in got}) == 1


async def test_message_id_is_a_transaction_key_only_with_duplicate_detection(ns):
    """PT-16 with PT-8: MessageId is the key when duplicate detection is on."""
    await ns.create_queue("dedup", enable_partitioning=True, requires_duplicate_detection=True)
    async with ns.sender("dedup") as sender:
        async with sender.transaction():
            await sender.send(Message(b"a", message_id="m1"))
        with pytest.raises(errors.InvalidOperation, match="partition keys"):
            async with sender.transaction():
                await sender.send([Message(b"b", message_id="m2"), Message(b"c", message_id="m3")])
    assert await count(ns, "dedup") == 1


async def test_a_partitioned_entity_takes_one_session_per_transaction(ns):
    """PT-17, PT-18: the session is the key; a PartitionKey, if set, equals it."""
    await ns.create_queue("psq", requires_session=True, enable_partitioning=True)
    async with ns.sender("psq") as sender:
        with pytest.raises(errors.InvalidOperation, match="PT-17"):
            async with sender.transaction():
                await sender.send(Message(b"a", session_id="s1"))
                await sender.send(Message(b"b", session_id="s2"))
        async with sender.transaction():
            await sender.send(Message(b"a", session_id="s1"))
            await sender.send(Message(b"b", session_id="s1", partition_key="s1"))
    with pytest.raises(errors.InvalidOperation, match="PT-7"):
        Message(b"c", session_id="s1", partition_key="other")
    assert await count(ns, "psq") == 2


async def test_a_paired_sender_keeps_the_transaction_rules(ns):
    """A transaction through a pairing reaches the primary as a transaction: a broken
    rule is the caller's error (no failover), and a good one commits."""
    await ns.create_queue("p", enable_partitioning=True)
    async with aiosb.connect(f"{ns.url}-secondary") as secondary:
        options = PairedNamespaceOptions(
            backlog_queue_count=1, failover_interval=timedelta(seconds=1)
        )
        async with ns.pair(secondary, options) as paired, paired.sender("p") as sender:
            with pytest.raises(errors.InvalidOperation, match="PT-16"):
                async with sender.transaction():
                    await sender.send([Message(b"a"), Message(b"b")])
            assert paired.is_available("p")
            async with sender.transaction():
                await sender.send(
                    [Message(b"a", partition_key="k"), Message(b"b", partition_key="k")]
                )
    assert await count(ns, "p") == 2
