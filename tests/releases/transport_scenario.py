"""The typed-property round trip through aiosb's own AMQP transport (#47), run by the
Python of a venv that holds one release of azure-servicebus (tests/releases/venvs.py)
with the worktree on its path (aiosb's transport runs on the SDK that venv holds),
against ``aiosb serve``:

    python transport_scenario.py CONNECTION_STRING TLS_CONNECTION_STRING CERTIFICATE QUEUE

It sends one message whose application properties are of AMQP types no plain Python
type names (a long that fits 32 bits, a ubyte, a symbol ...) with
``aiosb.connect(connection_string)``, receives it back and completes it, and prints
one JSON line: each property's value and the name of its class as received. Every
frame aiosb's transport reads that holds a map (open, attach, each ``$cbs`` and
``$management`` reply) goes through the map decoder aiosb gives the SDK's codec
(aiosb/transport/amqp/_typed_values.py), so a release whose decoders that one cannot call
fails at the first of them. The queue is made beforehand.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import sys
import traceback
from typing import Any

import aiosb
from aiosb import Message
from aiosb.values import Char, Float32, Long, Short, Symbol, UByte, UInt, ULong

RELEASE = importlib.metadata.version("azure-servicebus")
#: seconds: the longest wait for the message that is there.
WAIT = 10
#: The properties sent: each of a type aiosb's transport teaches the SDK's codec.
SENT: dict[str, Any] = {
    "long": Long(1), "ubyte": UByte(200), "symbol": Symbol("sym"), "short": Short(-300),
    "uint": UInt(4_000_000_000), "ulong": ULong(2**63), "float": Float32(1.5),
    "char": Char("é"), "int": 7, "string": "text",
}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One HTTP CONNECT tunnel (the proxy :func:`way_in` gives releases before 7.14)."""
    request = await reader.readuntil(b"\r\n\r\n")
    host, _, port = request.split()[1].decode().rpartition(":")
    up_reader, up_writer = await asyncio.open_connection(host, int(port))
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def way_in(connection: str, tls: str, certificate: str) -> tuple[str, dict[str, Any]]:
    """The connection string and options that reach ``aiosb serve`` from this release,
    as scenario.py's ``way_in``: 7.14 and later speak plain AMQP (``connection``);
    earlier releases cannot (they ignore ``UseDevelopmentEmulator``) nor speak AMQP over
    TLS to a loopback port (see scenario.py), so aiosb's transport takes them over AMQP
    over WebSockets, TLS through an HTTP proxy (``proxy``: here, a tunnel in this
    process), to the port of ``tls``, the connection string for AMQP over TLS."""
    if tuple(int(n) for n in RELEASE.split(".")[:2]) >= (7, 14):
        return connection, {}
    proxy = await asyncio.start_server(_tunnel, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    return tls, {"connection_verify": certificate, "proxy": f"http://127.0.0.1:{port}"}


async def scenario(connection: str, tls: str, certificate: str, queue: str,
                   report: dict[str, Any]) -> None:
    url, options = await way_in(connection, tls, certificate)
    report["step"] = "connect"
    async with aiosb.connect(url, **options) as ns:
        report["step"] = "send"
        await ns.sender(queue).send(Message(b"typed", application_properties=SENT))
        report["step"] = "receive"
        async with ns.receiver(queue) as receiver:
            got = await receiver.receive(1, max_wait=WAIT)
            await receiver.complete(got)
    report["received"] = {
        name: [type(value).__name__, value if not isinstance(value, bytes) else value.hex()]
        for message in got for name, value in message.application_properties.items()
    }
    report["step"] = "done"


def main() -> None:
    connection, tls, certificate, queue = sys.argv[1:5]
    report: dict[str, Any] = {"release": RELEASE}
    try:
        asyncio.run(asyncio.wait_for(scenario(connection, tls, certificate, queue, report), 120))
    except BaseException as exc:  # reported, and the test fails on it
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-3000:]
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
