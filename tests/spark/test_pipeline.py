"""The Spark pipeline example, smaller: paired writes through an outage, read back,
exactly once by MessageId (issue 12, section 3)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "spark_pipeline.py"


def test_the_pipeline_example_delivers_every_event_exactly_once_across_an_outage():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--events", "20000", "--outage", "2"],
        capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "outage: the primary queue refuses sends" in out
    verdict = re.search(r"([\d,]+) sent, ([\d,]+) arrived, ([\d,]+) lost, ([\d,]+) duplicates; "
                        r"([\d,]+) went through the backlog", out)
    assert verdict, out
    sent, arrived, lost, duplicates, backlog = (int(g.replace(",", "")) for g in verdict.groups())
    assert (sent, arrived, lost, duplicates) == (20000, 20000, 0, 0)
    assert backlog > 0  # the outage really moved traffic to the secondary
    assert "per key: 16 keys, counts match" in out and "exactly once: yes" in out
