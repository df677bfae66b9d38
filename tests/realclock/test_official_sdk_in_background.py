"""Issue 33's real-clock tests with the official SDK (tests/realclock/official_sdk.py:
AutoLockRenewer past two lock durations, scheduled messages at their time, lock
renewal, session state, expiry), run by a pytest of their own beside the rest of the
suite: nearly all of their two minutes is waiting on the wall clock. This test goes
last and fails with that run's report if any of them failed."""

from __future__ import annotations

import pytest

from .background import PytestRun

pytest.importorskip("azure.servicebus")

RUN = PytestRun("tests/realclock/official_sdk.py")


@pytest.mark.timeout(900)
@pytest.mark.runs_in_background(RUN)
def test_the_official_sdk_on_the_real_clock() -> None:
    code, out = RUN.result(timeout=870)
    assert code == 0, out[-6000:]
    assert " passed" in out and " failed" not in out and " skipped" not in out, out[-2000:]
