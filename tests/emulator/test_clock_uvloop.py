"""Issue 33 on uvloop, where ``aiosb serve`` runs: uvloop rounds a timer's delay to whole
milliseconds (one under half a millisecond runs at once), so the namespace's timer often
fires before its instant. Then nothing may run early, the clock may not be moved to the
instant, and the timer may not spin (armed again for the same instant, it came round
some 85 times per instant until its millisecond ticked over)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest

import aiosb
from aiosb import Message
from aiosb._clock import CLOCK
from aiosb.emulator import EmulatorNamespace
from aiosb.emulator._store import _Store

uvloop = pytest.importorskip("uvloop")

INSTANTS = 100


@pytest.mark.timeout(30)
def test_on_uvloop_scheduled_messages_activate_at_their_time_without_spinning(monkeypatch):
    fires = 0
    early: list[float] = []
    on_timer = EmulatorNamespace._on_timer
    activate = _Store.activate

    def counted(self: EmulatorNamespace) -> None:
        nonlocal fires
        fires += 1
        on_timer(self)

    def watched(self: _Store, rec, now: float) -> None:
        if CLOCK.now() < rec.enqueued or now < rec.enqueued:
            early.append(rec.enqueued - min(now, CLOCK.now()))
        activate(self, rec, now)

    monkeypatch.setattr(EmulatorNamespace, "_on_timer", counted)
    monkeypatch.setattr(_Store, "activate", watched)

    async def main() -> tuple[int, float, float]:
        async with aiosb.connect("memory://uvclock") as ns:
            await ns.create_queue("q")
            start = time.time() + 0.05
            async with ns.sender("q") as sender:
                for i in range(INSTANTS):  # a distinct instant every 1.7 ms
                    at = dt.datetime.fromtimestamp(start + i * 0.0017, dt.UTC)
                    await sender.schedule(Message(f"{i}".encode()), at)
            await asyncio.sleep(start + INSTANTS * 0.0017 - time.time() + 0.2)
            active = (await ns.runtime_properties("q")).active_message_count
            return active, CLOCK.lead(), CLOCK.now() - time.time()

    active, lead, ahead = uvloop.run(main())
    assert active == INSTANTS
    assert early == []
    assert lead <= 1e-9  # the clock was never moved
    # uvloop's time lags real time (its iteration's start, in whole milliseconds); the
    # clock, anchored to the monotonic clock, lags with it (the margin: NTP's slewing of
    # the wall clock against the monotonic one, in half a second).
    assert ahead <= 0.0005
    assert fires <= 3 * INSTANTS, f"{fires} timer fires for {INSTANTS} instants"
