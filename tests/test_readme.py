"""Issue 17: every Python block of the README runs; issue 38: so does every one of the
documentation's pages; issue 51: each runs as a reader who copies it would run it, in a
fresh interpreter with nothing injected, or is a fragment that says what it needs (see
tests/readme_blocks.py for how each kind runs; the Spark ones are in
tests/spark/test_readme_spark.py)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from readme_blocks import AMQP, FRAGMENTS, KINDS, ROOT, SERVER, WHOLE, Block, blocks, of_kind

import aiosb
from aiosb.server.process import ServerProcess

#: Opens ``ns`` and runs an ``ns`` fragment (argv[1]) with ``ns`` and nothing else given.
_NS_HARNESS = textwrap.dedent("""\
    import ast, asyncio, inspect, sys

    import aiosb

    async def main(path):
        code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        async with aiosb.connect("memory://fragment") as ns:
            result = eval(code, {"__name__": "__main__", "ns": ns})
            if code.co_flags & inspect.CO_COROUTINE:
                await result

    asyncio.run(main(sys.argv[1]))
    """)


def _python(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh interpreter, in ``tmp_path``, importing this checkout's
    aiosb; it must succeed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _run(block: Block, tmp_path: Path, code: str | None = None) -> str:
    """Run the block (its code, or ``code``: it with addresses replaced) as a file, as
    ``python block.py`` would; its output."""
    path = tmp_path / "block.py"
    path.write_text(block.code if code is None else code)
    return _python(tmp_path, str(path)).stdout


def test_every_block_says_how_it_runs():
    found = blocks()
    assert len(found) >= 10
    assert [str(b) for b in found if b.kind not in KINDS] == []


@pytest.mark.parametrize("block", blocks(), ids=str)
def test_every_block_runs_as_written_or_says_what_it_needs(block: Block):
    """#51: a block copied into a file runs: it imports what it uses and awaits only in
    functions; or its first line says ``# fragment:`` and names what it lacks."""
    lacks = sorted(block.undefined())
    awaits = block.awaits_at_top_level()
    if block.fragment is None:
        assert block.kind not in FRAGMENTS, f"{block} is given names: say what it needs"
        assert lacks == [], f"{block} uses {lacks} without importing or defining them"
        assert not awaits, f"{block} awaits outside a function: no file runs it as written"
    else:
        assert block.kind not in WHOLE, f"{block} runs as written: it is no fragment"
        words = set(re.findall(r"\w+", block.fragment))
        assert [n for n in lacks if n not in words] == [], (
            f"{block}'s '# fragment:' line does not name all it needs: {lacks}")
        assert not awaits or "async" in words, (
            f"{block} awaits outside a function: its '# fragment:' line must say async")


@pytest.mark.parametrize("block", of_kind("azure"), ids=str)
def test_blocks_for_a_real_namespace_parse(block: Block):
    block.compiled()  # run against Azure only with the real namespace (not here)


@pytest.mark.parametrize("block", of_kind("script"), ids=str)
def test_scripts_run(block: Block, tmp_path: Path):
    _run(block, tmp_path)


@pytest.mark.parametrize("block", of_kind("ns"), ids=str)
def test_ns_fragments_run_given_only_ns(block: Block, tmp_path: Path):
    (tmp_path / "fragment.py").write_text(block.code)
    (tmp_path / "harness.py").write_text(_NS_HARNESS)
    _python(tmp_path, "harness.py", "fragment.py")


def _for(server: ServerProcess, code: str) -> str:
    """The code with the default addresses of ``aiosb serve`` replaced by the server's."""
    amqp = server.amqp_connection_string.split("sb://", 1)[1].split(";", 1)[0]
    return code.replace(SERVER, server.url).replace(AMQP, amqp)


@pytest.mark.parametrize("block", of_kind("server"), ids=str)
def test_blocks_against_aiosb_serve_run(block: Block, tmp_path: Path):
    """Verbatim but for the addresses: a fresh server, as a reader has after starting it
    (the block makes what it uses)."""
    with ServerProcess() as server:
        _run(block, tmp_path, _for(server, block.code))


@pytest.mark.parametrize("block", of_kind("sdk"), ids=str)
def test_official_sdk_blocks_run_against_aiosb_serve(block: Block, tmp_path: Path):
    """Verbatim but for the addresses: a fresh server, as a reader has after starting it
    (the block makes what it uses)."""
    with ServerProcess() as server:
        assert "hello" in _run(block, tmp_path, _for(server, block.code))


@pytest.mark.parametrize("block", of_kind("admin"), ids=str)
def test_official_admin_blocks_run_with_the_data_plane_connection_string(block: Block,
                                                                        tmp_path: Path):
    """Verbatim but for the address and the certificate's path (the server's own)."""
    pytest.importorskip("cryptography")
    with ServerProcess(args=["--tls-dir", str(tmp_path / "tls")]) as server:
        code = _for(server, block.code).replace("~/.local/state/aiosb/tls/aiosb-cert.pem",
                                                server.certificate)
        _run(block, tmp_path, code)

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
    done = _python(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path))
    assert re.search(r"\b\d+ passed", done.stdout), done.stdout[-2000:]
    assert " failed" not in done.stdout and " skipped" not in done.stdout
