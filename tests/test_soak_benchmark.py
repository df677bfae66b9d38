"""``./dev bench soak`` (#50, item 4), run tiny: a few seconds of the official SDK's
one-at-a-time send, its receive-and-complete-each, and S-4 HTTP streaming, all at once
against one ``aiosb serve``; the JSON it writes has a row a "minute" with each pattern's
rate and the server's memory and CPU, and the checks the issue asks for."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def soak(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import _harness, soak

    monkeypatch.setattr(_harness, "RESULTS", tmp_path)  # not the real results/
    return soak


def test_a_tiny_soak_writes_a_rate_a_minute_for_every_pattern_and_its_checks(soak, tmp_path):
    """Five 1.2-second "minutes": every pattern moved messages in every one of them (the
    patterns ran at once, from the shared start), the server's RSS and CPU were read each
    minute, and the checks judge the last three minutes against the first (rates) and
    against minute 2 (memory)."""
    summary = soak.main(["--minutes", "0.1"])
    assert summary["streaming_nice"] == 10
    result = json.loads((tmp_path / "soak.json").read_text())
    assert result["benchmark"] == "soak"
    assert summary["buckets"] == 5 and summary["bucket_seconds"] == pytest.approx(1.2)
    rows = result["rows"]
    assert [row["minute"] for row in rows] == [1, 2, 3, 4, 5]
    for row in rows:
        for pattern in soak.PATTERNS:
            assert row[f"{pattern} msgs/s"] > 0, (pattern, row)
        assert row["server_rss_mb"] > 10
        assert row["server_cpu_cores"] > 0
    checks = result["checks"]
    assert [c["case"].split(":")[0] for c in checks] == [*soak.PATTERNS, "server RSS at the end "
                                                         "of each of the last 3 minutes / at "
                                                         "the end of minute 2"]
    for c, pattern in zip(checks, soak.PATTERNS, strict=False):
        rates = [row[f"{pattern} msgs/s"] for row in rows]
        assert c["runs"] == 3 and c["judged_on"] == "min" and c["target_value"] == 0.9
        assert c["min"] == pytest.approx(min(rates[-3:]) / rates[0])
    memory = checks[-1]
    assert memory["judged_on"] == "max" and memory["target_value"] == 1.1
    rss = [row["server_rss_mb"] for row in rows]
    assert memory["max"] == pytest.approx(max(rss[-3:]) / rss[1])
    assert summary["keeper_rounds"] > 0


def test_a_call_s_messages_are_shared_among_the_minutes_it_overlaps(soak):
    """A streaming call that spans a minute's end counts in both minutes, by time; what
    finishes before the start or after the end counts in none."""
    clock = soak._Clock(start=100.0, bucket=10.0, buckets=3)
    clock.spread(1000, 105.0, 115.0)
    clock.add(1, 99.0)
    clock.add(1, 130.0)
    clock.add(1, 129.9)
    assert clock.counts == [500.0, 500.0, 1.0]
