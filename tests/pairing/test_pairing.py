"""The pairing runtime, rule by rule (paired-namespaces.md), on the embedded emulator with
a fast-forwarded loop clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import NEVER, Message, errors
from aiosb.message import PING_CONTENT_TYPE
from aiosb.pairing import Health

from .conftest import backlog_contents, drain, msgs, options

pytestmark = pytest.mark.looptime


async def test_pn1_pn7_backlog_queues_are_created_with_their_properties(env):
    """PN-1, PN-7: {primary}/x-servicebus-transfer/{i} with the listed properties."""
    async with env.primary.pair(env.secondary, options(backlog_queue_count=4)) as paired:
        names = [f"{env.primary.name}/x-servicebus-transfer/{i}" for i in range(4)]
        assert sorted(paired.backlog_queues) == names
    for name in names:
        q = await env.secondary.get_queue(name)
        assert q.max_size_in_megabytes == 5120
        assert q.max_delivery_count == 2**31 - 1
        assert q.default_message_time_to_live == NEVER
        assert q.auto_delete_on_idle == NEVER
        assert q.lock_duration == timedelta(minutes=1)
        assert q.dead_lettering_on_message_expiration is True
        assert q.enable_batched_operations is True


async def test_pn8_existing_queues_are_used_as_they_are_and_extras_left_alone(env):
    """PN-8: check first, create only if missing; never "fix"; ignore extra indexes."""
    prefix = f"{env.primary.name}/x-servicebus-transfer"
    await env.secondary.create_queue(f"{prefix}/0", lock_duration=timedelta(seconds=30))
    await env.secondary.create_queue(f"{prefix}/7")
    pairing = env.primary.pair(env.secondary, options(backlog_queue_count=2))
    events = pairing.events()
    async with pairing as paired:
        assert sorted(paired.backlog_queues) == [f"{prefix}/0", f"{prefix}/1"]
    kinds = [(e.kind, e.entity) async for e in events]
    assert ("backlog_queue_differs", f"{prefix}/0") in kinds
    assert ("backlog_queue_ready", f"{prefix}/1") in kinds
    assert (await env.secondary.get_queue(f"{prefix}/0")).lock_duration == timedelta(seconds=30)
    assert await env.secondary.queue_exists(f"{prefix}/7")


async def test_healthy_sends_go_to_the_primary_and_nothing_else_happens(env):
    """PN-9, S-2: while healthy, a paired send is a plain send."""
    async with env.primary.pair(env.secondary, options()) as paired:
        async with paired.sender("orders") as sender:
            await sender.send(Message(b"a"))
            await sender.send(msgs("b", "c"))
        stats = paired.stats
        assert (stats.primary_sends, stats.backlog_sends, stats.pings_sent) == (2, 0, 0)
        assert await backlog_contents(env, paired) == []
    assert [m.body for m in await drain(env.primary, "orders")] == [b"a", b"b", b"c"]


async def test_g1_a_send_during_the_failover_interval_waits_then_goes_to_the_backlog(env):
    """PN-6, PN-10, G-1: the send does not raise; it lands in a backlog queue exactly when
    failover engages."""
    loop = asyncio.get_running_loop()
    async with env.primary.pair(env.secondary, options()) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            start = loop.time()
            await sender.send(Message(b"x", message_id="m1", session_id="s1"))
            assert loop.time() - start == pytest.approx(60, abs=0.5)
            assert not paired.is_available("orders")
            assert paired.health("orders") is Health.FAILED_OVER
            # Once failed over, sends go straight to the backlog.
            start = loop.time()
            await sender.send(Message(b"y"))
            assert loop.time() - start < 0.01
        (first, second) = sorted(await backlog_contents(env, paired), key=lambda m: m.body)
    assert first.message_id == "m1" and first.session_id is None
    assert first.application_properties["x-ms-path"] == "orders"
    assert first.application_properties["x-ms-sessionid"] == "s1"
    assert second.body == b"y"
    env.p_broker.faults.heal()
    assert await drain(env.primary, "orders") == []


async def test_pn6_a_success_during_the_interval_resets_the_timer(env):
    """PN-6: a successful send to the primary resets the timer; no failover."""
    loop = asyncio.get_running_loop()
    async with env.primary.pair(env.secondary, options()) as paired:
        async with paired.sender("orders") as sender:
            fault = env.p_broker.faults.fail("orders")
            loop.call_later(20, fault.heal)
            await sender.send(Message(b"x"))  # waits, retries, succeeds after the heal
            assert paired.health("orders") is Health.HEALTHY
            await asyncio.sleep(120)
            assert paired.stats.failovers == 0
    assert [m.body for m in await drain(env.primary, "orders")] == [b"x"]


async def test_pn6_a_zero_interval_fails_over_on_the_first_failure(env):
    loop = asyncio.get_running_loop()
    async with env.primary.pair(env.secondary, options(failover_interval=timedelta(0))) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            start = loop.time()
            await sender.send(Message(b"x"))
            assert loop.time() - start < 0.01
        assert len(await backlog_contents(env, paired)) == 1


async def test_pn6_transient_errors_are_retried_and_do_not_start_the_timer(env):
    loop = asyncio.get_running_loop()
    async with env.primary.pair(env.secondary, options()) as paired:
        async with paired.sender("orders") as sender:
            fault = env.p_broker.faults.fail("orders", kind="transient")
            loop.call_later(3, fault.heal)
            await sender.send(Message(b"x"))
            assert paired.health("orders") is Health.HEALTHY
        assert paired.stats.failovers == 0
    assert len(await drain(env.primary, "orders")) == 1


async def test_pn6_transient_errors_that_outlast_the_operation_timeout_fail_over(env):
    """An unreachable namespace (transient errors for ever) must fail over."""
    loop = asyncio.get_running_loop()
    async with env.primary.pair(env.secondary, options()) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail(kind="transient"):
                start = loop.time()
                await sender.send(Message(b"x"))
                # the first timeout after ~10 s starts the timer; 60 s later: failover
                assert 60 <= loop.time() - start <= 10 + 60 + 10
        assert paired.stats.failovers == 1
        assert len(await backlog_contents(env, paired)) == 1


async def test_pn6_a_primary_that_stops_answering_fails_over(env):
    async with env.primary.pair(env.secondary, options(failover_interval=timedelta(0))) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders", kind="timeout"):
                await sender.send(Message(b"x"))
        assert len(await backlog_contents(env, paired)) == 1


@pytest.mark.parametrize(
    ("make_fault", "error"),
    [
        (lambda: errors.Unauthorized("bad key"), errors.Unauthorized),
        (lambda: errors.EntityNotFound("no such queue"), errors.EntityNotFound),
        (lambda: errors.InvalidOperation("no"), errors.InvalidOperation),
    ],
)
async def test_pn6_caller_errors_raise_and_never_move_traffic(env, make_fault, error):
    """PN-6: unauthorized (and other errors of the caller's own) do not start the timer."""
    async with env.primary.pair(env.secondary, options(failover_interval=timedelta(0))) as paired:
        async with paired.sender("orders") as sender:
            original = env.primary.transport.send

            async def failing(entity, messages):
                raise make_fault()

            env.primary.transport.send = failing
            try:
                with pytest.raises(error):
                    await sender.send(Message(b"x"))
            finally:
                env.primary.transport.send = original
        assert paired.health("orders") is Health.HEALTHY
        assert await backlog_contents(env, paired) == []


async def test_server_busy_is_retried_within_the_operation_timeout_and_never_fails_over_alone(env):
    calls = 0
    original = env.primary.transport.send

    async def busy_twice(entity, messages):
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise errors.ServerBusy("throttled")
        await original(entity, messages)

    async with env.primary.pair(env.secondary, options(failover_interval=timedelta(0))) as paired:
        async with paired.sender("orders") as sender:
            env.primary.transport.send = busy_twice
            await sender.send(Message(b"x"))
        assert paired.health("orders") is Health.HEALTHY and calls == 3


async def test_failover_is_per_entity(env):
    async with env.primary.pair(env.secondary, options(failover_interval=timedelta(0))) as paired:
        async with paired.sender("orders") as orders, paired.sender("invoices") as invoices:
            env.p_broker.faults.fail("orders")
            await orders.send(Message(b"o"))
            await invoices.send(Message(b"i"))
        assert paired.health("invoices") is Health.HEALTHY
        assert not paired.is_available("orders")
    env.p_broker.faults.heal()
    assert [m.body for m in await drain(env.primary, "invoices")] == [b"i"]


async def test_pn10_pn15_pings_run_only_while_unavailable_and_recovery_is_immediate(env):
    """PN-3, PN-10, PN-15: a ping every ping interval; the first delivered ping brings
    every sender back to the primary at once; then pings stop."""
    loop = asyncio.get_running_loop()
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(seconds=30))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as a, paired.sender("orders") as b:
            fault = env.p_broker.faults.fail("orders")
            await a.send(Message(b"1"))
            await asyncio.sleep(95)
            assert paired.stats.pings_sent == 3 and paired.stats.pings_failed == 3
            fault.heal()
            healed = loop.time()
            while not paired.is_available("orders"):
                await asyncio.sleep(0.5)
            assert loop.time() - healed <= 30 + 0.5  # S-6: within one ping interval
            await b.send(Message(b"2"))
            pings = paired.stats.pings_sent
            await asyncio.sleep(600)
            assert paired.stats.pings_sent == pings  # PN-15: they stop
            assert not paired._tasks  # no ping actor left
    assert [m.body for m in await drain(env.primary, "orders")] == [b"2"]


async def test_r2_pings_never_reach_a_receiver(env):
    """PN-14, R-2: pings are empty, 1 s TTL, random session, and never delivered."""
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(seconds=1))
    seen = []
    original = env.primary.transport.send

    async def spy(entity, messages):
        seen.extend(messages)
        await original(entity, messages)

    env.primary.transport.send = spy
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"x"))
                await asyncio.sleep(5)
            await asyncio.sleep(2)
        assert paired.is_available("orders")
    pings = [m for m in seen if m.content_type == PING_CONTENT_TYPE]
    assert pings and all(p.body == b"" and p.time_to_live == timedelta(seconds=1) for p in pings)
    assert len({p.session_id for p in pings}) == len(pings)
    assert all(m.content_type != PING_CONTENT_TYPE for m in await drain(env.primary, "orders"))


async def test_pn6_step4_a_failed_backlog_queue_leaves_the_rotation_for_every_sender(env):
    """PN-6 step 4, PN-13: each sender picks a random queue; a failed one is dropped
    for all senders of the pairing."""
    opts = options(backlog_queue_count=3, failover_interval=timedelta(0))
    async with env.primary.pair(env.secondary, opts) as paired:
        senders = [paired.sender("orders") for _ in range(12)]
        assert len({s._backlog for s in senders}) > 1  # random per sender
        env.p_broker.faults.fail("orders")
        bad = senders[0]._backlog
        env.s_broker.faults.fail(bad, operations=["send"])
        await senders[0].send(Message(b"x"))
        assert bad not in paired.backlog_queues
        assert paired.stats.backlog_queues_removed == 1
        for sender in senders:
            await sender.send(Message(b"y"))
            assert sender._backlog != bad
        for sender in senders:
            await sender.aclose()
    assert len(await backlog_contents(env, paired)) == 13


async def test_g1_backlog_unavailable_only_when_primary_and_every_backlog_queue_are_down(env):
    opts = options(backlog_queue_count=3, failover_interval=timedelta(0))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            queues = list(paired.backlog_queues)
            for path in queues[:2]:
                env.s_broker.faults.fail(path)
            await sender.send(Message(b"still fine"))  # one queue is left
            env.s_broker.faults.fail(queues[2])
            with pytest.raises(errors.BacklogUnavailable, match="all 3 backlog queues"):
                await sender.send(Message(b"nowhere"))
            env.s_broker.faults.heal()
            await sender.send(Message(b"back"))  # a removed queue is tried as a last resort
        bodies = sorted(m.body for m in await backlog_contents(env, paired))
    assert bodies == [b"back", b"still fine"]


async def test_pn12_a_message_too_big_after_the_rewrite_fails_clearly_and_nothing_is_sent(env):
    opts = options(failover_interval=timedelta(0))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            with pytest.raises(errors.MessageSizeExceeded, match="PN-12"):
                await sender.send(Message(b"x" * (256 * 1024 - 10)))
        assert await backlog_contents(env, paired) == []


async def test_a_batch_goes_to_one_place_as_one_batch(env):
    opts = options(backlog_queue_count=5, failover_interval=timedelta(0))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            await sender.send(msgs(*[str(i) for i in range(20)]))
        counts = [
            (await env.secondary.runtime_properties(p)).active_message_count
            for p in paired.backlog_queues
        ]
    assert sorted(counts) == [0, 0, 0, 0, 20]


async def test_mark_healthy_sends_to_the_primary_at_once(env):
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(minutes=30))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"a"))
            paired.mark_healthy("orders")
            assert paired.is_available("orders")
            await sender.send(Message(b"b"))
        await asyncio.sleep(0.001)  # the cancelled ping actor finishes
        assert not paired._tasks
    assert [m.body for m in await drain(env.primary, "orders")] == [b"b"]


async def test_g4_events_and_stats_describe_what_happened(env):
    opts = options(
        failover_interval=timedelta(seconds=5),
        ping_primary_interval=timedelta(seconds=10),
        enable_syphon=True,
    )
    pairing = env.primary.pair(env.secondary, opts)
    events = pairing.events()
    async with pairing as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"x"))
            await asyncio.sleep(11)
    kinds = [e.kind async for e in events if e.kind != "backlog_queue_ready"]
    assert kinds == ["suspect", "failover", "recovered", "syphon_moved"]
    stats = paired.stats
    assert (stats.failovers, stats.recoveries, stats.syphon_moved) == (1, 1, 1)


async def test_leaving_the_context_stops_everything(env):
    before = asyncio.all_tasks()
    opts = options(failover_interval=timedelta(0), enable_syphon=True)
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            env.p_broker.faults.fail("orders")
            await sender.send(Message(b"x"))
        assert paired._tasks  # syphons and a ping actor
    assert asyncio.all_tasks() == before
    assert all(e.timer is None for e in paired._entries.values())
    with pytest.raises(errors.ClientClosed):
        paired.sender("orders")


async def test_closing_the_pairing_lets_a_healthy_send_finish_as_the_plain_send_it_is(env):
    """While the entity is healthy nothing changes (S-2): a paired send is a plain send,
    which closing the pairing does not end (closing the primary namespace would)."""
    paired = env.primary.pair(env.secondary, options())
    await paired.open()
    sender = paired.sender("orders")
    with env.p_broker.faults.delay("orders", 2, operations=["send"]):
        sending = asyncio.create_task(sender.send(Message(b"x")))
        await asyncio.sleep(1)
        await paired.aclose()
        await sending
    assert [m.body for m in await drain(env.primary, "orders")] == [b"x"]
    assert await backlog_contents(env, paired) == []


@pytest.mark.parametrize(("error", "says"), [
    (errors.EntityUnavailable, "did not fail over; it was not sent"),
    # after a timeout nobody knows whether it landed (a resend could be a duplicate)
    (errors.OperationTimeout, "did not fail over; it may or may not have landed"),
])
async def test_a_healthy_send_that_fails_after_the_pairing_closed_does_not_fail_over(
    env, error, says
):
    """A send that fails once its pairing is closed cannot go to the backlog (nothing would
    move it home): once the plain send gives up, ClientClosed says what became of it."""
    async def fails_slowly(entity, messages):
        await asyncio.sleep(2)
        raise error(f"{entity}: no luck")

    paired = env.primary.pair(env.secondary, options(failover_interval=timedelta(0)))
    await paired.open()
    sender = paired.sender("orders")
    env.primary.transport.send = fails_slowly
    sending = asyncio.create_task(sender.send(Message(b"x")))
    await asyncio.sleep(1)
    await paired.aclose()
    with pytest.raises(errors.ClientClosed, match=says):
        await asyncio.wait_for(sending, 60)
    assert await backlog_contents(env, paired) == []
    assert paired.stats.backlog_sends == 0


async def test_pair_refuses_itself_and_bad_options(env):
    with pytest.raises(errors.InvalidArgument, match="itself"):
        env.primary.pair(env.primary)
    with pytest.raises(errors.InvalidOperation, match="PairedNamespaceOptions"):
        env.primary.pair(env.secondary, {"backlog_queue_count": 2})


async def test_pn18_a_partner_left_open_is_faulted_after_5_seconds(env):
    loop = asyncio.get_running_loop()
    opts = options(enable_syphon=True)
    async with env.primary.pair(env.secondary, opts) as paired:
        events = paired.events()
        await env.primary.aclose()
        start = loop.time()
        while not env.secondary.closed:
            await asyncio.sleep(0.5)
        assert loop.time() - start == pytest.approx(5, abs=0.5)
        with pytest.raises(errors.ClientClosed, match="faulted"):
            await env.secondary.get_queue("x")
    kinds = [e.kind async for e in events]
    assert "faulted" in kinds


async def test_pn18_a_partner_closed_in_time_is_left_alone(env):
    async with env.primary.pair(env.secondary, options(enable_syphon=True)) as paired:
        events = paired.events()
        await env.primary.aclose()
        await asyncio.sleep(1)
        await env.secondary.aclose()
        await asyncio.sleep(10)
    assert "faulted" not in [e.kind async for e in events]


async def test_scheduled_messages_fail_over_with_their_schedule(env):
    """G-5: a scheduled message keeps its schedule across the round trip."""
    at = datetime.now(UTC) + timedelta(minutes=30)
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(seconds=10),
                   enable_syphon=True)
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            with env.p_broker.faults.fail("orders"):
                await sender.send(Message(b"later", scheduled_enqueue_time=at))
            await asyncio.sleep(15)
        assert paired.stats.syphon_moved == 1
    counts = await env.primary.runtime_properties("orders")
    assert counts.scheduled_message_count == 1
    async with env.primary.receiver("orders") as receiver:
        (msg,) = await receiver.peek(1)
    assert msg.scheduled_enqueue_time == at


async def test_every_state_change_is_one_log_line(env, caplog):
    """Issue 17: the aiosb logger says each change of an entity's health, once, as it
    happens: failover as a warning, recovery as information."""
    import logging

    caplog.set_level(logging.INFO, logger="aiosb")
    opts = options(failover_interval=timedelta(0), ping_primary_interval=timedelta(seconds=5))
    async with env.primary.pair(env.secondary, opts) as paired:
        async with paired.sender("orders") as sender:
            fault = env.p_broker.faults.fail("orders")
            await sender.send(Message(b"1"))
            await sender.send(Message(b"2"))  # already failed over: no new line
            fault.heal()
            await asyncio.sleep(6)  # a ping is delivered: recovered
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "aiosb.pairing"
             and r.getMessage().split()[0] in ("suspect", "failover", "recovered")]
    assert [(level, text.split()[0]) for level, text in lines] == [
        ("WARNING", "failover"), ("INFO", "recovered"),  # (no interval: no suspect first)
    ]
    assert all(" orders: " in text for _, text in lines)
