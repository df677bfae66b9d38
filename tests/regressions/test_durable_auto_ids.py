"""Regression tests from the review of durable mode (#39): broker-assigned MessageIds.

A durable server keeps a broker-assigned MessageId as its number under a prefix the
database names (``meta``); a fresh process adopts that prefix and numbers its ids above
every one kept. R-3: what a restart brings back is what was there, and no id handed out
is handed out again.
"""

from __future__ import annotations

import itertools
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
