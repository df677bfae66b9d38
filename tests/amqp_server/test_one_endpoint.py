"""Issue 34, point 1: one connection string reaches everything, as on Azure. An Azure
namespace serves AMQP and the HTTPS management API at one host, so the data plane's
connection string also manages; ``aiosb serve``'s AMQP port routes each connection by
its first byte: TLS (a ClientHello) to the management API over HTTPS, a plain HTTP
request to it as it is, anything else to AMQP. The official administration clients
(Python sync and aio, JavaScript) and ``aiosb.connect`` manage entities with the very
string the data plane takes; the certificate is ``aiosb serve``'s self-signed one,
trusted as docs/sdks.md says (``connection_verify``, ``NODE_EXTRA_CA_CERTS``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import port_free

import aiosb
from aiosb import Message
from aiosb.server.process import ServerProcess

pytest.importorskip("cryptography")
pytest.importorskip("azure.servicebus")
pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tls = tmp_path_factory.mktemp("tls")
    with ServerProcess(args=["--tls-dir", str(tls)]) as running:
        yield running


def test_the_banner_says_management_is_at_the_amqp_port_too(server: ServerProcess):
    assert Path(server.certificate).is_file()
    assert "management (the administration clients) over HTTPS at the same port" in (
        server.banner)


def test_the_python_administration_client_takes_the_data_plane_connection_string(
    server: ServerProcess,
):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.management import ServiceBusAdministrationClient, SqlRuleFilter

    connection = server.amqp_connection_string  # what the data plane takes, unchanged
    admin = ServiceBusAdministrationClient.from_connection_string(
        connection, connection_verify=server.certificate)
    with admin:
        admin.create_queue("one-endpoint", max_delivery_count=3)
        admin.create_topic("one-topic")
        admin.create_subscription("one-topic", "eu")
        admin.create_rule("one-topic", "eu", "eu-only",
                          filter=SqlRuleFilter("region = 'eu'"))
        with ServiceBusClient.from_connection_string(connection) as client:
            with client.get_queue_sender("one-endpoint") as sender:
                sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        counts = admin.get_queue_runtime_properties("one-endpoint")
        assert counts.active_message_count == 2
        assert admin.get_queue("one-endpoint").max_delivery_count == 3
        assert "one-endpoint" in [q.name for q in admin.list_queues()]
        rules = sorted(r.name for r in admin.list_rules("one-topic", "eu"))
        assert rules == ["$Default", "eu-only"]
        admin.delete_topic("one-topic")
        admin.delete_queue("one-endpoint")
        assert "one-endpoint" not in [q.name for q in admin.list_queues()]


async def test_the_aio_administration_client_takes_it_too(server: ServerProcess):
    from azure.servicebus.aio.management import ServiceBusAdministrationClient

    async with ServiceBusAdministrationClient.from_connection_string(
            server.amqp_connection_string, connection_verify=server.certificate) as admin:
        await admin.create_queue("aio-endpoint")
        assert (await admin.get_queue("aio-endpoint")).name == "aio-endpoint"
        await admin.delete_queue("aio-endpoint")


async def test_aiosb_connect_manages_with_the_amqp_connection_string(server: ServerProcess):
    """aiosb's AMQP transport manages through the SDK's administration client: with the
    certificate trusted (``connection_verify``), the same string creates, lists, counts
    and deletes entities and rules, and carries the messages."""
    async with aiosb.connect(server.amqp_connection_string,
                             connection_verify=server.certificate,
                             operation_timeout=20) as ns:
        await ns.create_queue("made-over-amqp", max_delivery_count=4)
        await ns.create_topic("events")
        await ns.create_subscription("events", "audit")
        async with ns.sender("made-over-amqp") as sender:
            await sender.send([Message(b"one"), Message(b"two")])
        assert (await ns.runtime_properties("made-over-amqp")).active_message_count == 2
        assert "made-over-amqp" in [q.name for q in await ns.list_queues()]
        assert (await ns.get_queue("made-over-amqp")).max_delivery_count == 4
        async with ns.receiver("made-over-amqp") as receiver:
            got = await receiver.receive(max_messages=2, max_wait=5)
            await receiver.complete(got)
        assert sorted(m.body for m in got) == [b"one", b"two"]
        await ns.delete_topic("events")
        await ns.delete_queue("made-over-amqp")
        assert not await ns.queue_exists("made-over-amqp")


async def test_an_http_client_at_the_amqp_port_is_served_as_at_the_http_port(
    server: ServerProcess,
):
    """A plain HTTP request at the AMQP port goes to the same server (what clients
    that take ``UseDevelopmentEmulator=true`` for plain HTTP send)."""
    amqp_port = server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0]
    async with aiosb.connect(f"http://127.0.0.1:{amqp_port}/sbemulatorns") as ns:
        await ns.create_queue("over-http-at-5672")
        async with ns.sender("over-http-at-5672") as sender:
            await sender.send(Message(b"plain"))
        assert (await ns.runtime_properties("over-http-at-5672")).active_message_count == 1
        await ns.delete_queue("over-http-at-5672")


async def test_without_a_certificate_tls_is_answered_in_amqp_and_said(caplog):
    """``serve_amqp`` with no management site (or no certificate): a TLS client hears
    AMQP (the SDK reports a port that does not speak TLS), the log says why, and AMQP
    clients are served as ever."""
    import asyncio
    import ssl

    from aiosb.server.amqp import serve_amqp

    async with aiosb.connect("memory://no-tls") as setup:
        await setup.create_queue("orders")
    caplog.set_level(logging.INFO, logger="aiosb.server.amqp")
    async with serve_amqp(namespace="no-tls") as server:
        context = ssl.create_default_context()
        with pytest.raises(ssl.SSLError, match=r"WRONG_VERSION_NUMBER|wrong version"):
            await asyncio.open_connection("127.0.0.1", server.port, ssl=context,
                                          server_hostname="localhost")
        async with aiosb.connect(server.connection_string(), operation_timeout=10) as ns:
            async with ns.sender("orders") as sender:
                await sender.send(Message(b"amqp as ever"))
    assert any("TLS client on the AMQP port" in r.getMessage() for r in caplog.records)




@pytest.fixture(scope="module")
def azure_like(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with AMQP over TLS on 5671: the SDKs speak TLS to any namespace that is
    not a development emulator, and always at 5671 (they drop the port they are given)."""
    import time

    for _ in range(60):  # the SDK samples' run holds it for seconds at the session's start
        if port_free(5671):
            break
        time.sleep(0.5)
    else:
        pytest.skip("port 5671 is taken on this machine: the SDK speaks AMQP over TLS there "
                    "and nowhere else")
    tls = tmp_path_factory.mktemp("tls5671")
    with ServerProcess(args=["--tls-dir", str(tls), "--amqps-port", "5671"]) as running:
        yield running


def test_amqp_over_tls_as_to_a_namespace_on_azure(azure_like: ServerProcess):
    """Issue 34, point 2: the SDK given a connection string without
    ``UseDevelopmentEmulator`` (TLS, port 5671), or a namespace and a credential
    (``AzureNamedKeyCredential``, ``AzureSasCredential``: two of the SDK's samples), as
    it would reach Azure; the certificate trusted with ``connection_verify``."""
    import asyncio
    import time

    from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    from aiosb.auth import DEV_KEY, DEV_KEY_NAME, SasCredential

    server = azure_like
    assert server.amqps_connection_string == (
        f"Endpoint=sb://localhost:5671;SharedAccessKeyName={DEV_KEY_NAME};"
        f"SharedAccessKey={DEV_KEY}")
    verify = server.certificate

    async def make() -> None:
        async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
            await ns.create_queue("tls-orders")

    asyncio.run(make())
    named = AzureNamedKeyCredential(DEV_KEY_NAME, DEV_KEY)
    token = SasCredential(DEV_KEY_NAME, DEV_KEY).token("sb://localhost/tls-orders",
                                                       expiry=time.time() + 3600)
    clients = [
        ServiceBusClient.from_connection_string(server.amqps_connection_string,
                                                connection_verify=verify),
        ServiceBusClient("localhost", named, connection_verify=verify),
        ServiceBusClient("localhost", AzureSasCredential(token), connection_verify=verify),
    ]
    for i, client in enumerate(clients):
        with client, client.get_queue_sender("tls-orders") as sender:
            sender.send_messages(ServiceBusMessage(f"over tls {i}"))
    with ServiceBusClient("localhost", named, connection_verify=verify) as client:
        with client.get_queue_receiver("tls-orders") as receiver:
            got = receiver.receive_messages(max_message_count=3, max_wait_time=5)
            for msg in got:
                receiver.complete_message(msg)
    assert sorted(str(m) for m in got) == ["over tls 0", "over tls 1", "over tls 2"]


def _amqp_port(server: ServerProcess) -> str:
    return server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0]


async def test_amqp_over_websockets_with_the_aio_sdk(server: ServerProcess):
    """Issue 34, point 2: ``TransportType.AmqpOverWebsocket``, what users behind
    firewalls and proxies take: an HTTPS upgrade at ``/$servicebus/websocket`` (here
    at the AMQP port, which answers HTTPS; on Azure, port 443)."""
    from azure.servicebus import ServiceBusMessage, TransportType
    from azure.servicebus.aio import ServiceBusClient

    async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
        await ns.create_queue("ws-aio")
    connection = server.amqp_connection_string.replace(";UseDevelopmentEmulator=true", "")
    async with ServiceBusClient.from_connection_string(
            connection, transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"https://localhost:{_amqp_port(server)}",
            connection_verify=server.certificate) as client:
        async with client.get_queue_sender("ws-aio") as sender:
            await sender.send_messages([ServiceBusMessage(f"ws {i}") for i in range(50)])
        async with client.get_queue_receiver("ws-aio") as receiver:
            got = []
            while len(got) < 50:
                batch = await receiver.receive_messages(max_message_count=50, max_wait_time=5)
                assert batch
                for msg in batch:
                    await receiver.complete_message(msg)
                got += [str(m) for m in batch]
    assert got == [f"ws {i}" for i in range(50)]


def test_amqp_over_websockets_with_the_sync_sdk(server: ServerProcess):
    pytest.importorskip("websocket")  # websocket-client: the sync SDK's WebSocket
    import asyncio

    from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType

    async def make() -> None:
        async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
            await ns.create_queue("ws-sync")

    asyncio.run(make())
    connection = server.amqp_connection_string.replace(";UseDevelopmentEmulator=true", "")
    with ServiceBusClient.from_connection_string(
            connection, transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"https://localhost:{_amqp_port(server)}",
            connection_verify=server.certificate) as client:
        with client.get_queue_sender("ws-sync") as sender:
            sender.send_messages(ServiceBusMessage("over a websocket"))
        with client.get_queue_receiver("ws-sync") as receiver:
            (msg,) = receiver.receive_messages(max_wait_time=5)
            receiver.complete_message(msg)
    assert str(msg) == "over a websocket"


async def test_a_websocket_upgrade_with_another_subprotocol_is_told_which(
        server: ServerProcess):
    import ssl

    import aiohttp

    context = ssl.create_default_context(cafile=server.certificate)
    url = f"https://localhost:{_amqp_port(server)}/$servicebus/websocket"
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await session.ws_connect(url, protocols=("mqtt",), ssl=context)
        assert caught.value.status == 400
        async with session.get(url, ssl=context, headers={
                "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Protocol": "mqtt"}) as answer:
            said = await answer.text()
    assert "AMQPWSB10" in said and "'mqtt'" in said


async def test_amqp_over_websockets_on_the_https_port_as_on_azure_at_443(tmp_path):
    """The other way docs/sdks.md gives: ``aiosb serve --tls`` serves AMQP over WebSockets on its
    HTTPS port too (on Azure, port 443)."""
    from azure.servicebus import ServiceBusMessage, TransportType
    from azure.servicebus.aio import ServiceBusClient

    with ServerProcess(args=["--tls", "--tls-dir", str(tmp_path)]) as server:
        https_port = server.url.rsplit(":", 1)[1]
        async with aiosb.connect(server.amqp_connection_string,
                                 connection_verify=server.certificate) as ns:
            await ns.create_queue("ws-443")
        connection = server.amqp_connection_string.replace(";UseDevelopmentEmulator=true", "")
        async with ServiceBusClient.from_connection_string(
                connection, transport_type=TransportType.AmqpOverWebsocket,
                custom_endpoint_address=f"https://localhost:{https_port}",
                connection_verify=server.certificate) as client:
            async with client.get_queue_sender("ws-443") as sender:
                await sender.send_messages(ServiceBusMessage("through the https port"))
            async with client.get_queue_receiver("ws-443") as receiver:
                (msg,) = await receiver.receive_messages(max_wait_time=5)
                await receiver.complete_message(msg)
    assert str(msg) == "through the https port"


def test_a_connection_verify_that_is_no_file_is_said_at_connect():
    with pytest.raises(aiosb.errors.InvalidArgument, match=r"connection_verify.*no such file"):
        aiosb.connect("Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=x;"
                      "UseDevelopmentEmulator=true", connection_verify="/no/such/ca.pem")


def test_the_certificate_is_kept_across_restarts_and_made_once_by_servers_starting_together(
        tmp_path):
    """What --tls-dir promises: a pair still good is reused (clients that trust it go on
    trusting it), one that is not (another key) is replaced, and servers starting at
    once make one pair between them (a lock)."""
    from concurrent.futures import ProcessPoolExecutor

    from aiosb.server import tls as _tls

    with ProcessPoolExecutor(4) as pool:
        made = list(pool.map(_make_shared, [str(tmp_path)] * 4))
    cert, key = tmp_path / "aiosb-cert.pem", tmp_path / "aiosb-key.pem"
    assert len(set(made)) == 1 and made[0] == cert.read_bytes()
    _tls.context(cert, key)  # the pair fits
    assert _tls.self_signed(tmp_path, reuse=True)[0].read_bytes() == made[0]
    other = tmp_path / "other"
    _tls.self_signed(other)
    key.write_bytes((other / "aiosb-key.pem").read_bytes())  # no longer the cert's key
    _tls.self_signed(tmp_path, reuse=True)
    assert cert.read_bytes() != made[0]
    _tls.context(cert, key)


def _make_shared(folder: str) -> bytes:
    from aiosb.server import tls as _tls

    cert, _ = _tls.self_signed(folder, reuse=True)
    return cert.read_bytes()
