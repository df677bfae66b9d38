"""One endpoint, parsed once (#49): :func:`aiosb.connect` parses the URL or connection
string into an :class:`~aiosb._endpoint.Endpoint` and hands it to the transport, which
parses nothing again; the bridge's senders and the Spark writer pass the URL down to
``connect`` and parse nothing of their own."""

from __future__ import annotations

from typing import Any

import pytest

import aiosb
from aiosb import errors
from aiosb._endpoint import Endpoint
from aiosb.bridge import Bridge
from aiosb.spark import _write
from aiosb.spark._options import write_options
from aiosb.transport.amqp import AmqpTransport
from aiosb.transport.http import HttpTransport

pytestmark = pytest.mark.timeout(30)

KEY = ("RootManageSharedAccessKey", "c2VjcmV0")
SAS = f"SharedAccessKeyName={KEY[0]};SharedAccessKey={KEY[1]}"


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs :meth:`Endpoint.parse` is given, in order, while the test runs."""
    seen: list[str] = []
    original = Endpoint.parse.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Endpoint], url: str, *args: Any, **kwargs: Any) -> Endpoint:
        seen.append(url)
        return original(cls, url, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Endpoint, "parse", classmethod(counting))
    return seen


@pytest.mark.parametrize(
    ("url", "credential", "transport"),
    [
        ("memory://parsed-once", None, "MemoryTransport"),
        ("memory://parsed-once-premium?tier=premium", None, "MemoryTransport"),
        ("http://127.0.0.1:5380/contoso", None, "HttpTransport"),
        ("https://contoso.servicebus.windows.net", KEY, "HttpTransport"),
        (f"Endpoint=http://127.0.0.1:5380/contoso;{SAS}", None, "HttpTransport"),
        (f"Endpoint=sb://contoso.servicebus.windows.net/;{SAS}", None, "AmqpTransport"),
        (f"Endpoint=sb://localhost:5672;{SAS};UseDevelopmentEmulator=true", None,
         "AmqpTransport"),
        ("sb://contoso.servicebus.windows.net", KEY, "AmqpTransport"),
    ],
)
def test_connect_parses_its_endpoint_once_for_every_scheme(parsed, url, credential, transport):
    """#49: one ``Endpoint.parse`` per ``connect``, whatever the transport; the
    transport keeps the Endpoint it was handed (memory's takes its name)."""
    ns = aiosb.connect(url, credential=credential, proxy=False)
    assert type(ns.transport).__name__ == transport
    assert parsed == [url]
    endpoint = getattr(ns.transport, "endpoint", None)
    assert endpoint is None or endpoint.kind in ("http", "amqp")


def test_a_memory_namespaces_tier_comes_from_the_parsed_query(parsed):
    """#49: ``?tier=`` is read from the Endpoint's query, not from the URL split again."""
    ns = aiosb.connect("memory://parsed-once-basic?tier=basic")
    assert parsed == ["memory://parsed-once-basic?tier=basic"]
    assert ns.transport._ns.tier == "basic"  # type: ignore[attr-defined]
    with pytest.raises(errors.InvalidArgument, match="colour"):
        aiosb.connect("memory://parsed-once-basic?colour=red")


def test_transports_take_an_endpoint_and_from_url_parses_it_once(parsed):
    """#49: a transport is handed an Endpoint; a URL goes through ``from_url``, which
    parses it once and hands the Endpoint on."""
    with pytest.raises(errors.InvalidArgument, match="from_url"):
        HttpTransport("http://127.0.0.1:5380/contoso")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="from_url"):
        AmqpTransport(f"Endpoint=sb://contoso.servicebus.windows.net/;{SAS}")  # type: ignore[arg-type]
    assert parsed == []
    http = HttpTransport.from_url("http://127.0.0.1:5380/contoso", proxy=False)
    amqp = AmqpTransport.from_url(f"Endpoint=sb://contoso.servicebus.windows.net/;{SAS}")
    assert (http.namespace, amqp.namespace) == ("contoso", "contoso")
    assert len(parsed) == 2


@pytest.fixture
def bridge():
    with Bridge() as b:
        yield b


def test_a_bridge_sender_parses_each_namespace_once(parsed, bridge):
    """#49: ``Bridge.sender`` hands the URL to ``connect``: one parse for the namespace,
    one for a secondary, none for a sender it already has."""
    with bridge.connect("memory://parsed-once-bridge") as ns:
        ns.create_queue("q")
    parsed.clear()
    bridge.sender("memory://parsed-once-bridge", "q")
    assert parsed == ["memory://parsed-once-bridge"]
    bridge.sender("memory://parsed-once-bridge", "q")
    assert parsed == ["memory://parsed-once-bridge"]
    parsed.clear()
    bridge.sender("memory://parsed-once-bridge", "q", secondary="memory://parsed-once-other")
    assert parsed == ["memory://parsed-once-bridge", "memory://parsed-once-other"]


def test_the_spark_writers_sender_parses_its_namespace_once(parsed, bridge, monkeypatch):
    """#49: the Spark writer's options carry the URL as given; the task's sender parses
    it once, in ``connect``."""
    with bridge.connect("memory://parsed-once-spark") as ns:
        ns.create_queue("q")
    options = write_options({"namespace": "memory://parsed-once-spark", "entity": "q"})
    parsed.clear()
    monkeypatch.setattr(_write.Bridge, "shared", classmethod(lambda cls: bridge))
    sender = _write._sender(options)
    sender.send(aiosb.Message(b"row"))
    assert parsed == ["memory://parsed-once-spark"]
