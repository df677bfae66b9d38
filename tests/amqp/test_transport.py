"""The AMQP transport against stand-ins for the SDK's clients (tests/amqp/sdk.py).

What a real namespace would add (latency, the broker's own semantics) is covered by the
conformance suite when AIOSB_TEST_CONNECTION_STRING is set.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import sys

import pytest
from azure.core import exceptions as core
from azure.servicebus import exceptions as sdk

import aiosb
from aiosb import Message, errors
from aiosb.client import Namespace
from aiosb.pairing.runtime import is_outage
from aiosb.transport import ManagementRequest, ReceiveRequest, Settlement
from aiosb.transport.amqp import RECEIVE_SLICE, AmqpTransport

from .sdk import CONNECTION_STRING, FakeSender, fake_transport
from .test_errors import IDLE_TEXT

pytestmark = pytest.mark.looptime


@pytest.fixture
async def env():
    transport, made = fake_transport()
    async with Namespace(transport, operation_timeout=10, retry_backoff=0.05) as ns:
        yield ns, transport, made


def idle_detach() -> sdk.ServiceBusConnectionError:
    return sdk.ServiceBusConnectionError(message=IDLE_TEXT, condition=b"amqp:link:detach-forced")


# -- connecting ----------------------------------------------------------------------


async def test_a_connection_string_selects_the_amqp_transport():
    async with aiosb.connect(CONNECTION_STRING) as ns:
        assert isinstance(ns.transport, AmqpTransport)
        assert ns.name == "contoso"


def test_sb_urls_need_a_credential_and_unknown_options_are_refused():
    ns = aiosb.connect("sb://contoso.servicebus.windows.net", credential=("Root", "key"))
    assert isinstance(ns.transport, AmqpTransport) and ns.name == "contoso"
    with pytest.raises(errors.InvalidArgument, match="needs a credential"):
        aiosb.connect("sb://contoso.servicebus.windows.net")
    with pytest.raises(errors.InvalidArgument, match="tier"):
        aiosb.connect(CONNECTION_STRING, tier="premium")
    premium = aiosb.connect(CONNECTION_STRING, max_message_size=1 << 20)
    assert premium.transport.max_message_size == 1 << 20


def test_without_the_sdk_connect_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "azure.servicebus", None)
    with pytest.raises(errors.InvalidOperation, match=r"pip install aiosb\[amqp\]"):
        aiosb.connect(CONNECTION_STRING)


async def test_the_sdks_own_retries_are_off():
    """aiosb retries transient errors itself; the failover detector must see the rest."""
    transport, made = fake_transport()
    await transport.open()
    assert made["client"].kwargs["retry_total"] == 0
    assert made["admin"].kwargs["retry_total"] == 0
    assert made["client"].kwargs["connection_string"] == CONNECTION_STRING
    await transport.aclose()
    # The real clients, as connect() builds them.
    async with aiosb.connect(CONNECTION_STRING) as ns:
        assert ns.transport._client._config.retry_total == 0
        assert ns.transport._admin._config.retry_policy.total_retries == 0


# -- sending -------------------------------------------------------------------------


async def test_the_fake_sdk_sender_is_not_concurrency_safe():
    """The control for the next test: gathered sends on one SDK sender collide."""
    sender = FakeSender("q")
    results = await asyncio.gather(
        *(sender.send_messages([i]) for i in range(5)), return_exceptions=True
    )
    assert any(isinstance(r, RuntimeError) for r in results)


async def test_concurrent_sends_on_one_sender_are_serialised_on_one_link(env):
    ns, _, made = env
    async with ns.sender("orders") as sender:
        await asyncio.gather(*(sender.send(Message(f"m{i}")) for i in range(50)))
    (link,) = made["client"].senders  # opened once, reused for every send
    assert sorted(batch[0].message_id is not None for batch in link.sent) == [True] * 50
    assert sorted(b"".join(batch[0].body) for batch in link.sent) == sorted(
        f"m{i}".encode() for i in range(50)
    )


async def test_a_list_is_one_sdk_call(env):
    ns, _, made = env
    async with ns.sender("orders") as sender:
        await sender.send([Message(b"a"), Message(b"b")])
    (link,) = made["client"].senders
    assert [[b"".join(m.body) for m in batch] for batch in link.sent] == [[b"a", b"b"]]


async def test_an_idle_link_closed_by_the_broker_is_reopened_and_never_an_outage(env):
    ns, _, made = env
    async with ns.sender("orders") as sender:
        await sender.send(Message(b"first"))
        (first,) = made["client"].senders
        first.failures.append(idle_detach())
        await sender.send(Message(b"second"))
    first_link, second_link = made["client"].senders
    assert first_link.closed and not second_link.closed
    assert [b"".join(b[0].body) for b in second_link.sent] == [b"second"]
    assert first_link.calls == 2  # the failed attempt; the retry went to the new link


async def test_an_idle_detach_is_retried_once_then_reported_as_transient():
    transport, made = fake_transport()
    await transport.open()
    await transport.send("q", [Message(b"open the link")])
    made["client"].senders[0].failures.append(idle_detach())
    original_factory = transport._sender("q")._factory

    def failing_again():
        link = original_factory()
        link.failures.append(idle_detach())
        return link

    transport._sender("q")._factory = failing_again
    with pytest.raises(errors.TransientError) as caught:
        await transport.send("q", [Message(b"x")])
    assert caught.value.retryable and not is_outage(caught.value)
    assert len(made["client"].senders) == 2  # one reopen, not a loop
    await transport.aclose()


async def test_a_non_transient_failure_surfaces_at_once_without_hidden_retries(env):
    """The SDK retries nothing and aiosb does not retry it: pairing sees it (PN-6)."""
    ns, _, made = env
    async with ns.sender("orders") as sender:
        await sender.send(Message(b"open"))
        link = made["client"].senders[0]
        link.failures.append(sdk.MessagingEntityDisabledError())
        with pytest.raises(errors.EntityUnavailable) as caught:
            await sender.send(Message(b"x"))
    assert is_outage(caught.value)
    assert link.calls == 2


async def test_transient_sdk_errors_are_retried_by_the_client(env):
    ns, _, made = env
    async with ns.sender("orders") as sender:
        await sender.send(Message(b"open"))
        link = made["client"].senders[0]
        link.failures.extend([sdk.ServiceBusServerBusyError(), sdk.ServiceBusCommunicationError()])
        await sender.send(Message(b"x"))
    assert link.calls == 4
    assert [b"".join(b[0].body) for b in link.sent] == [b"open", b"x"]


async def test_schedule_and_cancel(env):
    ns, _, made = env
    at = _dt.datetime(2031, 1, 1, tzinfo=_dt.UTC)
    async with ns.sender("orders") as sender:
        seqs = await sender.schedule([Message(b"a"), Message(b"b")], at)
        await sender.cancel_scheduled(seqs[0])
    (link,) = made["client"].senders
    ((messages, when),) = link.scheduled
    assert when == at and [b"".join(m.body) for m in messages] == [b"a", b"b"]
    assert seqs == [100, 101] and link.cancelled == [[100]]


# -- receiving and settling ----------------------------------------------------------


async def test_receive_settles_through_the_receiver_and_sdk_message_that_received_it(env):
    ns, transport, made = env
    made["client"].inbox["orders"] = [{"body": b"one", "sequence_number": 1}]
    async with ns.receiver("orders") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
        assert msg.body == b"one" and msg.lock_token
        sdk_receiver = made["client"].receivers[0]
        await receiver.complete(msg)
        ((action, settled, _),) = sdk_receiver.settled
        assert action == "complete" and str(settled.lock_token) == msg.lock_token
        assert transport._locks == {}  # forgotten once settled
        with pytest.raises(errors.MessageLockLost):
            await receiver.complete(msg)


async def test_dead_letter_renew_abandon_and_defer(env):
    ns, _, made = env
    made["client"].inbox["orders"] = [
        {"body": f"m{i}".encode(), "sequence_number": i} for i in range(1, 5)
    ]
    async with ns.receiver("orders") as receiver:
        a, b, c, _ = await receiver.receive(max_messages=4, max_wait=0)
        until = await receiver.renew_lock(a)
        assert until == _dt.datetime(2030, 1, 1, 0, 5, tzinfo=_dt.UTC)
        assert a.locked_until == until
        await receiver.dead_letter(a, "bad", "really bad")
        await receiver.abandon(b)
        await receiver.defer(c)
    settled = made["client"].receivers[0].settled
    assert [(action, m.sequence_number) for action, m, _ in settled] == [
        ("renew", 1),
        ("dead_letter", 1),
        ("abandon", 2),
        ("defer", 3),
    ]
    assert settled[1][2] == {"reason": "bad", "description": "really bad"}


async def test_receivers_are_cached_per_entity_sub_queue_and_mode(env):
    ns, _, made = env
    for _ in range(2):
        async with ns.receiver("orders") as r:
            await r.receive(max_wait=0)
        async with ns.receiver("orders", sub_queue="deadletter") as r:
            await r.receive(max_wait=0)
        async with ns.receiver("orders", mode="receive_and_delete") as r:
            await r.receive(max_wait=0)
        async with ns.receiver("t/subscriptions/s") as r:
            await r.receive(max_wait=0)
    options = [(r.entity, r.options) for r in made["client"].receivers]
    assert options == [
        ("orders", {"receive_mode": "peeklock"}),
        ("orders", {"receive_mode": "peeklock", "sub_queue": "deadletter"}),
        ("orders", {"receive_mode": "receiveanddelete"}),
        ("t/subscriptions/s", {"receive_mode": "peeklock"}),
    ]


async def test_received_and_deleted_messages_are_not_tracked(env):
    ns, transport, made = env
    made["client"].inbox["orders"] = [{"body": b"x"}]
    async with ns.receiver("orders", mode="receive_and_delete") as receiver:
        (msg,) = await receiver.receive(max_wait=0)
    assert msg.lock_token is None and transport._locks == {}


async def test_long_waits_are_sliced_so_settlements_get_their_turn(env):
    """A receive waiting on an empty entity holds the link one slice at a time."""
    ns, _, made = env
    made["client"].inbox["orders"] = [{"body": b"first", "sequence_number": 1}]
    async with ns.receiver("orders") as receiver:
        (first,) = await receiver.receive(max_wait=0)
        waiting = asyncio.create_task(receiver.receive(max_wait=30))
        await asyncio.sleep(RECEIVE_SLICE / 2)  # the long poll holds the link now
        await receiver.complete(first)  # gets in between two slices
        assert not waiting.done()
        made["client"].receivers[0].deliver(body=b"second", sequence_number=2)
        (second,) = await waiting
        assert second.body == b"second"
    waits = made["client"].receivers[0].receive_waits
    assert max(waits) <= RECEIVE_SLICE and len(waits) >= 3


async def test_a_batch_settles_in_one_turn_of_the_link_beside_a_long_poll(env):
    """A syphon settles a batch while its long poll is out on the same link: the batch
    takes one turn of the link, not a turn per message with a slice of the poll between
    each (200 messages would then outlast the operation timeout, and the cancelled
    settle closed the link and lost the locks: the AMQP pairing test's rare failure)."""
    ns, transport, made = env
    made["client"].inbox["orders"] = [
        {"body": f"m{i}".encode(), "sequence_number": i} for i in range(1, 21)
    ]
    loop = asyncio.get_running_loop()
    async with ns.receiver("orders") as receiver:
        batch = await receiver.receive(max_messages=20, max_wait=0)
        assert len(batch) == 20
        waiting = asyncio.create_task(receiver.receive(max_wait=60))
        await asyncio.sleep(RECEIVE_SLICE / 2)  # the long poll holds the link now
        start = loop.time()
        await receiver.complete(batch)
        assert loop.time() - start <= RECEIVE_SLICE  # one wait for the link, at most
        assert transport._locks == {}
        waiting.cancel()
    settled = made["client"].receivers[0].settled
    assert [m.sequence_number for _, m, _ in settled] == list(range(1, 21))


async def test_a_finite_wait_on_an_empty_entity_returns_nothing(env):
    ns, _, _ = env
    loop = asyncio.get_running_loop()
    async with ns.receiver("orders") as receiver:
        start = loop.time()
        assert await receiver.receive(max_wait=5) == []
        assert loop.time() - start == pytest.approx(5, abs=0.3)


async def test_peek_and_deferred(env):
    ns, _, made = env
    made["client"].inbox["orders"] = [
        {"body": f"m{i}".encode(), "sequence_number": i} for i in range(1, 4)
    ]
    async with ns.receiver("orders") as receiver:
        peeked = await receiver.peek(2)
        assert [m.sequence_number for m in peeked] == [1, 2]
        assert all(m.lock_token is None for m in peeked)
        (deferred,) = await receiver.receive_deferred(3)
        assert deferred.body == b"m3" and deferred.lock_token
        await receiver.complete(deferred)
    assert [a for a, _, _ in made["client"].receivers[0].settled] == ["complete"]


async def test_unknown_lock_tokens_are_lost_locks():
    transport, _ = fake_transport()
    await transport.open()
    with pytest.raises(errors.MessageLockLost, match="not held by this connection"):
        await transport.settle("orders", Settlement("complete", ["no-such-token"]))
    await transport.aclose()


async def test_the_lock_map_is_bounded(monkeypatch):
    import aiosb.transport.amqp as amqp

    monkeypatch.setattr(amqp, "MAX_TRACKED_LOCKS", 3)
    transport, made = fake_transport()
    await transport.open()
    made["client"].inbox["q"] = [{"body": b"x", "sequence_number": i} for i in range(5)]
    got = await transport.receive("q", ReceiveRequest(max_messages=5, max_wait=0))
    assert list(transport._locks) == [m.lock_token for m in got[2:]]
    await transport.aclose()


async def test_expired_locks_are_forgotten():
    transport, made = fake_transport()
    await transport.open()
    long_ago = _dt.datetime(2001, 1, 1, tzinfo=_dt.UTC)
    made["client"].inbox["q"] = [
        {"body": b"old", "sequence_number": 1, "enqueued": long_ago},
        {"body": b"new", "sequence_number": 2},  # locked until 2030
    ]
    old, new = await transport.receive("q", ReceiveRequest(max_messages=2, max_wait=0))
    assert list(transport._locks) == [new.lock_token]
    with pytest.raises(errors.MessageLockLost):
        await transport.settle("q", Settlement("complete", [old.lock_token]))
    await transport.aclose()


async def test_close_closes_every_link_and_both_clients(env):
    ns, transport, made = env
    made["client"].inbox["orders"] = [{"body": b"x"}]
    async with ns.sender("orders") as sender:
        await sender.send(Message(b"x"))
    async with ns.receiver("orders") as receiver:
        await receiver.receive(max_wait=0)
    await ns.aclose()
    assert made["client"].senders[0].closed and made["client"].receivers[0].closed
    assert made["client"].closed and made["admin"].closed
    assert transport._locks == {}
    with pytest.raises(errors.ClientClosed):
        await transport.send("orders", [Message(b"x")])


# -- management ----------------------------------------------------------------------


async def test_create_get_update_list_delete_a_queue(env):
    ns, _, made = env
    created = await ns.create_queue(
        "orders", lock_duration=_dt.timedelta(seconds=30), max_delivery_count=5
    )
    name, args, kwargs = made["admin"].calls[0]
    assert (name, args) == ("create_queue", ("orders",))
    assert kwargs["lock_duration"] == _dt.timedelta(seconds=30)
    assert "default_message_time_to_live" not in kwargs  # NEVER is the service default
    assert created.name == "orders" and created.max_delivery_count == 5
    assert created.lock_duration == _dt.timedelta(seconds=30)
    updated = await ns.update_queue("orders", max_delivery_count=7)
    assert updated.max_delivery_count == 7
    assert [q.name for q in await ns.list_queues()] == ["orders"]
    await ns.delete_queue("orders")
    assert made["admin"].entities == {}


async def test_fixed_properties_cannot_change_after_creation(env):
    """PT-3, checked before the service is asked."""
    ns, _, made = env
    await ns.create_queue("orders")
    with pytest.raises(errors.InvalidOperation, match="requires_session"):
        await ns.update_queue("orders", requires_session=True)
    assert [c[0] for c in made["admin"].calls] == ["create_queue", "get_queue", "get_queue"]


async def test_bad_values_are_refused_before_the_service_is_asked(env):
    """R-7: a clear error naming the value and the limit, nothing half-done."""
    ns, _, made = env
    with pytest.raises(errors.InvalidArgument, match="lock_duration"):
        await ns.create_queue("orders", lock_duration=_dt.timedelta(minutes=10))
    assert made["admin"].calls == []


async def test_management_errors_are_mapped(env):
    ns, _, made = env
    made["admin"].failures.append(core.ResourceExistsError("exists"))
    with pytest.raises(errors.EntityAlreadyExists):
        await ns.create_queue("orders")
    made["admin"].failures.append(core.ResourceNotFoundError("missing"))
    assert not await ns.queue_exists("orders")


@pytest.mark.parametrize(("sku", "partitioned"), [("Standard", False), ("Premium", True)])
async def test_create_sends_what_the_namespace_tier_allows(env, sku, partitioned):
    """The tier is the namespace's, asked once: premium partitions every entity (PT-4),
    standard keeps what the caller asked for."""
    ns, _, made = env
    made["admin"].sku = sku
    await ns.create_queue("a")
    await ns.create_queue("b")
    creates = [kwargs for name, _, kwargs in made["admin"].calls if name == "create_queue"]
    assert [c.get("enable_partitioning") for c in creates] == [partitioned] * 2
    assert made["admin"].tier_asked == 1


async def test_create_subscription_names_topic_and_subscription(env):
    ns, _, made = env
    sub = await ns.create_subscription("t", "s", max_delivery_count=3)
    assert made["admin"].calls[0][:2] == ("create_subscription", ("t", "s"))
    assert (sub.name, sub.topic_name, sub.max_delivery_count) == ("s", "t", 3)


async def test_runtime_properties(env):
    ns, _, _ = env
    props = await ns.runtime_properties("orders")
    assert (props.name, props.active_message_count, props.scheduled_message_count) == (
        "orders",
        3,
        2,
    )
    assert (props.dead_letter_message_count, props.total_message_count) == (1, 6)
    assert props.created_at_utc == _dt.datetime(2030, 1, 1, tzinfo=_dt.UTC)
    with pytest.raises(errors.EntityNotFound):  # Service Bus answers with an empty feed
        await ns.runtime_properties("nowhere")


async def test_rules_go_through_the_sdk_admin_client(env):
    """Issue 14: rules over AMQP are the SDK's create/get/update/delete/list_rule calls,
    with the SDK's filter and action classes (parameters named @name, as the SDK's);
    a subscription created with a first rule gets it in $Default's place."""
    from azure.servicebus import management as m

    from aiosb import CorrelationRuleFilter, RuleProperties, SqlRuleAction, SqlRuleFilter

    ns, _, made = env
    admin = made["admin"]
    await ns.create_subscription(
        "t", "s", default_rule=RuleProperties("eu", SqlRuleFilter("r = @r", {"@r": "eu"}))
    )
    names = [call[0] for call in admin.calls]
    assert names == ["create_subscription", "create_rule", "delete_rule"]
    assert admin.calls[2][1] == ("t", "s", "$Default")
    sdk_filter = admin.calls[1][2]["filter"]
    assert isinstance(sdk_filter, m.SqlRuleFilter) and sdk_filter.parameters == {"@r": "eu"}
    await ns.create_rule("t", "s", "c", filter=CorrelationRuleFilter(label="x"),
                         action=SqlRuleAction("SET a = 1"))
    rule = await ns.get_rule("t", "s", "c")
    assert rule.filter == CorrelationRuleFilter(label="x")
    assert rule.action == SqlRuleAction("SET a = 1")
    changed = await ns.update_rule("t", "s", "c", filter=SqlRuleFilter("b = 2"), action=None)
    assert changed.filter == SqlRuleFilter("b = 2") and changed.action is None
    assert [r.name for r in await ns.list_rules("t", "s")] == ["eu", "c"]
    await ns.delete_rule("t", "s", "c")
    assert [r.name for r in await ns.list_rules("t", "s")] == ["eu"]


async def test_unknown_management_requests_are_refused():
    transport, _ = fake_transport()
    await transport.open()
    with pytest.raises(errors.InvalidArgument):
        await transport.manage(ManagementRequest("get", "widget", "x"))  # type: ignore[arg-type]
    await transport.aclose()


async def test_a_session_receiver_gets_an_sdk_session_receiver_of_its_own(env):
    """Accepting opens an SDK session receiver; receives, settlement, the session lock
    and state go through it; closing the aiosb receiver closes it."""
    ns, transport, made = env
    made["client"].inbox["orders"] = [{"body": b"s", "sequence_number": 7}]
    async with ns.receiver("orders", session_id="s1") as receiver:
        (sdk_receiver,) = made["client"].receivers
        assert sdk_receiver.options == {"receive_mode": "peeklock", "session_id": "s1"}
        assert receiver.session.session_id == "s1"
        (msg,) = await receiver.receive(max_wait=0)
        await receiver.complete(msg)
        assert [a for a, _, _ in sdk_receiver.settled] == ["complete"]
        before = receiver.session.locked_until
        assert await receiver.session.renew_lock() == before + _dt.timedelta(minutes=1)
        await receiver.session.set_state(b"state")
        assert await receiver.session.get_state() == b"state"
        assert sdk_receiver.session.calls == ["renew", "set_state", "get_state"]
    assert sdk_receiver.closed and transport._sessions == {}
    with pytest.raises(errors.SessionLockLost):
        await transport.receive(
            "orders", ReceiveRequest(session_id="s1", session_lock="released", max_wait=0)
        )


async def test_next_available_session_asks_the_sdk_for_it_with_the_wait(env):
    ns, _, made = env
    receiver = ns.receiver(
        "orders", session_id=aiosb.NEXT_AVAILABLE_SESSION, session_wait=5, mode="receive_and_delete"
    )
    async with receiver:
        assert receiver.session_id == "s-next"
    (sdk_receiver,) = made["client"].receivers
    from azure.servicebus import NEXT_AVAILABLE_SESSION

    assert sdk_receiver.options == {
        "receive_mode": "receiveanddelete",
        "session_id": NEXT_AVAILABLE_SESSION,
        "max_wait_time": 5,
    }
