"""Every example runs as it is, and the demo (the main job) accounts for every message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aiosb.cli import demo, main

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    result = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_examples_show_what_they_claim():
    out = subprocess.run(
        [sys.executable, str(EXAMPLES[0].parent / "dead_letters.py")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "too late  TTLExpiredException" in out
    assert "poison    MaxDeliveryCountExceeded" in out
    assert "invalid   Invalid" in out


@pytest.mark.looptime
async def test_demo_accounts_for_every_message():
    report = await demo(orders=200, ttl=1.0)
    assert report == {
        "sent": 200,
        "completed": 180,
        "dead_lettered_on_expiry": 20,
        "still_active": 0,
    }


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--orders", "1"])
    assert "--orders" in capsys.readouterr().err
