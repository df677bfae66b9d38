"""Issue 37, the security review of the explorer: who may sign in over which channel,
a guesser slowed down per client address (and, since #48, key name:
test_explorer_edges.py), the log of sign-ins and changes, the cap on
event streams, and a bug answered as JSON with the explorer's headers. In process:
the server's application under aiohttp's test server, a client address or scheme
played by a middleware where the test needs one; and, where this machine has an
address besides loopback, over the real network."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from playwright.sync_api import expect

import aiosb
from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.bridge import Bridge
from aiosb.errors import InvalidArgument
from aiosb.server import explorer as _explorer
from aiosb.server import tls as _tls
from aiosb.server.explorer import _sign_in as _explorer_auth
from aiosb.server.http import EmulatorServer, serve
from aiosb.server.process import ServerProcess

from .conftest import READER, READER_KEY, unique

pytestmark = pytest.mark.timeout(60)

SECURITY_HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options",
                    "Referrer-Policy")


@web.middleware
async def played(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """The client address and scheme the test plays (X-Test-Peer, X-Test-Scheme)."""
    return await handler(request.clone(
        remote=request.headers.get("X-Test-Peer", request.remote),
        scheme=request.headers.get("X-Test-Scheme", request.scheme)))


class Client:
    """A page of the explorer, as seen from ``peer`` over ``scheme``."""

    def __init__(self, http: TestClient, peer: str = "127.0.0.1", scheme: str = "http"
                 ) -> None:
        self.http = http
        self.played = {"X-Test-Peer": peer, "X-Test-Scheme": scheme}
        self.cookie = ""
        self.csrf = ""

    async def call(self, method: str, name: str, body: Any = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        sent = {**self.played, **(headers or {})}
        if self.cookie:
            sent["Cookie"] = self.cookie
        if self.csrf:
            sent["X-Aiosb-Csrf"] = self.csrf
        async with self.http.request(method, f"/explorer/api/{name}", json=body,
                                     headers=sent) as answer:
            return answer.status, await answer.json(), answer.headers

    async def sign_in(self, key_name: str = DEV_KEY_NAME, key: str = DEV_KEY
                      ) -> tuple[int, Any, Any]:
        status, body, headers = await self.call(
            "POST", "signin", {"key_name": key_name, "key": key},
            headers={"X-Aiosb-Explorer": "1"})
        if status == 200:
            self.cookie = headers["Set-Cookie"].split(";", 1)[0]
            self.csrf = body["csrf"]
        return status, body, headers


def explorer_of(server: EmulatorServer) -> _explorer.Explorer:
    """The explorer the server serves (its one site, #49)."""
    (site,) = server.sites
    assert isinstance(site, _explorer.Explorer)
    return site


@contextlib.asynccontextmanager
async def running(log: bool) -> AsyncIterator[tuple[TestClient, EmulatorServer]]:
    """The server's application (the explorer, the server's key and a Listen key)
    under aiohttp's test server, on the running loop."""
    server = EmulatorServer(sites=[_explorer.Explorer], log_requests=log,
                            keys={READER: (READER_KEY, ["Listen"])})
    app = server.app()
    app.middlewares.append(played)
    async with TestClient(TestServer(app), cookie_jar=aiohttp.DummyCookieJar()) as http:
        yield http, server


def in_process(bridge: Bridge, test: Callable[[TestClient, EmulatorServer], Awaitable[None]],
               *, log: bool = False) -> None:
    """Run ``test`` against the server in process, on the bridge's loop (the browser
    tests' Playwright holds this thread's)."""

    async def whole() -> None:
        async with running(log) as (http, server):
            await test(http, server)

    bridge.run(whole(), timeout=50)


def test_over_plain_http_only_this_machine_may_sign_in(bridge: Bridge) -> None:
    """Review finding 2: the sign-in carries the key itself; over plain HTTP from
    another machine it would cross the network readable. Over HTTPS anyone may."""
    async def test(http: TestClient, server: EmulatorServer) -> None:
        for peer in ("127.0.0.1", "127.5.6.7", "::1", "::ffff:127.0.0.1"):
            status, body, headers = await Client(http, peer).sign_in()
            assert status == 200, (peer, body)
        for peer in ("192.0.2.9", "::ffff:192.0.2.9", "2001:db8::1", "10.0.0.1"):
            status, body, headers = await Client(http, peer).sign_in()
            assert status == 403, (peer, body)
            assert "--tls" in body["error"] and "server's own machine" in body["error"]
            assert all(h in headers for h in SECURITY_HEADERS)
        status, _, headers = await Client(http, "192.0.2.9", "https").sign_in()
        assert status == 200 and "Secure" in headers["Set-Cookie"]

    in_process(bridge, test)


def _other_address() -> str | None:
    """An address of this machine's other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: a route is looked up
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_over_the_real_network_plain_http_is_refused_and_https_is_not(
    tmp_path: Path, bridge: Bridge,
) -> None:
    """The same, with no test double: a server on every interface, reached at this
    machine's own non-loopback address."""
    address = _other_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")
    bridge.run(_over_the_network(address, tmp_path), timeout=50)


async def _over_the_network(address: str, tmp_path: Path) -> None:
    signin = {"key_name": DEV_KEY_NAME, "key": DEV_KEY}
    header = {"X-Aiosb-Explorer": "1"}
    async with aiohttp.ClientSession() as session:
        async with serve("0.0.0.0", sites=[_explorer.Explorer]) as plain:
            url = plain.url.replace("0.0.0.0", address)
            async with session.post(f"{url}/explorer/api/signin", json=signin,
                                    headers=header) as answer:
                assert answer.status == 403
                assert "--tls" in (await answer.json())["error"]
            local = plain.url.replace("0.0.0.0", "127.0.0.1")
            async with session.post(f"{local}/explorer/api/signin", json=signin,
                                    headers=header) as answer:
                assert answer.status == 200
        cert, key = _tls.self_signed(tmp_path)
        async with serve("0.0.0.0", sites=[_explorer.Explorer],
                         ssl_context=_tls.context(cert, key)) as secure:
            url = secure.url.replace("0.0.0.0", address)
            async with session.post(f"{url}/explorer/api/signin", json=signin,
                                    headers=header, ssl=False) as answer:
                assert answer.status == 200
                assert "Secure" in answer.headers["Set-Cookie"]


def test_the_guessers_remembered_are_bounded() -> None:
    throttle = _explorer_auth.Throttle(clock=lambda: 5.0)
    for n in range(_explorer_auth.CLIENTS_KEPT + 100):
        throttle.failed(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}", DEV_KEY_NAME)
    assert len(throttle) == _explorer_auth.CLIENTS_KEPT


def test_sign_ins_and_changes_are_logged_without_the_key(
    bridge: Bridge, caplog: pytest.LogCaptureFixture,
) -> None:
    """Review finding 5: a sign-in, refused or not, and every change go to the access
    log with the key's name and the client's address, never the key."""
    async def test(http: TestClient, server: EmulatorServer) -> None:
        caplog.set_level(logging.INFO, logger="aiosb.server.requests")
        page = Client(http, "127.0.0.9")
        assert (await page.sign_in(READER, "notTheReaderKey="))[0] == 401
        assert (await page.sign_in())[0] == 200
        assert (await page.call("GET", "me"))[0] == 200  # a read: not logged
        await page.call("POST", "send", {"ns": "logged", "path": "nowhere", "body": "x"})
        lines = [r.getMessage() for r in caplog.records if r.name == "aiosb.server.requests"]
        assert len(lines) == 3, lines
        assert "127.0.0.9 POST /explorer/api/signin 401" in lines[0] and repr(READER) in lines[0]
        assert "127.0.0.9 POST /explorer/api/signin 200" in lines[1]
        assert repr(DEV_KEY_NAME) in lines[1]
        assert "POST /explorer/api/send" in lines[2] and "logged/nowhere" in lines[2]
        text = "\n".join(lines)
        assert DEV_KEY not in text and "notTheReaderKey" not in text

    in_process(bridge, test, log=True)


def test_quiet_logs_nothing(bridge: Bridge, caplog: pytest.LogCaptureFixture) -> None:
    async def test(http: TestClient, server: EmulatorServer) -> None:
        caplog.set_level(logging.INFO, logger="aiosb.server.requests")
        assert (await Client(http).sign_in())[0] == 200
        assert not [r for r in caplog.records if r.name == "aiosb.server.requests"]

    in_process(bridge, test)


def test_event_streams_are_capped_and_end_at_sign_out(
    bridge: Bridge, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review finding 6: past MAX_STREAMS open streams, another is refused with 503;
    a stream ends, saying so, when its session is signed out."""
    async def test(http: TestClient, server: EmulatorServer) -> None:
        monkeypatch.setattr(_explorer, "MAX_STREAMS", 2)
        page = Client(http)
        await page.sign_in()
        headers = {**page.played, "Cookie": page.cookie}
        first = await http.get("/explorer/api/events", headers=headers)
        second = await http.get("/explorer/api/events", headers=headers)
        for stream in (first, second):
            assert stream.status == 200
            assert (await stream.content.readline()).startswith(b"data: ")
        status, body, answered = await page.call("GET", "events")
        assert status == 503 and "live pages" in body["error"]
        assert answered["Retry-After"] and all(h in answered for h in SECURITY_HEADERS)
        second.close()
        for _ in range(100):  # the server sees the hang-up at its next write
            if explorer_of(server)._streams < 2:
                break
            await asyncio.sleep(0.05)
        third = await http.get("/explorer/api/events", headers=headers)
        assert third.status == 200
        assert (await page.call("POST", "signout", {}))[0] == 200
        for stream in (first, third):
            seen = b""
            while b"event: signedout" not in seen:
                line = await asyncio.wait_for(stream.content.readline(), 5)
                assert line, "the stream ended without saying why"
                seen += line
            stream.close()

    in_process(bridge, test)


def test_a_bug_is_a_json_500_with_the_headers_and_one_log_line(
    bridge: Bridge, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Review finding 3: whatever escapes a handler is answered as every explorer
    answer is (JSON, the security headers), and logged in one line, no traceback."""
    async def test(http: TestClient, server: EmulatorServer) -> None:

        async def broken(ns: Any, args: Any) -> Any:
            raise KeyError("a bug")

        monkeypatch.setitem(_explorer._ROUTES, ("GET", "peek"), (("Listen",), broken))
        page = Client(http)
        await page.sign_in()
        async with aiosb.connect(f"{http.make_url('/buggy')}") as namespace:
            await namespace.create_queue("orders")
        caplog.set_level(logging.ERROR, logger="aiosb.server")
        status, body, headers = await page.call("GET", "peek?ns=buggy&path=orders")
        assert status == 500 and body == {"error": "internal error in the explorer."}
        assert all(h in headers for h in SECURITY_HEADERS)
        records = [r for r in caplog.records if r.name == "aiosb.server"]
        assert len(records) == 1 and records[0].exc_info is None
        assert "KeyError" in records[0].getMessage()

    in_process(bridge, test)


def test_a_whole_number_argument_too_large_is_invalid_not_a_crash() -> None:
    """Review finding 3: ``int(inf)`` raises OverflowError; it is an InvalidArgument."""
    for value in (float("inf"), float("-inf"), float("nan"), "1e400", 10**400):
        with pytest.raises(InvalidArgument, match="count"):
            _explorer._int({"count": value}, "count", 20, 500)


def test_the_page_of_a_key_without_manage_shows_no_settings_rules_or_faults(
    page: Any, sign_in: Any, server: ServerProcess, bridge: Bridge,
) -> None:
    """Review finding 1, in the browser: a Listen key's page shows the entities and
    their counts, says that settings, rules and faults are for Manage keys, and
    offers no panel it would have nothing to fill with (the page throws nothing)."""
    ns = unique("listener")

    async def making() -> None:
        async with aiosb.connect(f"{server.url}/{ns}") as namespace:
            await namespace.create_queue("orders", user_metadata="secret-metadata")
            await namespace.create_topic("events")
            await namespace.create_subscription("events", "eu")
            async with namespace.sender("orders") as sender:
                await sender.send([aiosb.Message(b"x"), aiosb.Message(b"y")])

    bridge.run(making(), timeout=20)
    sign_in(READER, READER_KEY)
    page.click(f"[data-entity='{ns}/orders']")
    expect(page.locator("#counts [data-count=active] .n")).to_have_text("2")
    expect(page.locator("#manage-only")).to_contain_text("has no Manage right")
    assert page.locator("#settings").count() == 0
    assert "secret-metadata" not in page.content()
    page.click(f"[data-entity='{ns}/events/subscriptions/eu']")
    expect(page.locator("#tab-overview")).to_be_visible()
    assert page.locator("#tab-rules").count() == 0
    page.click(f"[data-namespace='{ns}']")
    expect(page.locator("#manage-only")).to_contain_text("faults are not shown")
    assert page.locator("#fault-list").count() == 0
    page.click("#signout")
    sign_in()
    page.click(f"[data-entity='{ns}/orders']")
    expect(page.locator("#settings")).to_contain_text("secret-metadata")
    page.click(f"[data-entity='{ns}/events/subscriptions/eu']")
    page.click("#tab-rules")
    expect(page.locator("#rule-rows")).to_contain_text("$Default")
    page.click(f"[data-namespace='{ns}']")
    expect(page.locator("#fault-list")).to_contain_text("None")
