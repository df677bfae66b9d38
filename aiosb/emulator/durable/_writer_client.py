"""The journal's end of its writer process (#39): the pipe. Frames out, answers in,
in order, each frame held to a deadline.

:class:`~._journal.Journal` cuts each group commit into frames on the serving loop
(:mod:`._group_commit`) and hands each to :func:`start_writer`'s process
(:mod:`._writer_process`) with :meth:`WriterLink.send`, beside what it calls the frame
(a :class:`~._group_commit.Write`, which this module never looks into); the writer
answers each in the order sent, and :class:`WriterLink` passes each answer to the
journal (``answered(link, write, failure)``: ``failure`` is None when it is written),
and the loss of the process once nothing more will be answered (``ended(link, why)``).
What a frame holds, when it is sent, and what happens to one that fails are the
journal's policy, not the pipe's.

The writer has a deadline (#48): each frame is answered within :data:`WRITE_DEADLINE`
of the moment the writer could start on it (when it was sent, or when the frame before
it was answered). A writer that misses it (stopped, its disk stalled) is killed and
counts as ended at once, without waiting for its process to go: the journal takes its
unanswered frames back and writes them again with a new writer.

Imports: :mod:`._writer_process` (the frames' head and the answers); never the journal
(it hears of the link through callbacks).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from . import _writer_process as _writer

__all__ = ["WRITER_FLAGS", "WRITE_DEADLINE", "WriterLink", "start_writer"]

log = logging.getLogger("aiosb.emulator")

#: Arguments of the writer's command line after the database (tests: ``--row-locks``).
WRITER_FLAGS: list[str] = []
#: Seconds the writer has to answer a frame from the moment it could start on it; a
#: writer that misses it is killed and replaced (#48). A frame is capped
#: (:data:`._group_commit.MOST_ROWS`, :data:`._group_commit.MOST_BYTES`) and takes milliseconds;
#: the slowest statement a frame may hold, an entity deleted with a million messages,
#: a few seconds: 15 s is far above what a working writer needs. And a commit waits for
#: its frame and, if that writer was lost, once more for the replacement: about two
#: deadlines, well within the 60 s a client gives an operation (``operation_timeout``)
#: before it gives up, so the client hears an answer or an error it can retry.
WRITE_DEADLINE = 15.0


#: What the journal calls a frame it sends (:class:`~._group_commit.Write`).
W = TypeVar("W")


class WriterLink(asyncio.SubprocessProtocol, Generic[W]):
    """The pipe to one writer process, and its deadline (:data:`WRITE_DEADLINE`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 answered: Callable[[WriterLink[W], W, str | None], None],
                 ended: Callable[[WriterLink[W], str], None]) -> None:
        self.loop = loop
        #: The frames sent and not yet answered, oldest first.
        self.writes: collections.deque[W] = collections.deque()
        self.exited: asyncio.Future[None] = loop.create_future()
        self._answered, self._ended = answered, ended
        #: The writer is lost (its process ended, or it missed its deadline): nothing
        #: sent now would be answered.
        self.closed = False
        self._transport: Any = None
        self._stdin: Any = None
        self._buffer = bytearray()
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        # an asyncio.SubprocessTransport (uvloop's is not a subclass of it)
        self._transport = transport
        self._stdin = transport.get_pipe_transport(0)
        _widen(self._stdin)

    def send(self, write: W, body: bytes, resume: bool = False) -> None:
        """Hand the writer a frame (``body``: :func:`~._group_commit.frame_of`), which
        the journal calls ``write``; ``resume``: the first after a failure, written
        although a frame before it was not (:data:`._writer_process.RESUME`)."""
        self.writes.append(write)
        if self._deadline is None and not self.closed:  # the writer starts on it now
            self._deadline = self.loop.call_later(WRITE_DEADLINE, self._missed)
        try:
            self._stdin.write(
                _writer.HEAD.pack(len(body), _writer.RESUME if resume else 0) + body)
        except (RuntimeError, OSError):  # the writer is gone (uvloop closes the pipe
            pass  # before it says so): connection_lost takes the write back

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
                self._answered(self, self.writes.popleft(), failure)
                if self._deadline is not None:  # the next frame's time starts now
                    self._deadline.cancel()
                    self._deadline = (self.loop.call_later(WRITE_DEADLINE, self._missed)
                                      if self.writes and not self.closed else None)

    def _missed(self) -> None:
        """The writer did not answer within its deadline: kill it, and count it lost
        now (a process stalled in the kernel may take long to go)."""
        self._deadline = None
        pid = None if self._transport is None else self._transport.get_pid()
        log.error("the journal's writer (pid %s) did not answer within %.1f s: killed, "
                  "and replaced", pid, WRITE_DEADLINE)
        with contextlib.suppress(ProcessLookupError, OSError):
            self._transport.kill()
        self._lost(f"its writer process did not answer within {WRITE_DEADLINE:g} s "
                   "and was killed")

    def _lost(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._ended(self, why)
        self.writes.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        """The process ended and its pipes closed: every answer it gave is in."""
        transport = self._transport
        code = None if transport is None else transport.get_returncode()
        self._lost(f"its writer process ended (exit code {code})")
        if not self.exited.done():
            self.exited.set_result(None)

    async def aclose(self) -> None:
        """End the writer (its input closed, it exits once its last frame is written)
        and wait for it, killing it if it is not gone within :data:`WRITE_DEADLINE`."""
        if self._stdin is not None:
            self._stdin.close()
        try:
            async with asyncio.timeout(WRITE_DEADLINE):
                await asyncio.shield(self.exited)
        except TimeoutError:
            log.error("the journal's writer did not end within %.1f s of its input "
                      "closing: killed", WRITE_DEADLINE)
        finally:
            if self._transport is not None:
                self._transport.close()  # kills it if it still runs


async def start_writer(path: Path, fsync: bool,
                       answered: Callable[[WriterLink[W], W, str | None], None],
                       ended: Callable[[WriterLink[W], str], None],
                       held: int | None = None) -> WriterLink[W]:
    """Start a writer process for the database at ``path`` (made already): a fresh
    interpreter (``-I -S``: the standard library is all it imports) running
    :mod:`._writer_process` as a script. ``held``: the directory's lock file
    (:mod:`._directory`), which the writer keeps open while it lives, and the lock with
    it (a writer that outlives a killed server still writes: no other server may open
    the directory meanwhile).

    Raises:
        OSError: The process could not be started.
    """
    loop = asyncio.get_running_loop()
    flags = ["--fsync"] if fsync else []
    try:
        _, link = await loop.subprocess_exec(
            lambda: WriterLink(loop, answered, ended), sys.executable, "-I", "-S",
            _writer.__file__, str(path), *flags, *WRITER_FLAGS,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            pass_fds=() if held is None else (held,))
    except (OSError, RuntimeError, NotImplementedError) as exc:  # no interpreter; a loop
        # without subprocesses (Windows' selector loop)
        raise OSError(f"the emulator could not start the writer of {path} "
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
