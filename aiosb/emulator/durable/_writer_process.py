"""The durable journal's writer: a process of its own that writes group commits (#39).

:class:`~._journal.Journal` prepares each group commit on the serving loop (the rows of
the messages that changed, the locks taken, the runs of sequence numbers gone) and
hands it to this process, which writes it in one SQLite transaction and answers. A
process, not a thread: SQLite's steps run on the other core without taking the serving
thread's GIL (a thread took it back at every statement, and waited up to the switch
interval for it each time), and the next group is queued in the pipe before the last
is written, so the writer never waits to be woken (measured on S-4 streaming: a
group's wait went from about 2.6 ms to under 1 ms, the serving thread's CPU per batch
from about 3.7 ms to about 2).

Run as ``python -I -S _writer_process.py DATABASE [--fsync] [--row-locks]`` (the database
exists: the journal made its tables). It reads frames on its standard input, each a
little-endian 8-byte length, a byte of flags and that many bytes: a pickle of
``(ops, groups, highs)`` (:meth:`Writer.write`), read by an unpickler that admits no global
but the four :data:`ALLOWED` (a frame naming any other, ``os.system`` say, is refused
before anything in it runs: #48). It answers each frame, in order, on its
standard output: :data:`OK`, or :data:`FAILED`, a 4-byte length and a UTF-8 message
(the transaction rolled back). After a failure it refuses every later frame until one
comes flagged :data:`RESUME`: the journal sends that once it has taken the refused
groups back, so that no group is written after a later one. At the end of its input
(the journal closed it, or its process died) it exits; a frame cut short is not written.

It opens the database as every user of it does (:func:`._database.connect`, use
``"writer"``), and numbers entities with the one cache of them
(:class:`._database.EntityIds`).

Imports: the standard library, and :mod:`._database` (standard library only too),
from this file's own directory when it runs as a script: it starts in a fresh
interpreter, quickly, and imports nothing else of aiosb.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import sqlite3
import struct
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

if __package__:  # imported as part of aiosb: by the journal's pipe (the frames), tests
    from ._database import EntityIds, connect
else:  # run by path, in a fresh interpreter: -I leaves its directory off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _database import EntityIds, connect  # type: ignore[import-not-found,no-redef]

__all__ = ["ALLOWED", "FAILED", "HEAD", "OK", "RESUME", "Writer", "main"]

#: A frame's head: its length and its flags.
HEAD = struct.Struct("<QB")
#: The flag of the first frame after a failure: write it (and what follows) again.
RESUME = 1
#: The answers: written; not written (then a 4-byte length and the message).
OK, FAILED = b"\x00", b"\x01"

#: The only globals a frame may name: how the journal pickles a value of a subclass of
#: str, bytes, int or float (:class:`._group_commit._Plain`). An allow-list as the unpickler
#: of legacy rows has (:class:`._rows._LegacyUnpickler`), for what frames hold: this
#: process imports the standard library only, not :mod:`._rows`.
ALLOWED = frozenset({("builtins", "str"), ("builtins", "bytes"), ("builtins", "int"),
                     ("builtins", "float")})

#: The most rows one statement puts or locks: a batch takes a few statements, one for
#: 64, 32, 16 ... rows, not one a row.
_MOST = 64
_SIZES = [1 << n for n in range(_MOST.bit_length())]
#: Message rows put, by how many.
_PUTS = {size: "INSERT OR REPLACE INTO msgs (eid, seq, body, head, lock) VALUES "
         + ", ".join(["(?, ?, ?, ?, NULL)"] * size) for size in _SIZES}
#: Locks taken since their rows were written, by how many: (sequence number, lock) each.
_LOCKS = {size: "UPDATE msgs SET lock = v.column2 FROM (VALUES "
          + ", ".join(["(?, ?)"] * size) + ") AS v WHERE msgs.eid = ? AND msgs.seq = v.column1"
          for size in _SIZES}
#: A lock a statement, where SQLite is older than 3.33 (no UPDATE ... FROM).
_LOCK_ROW = "UPDATE msgs SET lock = ? WHERE eid = ? AND seq = ?"
#: The rows of a run of sequence numbers (every one of them to go) deleted.
_DELETE_RUN = "DELETE FROM msgs WHERE eid = ? AND seq BETWEEN ? AND ?"
#: The highest sequence number used in a fragment of an entity.
_HIGH = ("INSERT INTO sequences VALUES (?, ?, ?, ?) ON CONFLICT (ns, entity, fragment) "
         "DO UPDATE SET high = max(high, excluded.high)")

#: What a group writes of one entity: namespace, entity key, the sequence numbers of the
#: rows to go, the rows to put (sequence number, body, head), the locks to set (lock,
#: sequence number).
Group = tuple[str, str, list[int], list[tuple[int, bytes, bytes]], list[tuple[bytes, int]]]


class Writer:
    """Writes group commits to ``db`` (``row_locks``: a lock a statement, for SQLite
    before 3.33)."""

    def __init__(self, db: sqlite3.Connection, row_locks: bool = False) -> None:
        self.db = db
        self.row_locks = row_locks or sqlite3.sqlite_version_info < (3, 33)
        #: The entities' ids in message rows (made on first use).
        self.eid = EntityIds(db)

    def write(self, ops: list[tuple[str, tuple[Any, ...]]], groups: list[Group],
              highs: list[tuple[str, str, int, int]]) -> None:
        """One group commit, in one transaction: ``ops`` (statements and their
        arguments: namespaces, entities, sessions ...), then each entity's rows, then
        the highest sequence numbers used."""
        db = self.db
        mark = self.eid.mark()
        db.execute("BEGIN")
        try:
            for sql, args in ops:
                db.execute(sql, args)
            for ns, key, deletes, puts, held in groups:
                eid = self.eid(ns, key)
                if deletes:  # a settled batch is mostly one run: one statement
                    db.executemany(_DELETE_RUN, [(eid, lo, hi) for lo, hi in _runs(deletes)])
                # blobs bound as bytearrays: the sqlite3 module binds those at once, and
                # looks bytes up in its adapters first (a quarter of the time of a put)
                for at, size in _chunks(len(puts)):
                    db.execute(_PUTS[size], [
                        value for seq, body, head in puts[at:at + size]
                        for value in (eid, seq, bytearray(body), bytearray(head))])
                if self.row_locks:
                    db.executemany(_LOCK_ROW, [(bytearray(lock), eid, seq)
                                               for lock, seq in held])
                    continue
                for at, size in _chunks(len(held)):
                    db.execute(_LOCKS[size], [
                        *(value for lock, seq in held[at:at + size]
                          for value in (seq, bytearray(lock))),
                        eid])
            db.executemany(_HIGH, highs)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            self.eid.forget_since(mark)  # the ids made in it are gone with it
            raise


def _chunks(count: int) -> Iterator[tuple[int, int]]:
    """(start, size) of the statements that write ``count`` rows (:data:`_MOST`)."""
    at = 0
    while count:
        size = min(_MOST, 1 << (count.bit_length() - 1))
        yield at, size
        at, count = at + size, count - size


def _runs(seqs: list[int]) -> Iterator[tuple[int, int]]:
    """The runs of consecutive numbers in ``seqs``: (first, last) of each."""
    seqs.sort()
    first = last = seqs[0]
    for seq in seqs[1:]:
        if seq != last + 1:
            yield first, last
            first = seq
        last = seq
    yield first, last


class _Frames(pickle.Unpickler):
    """Reads a frame: plain values, and no global but :data:`ALLOWED`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(
                f"the frame names {module}.{name}, which no group holds: refused")
        return super().find_class(module, name)


def _load(body: bytes) -> Any:
    return _Frames(io.BytesIO(body)).load()


def serve(writer: Writer, frames: BinaryIO, answers: BinaryIO) -> None:
    """Write the groups of ``frames`` and answer each on ``answers``, until the end of
    ``frames``."""
    failed = False
    while True:
        head = frames.read(HEAD.size)
        if len(head) < HEAD.size:
            return
        size, flags = HEAD.unpack(head)
        body = frames.read(size)
        if len(body) < size:  # cut short: the journal's process died mid-frame
            return
        if failed and not flags & RESUME:
            answer = _failed("refused: an earlier group was not written")
        else:
            try:
                writer.write(*_load(body))
                answer, failed = OK, False
            except Exception as exc:  # sqlite3.Error, OSError (disk full ...), a bad frame
                answer, failed = _failed(f"{type(exc).__name__}: {exc}"), True
        answers.write(answer)
        answers.flush()


def _failed(message: str) -> bytes:
    data = message.encode()
    return FAILED + struct.pack("<I", len(data)) + data


def main(argv: list[str] | None = None) -> int:
    # The terminal's ^C reaches every process of the group: the journal writes what is
    # pending as its server stops, then closes this process's input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a service manager's, to the group
    args = sys.argv[1:] if argv is None else argv
    db = connect(args[0], "writer", "--fsync" in args)
    try:
        serve(Writer(db, "--row-locks" in args), sys.stdin.buffer, sys.stdout.buffer)
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
