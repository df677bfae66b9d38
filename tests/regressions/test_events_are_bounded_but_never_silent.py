"""Issue 18, item 10: events stay bounded, but a reader that falls behind is told how
many it missed."""

from __future__ import annotations

import pytest

import aiosb
from aiosb import PairedNamespaceOptions
from aiosb.pairing import _common

pytestmark = pytest.mark.looptime


async def test_a_reader_that_falls_behind_is_told_how_many_events_it_missed(monkeypatch):
    monkeypatch.setattr(_common, "MAX_UNREAD_EVENTS", 5)
    async with aiosb.connect("memory://e1") as primary, aiosb.connect("memory://e2") as secondary:
        options = PairedNamespaceOptions(backlog_queue_count=1)
        async with primary.pair(secondary, options) as paired:
            events = paired.events()
            for i in range(8):
                paired._emit("suspect", f"q{i}", "test")
            first = await anext(events)
            assert (first.kind, first.count) == ("events_missed", 3)
            rest = [await anext(events) for _ in range(5)]
            assert [e.entity for e in rest] == ["q3", "q4", "q5", "q6", "q7"]
        assert [e async for e in events] == []  # ends on close, nothing left over

