"""The conformance suite: written once, run against every backend.

Each backend is a parameter of the ``backend`` fixture; a test asks for ``ns`` (an open
:class:`aiosb.Namespace` on that backend) and, where it injects faults or reads the
broker's side, for ``broker`` (the emulator namespace behind it). A new backend joins
the suite by adding a parameter here.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

import aiosb
from aiosb import emulator

BACKENDS = ["memory"]
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
def url(backend: str, ns_name: str) -> str:
    if backend == "memory":
        return f"memory://{ns_name}"
    raise AssertionError(f"unknown backend {backend}")


@pytest.fixture
async def ns(url: str) -> AsyncIterator[aiosb.Namespace]:
    async with aiosb.connect(url, operation_timeout=10, retry_backoff=0.05) as namespace:
        yield namespace
