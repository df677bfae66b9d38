"""Issue 34, point 4: aiosb's own clients through a real HTTP proxy (proxy.py, started by
the test), and a certificate to trust given to ``connect`` (a CA file or an
``ssl.SSLContext``) rather than the whole process's.

- The HTTP transport: TLS in a CONNECT tunnel, plain HTTP as absolute-form requests,
  with the proxy's basic authentication; HTTPS_PROXY / HTTP_PROXY from the environment
  unless NO_PROXY names the host; ``proxy=False`` turns them off.
- The AMQP transport: the proxy handed to the official SDK, which then speaks AMQP over
  WebSockets through it (and its administration client HTTPS through it).
- A proxy that wants credentials, or one that is no proxy URL, is one clear sentence.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxy_server import ProxyServer

import aiosb
from aiosb import Message, errors
from aiosb._endpoint import Endpoint, Proxy
from aiosb.server.process import ServerProcess

pytestmark = pytest.mark.timeout(120)

AUTH = "aiosb:pr0xy secret"  # a space and a digit: quoted in the URL, sent as given


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    with ProxyServer(tmp_path_factory.mktemp("proxy"), auth=AUTH) as running:
        yield running


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("tls")
    with ServerProcess(args=["--tls", "--tls-dir", str(folder)]) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("plain")
    with ServerProcess(args=["--tls-dir", str(folder)]) as running:
        yield running


def proxy_url(proxy: ProxyServer) -> str:
    user, password = AUTH.split(":")
    return f"http://{user}:{password.replace(' ', '%20')}@127.0.0.1:{proxy.port}"


def https_port(server: ServerProcess) -> int:
    return int(server.url.rsplit(":", 1)[1])


async def round_trip(ns: aiosb.Namespace, queue: str) -> bytes:
    await ns.create_queue(queue)
    await ns.sender(queue).send(Message(b"through the proxy"))
    async with ns.receiver(queue, mode="receive_and_delete") as receiver:
        (got,) = await receiver.receive(max_wait=5)
    return got.body


async def test_https_goes_through_a_connect_tunnel_with_a_ca_file(proxy, tls_server):
    port = https_port(tls_server)
    url = f"https://localhost:{port}/tunnelled"
    before = len(proxy.seen())
    async with aiosb.connect(url, credential=("RootManageSharedAccessKey", DEV_KEY),
                             extensions=True, proxy=proxy_url(proxy),
                             connection_verify=tls_server.certificate) as ns:
        assert await round_trip(ns, "q1") == b"through the proxy"
    assert f"CONNECT localhost:{port}" in proxy.seen(f"CONNECT localhost:{port}", after=before)


async def test_an_ssl_context_is_trusted_as_a_ca_file_is(proxy, tls_server):
    context = ssl.create_default_context(cafile=tls_server.certificate)
    url = f"https://localhost:{https_port(tls_server)}/bycontext"
    async with aiosb.connect(url, credential=("RootManageSharedAccessKey", DEV_KEY),
                             extensions=True, proxy=False, connection_verify=context) as ns:
        assert await round_trip(ns, "q1") == b"through the proxy"
    # And without either, the machine does not trust the server's certificate.
    async with aiosb.connect(url, credential=("RootManageSharedAccessKey", DEV_KEY),
                             extensions=True, proxy=False) as ns:
        with pytest.raises(errors.InvalidOperation, match="does not trust"):
            await ns.create_queue("q2")


async def test_plain_http_goes_through_the_proxy_in_absolute_form(proxy, server):
    port = server.url.rsplit(":", 1)[1]
    async with aiosb.connect(f"{server.url}/plainproxied", proxy=proxy_url(proxy)) as ns:
        assert await round_trip(ns, "q1") == b"through the proxy"
    seen = proxy.seen(f"127.0.0.1:{port}/plainproxied")
    assert any(line.startswith("PUT ") and f"127.0.0.1:{port}/plainproxied/q1" in line
               for line in seen), seen


async def test_https_proxy_comes_from_the_environment_unless_no_proxy_names_the_host(
        proxy, tls_server, monkeypatch):
    port = https_port(tls_server)
    monkeypatch.setenv("HTTPS_PROXY", proxy_url(proxy))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    url = f"https://localhost:{port}/fromenv"
    before = len(proxy.seen())
    async with aiosb.connect(url, credential=("RootManageSharedAccessKey", DEV_KEY),
                             extensions=True, connection_verify=tls_server.certificate) as ns:
        await ns.create_queue("viaenv")
    assert f"CONNECT localhost:{port}" in proxy.seen(f"CONNECT localhost:{port}",
                                                     after=before)[before:]
    monkeypatch.setenv("NO_PROXY", "example.org,localhost")
    seen = len(proxy.seen())
    async with aiosb.connect(url, credential=("RootManageSharedAccessKey", DEV_KEY),
                             extensions=True, connection_verify=tls_server.certificate) as ns:
        await ns.create_queue("direct")
    assert proxy.seen("CONNECT", after=seen, timeout=1)[seen:] == []


async def test_a_proxy_that_wants_credentials_says_so_at_once(proxy, tls_server):
    url = f"https://localhost:{https_port(tls_server)}/noauth"
    async with aiosb.connect(url, credential=("RootManageSharedAccessKey", DEV_KEY),
                             extensions=True, proxy=proxy.bare_url,
                             connection_verify=tls_server.certificate,
                             operation_timeout=30) as ns:
        with pytest.raises(errors.InvalidOperation,
                           match=r"407.*http://user:password@host:port"):
            await ns.create_queue("q")


@pytest.mark.parametrize(("given", "said"), [
    ("https://proxy:3128", "over plain HTTP"),
    ("http://proxy:port", "not a number"),
    ("http://:3128", "names no host"),
])
def test_a_proxy_that_is_not_a_proxy_url_is_one_sentence(given, said):
    with pytest.raises(errors.InvalidArgument, match=said):
        aiosb.connect("http://127.0.0.1:1/ns", proxy=given)


def test_a_proxy_url_is_parsed_with_its_quoted_credentials():
    proxy = Proxy.parse("http://us%40er:p%3Ass@[::1]:3128")
    assert (proxy.host, proxy.port, proxy.username, proxy.password) == (
        "::1", 3128, "us@er", "p:ss")
    assert proxy.address == "[::1]:3128"
    assert "p:ss" not in repr(proxy)
    assert Proxy.parse("proxy.local").port == 80


def test_the_endpoint_is_parsed_once_and_carries_everything(tmp_path: Path):
    """The one value connect() builds and every layer takes."""
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a TLS connection is made")
    endpoint = Endpoint.parse(
        "Endpoint=sb://localhost:5671;SharedAccessKeyName=k;SharedAccessKey=s",
        verify=ca, proxy="http://p:1",
    )
    assert (endpoint.kind, endpoint.host, endpoint.port, endpoint.tls) == (
        "amqp", "localhost", 5671, True)
    assert endpoint.management_url == "https://localhost:5671"
    assert endpoint.proxy == Proxy("p", 1) and endpoint.verify == str(ca)
    emulator = Endpoint.parse("Endpoint=sb://localhost;SharedAccessKeyName=k;"
                              "SharedAccessKey=s;UseDevelopmentEmulator=true")
    assert (emulator.tls, emulator.emulator, emulator.port) == (False, True, None)
    served = Endpoint.parse("Endpoint=http://127.0.0.1:5300/ns/;SharedAccessKeyName=k;"
                            "SharedAccessKey=s", proxy=False)
    assert (served.kind, served.path, served.credential.key_name) == ("http", "ns", "k")
    ns = aiosb.connect("Endpoint=sb://localhost:5671;SharedAccessKeyName=k;"
                       "SharedAccessKey=s", connection_verify=str(ca))
    assert ns.transport.endpoint.verify == str(ca)  # type: ignore[attr-defined]


async def test_amqp_goes_through_the_proxy_over_websockets(proxy, server):
    """The SDK, given the proxy, speaks AMQP over WebSockets through it; its
    administration client goes through it too (HTTPS in a CONNECT tunnel)."""
    port = server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0]
    connection = server.amqp_connection_string.replace(";UseDevelopmentEmulator=true", "")
    before = len(proxy.seen())
    async with aiosb.connect(connection, proxy=proxy_url(proxy),
                             connection_verify=server.certificate) as ns:
        assert await round_trip(ns, "overws") == b"through the proxy"
    seen = proxy.seen(f"CONNECT localhost:{port}", after=before)[before:]
    assert seen.count(f"CONNECT localhost:{port}") >= 2, seen  # management and AMQP


DEV_KEY = aiosb.auth.DEV_KEY
