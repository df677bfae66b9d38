"""Issue 15: the official administration client (azure-servicebus, unmodified) against
aiosb serve over HTTPS, with the default namespace at the root: entities, rules, counts,
pages past 100, namespace properties; and ``aiosb serve --tls`` from the command line."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import aiosb
from aiosb import Message
from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.server import tls as _tls
from aiosb.server.http import serve
from aiosb.server.process import ServerProcess

pytest.importorskip("cryptography")
management = pytest.importorskip("azure.servicebus.aio.management")
_names = itertools.count(1)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _tls.self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def admin(certificate) -> AsyncIterator[tuple[object, str]]:
    cert, key = certificate
    name = f"adminns{next(_names)}"
    async with serve(ssl_context=_tls.context(cert, key), root=name) as server:
        port = server.url.rsplit(":", 1)[1]
        connection = (f"Endpoint=sb://localhost:{port};SharedAccessKeyName={DEV_KEY_NAME};"
                      f"SharedAccessKey={DEV_KEY}")
        client = management.ServiceBusAdministrationClient.from_connection_string(
            connection, connection_verify=str(cert)
        )
        async with client:
            yield client, name


async def test_entities_and_rules_round_trip(admin):
    client, _ = admin
    queue = await client.create_queue("orders", max_delivery_count=3)
    assert (queue.name, queue.max_delivery_count) == ("orders", 3)
    queue.max_delivery_count = 5
    await client.update_queue(queue)
    assert (await client.get_queue("orders")).max_delivery_count == 5
    await client.create_topic("events")
    await client.create_subscription("events", "audit", max_delivery_count=2)
    assert [s.name async for s in client.list_subscriptions("events")] == ["audit"]
    from azure.servicebus.management import SqlRuleFilter

    await client.create_rule("events", "audit", "eu", filter=SqlRuleFilter("region = @r",
                                                                          {"@r": "eu"}))
    rules = [r.name async for r in client.list_rules("events", "audit")]
    assert rules == ["$Default", "eu"]
    got = await client.get_rule("events", "audit", "eu")
    assert got.filter.sql_expression == "region = @r" and got.filter.parameters == {"@r": "eu"}
    await client.delete_rule("events", "audit", "eu")
    await client.delete_subscription("events", "audit")
    await client.delete_topic("events")
    await client.delete_queue("orders")
    assert [q.name async for q in client.list_queues()] == []


async def test_counts_pages_and_namespace_properties(admin):
    client, name = admin
    await asyncio.gather(*(client.create_queue(f"q{i:03d}") for i in range(105)))
    assert len([q async for q in client.list_queues()]) == 105  # past a page of 100
    async with aiosb.connect(f"memory://{name}") as ns, ns.sender("q007") as sender:
        await sender.send([Message(b"a"), Message(b"b")])
    counts = await client.get_queue_runtime_properties("q007")
    assert (counts.active_message_count, counts.total_message_count) == (2, 2)
    listed = {r.name: r async for r in client.list_queues_runtime_properties()}
    assert len(listed) == 105 and listed["q007"].active_message_count == 2
    info = await client.get_namespace_properties()
    assert info.name == name and info.messaging_sku == "Standard"
    made = await client.create_queue("forwarder", forward_to="q001")  # sent as sb://...
    assert made.forward_to.rstrip("/").endswith("q001")


async def test_rules_list_past_a_page(admin):
    """Issue 34: a subscription's rules page as its queues do: 105 rules come back as
    105, not as the first 100 (the listing said no next page)."""
    from azure.servicebus.management import SqlRuleFilter

    client, name = admin
    await client.create_topic("many")
    await client.create_subscription("many", "audit")
    await asyncio.gather(*(
        client.create_rule("many", "audit", f"r{i:03d}", filter=SqlRuleFilter(f"n = {i}"))
        for i in range(105)))
    listed = [r.name async for r in client.list_rules("many", "audit")]
    assert sorted(listed) == sorted(["$Default", *(f"r{i:03d}" for i in range(105))])
    async with aiosb.connect(f"memory://{name}") as ns:  # the same, through aiosb
        assert len(await ns.list_rules("many", "audit")) == 106


def test_aiosb_serve_tls_makes_a_certificate_the_admin_client_trusts(tmp_path):
    with ServerProcess(args=["--tls", "--tls-dir", str(tmp_path), "--namespace", "clins"]) \
            as server:
        assert server.url.startswith("https://")
        port = server.url.rsplit(":", 1)[1]
        connection = (f"Endpoint=sb://localhost:{port};SharedAccessKeyName={DEV_KEY_NAME};"
                      f"SharedAccessKey={DEV_KEY}")

        async def run() -> str:
            client = management.ServiceBusAdministrationClient.from_connection_string(
                connection, connection_verify=str(tmp_path / "aiosb-cert.pem")
            )
            async with client:
                await client.create_queue("orders")
                return (await client.get_namespace_properties()).name

        assert asyncio.run(run()) == "clins"
        # The banner's python line works as printed: the certificate trusted through the
        # environment, the credential, and the extensions (peek is one).
        line = next(x for x in server.banner.splitlines() if "python (SSL_CERT_FILE=" in x)
        cert = line.split("SSL_CERT_FILE=", 1)[1].split(" in the environment", 1)[0]
        call = line.split("): ", 1)[1]
        script = (
            "import asyncio, aiosb\n"
            "async def main():\n"
            f"    async with {call} as ns:\n"
            "        await ns.create_queue('hinted')\n"
            "        async with ns.sender('hinted') as s:\n"
            "            await s.send(aiosb.Message(b'x'))\n"
            "        async with ns.receiver('hinted') as r:\n"
            "            print(len(await r.peek(5)))\n"
            "asyncio.run(main())\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env={**os.environ, "SSL_CERT_FILE": cert}, timeout=60)
        assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr[-2000:]


@pytest.mark.looptime(False)
async def test_an_untrusted_certificate_is_said_at_once_not_called_nothing_listening(
        certificate):
    """Issue 17: aiosb's HTTP transport against `aiosb serve --tls` on a machine that does
    not trust its certificate: the error names the certificate and how to trust it, at
    once, instead of "nothing is listening" (the server is) or retries."""
    cert, key = certificate
    async with serve(ssl_context=_tls.context(cert, key), root="untrusted") as server:
        url = server.url.replace("http://", "https://") + "/untrusted"
        async with aiosb.connect(url, credential=(DEV_KEY_NAME, DEV_KEY),
                                 operation_timeout=30) as ns:
            started = asyncio.get_running_loop().time()
            with pytest.raises(aiosb.errors.InvalidOperation,
                               match=r"certificate this machine does not trust.*SSL_CERT_FILE"):
                await ns.queue_exists("orders")
            assert asyncio.get_running_loop().time() - started < 5  # not retried


@pytest.mark.looptime(False)
async def test_managing_over_an_amqp_connection_string_says_where_management_is():
    """Issue 17: aiosb.connect() with the AMQP connection string aiosb serve prints sends
    and receives; its management (the SDK's administration client, HTTPS at the same
    port) meets a port that speaks AMQP only. It is said at once, with the way to manage
    entities, not retried for the operation timeout as a TLS error."""
    from aiosb.server.amqp import serve_amqp

    async with aiosb.connect("memory://amqpadmin") as setup:
        await setup.create_queue("orders")
    async with serve_amqp(namespace="amqpadmin") as server:
        async with aiosb.connect(server.connection_string(), operation_timeout=30) as ns:
            async with ns.sender("orders") as sender:
                await sender.send(Message(b"works"))
            started = asyncio.get_running_loop().time()
            with pytest.raises(aiosb.errors.InvalidOperation,
                               match=r"does not speak TLS.*HTTP port"):
                await ns.queue_exists("orders")
            assert asyncio.get_running_loop().time() - started < 5


@pytest.mark.looptime(False)
@pytest.mark.parametrize("case", ["another name", "expired"])
async def test_a_trusted_certificate_for_another_name_or_out_of_date_is_said_so(
        tmp_path, monkeypatch, case):
    """Issue 17: a certificate this machine trusts, but issued for another address, or
    out of date, is named as such, not met with advice to trust it (which would not
    help)."""
    if case == "expired":  # made two days ago, for one day
        class TwoDaysAgo(datetime.datetime):
            @classmethod
            def now(cls, tz=None):
                return datetime.datetime.now(tz) - datetime.timedelta(days=2)

        monkeypatch.setattr(_tls, "_dt", SimpleNamespace(
            datetime=TwoDaysAgo, timedelta=datetime.timedelta, UTC=datetime.UTC))
    cert, key = _tls.self_signed(tmp_path, days=1)
    monkeypatch.undo()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    host = "127.0.0.2" if case == "another name" else "127.0.0.1"
    async with serve(host, ssl_context=_tls.context(cert, key), root="elsewhere") as server:
        url = server.url.replace("http://", "https://") + "/elsewhere"
        async with aiosb.connect(url, credential=(DEV_KEY_NAME, DEV_KEY),
                                 operation_timeout=30) as ns:
            says = "certificate for another name" if case == "another name" else "not valid now"
            with pytest.raises(aiosb.errors.InvalidOperation, match=says) as caught:
                await ns.queue_exists("orders")
            assert "SSL_CERT_FILE" not in str(caught.value)


@pytest.mark.looptime(False)
async def test_the_rest_protocol_over_tls_as_a_real_namespace_gets_it(certificate, monkeypatch):
    """What aiosb sends a real namespace (https://: the REST protocol, TLS, its own HTTP
    client) against aiosb serve with TLS: management in Atom, single and batch sends,
    peek-lock receives, renew, complete, runtime counts."""
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    async with serve(ssl_context=_tls.context(cert, key), root="restls") as server:
        url = server.url.replace("http://", "https://") + "/restls"
        async with aiosb.connect(url, credential=(DEV_KEY_NAME, DEV_KEY),
                                 operation_timeout=30) as ns:
            assert ns.transport.extensions is False  # https: the documented protocol
            await ns.create_queue("orders", max_delivery_count=3)
            async with ns.sender("orders") as sender:
                await sender.send(Message(b"one", application_properties={"n": 1}))
                await sender.send([Message(b"two"), Message(b"three")])
            assert (await ns.runtime_properties("orders")).active_message_count == 3
            async with ns.receiver("orders") as receiver:
                got = await receiver.receive(max_messages=3, max_wait=5)
                assert [m.body for m in got] == [b"one", b"two", b"three"]
                assert got[0].application_properties == {"n": 1}
                assert await receiver.renew_lock(got[0]) > got[0].enqueued_time
                await receiver.complete(got)
            assert (await ns.runtime_properties("orders")).total_message_count == 0
            await ns.delete_queue("orders")
