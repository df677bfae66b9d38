"""The syphon's move as columns (#16): in a run of batches, a batch bound for one healthy
entity moves with no message object per message; any other batch, and a batch whose
send fails, goes the way of messages (PN-17, G-2, G-3).

The syphon batch is made 3 here, so that a small backlog is a run of batches: the first
batch after a long poll moves as messages, the ones after it as columns. The backlog is
there when the pairing opens (left by an earlier run of the application), so that the
syphon finds its entities healthy: in an outage it parks what it receives instead.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiosb import Message
from aiosb._clock import CLOCK
from aiosb.pairing import _common
from aiosb.pairing.rewrite import to_backlog
from aiosb.pairing.runtime import BACKLOG_QUEUE_PROPERTIES

from .conftest import backlog_contents, drain, syphon_options

pytestmark = pytest.mark.looptime


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(_common, "_SYPHON_BATCH_IN_PROCESS", 3)


def count_column_sends(env) -> list[int]:
    """Count the batches the primary takes as columns (a list: one length per call)."""
    transport = env.primary.transport
    real = transport.send_columns
    calls: list[int] = []

    async def counted(entity, bodies, columns):
        calls.append(len(bodies))
        await real(entity, bodies, columns)

    transport.send_columns = counted
    return calls


async def backlog(env, *batches: tuple[str, list[Message]]) -> str:
    """Leave backlog copies of messages, by entity, in the one backlog queue."""
    queue = f"{env.primary.name}/x-servicebus-transfer/0"
    await env.secondary.create_queue(queue, **BACKLOG_QUEUE_PROPERTIES)
    async with env.secondary.sender(queue) as sender:
        for entity, messages in batches:
            await sender.send([to_backlog(m, entity, CLOCK.now(), 1 << 20) for m in messages])
    return queue


def fields(msg) -> tuple:
    return (
        msg.body, msg.message_id, msg.partition_key, msg.content_type, msg.correlation_id,
        msg.subject, msg.reply_to, msg.reply_to_session_id, msg.to,
        msg.application_properties, msg.session_id, msg.scheduled_enqueue_time,
    )


async def test_a_run_of_batches_moves_as_columns_with_every_field_and_its_expiry(env):
    """PN-17, G-2: ten messages with every field a column batch carries (and a time to
    live) come home as they were sent, their expiry the original's; all batches but the
    first after the long poll were sent as columns."""
    calls = count_column_sends(env)
    sent = [
        Message(
            f"m{i}".encode(), message_id=f"id-{i}", partition_key=f"k{i % 2}",
            content_type="text/plain", correlation_id=f"c{i}", subject="s", reply_to="r",
            reply_to_session_id="rs", to="t", application_properties={"i": i, "x": "y"},
            time_to_live=timedelta(minutes=10) if i % 2 else None,
        )
        for i in range(10)
    ]
    sent_at = CLOCK.now()
    await backlog(env, ("orders", sent))
    await asyncio.sleep(120)  # two minutes of the time to live pass
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        await asyncio.sleep(1)
        assert paired.stats.syphon_moved == 10
        assert await backlog_contents(env, paired) == []
    assert calls == [3, 3, 1]  # the first 3 moved as messages
    home = await drain(env.primary, "orders")
    assert [fields(m) for m in home] == [fields(m) for m in sent]
    for msg, original in zip(home, sent, strict=True):
        if original.time_to_live is None:
            assert msg.expires_timestamp is None
        else:
            assert msg.expires_timestamp == pytest.approx(sent_at + 600, abs=0.01)


async def test_batches_that_are_not_the_common_case_move_as_messages(env):
    """Two entities in one batch, a session: each such batch goes the way of messages,
    each message where restore sends it (PN-17); one that ran out of time waiting is
    dead-lettered in the backlog (G-2), and the rest of its run moves as columns."""
    calls = count_column_sends(env)
    await env.primary.create_queue("sessions", requires_session=True)
    queue = await backlog(
        env,
        ("orders", [Message(b"o0")]),  # the first batch, moved as messages
        ("invoices", [Message(b"i0")]),
        ("orders", [Message(b"o1")]),
        ("orders", [Message(b"o2")]),  # the second batch: two entities
        ("invoices", [Message(b"i1"), Message(b"i2")]),
        ("sessions", [Message(f"s{i}", session_id="a") for i in range(3)]),  # the third
        ("orders", [Message(b"short", time_to_live=timedelta(seconds=30))]),  # expires
        ("orders", [Message(b"o3"), Message(b"o4")]),  # the fourth, as columns
    )
    await asyncio.sleep(60)
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        await asyncio.sleep(1)
        assert paired.stats.syphon_moved == 11
    assert calls == [2]
    assert [m.body for m in await drain(env.primary, "orders")] == [
        b"o0", b"o1", b"o2", b"o3", b"o4"
    ]
    assert [m.body for m in await drain(env.primary, "invoices")] == [b"i0", b"i1", b"i2"]
    async with env.primary.receiver("sessions", session_id="a") as receiver:
        assert [m.body for m in await receiver.receive(10, max_wait=0)] == [b"s0", b"s1", b"s2"]
    (dead,) = await drain(env.secondary, queue, sub_queue="deadletter")
    assert (dead.body, dead.dead_letter_reason) == (b"short", "TTLExpiredException")


@pytest.mark.parametrize("kind", ["unavailable", "transient"])
async def test_a_column_batch_whose_send_fails_is_parked_and_nothing_is_lost(env, kind):
    """PN-17: the primary fails as a column batch is sent: the batch is parked at once
    (locked, no delivery burnt), not sent again as messages first (which, after a
    transient fault's retries, would wait the operation timeout twice and outlive the
    locks); after recovery every message arrives once, in order."""
    transport = env.primary.transport
    real, real_send = transport.send_columns, transport.send
    faults = []
    message_sends: list[int] = []

    async def failing(entity, bodies, columns):
        if not faults:
            faults.append(env.p_broker.faults.fail("orders", kind=kind))
        await real(entity, bodies, columns)

    async def counted(entity, messages, **kw):
        if not faults[-1:] or faults[-1].active:  # while the primary is failing
            message_sends.extend(len(m.body) for m in messages if m.subject == "m")
        await real_send(entity, messages, **kw)

    transport.send_columns = failing
    transport.send = counted
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send([Message(f"m{i}", subject="m") for i in range(9)])
            message_sends.clear()  # the application's own attempt at the primary
            paired.mark_healthy("orders")
            await asyncio.sleep(15)
            assert paired.stats.syphon_moved == 3  # the first batch, as messages
            assert len(await backlog_contents(env, paired)) == 6  # parked, not lost
            assert message_sends == [2, 2, 2]  # the first batch; none while it fails
            faults[0].heal()
            await asyncio.sleep(21)  # the next ping finds it back
        assert paired.stats.syphon_moved == 9
        assert paired.stats.syphon_dead_lettered == 0
        assert await backlog_contents(env, paired) == []
    home = await drain(env.primary, "orders")
    assert [m.body for m in home] == [f"m{i}".encode() for i in range(9)]
    assert {m.delivery_count for m in home} == {1}


async def test_a_column_batch_too_large_for_one_send_is_split_as_columns(env):
    """A batch of three 100 KB messages is over the primary's 256 KB batch limit: it is
    sent as columns in two parts (two, then one) that fit, not refused first, nor dropped
    or dead-lettered."""
    calls = count_column_sends(env)
    real = env.primary.transport.send_columns
    refused: list[int] = []

    async def noting(entity, bodies, columns):
        try:
            await real(entity, bodies, columns)
        except Exception:
            refused.append(len(bodies))
            raise

    env.primary.transport.send_columns = noting
    big = [Message(bytes([i]) * 100_000) for i in range(9)]
    await backlog(env, *(("orders", [m]) for m in big))
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        await asyncio.sleep(1)
        assert paired.stats.syphon_moved == 9
        assert paired.stats.syphon_dead_lettered == 0
    assert refused == []
    assert calls == [2, 1, 2, 1]  # the second and third batches
    assert [m.body for m in await drain(env.primary, "orders")] == [m.body for m in big]


async def test_a_column_batch_the_checks_refuse_goes_as_messages(env):
    """A backlog message whose property name Message refuses (set after its checks: the
    broker takes it, on a plain send as on the backlog) fails the column check; its
    batch then goes as messages and the primary takes each, nothing dead-lettered."""
    calls = count_column_sends(env)
    msgs = [Message(f"m{i}") for i in range(6)]
    msgs[4].application_properties["order id"] = 1
    await backlog(env, ("orders", msgs))
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        await asyncio.sleep(1)
        assert (paired.stats.syphon_moved, paired.stats.syphon_dead_lettered) == (6, 0)
    assert calls == [3]  # the second batch, refused as columns
    home = await drain(env.primary, "orders")
    assert [m.body for m in home] == [m.body for m in msgs]
    assert home[4].application_properties == {"order id": 1}


async def test_application_properties_named_as_the_rewrite_move_as_columns_as_sent(env):
    """PN-11: a message's own properties named as the rewrite's (``x-ms-path``,
    ``x-ms-sessionid``, the escape prefix) come home with their names and values when
    their batch moves as columns, and set nothing."""
    calls = count_column_sends(env)
    props = {"x-ms-path": "elsewhere", "x-ms-sessionid": "abc", "x-ms-aiosb-user.y": 2}
    await backlog(env, ("orders", [Message(f"m{i}", application_properties=props)
                                   for i in range(6)]))
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        await asyncio.sleep(1)
        assert paired.stats.syphon_moved == 6
    assert calls == [3]  # the second batch moved as columns
    home = await drain(env.primary, "orders")
    assert [(m.session_id, m.application_properties) for m in home] == [(None, props)] * 6
