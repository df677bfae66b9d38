"""Test doubles at the azure-servicebus boundary, carrying real SDK objects.

No namespace is reachable from the test machines, so the SDK's network side is replaced:
:class:`FakeClient` hands out senders and receivers that behave like the SDK's where
aiosb depends on it (one operation at a time, settlement through the receiving
receiver, real ``ServiceBusReceivedMessage`` objects, real SDK exceptions), and
:class:`FakeAdmin` checks every call against the real administration client's signature
and answers with the SDK's own model classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import inspect
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus._pyamqp._decode import decode_payload
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.utils import amqp_long_value, amqp_timestamp_value
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from azure.servicebus.aio.management import ServiceBusAdministrationClient
from azure.servicebus.management import (
    QueueProperties,
    RuleProperties,
    SubscriptionProperties,
    TopicProperties,
    TrueRuleFilter,
)

from aiosb.transport.amqp import AmqpTransport

_ATOM = "http://www.w3.org/2005/Atom"
CONNECTION_STRING = (
    "Endpoint=sb://contoso.servicebus.windows.net/;"
    "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=c2VjcmV0"
)


def wire(sdk_message: ServiceBusMessage, **annotations: Any) -> Any:
    """``sdk_message`` as a broker would deliver it: through the SDK's AMQP encoder and
    decoder, with broker annotations (``sequence_number``, ``enqueued_ms``,
    ``locked_until_ms``, ``delivery_count``, ``state``, ``dead_letter_source``) added."""
    amqp = PyamqpTransport.to_outgoing_amqp_message(sdk_message.raw_amqp_message)
    notes = dict(amqp.message_annotations or {})
    if "sequence_number" in annotations:
        notes[b"x-opt-sequence-number"] = amqp_long_value(annotations["sequence_number"])
    if "enqueued_ms" in annotations:
        notes[b"x-opt-enqueued-time"] = amqp_timestamp_value(annotations["enqueued_ms"])
    if "locked_until_ms" in annotations:
        notes[b"x-opt-locked-until"] = amqp_timestamp_value(annotations["locked_until_ms"])
    if "state" in annotations:
        notes[b"x-opt-message-state"] = amqp_long_value(annotations["state"])
    if "dead_letter_source" in annotations:
        notes[b"x-opt-deadletter-source"] = annotations["dead_letter_source"]
    header = amqp.header
    if "delivery_count" in annotations:
        header = header._replace(delivery_count=annotations["delivery_count"])
    amqp = amqp._replace(message_annotations=notes, header=header)
    return decode_payload(memoryview(encode_payload(bytearray(), amqp)))


def received(
    body: bytes = b"x",
    *,
    receiver: Any = None,
    mode: str = "peeklock",
    sequence_number: int = 1,
    lock_token: uuid.UUID | None = None,
    enqueued: _dt.datetime | None = None,
    lock_for: _dt.timedelta = _dt.timedelta(minutes=1),
    sdk_message: ServiceBusMessage | None = None,
    **annotations: Any,
) -> ServiceBusReceivedMessage:
    """A real ``ServiceBusReceivedMessage``, as the SDK's receiver builds one."""
    enqueued = enqueued or _dt.datetime(2030, 1, 1, tzinfo=_dt.UTC)
    enqueued_ms = int(enqueued.timestamp() * 1000)
    amqp = wire(
        sdk_message or ServiceBusMessage(body),
        sequence_number=sequence_number,
        enqueued_ms=enqueued_ms,
        locked_until_ms=enqueued_ms + int(lock_for.total_seconds() * 1000),
        **annotations,
    )
    return ServiceBusReceivedMessage(
        message=amqp,
        receive_mode=mode,
        receiver=receiver,
        lock_token=lock_token or uuid.uuid4(),
    )


class NotConcurrencySafe:
    """Like the SDK's async handlers: a second operation entering while one runs fails.

    ``failures`` are raised, one per operation, before it does anything.
    """

    def __init__(self) -> None:
        self.busy = False
        self.closed = False
        self.calls = 0
        self.failures: list[BaseException] = []

    @contextlib.asynccontextmanager
    async def _busy(self) -> AsyncIterator[None]:
        if self.closed:
            raise ValueError("The handler has already been shutdown.")
        if self.busy:
            raise RuntimeError("concurrent operations on one SDK link")
        self.busy = True
        self.calls += 1
        try:
            await asyncio.sleep(0)  # a concurrent caller would run here, and collide
            if self.failures:
                raise self.failures.pop(0)
            yield
        finally:
            self.busy = False

    async def close(self) -> None:
        self.closed = True


class FakeSender(NotConcurrencySafe):
    """An SDK sender; ``failures`` are raised, one per call, before anything is sent."""

    def __init__(self, entity: str) -> None:
        super().__init__()
        self.entity = entity
        self.sent: list[list[ServiceBusMessage]] = []
        self.scheduled: list[tuple[list[ServiceBusMessage], _dt.datetime]] = []
        self.cancelled: list[list[int]] = []
        self._next_sequence = 100

    async def send_messages(self, messages: Any) -> None:
        async with self._busy():
            self.sent.append(list(messages))

    async def schedule_messages(self, messages: Any, at: _dt.datetime) -> list[int]:
        async with self._busy():
            self.scheduled.append((list(messages), at))
            first = self._next_sequence
            self._next_sequence += len(messages)
            return list(range(first, self._next_sequence))

    async def cancel_scheduled_messages(self, sequence_numbers: Any) -> None:
        async with self._busy():
            self.cancelled.append(list(sequence_numbers))


class FakeSession:
    """An SDK ``ServiceBusSession``: the lock and state of an accepted session."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.locked_until_utc = _dt.datetime(2030, 1, 1, 0, 1, tzinfo=_dt.UTC)
        self.state: bytes | None = None
        self.calls: list[str] = []

    async def renew_lock(self) -> _dt.datetime:
        self.calls.append("renew")
        self.locked_until_utc += _dt.timedelta(minutes=1)
        return self.locked_until_utc

    async def get_state(self) -> bytes | None:
        self.calls.append("get_state")
        return self.state

    async def set_state(self, state: bytes | None) -> None:
        self.calls.append("set_state")
        self.state = state


class FakeReceiver(NotConcurrencySafe):
    """An SDK receiver over a list of real received messages (``ready``); a session
    receiver locks its session (``next_session`` for the next available) when opened."""

    next_session = "s-next"

    def __init__(self, entity: str, **options: Any) -> None:
        super().__init__()
        self.entity = entity
        self.options = options
        self.ready: list[ServiceBusReceivedMessage] = []
        self.settled: list[tuple[str, ServiceBusReceivedMessage, dict[str, Any]]] = []
        self.receive_waits: list[float | None] = []
        self.session: FakeSession | None = None

    async def __aenter__(self) -> FakeReceiver:
        async with self._busy():
            sid = self.options.get("session_id")
            if sid is not None:
                named = isinstance(sid, str)
                self.session = FakeSession(sid if named else self.next_session)
        return self

    def deliver(self, **fields: Any) -> ServiceBusReceivedMessage:
        """Make a message ready, received by this receiver (see :func:`received`)."""
        mode = self.options.get("receive_mode", "peeklock")
        self.ready.append(received(receiver=self, mode=mode, **fields))
        return self.ready[-1]

    async def receive_messages(
        self, max_message_count: int = 1, max_wait_time: float | None = None
    ) -> list[ServiceBusReceivedMessage]:
        self.receive_waits.append(max_wait_time)
        async with self._busy():
            if not self.ready:
                await asyncio.sleep(max_wait_time or 60)
            got, self.ready = self.ready[:max_message_count], self.ready[max_message_count:]
            return got

    async def peek_messages(self, max_message_count: int = 1, *, sequence_number: int = 0):
        async with self._busy():
            ready = [m for m in self.ready if m.sequence_number >= sequence_number]
            return ready[:max_message_count]

    async def receive_deferred_messages(self, sequence_numbers: Any):
        async with self._busy():
            return [m for m in self.ready if m.sequence_number in sequence_numbers]

    async def _settle(self, action: str, message: ServiceBusReceivedMessage, **kw: Any) -> None:
        async with self._busy():
            if message._receiver is not self:  # the SDK settles only through its receiver
                raise AssertionError("settled through a receiver that did not receive it")
            self.settled.append((action, message, kw))

    async def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        await self._settle("complete", message)

    async def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        await self._settle("abandon", message)

    async def defer_message(self, message: ServiceBusReceivedMessage) -> None:
        await self._settle("defer", message)

    async def dead_letter_message(self, message, reason=None, error_description=None) -> None:
        await self._settle("dead_letter", message, reason=reason, description=error_description)

    async def renew_message_lock(self, message: ServiceBusReceivedMessage) -> _dt.datetime:
        await self._settle("renew", message)
        return _dt.datetime(2030, 1, 1, 0, 5, tzinfo=_dt.UTC)


class FakeClient:
    """A ``ServiceBusClient``: hands out fake links and remembers them, in order."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.senders: list[FakeSender] = []
        self.receivers: list[FakeReceiver] = []
        self.inbox: dict[str, list[dict[str, Any]]] = {}
        self.closed = False

    def _receiver(self, entity: str, options: dict[str, Any]) -> FakeReceiver:
        receiver = FakeReceiver(entity, **options)
        for fields in self.inbox.pop(entity, []):  # what the entity holds
            receiver.deliver(**fields)
        self.receivers.append(receiver)
        return receiver

    def get_queue_sender(self, queue_name: str) -> FakeSender:
        self.senders.append(FakeSender(queue_name))
        return self.senders[-1]

    def get_queue_receiver(self, queue_name: str, **options: Any) -> FakeReceiver:
        return self._receiver(queue_name, options)

    def get_subscription_receiver(self, topic: str, subscription: str, **options: Any):
        return self._receiver(f"{topic}/subscriptions/{subscription}", options)

    async def close(self) -> None:
        self.closed = True


_MODELS = {
    "queue": QueueProperties,
    "topic": TopicProperties,
    "subscription": SubscriptionProperties,
}


def sdk_model(kind: str, name: str, **values: Any) -> Any:
    """A real SDK ``QueueProperties`` (or topic, subscription) with service defaults."""
    cls = _MODELS[kind]
    params = inspect.signature(cls.__init__).parameters
    defaults = {n: None for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    defaults.update(status="Active", lock_duration=_dt.timedelta(minutes=1))
    defaults.update(values)
    return cls(name, **{k: v for k, v in defaults.items() if k in params})


class FakeAdmin:
    """A ``ServiceBusAdministrationClient`` over a dict, strict about its arguments."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.entities: dict[str, Any] = {}
        self.rules: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.failures: list[BaseException] = []
        #: Runtime counts by entity: (active, scheduled, dead-lettered).
        self.runtime: dict[str, tuple[int, int, int]] = {"orders": (3, 2, 1)}
        self.sku = "Standard"
        self.tier_asked = 0
        self.closed = False

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        inspect.signature(getattr(ServiceBusAdministrationClient, name)).bind(
            None, *args, **kwargs
        )  # a TypeError here means aiosb calls the SDK wrongly
        self.calls.append((name, args, kwargs))
        if self.failures:
            raise self.failures.pop(0)

    async def create_queue(self, queue_name: str, **kwargs: Any) -> Any:
        self._record("create_queue", queue_name, **kwargs)
        self.entities[queue_name] = sdk_model("queue", queue_name, **kwargs)
        return self.entities[queue_name]

    async def get_queue(self, queue_name: str) -> Any:
        self._record("get_queue", queue_name)
        return self.entities[queue_name]

    async def update_queue(self, queue: Any) -> None:
        self._record("update_queue", queue)
        self.entities[queue.name] = queue

    async def delete_queue(self, queue_name: str) -> None:
        self._record("delete_queue", queue_name)
        del self.entities[queue_name]

    async def create_subscription(self, topic_name: str, subscription_name: str, **kwargs):
        self._record("create_subscription", topic_name, subscription_name, **kwargs)
        model = sdk_model("subscription", subscription_name, **kwargs)
        self.entities[f"{topic_name}/subscriptions/{subscription_name}"] = model
        self.rules[(topic_name, subscription_name)] = {  # as Service Bus: $Default
            "$Default": RuleProperties("$Default", filter=TrueRuleFilter(), action=None,
                                       created_at_utc=None)
        }
        return model

    async def create_rule(self, topic_name: str, subscription_name: str, rule_name: str,
                          **kwargs: Any) -> Any:
        self._record("create_rule", topic_name, subscription_name, rule_name, **kwargs)
        rule = RuleProperties(rule_name, filter=kwargs.get("filter"),
                              action=kwargs.get("action"),
                              created_at_utc=_dt.datetime(2030, 1, 1, tzinfo=_dt.UTC))
        self.rules.setdefault((topic_name, subscription_name), {})[rule_name] = rule
        return rule

    async def get_rule(self, topic_name: str, subscription_name: str, rule_name: str) -> Any:
        self._record("get_rule", topic_name, subscription_name, rule_name)
        return self.rules[(topic_name, subscription_name)][rule_name]

    async def update_rule(self, topic_name: str, subscription_name: str, rule: Any) -> None:
        self._record("update_rule", topic_name, subscription_name, rule)
        self.rules[(topic_name, subscription_name)][rule.name] = rule

    async def delete_rule(self, topic_name: str, subscription_name: str, rule_name: str) -> None:
        self._record("delete_rule", topic_name, subscription_name, rule_name)
        del self.rules[(topic_name, subscription_name)][rule_name]

    def list_rules(self, topic_name: str, subscription_name: str) -> Any:
        self._record("list_rules", topic_name, subscription_name)

        async def pages():
            for rule in list(self.rules.get((topic_name, subscription_name), {}).values()):
                yield rule

        return pages()

    def list_queues(self) -> Any:
        self._record("list_queues")

        async def pages():
            for entity in list(self.entities.values()):
                if isinstance(entity, QueueProperties):
                    yield entity

        return pages()

    async def get_namespace_properties(self) -> Any:
        """The tier (kept out of ``calls``, which list what aiosb asks of entities)."""
        inspect.signature(ServiceBusAdministrationClient.get_namespace_properties).bind(None)
        self.tier_asked += 1
        return SimpleNamespace(name="contoso", messaging_sku=self.sku)

    async def _get_entity_element(self, entity_name: str, **kwargs: Any) -> Any:
        """The raw entry, as a real namespace writes it (no aiosb count extensions, and
        elements aiosb does not know); an unknown entity is an empty feed."""
        self._record("_get_entity_element", entity_name, **kwargs)
        if entity_name not in self.runtime:
            return ET.fromstring(f'<feed xmlns="{_ATOM}"><title type="text">Publicly Listed '
                                 "Services</title></feed>")
        active, scheduled, dead = self.runtime[entity_name]
        return ET.fromstring(
            f'<entry xmlns="{_ATOM}"><title type="text">{entity_name}</title>'
            '<content type="application/xml"><QueueDescription xmlns="'
            'http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
            "<LockDuration>PT1M</LockDuration><SizeInBytes>600</SizeInBytes>"
            "<CreatedAt>2030-01-01T00:00:00Z</CreatedAt>"
            f"<MessageCount>{active + scheduled + dead}</MessageCount>"
            '<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/'
            f'servicebus"><d2p1:ActiveMessageCount>{active}</d2p1:ActiveMessageCount>'
            f"<d2p1:DeadLetterMessageCount>{dead}</d2p1:DeadLetterMessageCount>"
            f"<d2p1:ScheduledMessageCount>{scheduled}</d2p1:ScheduledMessageCount>"
            "<d2p1:TransferDeadLetterMessageCount>0</d2p1:TransferDeadLetterMessageCount>"
            "<d2p1:TransferMessageCount>0</d2p1:TransferMessageCount></CountDetails>"
            "<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>"
            "</QueueDescription></content></entry>"
        )

    async def close(self) -> None:
        self.closed = True


def fake_transport() -> tuple[AmqpTransport, dict[str, Any]]:
    """An :class:`AmqpTransport` on fakes; the dict gets ``client`` and ``admin`` on open."""
    made: dict[str, Any] = {}

    def client(**kwargs: Any) -> FakeClient:
        made["client"] = FakeClient(**kwargs)
        return made["client"]

    def admin(**kwargs: Any) -> FakeAdmin:
        made["admin"] = FakeAdmin(**kwargs)
        return made["admin"]

    transport = AmqpTransport.from_url(
        CONNECTION_STRING, client_factory=client, admin_factory=admin
    )
    return transport, made
