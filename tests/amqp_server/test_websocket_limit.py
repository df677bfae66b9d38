"""Issue 48, item 1: the route of AMQP over WebSockets sits before anything checks who
sent what (the AMQP connection inside authenticates), so its message limit is what an
unauthenticated peer can make the server hold: ``MAX_MESSAGE`` (a few AMQP frames),
refused as the message's header arrives. With no limit, one 96 MiB message grew the
server by 88 MiB."""

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from aiosb.server.amqp._websocket import MAX_MESSAGE, PATH
from aiosb.server.process import ServerProcess

pytestmark = pytest.mark.timeout(90)

MIB = 1024 * 1024


def _rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _upgrade(port: int) -> socket.socket:
    """A WebSocket to ``PATH`` with the AMQP subprotocol, unsigned, as anyone may open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET {PATH} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
                 .encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        got = sock.recv(4096)
        assert got, answer
        answer += got
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


@pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                    reason="reads the server's resident memory in /proc (Linux)")
def test_an_unauthenticated_96_mib_websocket_message_costs_the_server_under_8_mib():
    size = 96 * MIB
    assert MAX_MESSAGE < size
    with ServerProcess() as server:
        port = int(server.url.rsplit(":", 1)[1])
        _upgrade(port).close()  # what a WebSocket costs anyway, paid before measuring
        time.sleep(0.5)
        before = _rss(server.pid)
        peak = [before]
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.005):
                peak.append(_rss(server.pid))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        sock = _upgrade(port)
        try:  # one binary message, masked (with a key of zeros: the bytes as they are)
            sock.sendall(bytes([0x82, 0xFF]) + struct.pack(">Q", size) + b"\0" * 4)
            chunk = b"\0" * MIB
            for _ in range(size // MIB):
                sock.sendall(chunk)
        except OSError:
            pass  # the server refused the message as its header came, and hung up
        finally:
            time.sleep(1.0)  # whatever it buffered, it has by now
            done.set()
            watcher.join()
            sock.close()
    grown = max(peak) - before
    assert grown < 8 * MIB, f"the server grew by {grown / MIB:.1f} MiB"
