"""Issue 17 for the AMQP transport, as the HTTP transport has it: a connection string
whose address nothing listens at is said at once (EntityUnavailable, an outage for
pairing: PN-6), not retried for the operation timeout; once the namespace has answered,
a refused connection is transient and retried (a restart, a move)."""

from __future__ import annotations

import asyncio
import socket

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.pairing._common import is_outage
from aiosb.server.amqp.front_end import serve_amqp

from .conftest import NAMESPACE

KEY = "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" \
      "aiosbDevelopmentKeyForTheLocalEmulatorOnly000=;UseDevelopmentEmulator=true"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_nothing_listening_is_said_at_once_for_data_and_management():
    port = _free_port()
    loop = asyncio.get_running_loop()
    async with aiosb.connect(f"Endpoint=sb://localhost:{port};{KEY}",
                             operation_timeout=30) as ns:
        start = loop.time()
        async with ns.sender("q1") as sender:
            with pytest.raises(errors.EntityUnavailable,
                               match=f"nothing is listening at sb://localhost:{port}") as info:
                await sender.send(Message(b"x"))
        with pytest.raises(errors.EntityUnavailable, match="nothing is listening"):
            await ns.create_queue("q2")
        assert loop.time() - start < 10  # not the 30 s of retries
    assert is_outage(info.value)


@pytest.mark.parametrize("first", ["q1", "missing"])
async def test_a_refusal_after_the_namespace_answered_is_retried_as_transient(first):
    """Answered with success, or with a no (a missing entity): it was listening."""
    async with aiosb.connect(f"memory://{NAMESPACE}") as local:
        await local.create_queue("q1")
        async with serve_amqp(namespace=NAMESPACE) as running:
            ns = aiosb.connect(running.connection_string(), operation_timeout=2)
            await ns.open()
            sender = ns.sender("q1")
            if first == "q1":
                await sender.send(Message(b"answered"))
            else:
                with pytest.raises(errors.EntityNotFound):
                    await ns.sender("missing").send(Message(b"answered no"))
        try:  # the server went away after it answered
            with pytest.raises(errors.OperationTimeout) as info:
                await sender.send(Message(b"refused"))
            assert isinstance(info.value.__cause__, errors.TransientError)
        finally:
            await ns.aclose()
