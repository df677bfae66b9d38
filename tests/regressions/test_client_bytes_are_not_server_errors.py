"""#48: a client's malformed bytes are the client's error, answered 400, not the
server's: they are never logged at ERROR with a traceback (an unauthenticated client
could fill the log), on the first request of a connection or any later one."""

import asyncio
import logging

import pytest

from aiosb.server.http import serve

pytestmark = pytest.mark.timeout(30)


async def test_a_malformed_request_after_the_first_is_not_logged_as_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serve("127.0.0.1", 0, log_requests=False) as served:
        port = int(served.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /nothing HTTP/1.1\r\nHost: localhost\r\n\r\n")
        first = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in first.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(b"GARBAGE\x00\x01 / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        second = await reader.read(200)
        writer.close()
        await asyncio.sleep(0.1)
    assert second.startswith(b"HTTP/1.1 400") or second.startswith(b"HTTP/1.0 400"), second
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, [(r.name, r.levelname, r.getMessage()) for r in loud]
