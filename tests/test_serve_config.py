"""Issue 49, item 1: ``aiosb serve`` is :func:`aiosb.server.serve` of a
:class:`~aiosb.server.config.ServerConfig`. The command line only parses its flags into
one; the config says what is wrong on construction; ``serve(config)`` opens every port
(HTTP, AMQP, AMQP over TLS, all on one listener, the HTTP plane reached at the AMQP
ports too) and closes them all on leaving; the listener routes by first bytes the
protocols register."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from pathlib import Path

import pytest

import aiosb
from aiosb import cli
from aiosb.server import Running, ServerConfig, serve
from aiosb.server.config import DEFAULT_NAMESPACE, Ports
from aiosb.server.listener import FirstBytes, Route

pytestmark = pytest.mark.timeout(60)

SASL_HEADER = b"AMQP\x03\x01\x00\x00"


def parsed(monkeypatch: pytest.MonkeyPatch, *argv: str) -> ServerConfig:
    """The ServerConfig ``aiosb serve ARGV`` serves (nothing is served)."""
    got: list[ServerConfig] = []
    stopping: list[bool] = []

    async def serve_forever(config: ServerConfig, *, stdin: bool = False) -> None:
        got.append(config)
        stopping.append(stdin)

    monkeypatch.setattr(cli, "serve_forever", serve_forever)
    monkeypatch.setattr(cli, "run", lambda coro, loop: asyncio.run(coro))
    assert cli.main(["serve", *argv]) == 0
    (config,) = got
    assert stopping == ["--stop-when-stdin-closes" in argv]
    return config


def test_the_command_line_parses_every_flag_into_one_server_config(monkeypatch):
    """#49: ``aiosb serve``'s flags, parsed and nothing else: the ServerConfig they make
    is the one written by hand with the same values (no flags: the defaults)."""
    assert parsed(monkeypatch) == ServerConfig()
    config = parsed(
        monkeypatch, "--host", "0.0.0.0", "--port", "6000", "--amqp-port", "6001",
        "--amqps-port", "6002", "--key-name", "Owner", "--key", "secret=",
        "--send-key", "s=sk", "--listen-key", "l=lk", "--namespace", "orders-ns",
        "--data-dir", "d", "--fsync", "--tls-cert", "c.pem", "--tls-key", "k.pem",
        "--tls-dir", "t", "--quiet", "--metrics", "--allow-host", "sb.lan",
        "--allow-host", "sb2.lan", "--no-explorer", "--loop", "asyncio",
    )
    assert config == ServerConfig(
        host="0.0.0.0", port=6000, amqp_port=6001, amqps_port=6002, key_name="Owner",
        key="secret=", keys={"s": ("sk", ("Send",)), "l": ("lk", ("Listen",))},
        namespace="orders-ns", data_dir="d", fsync=True, tls_cert="c.pem", tls_key="k.pem",
        tls_dir="t", quiet=True, metrics=True, allow_hosts=("sb.lan", "sb2.lan"),
        explorer=False, loop="asyncio",
    )
    assert config.ports == Ports(6000, 6001, 6002, frozenset())
    assert "secret=" not in repr(config) and "sk" not in repr(config)  # no key in a log
    assert parsed(monkeypatch, "--no-amqp", "--tls") == ServerConfig(amqp=False, tls=True)
    # not the config's: how the process ends, told to serve_forever
    assert parsed(monkeypatch, "--stop-when-stdin-closes") == ServerConfig()
    microsoft = parsed(monkeypatch, "--microsoft-emulator")
    assert microsoft == ServerConfig(microsoft=True)


def test_the_flags_are_checked_as_the_config_is_made(monkeypatch, capsys):
    """#49: what the flags get wrong is the config's ValueError, said by the parser
    (exit 2)."""
    for wrong in (dict(port=70000), dict(fsync=True), dict(tls_cert="c.pem"),
                  dict(loop="trio")):
        with pytest.raises(ValueError):
            ServerConfig(**wrong)  # type: ignore[arg-type]
    with pytest.raises(SystemExit) as exc:
        parsed(monkeypatch, "--tls-key", "k.pem")
    assert exc.value.code == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


def test_a_namespace_the_config_file_contradicts_is_said_with_the_file(tmp_path, capsys):
    """#49 review: ``--namespace`` against a ``Config.json`` naming another is exit 2, and
    the sentence names the file (as before the flags became a ServerConfig)."""
    path = tmp_path / "Config.json"
    path.write_text('{"UserConfig": {"Namespaces": [{"Name": "fromfile", "Queues": []}]}}')
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--config", str(path), "--namespace", "other"])
    assert exc.value.code == 2
    assert f"--namespace other but {path} names fromfile" in capsys.readouterr().err


def test_the_ports_and_the_namespace_are_resolved_as_the_flags_say(monkeypatch):
    """#49: the defaults give way where taken (not Microsoft's); no AMQP, no AMQP ports;
    the namespace is the flag's, else the Config.json's, else the default."""
    monkeypatch.delenv("EMULATOR_HTTP_PORT", raising=False)
    monkeypatch.delenv("EMULATOR_AMQP_PORT", raising=False)
    assert ServerConfig().ports == Ports(5380, 5672, 5671,
                                         frozenset({"http", "amqp", "amqps"}))
    assert ServerConfig(port=0).ports == Ports(0, 0, 0, frozenset())
    assert ServerConfig(amqp=False).ports.amqp is None
    assert ServerConfig(amqp=False).ports.amqps is None
    assert ServerConfig(microsoft=True).ports == Ports(5300, 5672, None, frozenset())
    assert ServerConfig(microsoft=True, amqps_port=0).ports.amqps == 0
    assert ServerConfig().namespace == DEFAULT_NAMESPACE
    from aiosb.server.msconfig import EmulatorConfig

    read = EmulatorConfig("fromfile", ())
    assert ServerConfig(config=read).namespace == "fromfile"
    with pytest.raises(ValueError, match="give one"):
        ServerConfig(config=read, namespace="other")
    again = dataclasses.replace(ServerConfig(port=0), port=None)
    assert again.ports == ServerConfig().ports  # derived again, not copied


def test_first_bytes_route_what_each_protocol_registered_and_the_rest_elsewhere():
    """#49: the listener knows no protocol: each registers its first bytes, one byte
    goes to one protocol, the rest to the port's own."""
    amqp, http, other = (Route(asyncio.Protocol) for _ in range(3))
    choose = FirstBytes(lambda first: amqp)
    choose.add(b"GP", http)
    assert choose(ord("G")) is http and choose(ord("P")) is http
    assert choose(ord("A")) is amqp and choose(0x16) is amqp
    with pytest.raises(ValueError, match="another protocol"):
        choose.add(b"PX", other)
    assert choose(ord("X")) is amqp  # a refused registration adds nothing


async def _answer(port: int, send: bytes, tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname=None if tls is None else "localhost")
    try:
        writer.write(send)
        async with asyncio.timeout(10):
            return await reader.readexactly(8)
    finally:
        writer.close()


async def _refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    return False


GET = b"GET /$Resources/queues HTTP/1.1\r\nHost: localhost\r\n\r\n"


async def test_serve_opens_every_port_and_closing_it_closes_them_all(tmp_path: Path):
    """#49: HTTP on its port; at the AMQP port AMQP, and HTTP for a request that opens with
    a method; at the AMQP-over-TLS port both over TLS; the explorer on the HTTP plane.
    On leaving, no port takes a connection and an open one is closed."""
    pytest.importorskip("cryptography")
    config = ServerConfig(port=0, quiet=True, namespace="assembled", tls_dir=tmp_path / "tls")
    async with serve(config) as running:
        assert isinstance(running, Running)
        assert running.http_port and running.amqp_port and running.amqps_port
        assert running.amqp_certificate is not None and running.certificate is None
        async with aiosb.connect(running.http.namespace_url("contoso")) as ns:
            await ns.create_queue("orders")
        assert await _answer(running.amqp_port, SASL_HEADER) == SASL_HEADER
        assert (await _answer(running.amqp_port, GET)).startswith(b"HTTP/1.1")
        trust = ssl.create_default_context(cafile=running.amqp_certificate)
        assert await _answer(running.amqps_port, SASL_HEADER, trust) == SASL_HEADER
        assert (await _answer(running.amqps_port, GET, trust)).startswith(b"HTTP/1.1")
        explorer = b"GET /explorer/ HTTP/1.1\r\nHost: localhost\r\n\r\n"
        assert (await _answer(running.http_port, explorer)).startswith(b"HTTP/1.1")
        held = await asyncio.open_connection("127.0.0.1", running.amqp_port)
        ports = (running.http_port, running.amqp_port, running.amqps_port)
        lines = running.banner()
        assert lines[0] == f"aiosb emulator server listening on {running.url}"
        assert "aiosb.connect(" in lines[-1]
    async with asyncio.timeout(10):
        assert await held[0].read() == b""  # closed by the server
    held[1].close()
    for port in ports:
        assert await _refused(port), port


async def test_the_explorer_and_amqp_are_served_only_as_the_config_says(tmp_path: Path):
    """#49: ``explorer=False``: /explorer/ is the REST plane's (a signature is asked for);
    ``amqp=False``: no AMQP port; ``microsoft``: the health route, unsigned."""
    config = ServerConfig(port=0, quiet=True, explorer=False, amqp=False, microsoft=True,
                          tls_dir=tmp_path / "tls")
    async with serve(config) as running:
        assert running.amqp is None and running.amqp_port == 0
        answer = await _get(running.http_port, "/explorer/")
        assert answer.startswith(b"HTTP/1.1 401"), answer
        answer = await _get(running.http_port, "/health")
        assert answer.startswith(b"HTTP/1.1 200") and b"healthy" in answer, answer
    async with serve(dataclasses.replace(config, explorer=True)) as running:
        assert (await _get(running.http_port, "/explorer/")).startswith(b"HTTP/1.1 200")


async def _get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                     .encode())
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()
