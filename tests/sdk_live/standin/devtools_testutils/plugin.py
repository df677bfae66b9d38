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
    made = yield
    report = made.get_result()
    path = os.environ.get("AIOSB_SDK_TESTS_RESULTS")
    if not path:
        return
    failed_setup = report.when == "setup" and not report.passed
    if report.when == "call" or failed_setup or (report.when == "teardown" and report.failed):
        error = ""
        if report.failed or report.skipped:
            error = _error(report)
        with open(path, "a") as out:
            kind = report.outcome
            if hasattr(report, "wasxfail"):  # marked xfail by the test: say so
                kind = "xfailed" if report.skipped else "xpassed"
            out.write(json.dumps({
                "id": report.nodeid, "when": report.when, "outcome": kind,
                "start": _started.get(report.nodeid), "end": time.time(),
                "error": error, "detail": _detail(report) if report.failed else "",
            }) + "\n")


def _detail(report):
    """The failure whole: its traceback, then the tail of what the test printed and
    logged (the SDK's own log lines say what it was waiting for)."""
    captured = "".join(f"\n----- {name}\n{content[-60000:]}" for name, content in report.sections)
    return str(report.longrepr)[-20000:] + captured


def _error(report):
    """The error's first line: the first exception of its chain (what went wrong, not
    what a ``finally`` then raised cleaning up) and its message, or the skip's reason."""
    if hasattr(report, "wasxfail") and report.skipped:
        detail = _error_of(report.longrepr)
        return f"{detail} (xfail: {report.wasxfail})" if detail else report.wasxfail
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    return _error_of(report.longrepr)


def _error_of(longrepr):
    chain = getattr(longrepr, "chain", None)
    crash = chain[0][1] if chain else getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0] if crash.message else ""
    if isinstance(longrepr, tuple):
        return str(longrepr[2])
    text = str(longrepr).strip().splitlines()
    return text[-1] if text else ""
