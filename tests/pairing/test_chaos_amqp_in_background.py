"""R-1 over AMQP through the official SDK (tests/pairing/chaos_amqp.py: ten minutes of
chaos compressed to thirty seconds of the wall clock), run by a pytest of its own beside
the rest of the suite. This test goes last and fails with that run's report if it
failed."""

from __future__ import annotations

import pytest
from realclock.background import PytestRun

pytest.importorskip("azure.servicebus")

RUN = PytestRun("tests/pairing/chaos_amqp.py")


@pytest.mark.timeout(300)
@pytest.mark.runs_in_background(RUN)
def test_r1_over_amqp_through_the_official_sdk() -> None:
    code, out = RUN.result(timeout=270)
    assert code == 0, out[-6000:]
    assert "1 passed" in out and " failed" not in out and " skipped" not in out, out[-2000:]
