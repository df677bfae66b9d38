"""Shared fixtures: every test starts with a fresh embedded emulator."""

from __future__ import annotations

import pytest

from aiosb import emulator


@pytest.fixture(autouse=True)
def _fresh_emulator():
    emulator.reset()
    yield
    emulator.reset()
