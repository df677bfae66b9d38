"""The journal's end of its writer process (#39): groups out, answers in, in order.

:class:`~._durable.Journal` prepares a group commit on the serving loop and hands it to
:func:`start_writer`'s process (:mod:`._writer`) as a :class:`Write`; the writer
answers each group in the order sent, and :class:`WriterLink` passes each answer to
the journal (``answered(write, failure)``: ``failure`` is None when it is written), and
the end of the process once every answer is in (``ended(link, exit code)``).

Imports: :mod:`._writer`; never the journal (it hears of the link through callbacks).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import TransientError
from . import _writer

__all__ = ["WRITER_FLAGS", "Write", "WriteFailed", "WriterLink", "consume", "start_writer"]

#: Arguments of the writer's command line after the database (tests: ``--row-locks``).
WRITER_FLAGS: list[str] = []


class WriteFailed(TransientError):
    """A group write failed; ``upto`` is the change count it would have made durable."""

    def __init__(self, upto: int, message: str) -> None:
        super().__init__(message)
        self.upto = upto


class Write:
    """A group handed to the writer: what it carries (taken back if it is not
    written), up to which change, and the writer's answer."""

    __slots__ = ("answer", "dirty", "high_id", "locks", "ops", "upto")

    def __init__(self, upto: int, dirty: Any, locks: Any, ops: Any, high_id: int,
                 answer: asyncio.Future[None]) -> None:
        self.upto, self.dirty, self.locks, self.ops = upto, dirty, locks, ops
        self.high_id, self.answer = high_id, answer


Answered = Callable[[Write, "str | None"], None]
Ended = Callable[["WriterLink", "int | None"], None]


class WriterLink(asyncio.SubprocessProtocol):
    """The pipe to one writer process."""

    def __init__(self, loop: asyncio.AbstractEventLoop, answered: Answered, ended: Ended
                 ) -> None:
        self.loop = loop
        #: The groups sent and not yet answered, oldest first.
        self.writes: collections.deque[Write] = collections.deque()
        self.exited: asyncio.Future[None] = loop.create_future()
        self._answered, self._ended = answered, ended
        self._transport: Any = None
        self._stdin: Any = None
        self._buffer = bytearray()

    def connection_made(self, transport: Any) -> None:
        # an asyncio.SubprocessTransport (uvloop's is not a subclass of it)
        self._transport = transport
        self._stdin = transport.get_pipe_transport(0)
        _widen(self._stdin)

    def send(self, write: Write, frame: bytes) -> None:
        """Hand ``write`` (``frame``: its flags and pickled group) to the writer."""
        self.writes.append(write)
        self._stdin.write(frame)

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        buffer = self._buffer
        buffer += data
        while buffer:
            failure: str | None = None
            if buffer[:1] != _writer.OK:  # FAILED, a length, the message
                if len(buffer) < 5:
                    return
                (size,) = struct.unpack_from("<I", buffer, 1)
                if len(buffer) < 5 + size:
                    return
                failure = bytes(buffer[5:5 + size]).decode(errors="replace")
                del buffer[:5 + size]
            else:
                del buffer[:1]
            if self.writes:
                self._answered(self.writes.popleft(), failure)

    def connection_lost(self, exc: Exception | None) -> None:
        """The process ended and its pipes closed: every answer it gave is in."""
        transport = self._transport
        self._ended(self, None if transport is None else transport.get_returncode())
        self.writes.clear()
        if not self.exited.done():
            self.exited.set_result(None)

    async def aclose(self) -> None:
        """End the writer (its input closed, it exits once its last group is written)
        and wait for it."""
        if self._stdin is not None:
            self._stdin.close()
        try:
            await asyncio.shield(self.exited)
        finally:
            if self._transport is not None:
                self._transport.close()


async def start_writer(path: Path, fsync: bool, answered: Answered, ended: Ended
                       ) -> WriterLink:
    """Start a writer process for the database at ``path`` (made already): a fresh
    interpreter (``-I -S``: the standard library is all it imports) running
    :mod:`._writer` as a script.

    Raises:
        WriteFailed: The process could not be started.
    """
    loop = asyncio.get_running_loop()
    flags = ["--fsync"] if fsync else []
    try:
        _, link = await loop.subprocess_exec(
            lambda: WriterLink(loop, answered, ended), sys.executable, "-I", "-S",
            _writer.__file__, str(path), *flags, *WRITER_FLAGS,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    except (OSError, RuntimeError, NotImplementedError) as exc:  # no interpreter; a loop
        # without subprocesses (Windows' selector loop)
        raise WriteFailed(0, f"the emulator could not start the writer of {path} "
                          f"({sys.executable}): {exc}") from exc
    return link


def _widen(pipe: Any) -> None:
    """Let the pipe hold a few groups (1 MiB, where Linux allows it; 64 KiB by
    default): a group is written to it at once, not in pieces as the writer reads."""
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    handle = pipe.get_extra_info("pipe")
    if setsize is None or handle is None:
        return
    with contextlib.suppress(OSError, ValueError):
        fcntl.fcntl(handle.fileno(), setsize, 1 << 20)


def consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a write's exception (logged already; retried in the background)."""
    if not task.cancelled():
        task.exception()
