"""Shared fixtures: every test starts with a fresh embedded emulator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from aiosb._clock import CLOCK

#: seconds: how far the clock may read past the wall clock (the two are read apart).
SKEW = 0.005


#: The per-user state folder of this session (#48): ``aiosb serve`` keeps its certificate
#: and key in ``$XDG_STATE_HOME/aiosb/tls`` unless ``--tls-dir`` says, and no test writes
#: into the real home folder (servers the tests start inherit it).
_STATE_HOME = tempfile.mkdtemp(prefix="aiosb-state-")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_STATE_HOME"] = _STATE_HOME
    os.environ["LOCALAPPDATA"] = _STATE_HOME  # Windows' per-user folder


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_STATE_HOME, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``runs_in_background(run)`` waits for ``run``, which the session
    starts once it has collected the test (``pytest_collection_finish``): it goes
    last, so the run goes on beside the rest of the suite (tests/realclock/samples.py)."""
    last = [item for item in items if item.get_closest_marker("runs_in_background")]
    if last:
        items[:] = [item for item in items if item not in last] + last


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    for item in session.items:
        marker = item.get_closest_marker("runs_in_background")
        if marker is not None:
            marker.args[0].start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    for item in session.items:
        marker = item.get_closest_marker("runs_in_background")
        if marker is not None:
            marker.args[0].stop()


@pytest.fixture(autouse=True)
def _fresh_emulator():
    emulator.reset()
    yield
    emulator.reset()


@pytest.fixture(autouse=True)
def _clock_keeps_real_time(request: pytest.FixtureRequest, _fresh_emulator: None):
    """Issue 33: after every test that ran on the wall clock (not fast-forwarded), no
    instant the clock gave is later than real time."""
    yield
    if request.node.get_closest_marker("looptime") is None:
        ahead = CLOCK.latest() - time.time()
        assert ahead <= SKEW, f"the clock read {ahead:.3f} s ahead of the wall clock"


@pytest.fixture(autouse=True)
def _journal_answers_come_from_outside(request: pytest.FixtureRequest,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """#39: a durable journal waits for its writer process to answer. On a fast-forwarded
    loop (looptime) that is a wait on the world outside the loop, as looptime counts a
    wait on an executor (it would otherwise move the clock on while the writer writes)."""
    if request.node.get_closest_marker("looptime") is None:
        return
    from aiosb.emulator.durable import _writer_client as _link

    send = _link.WriterLink.send

    def send_outside(self: _link.WriterLink[Any], write: Any, *frame: Any) -> None:
        outside = getattr(self.loop, "_LoopTimeEventLoop__sync_futures", None)
        if outside is not None:
            outside.add(write.answer)
        send(self, write, *frame)

    monkeypatch.setattr(_link.WriterLink, "send", send_outside)


@pytest.fixture
def amqp_closes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The condition of every AMQP connection the server closes for cause (its
    ``Connection._fail``: the idle watch, a protocol violation), in order."""
    from aiosb.server.amqp import connection

    closes: list[str] = []
    fail = connection.Connection._fail

    def watched(self: connection.Connection, exc: connection.ProtocolViolation) -> None:
        closes.append(exc.condition)
        fail(self, exc)

    monkeypatch.setattr(connection.Connection, "_fail", watched)
    return closes


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built strictly once for the session into a temporary
    directory (a warning, or a cross-reference that leads nowhere, fails it): the docs
    tests and the browser's table test read the same build."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out
