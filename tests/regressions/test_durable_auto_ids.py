"""Regression tests from the review of durable mode (#39): broker-assigned MessageIds.

A durable server keeps a broker-assigned MessageId as its number under a prefix the
database names (``meta``); a fresh process adopts that prefix and numbers its ids above
every one kept. R-3: what a restart brings back is what was there, and no id handed out
is handed out again.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import sys
import time

import pytest

import aiosb
from aiosb import Message
from aiosb.emulator import _record


@pytest.fixture
def fresh_counter(monkeypatch):
    """The MessageId counter as a fresh process has it (restored afterwards)."""
    monkeypatch.setattr(_record, "_AUTO_ID", _record._AUTO_ID)
    monkeypatch.setattr(_record, "_auto", itertools.count(1))
    monkeypatch.setattr(_record, "auto_ids", _record._auto.__next__)


@pytest.mark.timeout(10)
async def test_adopting_a_high_id_sets_the_counter_at_once(fresh_counter):
    """#39: a database whose ids reached 1.3e14 (a GUID's last twelve digits, which a
    migration took for a number the broker gave) made every start count to it one id at
    a time (the server never listened); 10^8 ids ever handed out cost 2.4 s a start."""
    prefix = "4f1c2a9e-77d0-4b3e-9a11-"
    high = 0x7C4D_2E19_A0B3  # about 1.4e14
    started = time.perf_counter()
    assert _record.adopt_auto_ids(prefix, high)
    assert time.perf_counter() - started < 0.5
    async with aiosb.connect("memory://ids") as ns:  # the send path's ids too
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send([Message(b"a"), Message(b"b")])
        async with ns.receiver("q") as receiver:
            got = [m.message_id for m in await receiver.peek(2)]
    assert got == [f"{prefix}{high + 1:012x}", f"{prefix}{high + 2:012x}"]


@pytest.mark.timeout(10)
def test_a_process_that_handed_out_ids_adopts_nothing(fresh_counter):
    """Ids already handed out keep their spelling: the counter is not moved under them."""
    first, prefix = _record.auto_ids(), _record.auto_id_prefix()
    assert not _record.adopt_auto_ids("00000000-0000-0000-0000-", 10**6)
    assert first < _record.auto_ids() < 10**6
    assert _record.auto_id_prefix() == prefix


def _start(data):
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--no-amqp",
         "--quiet", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
    assert url.startswith("http://127.0.0.1:"), proc.stderr.read()  # type: ignore[union-attr]
    return proc, f"{url}/ids"


def _stop(proc):
    proc.send_signal(signal.SIGINT)
    proc.wait(10)


@pytest.mark.timeout(60)
def test_a_broker_assigned_id_taken_before_its_write_is_not_handed_out_again(tmp_path):
    """#39, R-3: a message a waiting receive-and-delete receiver takes before the
    journal writes its row left the highest id kept unraised, so the next process
    handed the same MessageId out again."""
    async def first(url):
        async with aiosb.connect(url) as ns:
            await ns.create_queue("q")
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                got = asyncio.ensure_future(receiver.receive(max_messages=1, max_wait=10))
                await asyncio.sleep(0.5)  # waiting already
                async with ns.sender("q") as sender:
                    await sender.send(Message(b"one"))
                return (await got)[0].message_id

    async def second(url):
        async with aiosb.connect(url) as ns:
            async with ns.sender("q") as sender:
                await sender.send(Message(b"two"))
            async with ns.receiver("q") as receiver:
                return (await receiver.peek(1))[0].message_id

    proc, url = _start(tmp_path)
    try:
        a = asyncio.run(first(url))
    finally:
        _stop(proc)
    proc, url = _start(tmp_path)
    try:
        b = asyncio.run(second(url))
    finally:
        _stop(proc)
    assert a[:-12] == b[:-12]  # spelled under the database's prefix
    assert int(b[-12:], 16) > int(a[-12:], 16)
