"""The pytest side of the stand-in (loaded with ``-p devtools_testutils.plugin``): the
``test_proxy`` fixture the tests' conftest asks for (live: no proxy), the deferred
removal of cached resources at the session's end, and one JSON line per test in
``$AIOSB_SDK_TESTS_RESULTS`` (its id, outcome, wall-clock start and end, and its error),
which ``./dev sdk-tests`` reads."""

from __future__ import annotations

import json
import os
import time

import pytest

from ._preparers import AbstractPreparer

_started: dict[str, float] = {}


@pytest.fixture(scope="session")
def test_proxy():
    yield None


def pytest_sessionfinish(session, exitstatus):
    AbstractPreparer.remove_cached()


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    path = os.environ.get("AIOSB_SDK_TESTS_RESULTS")
    if not path:
        return
    failed_setup = report.when == "setup" and not report.passed
    if report.when == "call" or failed_setup or (report.when == "teardown" and report.failed):
        error = ""
        if report.failed or report.skipped:
            error = _error(report)
        with open(path, "a") as out:
            out.write(json.dumps({
                "id": report.nodeid, "when": report.when, "outcome": report.outcome,
                "start": _started.get(report.nodeid), "end": time.time(),
                "error": error, "detail": str(report.longrepr)[-20000:] if report.failed else "",
            }) + "\n")


def _error(report):
    """The error's first line: the exception and its message (or the skip's reason)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0] if crash.message else ""
    text = str(report.longrepr).strip().splitlines()
    return text[-1] if text else ""
