"""The emulator server, spoken to directly: the documented REST protocol, the Atom XML
management protocol, fault injection over HTTP, authentication (R-5) and bad input (R-4).

The aiosb client's view of the server is the conformance suite (backend ``http``); these
tests send raw requests, as a client that is not aiosb would.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import aiohttp
import pytest
from yarl import URL

import aiosb
from aiosb import Message, SasCredential, emulator, errors
from aiosb.server.http import DEV_KEY, DEV_KEY_NAME, serve
from aiosb.wire import atom as _atom
from aiosb.wire import rest as _rest
from aiosb.wire import status as _status

NS = "contoso"
DEAD = "$DeadLetterQueue"


@pytest.fixture
async def http() -> AsyncIterator[SimpleNamespace]:
    """A running server, a raw aiohttp session, and ``call(method, path, ...)``."""
    async with serve() as server, aiohttp.ClientSession() as session:
        credential = SasCredential(DEV_KEY_NAME, DEV_KEY)

        async def call(method, path, *, sign=True, token=None, headers=None, **kw):
            sent = dict(headers or {})
            if sign:
                sent["Authorization"] = token or credential.token(f"{server.url}/{NS}")
            url = URL(f"{server.url}{path}", encoded=True)  # paths exactly as written
            async with session.request(method, url, headers=sent, **kw) as response:
                body = await response.read()
                return SimpleNamespace(status=response.status, headers=response.headers,
                                       body=body, text=body.decode("utf-8", "replace"))

        yield SimpleNamespace(server=server, call=call, credential=credential)


def detail(response) -> str:
    match = re.search(r"<Detail>(.*)</Detail>", response.text, re.S)
    assert match, response.text
    return match.group(1)


async def make_queue(http, name="q", **props):
    async with aiosb.connect(http.server.namespace_url(NS)) as ns:
        await ns.create_queue(name, **props)


# -- the REST data plane -----------------------------------------------------------------


async def test_single_send_peek_lock_renew_unlock_complete_with_documented_codes(http):
    """The documented single-message protocol, step by step, with its status codes."""
    await make_queue(http)
    sent = await http.call(
        "POST", f"/{NS}/q/messages", data=b"hello",
        headers={
            "Content-Type": "text/plain",
            "BrokerProperties": json.dumps({"MessageId": "m1", "Label": "greeting",
                                            "TimeToLive": 90}),
            "Priority": '"High"', "Count": "3", "Ratio": "0.5", "Urgent": "true",
        },
    )
    assert sent.status == 201
    got = await http.call("POST", f"/{NS}/q/messages/head?timeout=0")
    assert got.status == 201 and got.body == b"hello"
    broker = json.loads(got.headers["BrokerProperties"])
    assert (broker["MessageId"], broker["Label"], broker["DeliveryCount"]) == ("m1", "greeting", 1)
    assert broker["TimeToLive"] == 90
    assert got.headers["Content-Type"].startswith("text/plain")
    assert (got.headers["Priority"], got.headers["Count"], got.headers["Urgent"]) == (
        '"High"', "3", "true"
    )
    location = URL(got.headers["Location"])
    assert location.path == f"/{NS}/q/messages/{broker['SequenceNumber']}/{broker['LockToken']}"
    assert (await http.call("POST", location.path)).status == 200  # renew
    assert (await http.call("PUT", location.path)).status == 200  # unlock
    again = await http.call("POST", f"/{NS}/q/messages/head?timeout=0")
    again_broker = json.loads(again.headers["BrokerProperties"])
    assert again_broker["DeliveryCount"] == 2
    gone = await http.call("DELETE", location.path)  # the old lock
    assert gone.status == 404 and gone.headers[_status.ERROR_HEADER] == "MessageLockLost"
    done = URL(again.headers["Location"]).path
    assert (await http.call("DELETE", done)).status == 200  # complete
    assert (await http.call("POST", f"/{NS}/q/messages/head?timeout=0")).status == 204


async def test_batch_send_and_receive_and_delete(http):
    await make_queue(http)
    batch = [
        {"Body": "a", "BrokerProperties": {"MessageId": "1"}, "UserProperties": {"n": 1}},
        {"Body": "b", "BrokerProperties": {"SessionId": "s", "PartitionKey": "s"}},
    ]
    sent = await http.call("POST", f"/{NS}/q/messages", data=json.dumps(batch),
                           headers={"Content-Type": _rest.BATCH_CONTENT_TYPE})
    assert sent.status == 201
    first = await http.call("DELETE", f"/{NS}/q/messages/head?timeout=0")
    assert first.status == 200 and first.body == b"a" and first.headers["n"] == "1"
    assert "Location" not in first.headers
    second = await http.call("DELETE", f"/{NS}/q/messages/head?timeout=0")
    assert json.loads(second.headers["BrokerProperties"])["SessionId"] == "s"
    assert (await http.call("DELETE", f"/{NS}/q/messages/head?timeout=0")).status == 204


async def test_missing_entity_is_410_in_data_operations_and_404_in_management(http):
    send = await http.call("POST", f"/{NS}/nope/messages", data=b"x")
    assert send.status == 410 and send.headers[_status.ERROR_HEADER] == "EntityNotFound"
    assert "nope" in detail(send)
    assert (await http.call("POST", f"/{NS}/nope/messages/head?timeout=0")).status == 410
    got = await http.call("GET", f"/{NS}/nope")
    assert got.status == 404 and got.headers[_status.ERROR_HEADER] == "EntityNotFound"


async def test_dead_letter_sub_queue_and_subscriptions_by_path(http):
    async with aiosb.connect(http.server.namespace_url(NS)) as ns:
        await ns.create_topic("t")
        await ns.create_subscription("t", "s")
        async with ns.sender("t") as sender:
            await sender.send(Message(b"x"))
        async with ns.receiver("t/subscriptions/s") as receiver:
            (msg,) = await receiver.receive(max_wait=0)
            await receiver.dead_letter(msg, reason="Bad", description="no id")
    got = await http.call("DELETE", f"/{NS}/t/subscriptions/s/{DEAD}/messages/head?timeout=0")
    assert got.status == 200 and got.body == b"x"
    assert got.headers["DeadLetterReason"] == '"Bad"'
    assert got.headers["DeadLetterErrorDescription"] == '"no id"'


# -- Atom management -------------------------------------------------------------------


def queue_entry(**elements: str) -> bytes:
    inner = "".join(f"<{k}>{v}</{k}>" for k, v in elements.items())
    return (
        f'<entry xmlns="{_atom.ATOM}"><content type="application/xml">'
        f'<QueueDescription xmlns="{_atom.SB}">{inner}</QueueDescription></content></entry>'
    ).encode()


async def test_atom_create_read_update_delete_with_service_bus_element_order(http):
    created = await http.call("PUT", f"/{NS}/orders",
                              data=queue_entry(LockDuration="PT30S", MaxDeliveryCount="3"))
    assert created.status == 201
    assert (await http.call("PUT", f"/{NS}/orders", data=queue_entry())).status == 409
    updated = await http.call("PUT", f"/{NS}/orders", headers={"If-Match": "*"},
                              data=queue_entry(LockDuration="PT45S", MaxDeliveryCount="3"))
    assert updated.status == 200
    got = await http.call("GET", f"/{NS}/orders")
    assert got.status == 200
    entry = _atom.parse_entry(got.body)
    assert entry.kind == "queue"
    assert entry.fields["lock_duration"].total_seconds() == 45
    assert entry.counts["active_message_count"] == 0
    order = [e for e, _, _ in _atom.KINDS["queue"][1]]
    shown = re.findall(r"<(\w+)>", got.text.split("<QueueDescription", 1)[1])
    top = [e for e in shown if e in order]
    assert top == sorted(top, key=order.index), "elements out of Service Bus order"
    listing = await http.call("GET", f"/{NS}/$Resources/queues")
    assert [e.title for e in _atom.parse_feed(listing.body)] == ["orders"]
    assert (await http.call("DELETE", f"/{NS}/orders")).status == 200
    assert (await http.call("DELETE", f"/{NS}/orders")).status == 404


async def test_subscriptions_are_managed_under_their_topic(http):
    topic = (f'<entry xmlns="{_atom.ATOM}"><content type="application/xml">'
             f'<TopicDescription xmlns="{_atom.SB}"/></content></entry>').encode()
    sub = (f'<entry xmlns="{_atom.ATOM}"><content type="application/xml">'
           f'<SubscriptionDescription xmlns="{_atom.SB}"><MaxDeliveryCount>4'
           "</MaxDeliveryCount></SubscriptionDescription></content></entry>").encode()
    assert (await http.call("PUT", f"/{NS}/t", data=topic)).status == 201
    assert (await http.call("PUT", f"/{NS}/t/subscriptions/s", data=sub)).status == 201
    misplaced = await http.call("PUT", f"/{NS}/t2", data=sub)
    assert misplaced.status == 400 and "subscriptions" in detail(misplaced)
    listing = _atom.parse_feed((await http.call("GET", f"/{NS}/t/subscriptions")).body)
    assert [(e.title, e.fields["max_delivery_count"]) for e in listing] == [("s", 4)]


async def test_listings_come_in_pages_of_100_in_name_order_with_skip_and_top(http):
    """As Service Bus: at most 100 entries unless ``$top`` says otherwise, from ``$skip``;
    the SDK's client asks ``$skip=0&$top=100``, then ``$skip=100`` ..."""
    async with aiosb.connect(http.server.namespace_url(NS)) as ns:
        for i in range(102, -1, -1):
            await ns.create_queue(f"q{i:03d}")

    async def titles(query):
        listing = await http.call("GET", f"/{NS}/$Resources/queues{query}")
        assert listing.status == 200, listing.text
        return [e.title for e in _atom.parse_feed(listing.body)]

    everything = [f"q{i:03d}" for i in range(103)]
    assert await titles("") == everything[:100]
    assert await titles("?$skip=100&$top=100&api-version=2021-05") == everything[100:]
    assert await titles("?$skip=5&$top=3") == everything[5:8]
    assert await titles("?$skip=500") == []
    assert await titles("?$top=1000") == everything


# -- fault injection over HTTP ---------------------------------------------------------------


async def test_fault_endpoint_injects_lists_and_heals(http):
    await make_queue(http)
    made = await http.call("POST", f"/{NS}/$faults",
                           json={"entity": "q", "kind": "unavailable", "operations": ["send"]})
    assert made.status == 201
    fault_id = json.loads(made.body)["id"]
    listed = json.loads((await http.call("GET", f"/{NS}/$faults")).body)["faults"]
    assert [(f["id"], f["entity"], f["operations"]) for f in listed] == [(fault_id, "q", ["send"])]
    down = await http.call("POST", f"/{NS}/q/messages", data=b"x")
    assert down.status == 503 and down.headers[_status.ERROR_HEADER] == "EntityUnavailable"
    assert down.headers[_status.RETRYABLE_HEADER] == "false"
    assert (await http.call("DELETE", f"/{NS}/$faults/{fault_id}")).status == 200
    assert (await http.call("DELETE", f"/{NS}/$faults/{fault_id}")).status == 404
    assert (await http.call("POST", f"/{NS}/q/messages", data=b"x")).status == 201
    await http.call("POST", f"/{NS}/$faults", json={"kind": "transient"})
    busy = await http.call("POST", f"/{NS}/q/messages", data=b"x")
    assert busy.status == 500 and busy.headers[_status.RETRYABLE_HEADER] == "true"
    assert json.loads((await http.call("DELETE", f"/{NS}/$faults")).body) == {"healed": 1}
    assert emulator.namespace(NS).faults.active == []


async def test_fragment_faults_take_their_kind_and_operations(http):
    """#49: a fragment fault is the kind, on the operations, that its body says (it was
    an outage of every operation whatever was asked), and is listed with its fragment."""
    await make_queue(http, enable_partitioning=True)
    made = await http.call("POST", f"/{NS}/$faults", json={
        "entity": "q", "fragment": 3, "kind": "transient", "operations": ["send"]})
    assert made.status == 201, made.text
    listed = json.loads((await http.call("GET", f"/{NS}/$faults")).body)["faults"]
    assert [(f["entity"], f["kind"], f["operations"], f["fragment"]) for f in listed] == [
        ("q", "transient", ["send"], 3)]
    late = await http.call("POST", f"/{NS}/$faults", json={
        "entity": "q", "fragment": 1024})
    assert late.status == 400 and "from 0 to 1023" in detail(late)


# -- authentication ---------------------------------------------------------------------


def forge(**change) -> str:
    base = {"sr": "", "sig": "", "se": str(int(time.time()) + 600), "skn": DEV_KEY_NAME}
    base.update(change)
    return "SharedAccessSignature " + "&".join(f"{k}={v}" for k, v in base.items())


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("unsigned", "not signed"),
        ("wrong key", "does not match"),
        ("expired", "expired"),
        ("other namespace", "does not cover"),
        ("sibling entity", "does not cover"),
        ("wrong key name", "not known"),
        ("bearer", "not a SharedAccessSignature"),
        ("missing sig", "needs all"),
        ("duplicate field", "bad part"),
        ("bad expiry", "not epoch seconds"),
    ],
)
async def test_r5_unsigned_forged_expired_or_wrong_scope_requests_are_refused(http, how, match):
    """R-5: every such request gets 401 saying why, and changes nothing."""
    url = http.server.url
    tokens = {
        "wrong key": SasCredential(DEV_KEY_NAME, "not-the-key").token(f"{url}/{NS}"),
        "expired": http.credential.token(f"{url}/{NS}", expiry=time.time() - 1),
        "other namespace": http.credential.token(f"{url}/fabrikam"),
        "sibling entity": http.credential.token(f"{url}/{NS}/q"),
        "wrong key name": SasCredential("Other", DEV_KEY).token(f"{url}/{NS}"),
        "bearer": "Bearer abc",
        "missing sig": forge().replace("&sig=", "&x=").split("&x=")[0],
        "duplicate field": forge() + "&se=1",
        "bad expiry": forge(se="soon"),
    }
    response = await http.call("PUT", f"/{NS}/qq", data=queue_entry(), sign=how != "unsigned",
                               token=tokens.get(how))
    assert response.status == 401
    assert response.headers[_status.ERROR_HEADER] == "Unauthorized"
    assert re.search(match, detail(response))
    assert emulator.namespace(NS).faults.active == []
    async with aiosb.connect(http.server.namespace_url(NS)) as ns:
        assert not await ns.queue_exists("qq")


async def test_r5_an_entity_scoped_token_covers_that_entity_only(http):
    await make_queue(http, "q")
    await make_queue(http, "qx")
    token = http.credential.token(f"{http.server.url}/{NS}/q")
    assert (await http.call("POST", f"/{NS}/q/messages", data=b"x", token=token)).status == 201
    refused = await http.call("POST", f"/{NS}/qx/messages", data=b"x", token=token)
    assert refused.status == 401


async def test_r5_the_client_with_a_wrong_key_gets_unauthorized_without_retries(http):
    url = http.server.namespace_url(NS)
    async with aiosb.connect(url, credential=(DEV_KEY_NAME, "wrong")) as ns:
        with pytest.raises(errors.Unauthorized, match="does not match") as info:
            await ns.create_queue("q")
        assert info.value.retryable is False


# -- bad input ----------------------------------------------------------------------------

BILLION_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
    b"<entry>&lol2;</entry>"
)
XXE = (
    b'<?xml version="1.0"?><!DOCTYPE e [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b"<entry>&x;</entry>"
)
JSON_BATCH = {"Content-Type": _rest.BATCH_CONTENT_TYPE}


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "match"),
    [
        ("POST", "/contoso/q/messages", JSON_BATCH, b"[{", 400, "not valid JSON"),
        ("POST", "/contoso/q/messages", JSON_BATCH, b'{"Body": "x"}', 400, "JSON array"),
        ("POST", "/contoso/q/messages", JSON_BATCH, b"[]", 400, "non-empty"),
        ("POST", "/contoso/q/messages", JSON_BATCH, b'[{"Bdy": "x"}]', 400, "unknown batch"),
        ("POST", "/contoso/q/messages", JSON_BATCH, b'[{"Body": 5}]', 400, "Body must be"),
        ("POST", "/contoso/q/messages", JSON_BATCH, b'[{"UserProperties": {"a": [1]}}]', 400,
         "UserProperties"),
        ("POST", "/contoso/q/messages", {"BrokerProperties": "{nope"}, b"x", 400,
         "not valid JSON"),
        ("POST", "/contoso/q/messages", {"BrokerProperties": '{"Colour": "red"}'}, b"x", 400,
         "unknown BrokerProperties key 'Colour'"),
        ("POST", "/contoso/q/messages", {"BrokerProperties": '{"TimeToLive": "soon"}'}, b"x",
         400, "TimeToLive must be seconds"),
        ("POST", "/contoso/q/messages", {"BrokerProperties": '{"TimeToLive": -5}'}, b"x", 400,
         "positive"),
        ("POST", "/contoso/q/messages",
         {"BrokerProperties": '{"SessionId": "a", "PartitionKey": "b"}'}, b"x", 400,
         "differs from session_id"),
        ("POST", "/contoso/q/messages", {"BrokerProperties": json.dumps({"MessageId": "m" * 129})},
         b"x", 400, "128"),
        ("POST", "/contoso/q/messages",
         {"BrokerProperties": '{"ScheduledEnqueueTimeUtc": "tomorrow"}'}, b"x", 400, "RFC 1123"),
        ("POST", "/contoso/q/messages", {}, b"x" * (256 * 1024 + 1), 413, "262144"),
        ("POST", "/contoso/q/messages", {}, b"x" * (5 * 1024 * 1024), 413, "limit"),
        ("POST", "/contoso/../fabrikam/q/messages", {}, b"x", 400, "not allowed"),
        ("POST", "/contoso/%2e%2e/q/messages", {}, b"x", 400, "not allowed"),
        ("POST", "/contoso/a%2F..%2Fb/messages", {}, b"x", 400, "not allowed"),
        ("POST", "/contoso/a%2F%2Fb/messages", {}, b"x", 400, "not allowed"),
        ("POST", "/contoso//q/messages", {}, b"x", 400, "not allowed"),
        ("POST", "/contoso/q%00/messages", {}, b"x", 400, "control"),
        ("POST", "/contoso/%ff/messages", {}, b"x", 400, "UTF-8"),
        ("POST", "/contoso/-q/messages", {}, b"x", 400, "not valid"),
        ("POST", "/1contoso/q/messages", {}, b"x", 400, "namespace name"),
        ("POST", "/contoso/q/$DeadLetterQueue/messages", {}, b"x", 400, "Cannot send"),
        ("GET", "/contoso/q/messages", {}, None, 400, "POST sends"),
        ("PATCH", "/contoso/q/messages/head", {}, None, 400, "not allowed"),
        ("POST", "/contoso/q/messages/head?timeout=abc", {}, None, 400, "timeout"),
        ("POST", "/contoso/q/messages/head?timeout=-1", {}, None, 400, "timeout"),
        ("POST", "/contoso/q/messages/head?timeout=1e12", {}, None, 400, "timeout"),
        ("POST", "/contoso/q/messages/head?timeout=nan", {}, None, 400, "timeout"),
        ("POST", "/contoso/q/messages", {"x-aiosb-timeout": "forever"}, b"x", 400,
         "x-aiosb-timeout"),
        ("PUT", "/contoso/q2", {}, BILLION_LAUGHS, 400, "document type"),
        ("PUT", "/contoso/q2", {}, XXE, 400, "document type"),
        ("PUT", "/contoso/q2", {}, b"<entry><content>", 400, "not well-formed"),
        ("PUT", "/contoso/q2", {}, b"<feed/>", 400, "expected an Atom"),
        ("PUT", "/contoso/q2", {}, queue_entry(Colour="red"), 400, "unknown queue property"),
        ("PUT", "/contoso/q2", {}, queue_entry(LockDuration="soon"), 400, "ISO 8601"),
        ("PUT", "/contoso/q2", {}, queue_entry(LockDuration="PT10M"), 400,
         "lock_duration is 0:10:00"),
        ("PUT", "/contoso/q2", {}, queue_entry(RequiresSession="maybe"), 400, "true or false"),
        ("PUT", "/contoso/q2", {}, queue_entry(MaxDeliveryCount="9" * 40), 400, "whole number"),
        ("PUT", "/contoso/q2", {"If-Match": "etag"}, queue_entry(), 400, "If-Match"),
        ("PUT", "/contoso/q2", {}, b"\xff\xfe<entry/>", 400, "XML"),
        ("POST", "/contoso/q/$aiosb/explode", {}, b"{}", 400, "unknown aiosb extension"),
        ("POST", "/contoso/q/$aiosb/receive", {}, b'{"max_messages": 0}', 400, "max_messages"),
        ("POST", "/contoso/q/$aiosb/receive", {}, b'{"session_id": "s"}', 400, "unknown field"),
        ("POST", "/contoso/q/$aiosb/settle", {}, b'{"action": "burn", "lock_tokens": ["x"]}',
         400, "action"),
        *(
            ("POST", "/contoso/q/$aiosb/settle", {},
             b'{"action": "complete", "lock_tokens": %s}' % tokens, 400, "lock_tokens must")
            for tokens in [b'[]', b'["x", ""]', b'["x", 7]', b'["%s"]' % (b"x" * 257), b'"x"',
                           b'["x", null]']
        ),
        ("POST", "/contoso/q/$aiosb/send", {}, b'{"messages": [{"body": "%%%"}]}', 400,
         "base64"),
        ("POST", "/contoso/q/$aiosb/send", {},
         b'{"messages": [{"properties": {"x": {"set": [1]}}}]}', 400, "property 'x'"),
        ("POST", "/contoso/$faults", {}, b'{"kind": "meteor"}', 400, "fault kind"),
        ("POST", "/contoso/$faults", {}, b'{"operations": ["explode"]}', 400, "operations"),
        ("POST", "/contoso/$faults", {}, b'{"kind": "delay", "seconds": -1}', 400, "seconds"),
        ("POST", "/contoso/$faults", {}, b'{"entity": 5}', 400, "entity must be"),
        # a fragment of an entity that does not exist: 404, as management answers it
        # (#51's leftover: it was 410, a data operation's answer)
        ("POST", "/contoso/$faults", {}, b'{"entity": "nowhere", "fragment": 0}', 404,
         "nowhere"),
        ("GET", "/contoso", {}, None, 400, "nothing to do"),
        ("GET", "/contoso/$Resources/queues?$top=0", {}, None, 400, "top is '0'"),
        ("GET", "/contoso/$Resources/queues?$top=1001", {}, None, 400, "from 1 to 1000"),
        ("GET", "/contoso/$Resources/topics?$skip=-1", {}, None, 400, "skip is '-1'"),
        ("GET", "/contoso/q/subscriptions?$skip=x", {}, None, 400, "whole number"),
        ("GET", "/", {}, None, 400, "no namespace"),
    ],
)
async def test_r4_bad_requests_get_a_4xx_that_says_what_is_wrong(
    http, method, path, headers, body, status, match
):
    """R-4: never a 5xx and never a crash; a 4xx with a sentence naming the problem."""
    await make_queue(http)
    root = http.credential.token(http.server.url)  # covers every namespace: scope aside
    response = await http.call(method, path, headers=headers, data=body, token=root)
    assert response.status == status, response.text
    assert re.search(match, detail(response)), detail(response)
    assert (await http.call("POST", f"/{NS}/q/messages", data=b"ok")).status == 201
    assert (await http.call("GET", f"/{NS}/q2")).status == 404  # nothing half-made


@pytest.mark.looptime
async def test_r4_a_body_that_stops_arriving_is_refused_after_the_body_timeout(http):
    """R-4: a request whose body stops short (a stalled or malicious client) gets a 400
    saying so after BODY_SECONDS, instead of holding its handler for ever; a body that
    has arrived whole skips that timer."""
    import asyncio

    from aiosb.server.http._app import BODY_SECONDS

    await make_queue(http)
    host, port = URL(http.server.url).host, URL(http.server.url).port
    reader, writer = await asyncio.open_connection(host, port)
    token = http.credential.token(f"{http.server.url}/{NS}")
    writer.write(
        f"POST /{NS}/q/messages HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: {token}\r\n"
        "Content-Type: text/plain\r\nContent-Length: 10\r\n\r\nabc".encode()
    )
    await writer.drain()
    loop = asyncio.get_running_loop()
    start = loop.time()
    head = await reader.readuntil(b"\r\n\r\n")
    waited = loop.time() - start
    body = await reader.read(4096)
    writer.close()
    assert head.startswith(b"HTTP/1.1 400"), head
    assert b"did not arrive within" in body
    assert waited == pytest.approx(BODY_SECONDS, abs=0.1)
    sent = await http.call("POST", f"/{NS}/q/messages", data=b"whole")
    assert sent.status == 201


async def test_an_encoded_slash_is_a_slash(http):
    """The official administration clients send an entity name with slashes as one
    percent-encoded segment (``app%2Frules%2Ft``): it names the same entity as the
    plain path, for management and messages alike (and '..' or empty parts stay
    refused: R-4)."""
    await make_queue(http, "app/rules/q")
    sent = await http.call("POST", f"/{NS}/app%2Frules%2Fq/messages", data=b"encoded")
    assert sent.status == 201, sent.text
    got = await http.call("DELETE", f"/{NS}/app/rules/q/messages/head?timeout=1")
    assert (got.status, got.body) == (200, b"encoded")
    described = await http.call("GET", f"/{NS}/app%2Frules%2Fq")
    assert described.status == 200 and "<title type=\"text\">app/rules/q</title>" in described.text
