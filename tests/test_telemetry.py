"""Issue 17: OpenTelemetry, an optional extra. Spans for send, receive and settlement
following the messaging conventions, errors recorded, the messaging metrics, and the
pairing's counters as ``aiosb.pairing.*`` metrics; off until instrumented, and
``import aiosb`` without opentelemetry at all."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import textwrap
from datetime import timedelta
from typing import Any

import pytest

import aiosb
import aiosb.client
from aiosb import Message, PairedNamespaceOptions, emulator, errors
from aiosb.pairing import PairingStats


def test_import_aiosb_works_without_opentelemetry_and_instrument_says_what_to_install():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if not installed
        import aiosb, aiosb.telemetry
        assert aiosb.client.observer is None
        try:
            aiosb.telemetry.instrument()
        except ImportError as exc:
            print(exc)
        assert not any(m.startswith("opentelemetry.") for m in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'aiosb[otel]'" in done.stdout


@pytest.fixture
def otel() -> Any:
    """A tracer provider and a meter provider exporting in memory, instrumented."""
    pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk (the otel extra)")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import aiosb.telemetry

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    aiosb.telemetry.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)

    class Otel:
        def spans(self, name_prefix: str = "") -> list[Any]:
            return [s for s in spans.get_finished_spans() if s.name.startswith(name_prefix)]

        def metrics(self) -> dict[str, list[Any]]:
            """Metric name -> its data points."""
            found: dict[str, list[Any]] = {}
            data = reader.get_metrics_data()
            for resource in data.resource_metrics if data else []:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        found.setdefault(metric.name, []).extend(metric.data.data_points)
            return found

    yield Otel()
    aiosb.telemetry.uninstrument()
    tracer_provider.shutdown()
    meter_provider.shutdown()


def total(points: list[Any], **attributes: Any) -> int:
    return sum(
        p.value for p in points if all(p.attributes.get(k) == v for k, v in attributes.items())
    )


async def test_send_receive_and_settle_spans_follow_the_messaging_conventions(otel):
    from opentelemetry.trace import SpanKind, StatusCode

    async with aiosb.connect("memory://otel-spans") as ns:
        await ns.create_queue("orders")
        async with ns.sender("orders") as sender:
            await sender.send(Message(b"1", message_id="m-1"))
            await sender.send([Message(b"2"), Message(b"3"), Message(b"4"), Message(b"5")])
        async with ns.receiver("orders") as receiver:
            got = await receiver.receive(max_messages=5, max_wait=1)
            assert len(got) == 5
            await receiver.complete(got[:2])
            await receiver.abandon(got[2])
            await receiver.dead_letter(got[3], reason="bad")
            await receiver.defer(got[4])

    by_name = {s.name: s for s in otel.spans()}
    assert {"send orders", "receive orders", "complete orders", "abandon orders",
            "dead_letter orders", "defer orders"} <= set(by_name)
    sends = otel.spans("send orders")
    assert len(sends) == 2
    single, batch = sends
    assert single.kind is SpanKind.PRODUCER
    assert dict(single.attributes) == {
        "messaging.system": "servicebus",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "orders",
        "messaging.message.id": "m-1",
        "server.address": "otel-spans",
        "aiosb.transport": "memory",
    }
    assert batch.attributes["messaging.batch.message_count"] == 4
    assert "messaging.message.id" not in batch.attributes

    receive = by_name["receive orders"]
    assert receive.kind is SpanKind.CLIENT
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.batch.message_count"] == 5

    complete = by_name["complete orders"]
    assert complete.kind is SpanKind.CLIENT
    assert complete.attributes["messaging.operation.type"] == "settle"
    assert complete.attributes["messaging.servicebus.disposition_status"] == "complete"
    assert complete.attributes["messaging.batch.message_count"] == 2
    for action in ("abandon", "dead_letter", "defer"):
        span = by_name[f"{action} orders"]
        assert span.attributes["messaging.operation.name"] == action
        assert span.attributes["messaging.servicebus.disposition_status"] == action
        assert "messaging.batch.message_count" not in span.attributes
    assert all(s.status.status_code is StatusCode.UNSET for s in otel.spans())
    # Management operations are not messaging operations: no spans.
    assert not [s for s in otel.spans() if "create" in s.name]


async def test_a_subscription_is_its_topic_and_a_dead_letter_queue_is_named_as_service_bus_does(
    otel,
):
    async with aiosb.connect("memory://otel-subs") as ns:
        await ns.create_topic("events")
        await ns.create_subscription("events", "audit")
        async with ns.sender("events") as sender:
            await sender.send(Message(b"x"))
        async with ns.receiver("events/subscriptions/audit") as receiver:
            [msg] = await receiver.receive(max_wait=1)
            await receiver.dead_letter(msg)
        async with ns.receiver("events/subscriptions/audit", sub_queue="deadletter") as dlq:
            assert len(await dlq.peek()) == 1

    [receive] = otel.spans("receive ")
    assert receive.name == "receive events"
    assert receive.attributes["messaging.destination.name"] == "events"
    assert receive.attributes["messaging.destination.subscription.name"] == "audit"
    [peek] = otel.spans("peek ")
    assert peek.attributes["messaging.destination.subscription.name"] == "audit/$DeadLetterQueue"
    assert peek.attributes["messaging.operation.type"] == "receive"


async def test_a_failed_operation_sets_status_error_error_type_and_an_exception_event(otel):
    from opentelemetry.trace import StatusCode

    async with aiosb.connect("memory://otel-errors") as ns:
        async with ns.sender("missing") as sender:
            with pytest.raises(errors.EntityNotFound):
                await sender.send(Message(b"x"))

    [span] = otel.spans("send missing")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "EntityNotFound"
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].attributes["exception.type"].endswith("EntityNotFound")
    points = otel.metrics()["messaging.client.operation.duration"]
    [failed] = [p for p in points if p.attributes.get("error.type") == "EntityNotFound"]
    assert failed.count == 1


async def test_metrics_count_sent_and_consumed_messages_and_time_operations(otel):
    async with aiosb.connect("memory://otel-metrics") as ns:
        await ns.create_queue("orders")
        async with ns.sender("orders") as sender:
            await sender.send(Message(b"1"))
            await sender.send([Message(b"2"), Message(b"3")])
        async with ns.receiver("orders", mode="receive_and_delete") as receiver:
            assert len(await receiver.receive(max_messages=10, max_wait=1)) == 3
            assert await receiver.receive(max_wait=0) == []

    metrics = otel.metrics()
    sent = metrics["messaging.client.sent.messages"]
    assert total(sent, **{"messaging.destination.name": "orders"}) == 3
    assert all(p.attributes["messaging.system"] == "servicebus" for p in sent)
    assert total(metrics["messaging.client.consumed.messages"]) == 3
    durations = metrics["messaging.client.operation.duration"]
    by_operation = {p.attributes["messaging.operation.name"]: p.count for p in durations}
    assert by_operation == {"send": 2, "receive": 2}


async def test_a_cancelled_operation_ends_its_span_without_an_error(otel):
    """The syphon cancels its long polls whenever an entity recovers: not an error."""
    from opentelemetry.trace import StatusCode

    async with aiosb.connect("memory://otel-cancel") as ns:
        await ns.create_queue("orders")
        async with ns.receiver("orders") as receiver:
            task = asyncio.create_task(receiver.receive(max_wait=None))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    [span] = otel.spans("receive orders")
    assert span.end_time is not None
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in span.attributes


@pytest.mark.looptime
async def test_a_failover_shows_in_spans_and_in_the_pairing_metrics(otel):
    async with aiosb.connect("memory://otel-primary", operation_timeout=10) as primary, \
            aiosb.connect("memory://otel-secondary", operation_timeout=10) as secondary:
        await primary.create_queue("orders")
        options = PairedNamespaceOptions(
            backlog_queue_count=1,
            failover_interval=timedelta(0),
            ping_primary_interval=timedelta(seconds=30),
        )
        async with primary.pair(secondary, options) as paired:
            async with paired.sender("orders") as sender:
                await sender.send(Message(b"before"))
                emulator.namespace("otel-primary").faults.fail("orders")
                await sender.send(Message(b"during"))
                await sender.send([Message(b"a"), Message(b"b")])
            metrics = otel.metrics()
            assert paired.stats.failovers == 1

    pairing = {"aiosb.pairing.primary": "otel-primary",
               "aiosb.pairing.secondary": "otel-secondary"}
    assert total(metrics["aiosb.pairing.failovers"], **pairing) == 1
    assert total(metrics["aiosb.pairing.primary.sends"], **pairing) == 1
    assert total(metrics["aiosb.pairing.backlog.sends"], **pairing) == 2
    assert total(metrics["aiosb.pairing.backlog.messages"], **pairing) == 3
    assert total(metrics["aiosb.pairing.backlog.depth"], **pairing) == 3
    assert total(metrics["aiosb.pairing.recoveries"], **pairing) == 0

    # The failed primary send is an error span; the backlog sends go to the secondary.
    failed = [s for s in otel.spans("send orders") if "error.type" in s.attributes]
    assert len(failed) == 1 and failed[0].attributes["server.address"] == "otel-primary"
    backlog = otel.spans("send otel-primary/x-servicebus-transfer/0")
    assert len(backlog) == 2
    assert {s.attributes["server.address"] for s in backlog} == {"otel-secondary"}
    sent = otel.metrics()["messaging.client.sent.messages"]
    assert total(sent, **{"server.address": "otel-secondary"}) == 3


@pytest.mark.looptime
async def test_pings_are_spans_marked_as_pings_and_counted_by_the_pairing(otel):
    async with aiosb.connect("memory://otel-ping-p", operation_timeout=10) as primary, \
            aiosb.connect("memory://otel-ping-s", operation_timeout=10) as secondary:
        await primary.create_queue("orders")
        options = PairedNamespaceOptions(
            backlog_queue_count=1,
            failover_interval=timedelta(0),
            ping_primary_interval=timedelta(seconds=30),
        )
        async with primary.pair(secondary, options) as paired:
            async with paired.sender("orders") as sender:
                emulator.namespace("otel-ping-p").faults.fail("orders")
                await sender.send(Message(b"x"))
                await asyncio.sleep(65)
            metrics = otel.metrics()
    assert total(metrics["aiosb.pairing.ping.sent"]) == 2
    assert total(metrics["aiosb.pairing.ping.failed"]) == 2
    pings = [s for s in otel.spans("send orders") if s.attributes.get("aiosb.ping")]
    assert len(pings) == 2


def test_every_pairing_counter_is_a_metric():
    import aiosb.telemetry

    names = [f.name for f in dataclasses.fields(PairingStats)]
    assert sorted(aiosb.telemetry.PAIRING_METRICS) == sorted(names)
    metric_names = [name for name, _, _ in aiosb.telemetry.PAIRING_METRICS.values()]
    assert all(n.startswith("aiosb.pairing.") for n in metric_names)
    assert len(set(metric_names)) == len(metric_names)


async def test_uninstrument_turns_it_all_off(otel):
    import aiosb.telemetry

    assert aiosb.telemetry.instrumented()
    aiosb.telemetry.uninstrument()
    assert not aiosb.telemetry.instrumented()
    assert aiosb.client.observer is None
    async with aiosb.connect("memory://otel-off") as ns, \
            aiosb.connect("memory://otel-off-2") as other:
        await ns.create_queue("orders")
        async with ns.pair(other, PairedNamespaceOptions(backlog_queue_count=1)) as paired:
            async with paired.sender("orders") as sender:
                await sender.send(Message(b"x"))
            metrics = otel.metrics()
    assert otel.spans() == []
    assert not any(name.startswith("aiosb.pairing.") and points
                   for name, points in metrics.items())


def _traceparent(span: Any) -> str:
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_sent_message_carries_its_creation_context_and_a_receive_links_to_it(otel):
    """As the official SDKs do: a message sent without trace context gets the send's
    (``Diagnostic-Id`` and ``traceparent``); one that has its own keeps it; the receive
    span links to each message's."""

    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with aiosb.connect("memory://otel-context") as ns:
        await ns.create_queue("orders")
        async with ns.sender("orders") as sender:
            await sender.send([Message(b"made here"), Message(
                b"made elsewhere", application_properties={"traceparent": own, "n": 1})])
        async with ns.receiver("orders", mode="receive_and_delete") as receiver:
            here, elsewhere = await receiver.receive(max_messages=2, max_wait=1)
    (send,) = otel.spans("send orders")
    (receive,) = otel.spans("receive orders")
    carried = _traceparent(send)
    assert here.application_properties == {"Diagnostic-Id": carried, "traceparent": carried}
    assert elsewhere.application_properties == {"traceparent": own, "n": 1}
    linked = {(link.context.trace_id, link.context.span_id) for link in receive.links}
    assert linked == {(send.context.trace_id, send.context.span_id),
                      (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331)}


async def test_the_official_sdk_reads_the_creation_context_aiosb_wrote(otel):
    """The official SDK, receiving over AMQP from aiosb serve what aiosb sent, finds the
    send's context where its own tracing looks for it (its span links)."""
    pytest.importorskip("azure.servicebus")
    from azure.servicebus._common.tracing import get_span_link_from_message
    from azure.servicebus.aio import ServiceBusClient

    from aiosb.server.amqp import serve_amqp

    async with aiosb.connect("memory://otel-sdk") as ns:
        await ns.create_queue("orders")
        async with ns.sender("orders") as sender:
            await sender.send(Message(b"traced"))
        (send,) = otel.spans("send orders")
        async with serve_amqp(namespace="otel-sdk") as server, \
                ServiceBusClient.from_connection_string(server.connection_string()) as client, \
                client.get_queue_receiver("orders") as receiver:
            (got,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            await receiver.complete_message(got)
    assert get_span_link_from_message(got).headers == {"traceparent": _traceparent(send)}


async def test_a_message_keeps_its_creation_context_through_failover_and_pings_carry_none(otel):
    async with aiosb.connect("memory://otel-ctx-p", operation_timeout=10) as primary, \
            aiosb.connect("memory://otel-ctx-s", operation_timeout=10) as secondary:
        await primary.create_queue("orders")
        options = PairedNamespaceOptions(
            backlog_queue_count=1, failover_interval=timedelta(0),
            ping_primary_interval=timedelta(seconds=30), enable_syphon=True,
        )
        async with primary.pair(secondary, options) as paired:
            async with paired.sender("orders") as sender:
                emulator.namespace("otel-ctx-p").faults.fail("orders")
                await sender.send(Message(b"during"))
            (queue,) = paired.backlog_queues
            async with secondary.receiver(queue) as receiver:
                (copy,) = await receiver.peek(1)
            emulator.namespace("otel-ctx-p").faults.heal()
            paired.mark_healthy("orders")
            for _ in range(100):  # the syphon moves it home
                if paired.stats.syphon_moved:
                    break
                await asyncio.sleep(0.05)
        async with primary.receiver("orders", mode="receive_and_delete") as receiver:
            (home,) = await receiver.receive(max_wait=1)
    first = next(s for s in otel.spans("send orders") if "error.type" in s.attributes)
    assert copy.application_properties["traceparent"] == _traceparent(first)
    assert home.application_properties["traceparent"] == _traceparent(first)
    backlog = otel.spans(f"send {queue}")
    assert backlog and all(_traceparent(first) != _traceparent(s) for s in backlog)


async def test_nothing_is_written_into_messages_when_not_instrumented(otel):
    import aiosb.telemetry

    aiosb.telemetry.uninstrument()
    async with aiosb.connect("memory://otel-none") as ns:
        await ns.create_queue("orders")
        message = Message(b"x")
        async with ns.sender("orders") as sender:
            await sender.send(message)
    assert message.application_properties == {}
