"""Every example runs as it is, and the demo (the main job) accounts for every message."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from aiosb.cli import demo, main, run
from aiosb.errors import ServiceBusError

# The Spark pipeline runs in tests/spark/test_pipeline.py, smaller, beside the other Spark tests.
EXAMPLES = sorted(
    p for p in (Path(__file__).parent.parent / "examples").glob("*.py")
    if p.stem != "spark_pipeline"
)


@functools.cache
def run_example(name: str) -> subprocess.CompletedProcess[str]:
    """Run ``examples/{name}.py`` once per test session."""
    path = EXAMPLES[0].parent / f"{name}.py"
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    result = run_example(path.stem)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_examples_show_what_they_claim():
    out = run_example("dead_letters").stdout
    assert "too late  TTLExpiredException" in out
    assert "poison    MaxDeliveryCountExceeded" in out
    assert "invalid   Invalid" in out


@pytest.mark.looptime
async def test_demo_fails_over_recovers_and_accounts_for_every_message(tmp_path, capsys):
    svg, png = tmp_path / "timeline.svg", tmp_path / "timeline.png"
    report = await demo(orders=160, svg=str(svg), png=str(png))
    assert report["sent"] == report["arrived"] == 160
    assert report["lost"] == report["duplicates"] == 0
    assert report["to_backlog"] > 0 and report["to_primary"] > 0
    assert report["moved_home"] == report["to_backlog"]
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "160 sent, 160 arrived, 0 lost, 0 duplicates"
    # The text picture: no send went to the backlog in a column before the outage.
    rows = {line[:9].strip(): line[9:] for line in out.splitlines()
            if line[:9].strip() in ("outage", "backlog")}
    first_b, first_down = rows["backlog"].index("B"), rows["outage"].index("#")
    assert first_b >= first_down, (rows["outage"], rows["backlog"])
    import xml.etree.ElementTree as ET

    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(root) > 160
    text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    for words in ("outage of the primary queue", "time since start (s)", "messages per second",
                  "to the primary", "to the backlog", "moved home by the syphon",
                  "primary down", "failover", "recovered"):
        assert words in text
    pytest.importorskip("matplotlib")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_picture_draws_throughput_per_destination_over_time():
    """Rates per half second: 4 sends in the first half second are 8 a second."""
    from aiosb._demo import Run, rates, verdict

    happened = Run(where=[(0.1, "P"), (0.2, "P"), (0.3, "P"), (0.4, "P"), (1.2, "B")],
                   moved=[2.1, 2.2], events=[(1.0, "failover")], outage=(1.0, 2.0),
                   total=2.5)
    got = rates(happened)
    assert got["P"][0] == (0.0, 8.0) and got["P"][1] == (0.5, 0.0)
    assert got["B"][2] == (1.0, 2.0) and got["S"][4] == (2.0, 4.0)
    assert verdict({"sent": 5, "arrived": 4, "lost": 1, "duplicates": 2}) == (
        "5 sent, 4 arrived, 1 lost, 2 duplicates"
    )


def test_timeline_text_shows_the_outage_and_both_destinations():
    from aiosb.cli import timeline

    picture = timeline([(0.5, "P"), (2.5, "B"), (4.5, "P")], [4.6], (2.0, 4.0), 6.0)
    lines = picture.splitlines()
    assert lines[1].startswith("outage") and "#" in lines[1]
    assert "P" in lines[2] and "B" in lines[3] and "S" in lines[4]


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--orders", "1"])
    assert "--orders" in capsys.readouterr().err


def test_sessions_example_shows_a_pinned_order_waiting_for_its_fragment():
    """PT-6, PT-9: the order on the down fragment waits; the others flow and stay in order."""
    out = run_example("sessions_and_partitions").stdout
    assert "order-2 while its fragment is down: PartitionUnavailable" in out
    assert "order-2: ['line 0', 'line 1', 'line 2'] (3 lines done)" in out
    assert "order-1: ['line 0', 'line 1', 'line 2', 'line 3'] (4 lines done)" in out


def test_serve_prints_how_to_connect_and_serves_until_stopped():
    """``aiosb serve`` prints the URL and connection string with the development key,
    and answers signed requests from another process."""
    import asyncio
    import signal

    import aiosb
    from aiosb.server.http import DEV_KEY

    proc = subprocess.Popen(
        [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--amqp-port", "0",
         "--amqps-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(8)]
        url = lines[0].rsplit(" ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:")
        assert DEV_KEY in "".join(lines)
        assert lines[1].strip() == "event loop: uvloop"  # S-9: the default where installed
        assert f"Endpoint={url}/contoso/;SharedAccessKeyName=RootManageSharedAccessKey" in "".join(
            lines
        )

        async def use() -> bool:
            async with aiosb.connect(f"{url}/contoso") as ns:
                await ns.create_queue("q")
                return await ns.queue_exists("q")

        assert asyncio.run(use())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    assert proc.returncode == 130


def test_serve_refuses_a_taken_port(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 1
        assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err
        # The AMQP port taken, the HTTP one free: the message names the one in the way.
        assert main(["serve", "--port", "0", "--amqp-port", str(port)]) == 1
        err = capsys.readouterr().err
        assert f"cannot serve on 127.0.0.1:{port} (AMQP)" in err
        assert "--amqp-port" in err and "--no-amqp" in err


async def _loop_module() -> str:
    import asyncio

    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_commands_run_on_uvloop_where_installed_s9():
    """S-9: uvloop is the default where installed; ``--loop asyncio`` picks the other."""
    pytest.importorskip("uvloop", reason="uvloop is not installed (Windows)")
    assert run(_loop_module()) == "uvloop"
    assert run(_loop_module(), "uvloop") == "uvloop"
    assert run(_loop_module(), "asyncio") == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now fails
    assert run(_loop_module()) == "asyncio"
    coro = _loop_module()
    with pytest.raises(ServiceBusError, match="pip install uvloop"):
        run(coro, "uvloop")
    assert coro.cr_frame is None  # closed, not left to warn "never awaited"


def test_timeline_labels_name_the_time_of_the_column_below_them():
    """The scale used to cut times to whole seconds, up to a second off its marks."""
    from aiosb.cli import timeline

    picture = timeline([(5.0, "P")], [], (100.0, 101.0), 10.0)
    scale, _, primary = picture.splitlines()[:3]
    column = primary.index("P")  # 9 characters of row name come first
    assert scale[column:].split()[0] == "5.0s"
    assert scale[9 + 56:].split()[0] == "8.8s"  # 56 columns of 10/64 s; not "8s"


def test_python_dash_m_aiosb_and_help_shows_defaults():
    out = subprocess.run([sys.executable, "-m", "aiosb", "serve", "--help"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "default 5380, or 5300 with --microsoft-emulator" in text
    assert "(default: 127.0.0.1)" in text


def test_serve_stops_cleanly_on_sigterm_and_says_bye():
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "aiosb", "serve", "--port", "0", "--amqp-port", "0",
         "--amqps-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert "listening on" in proc.stdout.readline()  # type: ignore[union-attr]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.rstrip().endswith("bye")
