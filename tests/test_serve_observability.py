"""Issue 17: what aiosb serve tells about itself: a log line per request (off with
--quiet), Prometheus metrics at /metrics (--metrics), and the CLI wiring of both."""

from __future__ import annotations

import logging

import aiohttp
import pytest

import aiosb
from aiosb import Message
from aiosb.server.http import serve
from aiosb.server.process import ServerProcess

pytest.importorskip("prometheus_client")


async def test_each_request_is_a_log_line(caplog):
    caplog.set_level(logging.INFO, logger="aiosb.server.requests")
    async with serve(log_requests=True) as server:
        async with aiosb.connect(server.namespace_url("logs")) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender:
                await sender.send(Message(b"x"))
    lines = [r.getMessage() for r in caplog.records if r.name == "aiosb.server.requests"]
    assert any(" PUT /logs/q 201 " in line and line.endswith(" ms") for line in lines)
    assert any(" POST /logs/q/$aiosb/send 201 " in line for line in lines)


async def test_no_log_line_unless_asked(caplog):
    caplog.set_level(logging.INFO, logger="aiosb.server.requests")
    async with serve() as server:
        async with aiosb.connect(server.namespace_url("quiet")) as ns:
            await ns.create_queue("q")
    assert [r for r in caplog.records if r.name == "aiosb.server.requests"] == []


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        return await answer.text()


async def test_metrics_count_entities_requests_and_connections():
    async with serve(metrics=True) as server:
        async with aiosb.connect(server.namespace_url("prom")) as ns:
            await ns.create_queue("q", max_delivery_count=1)
            await ns.create_topic("t")
            await ns.create_subscription("t", "s")
            async with ns.sender("q") as sender:
                await sender.send([Message(b"a"), Message(b"b"), Message(b"c")])
            async with ns.receiver("q") as receiver:
                (first,) = await receiver.receive(max_messages=1, max_wait=0)
                await receiver.dead_letter(first, reason="bad")
            text = await _scrape(server.url)
    assert 'aiosb_entity_messages{entity="q",namespace="prom",state="active"} 2.0' in text
    assert 'aiosb_entity_messages{entity="q",namespace="prom",state="dead_letter"} 1.0' in text
    assert 'entity="t/subscriptions/s",namespace="prom",state="active"} 0.0' in text
    assert 'aiosb_server_requests_total{method="PUT",status="201"}' in text
    assert "aiosb_server_request_seconds_bucket" in text
    connections = [line for line in text.splitlines()
                   if line.startswith("aiosb_server_connections ")]
    assert connections and float(connections[0].split()[1]) >= 1


def test_the_cli_serves_metrics_when_asked():
    with ServerProcess(args=["--metrics"]) as server:
        import asyncio

        text = asyncio.run(_scrape(server.url))
        assert "aiosb_server_requests_total" in text and "aiosb_server_connections" in text
    with ServerProcess() as server:
        async def missing() -> int:
            async with aiohttp.ClientSession() as http, http.get(
                f"{server.url}/metrics"
            ) as answer:
                return answer.status

        import asyncio

        assert asyncio.run(missing()) != 200  # not served unless asked: a namespace path


def _writes(text: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith("aiosb_journal_writes_total ")]
    return float(line.split()[1])


@pytest.mark.timeout(60)
def test_a_durable_server_counts_its_journal_writes(tmp_path):
    """Durable mode: the journal's group commits, so that a benchmark (#39) can say how
    many writes carried its messages; none of it without a journal."""
    import asyncio

    async def sends(url: str) -> tuple[str, str]:
        before = await _scrape(url)
        async with aiosb.connect(f"{url}/sbemulatorns") as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender:
                for _ in range(3):
                    await sender.send([Message(b"x")] * 10)
        return before, await _scrape(url)

    with ServerProcess(args=["--metrics", "--no-amqp", "--data-dir", str(tmp_path)]) as server:
        before, after = asyncio.run(sends(server.url))
    assert _writes(after) >= _writes(before) + 4  # the queue and three sends, each awaited
    with ServerProcess(args=["--metrics", "--no-amqp"]) as server:
        assert "aiosb_journal_writes" not in asyncio.run(_scrape(server.url))
