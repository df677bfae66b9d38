"""Issue 50 (item 3, find what waits): ``./dev bench timeline`` shows the official aio SDK's
patterns frame by frame through a timestamping relay and says whose each gap is. Run
here small, end to end against an ``aiosb serve`` in a child process: each phase's row
is written, its wall time split into the server's, the wire's and the SDK's; and the
split itself, on frames made up here, gives each gap to the side that wrote the frame
after it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import _harness, timeline
from benchmarks.timeline import Frame, Phase


def test_a_gap_is_the_side_s_that_wrote_the_frame_after_it():
    """#50: request out at 1 ms (the SDK's 1 ms before it), the answer written at 3 ms
    (2 ms the server's), passed on by 3.5 (0.5 the wire's), the phase ends at 10 (the
    SDK's 6.5 more: it had its answer and did not return)."""
    ms = 0.001
    phase = Phase("x", "x", 0.0, 10 * ms, [
        Frame(1, "c>s", "Disposition", 1 * ms, 1 * ms),
        Frame(1, "s>c", "Disposition", 3 * ms, 3.5 * ms),
    ])
    shares = phase.shares()
    assert shares == pytest.approx({"server": 2 * ms, "wire": 0.5 * ms, "sdk": 7.5 * ms})
    assert sum(shares.values()) == pytest.approx(phase.wall)


def test_the_relay_names_each_frame_as_the_sdk_logs_it():
    """#50: the relay cuts the byte stream into frames (the protocol header, a
    performative by its descriptor, an empty frame), a partial frame left for later."""
    open_frame = bytes([0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x10, 0x45])
    empty = bytes([0, 0, 0, 8, 2, 0, 0, 0])
    buffer = bytearray(b"AMQP\x00\x01\x00\x00" + open_frame + empty + open_frame[:5])
    assert timeline._frames(buffer) == ["Header", "Open", "Empty"]
    assert bytes(buffer) == open_frame[:5]


@pytest.mark.timeout(120)
def test_the_timeline_of_each_phase_is_measured_end_to_end(monkeypatch, tmp_path: Path):
    """#50: each phase's row, its wall time the server's + the wire's + the SDK's, the
    server's part of it less than its wall time; the consumer loop's two rates; the one
    check (the server's share of a gathered batch, at most 0.25 on the worst of 3)."""
    monkeypatch.setattr(_harness, "RESULTS", tmp_path)
    timeline.main(["--repeat", "3", "--quiet"])
    result: dict[str, Any] = json.loads((tmp_path / "timeline.json").read_text())
    rows = {row["case"]: row for row in result["rows"]}
    for key, name in timeline.ROWS.items():
        row = rows[name]
        assert row["frames"] > 0, key
        assert 0 <= row["server_ms"] < row["wall_ms"], key
        assert row["server_ms"] + row["wire_ms"] + row["sdk_ms"] == pytest.approx(
            row["wall_ms"]), key
        assert row["min_wall_ms"] <= row["wall_ms"] <= row["max_wall_ms"], key
    for key in ("gathered", "each"):
        assert rows[timeline.ROWS[key]]["completions_over_100ms"] >= 0
    rates = [row for row in result["rows"] if row.get("unit") == "msgs/s"]
    assert len(rates) == 2 and all(0 < r["min"] <= r["median"] <= r["max"] for r in rates)
    [check] = result["checks"]
    assert check["id"] == "#50" and check["runs"] == 3 and check["at_most"]
    assert check["target_value"] == 0.25
