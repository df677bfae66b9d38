"""OpenTelemetry spans and metrics for aiosb (the ``otel`` extra), off until asked for::

    import aiosb.telemetry
    aiosb.telemetry.instrument()  # the global tracer and meter providers, or pass yours

**Opt-in, explicitly.** Nothing is traced or measured until :func:`instrument` is
called, and :func:`uninstrument` turns it off again. Turning it on by itself whenever
a global provider is configured would be less to type, but a library that starts
emitting because some other part of the process set up OpenTelemetry surprises people
(cost, cardinality, duplicates with another instrumentation of the same calls), and
needs an import-time probe of ``opentelemetry`` that every ``import aiosb`` would pay.
With it off (or ``opentelemetry-api`` not installed) an operation costs one check of
a module attribute (``aiosb.client.observer is None``); ``import aiosb`` never imports
``opentelemetry``; :func:`instrument` does, and says what to install if it is missing.

**Spans**, one per operation :meth:`aiosb.Namespace.execute` runs (every send, receive
and settlement, plain or paired, the pairing's backlog sends, syphon moves and pings
included), following OpenTelemetry's messaging conventions and their Azure Service Bus
part: named ``{messaging.operation.name} {messaging.destination.name}`` (``send
orders``, ``receive orders``, ``complete orders``); kind PRODUCER for ``send`` and
``schedule``, CLIENT for the rest; attributes ``messaging.system`` (``servicebus``),
``messaging.operation.name`` and ``.type``, ``messaging.destination.name`` (the queue
or topic), ``messaging.destination.subscription.name``, ``messaging.batch.message_count``
(batches of more than one; every receive), ``messaging.servicebus.disposition_status``,
``messaging.message.id`` (a single message sent), ``server.address``/``server.port``,
``network.protocol.name`` (``http``, ``amqp``), ``aiosb.transport`` (``memory``,
``http``, ``amqp``) and ``aiosb.ping`` on the pairing's pings. A failure sets status
ERROR, records the exception and ``error.type`` (the exception class, e.g.
``OperationTimeout``); a cancelled operation (a syphon's long poll, a closed receiver)
just ends its span. A span covers the operation's retries.

**Trace context in messages**, as the official SDKs carry it: a message sent without
one gets the send span's W3C context as application properties ``Diagnostic-Id`` and
``traceparent`` (and ``tracestate`` when there is one), written into the message
object (about 110 bytes against its size limit); a message that has one keeps it, so
a resend, and a backlog copy and its move home, still point at where it was made. A
receive span links to each received message's context (``traceparent``, else
``Diagnostic-Id``), whichever client sent it.

**Metrics**: ``messaging.client.operation.duration`` (histogram, s),
``messaging.client.sent.messages`` and ``messaging.client.consumed.messages``
(counters), with the attributes above that have low cardinality; and, for each open
pairing, observed from its :class:`~aiosb.pairing.PairingStats` counters when metrics
are collected (nothing counted twice, nothing added on the send path), the
``aiosb.pairing.*`` instruments of :data:`PAIRING_METRICS` and the gauge
``aiosb.pairing.backlog.depth``, attributed ``aiosb.pairing.primary`` and
``aiosb.pairing.secondary`` (the namespace names).

Imports the client (whose :data:`~aiosb.client.observer` it sets), :mod:`aiosb.pairing`
(whose open pairings it observes) and the vocabulary; nothing imports it.
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import client
from ._endpoint import Endpoint
from .auth import is_connection_string
from .entities import DEAD_LETTER_SUFFIX, parse_entity_path
from .errors import ServiceBusError
from .message import PING_CONTENT_TYPE, Message
from .pairing import PairingStats, runtime

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.trace import Span, TracerProvider

    from .client import Namespace
    from .pairing import PairedNamespace

__all__ = ["PAIRING_METRICS", "instrument", "instrumented", "uninstrument"]

T = TypeVar("T")

#: Each :class:`~aiosb.pairing.PairingStats` field as an observable counter: its name,
#: unit and description.
PAIRING_METRICS: dict[str, tuple[str, str, str]] = {
    "primary_sends": (
        "aiosb.pairing.primary.sends", "{send}", "Paired sends that went to the primary."),
    "backlog_sends": (
        "aiosb.pairing.backlog.sends", "{send}", "Paired sends that went to a backlog queue."),
    "backlog_messages": (
        "aiosb.pairing.backlog.messages", "{message}", "Messages put in backlog queues."),
    "failovers": ("aiosb.pairing.failovers", "{failover}", "Entities that failed over."),
    "recoveries": ("aiosb.pairing.recoveries", "{recovery}", "Entities that came back."),
    "pings_sent": (
        "aiosb.pairing.ping.sent", "{ping}", "Pings sent to entities that failed over."),
    "pings_failed": ("aiosb.pairing.ping.failed", "{ping}", "Pings that failed."),
    "backlog_queues_removed": (
        "aiosb.pairing.backlog.queue.removals", "{removal}",
        "Times a backlog queue left the rotation."),
    "syphon_receives": (
        "aiosb.pairing.syphon.receives", "{receive}",
        "Receive calls the syphon made on backlog queues."),
    "syphon_moved": (
        "aiosb.pairing.syphon.moved", "{message}",
        "Messages the syphon moved to their primary entity."),
    "syphon_dead_lettered": (
        "aiosb.pairing.syphon.dead_lettered", "{message}",
        "Backlog messages dead-lettered (expired while waiting, or undeliverable)."),
    "syphon_failures": (
        "aiosb.pairing.syphon.failures", "{failure}",
        "Failed syphon receives or moves (retried)."),
}
BACKLOG_DEPTH = "aiosb.pairing.backlog.depth"
#: The application properties that carry a message's creation context (W3C trace
#: context), as the official SDKs write and read them.
DIAGNOSTIC_ID = "Diagnostic-Id"
TRACE_PARENT = "traceparent"
TRACE_STATE = "tracestate"

# Bucket boundaries the messaging conventions advise for operation durations (s).
_DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)
_RECEIVES = frozenset({"receive", "receive_deferred"})
_SESSION_OPERATIONS = {
    "accept": "accept_session",
    "renew": "renew_session_lock",
    "get_state": "get_session_state",
    "set_state": "set_session_state",
    "release": "release_session",
}


@dataclass(frozen=True, slots=True)
class _Operation:
    """What the conventions call one operation, read from a transport call."""

    name: str  # messaging.operation.name
    type: str | None  # messaging.operation.type
    sub_queue: str | None = None
    count: int | None = None  # messages concerned, when known before it runs
    disposition: str | None = None
    message_id: str | None = None
    ping: bool = False


def _describe(method: str, args: tuple[Any, ...]) -> _Operation | None:
    """The operation a transport call is, or ``None`` (management: not traced)."""
    if method == "send" or method == "schedule":
        messages = args[1]
        single = messages[0] if len(messages) == 1 else None
        return _Operation(
            method,
            "send",
            count=len(messages),
            message_id=None if single is None else single.message_id,
            ping=single is not None and single.content_type == PING_CONTENT_TYPE,
        )
    if method == "receive":
        request = args[1]
        if request.peek:
            name = "peek"
        elif request.sequence_numbers:
            name = "receive_deferred"
        else:
            name = "receive"
        return _Operation(name, "receive", request.sub_queue)
    if method == "settle":
        settlement = args[1]
        action = settlement.action
        count = len(settlement.lock_tokens)
        if action == "renew":
            return _Operation("renew_message_lock", None, settlement.sub_queue, count)
        return _Operation(action, "settle", settlement.sub_queue, count, disposition=action)
    if method == "cancel_scheduled":
        return _Operation(method, None, count=len(args[1]))
    if method == "session":
        return _Operation(_SESSION_OPERATIONS.get(args[1].action, args[1].action), None)
    return None


@functools.lru_cache(maxsize=1024)
def _destination(entity: str, sub_queue: str | None) -> tuple[tuple[str, str], ...]:
    """The destination attributes of an entity path (a subscription's destination is
    its topic; a dead-letter queue is named as Service Bus names it)."""
    try:
        parsed = parse_entity_path(entity, sub_queue)
    except ServiceBusError:
        return (("messaging.destination.name", entity),)
    suffix = DEAD_LETTER_SUFFIX if parsed.sub_queue else ""
    if parsed.subscription is None:
        return (("messaging.destination.name", parsed.entity + suffix),)
    return (
        ("messaging.destination.name", parsed.entity),
        ("messaging.destination.subscription.name", parsed.subscription + suffix),
    )


def _server(namespace: Namespace) -> dict[str, Any]:
    """The attributes every operation of ``namespace`` shares."""
    endpoint = getattr(namespace.transport, "endpoint", None)  # parsed once, at connect
    host: str | None = None
    port: int | None = None
    if isinstance(endpoint, Endpoint):
        host, port = endpoint.host or None, endpoint.port
    elif not is_connection_string(namespace.url):
        try:
            parts = urllib.parse.urlsplit(namespace.url)
            host, port = parts.hostname, parts.port
        except ValueError:
            pass
    transport = type(namespace.transport).__name__.removesuffix("Transport").lower()
    attributes: dict[str, Any] = {
        "messaging.system": "servicebus",
        "server.address": host or namespace.name,
        "aiosb.transport": transport,
    }
    if port is not None:
        attributes["server.port"] = port
    if transport in ("http", "amqp"):
        attributes["network.protocol.name"] = transport
    return attributes


class _Metrics:
    """The instruments made with one meter provider (made once per provider: an
    observable instrument made twice would observe twice)."""

    def __init__(self, provider: MeterProvider | None) -> None:
        from opentelemetry import metrics
        from opentelemetry.metrics import Observation

        from . import __version__

        self._observation = Observation
        meter = (metrics if provider is None else provider).get_meter("aiosb", __version__)
        self.duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of messaging operation initiated by a producer or consumer "
            "client.",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        for field, (name, unit, description) in PAIRING_METRICS.items():
            meter.create_observable_counter(
                name, [self._counter(field)], unit=unit, description=description
            )
        meter.create_observable_gauge(
            BACKLOG_DEPTH,
            [self._depth],
            unit="{message}",
            description="Messages this process put in backlog queues and has not yet seen "
            "moved or dead-lettered by its syphon (an estimate from the pairing's counters).",
        )

    def _pairings(self) -> list[tuple[PairingStats, dict[str, str]]]:
        active = _active
        if active is None or active.metrics is not self:
            return []
        return [(paired.stats, _pairing_attributes(paired)) for paired in list(runtime.OPEN)]

    def _counter(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                self._observation(getattr(stats, field), attributes)
                for stats, attributes in self._pairings()
            ]

        return observe

    def _depth(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            self._observation(
                max(0, stats.backlog_messages - stats.syphon_moved - stats.syphon_dead_lettered),
                attributes,
            )
            for stats, attributes in self._pairings()
        ]


def _pairing_attributes(paired: PairedNamespace) -> dict[str, str]:
    return {
        "aiosb.pairing.primary": paired.primary.name,
        "aiosb.pairing.secondary": paired.secondary.name,
    }


class _Instrumentation:
    """The observer :func:`instrument` installs in :mod:`aiosb.client`."""

    def __init__(self, tracer_provider: TracerProvider | None, metrics: _Metrics) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from . import __version__

        source = trace if tracer_provider is None else tracer_provider
        self.tracer = source.get_tracer("aiosb", __version__)
        self.metrics = metrics
        self._use_span = trace.use_span
        self._in_context = trace.set_span_in_context
        self._span_of = trace.get_current_span
        self._propagator = TraceContextTextMapPropagator()
        self._kinds = {"send": SpanKind.PRODUCER, None: SpanKind.CLIENT}
        self._client = SpanKind.CLIENT
        self._status = Status
        self._error = StatusCode.ERROR
        self._servers: weakref.WeakKeyDictionary[Namespace, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(
        self,
        namespace: Namespace,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        run: Coroutine[Any, Any, T],
    ) -> Awaitable[T]:
        operation = _describe(getattr(fn, "__name__", ""), args)
        if operation is None:
            return run
        sent = args[1] if operation.type == "send" and not operation.ping else None
        return self._observe(namespace, args[0], operation, run, sent)

    async def _observe(
        self, namespace: Namespace, entity: str, op: _Operation, run: Coroutine[Any, Any, T],
        sent: Sequence[Message] | None = None,
    ) -> T:
        server = self._servers.get(namespace)
        if server is None:
            server = self._servers[namespace] = _server(namespace)
        destination = _destination(entity, op.sub_queue)
        attributes = {**server, **dict(destination), "messaging.operation.name": op.name}
        if op.type is not None:
            attributes["messaging.operation.type"] = op.type
        on_span = dict(attributes)
        if op.count is not None and op.count > 1:
            on_span["messaging.batch.message_count"] = op.count
        if op.disposition is not None:
            on_span["messaging.servicebus.disposition_status"] = op.disposition
        if op.message_id is not None:
            on_span["messaging.message.id"] = op.message_id
        if op.ping:
            on_span["aiosb.ping"] = True
        kind = self._kinds.get(op.type, self._client)
        span = self.tracer.start_span(
            f"{op.name} {destination[0][1]}", kind=kind, attributes=on_span
        )
        if sent:
            self._carry(span, sent)
        metrics = self.metrics
        start = time.perf_counter()
        try:
            with self._use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                result = await run
        except asyncio.CancelledError:
            span.end()
            raise
        except BaseException as exc:
            error = type(exc).__qualname__
            span.set_attribute("error.type", error)
            span.record_exception(exc)
            span.set_status(self._status(self._error, f"{error}: {exc}"))
            span.end()
            attributes["error.type"] = error
            metrics.duration.record(time.perf_counter() - start, attributes)
            if op.type == "send":
                metrics.sent.add(op.count or 0, attributes)
            raise
        elapsed = time.perf_counter() - start
        if op.type == "receive" and isinstance(result, list):
            span.set_attribute("messaging.batch.message_count", len(result))
            self._link(span, result)
            if result and op.name in _RECEIVES:
                metrics.consumed.add(len(result), attributes)
        elif op.type == "send":
            metrics.sent.add(op.count or 0, attributes)
        span.end()
        metrics.duration.record(elapsed, attributes)
        return result

    def _carry(self, span: Span, messages: Sequence[Message]) -> None:
        """Write the send span's context into each message that carries none (its
        creation context, as the official SDKs write it: ``Diagnostic-Id`` and
        ``traceparent``, with ``tracestate`` when there is one). A message that has one
        keeps it: a resend, or a backlog copy and its move home (the pairing), still
        point at where the message was made."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._in_context(span))
        parent = carrier.get(TRACE_PARENT)
        if parent is None:  # a span not recorded: no context to carry
            return
        added = {DIAGNOSTIC_ID: parent, TRACE_PARENT: parent}
        state = carrier.get(TRACE_STATE)
        if state:
            added[TRACE_STATE] = state
        for message in messages:
            props = message.application_properties
            if DIAGNOSTIC_ID not in props and TRACE_PARENT not in props:
                props.update(added)

    def _link(self, span: Span, messages: list[Any]) -> None:
        """Link the receive span to the creation context of each message that carries
        one (``traceparent``, else ``Diagnostic-Id``), as the official SDKs do."""
        for message in messages:
            props = getattr(message, "application_properties", None)
            if not props:
                continue
            parent = props.get(TRACE_PARENT) or props.get(DIAGNOSTIC_ID)
            if not isinstance(parent, str):
                continue
            carrier = {TRACE_PARENT: parent}
            state = props.get(TRACE_STATE)
            if isinstance(state, str):
                carrier[TRACE_STATE] = state
            context = self._span_of(self._propagator.extract(carrier)).get_span_context()
            if context.is_valid:
                span.add_link(context)


_active: _Instrumentation | None = None
_metrics: dict[int, tuple[MeterProvider | None, _Metrics]] = {}


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Turn spans and metrics on, for every namespace and pairing of the process.

    Args:
        tracer_provider: Where spans go; the global one (``opentelemetry.trace``)
            when ``None``.
        meter_provider: Where metrics go; the global one when ``None``.

    Calling it again replaces the providers.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (``pip install 'aiosb[otel]'``).
    """
    global _active
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "aiosb.telemetry needs opentelemetry-api: pip install 'aiosb[otel]' "
            "(and an SDK or a distro, e.g. opentelemetry-sdk, to export anything)."
        ) from exc
    key = id(meter_provider)
    made = _metrics.get(key)
    if made is None or made[0] is not meter_provider:
        made = _metrics[key] = (meter_provider, _Metrics(meter_provider))
    _active = _Instrumentation(tracer_provider, made[1])
    client.observer = _active


def uninstrument() -> None:
    """Turn spans and metrics off again (idempotent): operations cost one check again,
    and the pairing instruments observe nothing."""
    global _active
    _active = None
    client.observer = None


def instrumented() -> bool:
    """Whether :func:`instrument` is in force."""
    return _active is not None and client.observer is _active
