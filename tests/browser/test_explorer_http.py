"""Issue 37: the explorer's API refuses what the rest of the server refuses: a request
without a valid key, a key without the right, and a request another site's page makes.
Plain HTTP, no browser."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

import aiosb
from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.bridge import Bridge
from aiosb.server.explorer._sign_in import SESSIONS_PER_KEY
from aiosb.server.process import ServerProcess

from .conftest import READER, READER_KEY, WRITER, WRITER_KEY, unique

pytestmark = pytest.mark.timeout(60)


class Page:
    """What a browser page of the explorer sends: its cookie, its CSRF header, its own
    origin (``origin`` another one, to play another site's page)."""

    def __init__(self, url: str, context: ssl.SSLContext | None = None) -> None:
        self.url = url.rstrip("/")
        self.cookie = ""
        self.csrf = ""
        self.origin = self.url
        self.context = context

    def call(self, method: str, name: str, body: Any = None, *, csrf: bool = True,
             headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        sent = {"Origin": self.origin, **(headers or {})}
        if self.cookie:
            sent["Cookie"] = self.cookie
        if csrf and self.csrf:
            sent["X-Aiosb-Csrf"] = self.csrf
        data = None
        if body is not None:  # bytes: sent as they are
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(f"{self.url}/explorer/api/{name}", data=data,
                                         method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as answer:
                return answer.status, json.loads(answer.read() or b"{}"), answer.headers
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}"), exc.headers

    def first_event(self) -> dict[str, Any]:
        """The first snapshot of the live stream (``GET /explorer/api/events``)."""
        request = urllib.request.Request(f"{self.url}/explorer/api/events", headers={
            "Cookie": self.cookie, "Origin": self.origin})
        with urllib.request.urlopen(request, timeout=10) as stream:
            for line in stream:
                if line.startswith(b"data: "):
                    return dict(json.loads(line[len(b"data: "):]))
        raise AssertionError("the stream ended without a snapshot")

    def sign_in(self, key_name: str, key: str) -> tuple[int, Any, Any]:
        status, body, headers = self.call(
            "POST", "signin", {"key_name": key_name, "key": key},
            headers={"X-Aiosb-Explorer": "1"})
        if status == 200:
            self.cookie = headers["Set-Cookie"].split(";", 1)[0]
            self.csrf = body["csrf"]
        return status, body, headers


def make_queue(bridge: Bridge, server: ServerProcess, ns: str, queue: str,
               messages: int = 0) -> None:
    async def making() -> None:
        async with aiosb.connect(f"{server.url}/{ns}") as namespace:
            await namespace.create_queue(queue)
            if messages:
                async with namespace.sender(queue) as sender:
                    await sender.send([aiosb.Message(b"m%d" % i) for i in range(messages)])

    bridge.run(making(), timeout=20)


def test_nothing_without_a_valid_key(server: ServerProcess) -> None:
    """No session: every API call is 401; a wrong key, or a key name the server does not
    have, signs nobody in."""
    page = Page(server.url)
    for method, name in (("GET", "me"), ("GET", "events"), ("GET", "peek?ns=x&path=q"),
                         ("POST", "send"), ("POST", "purge"), ("POST", "faults")):
        status, body, _ = page.call(method, name, {} if method == "POST" else None)
        assert status == 401, (method, name, body)
        assert "sign in" in body["error"]
    assert page.sign_in(DEV_KEY_NAME, DEV_KEY[:-2] + "A=")[0] == 401
    assert page.sign_in("nobody", DEV_KEY)[0] == 401
    assert page.sign_in(READER, WRITER_KEY)[0] == 401  # another key's secret
    page.cookie, page.csrf = "aiosb_explorer=made-up", "made-up"
    assert page.call("GET", "me")[0] == 401


def test_the_session_cookie_is_httponly_samesite_strict_and_expires(
    server: ServerProcess,
) -> None:
    page = Page(server.url)
    status, body, headers = page.sign_in(DEV_KEY_NAME, DEV_KEY)
    assert status == 200
    assert body["rights"] == ["Listen", "Manage", "Send"]
    cookie = headers["Set-Cookie"]
    for part in ("HttpOnly", "SameSite=Strict", "Path=/explorer", "Max-Age=28800"):
        assert part in cookie
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    assert DEV_KEY not in json.dumps(body)
    assert page.call("GET", "me")[0] == 200
    assert page.call("POST", "signout", {})[0] == 200
    assert page.call("GET", "me")[0] == 401  # signed out is signed out, cookie or not


def test_rights_apply_listen_peeks_but_cannot_send_or_purge(
    server: ServerProcess, bridge: Bridge
) -> None:
    ns, queue = unique("rights"), "orders"
    make_queue(bridge, server, ns, queue, messages=2)
    reader = Page(server.url)
    assert reader.sign_in(READER, READER_KEY)[1]["rights"] == ["Listen"]
    status, body, _ = reader.call("GET", f"peek?ns={ns}&path={queue}&sub=active")
    assert status == 200 and len(body["messages"]) == 2
    for name, args in (("send", {"body": "x"}), ("purge", {"sub": "active"}),
                       ("resubmit", {"sequence_numbers": None}),
                       ("faults", {"entity": queue})):
        status, body, _ = reader.call("POST", name, {"ns": ns, "path": queue, **args})
        assert status == 403, (name, body)
        assert "has Listen rights" in body["error"]
    writer = Page(server.url)
    assert writer.sign_in(WRITER, WRITER_KEY)[1]["rights"] == ["Send"]
    assert writer.call("POST", "send", {"ns": ns, "path": queue, "body": "w"})[0] == 200
    assert writer.call("GET", f"peek?ns={ns}&path={queue}")[0] == 403
    assert writer.call("POST", "purge", {"ns": ns, "path": queue, "sub": "active"})[0] == 403
    owner = Page(server.url)
    owner.sign_in(DEV_KEY_NAME, DEV_KEY)
    status, body, _ = owner.call("POST", "purge", {"ns": ns, "path": queue, "sub": "active"})
    assert (status, body) == (200, {"purged": 3})


def test_another_sites_requests_are_refused(server: ServerProcess, bridge: Bridge) -> None:
    """A change from another origin, a change without the page's CSRF token, a fetch
    the browser marks cross-site, and a sign-in another page posts: all refused, and
    nothing is sent."""
    ns, queue = unique("csrf"), "orders"
    make_queue(bridge, server, ns, queue)
    page = Page(server.url)
    page.sign_in(DEV_KEY_NAME, DEV_KEY)
    send = {"ns": ns, "path": queue, "body": "forged"}
    page.origin = "http://evil.example"
    status, body, _ = page.call("POST", "send", send)
    assert status == 403 and "evil.example" in body["error"]
    assert page.call("GET", "me")[0] == 403  # reads too: another site reads nothing
    page.origin = server.url
    status, body, _ = page.call("POST", "send", send, csrf=False)
    assert status == 403 and "X-Aiosb-Csrf" in body["error"]
    page.csrf, token = "not-the-token", page.csrf
    assert page.call("POST", "send", send)[0] == 403
    page.csrf = token
    status, _, _ = page.call("POST", "send", send, headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403
    assert page.call("GET", f"peek?ns={ns}&path={queue}")[1]["messages"] == []
    stranger = Page(server.url)
    stranger.origin = "http://evil.example"
    assert stranger.sign_in(DEV_KEY_NAME, DEV_KEY)[0] == 403
    stranger.origin = server.url  # a form post cannot add the explorer's header
    status, body, _ = stranger.call("POST", "signin",
                                    {"key_name": DEV_KEY_NAME, "key": DEV_KEY})
    assert status == 403 and "X-Aiosb-Explorer" in body["error"]


def test_the_page_is_served_with_a_policy_that_runs_its_own_script_only(
    server: ServerProcess,
) -> None:
    with urllib.request.urlopen(f"{server.url}/explorer/", timeout=10) as answer:
        policy = answer.headers["Content-Security-Policy"]
        html = answer.read().decode()
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert '<script src="explorer.js"' in html
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{server.url}/explorer/conftest.py", timeout=10)
    assert missing.value.code == 404


def test_over_tls_the_cookie_is_secure(tmp_path: Any) -> None:
    with ServerProcess(args=["--no-amqp", "--tls", "--tls-dir", str(tmp_path)]) as server:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(tmp_path / "aiosb-cert.pem"))
        page = Page(server.url.replace("127.0.0.1", "localhost"), context)
        status, _, headers = page.sign_in(DEV_KEY_NAME, DEV_KEY)
        assert status == 200
        assert "Secure" in headers["Set-Cookie"]


def test_a_change_from_the_page_is_on_disk_before_its_answer(tmp_path: Any) -> None:
    """R-1: in durable mode a send from the explorer is kept as any acknowledged send
    is: the server killed at once after the answer still has it when it starts again."""
    data = ["--no-amqp", "--data-dir", str(tmp_path)]
    with ServerProcess(args=data) as server, Bridge() as bridge:
        make_queue(bridge, server, "kept", "orders")
        page = Page(server.url)
        page.sign_in(DEV_KEY_NAME, DEV_KEY)
        assert page.call("POST", "send", {"ns": "kept", "path": "orders", "body": "mine"})[0] == 200
        server.kill()
    with ServerProcess(args=data) as server:
        page = Page(server.url)
        page.sign_in(DEV_KEY_NAME, DEV_KEY)
        status, body, _ = page.call("GET", "peek?ns=kept&path=orders")
        assert status == 200
        assert [m["body"]["text"] for m in body["messages"]] == ["mine"]


def test_settings_faults_and_rules_are_for_manage_keys_only(
    server: ServerProcess, bridge: Bridge
) -> None:
    """Review finding 1: REST asks Manage to read an entity's description, its rules or
    the namespace's faults; so does the explorer. A Listen or a Send key sees names,
    kinds and counts; a Manage key sees the settings, the faults and the rules."""
    ns = unique("secrets")

    async def making() -> None:
        async with aiosb.connect(f"{server.url}/{ns}") as namespace:
            await namespace.create_queue("orders", user_metadata="secret-metadata")
            await namespace.create_topic("events")
            await namespace.create_subscription("events", "eu")
            await namespace.create_rule("events", "eu", "eu-only",
                                        filter=aiosb.SqlRuleFilter("x = 'secret-region'"))
            async with namespace.sender("orders") as sender:
                await sender.send([aiosb.Message(b"x")])

    bridge.run(making(), timeout=20)
    owner = Page(server.url)
    owner.sign_in(DEV_KEY_NAME, DEV_KEY)
    assert owner.call("POST", "faults", {"ns": ns, "entity": "orders",
                                         "operations": ["send"]})[0] == 200
    seen = json.dumps(owner.first_event())
    assert "secret-metadata" in seen and '"faults": [{' in seen  # the Manage key's view
    status, body, _ = owner.call("GET", f"rules?ns={ns}&path=events/subscriptions/eu")
    assert status == 200 and "secret-region" in json.dumps(body)
    for key_name, key in ((READER, READER_KEY), (WRITER, WRITER_KEY)):
        page = Page(server.url)
        page.sign_in(key_name, key)
        snapshot = page.first_event()
        mine = next(n for n in snapshot["namespaces"] if n["name"] == ns)
        assert set(mine) == {"name", "tier", "entities"}, key_name  # no faults
        orders = next(e for e in mine["entities"] if e["path"] == "orders")
        assert orders["counts"]["active"] == 1 and orders["kind"] == "queue"
        assert "settings" not in orders and "fragments" not in orders
        text = json.dumps(snapshot)
        assert "secret-metadata" not in text and "unavailable" not in text, key_name
        status, body, _ = page.call("GET", f"rules?ns={ns}&path=events/subscriptions/eu")
        assert status == 403 and "needs Manage" in body["error"], key_name
        assert "secret-region" not in json.dumps(body)
    assert owner.call("DELETE", f"faults?ns={ns}")[0] == 200


def test_a_body_that_is_not_plain_json_or_a_number_out_of_range_is_a_400(
    server: ServerProcess, bridge: Bridge
) -> None:
    """Review finding 3: NaN and Infinity are not JSON; 1e400 is no count; a body nested
    past Python's limits is refused before anyone signs in. Each is a 400 in words,
    with the headers every explorer answer has."""
    ns = unique("strict")
    make_queue(bridge, server, ns, "orders", messages=1)
    page = Page(server.url)
    page.sign_in(DEV_KEY_NAME, DEV_KEY)
    for body in (b'{"count": Infinity}', b'{"count": 1e400}', b'{"count": -Infinity}'):
        status, answer, headers = page.call("GET", f"peek?ns={ns}&path=orders", body)
        assert status == 400, (body, answer)
        assert "JSON" in answer["error"] or "count" in answer["error"]
        assert headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"
    status, answer, _ = page.call("GET", f"peek?ns={ns}&path=orders&count=1e400")
    assert status == 400 and "count" in answer["error"]
    status, answer, _ = page.call("GET", f"peek?ns={ns}&path=orders", {"count": 10**400})
    assert status == 400 and "count" in answer["error"]  # a whole number, too large
    sent = b'{"ns": "%s", "path": "orders", "body": "x", "properties": {"p": NaN}}' % ns.encode()
    status, answer, _ = page.call("POST", "send", sent)
    assert status == 400, answer
    assert len(page.call("GET", f"peek?ns={ns}&path=orders")[1]["messages"]) == 1  # not sent
    stranger = Page(server.url)
    status, answer, headers = stranger.call(
        "POST", "signin", b"[" * 100_000, headers={"X-Aiosb-Explorer": "1"})
    assert status == 400 and "nested" in answer["error"]
    assert headers["Content-Security-Policy"] and headers["Cache-Control"] == "no-store"


def test_resubmitting_one_dead_letter_past_the_first_hundred_touches_no_other(
    server: ServerProcess, bridge: Bridge
) -> None:
    """Review finding 4: the chosen dead letter is taken by its number; the others are
    neither locked nor abandoned (their delivery count stays as it was)."""
    ns = unique("many-dead")

    async def making() -> None:
        async with aiosb.connect(f"{server.url}/{ns}") as namespace:
            await namespace.create_queue("orders")
            async with namespace.sender("orders") as sender:
                await sender.send([aiosb.Message(b"m%d" % i) for i in range(150)])
            async with namespace.receiver("orders") as receiver:
                left = 150
                while left:
                    for m in await receiver.receive(max_messages=50, max_wait=5):
                        await receiver.dead_letter(m, reason="test")
                        left -= 1

    bridge.run(making(), timeout=30)
    page = Page(server.url)
    page.sign_in(DEV_KEY_NAME, DEV_KEY)

    def dead_letters() -> dict[int, int]:
        got = page.call("GET", f"peek?ns={ns}&path=orders&sub=deadletter&count=500")[1]
        return {m["system"]["sequence_number"]: m["system"]["delivery_count"]
                for m in got["messages"]}

    before = dead_letters()
    assert len(before) == 150 and set(before.values()) == {1}
    chosen = sorted(before)[140]
    status, body, _ = page.call("POST", "resubmit",
                                {"ns": ns, "path": "orders", "sequence_numbers": [chosen]})
    assert (status, body) == (200, {"resubmitted": 1, "to": "orders"})
    after = dead_letters()
    assert after == {seq: 1 for seq in before if seq != chosen}
    active = page.call("GET", f"peek?ns={ns}&path=orders")[1]["messages"]
    assert [m["body"]["text"] for m in active] == ["m140"]
    status, body, _ = page.call("POST", "resubmit",
                                {"ns": ns, "path": "orders", "sequence_numbers": [chosen]})
    assert status == 404 and str(chosen) in body["error"]  # gone: said, nothing touched
    assert dead_letters() == after


def test_signing_in_again_drops_the_session_of_the_cookie_it_brings(
    server: ServerProcess,
) -> None:
    """Review finding 6: a sign-in from a browser that holds a session replaces it."""
    page = Page(server.url)
    page.sign_in(READER, READER_KEY)
    first = page.cookie
    page.sign_in(READER, READER_KEY)  # the page sends its cookie with the sign-in
    assert page.cookie != first
    assert page.call("GET", "me")[0] == 200
    page.cookie, now = first, page.cookie
    assert page.call("GET", "me")[0] == 401
    page.cookie = now
    assert page.call("GET", "me")[0] == 200


def test_one_key_signing_in_again_and_again_pushes_out_only_its_own_sessions(
    server: ServerProcess,
) -> None:
    """Review finding 6: sessions are capped per key (its oldest go), so a key holder
    signing in a thousand times cannot sign everyone else out."""
    owner = Page(server.url)
    owner.sign_in(DEV_KEY_NAME, DEV_KEY)
    writers = []
    for _ in range(SESSIONS_PER_KEY + 5):
        writer = Page(server.url)
        assert writer.sign_in(WRITER, WRITER_KEY)[0] == 200
        writers.append(writer)
    assert owner.call("GET", "me")[0] == 200
    assert [w.call("GET", "me")[0] for w in writers[:5]] == [401] * 5
    assert all(w.call("GET", "me")[0] == 200 for w in writers[5:])


def test_a_namespace_called_explorer_is_reached_by_another_case(
    server: ServerProcess, bridge: Bridge
) -> None:
    """Review finding 7, as docs/explorer.md says: /explorer/ is the page; the
    namespace explorer is reached at /Explorer/... (names are case-insensitive), with
    the signed requests of any client."""

    async def using() -> list[bytes]:
        async with aiosb.connect(f"{server.url}/Explorer") as namespace:
            if not await namespace.queue_exists("orders"):
                await namespace.create_queue("orders")
            async with namespace.sender("orders") as sender:
                await sender.send([aiosb.Message(b"through REST")])
            async with namespace.receiver("orders") as receiver:
                return [m.body for m in await receiver.peek(max_messages=10)]

    assert bridge.run(using(), timeout=20) == [b"through REST"]
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(f"{server.url}/Explorer/orders", timeout=10)
    assert unsigned.value.code == 401  # REST, with its SAS check
