"""Issue 50: ``benchmarks.round_trip``, the floor under one message at a time: a bare
echo server in a process of its own, its CPU per round trip from ``/proc``; and the
least ratio any server could show, one message at a time over pipelined."""

from __future__ import annotations

import os
import socket
import time

import pytest

from benchmarks import round_trip
from benchmarks.round_trip import ANSWER, BareServer, bound, round_trips


@pytest.mark.timeout(60)
def test_the_bare_server_answers_each_request_and_its_cost_is_its_own(monkeypatch):
    """#50: each request gets :data:`ANSWER` bytes back; the cost read is the bare
    server's CPU (a process of its own, spent on the round trips), and the process ends
    with the block."""
    asked: list[int | None] = []

    def cpu(pid: int) -> float | None:
        asked.append(pid)
        return real(pid)

    real = round_trip._cpu
    monkeypatch.setattr(round_trip, "_cpu", cpu)
    with BareServer() as bare:
        assert bare.pid != os.getpid()
        with socket.create_connection(("127.0.0.1", bare.port), timeout=10) as sock:
            sock.sendall(b"r")
            assert sock.recv(100) == b"a" * ANSWER
        cost = round_trips(bare, 2_000)
        assert cost is not None and 0 < cost < 1000  # µs: spent, and per round trip
        assert asked == [bare.pid, bare.pid]
    assert not os.path.exists(f"/proc/{bare.pid}/stat") or _zombie_or_gone(bare.pid)


def _zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_least_ratio_adds_a_round_trip_to_the_pipelined_cost():
    """#50: one message at a time costs at least the pipelined work and a round trip."""
    assert bound(10.0, 5.0) == pytest.approx(1.5)
    assert bound(32.0, 22.0) == pytest.approx(54 / 32)


@pytest.mark.timeout(60)
def test_the_floor_alone_quiet_then_beside_a_busy_process(capsys):
    """#50: ``python -m benchmarks.round_trip --busy 1``: each run measured quiet, then
    beside a spinning process (which is gone after its run)."""
    costs = round_trip.main(["--count", "5000", "--repeat", "2", "--busy", "1"])
    assert len(costs["quiet"]) == len(costs["busy"]) == 2
    assert all(cost is not None and cost > 0 for cost in costs["quiet"] + costs["busy"])
    out = capsys.readouterr().out
    assert out.count("(quiet)") == out.count("(busy)") == 2


def test_a_paced_client_waits_out_its_interval(monkeypatch):
    """#50: with ``per_second`` each round trip is sent no sooner than the pace allows
    (the SDK's pace, in ``./dev bench amqp``): it sleeps what is left of each interval,
    never more than an interval."""
    slept: list[float] = []

    class Clock:  # round_trip's own view of the time module: other threads' sleeps apart
        perf_counter = staticmethod(time.perf_counter)
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            slept.append(seconds)
            time.sleep(seconds)

    monkeypatch.setattr(round_trip, "time", Clock)
    with BareServer() as bare:
        assert round_trips(bare, 200) is not None
        assert slept == []  # unpaced: as fast as answered
        assert round_trips(bare, 200, per_second=2000) is not None
        paced = list(slept)  # (ending the process polls with sleeps of its own)
    assert len(paced) > 100 and all(0 < s <= 1 / 2000 for s in paced)


def test_the_bare_server_that_never_starts_is_given_up_on(monkeypatch, tmp_path):
    """A bare server that says nothing (alive, reading, never printing its port) is
    given up on once :data:`PATIENCE` has passed, and its process is ended: the
    benchmark never hangs on it."""
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexec cat\n")  # echoes its stdin, which stays empty
    silent.chmod(0o755)
    monkeypatch.setattr(round_trip, "PATIENCE", 0.5)
    monkeypatch.setattr(round_trip.sys, "executable", str(silent))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not start within 0\.5 s"):
        BareServer().__enter__()
    assert time.monotonic() - started >= 0.5  # it waited out its patience


@pytest.mark.timeout(60)
def test_the_cold_factor_times_the_same_work_once_a_round_trip_and_in_a_loop():
    """#50: a bare server that can do aiosb's work on an SDK message (the payload read
    into columns and checked) says what that work takes in a loop, and does it only when
    asked (a worked request); :func:`measure` takes plain and worked round trips in turn
    from that one server: the cold factor is the worked ones' cost above the plain ones'
    over the loop's."""
    with BareServer(work=True) as worked:
        assert worked.hot > 0  # µs a message, in a loop
    with BareServer() as bare:
        assert bare.hot == 0
    floor = round_trip.measure(2_000, per_second=4000)
    assert floor.round_trip is not None and floor.round_trip > 0 and floor.seconds > 0
    assert floor.cold is not None and floor.cold > 0.5  # the work is done, and costs
