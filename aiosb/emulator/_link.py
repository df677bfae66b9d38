"""The journal's end of its writer process (#39): groups out, answers in, in order.

:class:`~._durable.Journal` prepares a group commit on the serving loop and hands it to
:func:`start_writer`'s process (:mod:`._writer`) as a :class:`Write`; the writer
answers each group in the order sent, and :class:`WriterLink` passes each answer to
the journal (``answered(write, failure)``: ``failure`` is None when it is written), and
the end of the process once every answer is in (``ended(link, exit code)``).

Imports: :mod:`._writer`, :mod:`._record`, :mod:`._rows`, :mod:`._partitions`; never the
journal (it hears of the link through callbacks).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import pickle
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

import orjson

from ..errors import TransientError
from . import _writer
from ._partitions import FRAGMENT_SHIFT
from ._record import GONE, LOCKED, _Record
from ._rows import message_row

__all__ = ["WRITER_FLAGS", "Write", "WriteFailed", "WriterLink", "YoungLocks", "build_groups",
           "consume", "frame_of", "start_writer"]

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

    def back_into(self, dirty: dict[tuple[str, str], dict[int, Any]],
                  locks: dict[tuple[str, str], dict[int, Any]],
                  deleted: dict[tuple[str, str], int]) -> None:
        """Put this group's rows and locks back among the pending ones (``dirty``,
        ``locks``: what is pending of a row wins), but for the entities deleted since
        it was made (``deleted``: the number of the change that deleted each), whose
        rows would be written after their delete and stay."""
        for key, rows in self.dirty.items():
            if deleted.get(key, 0) > self.upto:
                continue
            now = dirty.setdefault(key, {})
            for seq, item in rows.items():
                now.setdefault(seq, item)
        for key, recs in self.locks.items():
            if deleted.get(key, 0) > self.upto:
                continue
            written = dirty.get(key) or {}
            now_locks = locks.setdefault(key, {})
            for seq, rec in recs.items():
                if seq not in written:
                    now_locks.setdefault(seq, rec)


Answered = Callable[["WriterLink", Write, "str | None"], None]
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
        #: The process ended and its pipes closed: nothing sent now would be answered.
        self.closed = False
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

    def connection_lost(self, exc: Exception | None) -> None:
        """The process ended and its pipes closed: every answer it gave is in."""
        transport = self._transport
        self.closed = True
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


def build_groups(dirty: dict[tuple[str, str], dict[int, Any]],
                 locks: dict[tuple[str, str], dict[int, _Record]], prefix_ok: bool,
                 high_id: int) -> tuple[list[_writer.Group], list[tuple[str, str, int, int]], int]:
    """What a group writes: for each entity (namespace, key), the rows of ``dirty`` (a
    record and its store, or None when the row goes) to put or delete and the locks of
    ``locks`` to set; the highest sequence number of each fragment ``dirty`` touched;
    and the highest broker-assigned id number kept (at least ``high_id``; counted where
    ``prefix_ok``: the ids are spelled with the database's prefix)."""
    shift = FRAGMENT_SHIFT
    groups: list[_writer.Group] = []
    highs: list[tuple[str, str, int, int]] = []
    for key in dirty.keys() | locks.keys():
        ns, entity = key
        deletes: list[int] = []
        puts: list[tuple[int, bytes, bytes]] = []
        rows = dirty.get(key)
        if rows:
            for seq, item in rows.items():
                if item is None or item[1].state == GONE:
                    deletes.append(seq)
                    continue
                where, rec = item
                mid = rec._mid
                if prefix_ok and isinstance(mid, int) and mid > high_id:
                    high_id = mid
                puts.append((seq, rec.body, message_row(rec, prefix_ok, where)))
            # every number used counts, kept or not
            highs += [(ns, entity, frag, high) for frag, high in _highs(rows, shift)]
        held = [(_lock_of(rec), seq) for seq, rec in (locks.get(key) or {}).items()
                if rec.state == LOCKED]
        if deletes or puts or held:
            groups.append((ns, entity, deletes, puts, held))
    return groups, highs, high_id


def _lock_of(rec: _Record) -> bytes:
    """What the lock column keeps of a locked record: its state, delivery count, lock
    token and lock's end (JSON: ints, a token of hex digits and dashes, a finite float,
    which orjson writes as :func:`~aiosb.wire.json_values.dumps` does, faster)."""
    return orjson.dumps([rec.state, rec.delivery_count, rec.lock_token, rec.locked_until])


def _highs(rows: dict[int, Any], shift: int) -> Iterator[tuple[int, int]]:
    """(fragment, the highest sequence number of it) of the sequence numbers ``rows``
    holds (``shift``: :data:`._partitions.FRAGMENT_SHIFT`); mostly one fragment."""
    low, high = min(rows), max(rows)
    if low >> shift == high >> shift:
        yield high >> shift, high
        return
    highs: dict[int, int] = {}
    for seq in rows:
        fragment = seq >> shift
        if seq > highs.get(fragment, 0):
            highs[fragment] = seq
    yield from highs.items()


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


class _Plain(pickle.Pickler):
    """Pickles a value of a subclass of str, bytes, int or float (a name given as a
    ``StrEnum``, say) as the plain value: the writer imports no class of the caller's."""

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is bool:
            return NotImplemented
        if isinstance(obj, str) and kind is not str:
            return str, (str.__str__(obj),)
        if isinstance(obj, bytes) and kind is not bytes:
            return bytes, (bytes(obj),)
        if isinstance(obj, int) and kind is not int:
            return int, (int(obj),)
        if isinstance(obj, float) and kind is not float:
            return float, (float(obj),)
        return NotImplemented


def frame_of(ops: Any, groups: Any, highs: Any) -> bytes:
    """A group's frame for the writer (:mod:`._writer`), without its head."""
    out = io.BytesIO()
    _Plain(out, pickle.HIGHEST_PROTOCOL).dump((ops, groups, highs))
    return out.getvalue()


def consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a write's exception (logged already; retried in the background)."""
    if not task.cancelled():
        task.exception()
