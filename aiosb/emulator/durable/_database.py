"""How durable mode opens its SQLite database, and numbers its entities in message rows.

:func:`connect` is the one way aiosb opens the journal's database (#49), for each of its
uses: the journal's own connection (it makes the tables, moves an older database's rows
and reads: :mod:`._journal`, :mod:`._schema`), the writer process's
(:mod:`._writer_process`), and the loader's at a restart (:mod:`._recovery`). Each
connection's pragmas are :data:`PRAGMAS` of its use, after ``busy_timeout``, which every
connection has: another of the three holding the database (a checkpoint, a migration's
transaction, the writer's commit) makes a statement wait for it, not fail.

:class:`EntityIds` is the one cache of table ``entity_ids``: the writer's, and a
migration's.

Imports: the standard library only. The writer process runs in a fresh interpreter and
imports this module from its own directory (:mod:`._writer_process`): it holds nothing
that needs aiosb.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Literal

__all__ = ["BUSY_TIMEOUT_MS", "PRAGMAS", "EntityIds", "Use", "connect"]

#: What a connection is for: ``"journal"``, the journal's own (tables, meta, moving an
#: older database's rows, reads); ``"writer"``, the writer process's (group commits);
#: ``"loader"``, the restart's (reads every message row once, read-only).
Use = Literal["journal", "writer", "loader"]

#: Milliseconds a statement waits for a lock another connection holds before it fails
#: (on every connection: the sqlite3 module's default is 5 s, which only the writer
#: raised): far above a group commit's milliseconds, and within a client's 60 s
#: ``operation_timeout``.
BUSY_TIMEOUT_MS = 30_000

#: The pragmas of a connection that writes: WAL (a reader never waits for the writer);
#: the WAL file cut back to 4 MiB after a checkpoint, so that a burst does not leave a
#: file as big as the burst (#39: bytes on disk); a checkpoint every 40 MB of WAL, not
#: 4: a message's row is written, locked and deleted within seconds, so the same pages
#: come back to the WAL again and again, and a checkpoint copies each page once, however
#: often it was written since. ``synchronous`` is added by :func:`connect`: NORMAL, or
#: FULL with ``fsync``.
_WRITES = ("journal_mode=WAL", "journal_size_limit=4194304", "wal_autocheckpoint=10000")

#: Each use's pragmas (after ``busy_timeout``). The loader only reads (``query_only``),
#: each row once: a small page cache (256 KiB) rather than SQLite's 2 MiB.
PRAGMAS: dict[str, tuple[str, ...]] = {
    "journal": _WRITES,
    "writer": _WRITES,
    "loader": ("query_only=1", "cache_size=-256"),
}


def connect(path: str | os.PathLike[str], use: Use, fsync: bool = False
            ) -> sqlite3.Connection:
    """A connection to the journal's database at ``path`` for ``use``, in autocommit
    mode (a transaction is begun and ended by its statements), usable from any thread
    (each is used by one at a time: the journal's, the loader's, the writer's).

    Args:
        path: The database (``aiosb.sqlite3``).
        use: What the connection is for: its pragmas (:data:`PRAGMAS`).
        fsync: For a connection that writes: ``synchronous=FULL`` (a commit is flushed
            to the disk before it returns: it survives the machine crashing), else
            ``NORMAL`` (it survives the process being killed).
    """
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        for pragma in PRAGMAS[use]:
            db.execute(f"PRAGMA {pragma}")
        if use != "loader":
            db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
    except BaseException:
        db.close()
        raise
    return db


class EntityIds:
    """The number of each entity in message rows (table ``entity_ids``, by namespace
    and entity key), made on first use and kept. One writer of the table at a time: the
    writer process, or a migration before the writer writes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self._ids: dict[tuple[str, str], int] = {}

    def __call__(self, ns: str, key: str) -> int:
        """The id of entity ``key`` of namespace ``ns`` (made if it has none)."""
        eid = self._ids.get((ns, key))
        if eid is None:
            self.db.execute("INSERT OR IGNORE INTO entity_ids (ns, key) VALUES (?, ?)",
                            (ns, key))
            (eid,) = self.db.execute(
                "SELECT id FROM entity_ids WHERE ns = ? AND key = ?", (ns, key)).fetchone()
            self._ids[(ns, key)] = eid
        return eid

    def mark(self) -> int:
        """Where the ids made from now on begin (before a transaction)."""
        return len(self._ids)

    def forget_since(self, mark: int) -> None:
        """Forget the ids made since ``mark``: their transaction rolled back, and they
        went with it (a cached one would put an entity's rows under the next entity's
        id)."""
        for made in list(self._ids)[mark:]:
            del self._ids[made]
