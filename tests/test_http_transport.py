"""The HTTP transport beyond the conformance suite: the plain REST protocol (what it does
against a real namespace, checked against the emulator server with the extensions off),
what REST cannot do, URLs, and the error table shared by server and client."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.pairing.runtime import is_outage
from aiosb.protocol import ManagementRequest
from aiosb.server.http import serve
from aiosb.transport.http import HttpTransport
from aiosb.wire import atom as _atom
from aiosb.wire import status as _status

pytestmark = pytest.mark.looptime


@pytest.fixture
async def rest():
    """A namespace over the plain REST protocol (no aiosb extensions)."""
    async with serve() as server, aiosb.connect(
        server.namespace_url("plain"), extensions=False, operation_timeout=10
    ) as ns:
        yield ns


async def test_plain_rest_round_trip_send_receive_settle(rest):
    """What a real namespace offers over REST works through the same client code."""
    await rest.create_queue("q", lock_duration=timedelta(seconds=30))
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    async with rest.sender("q") as sender:
        await sender.send(Message(b"one", message_id="m1", subject="s", content_type="text/plain",
                                  time_to_live=timedelta(minutes=5),
                                  application_properties={"n": 7, "s": "x", "b": True, "at": at}))
        await sender.send([Message(b"two"), Message(b"three", correlation_id="c")])
    async with rest.receiver("q") as receiver:
        one, two, three = await receiver.receive(max_messages=5, max_wait=0)
        assert (one.body, one.message_id, one.subject, one.content_type) == (
            b"one", "m1", "s", "text/plain"
        )
        assert one.application_properties == {"n": 7, "s": "x", "b": True, "at": at}
        assert one.time_to_live == timedelta(minutes=5)
        assert (two.body, three.body, three.correlation_id) == (b"two", b"three", "c")
        await asyncio.sleep(20)
        until = await receiver.renew_lock(one)
        assert until == pytest.approx(one.enqueued_time + timedelta(seconds=50),
                                      abs=timedelta(seconds=1))
        await receiver.abandon(two)
        await receiver.complete([one, three])
        (again,) = await receiver.receive(max_wait=0)
        assert again.body == b"two" and again.delivery_count == 2
        with pytest.raises(errors.MessageLockLost):
            await receiver.complete(one)
        await receiver.complete(again)
    assert (await rest.runtime_properties("q")).active_message_count == 0


async def test_plain_rest_long_poll_and_receive_and_delete(rest):
    await rest.create_queue("q")
    async with rest.receiver("q", mode="receive_and_delete") as receiver:
        task = asyncio.create_task(receiver.receive(max_wait=timedelta(minutes=5)))
        await asyncio.sleep(30)
        async with rest.sender("q") as sender:
            await sender.send(Message(b"late"))
        (msg,) = await task
        assert msg.body == b"late" and msg.lock_token is None
        assert await receiver.receive(max_wait=0) == []


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("peek", "no peek"),
        ("defer", "no defer"),
        ("dead_letter", "no dead-letter"),
        ("deferred", "no receive of deferred"),
        ("schedule", "no schedule"),
        ("cancel", "no cancel"),
        ("session", "Sessions are not part of the Service Bus REST protocol"),
        ("bytes property", "cannot carry"),
    ],
)
async def test_plain_rest_says_clearly_what_the_protocol_lacks(rest, what, match):
    """Operations REST lacks raise InvalidOperation naming what is missing, before sending."""
    await rest.create_queue("q")
    async with rest.sender("q") as sender:
        await sender.send(Message(b"x"))
        async with rest.receiver("q") as receiver:
            with pytest.raises(errors.InvalidOperation, match=match):
                if what == "peek":
                    await receiver.peek(1)
                elif what in ("defer", "dead_letter"):
                    (msg,) = await receiver.receive(max_wait=0)
                    await getattr(receiver, what)(msg)
                elif what == "deferred":
                    await receiver.receive_deferred(1)
                elif what == "schedule":
                    await sender.schedule(Message(b"x"), datetime.now(UTC) + timedelta(hours=1))
                elif what == "cancel":
                    await sender.cancel_scheduled(1)
                elif what == "session":
                    async with rest.receiver("q", session_id="s") as by_session:
                        await by_session.receive(max_wait=0)
                else:
                    await sender.send(Message(b"x", application_properties={"raw": b"\x00"}))


async def test_sessions_are_refused_over_the_extensions_too():
    """Sessions are not part of the REST protocol, whichever server is on the other end."""
    async with serve() as server, aiosb.connect(server.namespace_url("ns")) as ns:
        await ns.create_queue("q", requires_session=True)
        with pytest.raises(errors.InvalidOperation, match="Sessions are not part"):
            async with ns.receiver("q", session_id="a"):  # accepting the session
                pass
        receiver = ns.receiver("q", session_id=aiosb.NEXT_AVAILABLE_SESSION)
        with pytest.raises(errors.InvalidOperation, match="Sessions are not part"):
            await receiver.receive(max_wait=0)
        await receiver.aclose()
        with pytest.raises(errors.InvalidOperation, match="Sessions are not part"):
            await ns.transport.manage(ManagementRequest("sessions", None, "q"))


def test_urls_and_credentials():
    real = HttpTransport.from_url(
        "https://contoso.servicebus.windows.net", aiosb.SasCredential("k", "v")
    )
    assert (real.namespace, real.extensions) == ("contoso", False)
    local = HttpTransport.from_url("http://127.0.0.1:5380/fabrikam")
    assert (local.namespace, local.extensions) == ("fabrikam", True)
    with pytest.raises(errors.InvalidArgument, match="credential"):
        HttpTransport.from_url("https://contoso.servicebus.windows.net")
    with pytest.raises(errors.InvalidArgument, match="names no namespace"):
        HttpTransport.from_url("http://127.0.0.1:5380")
    with pytest.raises(errors.InvalidArgument, match="unknown option"):
        aiosb.connect("http://127.0.0.1:5380/x", colour="red")


async def test_nothing_listening_is_said_at_once_and_counts_as_an_outage():
    """A server that never answered: one sentence at once, not 60 s of retries (issue
    17); still an outage for pairing (PN-6), so an app started during one fails over."""
    async with serve() as server:
        url = server.namespace_url("gone")
    async with aiosb.connect(url, operation_timeout=30) as ns:
        started = asyncio.get_running_loop().time()
        with pytest.raises(errors.EntityUnavailable, match="nothing is listening at http://"):
            await ns.create_queue("q")
        assert asyncio.get_running_loop().time() - started < 5
    assert is_outage(errors.EntityUnavailable("x"))


async def test_a_server_gone_after_answering_is_transient_and_ends_as_an_outage_timeout():
    """A refused connection once the server has answered is retried as transient until
    the operation timeout, which pairing counts as an outage (PN-6)."""
    async with serve() as server:
        url = server.namespace_url("gone")
        ns = aiosb.connect(url, operation_timeout=2)
        await ns.open()
        await ns.create_queue("q")
    try:
        with pytest.raises(errors.OperationTimeout) as info:
            await ns.create_queue("q2")
    finally:
        await ns.aclose()
    assert isinstance(info.value.__cause__, errors.TransientError)
    assert is_outage(info.value)


@pytest.mark.parametrize(
    "cls",
    [c for c in vars(errors).values()
     if isinstance(c, type) and issubclass(c, errors.ServiceBusError)],
)
def test_every_error_class_travels_exactly_through_the_error_header(cls):
    """Server and client share one table; the header carries the exact class, so that
    pairing classifies HTTP failures as it does embedded ones."""
    exc = cls("what happened")
    back = _status.error_from_status(
        _status.status_for(exc), exc.message, name=cls.__name__,
        retryable="true" if exc.retryable else "false",
    )
    assert type(back) is cls and back.retryable == exc.retryable
    assert is_outage(back) == is_outage(exc)


@pytest.mark.parametrize(
    ("status", "settling", "cls"),
    [
        (404, True, errors.MessageLockLost),
        (404, False, errors.EntityNotFound),
        (410, False, errors.EntityNotFound),
        (401, False, errors.Unauthorized),
        (403, False, errors.QuotaExceeded),
        (409, False, errors.EntityAlreadyExists),
        (413, False, errors.MessageSizeExceeded),
        (503, False, errors.ServerBusy),
        (500, False, errors.TransientError),
        (400, False, errors.InvalidOperation),
    ],
)
def test_status_codes_of_a_real_namespace_map_to_the_documented_meaning(status, settling, cls):
    """Without aiosb's header (a real namespace), the documented status decides."""
    exc = _status.error_from_status(status, "detail", settling=settling)
    assert type(exc) is cls
    assert exc.retryable == (status >= 500)


async def test_the_connection_string_serve_prints_connects_over_http():
    """``aiosb serve`` prints ``Endpoint=http://...``: connect() takes it as it is."""
    async with serve(key_name="Printed", key="cHJpbnRlZC1rZXk=") as server:
        async with aiosb.connect(server.connection_string("printed")) as ns:
            assert isinstance(ns.transport, HttpTransport)
            await ns.create_queue("q")
            assert await ns.queue_exists("q")


async def test_listing_pages_stop_where_a_server_ignores_skip_and_ask_the_api_version():
    """A listing asks page after page (``$skip``/``$top``, ``api-version`` as the SDK);
    a server that answers the same page whatever ``$skip`` says ends the listing there
    instead of looping for ever."""
    from aiohttp import web

    from aiosb.entities import QueueProperties

    asked = []
    page = _atom.feed_xml(
        [("queue", QueueProperties(f"q{i:03d}"), None, f"http://x/ns/q{i:03d}", f"q{i:03d}")
         for i in range(100)],
        "http://x/ns/$Resources/queues", "Queues",
    )

    async def listing(request: web.Request) -> web.Response:
        asked.append(dict(request.query))
        return web.Response(body=page, content_type="application/atom+xml")

    app = web.Application()
    app.router.add_get("/ns/$Resources/queues", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiosb.connect(f"http://127.0.0.1:{port}/ns", operation_timeout=10) as ns:
            queues = await ns.list_queues()
    finally:
        await runner.cleanup()
    assert [q.name for q in queues] == [f"q{i:03d}" for i in range(100)]
    assert asked == [
        {"$skip": "0", "$top": "100", "api-version": "2021-05"},
        {"$skip": "100", "$top": "100", "api-version": "2021-05"},
    ]


async def test_whole_numbers_at_the_ends_of_64_bits_come_back_whole_over_the_extensions():
    """A property may be any whole number AMQP carries (a long or a ulong: Message
    refuses one beyond, #47); those at the ends travel in both directions as the number
    they are, single and batched, never as a float (a JSON reader such as orjson reads
    a number past 63 bits as a float)."""
    big = {"big": 2**64 - 1, "neg": -(2**63), "edge": 2**63}
    async with serve() as server, aiosb.connect(
        server.namespace_url("whole"), operation_timeout=10
    ) as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send(Message(b"one", application_properties=big))
            await sender.send([Message(b"two", application_properties=big)] * 2)
        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            got = await receiver.receive(max_messages=3, max_wait=5)
    assert [m.application_properties for m in got] == [big] * 3
    assert {type(v) for m in got for v in m.application_properties.values()} == {int}
