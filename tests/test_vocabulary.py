"""Messages and entity descriptions: plain data with the SDK's names and defaults."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta

import pytest

from aiosb import NEVER, Message, QueueProperties, ReceivedMessage, errors
from aiosb.entities import parse_entity_path


def test_message_body_forms():
    assert Message("héllo").body == "héllo".encode()
    assert Message(None).body == b""
    assert Message(bytearray(b"ab")).body == b"ab"


def test_message_size_counts_body_and_properties():
    plain = Message(b"x" * 100)
    assert plain.size == 100
    rich = Message(b"x" * 100, message_id="id", application_properties={"key": "value", "n": 1})
    assert rich.size == 100 + 2 + 3 + 5 + 1 + 8


def test_message_size_counts_each_text_field_once_in_utf8_and_no_times():
    """Every text field counts its UTF-8 bytes, once; the schedule and the time to live
    count nothing (what the emulator's records and the sender's batch limit rely on)."""
    at = datetime(2030, 1, 1, tzinfo=UTC)
    msg = Message(
        b"xy", message_id="m", session_id="\u00e9", partition_key="\u00e9", content_type="c",
        correlation_id="co", subject="sub", reply_to="rt", reply_to_session_id="rs",
        to="\u20ac", scheduled_enqueue_time=at, time_to_live=timedelta(seconds=5),
        application_properties={"k": "\u20ac", "f": 1.5, "b": True, "n": None},
    )
    assert msg.size == 2 + 1 + 2 + 2 + 1 + 2 + 3 + 2 + 2 + 3 + (1 + 3) + (1 + 8) + (1 + 8) + (1 + 1)


def test_received_message_is_plain_data_that_pickles():
    msg = ReceivedMessage(
        b"x",
        message_id="m",
        sequence_number=4,
        enqueued_timestamp=1.0e9,
        expires_timestamp=1.0e9 + 60,
        lock_token="t",
        locked_until_timestamp=1.0e9 + 30,
    )
    again = pickle.loads(pickle.dumps(msg))
    assert again.body == b"x" and again.sequence_number == 4
    assert again.expires_at - again.enqueued_time == timedelta(seconds=60)
    assert again.locked_until.tzinfo is not None


def test_queue_defaults_are_service_bus_defaults():
    q = QueueProperties("q")
    assert q.max_delivery_count == 10
    assert q.lock_duration == timedelta(minutes=1)
    assert q.default_message_time_to_live == NEVER
    assert q.auto_delete_on_idle == NEVER
    assert q.max_size_in_megabytes == 1024
    assert q.duplicate_detection_history_time_window == timedelta(minutes=10)
    assert q.enable_batched_operations is True
    assert q.dead_lettering_on_message_expiration is False


@pytest.mark.parametrize(
    ("path", "sub_queue", "expected"),
    [
        ("orders", None, ("orders", None, None)),
        ("orders/$DeadLetterQueue", None, ("orders", None, "deadletter")),
        ("orders", "deadletter", ("orders", None, "deadletter")),
        ("t/subscriptions/s", None, ("t", "s", None)),
        ("a/b/subscriptions/s/$deadletterqueue", None, ("a/b", "s", "deadletter")),
        ("contoso/x-servicebus-transfer/0", None, ("contoso/x-servicebus-transfer/0", None, None)),
    ],
)
def test_entity_paths(path, sub_queue, expected):
    parsed = parse_entity_path(path, sub_queue)
    assert (parsed.entity, parsed.subscription, parsed.sub_queue) == expected


def test_bad_paths():
    with pytest.raises(errors.InvalidArgument):
        parse_entity_path("")
    with pytest.raises(errors.InvalidArgument):
        parse_entity_path("../etc/passwd")
