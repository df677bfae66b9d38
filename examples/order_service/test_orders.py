"""The order service's tests, on the ``aiosb_server`` fixture (pip install aiosb):
a real Service Bus protocol, no Azure, no Docker; each test starts with an empty
namespace."""

from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusSubQueue
from orders import ORDERS, REMINDERS, OrderService, create_entities


@pytest.fixture
def service(aiosb_server):
    create_entities(aiosb_server.connection_string)
    service = OrderService(aiosb_server.connection_string)
    yield service
    service.close()


def test_an_order_placed_is_handled(service):
    assert service.place({"id": "o-1", "customer": "ada", "items": ["tea"]})
    handled = []
    assert service.handle_orders("ada", handled.append) == 1
    assert handled == [{"id": "o-1", "customer": "ada", "items": ["tea"]}]


def test_an_order_without_items_is_dead_lettered(service, aiosb_server):
    service.place({"id": "o-2", "customer": "ada", "items": []})
    assert service.handle_orders("ada", lambda order: None) == 0
    with ServiceBusClient.from_connection_string(aiosb_server.connection_string) as client:
        with client.get_queue_receiver(ORDERS, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                       max_wait_time=5) as dead:
            [message] = dead.receive_messages(max_message_count=1)
            assert message.dead_letter_reason == "EmptyOrder"
            dead.complete_message(message)


def test_each_customer_is_served_in_order(service):
    for n, customer in enumerate(["ada", "bob", "ada", "bob", "ada"]):
        service.place({"id": f"o-{n}", "customer": customer, "items": ["tea"]})
    handled = []
    service.handle_orders("ada", handled.append)
    assert [order["id"] for order in handled] == ["o-0", "o-2", "o-4"]
    assert service.handle_orders("bob", handled.append) == 2


def test_a_reminder_is_scheduled_and_can_be_cancelled(service, aiosb_server):
    soon = datetime.now(UTC) + timedelta(seconds=3)
    service.remind_at("o-3", soon)
    later = service.remind_at("o-4", soon + timedelta(days=1))
    service.cancel_reminder(later)
    with ServiceBusClient.from_connection_string(aiosb_server.connection_string) as client:
        with client.get_queue_receiver(REMINDERS) as receiver:
            [scheduled] = receiver.peek_messages(max_message_count=10)  # o-4 is gone
            assert str(scheduled) == "o-3"
            assert abs(scheduled.scheduled_enqueue_time_utc - soon) < timedelta(seconds=1)
            [reminder] = receiver.receive_messages(max_wait_time=10)   # once it is due
            assert str(reminder) == "o-3"
            receiver.complete_message(reminder)


def test_orders_placed_during_an_outage_wait_in_the_outbox(service, aiosb_server):
    with aiosb_server.faults.fail(ORDERS):
        assert not service.place({"id": "o-5", "customer": "ada", "items": ["tea"]})
    assert service.outbox and service.flush_outbox() == 1
    handled = []
    assert service.handle_orders("ada", handled.append) == 1
