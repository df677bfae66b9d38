"""The HTTP transport's own HTTP/1.1 client (aiosb.transport.http._h1, #16), against a server
scripted byte by byte: how answers end (a length, chunks, the connection's close), when
a connection is used again, and what a failure at each step becomes. The transport's
behaviour against the emulator server is the conformance suite's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from yarl import URL

import aiosb
from aiosb import errors
from aiosb.transport.http._h1 import Broken, ConnectFailed, Pool

#: An answer script: given the request (head and body) and the connection's number,
#: write to the writer; return False to close the connection after it.
Script = Callable[[bytes, bytes, int, asyncio.StreamWriter], Awaitable[bool]]


class Scripted:
    """A TCP server answering each request with ``script``; it counts connections and
    keeps every request it read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.readers: dict[int, asyncio.StreamReader] = {}
        self.server: asyncio.Server | None = None
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        self.readers[number] = reader
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                if not await self.script(head, body, number, writer):
                    return
                await writer.drain()
        finally:
            self.open -= 1
            writer.close()

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def ok(body: bytes = b"hello", extra: bytes = b"") -> Script:
    async def script(head: bytes, _body: bytes, _n: int, writer: asyncio.StreamWriter) -> bool:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra)
        writer.write(head + body)
        return True
    return script


@pytest.fixture
async def pools() -> AsyncIterator[list[Pool]]:
    made: list[Pool] = []
    yield made
    for pool in made:
        await pool.close()


def pool_for(pools: list[Pool], url: str, **options: float) -> Pool:
    pool = Pool(URL(url), **options)  # type: ignore[arg-type]
    pools.append(pool)
    return pool


async def test_a_kept_alive_connection_serves_every_request_in_turn(pools):
    async with Scripted(ok()) as server:
        pool = pool_for(pools, server.url)
        for _ in range(5):
            answer = await pool.request("POST", URL(f"{server.url}/q/x?a=1"), {"X-A": "b"}, b"hi")
            assert (answer.status, answer.reason, answer.body) == (200, "OK", b"hello")
        assert server.connections == 1
        head, body = server.requests[0]
        assert head.startswith(b"POST /q/x?a=1 HTTP/1.1\r\n")
        assert b"\r\nX-A: b\r\n" in head and b"\r\nContent-Length: 2\r\n" in head
        assert f"\r\nHost: {URL(server.url).host}:{URL(server.url).port}\r\n".encode() in head
        assert body == b"hi"


async def test_a_chunked_answer_is_read_whole_and_its_headers_kept(pools):
    async def chunked(head, body, n, writer):
        writer.write(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n"
                     b"Broker-Thing: one\r\nbroker-thing: two\r\n\r\n")
        await writer.drain()
        writer.write(b"3\r\nabc\r\n")
        await writer.drain()
        writer.write(b"2\r\nde\r\n0\r\n\r\n")
        return True

    async with Scripted(chunked) as server:
        pool = pool_for(pools, server.url)
        answer = await pool.request("GET", URL(server.url), {})
        again = await pool.request("GET", URL(server.url), {})
        assert (answer.status, answer.body) == (201, b"abcde")
        assert answer.headers.getall("BROKER-THING") == ["one", "two"]  # case-insensitive
        assert again.body == b"abcde" and server.connections == 1
        head, _ = server.requests[0]
        assert b"Content-Length" not in head  # a GET without a body says no length


async def test_an_answer_that_ends_with_its_connection_is_read_whole_and_not_reused(pools):
    async def until_close(head, body, n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        return False

    async with Scripted(until_close) as server:
        pool = pool_for(pools, server.url)
        assert (await pool.request("POST", URL(server.url), {}, b"")).body == b"all of it"
        assert (await pool.request("POST", URL(server.url), {}, b"")).body == b"all of it"
        assert server.connections == 2


async def test_connection_close_from_the_server_opens_a_new_connection(pools):
    async with Scripted(ok(extra=b"Connection: close\r\n")) as server:
        pool = pool_for(pools, server.url)
        for _ in range(3):
            assert (await pool.request("POST", URL(server.url), {}, b"")).body == b"hello"
        assert server.connections == 3


async def test_a_connection_the_server_closed_while_idle_is_not_used_again(pools):
    async def once(head, body, n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        return False  # keep-alive said, then closed: as a server's idle timeout does

    async with Scripted(once) as server:
        pool = pool_for(pools, server.url)
        await pool.request("POST", URL(server.url), {}, b"")
        await asyncio.sleep(0.05)  # the close arrives
        assert (await pool.request("POST", URL(server.url), {}, b"")).body == b"ok"
        assert server.connections == 2


async def test_a_connection_idle_past_keepalive_is_closed_not_used(pools):
    async with Scripted(ok()) as server:
        pool = pool_for(pools, server.url, keepalive=0.05)
        await pool.request("POST", URL(server.url), {}, b"")
        await pool.request("POST", URL(server.url), {}, b"")
        assert server.connections == 1
        await asyncio.sleep(0.1)
        await pool.request("POST", URL(server.url), {}, b"")
        assert server.connections == 2
        await asyncio.sleep(0.05)
        assert server.open == 1  # the stale one was closed, not dropped open


async def test_a_cancelled_request_closes_its_connection_and_the_pool_goes_on(pools):
    answer_now = asyncio.Event()

    async def slow_first(head, body, n, writer):
        if n == 1:
            await answer_now.wait()  # never, for the first connection
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % n)
        return True

    async with Scripted(slow_first) as server:
        pool = pool_for(pools, server.url)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await pool.request("POST", URL(server.url), {}, b"")
        # Not the first connection again: its late answer would be taken for this one's.
        assert (await pool.request("POST", URL(server.url), {}, b"")).body == b"2"
        assert (await pool.request("POST", URL(server.url), {}, b"")).body == b"2"
        async with asyncio.timeout(1):  # and the first was closed, not left open
            assert await server.readers[1].read() == b""


async def test_at_most_limit_requests_at_once(pools):
    async def slow(head, body, n, writer):
        await asyncio.sleep(0.02)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        return True

    async with Scripted(slow) as server:
        pool = pool_for(pools, server.url, limit=3)
        answers = await asyncio.gather(
            *(pool.request("POST", URL(server.url), {}, b"") for _ in range(12))
        )
        assert [a.status for a in answers] == [200] * 12
        assert server.most_open == 3 and server.connections == 3


@pytest.mark.parametrize("name,value", [("X-Bad", "a\r\nX-Injected: 1"), ("X\nB", "v"),
                                        ("X-Nul", "a\x00b")])
async def test_a_header_that_would_split_the_request_is_refused_before_sending(
    pools, name, value
):
    async with Scripted(ok()) as server:
        pool = pool_for(pools, server.url)
        with pytest.raises(ValueError, match="line break or a NUL"):
            await pool.request("POST", URL(server.url), {name: value}, b"")
        assert server.connections == 0


async def test_a_refused_connection_is_connect_failed_with_its_os_error(pools):
    async with Scripted(ok()) as server:
        url = server.url
    pool = pool_for(pools, url)
    with pytest.raises(ConnectFailed) as caught:
        await pool.request("POST", URL(url), {}, b"")
    assert isinstance(caught.value.os_error, ConnectionRefusedError)


@pytest.mark.parametrize("answer", [
    b"",  # closed without a word
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # closed mid-body
    b"SMTP ready\r\n\r\n",  # not HTTP
])
async def test_an_answer_cut_short_or_not_http_is_broken(pools, answer):
    async def bad(head, body, n, writer):
        writer.write(answer)
        return False

    async with Scripted(bad) as server:
        pool = pool_for(pools, server.url)
        with pytest.raises(Broken):
            await pool.request("POST", URL(server.url), {}, b"")
        # A pool with a broken connection behind it still works once the server does.
        server.script = ok()
        assert (await pool.request("POST", URL(server.url), {}, b"")).status == 200


async def test_a_closed_pool_refuses_and_fails_what_is_in_flight(pools):
    started = asyncio.Event()

    async def never(head, body, n, writer):
        started.set()
        await asyncio.sleep(3600)
        return True

    async with Scripted(never) as server:
        pool = pool_for(pools, server.url)
        pending = asyncio.ensure_future(pool.request("POST", URL(server.url), {}, b""))
        await started.wait()
        await pool.close()
        with pytest.raises(Broken):
            await pending
        with pytest.raises(Broken, match="closed"):
            await pool.request("POST", URL(server.url), {}, b"")


# -- through the transport: what each failure becomes ------------------------------------


async def test_transport_nothing_listening_then_a_server_that_went_away():
    """Never answered: EntityUnavailable at once; answered before: TransientError."""
    async with Scripted(ok()) as server:
        url = server.url
    async with aiosb.connect(f"{url}/ns", operation_timeout=1) as ns:
        with pytest.raises(errors.EntityUnavailable, match="nothing is listening"):
            await ns.queue_exists("q")
    async with Scripted(ok(b"", b"Connection: close\r\n")) as server:
        transport = aiosb.connect(f"{server.url}/ns").transport
        await transport.open()
        try:
            await transport._request("GET", "q")  # answered once
            server.server.close()
            await server.server.wait_closed()
            with pytest.raises(errors.TransientError, match="failed on the connection"):
                await transport._request("GET", "q")
        finally:
            await transport.aclose()


async def test_transport_maps_a_broken_answer_to_transient_and_a_bad_header_to_invalid():
    async def cut(head, body, n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
        return False

    async with Scripted(cut) as server:
        transport = aiosb.connect(f"{server.url}/ns").transport
        await transport.open()
        try:
            with pytest.raises(errors.TransientError, match="closed the connection"):
                await transport._request("POST", "q/messages", data=b"x")
            with pytest.raises(errors.InvalidArgument, match="line break"):
                await transport._request("POST", "q/messages", data=b"x",
                                         headers={"Content-Type": "text/plain\r\nX: 1"})
        finally:
            await transport.aclose()
        head, _ = server.requests[0]
        assert b"\r\nContent-Type: application/octet-stream\r\n" in head
        assert b"\r\nAuthorization: SharedAccessSignature " in head


async def test_an_informational_answer_is_skipped_and_an_unasked_one_breaks_the_connection(pools):
    async def informational_then_extra(head, body, n, writer):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n"
                     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra")  # asked by none
        return True

    async with Scripted(informational_then_extra) as server:
        pool = pool_for(pools, server.url)
        answer = await pool.request("POST", URL(server.url), {}, b"")
        assert (answer.status, answer.body) == (200, b"ok")
        await asyncio.sleep(0.1)  # the extra answer arrives on the idle connection
        answer = await pool.request("POST", URL(server.url), {}, b"")
        assert (answer.status, answer.body) == (200, b"ok")  # not "extra"
        assert server.connections == 2


async def test_an_ipv6_server_is_reached_with_its_host_in_brackets():
    import socket

    from aiosb.server.http import serve

    if not socket.has_ipv6:
        pytest.skip("this machine has no IPv6")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    async with serve(host="::1") as server, aiosb.connect(server.namespace_url("v6")) as ns:
        assert server.url.startswith("http://[::1]:")
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send(aiosb.Message(b"over IPv6"))
        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            assert [m.body for m in await receiver.receive(max_wait=0)] == [b"over IPv6"]


# -- what a review found (each red before its fix) ----------------------------------------


async def test_an_idempotent_request_on_a_connection_closed_under_it_goes_once_more(pools):
    """The server closed a kept-alive connection as the next request went out (read,
    never answered): a DELETE goes once more on a new connection, a POST does not (it
    may have been carried out)."""
    async def first_only(head, body, n, writer):
        if len(server.requests) > 1 and n == 1:
            return False  # the second request on the first connection: closed unanswered
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % n)
        return True

    async with Scripted(first_only) as server:
        pool = pool_for(pools, server.url)
        assert (await pool.request("DELETE", URL(server.url), {})).body == b"1"
        assert (await pool.request("DELETE", URL(server.url), {})).body == b"2"
        assert server.connections == 2
    async with Scripted(first_only) as server:
        pool = pool_for(pools, server.url)
        await pool.request("POST", URL(server.url), {}, b"")
        with pytest.raises(Broken):
            await pool.request("POST", URL(server.url), {}, b"")


async def test_a_request_still_connecting_when_the_pool_closes_fails(pools):
    async with Scripted(ok()) as server:
        pool = pool_for(pools, server.url)
        pending = asyncio.ensure_future(pool.request("POST", URL(server.url), {}, b""))
        await asyncio.sleep(0)  # in create_connection
        await pool.close()
        with pytest.raises(Broken, match="closed"):
            await pending
        await asyncio.sleep(0.05)
        assert server.requests == []


async def test_requests_say_their_length_and_ask_for_no_encoding(pools):
    async with Scripted(ok()) as server:
        pool = pool_for(pools, server.url)
        await pool.request("DELETE", URL(server.url), {})
        await pool.request("GET", URL(server.url), {})
        (delete, _), (get, _) = server.requests
        assert b"\r\nContent-Length: 0\r\n" in delete and b"Content-Length" not in get
        assert all(b"\r\nAccept-Encoding: identity\r\n" in h for h in (delete, get))


async def test_an_answer_ended_by_a_reset_is_broken_not_taken_whole(pools):
    import socket
    import struct

    async def reset(head, body, n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n\r\npartial-bo")
        await writer.drain()
        await asyncio.sleep(0.02)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return False

    async with Scripted(reset) as server:
        pool = pool_for(pools, server.url)
        with pytest.raises(Broken):
            await pool.request("POST", URL(server.url), {}, b"")


async def test_an_answer_with_too_many_header_bytes_is_broken(pools, monkeypatch):
    from aiosb.transport.http import _h1

    monkeypatch.setattr(_h1, "MAX_HEAD", 1000)
    async with Scripted(ok(extra=b"X-Big: " + b"x" * 2000 + b"\r\n")) as server:
        pool = pool_for(pools, server.url)
        with pytest.raises(Broken, match="bytes of headers"):
            await pool.request("POST", URL(server.url), {}, b"")
        server.script = ok(extra=b"X-Big: " + b"x" * 900 + b"\r\n")
        assert (await pool.request("POST", URL(server.url), {}, b"")).status == 200


@pytest.mark.parametrize("answer,error,says", [
    (b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere/q\r\nContent-Length: 0"
     b"\r\n\r\n", errors.InvalidOperation, "307 Temporary Redirect .to http://elsewhere/q.; "
     "aiosb follows no redirects"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
     errors.MessagingError, "'gzip' encoding"),
])
async def test_transport_refuses_a_redirect_or_an_encoded_answer_rather_than_take_it(
    answer, error, says
):
    """A 3xx is not success: a send answered 307 stored nothing, and returning would
    lose the message. An answer in an encoding not asked for would be misread."""
    async def script(head, body, n, writer):
        writer.write(answer)
        return True

    async with Scripted(script) as server:
        async with aiosb.connect(f"{server.url}/ns") as ns:
            async with ns.sender("q") as sender:
                with pytest.raises(error, match=says):
                    await sender.send(aiosb.Message(b"x"))
