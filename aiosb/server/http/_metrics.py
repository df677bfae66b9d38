"""What ``aiosb serve`` tells about itself: a log line per request (``--quiet`` turns it
off) and Prometheus metrics at ``GET /metrics`` (``--metrics``, with the
``prometheus-client`` package: ``pip install aiosb[metrics]``).

Metrics, read at each scrape (nothing is counted on the hot path but the requests):

- ``aiosb_entity_messages{namespace, entity, state}``: messages of each entity (queue,
  topic, subscription) by state: ``active``, ``scheduled``, ``deferred``,
  ``dead_letter``;
- ``aiosb_server_requests_total{method, status}`` and
  ``aiosb_server_request_seconds`` (a histogram of the time to answer);
- ``aiosb_server_connections``: client connections open now;
- ``aiosb_journal_writes_total`` (durable mode): the journal's group commits so far,
  each one write of every change reported since the last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

from ... import emulator

__all__ = ["Observer", "access_log"]

#: One line per request: ``client method path status time``.
access_log = logging.getLogger("aiosb.server.requests")


class Observer:
    """Counts and logs each request, and answers ``GET /metrics``.

    Args:
        log: Write a line per request to :data:`access_log`.
        metrics: Keep Prometheus metrics (needs ``prometheus-client``).
        connections: How many client connections are open (read at each scrape).

    Raises:
        ImportError: ``metrics`` without ``prometheus-client`` installed (the message
            says how to install it).
    """

    def __init__(self, *, log: bool, metrics: bool, connections: Callable[[], int]) -> None:
        self.log = log
        self.registry: Any = None
        if metrics:
            try:
                import prometheus_client as prom
            except ImportError:
                raise ImportError(
                    "aiosb serve --metrics needs the prometheus-client package: "
                    "pip install aiosb[metrics]"
                ) from None
            self._prom = prom
            self.registry = prom.CollectorRegistry()
            self._requests = prom.Counter(
                "aiosb_server_requests", "Requests answered, by method and status.",
                ["method", "status"], registry=self.registry,
            )
            self._seconds = prom.Histogram(
                "aiosb_server_request_seconds", "Time to answer a request.",
                registry=self.registry,
                buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30),
            )
            self._connections = prom.Gauge(
                "aiosb_server_connections", "Client connections open now.",
                registry=self.registry,
            )
            self._connections.set_function(connections)
            self.registry.register(_EntityCollector())

    def request(self, request: web.Request, status: int, seconds: float) -> None:
        """One request was answered."""
        if self.log:
            access_log.info("%s %s %s %d %.1f ms", request.remote, request.method,
                            request.path, status, seconds * 1000)
        if self.registry is not None:
            self._requests.labels(request.method, str(status)).inc()
            self._seconds.observe(seconds)

    async def metrics(self, _request: web.Request) -> web.Response:
        """``GET /metrics``, in Prometheus's text format."""
        body = self._prom.generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": self._prom.CONTENT_TYPE_LATEST})


class _EntityCollector:
    """Every entity's counts, read from the broker when Prometheus scrapes."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "aiosb_entity_messages", "Messages of an entity, by state.",
            labels=["namespace", "entity", "state"],
        )
        for ns in emulator.namespaces():
            for status in ns.entity_statuses():  # after a durable restart, what is loaded
                counts = status.counts
                for state, value in (
                    ("active", counts.active_message_count),
                    ("scheduled", counts.scheduled_message_count),
                    ("deferred", counts.deferred_message_count),
                    ("dead_letter", counts.dead_letter_message_count),
                ):
                    family.add_metric([ns.name, status.path, state], value)
        yield family
        journal = emulator.journal()
        if journal is not None:
            from prometheus_client.core import CounterMetricFamily

            yield CounterMetricFamily(
                "aiosb_journal_writes", "The durable journal's group commits so far.",
                value=journal.writes,
            )
