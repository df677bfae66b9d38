"""The journal's end of its writer process (#39): frames out, answers in, in order.

:class:`~._durable.Journal` cuts each group commit into frames on the serving loop
(:mod:`._groups`) and hands them to :func:`start_writer`'s process (:mod:`._writer`),
each as a :class:`~._groups.Write`; the writer answers each in the order sent, and
:class:`WriterLink` passes each answer to the journal (``answered(link, write,
failure)``: ``failure`` is None when it is written), and the loss of the process once
nothing more will be answered (``ended(link, why)``).

The writer has a deadline (#48): each frame is answered within :data:`WRITE_DEADLINE`
of the moment the writer could start on it (when it was sent, or when the frame before
it was answered). A writer that misses it (stopped, its disk stalled) is killed and
counts as ended at once, without waiting for its process to go: the journal takes its
unanswered frames back and writes them again with a new writer.

Imports: :mod:`._writer`, :mod:`._groups`, :mod:`._record`; never the journal (it hears
of the link through callbacks).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ...errors import TransientError
from .._record import _Record
from . import _writer_process as _writer
from ._groups import Write

__all__ = ["WRITER_FLAGS", "WRITE_DEADLINE", "WriteFailed", "WriterLink", "YoungLocks",
           "consume", "start_writer"]

log = logging.getLogger("aiosb.emulator")

#: Arguments of the writer's command line after the database (tests: ``--row-locks``).
WRITER_FLAGS: list[str] = []
#: Seconds the writer has to answer a frame from the moment it could start on it; a
#: writer that misses it is killed and replaced (#48). A frame is capped
#: (:data:`._groups.MOST_ROWS`, :data:`._groups.MOST_BYTES`) and takes milliseconds;
#: the slowest statement a frame may hold, an entity deleted with a million messages,
#: a few seconds: 15 s is far above what a working writer needs. And a commit waits for
#: its frame and, if that writer was lost, once more for the replacement: about two
#: deadlines, well within the 60 s a client gives an operation (``operation_timeout``)
#: before it gives up, so the client hears an answer or an error it can retry.
WRITE_DEADLINE = 15.0


class WriteFailed(TransientError):
    """A group write failed; ``upto`` is the change count it would have made durable;
    ``lost``: the writer was lost (it ended, or missed its deadline), not the write
    refused."""

    def __init__(self, upto: int, message: str, lost: bool = False) -> None:
        super().__init__(message)
        self.upto = upto
        self.lost = lost


Answered = Callable[["WriterLink", Write, "str | None"], None]
Ended = Callable[["WriterLink", str], None]


class WriterLink(asyncio.SubprocessProtocol):
    """The pipe to one writer process, and its deadline (:data:`WRITE_DEADLINE`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, answered: Answered, ended: Ended
                 ) -> None:
        self.loop = loop
        #: The frames sent and not yet answered, oldest first.
        self.writes: collections.deque[Write] = collections.deque()
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

    def send(self, write: Write, frame: bytes) -> None:
        """Hand ``write`` (``frame``: its head and pickled body) to the writer."""
        self.writes.append(write)
        if self._deadline is None and not self.closed:  # the writer starts on it now
            self._deadline = self.loop.call_later(WRITE_DEADLINE, self._missed)
        try:
            self._stdin.write(frame)
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


class YoungLocks:
    """Locks not yet due to be written, oldest first (``queue``: taken at, entity key,
    sequence number, record), and when each was taken (``at``, by entity key and
    sequence number) while it is still to be written: a record settled or written whole
    meanwhile leaves ``at``, and its entry in ``queue`` is passed over."""

    def __init__(self) -> None:
        self.queue: collections.deque[tuple[float, tuple[str, str], int, _Record]] = (
            collections.deque())
        self.at: dict[tuple[tuple[str, str], int], float] = {}

    def add(self, key: tuple[str, str], seq: int, rec: _Record, now: float) -> None:
        if (key, seq) not in self.at:  # a lock pending keeps its first instant
            self.at[(key, seq)] = now
            self.queue.append((now, key, seq, rec))

    def due(self, before: float) -> Iterator[tuple[tuple[str, str], int, _Record]]:
        """Take those taken at ``before`` or earlier: (entity key, sequence number,
        record) of each still to be written."""
        queue, at = self.queue, self.at
        while queue and queue[0][0] <= before:
            taken, key, seq, rec = queue.popleft()
            if at.get((key, seq)) == taken:
                del at[(key, seq)]
                yield key, seq, rec

    def drop_entity(self, key: tuple[str, str]) -> None:
        for pending in [pending for pending in self.at if pending[0] == key]:
            del self.at[pending]


def consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a write's exception (logged already; retried in the background)."""
    if not task.cancelled():
        task.exception()
