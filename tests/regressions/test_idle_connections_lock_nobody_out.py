"""Issue 18, item 11: thousands of idle connections do not lock a signed client out; and
issue 48: not when they come on the AMQP port either (one connection budget for every
port, idle connections closed first to make room)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading

import pytest

from aiosb.bridge import Bridge

pytestmark = pytest.mark.timeout(120)


def _serve_with_few_descriptors(limit: int) -> tuple[subprocess.Popen[str], str]:
    # The limit is lowered in the child itself (no preexec_fn: this process has threads).
    code = (
        "import resource, runpy, sys\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))\n"
        "sys.argv = ['aiosb', 'serve', '--port', '0', '--amqp-port', '0', '--amqps-port', '0']\n"
        "runpy.run_module('aiosb.cli', run_name='__main__')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert "listening on" in line, line + proc.stdout.read()  # type: ignore[union-attr]
    return proc, line.rsplit(" ", 1)[-1].strip()


def _amqp_port(proc: subprocess.Popen[str]) -> int:
    for line in proc.stdout:  # type: ignore[union-attr]
        if "AMQP 1.0 (the official SDKs) on port " in line:
            return int(line.split(" on port ", 1)[1].split(",", 1)[0])
    raise AssertionError("no AMQP port in the banner")


@pytest.mark.parametrize("flooded", ["http", "amqp"])
def test_two_thousand_idle_connections_do_not_stop_a_signed_request(flooded):
    """Before #48 the AMQP port had no cap of its own and shared none: a flood there
    took every descriptor, and the HTTP port could accept nothing until the AMQP
    handshake deadline (30 s) let them go."""
    proc, url = _serve_with_few_descriptors(256)
    port = int(url.rsplit(":", 1)[1]) if flooded == "http" else _amqp_port(proc)
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    idle: list[socket.socket] = []
    try:
        for _ in range(2000):  # connect and say nothing, as a hostile client does
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            idle.append(s)
        with Bridge() as bridge, bridge.connect(f"{url}/busy", operation_timeout=10) as ns:
            ns.create_queue("q")
            assert ns.queue_exists("q")
    finally:
        for s in idle:
            with contextlib.suppress(OSError):
                s.close()
        proc.terminate()
        proc.wait(10)
