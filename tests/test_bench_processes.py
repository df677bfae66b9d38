"""``./dev bench processes`` (#50): one ``aiosb serve`` against two, run tiny."""

from __future__ import annotations

import json

import pytest

from benchmarks import _harness, processes


def test_processes_reports_one_and_two_servers_and_their_ratio(monkeypatch, tmp_path):
    """#50: the aggregate rate of the same clients against one server process and against
    two, min/median/max of three runs each, the ratio run by run judged at most
    :data:`benchmarks.processes.WORTH` (one process is enough) on the run most
    favourable to two, and the verdict."""
    monkeypatch.setattr(_harness, "RESULTS", tmp_path)
    summary = processes.main(["--messages", "200", "--in-flight", "1", "--repeat", "3"])
    result = json.loads((tmp_path / "processes.json").read_text())
    rows = {row["case"]: row for row in result["rows"]}
    one = rows["2 clients of S-4 streaming x1, 1 server process"]
    two = rows["2 clients of S-4 streaming x1, 2 server processes"]
    for row in (one, two):
        assert 0 < row["min_per_s"] <= row["median_per_s"] <= row["max_per_s"]
        assert row["client_cores"] >= 0  # (CPU ticks are 10 ms: a tiny run may see none)
    (verdict,) = result["checks"]
    assert verdict["runs"] == 3
    assert verdict["target_value"] == processes.WORTH and verdict["judged_on"] == "max"
    assert verdict["min"] == summary["ratio_min"] <= summary["ratio_median"]
    assert summary["ratio_median"] <= summary["ratio_max"] == verdict["max"]
    # the ratio is two over one, run by run: within the rows' extremes
    assert two["min_per_s"] / one["max_per_s"] <= verdict["min"] + 1e-9
    assert verdict["max"] <= two["max_per_s"] / one["min_per_s"] + 1e-9
    assert summary["verdict"] == ("not worth its complexity for a test server"
                                  if verdict["pass"] else "worth it")


def test_a_client_that_fails_fails_the_benchmark():
    """#50: a client process that cannot stream is an error, not a run of zero."""
    with pytest.raises(RuntimeError, match=r"did not get ready|failed"):
        processes._clients(["http://127.0.0.1:9/nowhere"], 100, 1, "asyncio")


def test_two_servers_split_the_clients_and_the_ratio_is_two_over_one(monkeypatch):
    """#50: with two server processes the clients are spread over both (client ``i`` on
    server ``i % 2``), with one every client drives it, each client on a namespace of
    its own; the ratio is the two-server rate over the one-server rate, run by run."""
    seen = []

    def clients(urls, messages, in_flight, loop):
        seen.append(urls)
        servers = {url.rsplit("/", 1)[0] for url in urls}
        return (1.0 if len(servers) == 1 else 0.5), 0.1

    monkeypatch.setattr(processes, "_clients", clients)
    rows, summary, (verdict,) = processes.one_against_two(1_000, 4, 1, 3, "asyncio")
    assert len(seen) == 6
    for urls in seen:
        assert len(set(urls)) == 4  # a namespace each
    assert [len({u.rsplit("/", 1)[0] for u in urls}) for urls in seen] == [1, 2] * 3
    assert [r["median_per_s"] for r in rows] == [4_000, 8_000]
    assert summary["ratio_min"] == summary["ratio_max"] == verdict["min"] == 2.0
    assert not verdict["pass"] and summary["verdict"] == "worth it"  # 2.0 > WORTH
