"""Found in the review of #49 (on main too, not a regression of the move): a port the user
names is served, and a port left to its default gives way where it is taken "by another
aiosb serve, or by a port of this server the user named" (aiosb.server.config). But
the HTTP port is bound first, at its default: ``aiosb serve --amqp-port 5380`` (the
HTTP default) takes 5380 for HTTP, then fails on the AMQP port the user named
("Address already in use"), where HTTP should have moved. The same for
``--amqps-port 5672`` (AMQP's default)."""

from __future__ import annotations

import socket

import pytest

from aiosb.server import ServerConfig, config, serve

pytestmark = pytest.mark.timeout(60)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("named", ["amqp_port", "amqps_port"])
async def test_a_port_named_takes_the_default_of_another_port_of_the_server(
        monkeypatch: pytest.MonkeyPatch, tmp_path, named: str) -> None:
    """#49: the port named is another port's default (patched to free ports here, as
    tests/amqp_server/test_cli.py does): the named one is served there, the other
    gives way to a free port."""
    http, amqp, amqps = _free_ports(3)
    monkeypatch.setattr(config, "HTTP_PORT", http)
    monkeypatch.setattr(config, "AMQP_PORT", amqp)
    monkeypatch.setattr(config, "AMQPS_PORT", amqps)
    other_default = http if named == "amqp_port" else amqp
    given = ServerConfig(quiet=True, explorer=False, tls_dir=tmp_path,
                         **{named: other_default})
    async with serve(given) as running:
        served = running.amqp_port if named == "amqp_port" else running.amqps_port
        assert served == other_default
        moved = running.http_port if named == "amqp_port" else running.amqp_port
        assert moved != other_default
        said = "\n".join(running.banner())
        assert f"port {other_default} is this server's" in said, said
