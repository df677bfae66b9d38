"""Pairing options (ranges of the classic SDK) and the backlog rewrite (PN-11, PN-12, G-2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aiosb import Message, PairedNamespaceOptions, ReceivedMessage, errors
from aiosb.pairing.rewrite import (
    EXPIRED,
    MALFORMED,
    NO_PATH,
    PATH,
    SESSION_ID,
    refresh,
    restore,
    to_backlog,
)


def test_defaults_are_the_classic_defaults():
    options = PairedNamespaceOptions()
    assert options.backlog_queue_count == 10
    assert options.failover_interval == timedelta(minutes=1)
    assert options.ping_primary_interval == timedelta(minutes=1)
    assert options.enable_syphon is False
    assert options.syphon_retry_interval == timedelta(seconds=1)
    assert options.ping_timeout == timedelta(minutes=2)
    assert options.syphon_receive_wait == timedelta(minutes=15)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backlog_queue_count": 0}, "backlog_queue_count is 0; it must be more than 0"),
        ({"backlog_queue_count": True}, "backlog_queue_count"),
        ({"failover_interval": timedelta(minutes=61)}, r"failover_interval is 1:01:00.*1:00:00"),
        ({"failover_interval": timedelta(seconds=-1)}, "failover_interval"),
        ({"ping_primary_interval": timedelta(milliseconds=500)}, r"ping_primary_interval.*0:00:01"),
        ({"ping_primary_interval": timedelta(minutes=31)}, r"ping_primary_interval.*0:30:00"),
        ({"syphon_retry_interval": timedelta(minutes=3)}, r"syphon_retry_interval.*0:02:00"),
        ({"failover_interval": 5}, "must be a timedelta"),
    ],
)
def test_out_of_range_options_are_refused(kwargs, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        PairedNamespaceOptions(**kwargs)


def test_a_zero_failover_interval_is_allowed():
    assert PairedNamespaceOptions(failover_interval=timedelta(0)).failover_interval == timedelta(0)


NOW = 1_800_000_000.0


def test_rewrite_moves_session_ttl_schedule_and_path_out_of_the_way():
    """PN-11: the stored names, the cleared originals, the kept MessageId (G-3)."""
    at = datetime.fromtimestamp(NOW + 300, UTC)
    original = Message(
        b"body",
        message_id="m1",
        session_id="s1",
        time_to_live=timedelta(minutes=10),
        scheduled_enqueue_time=at,
        subject="sub",
        application_properties={"k": "v"},
    )
    copy = to_backlog(original, "orders", NOW, 256 * 1024)
    assert copy.session_id is None and copy.scheduled_enqueue_time is None
    assert copy.message_id == "m1" and copy.subject == "sub"
    assert copy.application_properties == {
        "k": "v",
        "x-ms-path": "orders",
        "x-ms-sessionid": "s1",
        "x-ms-timetolive": 600.0,
        "x-ms-scheduledenqueuetimeutc": at.isoformat(),
    }
    # G-2: the copy lives until the original would have expired (schedule + TTL).
    assert copy.time_to_live == timedelta(minutes=15)
    assert original.application_properties == {"k": "v"}  # the original is untouched


def test_rewrite_gives_a_message_id_when_there_is_none():
    copy = to_backlog(Message(b"x"), "orders", NOW, 256 * 1024)
    assert copy.message_id and copy.time_to_live is None


def test_a_message_that_no_longer_fits_after_the_rewrite_fails_clearly():
    """PN-12: name the size and the limit; never truncate."""
    big = Message(b"x" * (256 * 1024 - 20))
    with pytest.raises(errors.MessageSizeExceeded, match=r"262124 bytes.*262144 byte limit"):
        to_backlog(big, "orders", NOW, 256 * 1024)


def received(copy: Message, enqueued: float) -> ReceivedMessage:
    ttl = copy.time_to_live
    return ReceivedMessage(
        copy.body,
        message_id=copy.message_id,
        time_to_live=ttl,
        subject=copy.subject,
        application_properties=dict(copy.application_properties),
        enqueued_timestamp=enqueued,
        expires_timestamp=None if ttl is None else enqueued + ttl.total_seconds(),
    )


def test_restore_gives_back_the_original_with_the_remaining_time_to_live():
    """PN-17, G-2, G-5: same id, session and schedule; the TTL that is left."""
    at = datetime.fromtimestamp(NOW + 300, UTC)
    original = Message(b"b", message_id="m1", session_id="s1",
                       time_to_live=timedelta(minutes=10), scheduled_enqueue_time=at,
                       application_properties={"k": "v"})
    copy = received(to_backlog(original, "orders", NOW, 256 * 1024), NOW)
    assert restore(copy, NOW + 60) == "orders"
    message = copy
    assert (message.message_id, message.session_id) == ("m1", "s1")
    assert message.scheduled_enqueue_time == at
    assert message.time_to_live == timedelta(minutes=10)  # from the schedule: unchanged
    assert message.application_properties == {"k": "v"}


def test_restore_after_the_schedule_passed_sends_at_once_with_less_time():
    at = datetime.fromtimestamp(NOW + 60, UTC)
    original = Message(b"b", time_to_live=timedelta(minutes=10), scheduled_enqueue_time=at)
    copy = received(to_backlog(original, "orders", NOW, 256 * 1024), NOW)
    assert restore(copy, NOW + 120) == "orders"
    message = copy
    assert message.scheduled_enqueue_time is None
    assert message.time_to_live == timedelta(minutes=9)


def test_restore_of_an_expired_message_says_so():
    original = Message(b"b", time_to_live=timedelta(seconds=30))
    copy = received(to_backlog(original, "orders", NOW, 256 * 1024), NOW)
    assert restore(copy, NOW + 31) is EXPIRED
    assert copy.application_properties[PATH] == "orders"  # refused: left as it was


def test_restore_rewrites_the_received_message_in_place():
    """#16: the syphon sends the received message itself (no copy a message), with its
    backlog properties gone and its lock kept for completing it in the backlog."""
    original = Message(b"b", message_id="m1", session_id="s1", application_properties={"k": 1})
    copy = received(to_backlog(original, "orders", NOW, 256 * 1024), NOW)
    copy.lock_token = "lock-1"
    assert restore(copy, NOW + 1) == "orders"
    message = copy
    assert message.application_properties == {"k": 1}
    assert (message.session_id, message.lock_token) == ("s1", "lock-1")


def test_a_restored_message_that_waited_is_refreshed_or_found_expired():
    """PN-17, G-2, G-5: a message parked while its entity was down leaves with the time to
    live that is left then, and without a schedule that has passed meanwhile."""
    at = datetime.fromtimestamp(NOW + 60, UTC)
    original = Message(b"b", time_to_live=timedelta(minutes=10), scheduled_enqueue_time=at)
    copy = received(to_backlog(original, "orders", NOW, 256 * 1024), NOW)
    assert restore(copy, NOW + 30) == "orders"
    message = copy
    assert message.scheduled_enqueue_time == at
    assert refresh(message, NOW + 120)
    assert message.scheduled_enqueue_time is None
    assert message.time_to_live == timedelta(minutes=9)
    assert not refresh(message, NOW + 60 + 600)


def test_restore_without_a_path():
    assert restore(ReceivedMessage(b"x"), NOW) is NO_PATH
    for path in ("", 7):
        assert restore(ReceivedMessage(b"x", application_properties={PATH: path}), NOW) is NO_PATH
    too_long = ReceivedMessage(b"x", application_properties={PATH: "q", SESSION_ID: "s" * 129})
    assert restore(too_long, NOW) is MALFORMED
