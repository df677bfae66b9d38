"""The name of a namespace reached over AMQP: the first segment of its backlog queues
(PN-7), so two different endpoints never share one, and a Service Bus namespace keeps
the name Service Bus gives it."""

from __future__ import annotations

import pytest

import aiosb
from aiosb import errors
from aiosb.entities import parse_entity_path
from aiosb.transport.amqp import AmqpTransport
from aiosb.transport.amqp._namespace_name import namespace_name

pytestmark = pytest.mark.timeout(10)

KEY = "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=c2VjcmV0"
EMULATOR = f"{KEY};UseDevelopmentEmulator=true"


def name_of(endpoint: str, rest: str = EMULATOR) -> str:
    return AmqpTransport.from_url(f"Endpoint={endpoint};{rest}").namespace


@pytest.mark.parametrize(
    ("endpoint", "rest", "name"),
    [
        ("sb://contoso.servicebus.windows.net/", KEY, "contoso"),
        ("sb://Contoso.servicebus.windows.net:5671/", KEY, "contoso"),
        ("sb://contoso.servicebus.chinacloudapi.cn/", KEY, "contoso"),
        ("sb://contoso.servicebus.usgovcloudapi.net", KEY, "contoso"),
        ("sb://localhost:5672", EMULATOR, "localhost_5672"),
        ("sb://localhost", EMULATOR, "localhost_5672"),  # the SDK's emulator port
        ("sb://LocalHost:5673/", EMULATOR, "localhost_5673"),
        ("sb://127.0.0.1:5672", EMULATOR, "127.0.0.1_5672"),
        ("sb://[::1]:5672", EMULATOR, "0000-0000-0000-0000-0000-0000-0000-0001_5672"),
        ("sb://broker.example.com", KEY, "broker.example.com_5671"),  # TLS: the SDK's port
        ("sb://broker.example.com:5671", KEY, "broker.example.com_5671"),
    ],
)
def test_a_namespace_is_named_by_its_service_bus_name_or_else_by_host_and_port(
    endpoint, rest, name
):
    """PN-7: ``NAME.servicebus.*`` is NAME, as before; any other host names no namespace,
    so host and port do, in characters an entity path takes."""
    assert name_of(endpoint, rest) == name
    assert parse_entity_path(f"{name}/x-servicebus-transfer/0").entity.startswith(name)


def test_two_emulators_on_one_host_have_two_names():
    """PN-7, PN-13: two ``aiosb serve`` processes (or the Microsoft emulator beside one)
    on one machine are two primaries; one name would give them one set of backlog
    queues in a shared secondary, and each syphon would empty the other's into the
    wrong primary. Before this, both were ``localhost``, and every IPv4 host was its
    first octet."""
    names = {
        name_of("sb://localhost"),  # the Microsoft emulator: 5672
        name_of("sb://localhost:5673"),
        name_of("sb://localhost:5674"),
        name_of("sb://127.0.0.1:5673"),
        name_of("sb://127.0.0.2:5673"),
    }
    assert len(names) == 5


def test_one_endpoint_written_with_or_without_its_default_port_has_one_name():
    assert name_of("sb://localhost") == name_of("sb://localhost:5672") == "localhost_5672"
    assert namespace_name("broker", None) == namespace_name("broker", 5671) == "broker_5671"


def test_an_sb_url_with_a_credential_is_named_alike():
    secret = ("RootManageSharedAccessKey", "c2VjcmV0")
    assert aiosb.connect("sb://contoso.servicebus.windows.net", credential=secret).name == (
        "contoso"
    )
    assert aiosb.connect("sb://localhost:5673", credential=secret).name == "localhost_5673"


def test_an_endpoint_whose_port_is_no_number_is_refused_when_connecting():
    with pytest.raises(errors.InvalidArgument, match="no valid port"):
        aiosb.connect(f"Endpoint=sb://localhost:amqp;{EMULATOR}")
