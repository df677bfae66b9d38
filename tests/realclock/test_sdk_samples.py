"""Issue 33, done when: the official SDK's ``auto_lock_renew`` sample (sync and aio) and
both scheduling samples pass, unmodified, against one long-running ``aiosb serve``, one
after another (:mod:`.samples` says the order and why), and the server's clock has not
run ahead of the wall clock at the end.

The run starts when the test session has collected this test and goes on beside the
rest of the suite (nearly five minutes, nearly all of it the samples' own sleeps); this
test is moved to the end of the session and waits for it."""

from __future__ import annotations

import pytest

from .conftest import SKEW
from .samples import RUN, SAMPLE_SECONDS

pytest.importorskip("azure.servicebus")

#: What each sample prints when it has done what it shows.
DONE = {
    "schedule_messages_and_cancellation.py": ["All scheduled messages are cancelled."],
    "schedule_messages_and_cancellation_async.py": ["All scheduled messages are cancelled."],
    "auto_lock_renew.py": ["Complete messages.", "Lock renew failure demonstration complete."],
    "auto_lock_renew_async.py": ["Complete messages.",
                                 "Lock renew failure demonstration complete."],
}


@pytest.mark.timeout(2 * SAMPLE_SECONDS)
@pytest.mark.runs_in_background(RUN)
def test_the_sdk_samples_pass_one_after_another_on_one_long_running_server():
    outcome = RUN.outcome(timeout=2 * SAMPLE_SECONDS - 30)
    assert outcome.error is None
    assert [r.sample for r in outcome.results] == [
        "schedule_messages_and_cancellation.py",
        "schedule_messages_and_cancellation_async.py",
        "auto_lock_renew.py",
        "auto_lock_renew_async.py",
        "schedule_messages_and_cancellation_async.py",
        "schedule_messages_and_cancellation.py",
    ]
    for result in outcome.results:
        assert result.returncode == 0, f"{result.sample}:\n{result.output[-3000:]}"
        for line in DONE[result.sample]:
            assert line in result.output, f"{result.sample}:\n{result.output[-3000:]}"
    renewals = [r for r in outcome.results if r.sample.startswith("auto_lock_renew")]
    for result in renewals:  # both halves held their locks: two completions
        assert result.output.count("Complete messages.") == 2, result.output[-3000:]
        assert result.seconds > 280  # the samples' own sleeps: they did hold that long
    assert outcome.clock_lead is not None and outcome.clock_lead <= SKEW
