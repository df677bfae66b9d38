"""Conformance: bad input gets the matching error, a sentence naming value and limit,
and changes nothing (R-7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message, errors

pytestmark = pytest.mark.looptime


@pytest.mark.parametrize(
    ("props", "match"),
    [
        ({"auto_delete_on_idle": timedelta(minutes=4)}, r"auto_delete_on_idle is 0:04:00.*0:05:00"),
        ({"lock_duration": timedelta(minutes=6)}, r"lock_duration is 0:06:00.*0:05:00"),
        ({"lock_duration": timedelta(seconds=1)}, r"lock_duration is 0:00:01.*0:00:05"),
        ({"max_delivery_count": 0}, r"max_delivery_count is 0.*between 1 and"),
        ({"max_size_in_megabytes": 1000}, r"max_size_in_megabytes is 1000.*1024, 2048"),
        (
            {"default_message_time_to_live": timedelta(0)},
            r"default_message_time_to_live is 0:00:00",
        ),
        (
            {"duplicate_detection_history_time_window": timedelta(days=8)},
            r"duplicate_detection_history_time_window is 8 days.*7 days",
        ),
        ({"status": "Sleeping"}, r"status is 'Sleeping'"),
        ({"lock_duraton": timedelta(seconds=30)}, r"unknown queue property lock_duraton"),
        ({"lock_duration": "soon"}, r"lock_duration must be a timedelta"),
    ],
)
async def test_out_of_range_queue_properties_are_refused(ns, props, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        await ns.create_queue("q", **props)
    assert not await ns.queue_exists("q")


async def test_an_unknown_property_to_update_is_refused_as_one_to_create(ns):
    """Both say which names a queue has (update said 'propert(ies)' and no list)."""
    await ns.create_queue("q")
    with pytest.raises(errors.InvalidArgument,
                       match=r"unknown queue property bogus; known: .*lock_duration"):
        await ns.update_queue("q", bogus=1)
    assert (await ns.get_queue("q")).lock_duration == timedelta(minutes=1)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "non-empty"),
        ("-starts-with-dash", "not valid"),
        ("has space", "not valid"),
        ("a//b", "not valid"),
        ("x" * 261, "limit is 260"),
        ("a/subscriptions/b", "subscriptions"),
        ("a/../b", "path segment '..'"),  # over HTTP it became queue 'b'
        ("a/./b", "path segment '.'"),
    ],
)
async def test_bad_entity_names_are_refused(ns, name, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        await ns.create_queue(name)
    assert await ns.list_queues() == []


async def test_subscription_name_limits(ns):
    await ns.create_topic("t")
    with pytest.raises(errors.InvalidArgument, match="limit is 50"):
        await ns.create_subscription("t", "s" * 51)
    with pytest.raises(errors.InvalidArgument, match="not valid"):
        await ns.create_subscription("t", "a/b")
    with pytest.raises(errors.EntityNotFound, match="topic 'nope'"):
        await ns.create_subscription("nope", "s")
    assert await ns.list_subscriptions("t") == []


async def test_creating_an_existing_entity_fails_and_keeps_the_original(ns):
    await ns.create_queue("q", max_delivery_count=3)
    with pytest.raises(errors.EntityAlreadyExists):
        await ns.create_queue("Q", max_delivery_count=7)  # names are case-insensitive
    with pytest.raises(errors.EntityAlreadyExists):
        await ns.create_topic("q")
    assert (await ns.get_queue("q")).max_delivery_count == 3


async def test_partitioning_and_sessions_cannot_change_after_creation(ns):
    """PT-3: partitioning is fixed at creation."""
    await ns.create_queue("q")
    with pytest.raises(errors.InvalidOperation, match="enable_partitioning"):
        await ns.update_queue("q", enable_partitioning=True)
    with pytest.raises(errors.InvalidOperation, match="requires_session"):
        await ns.update_queue("q", requires_session=True)
    queue = await ns.get_queue("q")
    assert not queue.enable_partitioning and not queue.requires_session


async def test_update_with_a_bad_value_changes_nothing(ns):
    await ns.create_queue("q", lock_duration=timedelta(seconds=30))
    with pytest.raises(errors.InvalidArgument):
        await ns.update_queue("q", lock_duration=timedelta(minutes=10))
    assert (await ns.get_queue("q")).lock_duration == timedelta(seconds=30)


async def test_unknown_entities_in_management(ns):
    with pytest.raises(errors.EntityNotFound):
        await ns.get_queue("nope")
    with pytest.raises(errors.EntityNotFound):
        await ns.delete_topic("nope")
    with pytest.raises(errors.EntityNotFound):
        await ns.runtime_properties("nope")
    await ns.create_topic("t")
    with pytest.raises(errors.EntityNotFound):
        await ns.get_queue("t")  # a topic is not a queue


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Message(message_id="m" * 129), errors.InvalidArgument, "message_id is 129.*128"),
        (lambda: Message(session_id="s" * 129), errors.InvalidArgument, "session_id is 129.*128"),
        (lambda: Message(partition_key="p" * 129), errors.InvalidArgument, "partition_key is 129"),
        (
            lambda: Message(session_id="a", partition_key="b"),
            errors.InvalidOperation,
            "partition_key 'b' differs from session_id 'a'",
        ),
        (lambda: Message(time_to_live=timedelta(0)), errors.InvalidArgument, "positive"),
        (
            lambda: Message(scheduled_enqueue_time=datetime(2030, 1, 1)),
            errors.InvalidArgument,
            "timezone-aware",
        ),
        (lambda: Message(body=12), errors.InvalidArgument, "bytes or str"),
        (
            lambda: Message(application_properties={"x": object()}),
            errors.InvalidArgument,
            "property 'x'",
        ),
        (lambda: Message(application_properties={1: "x"}), errors.InvalidArgument, "names"),
    ],
)
def test_bad_messages_are_refused_when_built(make, error, match):
    with pytest.raises(error, match=match):
        make()


async def test_a_batch_with_one_bad_message_sends_nothing(ns):
    await ns.create_queue("q", requires_session=True)
    async with ns.sender("q") as sender:
        with pytest.raises(errors.InvalidOperation, match="requires sessions"):
            await sender.send([Message(b"a", session_id="s"), Message(b"b")])
    assert (await ns.runtime_properties("q")).total_message_count == 0


async def test_sending_to_a_subscription_or_dead_letter_queue_is_refused(ns):
    await ns.create_topic("t")
    await ns.create_subscription("t", "s")
    with pytest.raises(errors.InvalidOperation):
        ns.sender("t/subscriptions/s")
    with pytest.raises(errors.InvalidOperation):
        ns.sender("t/$DeadLetterQueue")


async def test_bad_receive_arguments(ns):
    await ns.create_queue("q")
    async with ns.receiver("q") as receiver:
        with pytest.raises(errors.InvalidArgument, match="max_messages"):
            await receiver.receive(max_messages=0)
        with pytest.raises(errors.InvalidArgument, match="max_wait"):
            await receiver.receive(max_wait=-1)
    with pytest.raises(errors.InvalidArgument, match="mode"):
        ns.receiver("q", mode="take_all")
    with pytest.raises(errors.InvalidArgument, match="sub_queue"):
        ns.receiver("q", sub_queue="transfer")


async def test_settling_a_peeked_message_is_refused(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        await sender.send(Message(b"x"))
    async with ns.receiver("q") as receiver:
        (peeked,) = await receiver.peek(1)
        with pytest.raises(errors.InvalidOperation, match="nothing to settle"):
            await receiver.complete(peeked)


async def test_schedule_needs_an_aware_time(ns):
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        with pytest.raises(errors.InvalidArgument, match="timezone-aware"):
            await sender.schedule(Message(b"x"), datetime(2030, 1, 1))
        seq = await sender.schedule(Message(b"x"), datetime.now(UTC) + timedelta(hours=1))
        with pytest.raises(errors.MessageNotFound):
            await sender.cancel_scheduled(seq + 100)
    assert (await ns.runtime_properties("q")).scheduled_message_count == 1


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_messages": 0}, r"max_messages is 0; it must be a whole number from 1 to 10,000"),
        ({"max_messages": 10_001}, r"max_messages is 10001"),
        ({"max_messages": True}, r"max_messages is True"),
        ({"max_messages": 2.0}, r"max_messages is 2.0"),
        ({"max_wait": float("nan")}, r"max_wait is nan"),
        ({"max_wait": float("inf")}, r"max_wait is inf; it must be from 0 to 86400"),
        ({"max_wait": -1}, r"max_wait is -1"),
        ({"max_wait": timedelta(days=2)}, r"max_wait is 172800.0"),
    ],
)
async def test_receive_limits_are_checked_alike_on_every_backend(ns, kw, match):
    """Issue 18, item 6: one check, in one place (NaN used to wait for ever on memory)."""
    await ns.create_queue("q")
    async with ns.receiver("q") as receiver:
        with pytest.raises(errors.InvalidArgument, match=match):
            await receiver.receive(**{"max_wait": 0, **kw})
        if "max_messages" in kw:
            with pytest.raises(errors.InvalidArgument, match=match):
                await receiver.peek(kw["max_messages"])


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("hello", "send takes a Message or a list of them, not str"),
        (b"hello", "not bytes"),
        ({"body": "x"}, "not dict"),
        (None, "not NoneType"),
        ([Message(b"ok"), "hello"], "item 1 of the list is a str"),
    ],
)
async def test_sending_what_is_not_a_message_is_refused_and_sends_nothing(ns, value, match):
    """R-7: the same sentence on every backend, naming what was given, before anything
    is sent (a list is not half-sent)."""
    await ns.create_queue("q")
    async with ns.sender("q") as sender:
        with pytest.raises(errors.InvalidArgument, match=match):
            await sender.send(value)
        with pytest.raises(errors.InvalidArgument, match=match.replace("send", "schedule")):
            await sender.schedule(value, datetime.now(UTC) + timedelta(hours=1))
    props = await ns.runtime_properties("q")
    assert (props.active_message_count, props.scheduled_message_count) == (0, 0)


async def test_settling_what_was_not_received_is_refused(ns):
    """R-7: text is not iterated into characters; a plain Message is not a received one."""
    await ns.create_queue("q")
    async with ns.receiver("q") as receiver:
        with pytest.raises(errors.InvalidArgument, match="complete takes a ReceivedMessage or "
                           "a list of them, not str"):
            await receiver.complete("abc")
        with pytest.raises(errors.InvalidArgument, match="item 0 of the list is a Message"):
            await receiver.abandon([Message(b"sent, not received")])
        with pytest.raises(errors.InvalidArgument, match="renew_lock takes a ReceivedMessage"):
            await receiver.renew_lock(7)
