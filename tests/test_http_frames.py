"""The framed batch format (#16, :mod:`aiosb.wire.frames`): bodies travel raw after the
JSON instead of as base64 in it. Exact round trips, the negotiation both ways (a client
frames only for a server that said it takes frames; a server frames only an answer
asked for so), and a clear 400 for every bad frame (R-4), with nothing stored."""

from __future__ import annotations

import json
import re

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

import aiosb
from aiosb import Message, ReceivedMessage, SasCredential, errors
from aiosb.errors import InvalidArgument
from aiosb.server.http import DEV_KEY, DEV_KEY_NAME, serve
from aiosb.wire import aiosb_json as _json
from aiosb.wire import frames

pytestmark = pytest.mark.timeout(60)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=2, max_size=8), st.booleans())
def test_a_framed_batch_decodes_to_what_the_json_one_does(bodies, received):
    """Any bytes, empty bodies included, come back exactly, with every column."""
    kind = ReceivedMessage if received else Message
    messages = [kind(b, subject=f"s{i}", application_properties={"i": i})
                for i, b in enumerate(bodies)]
    if received:
        encode, decode = _json.encode_received_batch, _json.decode_received_batch
    else:
        encode, decode = _json.encode_batch, _json.decode_batch
    plain = decode(json.loads(_json.dumps(encode(messages))))
    if received:
        columns = {f: [getattr(m, f) for m in messages]
                   for f in ("subject", "application_properties")}
        raw = {"batch": _json.encode_received_columns([m.body for m in messages], columns, True)}
    else:
        raw = {"batch": _json.encode_batch(messages, raw=True)}
    data, length = frames.frame(raw)
    assert data[length:] == b"".join(bodies)  # the bodies as they are, after the JSON
    assert b'"body"' not in data[:length]
    framed = decode(frames.unframe(data, str(length))["batch"])
    assert [m.body for m in framed] == bodies == [m.body for m in plain]
    assert [(m.subject, m.application_properties) for m in framed] == [
        (m.subject, m.application_properties) for m in plain
    ]


GOOD = b'{"batch": {"body_sizes": [1]}}'
BAD_FRAMES = [
    (GOOD, "abc", "must be the length"),
    (GOOD, "0", "must be the length"),
    (GOOD, "-3", "must be the length"),
    (GOOD, str(len(GOOD) + 2), "must be the length"),  # past the end of the body
    (GOOD, "\u0661", "must be the length"),  # a digit, but not an ASCII one
    (GOOD, "9" * 4400, "must be the length"),  # more digits than int() takes
    (b'{"batch": {"body_sizes"', None, "not valid"),
    (b"[1, 2]", None, "a batch object"),
    (b'{"batch": 1}', None, "a batch object"),
    (b'{"messages": [{}]}', None, "a batch object"),
    (b'{"batch": {"body": "eA==", "body_sizes": [1]}}', None, "no body of its own"),
]


@pytest.mark.parametrize(("json_part", "length", "match"), BAD_FRAMES)
def test_a_bad_frame_is_refused_with_what_is_wrong(json_part, length, match):
    with pytest.raises(InvalidArgument, match=match):
        frames.unframe(json_part + b"x", length or str(len(json_part)))


@pytest.mark.parametrize(
    ("accept", "framed"),
    [
        (frames.CONTENT_TYPE, True),
        (f"application/json, {frames.CONTENT_TYPE.upper()}", True),
        (f"{frames.CONTENT_TYPE}; q=0.5, application/json", True),
        (f"{frames.CONTENT_TYPE};q=0, application/json", False),
        (f"{frames.CONTENT_TYPE}; Q = 0", False),
        (f"{frames.CONTENT_TYPE}x", False),
        ("application/json", False),
        ("", False),
    ],
)
def test_a_framed_answer_is_what_accept_asks_for(accept, framed):
    assert frames.asks_for_frames(accept) is framed


@pytest.fixture
async def server():
    async with serve() as running:
        async with aiosb.connect(running.namespace_url("ns")) as ns:
            await ns.create_queue("q")
        yield running


async def test_the_server_takes_framed_sends_and_frames_answers_asked_for(server):
    token = SasCredential(DEV_KEY_NAME, DEV_KEY).token(f"{server.url}/ns")
    batch = {"batch": _json.encode_batch([Message(b"\x00\xff\n"), Message(b"")], raw=True)}
    data, length = frames.frame(batch)
    async with aiohttp.ClientSession(headers={"Authorization": token}) as session:
        async with session.post(
            f"{server.url}/ns/q/$aiosb/send", data=data,
            headers={"Content-Type": frames.CONTENT_TYPE, frames.LENGTH_HEADER: str(length)},
        ) as response:
            assert response.status == 201, await response.text()
            assert response.headers[frames.TAKES_FRAMES] == "1"
        peek = json.dumps({"peek": True, "max_messages": 5, "batch": True})
        async with session.post(f"{server.url}/ns/q/$aiosb/receive", data=peek) as response:
            assert response.content_type == "application/json"  # not asked for: JSON
            answer = _json.decode_received_batch((await response.json())["batch"])
        async with session.post(
            f"{server.url}/ns/q/$aiosb/receive", data=peek,
            headers={"Accept": f"{frames.CONTENT_TYPE}, application/json"},
        ) as response:
            assert response.content_type == frames.CONTENT_TYPE
            body = await response.read()
            length = response.headers[frames.LENGTH_HEADER]
            framed = _json.decode_received_batch(frames.unframe(body, length)["batch"])
    assert [m.body for m in answer] == [m.body for m in framed] == [b"\x00\xff\n", b""]
    assert [m.sequence_number for m in framed] == [m.sequence_number for m in answer]


@pytest.mark.parametrize(
    ("json_part", "length", "match"),
    [
        *BAD_FRAMES,
        (b'{"batch": {"body_sizes": [2]}}', None, "add up to 2 bytes, but body has 1"),
        (b'{"batch": {"body_sizes": [1], "colour": 1}}', None, "unknown batch column"),
        (b'{"batch": {"body_sizes": [1]}, "colour": 1}', None, "unknown field"),
    ],
)
async def test_r4_a_bad_framed_send_gets_a_400_and_stores_nothing(
    server, json_part, length, match
):
    token = SasCredential(DEV_KEY_NAME, DEV_KEY).token(f"{server.url}/ns")
    headers = {"Authorization": token, frames.LENGTH_HEADER: length or str(len(json_part)),
               "Content-Type": frames.CONTENT_TYPE}
    data = json_part + b"x"
    async with aiohttp.ClientSession(headers=headers) as session:
        for op in ("send", "schedule"):
            async with session.post(f"{server.url}/ns/q/$aiosb/{op}", data=data) as response:
                text = await response.text()
                assert response.status == 400 and re.search(match, text), text
    async with aiosb.connect(server.namespace_url("ns")) as ns:
        assert (await ns.runtime_properties("q")).total_message_count == 0


async def test_the_client_frames_once_the_server_said_it_takes_frames(server, monkeypatch):
    """The first batch goes as JSON (nothing heard yet); once an answer said frames are
    welcome, batches go framed and receives ask for framed answers."""
    seen: list[tuple[str, str | None]] = []
    unframe = frames.unframe

    def spy(data: bytes, length: str) -> dict:
        seen.append(("unframe", length))
        return unframe(data, length)

    monkeypatch.setattr(frames, "unframe", spy)
    async with aiosb.connect(server.namespace_url("ns")) as ns:
        async with ns.sender("q") as sender, ns.receiver("q") as receiver:
            await sender.send([Message(b"a"), Message(b"b")])
            assert seen == []  # the first send: JSON, as to any server
            await sender.send([Message(b"\x00c"), Message(b"d\n")])
            assert len(seen) == 1  # the server unframed the second
            got = await receiver.receive(max_messages=10, max_wait=0)
            assert len(seen) == 2  # and the client the framed answer
            assert [m.body for m in got] == [b"a", b"b", b"\x00c", b"d\n"]
            await receiver.complete(got)


class Stub:
    """An HTTP server standing in for aiosb serve: ``new`` (it takes frames and says
    so, as today's does) or not (one from before frames: JSON only, whatever the
    Accept, and a framed body is no JSON to it); every request is kept."""

    def __init__(self) -> None:
        self.new = False
        self.bad_frame = False  # answer receives with a frame whose length is wrong
        self.requests: list[tuple[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        op = request.path.rsplit("/", 1)[-1]
        self.requests.append((op, request.content_type))
        body = await request.read()
        if frames.LENGTH_HEADER in request.headers and self.new:
            payload = frames.unframe(body, request.headers[frames.LENGTH_HEADER])
        else:
            try:
                payload = json.loads(body)
            except ValueError:
                return web.Response(
                    status=400, text="<Error><Code>400</Code><Detail>the body is not valid "
                    "JSON.</Detail></Error>", content_type="application/xml",
                    headers={"x-aiosb-error": "InvalidArgument"},  # as aiosb serve says
                )
        headers = {frames.TAKES_FRAMES: "1"} if self.new else {}
        if op == "receive":
            batch = _json.encode_received_batch([ReceivedMessage(b"x", lock_token="t")])
            if self.bad_frame:
                headers[frames.LENGTH_HEADER] = "999"
                return web.Response(body=b"{}", headers=headers,
                                    content_type=frames.CONTENT_TYPE)
            return web.json_response({"batch": batch}, headers=headers)
        assert _json.decode_batch(payload["batch"])  # a send's batch, readable
        return web.Response(status=201, headers=headers)


@pytest.fixture
async def stub():
    server = Stub()
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    transport = aiosb.transport.http.HttpTransport.from_url(f"http://127.0.0.1:{port}/ns")
    await transport.open()
    try:
        yield server, transport
    finally:
        await transport.aclose()
        await runner.cleanup()


async def test_the_client_talks_json_to_a_server_that_knows_no_frames(stub):
    """An aiosb serve from before frames: no header says it takes them, and it answers
    JSON whatever the Accept; the client never frames, and reads its answers."""
    server, transport = stub
    for _ in range(3):
        await transport.send("q", [Message(b"a"), Message(b"b")])
    got = await transport.receive("q", aiosb.protocol.ReceiveRequest(max_messages=5))
    assert [m.body for m in got] == [b"x"]
    assert server.requests == [("send", "application/json")] * 3 + [
        ("receive", "application/json")
    ]


async def test_a_server_replaced_by_one_from_before_frames_gets_json_again(stub):
    """A restart or a rollback at the same address: the first framed batch it refuses
    goes again as JSON (a refused body stores nothing), and the client frames no more
    until a server says it takes frames again."""
    server, transport = stub
    server.new = True
    batch = [Message(b"a"), Message(b"b")]
    await transport.send("q", batch)
    await transport.send("q", batch)
    assert server.requests[-1] == ("send", frames.CONTENT_TYPE)
    server.new = False
    server.requests.clear()
    await transport.send("q", batch)
    await transport.send("q", batch)
    assert server.requests == [
        ("send", frames.CONTENT_TYPE), ("send", "application/json"),
        ("send", "application/json"),
    ]
    server.new = True
    await transport.send("q", batch)  # told again on this answer
    await transport.send("q", batch)
    assert server.requests[-1] == ("send", frames.CONTENT_TYPE)
    server.new = False  # replaced again, and first asked for a receive: its answer
    server.requests.clear()  # says nothing of frames, so the next batch is JSON at once
    await transport.receive("q", aiosb.protocol.ReceiveRequest(max_messages=5))
    await transport.send("q", batch)
    assert server.requests == [("receive", "application/json"), ("send", "application/json")]


async def test_a_bad_framed_answer_is_an_error_not_retried(stub):
    """The server took the messages a receive asked for: retrying would lose them (or
    hold their locks), so a framed answer the client cannot read is not retryable."""
    server, transport = stub
    server.new = server.bad_frame = True
    with pytest.raises(errors.MessagingError, match="framed answer is bad") as caught:
        await transport.receive("q", aiosb.protocol.ReceiveRequest(max_messages=5))
    assert caught.value.retryable is False
