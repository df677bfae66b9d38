"""#51: the ``aiosb_server`` fixture's administration clients trust the server on the
releases users pin, not only on the newest. Before 7.15 the official administration
client builds its transport without its constructor's keywords, so a
``connection_verify`` (or ``transport``) given there is ignored; the fixture, which once
trusted the server that way, left the client failing its TLS handshake
(``CERTIFICATE_VERIFY_FAILED``) on 7.11 to 7.14.

A user's test module run by pytest in a child process, with azure-servicebus 7.14.3
(the release Microsoft's emulator kit pins) and 7.12.3 (the declared floor's line; 7.13
behaves alike), each taken from the release matrix's venv of it (``venvs.py``, made on
first use and kept): that venv's
site-packages go on ``PYTHONPATH`` after this checkout, ahead of this venv's own, so
``azure.servicebus`` is the release's while pytest and aiosb's dependencies stay this
venv's (both venvs are made by this Python)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import aiosb

from . import venvs

pytest_plugins = ["pytester"]
pytest.importorskip("cryptography")  # the administration client needs HTTPS

#: Releases before 7.15, whose administration client ignores its constructor's
#: ``connection_verify``.
RELEASES = ("7.12.3", "7.14.3")

USER_TESTS = '''
import importlib.metadata

from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.aio.management import (
    ServiceBusAdministrationClient as AsyncAdministrationClient)
from azure.servicebus.management import ServiceBusAdministrationClient

RELEASE = importlib.metadata.version("azure-servicebus")


def test_the_release():
    assert RELEASE == "{release}"


def test_a_round_trip_as_the_docs_page_says_for_the_release(aiosb_server):
    ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string).create_queue("orders")
    before_7_14 = tuple(int(part) for part in RELEASE.split(".")[:2]) < (7, 14)
    options = dict(  # no UseDevelopmentEmulator before 7.14: AMQP over WebSockets
        transport_type=TransportType.AmqpOverWebsocket,
        custom_endpoint_address=f"https://{aiosb_server.endpoint}",
        connection_verify=aiosb_server.certificate) if before_7_14 else {}
    with ServiceBusClient.from_connection_string(
            aiosb_server.connection_string, **options) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage(b"order 1"))
        with client.get_queue_receiver("orders", max_wait_time=5) as receiver:
            [message] = receiver.receive_messages(max_message_count=1)
            assert str(message) == "order 1"
            receiver.complete_message(message)


def test_the_sync_administration_client(aiosb_server):
    admin = ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string)
    admin.create_queue("orders")
    assert [queue.name for queue in admin.list_queues()] == ["orders"]


async def test_the_aio_administration_client(aiosb_server):
    async with AsyncAdministrationClient.from_connection_string(
            aiosb_server.connection_string) as admin:
        await admin.create_topic("events")
        assert [topic.name async for topic in admin.list_topics()] == ["events"]


def test_a_certificate_given_per_call_works_as_before(aiosb_server):
    admin = ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string)
    assert [queue.name for queue in admin.list_queues(
        connection_verify=aiosb_server.certificate)] == []
'''


@pytest.mark.timeout(900)  # the venv, made on first use: pip, as the matrix's
@pytest.mark.parametrize("release", RELEASES)
def test_the_fixtures_administration_clients_trust_the_server_before_7_15(
        release: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    python = venvs.python_of(release)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    here = str(Path(aiosb.__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, site]))
    pytester.makeini("[pytest]\nasyncio_mode = auto\n"
                     "asyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user=USER_TESTS.replace("{release}", release))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=5)
