"""Issues 33 and 34: the official Python SDK's published samples (the ``samples/`` of
the ``azure-servicebus`` 7.11.4 sdist, sync and async, unmodified) pass against
``aiosb serve``: all but those :data:`~.samples.NOT_RUN` names, with the reason. For
issue 33 the ``auto_lock_renew`` and scheduling samples run against one long-running
server one after another (:mod:`.samples` says the order and why), and the server's
clock has not run ahead of the wall clock at the end.

The run starts when the test session has collected this test and goes on beside the
rest of the suite (nearly five minutes, nearly all of it the samples' own sleeps); this
test is moved to the end of the session and waits for it."""

from __future__ import annotations

import pytest

from .conftest import SKEW
from .samples import (
    BY_NAME,
    FOREVER,
    RENEWAL,
    RUN,
    SAMPLE_SECONDS,
    SCHEDULING,
    runnable_files,
    stem,
)

pytest.importorskip("azure.servicebus")
pytest.importorskip("cryptography")

#: What a sample prints when it has done what it shows, where it says so.
DONE = {
    SCHEDULING: ["All scheduled messages are cancelled."],
    RENEWAL: ["Complete messages.", "Lock renew failure demonstration complete."],
    "receive_deadlettered_messages": ["receiving deadlettered messages"],
    "deadletter_messages_and_correct": ["Deadletter message:", "Fixing message:"],
    "proxy": ["Send message is done."],
    # Issue 34, point 3: each body type comes back as it was sent.
    "send_and_receive_amqp_annotated_message": [
        f"Message of {kind} body received. Body is:" for kind in ("data", "sequence", "value")
    ],
}


@pytest.mark.timeout(2 * SAMPLE_SECONDS)
@pytest.mark.runs_in_background(RUN)
def test_the_sdk_samples_pass_against_aiosb_serve():
    outcome = RUN.outcome(timeout=2 * SAMPLE_SECONDS - 30)
    assert outcome.error is None
    results = outcome.results
    assert outcome.proxy_skipped is None, outcome.proxy_skipped
    runnable = runnable_files()
    assert sorted({r.sample for r in results}) == sorted(runnable)
    assert len(runnable) >= 47  # of the 56: all but what NOT_RUN and NOT_RUN_FILES say
    assert any(line.startswith("CONNECT localhost:") for line in outcome.proxied), (
        outcome.proxied)  # the proxy sample went through the proxy
    failed = [r for r in results if r.returncode not in (0, None)]
    assert not failed, "\n\n".join(f"{r.sample}:\n{r.output[-2500:]}" for r in failed)
    for result in results:
        for line in DONE.get(stem(result.sample), []):
            assert line in result.output, f"{result.sample}:\n{result.output[-3000:]}"
        if stem(result.sample) in FOREVER:  # ran to its deadline; what did it print?
            if result.sent:
                assert all(body in result.output for body in result.sent), result.output
            else:
                assert "Receiving" in result.output or result.returncode == 0, result.output
        else:
            assert result.returncode == 0
    assert {stem(r.sample) for r in results} >= set(BY_NAME)  # AMQP over TLS, by name
    # Issue 33: the scheduling samples before and after the renewals, on one server.
    order = [r.sample for r in results if stem(r.sample) == SCHEDULING]
    assert order == [f"sync_samples/{SCHEDULING}.py", f"async_samples/{SCHEDULING}_async.py",
                     f"async_samples/{SCHEDULING}_async.py", f"sync_samples/{SCHEDULING}.py"]
    for result in (r for r in results if stem(r.sample) == RENEWAL):
        assert result.output.count("Complete messages.") == 2, result.output[-3000:]
        assert result.seconds > 280  # the samples' own sleeps: they did hold that long
    assert outcome.clock_lead is not None and outcome.clock_lead <= SKEW
