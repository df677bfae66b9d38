"""The run's summary (``./dev sdk-tests``): read the stand-in plugin's ``results.jsonl``,
print passed / failed / skipped with each failure's id and error, and write
``report.txt`` (one sorted line per test that did not pass, to diff between runs) and
``failures.txt`` (each failure whole). Tests that took longer than :data:`SLOW` seconds
are listed with the server's state when they began (``timeline.tsv``), to find the
management requests that went unanswered (issue #47)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

#: seconds: a test slower than this probably waited out one of the SDK's 60 s timeouts.
SLOW = 55.0


def _load(jobs: list[Path]) -> dict[str, dict[str, str | float | None]]:
    """Each test's outcome: failed if any phase failed, else the call's (or setup's);
    ``job`` is the folder of the group that ran it."""
    tests: dict[str, dict[str, str | float | None]] = {}
    for job in jobs:
        path = job / "results.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            record = {**json.loads(line), "job": str(job)}
            seen = tests.get(record["id"])
            if seen is None or (record["outcome"] == "failed" and seen["outcome"] != "failed"):
                tests[record["id"]] = record
    return tests


def _state_at(job: Path, when: float | None) -> str:
    """The job's timeline's line nearest before ``when``: each column but the time and
    the test."""
    path = job / "timeline.tsv"
    if when is None or not path.exists():
        return ""
    header, *lines = path.read_text().splitlines()
    names = header.split("\t")
    best = ""
    for line in lines:
        fields = line.split("\t")
        try:
            if float(fields[0]) > when:
                break
        except ValueError:
            continue
        best = ", ".join(f"{name} {value}" for name, value in zip(names, fields, strict=False)
                         if name not in ("time", "last_test_ended"))
    return best


def summarize(release: str, out: Path, jobs: list[Path], seconds: float) -> int:
    tests = _load(jobs)
    counts = {kind: sorted(i for i, t in tests.items() if t["outcome"] == kind)
              for kind in ("passed", "failed", "skipped", "xfailed", "xpassed")}
    lines = [f"{t['outcome'].upper()} {i} :: {t['error']}"  # type: ignore[union-attr]
             for i, t in sorted(tests.items()) if t["outcome"] != "passed"]
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    with (out / "failures.txt").open("w") as failures:
        for test_id in counts["failed"]:
            failures.write(f"{'=' * 30} {test_id}\n{tests[test_id]['detail']}\n\n")
    slow = sorted((float(t["end"]) - float(t["start"]), i) for i, t in tests.items()  # type: ignore[arg-type]
                  if t["start"] is not None and float(t["end"]) - float(t["start"]) > SLOW)  # type: ignore[arg-type]
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    print(f"\nazure-servicebus {release}, {date}: {len(tests)} tests in {seconds / 60:.0f} min")
    for test_id in counts["failed"]:
        print(f"  FAILED {test_id}\n      {tests[test_id]['error']}")
    if slow:
        print(f"\ntests that took over {SLOW:.0f} s (the server's state as each began):")
        for took, test_id in slow:
            test = tests[test_id]
            state = _state_at(Path(str(test["job"])), test["start"])  # type: ignore[arg-type]
            print(f"  {took:5.0f} s {test_id}\n      {state}")
    print(f"\nreport: {out / 'report.txt'}; each failure whole: {out / 'failures.txt'}")
    if counts["xfailed"] or counts["xpassed"]:
        print(f"(the tests' xfail markers: {len(counts['xfailed'])} failed as they expect, "
              f"counted as skipped; {len(counts['xpassed'])} passed, counted as passed)")
    print(f"{len(counts['passed']) + len(counts['xpassed'])} passed, {len(counts['failed'])} "
          f"failed, {len(counts['skipped']) + len(counts['xfailed'])} skipped")
    return 1 if counts["failed"] or not tests else 0
