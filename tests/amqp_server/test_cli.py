"""Issue 15: ``aiosb serve`` listens for AMQP 1.0 beside HTTP, prints the connection
string the official SDKs take, and both front ends share one broker (a message sent with
the official SDK over AMQP is received with aiosb over HTTP). Issue 48: ports left to
their defaults give way to free ones where taken, so two servers run side by side."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import aiosb
from aiosb.server.process import ServerProcess

pytest.importorskip("azure.servicebus")


async def test_the_official_sdk_talks_to_aiosb_serve_by_its_connection_string():
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    with ServerProcess() as server:
        connection = server.amqp_connection_string
        assert connection.startswith("Endpoint=sb://localhost:")
        assert connection.endswith(";UseDevelopmentEmulator=true")
        async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
            await ns.create_queue("orders")
            async with ServiceBusClient.from_connection_string(connection) as client:
                async with client.get_queue_sender("orders") as sender:
                    await sender.send_messages(ServiceBusMessage(b"over amqp", subject="s"))
            async with ns.receiver("orders") as receiver:
                (got,) = await receiver.receive(max_messages=1, max_wait=5)
                await receiver.complete(got)
    assert (got.body, got.subject) == (b"over amqp", "s")


# -- ports (#48, item 3) ----------------------------------------------------------------


def test_a_port_named_zero_makes_every_port_not_named_free_and_defaults_give_way(
        monkeypatch: pytest.MonkeyPatch):
    """``--port 0 --amqp-port 0`` bound 5671 all the same, so a second server (or the
    test suite beside any server) failed with "Address already in use". A port named 0
    now frees the others not named; the defaults are the ports that may give way."""
    from aiosb.server.config import ports as _ports

    assert _ports(0, 0, None, False) == (0, 0, 0, frozenset())
    assert _ports(None, None, 0, False) == (0, 0, 0, frozenset())
    assert _ports(None, None, None, False) == (5380, 5672, 5671,
                                               frozenset({"http", "amqp", "amqps"}))
    assert _ports(None, 6000, None, False) == (5380, 6000, 5671, frozenset({"http", "amqps"}))
    monkeypatch.setenv("EMULATOR_AMQP_PORT", "7000")  # named, the way Microsoft's moves
    assert _ports(None, None, None, True) == (5300, 7000, 5671, frozenset())
    assert _ports(0, None, None, True) == (0, 7000, 0, frozenset())


def test_a_port_gives_way_by_the_option_that_set_it_not_by_its_number(
        monkeypatch: pytest.MonkeyPatch):
    """#48 review 7: ``--amqp-port 5671`` is named, though 5671 is AMQP over TLS's
    default: it never moves (it did: the set of ports that give way held 5671). With
    ``--microsoft-emulator`` every port is named (an application left unchanged would
    reach another emulator on a port that moved), unless a port is named 0."""
    from aiosb.server.config import ports as _ports

    monkeypatch.delenv("EMULATOR_AMQP_PORT", raising=False)
    monkeypatch.delenv("EMULATOR_HTTP_PORT", raising=False)
    assert _ports(None, 5671, None, False) == (5380, 5671, 5671, frozenset({"http", "amqps"}))
    assert _ports(5672, None, None, False) == (5672, 5672, 5671, frozenset({"amqp", "amqps"}))
    assert _ports(None, None, None, True) == (5300, 5672, 5671, frozenset())


@pytest.mark.timeout(60)
def test_a_named_port_taken_is_an_error_though_it_is_another_ports_default(tmp_path: Path):
    """#48 review 7: the AMQP port named, taken by another process, and the AMQP over
    TLS port's default by number: the server refuses to start (it moved it, silently)."""
    pytest.importorskip("cryptography")
    http, amqp = _free_ports(2)
    root = Path(aiosb.__file__).parent.parent
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        code = ("import sys, aiosb.cli as cli, aiosb.server.config as defaults\n"
                f"defaults.HTTP_PORT, defaults.AMQP_PORT, defaults.AMQPS_PORT = {http}, {amqp}, "
                f"{taken}\n"
                f"sys.exit(cli.main(['serve', '--quiet', '--amqp-port', '{taken}']))\n")
        try:
            done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, text=True,
                                  capture_output=True, timeout=30,
                                  env={**os.environ, "PYTHONPATH": str(root)})
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"served instead of refusing: {exc.stdout!r}") from None
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot serve on 127.0.0.1:{taken} (AMQP" in done.stderr, done.stderr


def _serve(tmp_path: Path, defaults: tuple[int, int, int] | None = None,
           args: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    """``aiosb serve ARGS`` in a child run in ``tmp_path`` (its certificate made there),
    with its default ports ``defaults`` (patched where the server's config reads them),
    and its banner."""
    root = Path(aiosb.__file__).parent.parent
    code = ("import sys, aiosb.cli as cli, aiosb.server.config as config\n"
            + ("" if defaults is None else
               f"config.HTTP_PORT, config.AMQP_PORT, config.AMQPS_PORT = {defaults!r}\n")
            + f"sys.exit(cli.main(['serve', '--quiet', *{list(args)!r}]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(root)})
    seen = []
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if "python" in line and "aiosb.connect(" in line:  # the banner's last line
            break
    banner = "".join(seen)
    assert "listening on" in banner, banner
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    return proc, banner


def _bound(banner: str) -> dict[str, int]:
    """The port of each service, as the banner gives it."""
    return {
        "HTTP": int(re.search(r"listening on \S+:(\d+)", banner)[1]),  # type: ignore[index]
        "AMQP": int(re.search(r"AMQP 1\.0 \(the official SDKs\) on port (\d+)", banner)[1]),  # type: ignore[index]
        "AMQP over TLS": int(re.search(r"AMQP over TLS on port (\d+)", banner)[1]),  # type: ignore[index]
    }


def _free_ports(count: int) -> tuple[int, ...]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return tuple(sock.getsockname()[1] for sock in socks)
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.timeout(90)
async def test_two_servers_started_with_no_flags_run_side_by_side(tmp_path: Path):
    """The second finds the defaults taken (by the first, or by anyone), says so, and
    serves on free ports; both serve HTTP and AMQP. The defaults are patched to ports
    the test picked, so that the machine's 5380, 5672 and 5671 (free or taken) play no
    part."""
    pytest.importorskip("cryptography")  # the AMQP over TLS port needs a certificate
    defaults = _free_ports(3)
    names = ("HTTP", "AMQP", "AMQP over TLS")
    servers = []
    try:
        for n in range(2):
            (tmp_path / str(n)).mkdir()
            servers.append(_serve(tmp_path / str(n), defaults))
        bound = [_bound(banner) for _, banner in servers]
        for (_, banner), ports in zip(servers, bound, strict=True):
            for what, default in zip(names, defaults, strict=True):
                assert ports[what] == default or (
                    f"port {default} is taken by another process (another aiosb serve?): "
                    f"{what} on port {ports[what]} instead") in banner, banner
        second = servers[1][1]
        assert all(f"port {default} is taken" in second for default in defaults), second
        assert not set(bound[0].values()) & set(bound[1].values())
        for (_, banner), ports in zip(servers, bound, strict=True):
            async with aiosb.connect(f"http://127.0.0.1:{ports['HTTP']}/sbemulatorns") as ns:
                await ns.create_queue("side-by-side")
            amqp = re.search(r"Endpoint=sb://\S+UseDevelopmentEmulator=true", banner)
            assert amqp is not None
            async with aiosb.connect(amqp[0], operation_timeout=20) as ns:
                async with ns.sender("side-by-side") as sender:
                    await sender.send(aiosb.Message(b"served"))
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(10)


@pytest.mark.timeout(60)
def test_a_default_that_is_our_own_named_port_gives_way_and_the_banner_says_whose(
        tmp_path: Path):
    """#48 review 7: ``--port P`` where P is AMQP's default: AMQP gives way, and the
    banner says the port is this server's HTTP port, not another process's."""
    pytest.importorskip("cryptography")
    http, amqp, amqps = _free_ports(3)
    proc, banner = _serve(tmp_path, (http, amqp, amqps), ("--port", str(amqp)))
    try:
        ports = _bound(banner)
        assert ports["HTTP"] == amqp
        assert (f"port {amqp} is this server's HTTP port: AMQP on port {ports['AMQP']} "
                "instead") in banner, banner
        assert "another process" not in banner, banner
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.timeout(60)
def test_port_0_with_amqp_port_0_binds_no_well_known_port(tmp_path: Path):
    pytest.importorskip("cryptography")
    proc, banner = _serve(tmp_path, args=("--port", "0", "--amqp-port", "0"))
    try:
        ports = _bound(banner)
        assert not set(ports.values()) & {5380, 5672, 5671}, banner
        assert "is taken" not in banner
    finally:
        proc.terminate()
        proc.wait(10)
