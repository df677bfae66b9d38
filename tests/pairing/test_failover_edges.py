"""Edges of the paired send that an adversarial review found: what the primary would
refuse, a primary back before its ping says so, and application properties that bear
the rewrite's names (G-1, PN-11, PN-12)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiosb
from aiosb import Message, emulator, errors
from aiosb.pairing.rewrite import PATH, SCHEDULED, SESSION_ID, TIME_TO_LIVE, USER

from .conftest import drain, options, syphon_options

pytestmark = pytest.mark.looptime


async def test_g1_a_message_the_primary_would_refuse_is_refused_in_failover_too(env):
    """G-1, PN-12: a 400 KB message fits a premium secondary's 1 MB limit but never the
    standard primary's 256 KB. Failed over, the send is refused as the primary refuses
    it, not acknowledged into a backlog that can never move it home."""
    emulator.namespace("big-secondary", tier="premium")
    async with aiosb.connect("memory://big-secondary", operation_timeout=10) as secondary:
        async with env.primary.pair(secondary, syphon_options(backlog_queue_count=1)) as paired:
            async with paired.sender("orders") as orders:
                body = b"x" * (400 * 1024)
                with pytest.raises(errors.MessageSizeExceeded):
                    await orders.send(Message(body))  # healthy: the primary refuses it
                with env.p_broker.faults.fail("orders"):
                    with pytest.raises(errors.MessageSizeExceeded, match="primary's"):
                        await orders.send(Message(body))
                    batch = [Message(b"y" * (100 * 1024)) for _ in range(3)]
                    with pytest.raises(errors.MessageSizeExceeded, match="batch of 3"):
                        await orders.send(batch)
                    await orders.send(Message(b"small", message_id="small"))
                await asyncio.sleep(30)
            assert paired.stats.syphon_dead_lettered == 0
    assert [m.message_id for m in await drain(env.primary, "orders")] == ["small"]


async def test_g1_a_send_tries_the_primary_before_it_says_the_backlog_is_down(env):
    """G-1: a send raises BacklogUnavailable only when the primary and every backlog
    queue are down. An entity failed over, its primary back before the next ping (five
    minutes away), and the whole secondary down: the send goes to the primary, and the
    entity is healthy again."""
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(minutes=5))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"a"))  # fails over: to the backlog
            assert paired.health("orders").value == "failed_over"
            with env.s_broker.faults.fail():
                await sender.send(Message(b"b"))
                assert paired.health("orders").value == "healthy"
                with env.p_broker.faults.fail("orders"):  # both down: now it raises
                    with pytest.raises(errors.BacklogUnavailable):
                        await sender.send(Message(b"c"))
    assert [m.body for m in await drain(env.primary, "orders")] == [b"b"]


@pytest.mark.parametrize("name", [PATH, SESSION_ID, TIME_TO_LIVE, SCHEDULED, USER + "x"])
async def test_pn11_an_application_property_named_as_the_rewrite_arrives_as_sent(env, name):
    """PN-11: an application property of the message's own named ``x-ms-sessionid``
    (or another name the backlog rewrite uses, or the prefix that escapes them) arrives
    with its name and value, and sets nothing: it is the application's, as when the
    primary is healthy."""
    props = {name: "abc", "kept": 1}
    async with env.primary.pair(env.secondary, syphon_options(backlog_queue_count=1)) as paired:
        async with paired.sender("orders") as sender:
            await sender.send(Message(b"healthy", application_properties=props))
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"failed over", application_properties=props,
                                          time_to_live=timedelta(hours=1)))
                await sender.send([Message(b"batch", application_properties=props)
                                   for _ in range(3)])
            await asyncio.sleep(20)
        assert paired.stats.syphon_moved == 4
    got = await drain(env.primary, "orders")
    assert [(m.body, m.session_id, m.application_properties) for m in got] == [
        (body, None, props)
        for body in (b"healthy", b"failed over", b"batch", b"batch", b"batch")
    ]


async def test_g1_the_primarys_own_refusal_is_said_as_it_is_not_as_backlog_unavailable(env):
    """G-1: failed over, the secondary down, the primary tried once more refuses the send
    for the caller's own reason (a credential): that error is raised as it is, not
    hidden behind BacklogUnavailable."""
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(minutes=5))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"a"))  # fails over
            send = env.primary.transport.send

            async def unauthorized(entity, messages):
                raise errors.Unauthorized("the key was rotated")

            env.primary.transport.send = unauthorized
            with env.s_broker.faults.fail():
                with pytest.raises(errors.Unauthorized, match="rotated"):
                    await sender.send(Message(b"b"))
            env.primary.transport.send = send


async def test_pn6_a_send_still_retrying_reports_each_failure_after_a_false_recovery(env):
    """PN-6: a send retrying a primary that is down keeps reporting its failures. Marked
    healthy by hand while it retries (the failover timer cancelled), the entity is
    suspect again at its next failure, so it fails over one interval later and the
    send lands in the backlog, rather than retrying a "healthy" primary for ever."""
    opts = options(failover_interval=timedelta(seconds=10),
                   ping_primary_interval=timedelta(minutes=5))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as orders:
            with env.p_broker.faults.fail("orders"):
                sending = asyncio.ensure_future(orders.send(Message(b"x", message_id="m")))
                await asyncio.sleep(5)
                assert paired.health("orders") is aiosb.pairing.Health.SUSPECT
                paired.mark_healthy("orders")  # wrongly: the primary is still down
                async with asyncio.timeout(30):
                    await sending
                assert paired.health("orders") is aiosb.pairing.Health.FAILED_OVER
            assert paired.stats.backlog_sends == 1
