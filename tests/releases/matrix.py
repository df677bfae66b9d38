"""The release matrix of #47: the everyday scenario (``scenario.py``) run by each
release of the official Python SDK that aiosb supports, against one ``aiosb serve``, in
the background of the test session (``runs_in_background``, tests/conftest.py): nearly
all of it is waiting on pip and on the scenarios.

The releases: the declared floor's line (its newest patch: ``azure-servicebus>=7.12`` in
pyproject.toml gives ``~=7.12.0``), 7.13, 7.14.3 (which Microsoft's emulator kit pins)
and the newest 7.x, each resolved by pip and run by the Python of a venv of its own
(``venvs.py``, cached between runs in ``.venv-sdk/``). After it, the same venv runs
``transport_scenario.py``: aiosb's own AMQP transport on that release (the worktree on
the venv's path: ``import aiosb`` along the transport's path needs nothing the venv
lacks), a message with typed properties sent and received back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiosb.server.process import ServerProcess

from . import venvs

__all__ = ["MatrixRun", "RELEASES", "prefix", "typed_queue"]

SCENARIO = Path(__file__).with_name("scenario.py")
TRANSPORT_SCENARIO = Path(__file__).with_name("transport_scenario.py")
#: seconds: the longest one scenario may take.
SCENARIO_SECONDS = 180


def _floor() -> tuple[str, str]:
    """The declared floor's line (``7.12``) and its requirement (``~=7.12.0``), from
    pyproject.toml's ``amqp`` extra."""
    project = tomllib.loads((venvs.ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["optional-dependencies"]["amqp"]:
        found = re.fullmatch(r"azure-servicebus>=(\d+)\.(\d+)(\.\d+)?", requirement.strip())
        if found:
            line = f"{found[1]}.{found[2]}"
            return line, f"azure-servicebus~={line}.0"
    raise AssertionError("pyproject.toml's amqp extra declares no azure-servicebus floor")


_LINE, _FLOOR = _floor()
#: Each release the matrix runs: its name (the test's id) and what pip resolves it from.
RELEASES = {
    f"floor-{_LINE}": _FLOOR,
    "7.13": "azure-servicebus~=7.13.0",
    "7.14.3": "azure-servicebus==7.14.3",
    "newest-7": "azure-servicebus<8",
}


class MatrixRun:
    """The scenario by every release in :data:`RELEASES`, in a thread started when the
    session has collected the tests that wait for it (:meth:`start`, idempotent)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._children: list[subprocess.Popen[str]] = []
        self._server: ServerProcess | None = None
        #: Each release's name: its scenario's report, or ``{"error": why}``.
        self.reports: dict[str, dict[str, Any]] = {}
        #: Each release's name: its transport scenario's report, or ``{"error": why}``.
        self.transport_reports: dict[str, dict[str, Any]] = {}

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="release-matrix",
                                                daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        for child in list(self._children):
            if child.poll() is None:
                child.kill()
        if self._server is not None:
            self._server.stop()

    def report(self, name: str, timeout: float, *, transport: bool = False) -> dict[str, Any]:
        """What release ``name``'s scenario (its ``transport`` scenario) reported, once
        the matrix has run."""
        self.start()
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the release matrix took over {timeout} s"
        reports = self.transport_reports if transport else self.reports
        return reports.get(name, {"error": "the matrix ended without a report"})

    def _run(self) -> None:
        with ThreadPoolExecutor(len(RELEASES)) as pool:
            made = dict(zip(RELEASES, pool.map(self._venv, RELEASES.values()), strict=True))
        tls = tempfile.mkdtemp(prefix="aiosb-matrix-")
        try:
            with ServerProcess(args=["--tls-dir", tls]) as server:
                self._server = server
                asyncio.run(_typed_queues(server))
                with ThreadPoolExecutor(len(RELEASES)) as pool:
                    done = pool.map(lambda item: self._scenario(server, *item), made.items())
                    self.reports.update(zip(made, done, strict=True))
                    done = pool.map(lambda item: self._transport(server, *item), made.items())
                    self.transport_reports.update(zip(made, done, strict=True))
        except Exception as exc:  # each test says it
            for name in RELEASES:
                self.reports.setdefault(name, {"error": f"aiosb serve: {exc!r}"})
                self.transport_reports.setdefault(name, {"error": f"aiosb serve: {exc!r}"})
        finally:
            shutil.rmtree(tls, ignore_errors=True)

    @staticmethod
    def _venv(requirement: str) -> tuple[str, Path] | str:
        """The release ``requirement`` resolves to and its venv's Python, or why not."""
        try:
            release = venvs.newest(requirement)
            return release, venvs.python_of(release)
        except Exception as exc:  # the test says it
            return f"no venv for {requirement}: {exc}"

    def _scenario(self, server: ServerProcess, name: str,
                  made: tuple[str, Path] | str) -> dict[str, Any]:
        return self._child(made, [str(SCENARIO), server.amqp_connection_string,
                                  server.certificate, prefix(name)])

    def _transport(self, server: ServerProcess, name: str,
                   made: tuple[str, Path] | str) -> dict[str, Any]:
        return self._child(made, [str(TRANSPORT_SCENARIO), server.amqp_connection_string,
                                  server.amqps_connection_string, server.certificate,
                                  typed_queue(name)], aiosb=True)

    def _child(self, made: tuple[str, Path] | str, args: list[str], *,
               aiosb: bool = False) -> dict[str, Any]:
        """What a scenario (``args``: its script and arguments) run by the Python of the
        venv ``made`` reported; with the worktree on its path when it uses ``aiosb``."""
        if isinstance(made, str):
            return {"error": made}
        release, python = made
        if self._stopped:
            return {"error": "stopped", "release": release}
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if aiosb:
            env["PYTHONPATH"] = str(venvs.ROOT)
        child = subprocess.Popen(
            [str(python), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env,
        )
        self._children.append(child)
        try:
            out, err = child.communicate(timeout=SCENARIO_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        try:
            found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            found = {"error": f"no report (exit {child.returncode}): {(out + err)[-3000:]}"}
        found.setdefault("release", release)
        return found


async def _typed_queues(server: ServerProcess) -> None:
    """The queue of each release's transport scenario, made over HTTP in the namespace
    AMQP serves."""
    import aiosb

    async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
        for name in RELEASES:
            await ns.create_queue(typed_queue(name))


def typed_queue(name: str) -> str:
    """The queue of release ``name``'s transport scenario."""
    return prefix(name) + "-typed"


def prefix(name: str) -> str:
    """The prefix of the entities the scenario of release ``name`` (a key of
    :data:`RELEASES`) makes: its own, even where two names resolve to one release."""
    return "m-" + name.replace(".", "-")
