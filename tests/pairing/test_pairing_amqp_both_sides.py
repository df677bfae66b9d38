"""Issue 34: a pairing over AMQP on both sides, the production transport (the official
SDK), between two ``aiosb serve`` processes reached by the connection strings they
print. Entering the pairing makes the backlog queues in the secondary through the SDK's
administration client, at the secondary's AMQP port (one connection string reaches
management too). Mid-stream the primary process is killed (SIGKILL, durable mode) and
later restarted on the same ports: every acknowledged message reaches the primary once
(PN-6, R-1), the backlog drains (PN-4), and nothing is left behind."""

from __future__ import annotations

import asyncio
import collections
import socket
from datetime import timedelta
from pathlib import Path

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions
from aiosb.server.process import ServerProcess

pytest.importorskip("cryptography")
pytest.importorskip("azure.servicebus")
# The official SDK times by the wall clock.
pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(180)]

MESSAGES = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_pairing_over_amqp_on_both_sides_survives_a_killed_and_restarted_primary(
    tmp_path: Path,
):
    tls = str(tmp_path / "tls")
    primary_args = ["--data-dir", str(tmp_path / "primary"), "--port", str(_free_port()),
                    "--amqp-port", str(_free_port()), "--tls-dir", tls]
    primary = ServerProcess(args=primary_args).start()
    secondary = ServerProcess(args=["--tls-dir", tls]).start()
    try:
        async with aiosb.connect(f"{primary.url}/sbemulatorns") as setup:
            await setup.create_queue("orders")
        options = PairedNamespaceOptions(
            backlog_queue_count=2,
            failover_interval=timedelta(0),
            ping_primary_interval=timedelta(seconds=1),
            syphon_retry_interval=timedelta(seconds=1),
            enable_syphon=True,
        )
        ambiguous: set[str] = set()  # sends in flight when the primary was killed
        async with (
            aiosb.connect(primary.amqp_connection_string, operation_timeout=3,
                          connection_verify=primary.certificate) as p,
            aiosb.connect(secondary.amqp_connection_string, operation_timeout=10,
                          connection_verify=secondary.certificate) as s,
            p.pair(s, options) as paired,
        ):
            assert len(paired.backlog_queues) == 2  # made over AMQP's connection string
            async with paired.sender("orders") as sender:
                for i in range(MESSAGES):
                    if i == MESSAGES // 3:
                        primary.kill()
                        ambiguous.add(f"m{i - 1}")
                    elif i == 2 * MESSAGES // 3:
                        primary = await asyncio.to_thread(
                            ServerProcess(args=primary_args).start)
                    await sender.send(Message(f"{i}".encode(), message_id=f"m{i}"))
                    await asyncio.sleep(0.01)
            assert paired.stats.backlog_sends > 0  # the outage was seen and ridden out
            async with asyncio.timeout(90):  # the syphon brings the backlog home
                while paired.stats.syphon_moved < paired.stats.backlog_sends:
                    await asyncio.sleep(0.2)
            for backlog in paired.backlog_queues:
                assert (await s.runtime_properties(backlog)).active_message_count == 0
        got: list[str] = []
        async with aiosb.connect(f"{primary.url}/sbemulatorns") as home:
            async with home.receiver("orders", mode="receive_and_delete") as receiver:
                while batch := await receiver.receive(max_messages=100, max_wait=1):
                    got += [m.message_id or "" for m in batch]
        counts = collections.Counter(got)
        assert set(counts) == {f"m{i}" for i in range(MESSAGES)}  # none lost, none made up
        twice = {mid for mid, n in counts.items() if n > 1}
        assert twice <= ambiguous, f"more than once: {sorted(twice)}"
    finally:
        primary.stop()
        secondary.stop()
