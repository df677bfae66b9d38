"""Issue 17: every Python block of the README runs; issue 38: so does every one of the
documentation's pages (see tests/readme_blocks.py for how each kind runs; the Spark
ones are in tests/spark/test_readme_spark.py)."""

from __future__ import annotations

import asyncio
import datetime
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from readme_blocks import AMQP, KINDS, SERVER, Block, blocks, of_kind

import aiosb
from aiosb import Message, emulator
from aiosb.bridge import Bridge
from aiosb.server.process import ServerProcess


def _names(**more: object) -> dict[str, object]:
    return {"aiosb": aiosb, "Message": Message, "timedelta": datetime.timedelta,
            "asyncio": asyncio, "__name__": "__readme__", **more}


def test_every_block_says_how_it_runs():
    found = blocks()
    assert len(found) >= 10
    assert [str(b) for b in found if b.kind not in KINDS] == []


@pytest.mark.parametrize("block", of_kind("azure"), ids=str)
def test_blocks_for_a_real_namespace_parse(block: Block):
    block.compiled()  # run against Azure only with the real namespace (not here)


@pytest.mark.parametrize("block", of_kind("script"), ids=str)
def test_scripts_run(block: Block, capsys):
    emulator.reset()
    exec(block.compiled(), {"__name__": "__main__"})
    emulator.reset()


@pytest.mark.parametrize("block", of_kind("ns", "async"), ids=str)
async def test_async_blocks_run(block: Block):
    emulator.reset()
    async with aiosb.connect(f"memory://{block.slug}") as ns:
        await block.run(_names(ns=ns))
    emulator.reset()


@pytest.mark.parametrize("block", of_kind("server"), ids=str)
def test_blocks_against_aiosb_serve_run(block: Block, tmp_path: Path):
    with ServerProcess() as server:
        code = block.code.replace(SERVER, server.url)
        asyncio.run(block.with_code(code).run(_names()))
    Bridge.shared().close()  # its connections were to that server


@pytest.mark.parametrize("block", of_kind("sdk"), ids=str)
def test_official_sdk_blocks_run_against_aiosb_serve(block: Block, capsys):
    """Verbatim but for the addresses: a fresh server, as a reader has after starting it
    (the block makes what it uses)."""
    with ServerProcess() as server:
        amqp = server.amqp_connection_string.split("sb://", 1)[1].split(";", 1)[0]
        code = block.code.replace(SERVER, server.url).replace(AMQP, amqp)
        exec(block.with_code(code).compiled(), {"__name__": "__main__"})
    assert "hello" in capsys.readouterr().out


@pytest.mark.parametrize("block", of_kind("admin"), ids=str)
def test_official_admin_blocks_run_with_the_data_plane_connection_string(block: Block,
                                                                        tmp_path: Path):
    """Verbatim but for the address and the certificate's path (the server's own)."""
    pytest.importorskip("cryptography")
    with ServerProcess(args=["--tls-dir", str(tmp_path)]) as server:
        amqp = server.amqp_connection_string.split("sb://", 1)[1].split(";", 1)[0]
        code = (block.code.replace(AMQP, amqp)
                .replace("~/.local/state/aiosb/tls/aiosb-cert.pem", server.certificate))
        exec(block.with_code(code).compiled(), {"__name__": "__main__"})

        async def made() -> list[str]:
            async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
                return [q.name for q in await ns.list_queues()]

        assert asyncio.run(made()) == ["invoices"]


@pytest.mark.parametrize("block", of_kind("pytest"), ids=str)
def test_pytest_blocks_run_with_the_configuration_the_readme_states(block: Block,
                                                                  tmp_path: Path):
    """Each test of the block passes, with the plugins installed with aiosb's dev tools
    (looptime among them)."""
    (tmp_path / "test_readme_block.py").write_text(block.code)
    (tmp_path / "pytest.ini").write_text(textwrap.dedent("""\
        [pytest]
        asyncio_mode = auto
        """))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed", done.stdout), done.stdout[-2000:]
    assert " failed" not in done.stdout and " skipped" not in done.stdout
