"""The official SDK's AMQP tests that mostly wait on the wall clock
(tests/amqp_server/clock_waits.py: a session the SDK cannot lock, retried until its
timeout; a sender and receiver idle past the idle timeout), run by a pytest of their own
beside the rest of the suite. This test goes last and fails with that run's report if
any of them failed."""

from __future__ import annotations

import pytest
from realclock.background import PytestRun

pytest.importorskip("azure.servicebus")

RUN = PytestRun("tests/amqp_server/clock_waits.py")


@pytest.mark.timeout(600)
@pytest.mark.runs_in_background(RUN)
def test_the_sdks_clock_waits() -> None:
    code, out = RUN.result(timeout=570)
    assert code == 0, out[-6000:]
    assert "4 passed" in out and " failed" not in out and " skipped" not in out, out[-2000:]
