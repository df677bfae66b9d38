"""The conformance suite: written once, run against every backend.

Each backend is a parameter of the ``backend`` fixture; a test asks for ``ns`` (an open
:class:`aiosb.Namespace` on that backend) and, where it injects faults or reads the
broker's side, for ``broker`` (the emulator namespace behind it). A new backend joins
the suite by adding a parameter here.

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
from collections.abc import AsyncIterator

import pytest

import aiosb
from aiosb import emulator
from aiosb.emulator.server import serve

BACKENDS = ["memory", "http"]
_names = itertools.count(1)


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
    else:
        raise AssertionError(f"unknown backend {backend}")


@pytest.fixture
async def ns(url: str) -> AsyncIterator[aiosb.Namespace]:
    async with aiosb.connect(url, operation_timeout=10, retry_backoff=0.05) as namespace:
        yield namespace
