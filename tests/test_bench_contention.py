"""S-10 quiet and under contention, and flags through ``./dev bench NAME --FLAG`` (#50):
the benchmark, run tiny."""

from __future__ import annotations

import json
import sys
import time

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import _harness, http


def test_a_busy_load_holds_cpu_while_it_runs_and_ends_with_its_block():
    """#50: the competing load is real (its processes spin: they hold a share of a core
    while the block runs) and ends with the block (no process left spinning)."""
    with _harness.BusyLoad(1) as load:
        procs = list(load._procs)
        time.sleep(0.6)
    assert len(procs) == 1
    assert all(proc.poll() is not None for proc in procs)  # gone with the block
    share = load.cpu_share()
    if sys.platform == "linux":  # /proc: at least a fifth of a core on a loaded machine
        assert share is not None and share > 0.2, share


def test_s10_is_judged_quiet_and_under_contention(monkeypatch, tmp_path):
    """#50: ``--durable-only`` measures S-10 quiet and again beside a busy process, and
    judges each on its own (worst of three runs), with the busy processes' cores and
    the durable server's serving and writer CPU apart in the rows."""
    monkeypatch.setattr(_harness, "RESULTS", tmp_path)
    # the durable --fsync server is reported, not judged: left out to keep this short
    monkeypatch.setattr(http, "_S10_SERVERS", http._S10_SERVERS[:2])
    http.main(["--durable-only", "--durable-messages", "300", "--in-flight", "1",
               "--contention", "1"])
    result = json.loads((tmp_path / "http-durable.json").read_text())
    loops = _harness.loops()
    cases = [c["case"] for c in result["checks"]]
    assert len(cases) == 2 * len(loops)
    for loop in loops:
        assert f"S-4 streaming x1: durable / in memory, run by run [{loop}]" in cases
        assert (f"S-4 streaming x1: durable / in memory, run by run, under contention "
                f"(1 busy process) [{loop}]") in cases
    assert all(c["runs"] == 3 for c in result["checks"])
    busy = [r for r in result["rows"] if r["case"].endswith(", 1 busy process")]
    quiet = [r for r in result["rows"] if r["case"].endswith(", quiet")]
    assert len(busy) == len(quiet) == 2 * len(loops)
    if sys.platform == "linux":
        assert all(r["busy_cores"] > 0 for r in busy)
        assert all("busy_cores" not in r for r in quiet)
        # (CPU ticks are 10 ms: a run this short may see none in the writer)
        durable = [r for r in result["rows"] if "durable" in r["case"]]
        assert all(r["writer_ms_per_batch"] >= 0 and r["serving_ms_per_batch"] >= 0
                   and r["commits_per_s"] > 0 for r in durable)


def test_contention_0_measures_s10_quiet_only(monkeypatch, tmp_path):
    """#50: ``--contention 0`` is the quiet measurement alone, as before."""
    monkeypatch.setattr(_harness, "RESULTS", tmp_path)
    monkeypatch.setattr(http, "_S10_SERVERS", http._S10_SERVERS[:2])
    monkeypatch.setattr(_harness, "loops", lambda: ["asyncio"])
    monkeypatch.setattr(http, "loops", lambda: ["asyncio"])
    http.main(["--durable-only", "--durable-messages", "200", "--in-flight", "1",
               "--contention", "0"])
    result = json.loads((tmp_path / "http-durable.json").read_text())
    assert [c["case"] for c in result["checks"]] == [
        "S-4 streaming x1: durable / in memory, run by run [asyncio]"]


@pytest.mark.parametrize(("argv", "names", "flags"), [
    (["http", "--durable-only", "--contention", "2"], ["http"], ["--durable-only",
                                                                "--contention", "2"]),
    (["s1", "memory"], ["s1", "memory"], []),
])
def test_flags_after_the_names_reach_each_benchmark(monkeypatch, argv, names, flags):
    """#50: ``./dev bench http --durable-only`` passed nothing on (every benchmark ran
    with ``[]``) and took the flag for a benchmark's name."""
    called = []
    monkeypatch.setattr(bench_main, "BENCHMARKS", {
        name: (lambda args, name=name: called.append((name, args)))
        for name in bench_main.BENCHMARKS})
    monkeypatch.setattr(sys, "argv", ["benchmarks", *argv])
    bench_main.main()
    assert called == [(name, flags) for name in names]
