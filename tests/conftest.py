"""Shared fixtures: every test starts with a fresh embedded emulator."""

from __future__ import annotations

import pytest

# The transports and the pairing layer, imported now rather than by the first test that
# connects: pytest rewrites aiosb's modules (a plugin's) with ast.parse, which CPython
# 3.11 can fail deep in a running test ("AST constructor recursion depth mismatch",
# python/cpython#106905); at collection nothing else is running.
import aiosb.pairing
import aiosb.transport.amqp
import aiosb.transport.http
import aiosb.transport.memory  # noqa: F401
from aiosb import emulator


@pytest.fixture(autouse=True)
def _fresh_emulator():
    emulator.reset()
    yield
    emulator.reset()


@pytest.fixture
def amqp_closes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The condition of every AMQP connection the server closes for cause (its
    ``Connection._fail``: the idle watch, a protocol violation), in order."""
    from aiosb.amqp import connection

    closes: list[str] = []
    fail = connection.Connection._fail

    def watched(self: connection.Connection, exc: connection.ProtocolViolation) -> None:
        closes.append(exc.condition)
        fail(self, exc)

    monkeypatch.setattr(connection.Connection, "_fail", watched)
    return closes
