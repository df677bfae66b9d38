"""A small order service on the official ``azure-servicebus`` SDK (the example of
docs/testing-official-sdk.md): nothing in it knows about aiosb.

Orders go to the session-enabled queue ``orders``, one session per customer, so each
customer's orders are handled in the order they were placed. An order without items is
dead-lettered. A payment reminder is a message scheduled on ``reminders``. While Service
Bus is unreachable, placed orders wait in an outbox and are sent once it is back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError
from azure.servicebus.management import ServiceBusAdministrationClient

ORDERS, REMINDERS = "orders", "reminders"


def create_entities(connection_string: str) -> None:
    """Make the service's queues (once, at deployment; in tests, before each)."""
    admin = ServiceBusAdministrationClient.from_connection_string(connection_string)
    admin.create_queue(ORDERS, requires_session=True, max_delivery_count=3)
    admin.create_queue(REMINDERS)


class OrderService:
    def __init__(self, connection_string: str) -> None:
        # no retries: an outage goes to the outbox at once, not after a minute
        self.client = ServiceBusClient.from_connection_string(connection_string,
                                                              retry_total=0)
        self.sender = self.client.get_queue_sender(ORDERS)  # one link, opened once
        self.outbox: list[dict] = []

    def close(self) -> None:
        self.sender.close()
        self.client.close()

    def place(self, order: dict) -> bool:
        """Send ``order`` (``{"id", "customer", "items"}``); ``False`` if Service Bus
        was unreachable and it waits in the outbox."""
        message = ServiceBusMessage(json.dumps(order), message_id=order["id"],
                                    session_id=order["customer"],
                                    content_type="application/json")
        try:
            self.sender.send_messages(message)
        except ServiceBusError:
            self.outbox.append(order)
            return False
        return True

    def flush_outbox(self) -> int:
        """Send what waits in the outbox; how many were sent."""
        waiting, self.outbox = self.outbox, []
        return sum(self.place(order) for order in waiting)

    def handle_orders(self, customer: str, handle: Callable[[dict], None]) -> int:
        """Handle the orders of ``customer``, in the order they were placed: an order
        with no items is dead-lettered, any other handed to ``handle`` and completed.
        Returns how many were handled."""
        handled = 0
        with self.client.get_queue_receiver(ORDERS, session_id=customer,
                                            max_wait_time=1) as receiver:
            for message in receiver:
                order = json.loads(str(message))
                if not order["items"]:
                    receiver.dead_letter_message(message, reason="EmptyOrder",
                                                 error_description="an order needs items")
                    continue
                handle(order)
                receiver.complete_message(message)
                handled += 1
        return handled

    def remind_at(self, order_id: str, when: datetime) -> int:
        """Schedule a payment reminder for ``when``; its sequence number (to cancel)."""
        with self.client.get_queue_sender(REMINDERS) as sender:
            [number] = sender.schedule_messages(ServiceBusMessage(order_id), when)
        return number

    def cancel_reminder(self, sequence_number: int) -> None:
        with self.client.get_queue_sender(REMINDERS) as sender:
            sender.cancel_scheduled_messages(sequence_number)
