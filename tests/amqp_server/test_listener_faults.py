"""Issue 48, item 1, after review: the listener's ports under faults of the world, not
of a peer's bytes. An error of ``accept()`` (a peer that reset before it was accepted,
or anything unexpected) never ends a port's accept loop: the next client is served."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

import pytest

from aiosb.server import listener
from aiosb.server.http import serve

pytestmark = pytest.mark.timeout(60)


def _flaky_accept(monkeypatch: pytest.MonkeyPatch, error: Callable[[], OSError]) -> None:
    """The loop's ``sock_accept`` accepts the first connection, closes it and raises
    ``error()`` instead, as accept(2) does for a peer gone before it was accepted."""
    loop = asyncio.get_running_loop()
    real = loop.sock_accept
    failed = False

    async def flaky(sock: socket.socket) -> tuple[socket.socket, object]:
        nonlocal failed
        if not failed:
            failed = True
            conn, _ = await real(sock)
            conn.close()
            raise error()
        return await real(sock)

    monkeypatch.setattr(loop, "sock_accept", flaky)


async def _served(url: str) -> int:
    """The status of an unsigned GET at ``url``'s port (401: served)."""
    host_port = url.split("://", 1)[1]
    host, port = host_port.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /$Resources/queues HTTP/1.1\r\nHost: localhost\r\n\r\n")
        async with asyncio.timeout(10):
            status = await reader.readline()
        return int(status.split()[1])
    finally:
        writer.close()


@pytest.mark.parametrize("error", [
    lambda: ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort"),
    lambda: OSError(errno.EPROTO, "Protocol error"),
    lambda: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
], ids=["ECONNABORTED", "EPROTO", "ECONNRESET"])
async def test_a_peer_lost_before_accept_leaves_the_port_accepting(
        monkeypatch: pytest.MonkeyPatch, error: Callable[[], OSError]):
    """#48 review 4: accept(2) reports a peer's errors (ECONNABORTED, EPROTO, ...) for
    that connection alone; the port accepts the next client at once."""
    _flaky_accept(monkeypatch, error)
    async with serve(root="ns") as http:
        host_port = http.url.split("://", 1)[1].rsplit(":", 1)
        _, writer = await asyncio.open_connection(host_port[0], int(host_port[1]))
        writer.close()  # the client that is gone when accept() returns
        await asyncio.sleep(0.1)
        assert await _served(http.url) == 401


async def test_an_unexpected_accept_error_is_logged_and_the_port_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """#48 review 4: an error no peer causes is logged (not swallowed where nobody
    looks), and the port accepts again after ACCEPT_BACKOFF_SECONDS."""
    monkeypatch.setattr(listener, "ACCEPT_BACKOFF_SECONDS", 0.1)
    _flaky_accept(monkeypatch, lambda: OSError(errno.EINVAL, "Invalid argument"))
    with caplog.at_level(logging.ERROR, logger="aiosb.server.listener"):
        async with serve(root="ns") as http:
            host_port = http.url.split("://", 1)[1].rsplit(":", 1)
            _, writer = await asyncio.open_connection(host_port[0], int(host_port[1]))
            writer.close()
            await asyncio.sleep(0.1)
            assert await _served(http.url) == 401
    assert any("accept failed" in r.getMessage() and "Invalid argument" in r.getMessage()
               for r in caplog.records)
