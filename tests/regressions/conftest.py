"""Regression tests from the review of partitioned entities, sessions and transactions:
each failed before its fix. Every test gets an open ``memory://rv`` namespace."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import aiosb
from aiosb import emulator


@pytest.fixture
def broker() -> emulator.EmulatorNamespace:
    return emulator.namespace("rv")


@pytest.fixture
async def ns(broker: emulator.EmulatorNamespace) -> AsyncIterator[aiosb.Namespace]:
    async with aiosb.connect("memory://rv", operation_timeout=10, retry_backoff=0.05) as n:
        yield n
