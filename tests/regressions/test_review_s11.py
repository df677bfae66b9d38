"""Regressions from the review of S-4 streaming, ``--loop`` and paginated listings: each
failed before its fix."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from aiosb.auth import SasCredential
from aiosb.client import Receiver
from aiosb.server.http import DEV_KEY, serve

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import http

    return http


@pytest.mark.looptime  # the slow complete's half second passes at once
async def test_streaming_benchmark_waits_for_the_last_complete(monkeypatch):
    """The streaming run ended when every message was *received*, and cancelled
    consumers still completing theirs: those stayed locked and the run failed its count
    (and its time left out the completes)."""
    bench = _bench()
    complete = Receiver.complete
    calls = 0

    async def first_is_slow(self, messages):
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(0.5)
        await complete(self, messages)

    monkeypatch.setattr(Receiver, "complete", first_is_slow)
    seconds = await asyncio.wait_for(bench.aiosb_streaming_at("memory://s11a", 3, 2), 30)
    assert seconds > 0


async def test_streaming_benchmark_fails_instead_of_hanging_when_consumers_fail(monkeypatch):
    """Consumers that raised left ``done`` unset for ever: the benchmark hung."""
    bench = _bench()

    async def broken(self, *args, **kwargs):
        raise RuntimeError("receive broke")

    monkeypatch.setattr(Receiver, "receive", broken)
    with pytest.raises(RuntimeError, match="receive broke"):
        await asyncio.wait_for(bench.aiosb_streaming_at("memory://s11b", 2, 2), 30)


def test_run_closes_the_coroutine_when_the_loop_name_is_wrong():
    from aiosb.cli import run

    async def main() -> None:
        pass

    coro = main()
    with pytest.raises(ValueError, match="--loop"):
        run(coro, "trio")
    assert coro.cr_frame is None  # closed, not left to warn "never awaited"


@pytest.mark.parametrize("name", ["$skip", "$top"])
async def test_a_listing_with_a_number_too_long_to_parse_is_a_400(name):
    """R-4: ``int()`` refuses more than 4300 digits; that was a 500."""
    async with serve() as server, aiohttp.ClientSession() as session:
        token = SasCredential("RootManageSharedAccessKey", DEV_KEY).token(f"{server.url}/ns")
        url = URL(f"{server.url}/ns/$Resources/queues?{name}={'9' * 5000}", encoded=True)
        async with session.get(url, headers={"Authorization": token}) as response:
            text = await response.text()
    assert response.status == 400, text
    assert name in text
