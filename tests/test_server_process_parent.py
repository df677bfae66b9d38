"""#51 review: a test run killed without its teardown (a CI job's timeout sends SIGTERM
or SIGKILL; pytest-timeout's thread method calls ``os._exit``) left the ``aiosb serve``
that ``ServerProcess`` (and so the ``aiosb_server`` fixture) had started running, holding
its ports, memory and temporary folders. The server now ends with the process that
started it: its standard input is a pipe from that process, and ``aiosb serve
--stop-when-stdin-closes`` stops when the pipe closes, as it does when its holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)

PARENT = """
import sys, time
from aiosb.server.process import ServerProcess
server = ServerProcess().start()
print(server.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_server_ends_with_the_process_that_started_it(how):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert parent.stdout is not None
        server = int(parent.stdout.readline())
        assert alive(server)
        parent.send_signal(how)
        parent.wait(10)
        deadline = time.monotonic() + 30
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server), f"aiosb serve (pid {server}) outlived its parent"
    finally:
        parent.kill()
        parent.wait(10)
        with __import__("contextlib").suppress(NameError, ProcessLookupError):
            os.kill(server, signal.SIGKILL)
