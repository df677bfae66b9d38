"""Durable mode: one process to a data directory (#51's leftover: two ``aiosb serve
--data-dir DIR`` on one directory both started, each rebuilding the namespaces from the
database and then writing over the other's rows). The second is refused at once, saying
which process holds the directory, and the first serves on, its messages whole; once it
has stopped (or been killed) the directory opens again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

import aiosb
from aiosb import Message
from aiosb.emulator.durable import Journal
from aiosb.emulator.durable._directory import LOCK_FILE
from aiosb.errors import InvalidOperation
from aiosb.server.process import ServerProcess


def _second(data: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--amqp-port", "0",
         "--amqps-port", "0", "--quiet", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(120)
def test_a_second_server_on_the_directory_is_refused_and_the_first_serves_on(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(args=["--data-dir", str(data)]) as first:
        url = f"{first.url}/held"

        async def send() -> None:
            async with aiosb.connect(url) as ns:
                await ns.create_queue("q")
                async with ns.sender("q") as sender:
                    await sender.send(Message(body=b"kept"))

        asyncio.run(send())
        second = _second(data)
        assert second.returncode != 0
        said = second.stdout + second.stderr
        assert f"in use by another aiosb serve (process {first.pid})" in said, said
        assert "Traceback" not in said

        async def peek() -> list[bytes]:
            async with aiosb.connect(url) as ns, ns.receiver("q") as receiver:
                return [m.body for m in await receiver.peek(10)]

        assert asyncio.run(peek()) == [b"kept"]
    # stopped: the directory is free, and what was sent is there
    again = subprocess.Popen(
        [sys.executable, "-m", "aiosb.cli", "serve", "--port", "0", "--amqp-port", "0",
         "--amqps-port", "0", "--quiet", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert again.stdout is not None
        assert "http://" in again.stdout.readline()
    finally:
        again.send_signal(signal.SIGKILL)  # killed: the lock goes with the process
        again.wait()
    with ServerProcess(args=["--data-dir", str(data)]) as third:
        assert third.pid


async def test_a_journal_is_refused_while_another_process_holds_the_directory(tmp_path):
    """The lock is the process's: a journal in this process opens the directory while a
    child holds its lock file no more than while nobody does; while the child holds it,
    it is refused with the child's process id."""
    (tmp_path / LOCK_FILE).touch()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys; f = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.lockf(f, fcntl.LOCK_EX); os.pwrite(f, b'%d\\n' % os.getpid(), 0); "
         "print('held', flush=True); sys.stdin.read()", str(tmp_path / LOCK_FILE)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        journal = Journal(tmp_path)
        with pytest.raises(InvalidOperation, match=f"process {holder.pid}"):
            await journal.open()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    journal = Journal(tmp_path)
    await journal.open()
    try:
        with open(tmp_path / LOCK_FILE) as lock:
            assert lock.read().strip() == str(os.getpid())
    finally:
        await journal.aclose()
