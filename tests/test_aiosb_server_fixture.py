"""The ``aiosb_server`` fixture (#51), as a user's project meets it: test modules that
import only ``azure.servicebus`` and pytest, run by pytest in this process
(``pytester``), with nothing else set up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import aiosb

pytest_plugins = ["pytester"]
pytest.importorskip("azure.servicebus")

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

USER_TESTS = '''
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncClient
from azure.servicebus.aio.management import (
    ServiceBusAdministrationClient as AsyncAdministrationClient)
from azure.servicebus.exceptions import ServiceBusError
from azure.servicebus.management import ServiceBusAdministrationClient


def test_a_round_trip(aiosb_server):
    admin = ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string)
    admin.create_queue("orders")
    with ServiceBusClient.from_connection_string(aiosb_server.connection_string) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage(b"order 1"))
        with client.get_queue_receiver("orders", max_wait_time=5) as receiver:
            [message] = receiver.receive_messages(max_message_count=1)
            assert str(message) == "order 1"
            receiver.complete_message(message)


def test_the_next_test_sees_no_entity_of_the_last(aiosb_server):
    admin = ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string)
    assert [queue.name for queue in admin.list_queues()] == []
    admin.create_queue("orders")      # the name the last test used, free again


async def test_an_outage_injected_and_healed(aiosb_server):
    async with AsyncAdministrationClient.from_connection_string(
            aiosb_server.connection_string) as admin:
        await admin.create_queue("orders")
    async with AsyncClient.from_connection_string(aiosb_server.connection_string,
                                                  retry_total=0) as client:
        with aiosb_server.faults.fail("orders"):
            with pytest.raises(ServiceBusError):
                async with client.get_queue_sender("orders") as sender:
                    await sender.send_messages(ServiceBusMessage(b"lost"))
        async with client.get_queue_sender("orders") as sender:
            await sender.send_messages(ServiceBusMessage(b"after the outage"))
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user's project: its ini file, in a folder of its own; the server's process
    imports the aiosb these tests import (a checkout's, from another folder)."""
    pytester.makeini(INI)
    here = str(Path(aiosb.__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])]))
    return pytester


def test_a_user_module_on_the_sdk_passes_a_round_trip_isolation_and_an_outage(project):
    """Issue #51: the three tests of the issue's 'done when', sync and aio clients,
    the administration clients with no certificate given."""
    project.makepyfile(test_orders=USER_TESTS)
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_a_failed_test_carries_the_server_log(project):
    """Issue #51: the report of a failed test has a section with what the server logged
    while it ran (here the management request that made its queue); a test that passes
    has none."""
    project.makepyfile(test_failing='''
from azure.servicebus.management import ServiceBusAdministrationClient

def test_passes(aiosb_server):
    ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string).create_queue("quiet-one")

def test_fails(aiosb_server):
    ServiceBusAdministrationClient.from_connection_string(
        aiosb_server.connection_string).create_queue("invoices")
    assert False, "the order was never billed"
''')
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*- aiosb serve log -*", "*PUT /invoices 201*"])
    assert "quiet-one" not in result.stdout.str()


def test_a_failed_test_carries_the_amqp_refusals_too(project):
    """#51's leftover: the server log of a failed test says what the AMQP front end
    refused (a token for a queue that is not there), not only the HTTP requests."""
    project.makepyfile(test_refused='''
from azure.servicebus import ServiceBusClient, ServiceBusMessage

def test_fails(aiosb_server):
    with ServiceBusClient.from_connection_string(aiosb_server.connection_string,
                                                 retry_total=0) as client:
        with client.get_queue_sender("nowhere") as sender:
            sender.send_messages(ServiceBusMessage(b"lost"))
''')
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- aiosb serve log -*",
                                 "*AMQP: refused a token for *nowhere: 404*"])


def test_options_by_marker_and_ini(project):
    """Issue #51: a Config.json preloads each test's namespace (made again after a test
    deleted its queue), the ini option serves durably, the marker picks the loop."""
    project.path.joinpath("Config.json").write_text(json.dumps({"UserConfig": {
        "Namespaces": [{"Name": "shop", "Queues": [{"Name": "orders"}]}]}}))
    project.makeini(INI + "aiosb_server_durable = true\naiosb_server_config = Config.json\n")
    project.makepyfile(test_options='''
import pytest
from azure.servicebus.management import ServiceBusAdministrationClient

def queues(server):
    admin = ServiceBusAdministrationClient.from_connection_string(server.connection_string)
    return admin, [queue.name for queue in admin.list_queues()]

def test_preloaded_and_durable(aiosb_server):
    admin, names = queues(aiosb_server)
    assert names == ["orders"] and aiosb_server.namespace == "shop"
    assert "durable:" in aiosb_server.process.banner
    admin.delete_queue("orders")

def test_preloaded_again(aiosb_server):
    assert queues(aiosb_server)[1] == ["orders"]

@pytest.mark.aiosb_server(loop="asyncio")
def test_the_loop_by_marker(aiosb_server):
    assert "event loop: asyncio" in aiosb_server.process.banner
    assert queues(aiosb_server)[1] == ["orders"]
''')
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
