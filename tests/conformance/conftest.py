"""The conformance suite: written once, run against every backend.

Each backend is a parameter of the ``backend`` fixture; a test asks for ``ns`` (an open
:class:`aiosb.Namespace` on that backend) and, where it injects faults or reads the
broker's side, for ``broker`` (the emulator namespace behind it). A new backend joins
the suite by adding a parameter here.

``amqp`` runs against the real namespace of ``AIOSB_TEST_CONNECTION_STRING`` (skipped
without it). Use a namespace kept for tests: entities a test creates are deleted after it.
Tests that inject faults (``broker``) or fast-forward minutes of broker time
(test_expiry.py) need the emulator and are skipped there; the others run on the real
clock.

The ``http`` backend serves the emulator with :func:`aiosb.emulator.server.serve` on an
ephemeral port, in the test's own event loop, and connects to it over real sockets. That
keeps ``looptime`` working: looptime only moves the loop's clock when no I/O is ready,
and on loopback a write is readable by the peer at once, so a request and its answer
travel before the clock moves; timers on both sides (long polls, lock expiries, the
client's operation timeout) read one fast-forwarded clock. A server shared across tests
would need a loop shared across tests, which looptime does not fast-forward per test.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator

import pytest

import aiosb
from aiosb import emulator
from aiosb.emulator.server import serve

AMQP_CONNECTION_STRING = os.environ.get("AIOSB_TEST_CONNECTION_STRING")
BACKENDS = [
    "memory",
    "http",
    pytest.param(
        "amqp",
        marks=() if AMQP_CONNECTION_STRING else pytest.mark.skip(
            reason="set AIOSB_TEST_CONNECTION_STRING to run the suite on a real namespace"
        ),
    ),
]
_names = itertools.count(1)
_EMULATOR_ONLY = {"test_expiry.py": "fast-forwards minutes of broker time on the emulator"}
_NOT_OVER_HTTP = {
    "test_sessions.py": "the Service Bus REST protocol has no sessions (HTTP transports "
    "refuse them with InvalidOperation, tested in test_http_transport.py)",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = None if callspec is None else callspec.params.get("backend")
        if backend == "http" and item.path.name in _NOT_OVER_HTTP:
            item.add_marker(pytest.mark.skip(reason=_NOT_OVER_HTTP[item.path.name]))
        if backend != "amqp":
            continue
        item.add_marker(pytest.mark.looptime(False))  # a real broker keeps real time
        reason = _EMULATOR_ONLY.get(item.path.name)
        if "broker" in item.fixturenames:
            reason = "injects faults into the emulator"
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"not on a real namespace: {reason}"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def ns_name() -> str:
    return f"conformance{next(_names)}"


@pytest.fixture
def broker(ns_name: str) -> emulator.EmulatorNamespace:
    """The emulator namespace behind ``ns`` (fault injection, inspection)."""
    return emulator.namespace(ns_name)


@pytest.fixture
async def url(backend: str, ns_name: str) -> AsyncIterator[str]:
    if backend == "memory":
        yield f"memory://{ns_name}"
    elif backend == "http":
        async with serve() as server:
            yield server.namespace_url(ns_name)
    elif backend == "amqp":
        yield AMQP_CONNECTION_STRING  # type: ignore[misc]
    else:
        raise AssertionError(f"unknown backend {backend}")


@pytest.fixture
async def ns(url: str, backend: str) -> AsyncIterator[aiosb.Namespace]:
    async with aiosb.connect(url, operation_timeout=10, retry_backoff=0.05) as namespace:
        if backend != "amqp":  # a fresh emulator namespace per test
            yield namespace
            return
        before = await _entities(namespace)
        yield namespace
        for kind, name in await _entities(namespace) - before:
            await getattr(namespace, f"delete_{kind}")(name)


async def _entities(namespace: aiosb.Namespace) -> set[tuple[str, str]]:
    queues = {("queue", q.name) for q in await namespace.list_queues()}
    return queues | {("topic", t.name) for t in await namespace.list_topics()}
