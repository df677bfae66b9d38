"""A pytest plugin with ready fixtures for testing against the embedded emulator.

It is registered on install (entry point ``pytest11``), so a project that installs
aiosb can just ask for the fixtures::

    async def test_orders(aiosb_emulator):
        async with aiosb.connect("memory://test") as ns:
            ...
        aiosb_emulator.namespace("test").faults.fail("orders")
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from . import emulator

__all__ = ["aiosb_emulator"]


@pytest.fixture
def aiosb_emulator() -> Iterator[ModuleType]:
    """The :mod:`aiosb.emulator` module, with every namespace forgotten before and after."""
    emulator.reset()
    try:
        yield emulator
    finally:
        emulator.reset()
