"""Issue 47: the pieces of ``./dev sdk-tests`` (Microsoft's live tests for azure-servicebus
against ``aiosb serve``) that can be checked without PyPI or the SDK's tests: how the
files are shared among servers, the report to diff between runs, the stand-in's
preparers (live semantics of Azure's ``devtools_testutils``) and its port map. The run
itself is not part of the test command (minutes, and a download)."""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdk_live import report, run

STANDIN = Path(run.__file__).parent / "standin"


def _files(tmp_path: Path, sizes: dict[str, int]) -> list[str]:
    for name, size in sizes.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x" * size)
    return list(sizes)


def test_the_management_tests_get_a_server_of_their_own_and_each_group_keeps_the_order(
        tmp_path: Path):
    """They empty their namespace first: beside other tests they would take those
    tests' entities. Each group runs its files in the order given."""
    files = _files(tmp_path, {"tests/a.py": 10, "tests/b.py": 300, "tests/c.py": 20,
                              "tests/d.py": 280, "tests/mgmt_tests/m.py": 5})
    groups = run.plan(tmp_path, files, 3)
    assert groups == [["tests/a.py", "tests/b.py"], ["tests/c.py", "tests/d.py"],
                      ["tests/mgmt_tests/m.py"]]
    assert run.plan(tmp_path, files, 1) == [files]  # one server: management last


def test_the_report_has_a_sorted_line_per_test_that_did_not_pass(tmp_path: Path, capsys):
    job = tmp_path / "job0"
    job.mkdir()
    records = [
        {"id": "t::b", "when": "call", "outcome": "failed", "error": "E2", "detail": "d"},
        {"id": "t::a", "when": "call", "outcome": "passed", "error": "", "detail": ""},
        {"id": "t::a", "when": "teardown", "outcome": "failed", "error": "E1", "detail": "d"},
        {"id": "t::c", "when": "call", "outcome": "xfailed", "error": "x", "detail": ""},
    ]
    (job / "results.jsonl").write_text(
        "".join(json.dumps({**r, "start": 0.0, "end": 1.0}) + "\n" for r in records))
    assert report.summarize("7.15.0", tmp_path, [job], 60.0) == 1
    assert (tmp_path / "report.txt").read_text().splitlines() == [
        "FAILED t::a :: E1", "FAILED t::b :: E2", "XFAILED t::c :: x"]
    assert capsys.readouterr().out.rstrip().endswith("0 passed, 2 failed, 1 skipped")


def _standin(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("azure.servicebus")
    monkeypatch.syspath_prepend(str(STANDIN))
    import devtools_testutils._preparers as preparers

    return preparers


def test_a_cached_preparer_makes_one_resource_for_its_tests_and_removes_it_at_the_end(
        monkeypatch: pytest.MonkeyPatch):
    """As Azure's preparers do live: cached, one resource for every test with the same
    stack, removed when the session ends; not cached, one per test, removed after it."""
    preparers = _standin(monkeypatch)
    made: list[str] = []
    removed: list[str] = []

    class Thing(preparers.AbstractPreparer):
        def __init__(self, cached: bool) -> None:
            super().__init__("thing", 12)
            self.set_cache(cached)

        def create_resource(self, name, **kwargs):
            made.append(name)
            return {"thing": name}

        def remove_resource(self, name, **kwargs):
            removed.append(name)

    seen = []
    for cached in (True, False):
        for _ in range(2):
            @Thing(cached)
            def test(self, thing=None):
                seen.append(thing)

            test(object())
    cached_name = made[0]
    assert seen[:2] == [cached_name, cached_name] and len(set(seen)) == 3
    assert removed == seen[2:]  # the uncached ones, each after its test
    preparers.AbstractPreparer.remove_cached()
    assert removed[-1] == cached_name


def test_pytest_sees_the_tests_own_parameters_through_the_preparers(
        monkeypatch: pytest.MonkeyPatch):
    """The wrapper keeps the test's signature (pytest parametrizes ``uamqp_transport``
    through it), and runs a coroutine test to its end."""
    preparers = _standin(monkeypatch)
    ran = []

    @preparers.AbstractPreparer("p", 8)
    async def test(self, uamqp_transport, **kwargs):
        ran.append(uamqp_transport)

    assert list(inspect.signature(test).parameters) == ["self", "uamqp_transport", "kwargs"]
    test(object(), uamqp_transport=False)
    assert ran == [False]


def test_the_port_map_sends_the_sdks_fixed_ports_to_the_servers_free_one():
    """The SDK speaks AMQP over TLS to 5671 (and HTTPS to 443) for a namespace given by
    name; the stand-in's sitecustomize sends those, on loopback, to the server's port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = ("import socket; s = socket.create_connection(('127.0.0.1', 5671)); "
                "print(s.getpeername()[1])")
        env = dict(os.environ, PYTHONPATH=str(STANDIN), AIOSB_PORT_MAP=f"5671={port}")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60)
    assert done.stdout.strip() == str(port), done.stderr
