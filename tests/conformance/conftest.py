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
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator

import pytest

import aiosb
from aiosb import emulator

AMQP_CONNECTION_STRING = os.environ.get("AIOSB_TEST_CONNECTION_STRING")
BACKENDS = [
    "memory",
    pytest.param(
        "amqp",
        marks=() if AMQP_CONNECTION_STRING else pytest.mark.skip(
            reason="set AIOSB_TEST_CONNECTION_STRING to run the suite on a real namespace"
        ),
    ),
]
_names = itertools.count(1)
_EMULATOR_ONLY = {"test_expiry.py": "fast-forwards minutes of broker time on the emulator"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("backend") != "amqp":
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
def url(backend: str, ns_name: str) -> str:
    if backend == "memory":
        return f"memory://{ns_name}"
    if backend == "amqp":
        return AMQP_CONNECTION_STRING  # type: ignore[return-value]
    raise AssertionError(f"unknown backend {backend}")


@pytest.fixture
async def ns(url: str, backend: str) -> AsyncIterator[aiosb.Namespace]:
    async with aiosb.connect(url, operation_timeout=10, retry_backoff=0.05) as namespace:
        if backend == "memory":
            yield namespace
            return
        before = await _entities(namespace)
        yield namespace
        for kind, name in await _entities(namespace) - before:
            await getattr(namespace, f"delete_{kind}")(name)


async def _entities(namespace: aiosb.Namespace) -> set[tuple[str, str]]:
    queues = {("queue", q.name) for q in await namespace.list_queues()}
    return queues | {("topic", t.name) for t in await namespace.list_topics()}
