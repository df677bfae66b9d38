"""Message conversion between aiosb and real azure-servicebus message objects.

Received messages are built the way the SDK's receiver builds them: the sent message
goes through the SDK's AMQP encoder, gets the broker's annotations, and is decoded.
"""

from __future__ import annotations

import datetime as _dt
import uuid

import pytest
from azure.servicebus import ServiceBusMessage

from aiosb import Message
from aiosb.transport.amqp._convert import message_from_sdk, message_to_sdk

from .sdk import received

UTC = _dt.UTC
AT = _dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)


def full_message(**props) -> Message:
    return Message(
        b"payload",
        message_id="m-1",
        session_id="s-1",
        partition_key="s-1",
        time_to_live=_dt.timedelta(minutes=5),
        scheduled_enqueue_time=AT,
        content_type="application/json",
        correlation_id="c-1",
        subject="order",
        reply_to="replies",
        reply_to_session_id="rs",
        to="shop",
        application_properties=props or {"n": 1, "s": "x"},
    )


def test_every_sent_field_reaches_the_sdk_message():
    sdk_message = message_to_sdk(full_message())
    assert isinstance(sdk_message, ServiceBusMessage)
    assert b"".join(sdk_message.body) == b"payload"
    assert (sdk_message.message_id, sdk_message.session_id) == ("m-1", "s-1")
    assert sdk_message.partition_key == "s-1"
    assert sdk_message.time_to_live == _dt.timedelta(minutes=5)
    assert sdk_message.scheduled_enqueue_time_utc == AT
    assert (sdk_message.content_type, sdk_message.correlation_id) == ("application/json", "c-1")
    assert (sdk_message.subject, sdk_message.reply_to, sdk_message.to) == (
        "order",
        "replies",
        "shop",
    )
    assert sdk_message.reply_to_session_id == "rs"
    assert sdk_message.application_properties == {"n": 1, "s": "x"}


def test_a_message_without_optional_fields_sets_none_of_them():
    sdk_message = message_to_sdk(Message(b"x"))
    assert sdk_message.session_id is None and sdk_message.partition_key is None
    assert sdk_message.time_to_live is None and sdk_message.scheduled_enqueue_time_utc is None
    assert sdk_message.application_properties is None


def test_round_trip_through_the_wire_keeps_every_field_and_adds_broker_state():
    sent = full_message()
    token = uuid.uuid4()
    enqueued = _dt.datetime(2031, 5, 6, 7, 8, 9, 500000, tzinfo=UTC)
    sdk_received = received(
        sdk_message=message_to_sdk(sent),
        sequence_number=42,
        lock_token=token,
        enqueued=enqueued,
        lock_for=_dt.timedelta(seconds=30),
        delivery_count=3,  # the AMQP header: three deliveries before this one
    )
    got = message_from_sdk(sdk_received, "orders", locked=True)
    for name in (
        "body",
        "message_id",
        "session_id",
        "partition_key",
        "time_to_live",
        "scheduled_enqueue_time",
        "content_type",
        "correlation_id",
        "subject",
        "reply_to",
        "reply_to_session_id",
        "to",
        "application_properties",
    ):
        assert getattr(got, name) == getattr(sent, name), name
    assert got.sequence_number == 42
    assert got.enqueued_time == enqueued
    assert got.expires_at == enqueued + _dt.timedelta(minutes=5)  # EX-1
    assert got.delivery_count == 4  # this one counted, as .NET and the emulator count
    assert got.lock_token == str(token)
    assert got.locked_until == enqueued + _dt.timedelta(seconds=30)
    assert got.state == "active"
    assert got.entity_path == "orders"


def test_peeked_and_received_and_deleted_messages_hold_no_lock():
    got = message_from_sdk(received(b"x"), "orders", locked=False)
    assert got.lock_token is None and got.locked_until is None
    assert got.body == b"x"


def test_dead_letter_and_deferred_state_come_through():
    sent = Message(
        b"x",
        application_properties={
            "DeadLetterReason": "TTLExpiredException",
            "DeadLetterErrorDescription": "expired",
        },
    )
    sdk_received = received(sdk_message=message_to_sdk(sent), state=1, dead_letter_source="orders")
    got = message_from_sdk(sdk_received, "orders/$DeadLetterQueue", locked=True)
    assert got.dead_letter_reason == "TTLExpiredException"
    assert got.dead_letter_error_description == "expired"
    assert got.dead_letter_source == "orders"
    assert got.state == "deferred"


@pytest.mark.parametrize(
    ("sent", "back"),
    [
        (7, 7),
        (-(2**31), -(2**31)),
        (2**40, 2**40),  # the SDK alone encodes ints as 32-bit and fails on this one
        (-(2**40), -(2**40)),
        ("text", "text"),
        ("naïve ünïcode", "naïve ünïcode"),
        (1.5, 1.5),
        (True, True),
        (False, False),
        (None, None),
        (uuid.UUID(int=5), uuid.UUID(int=5)),
        (b"utf8 bytes", b"utf8 bytes"),  # the SDK alone sends bytes as a string
        (b"\x00\xff", b"\x00\xff"),  # ...and fails on bytes that are not UTF-8
        (_dt.datetime(2030, 1, 1, tzinfo=UTC), _dt.datetime(2030, 1, 1, tzinfo=UTC)),
        (_dt.timedelta(seconds=3, microseconds=7), _dt.timedelta(seconds=3, microseconds=7)),
    ],
)
def test_application_property_types_over_the_wire(sent, back):
    """The fidelity the SDK allows, as the module docstring states it (a timestamp came
    back as epoch milliseconds before #47)."""
    message = Message(b"x", application_properties={"p": sent})
    got = message_from_sdk(received(sdk_message=message_to_sdk(message)), "q", locked=False)
    assert got.application_properties == {"p": back}
    assert type(got.application_properties["p"]) is type(back)


def test_a_received_value_body_is_read_as_bytes():
    sdk_received = received(sdk_message=ServiceBusMessage("text body"))
    assert message_from_sdk(sdk_received, "q", locked=False).body == b"text body"


def test_each_amqp_type_goes_through_the_sdk_as_its_bytes():
    """#47: what aiosb's AMQP transport sends through the SDK's encoder is, value by
    value, what aiosb's own codec writes for each AMQP type; and the SDK's decoder, as
    the transport teaches it, reads each back as the same typed value."""
    from amqp_server.typed import PAYLOAD, READ, TYPED, WIRE, properties_of
    from azure.servicebus._pyamqp._decode import decode_payload
    from azure.servicebus._pyamqp._encode import encode_payload
    from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

    sdk_message = message_to_sdk(Message(b"x", application_properties=TYPED))
    amqp = PyamqpTransport.to_outgoing_amqp_message(sdk_message.raw_amqp_message)
    assert properties_of(bytes(encode_payload(bytearray(), amqp))) == {
        name: WIRE[name] for name in TYPED}
    got = message_from_sdk(received(sdk_message=sdk_message), "q", locked=False)
    assert {k: (v, type(v)) for k, v in got.application_properties.items()} == {
        k: (READ[k], type(READ[k])) for k in TYPED}
    from_wire = decode_payload(memoryview(PAYLOAD)).application_properties
    assert {k.decode(): type(v).__name__ for k, v in from_wire.items()}["long"] == "Long"

