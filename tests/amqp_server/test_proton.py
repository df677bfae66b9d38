"""Issue 47: Apache Qpid Proton (``python-qpid-proton``), a client that follows the AMQP
1.0 specification to the letter, against ``serve_amqp``, in Proton's own simple
send/receive pattern (a ``Container`` and a ``MessagingHandler``).

Proton matches the server's answering attach by name *and* role (AMQP 2.6.3: the answer
carries the opposite role); aiosb answered with the client's own role, so Proton took
the answer for a new link and its own links never opened. It signs in with SASL PLAIN, a
shared access key's name and key as the connection URL's user and password, as clients
without claims-based security do with Service Bus; ANONYMOUS without a ``$cbs`` token is
refused at attach, a wrong key at SASL.

Proton runs its own reactor: each client runs in a thread beside the test's loop, with a
timer of its own that stops it (a hang fails the test, it does not hold it)."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from typing import Any

import pytest

import aiosb
from aiosb.auth import DEV_KEY, DEV_KEY_NAME, SasCredential, key_table
from aiosb.server.amqp.front_end import AmqpServer, serve_amqp

proton = pytest.importorskip("proton", reason="the Proton tests need python-qpid-proton "
                             "(the dev extra)")
from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

NAMESPACE = "protonns"
SEND_KEY_NAME, SEND_KEY = "sender", "c2VuZE9ubHlLZXlGb3JQcm90b25UZXN0cw=="
LISTEN_KEY_NAME, LISTEN_KEY = "listener", "bGlzdGVuT25seUtleUZvclByb3RvblRlc3Rz"
#: Seconds a Proton client has to finish before its own timer stops it.
CLIENT_SECONDS = 30.0
COUNT = 1000


@pytest.fixture
async def server() -> Any:
    keys = key_table(DEV_KEY_NAME, DEV_KEY, {SEND_KEY_NAME: (SEND_KEY, ["Send"]),
                                             LISTEN_KEY_NAME: (LISTEN_KEY, ["Listen"])})
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.create_queue("q1")
        async with serve_amqp(namespace=NAMESPACE, keys=keys) as running:
            yield running


def url(server: AmqpServer, user: str | None = None, password: str | None = None) -> str:
    """The connection URL, a key's name and key as its user and password (quoted: a
    key's base64 has ``/``, ``+`` and ``=``)."""
    login = "" if user is None else (
        f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password or '', safe='')}@")
    return f"amqp://{login}127.0.0.1:{server.port}"


class Client(MessagingHandler):
    """The base of each client here: connects on start, stops itself after
    :data:`CLIENT_SECONDS`, and notes what went wrong (a link's or the transport's
    condition)."""

    def __init__(self, url: str, **handler: Any) -> None:
        super().__init__(**handler)
        self.url = url
        self.errors: list[str] = []
        self.timed_out = False
        self._timer: Any = None

    def on_start(self, event: Any) -> None:
        self._timer = event.container.schedule(CLIENT_SECONDS, self)
        self.connection = event.container.connect(self.url, reconnect=False)
        self.started(event)

    def started(self, event: Any) -> None:
        raise NotImplementedError

    def on_timer_task(self, event: Any) -> None:
        self.timed_out = True
        event.container.stop()

    def done(self, event: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        event.connection.close()

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.errors.append(f"{condition.name}: {condition.description}")
        self.done(event)

    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        self.errors.append(f"{condition.name}: {condition.description}")
        if self._timer is not None:
            self._timer.cancel()


class Send(Client):
    """Proton's simple_send: sends ``total`` messages as credit allows, counts them
    accepted."""

    def __init__(self, url: str, address: str, total: int) -> None:
        super().__init__(url)
        self.address, self.total = address, total
        self.sent = self.confirmed = 0

    def started(self, event: Any) -> None:
        event.container.create_sender(self.connection, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.total:
            event.sender.send(Message(id=self.sent, body={"sequence": self.sent}))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.confirmed += 1
        if self.confirmed == self.total:
            self.done(event)

    def on_rejected(self, event: Any) -> None:
        self.errors.append(f"rejected: {event.delivery.remote.condition}")
        self.done(event)


class Receive(Client):
    """Proton's simple_recv: takes ``expected`` messages, accepting each."""

    def __init__(self, url: str, address: str, expected: int) -> None:
        super().__init__(url, auto_accept=False)
        self.address, self.expected = address, expected
        self.bodies: list[Any] = []

    def started(self, event: Any) -> None:
        event.container.create_receiver(self.connection, self.address)

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        self.accept(event.delivery)
        if len(self.bodies) == self.expected:
            self.done(event)


class Request(Client):
    """One request and its reply on a node (``$cbs`` or an entity's ``$management``),
    a sender and a receiver on its address, as the SDKs ask; then, if given, the
    receiver ``then`` on the same connection."""

    def __init__(self, url: str, node: str, properties: dict[str, Any], body: Any,
                 then: str | None = None) -> None:
        super().__init__(url)
        self.node, self.properties, self.body, self.then = node, properties, body, then
        self.reply: Message | None = None
        self.then_got: list[Any] = []

    def started(self, event: Any) -> None:
        event.container.create_sender(self.connection, self.node)
        event.container.create_receiver(self.connection, self.node)
        self.asked = False

    def on_sendable(self, event: Any) -> None:
        if not self.asked:
            self.asked = True
            event.sender.send(Message(id="r1", reply_to=self.node, body=self.body,
                                      properties=self.properties))

    def on_message(self, event: Any) -> None:
        if event.receiver.source.address == self.node:
            self.reply = event.message
            if self.then is None:
                self.done(event)
            else:
                event.container.create_receiver(self.connection, self.then)
            return
        self.then_got.append(event.message.body)
        self.done(event)


async def run(client: Client) -> Client:
    """Run ``client`` in a Proton container of its own, in a thread."""
    await asyncio.wait_for(asyncio.to_thread(Container(client).run), CLIENT_SECONDS + 30)
    return client


async def settled_everything(path: str) -> int:
    """The messages ``path`` still holds once what was settled reached the broker (a
    disposition the client wrote just before it closed may come after its end)."""
    deadline = time.monotonic() + 5
    while (left := await _count(path)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


async def _count(path: str) -> int:
    """The messages ``path`` holds, locked ones too."""
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        return (await ns.runtime_properties(path)).total_message_count


async def test_proton_sends_and_receives_a_thousand_over_sasl_plain(server: AmqpServer):
    """#47: 1,000 sent and accepted, 1,000 received and accepted, nothing left on the
    queue, signed in with the development key as the URL's user and password."""
    plain = url(server, DEV_KEY_NAME, DEV_KEY)
    sent = await run(Send(plain, "q1", COUNT))
    assert (sent.errors, sent.timed_out, sent.confirmed) == ([], False, COUNT)
    got = await run(Receive(plain, "q1", COUNT))
    assert (got.errors, got.timed_out) == ([], False)
    assert got.bodies == [{"sequence": i} for i in range(COUNT)]
    assert await settled_everything("q1") == 0


async def test_proton_anonymous_without_a_token_is_refused_at_attach(server: AmqpServer):
    """#47: ANONYMOUS and no ``$cbs`` token: the attach is refused with the
    unauthorized condition, named by the link's error, and nothing is sent."""
    sent = await run(Send(url(server), "q1", 1))
    assert not sent.timed_out
    assert len(sent.errors) == 1 and sent.errors[0].startswith("amqp:unauthorized-access: ")
    assert "no token was put on $cbs" in sent.errors[0]
    assert sent.confirmed == 0 and await _count("q1") == 0


async def test_proton_with_a_wrong_key_fails_at_sasl(server: AmqpServer):
    """#47: a key name with another key fails the SASL outcome (auth); Proton reports
    the failed authentication and the connection is closed."""
    sent = await run(Send(url(server, DEV_KEY_NAME, SEND_KEY), "q1", 1))
    assert not sent.timed_out
    assert len(sent.errors) == 1 and "Authentication failed" in sent.errors[0], sent.errors
    assert sent.errors[0].startswith("amqp:unauthorized-access: ")
    assert sent.confirmed == 0


async def test_a_send_key_over_sasl_plain_sends_and_may_not_receive(server: AmqpServer):
    """#47: the connection has its key's rights, no more: a Send key's sender works,
    its receiver is refused as a token of that key is, with the right it needs."""
    plain = url(server, SEND_KEY_NAME, SEND_KEY)
    sent = await run(Send(plain, "q1", 3))
    assert (sent.errors, sent.confirmed) == ([], 3)
    got = await run(Receive(plain, "q1", 1))
    assert not got.timed_out and got.bodies == []
    assert len(got.errors) == 1
    assert got.errors[0].startswith("amqp:unauthorized-access: "), got.errors
    assert "has Send rights; this operation needs Listen" in got.errors[0]


async def test_a_listen_key_over_sasl_plain_asks_management_without_a_token(
        server: AmqpServer):
    """#47: a ``$management`` request on a PLAIN connection needs no ``$cbs`` token:
    a peek with a Listen key is answered with the message."""
    sent = await run(Send(url(server, DEV_KEY_NAME, DEV_KEY), "q1", 1))
    assert sent.confirmed == 1
    asked = await run(Request(
        url(server, LISTEN_KEY_NAME, LISTEN_KEY), "q1/$management",
        {"operation": "com.microsoft:peek-message"},
        {"from-sequence-number": 1, "message-count": 1}))
    assert (asked.errors, asked.timed_out) == ([], False)
    assert asked.reply is not None
    assert asked.reply.properties["statusCode"] == 200, asked.reply.properties
    assert len(asked.reply.body["messages"]) == 1


async def test_a_token_put_on_a_plain_connection_adds_its_rights(server: AmqpServer):
    """#47: SDKs may sign in with a key and put a token too: on a connection signed in
    with a Send key, a ``$cbs`` put-token signed with the Listen key lets it receive."""
    await run(Send(url(server, DEV_KEY_NAME, DEV_KEY), "q1", 1))
    audience = f"sb://127.0.0.1:{server.port}/q1"
    token = SasCredential(LISTEN_KEY_NAME, LISTEN_KEY).token(audience)
    asked = await run(Request(
        url(server, SEND_KEY_NAME, SEND_KEY), "$cbs",
        {"operation": "put-token", "type": "servicebus.windows.net:sastoken",
         "name": audience}, token, then="q1"))
    assert (asked.errors, asked.timed_out) == ([], False)
    assert asked.reply is not None and asked.reply.properties["status-code"] == 200
    assert asked.then_got == [{"sequence": 0}]
