"""Durable mode: one server to a data directory (#51's leftover: two ``aiosb serve
--data-dir DIR`` on one directory both started, each rebuilding the namespaces from the
database and then writing over the other's rows). The second is refused (after waiting
a few seconds for the directory), saying which process holds it, and the first serves
on, its messages whole; once it has stopped (or been killed, and its writer with it)
the directory opens again."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading

import pytest

import aiosb
from aiosb import Message
from aiosb.emulator.durable import Journal, _directory
from aiosb.emulator.durable._directory import LOCK_FILE
from aiosb.errors import InvalidArgument, InvalidOperation
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


def _lockable(directory: object) -> bool:
    """Whether another process can take the directory's lock now."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import fcntl, os, sys; f = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)", f"{directory}/{LOCK_FILE}"],
        capture_output=True, text=True, timeout=30)
    return done.returncode == 0


def _holder(directory: object) -> subprocess.Popen[str]:
    """A process holding the directory's lock (its id in the file) until its stdin
    closes."""
    with open(f"{directory}/{LOCK_FILE}", "a"):
        pass
    return subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys; f = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(f, fcntl.LOCK_EX); os.pwrite(f, b'%d\\n' % os.getpid(), 0); "
         "print('held', flush=True); sys.stdin.read()", f"{directory}/{LOCK_FILE}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


async def test_a_journal_is_refused_while_another_process_holds_the_directory(
        tmp_path, monkeypatch):
    """While another process holds the directory's lock a journal is refused with that
    process's id (once it has waited its WAIT_SECONDS); once it has let go, the journal
    opens, says it holds the directory (its process id in the lock file), and lets it
    go when it closes."""
    monkeypatch.setattr(_directory, "WAIT_SECONDS", 0.3)
    holder = _holder(tmp_path)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(InvalidOperation, match=f"process {holder.pid}\\)"):
            await Journal(tmp_path).open()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    journal = Journal(tmp_path)
    await journal.open()
    try:
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
        assert not _lockable(tmp_path)
        # a second journal in this process is refused too: one writer to a database
        with pytest.raises(InvalidOperation, match=f"process {os.getpid()}\\)"):
            await Journal(tmp_path).open()
        assert not _lockable(tmp_path)  # and the refusal left the first one's lock
    finally:
        await journal.aclose()
    assert _lockable(tmp_path)  # closed: the directory is free


async def test_the_writer_process_holds_the_directory_too(tmp_path):
    """A journal's writer (a process of its own) keeps the lock while it lives: a server
    killed while its writer finishes a frame leaves the directory held until the writer
    has gone, so no new server rebuilds from a database still being written."""
    journal = Journal(tmp_path)
    await journal.open()
    try:
        handle, journal._held = journal._held, None
        assert handle is not None
        os.close(handle)  # the journal's own hold gone, as a killed server's would be
        assert not _lockable(tmp_path)  # its writer still holds it
    finally:
        await journal.aclose()  # the writer ends
    assert _lockable(tmp_path)


async def test_a_journal_that_fails_to_open_lets_the_directory_go(tmp_path):
    """A database this aiosb does not read is refused, and the directory is free after
    the refusal (nothing held by a journal that never opened)."""
    journal = Journal(tmp_path)
    await journal.open()
    await journal.aclose()
    db = sqlite3.connect(tmp_path / "aiosb.sqlite3")
    db.execute("UPDATE meta SET value = 'aiosb-row-9' WHERE name = 'row_format'")
    db.commit()
    db.close()
    with pytest.raises(InvalidArgument, match="rows of format"):
        await Journal(tmp_path).open()
    assert _lockable(tmp_path)


def test_a_file_system_without_locks_is_its_own_error_not_in_use(tmp_path, monkeypatch):
    """Only "held" (EAGAIN, EACCES) means another server: a file system that cannot lock
    (ENOLCK) is said as such, never blamed on the process id an earlier server left in
    the file, and the lock file is not left open."""
    import errno
    import fcntl

    (tmp_path / LOCK_FILE).write_text("4242\n")

    def flock(handle: int, how: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    opened: list[int] = []
    real_open = os.open

    def tracking_open(*args: object, **kwargs: object) -> int:
        handle = real_open(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(handle)
        return handle

    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(_directory.os, "open", tracking_open)
    with pytest.raises(OSError, match="No locks available") as refused:
        _directory.hold(tmp_path)
    assert not isinstance(refused.value, InvalidOperation)
    assert opened and all(not _is_open(handle) for handle in opened)


def _is_open(handle: int) -> bool:
    try:
        os.fstat(handle)
    except OSError:
        return False
    return True


async def test_a_journal_waits_for_a_directory_let_go_of_soon(tmp_path, caplog):
    """A server restarted at once after a ``kill -9`` meets the directory still held by
    the old writer finishing its frame: it waits (up to WAIT_SECONDS) and opens once
    the holder has gone, instead of being refused."""
    holder = _holder(tmp_path)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    threading.Timer(0.5, _let_go, (holder,)).start()
    journal = Journal(tmp_path)
    with caplog.at_level("INFO", logger="aiosb.emulator"):
        await journal.open()  # within the wait: opened
    said = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    assert len(said) == 1 and f"held by process {holder.pid}" in said[0]  # said once
    try:
        assert holder.poll() is not None  # it opened after the holder had gone
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    finally:
        await journal.aclose()


def _let_go(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.close()
    holder.wait()
    holder.stdout.close()


async def test_an_open_cancelled_while_it_waits_leaves_nothing_held(tmp_path):
    """A journal's open cancelled during its wait (a server stopped while it starts):
    once the holder has gone, the directory is free, not held by the lock the waiting
    thread took after the cancellation."""
    holder = _holder(tmp_path)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    opening = asyncio.ensure_future(Journal(tmp_path).open())
    await asyncio.sleep(0.3)
    opening.cancel()
    threading.Timer(0.2, _let_go, (holder,)).start()
    with pytest.raises(asyncio.CancelledError):
        await opening
    await asyncio.get_running_loop().run_in_executor(None, holder.wait)
    await asyncio.sleep(0.5)  # ten of the wait's polls: a stray waiting thread has its lock
    assert _lockable(tmp_path)
    journal = Journal(tmp_path)
    await journal.open()
    await journal.aclose()
