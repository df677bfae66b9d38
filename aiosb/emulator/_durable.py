"""Durable emulator state: a SQLite journal of namespaces, entities, messages, sessions.

The broker tells the journal what changed (:meth:`Journal.record` for a message,
:meth:`Journal.entity` and :meth:`Journal.entity_gone` for entities,
:meth:`Journal.session` for session state) synchronously and cheaply: a message is only
marked dirty, however often it changes before the next write. :meth:`Journal.commit`
returns once everything changed before the call is on disk. Commits are grouped: one
write, in one SQLite transaction on a thread of its own, carries the changes of every
request that arrived meanwhile, so concurrency does not cost a disk flush per message.

SQLite runs in WAL mode with ``synchronous=FULL``: a committed transaction survives a
SIGKILL of the server and a crash of the machine. Messages live in a compact table
(``msgs``, #39): keyed by an entity's number (``entity_ids``) and the sequence number,
without a rowid, each row its body and a packed head (:func:`._rows.message_row`); a
lock taken since the row was written goes to the row's ``lock`` column. A broker-assigned
MessageId is kept as its number, with the prefix its process spelled it with in
``meta``; a fresh process takes that prefix on (:func:`._record.adopt_auto_ids`), so
that such ids stay numbers in memory after a restart. A database of an older aiosb
(table ``messages``) is moved to the compact table on the journal's thread, in the
background of the restart (operations wait for it) or before the first write
(:func:`._migrate.migrate`).

At start-up :meth:`Journal.load` rebuilds every namespace as it was
(:class:`~._recovery.Recovery`): entities, rules, sessions and sequence numbers before
the server listens, the messages in the background, an operation waiting for what it
touches. Messages keep their sequence numbers, states, delivery counts and lock tokens;
a lock that ended while the server was down ends at once (the message comes back);
sequence numbers go on from where they were. Session locks, duplicate-detection history
and faults are not kept: they belong to the connections and the test that made them.

Imports: :mod:`._record`, :mod:`._partitions`, :mod:`._store`, :mod:`._entity`,
:mod:`._namespace`, :mod:`._rows`, :mod:`._recovery`, :mod:`._migrate`; never the broker
(it sees a namespace through :class:`~._namespace.Namespace`, and makes one through
:data:`open_namespace`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument, TransientError
from ..wire.json_values import dumps
from ._entity import _Entity, _Session
from ._migrate import migrate
from ._namespace import Namespace
from ._partitions import FRAGMENT_SHIFT
from ._record import GONE, LOCKED, _Record, adopt_auto_ids, auto_id_prefix
from ._recovery import Recovery
from ._rows import ROW_FORMAT, encode_props, encode_rules, message_row
from ._store import _Store

__all__ = ["Journal"]

log = logging.getLogger("aiosb.emulator")

#: How :meth:`Journal.load` finds the namespace of a name, or makes it with the tier it
#: was kept with. :mod:`aiosb.emulator` plugs its registry in when it is imported (which
#: it always is before this module is used): the journal sits below the broker and the
#: registry, and may not import them.
open_namespace: Callable[[str, str], Namespace] | None = None

_SCHEMA = """
CREATE TABLE IF NOT EXISTS namespaces (name TEXT PRIMARY KEY, tier TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entities (
    ns TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL,
    nfrag INTEGER NOT NULL, created REAL NOT NULL, props BLOB NOT NULL,
    PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS entity_ids (
    id INTEGER PRIMARY KEY, ns TEXT NOT NULL, key TEXT NOT NULL, UNIQUE (ns, key));
CREATE TABLE IF NOT EXISTS msgs (
    eid INTEGER NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, head BLOB NOT NULL,
    lock BLOB, PRIMARY KEY (eid, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sequences (
    ns TEXT NOT NULL, entity TEXT NOT NULL, fragment INTEGER NOT NULL, high INTEGER NOT NULL,
    PRIMARY KEY (ns, entity, fragment));
CREATE TABLE IF NOT EXISTS rules (
    ns TEXT NOT NULL, entity TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (ns, entity));
CREATE TABLE IF NOT EXISTS sessions (
    ns TEXT NOT NULL, entity TEXT NOT NULL, sid TEXT NOT NULL, state BLOB,
    state_set REAL NOT NULL DEFAULT 0, PRIMARY KEY (ns, entity, sid));
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value NOT NULL);
"""
#: Columns added to a table since its first release: a database written before one was
#: added gets it, with its default, when it is opened.
_ADDED_COLUMNS = [("sessions", "state_set", "REAL NOT NULL DEFAULT 0")]
#: A message row as :meth:`Journal._write` puts it.
_PUT = "INSERT OR REPLACE INTO msgs (eid, seq, body, head, lock) VALUES (?, ?, ?, ?, NULL)"


class Journal:
    """The durable store of one ``aiosb serve --data-dir DIR``.

    Args:
        directory: Where the database lives (``aiosb.sqlite3``); created if missing.
    """

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / "aiosb.sqlite3"
        # One entry per database row (namespace, entity, sequence number): what the row
        # holds now, a record (and where it is), or None when the row is to go.
        self._dirty: dict[tuple[str, str, int], tuple[str | None, _Record] | None] = {}
        self._ops: list[tuple[str, tuple[Any, ...]]] = []
        # Rows whose message was only locked (or its lock renewed) since it was written:
        # the lock goes to the row's lock column, the row is not written again (#39).
        self._locks: dict[tuple[str, str, int], _Record] = {}
        self._changes = 0
        self._durable = 0
        self._flushing: asyncio.Future[None] | None = None
        self._kick: asyncio.Handle | None = None
        self._retry = 0.0
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "aiosb-journal")
        self._db: sqlite3.Connection | None = None
        self.writes = 0
        #: Entity ids of the message rows, by (namespace, entity key): read and written
        #: on the journal's thread only.
        self._eids: dict[tuple[str, str], int] = {}
        #: What the broker-assigned MessageIds kept as numbers start with (``meta``).
        self.prefix = ""
        #: The highest broker-assigned id number of a message gone before its row was
        #: written (taken at once by a receive-and-delete receiver): it counts too (#39:
        #: the next process would hand it out again).
        self._gone_id = 0
        #: The messages still being loaded after a restart (:mod:`._recovery`).
        self.recovery: Recovery | None = None
        #: An older database, whose rows are still to move to the compact table.
        self.migrating = False

    def __repr__(self) -> str:
        return f"<Journal {self.path} pending={self._changes - self._durable}>"

    # -- lifetime ----------------------------------------------------------------------

    async def open(self) -> None:
        """Create or open the database."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        await self._run(self._open)

    def _open(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        # The WAL is emptied at each checkpoint; past that it is cut back to this size,
        # so a burst does not leave a file as big as the burst (#39: bytes on disk).
        db.execute("PRAGMA journal_size_limit=4194304")
        db.executescript(_SCHEMA)
        for table, column, kind in _ADDED_COLUMNS:
            have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        self._db = db
        self._eids = dict(((ns, key), eid) for eid, ns, key in
                          db.execute("SELECT id, ns, key FROM entity_ids"))
        meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
        if meta.setdefault("row_format", ROW_FORMAT) != ROW_FORMAT:
            db.close()
            raise InvalidArgument(
                f"{self.path} keeps its messages in rows of format {meta['row_format']!r}, "
                f"which this aiosb does not read (it reads {ROW_FORMAT!r}); use the aiosb "
                "that wrote it.")
        db.execute("INSERT OR IGNORE INTO meta VALUES ('row_format', ?)", (ROW_FORMAT,))
        # A database of an older aiosb: its rows move to msgs in the background (#39: a
        # million of them delayed listening by half a minute), or before the first write.
        self.migrating = bool(
            db.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages'").fetchone())
        if "auto_prefix" not in meta:
            meta["auto_prefix"] = auto_id_prefix()
            db.execute("INSERT INTO meta VALUES ('auto_prefix', ?)", (meta["auto_prefix"],))
        self.prefix = meta["auto_prefix"]
        # A fresh process spells its ids as the rows' numbers were spelled, so that they
        # stay numbers in memory (#39); numbered above every one kept.
        adopt_auto_ids(self.prefix, int(meta.get("auto_high", 0)))

    async def migrate(self) -> bool:
        """Move an older database's rows to the compact table, if it has any left (on
        the journal's thread: writes wait for it); whether it had."""
        return bool(await self._run(self._migrate))

    def _migrate(self) -> bool:
        if not self.migrating or self._db is None:
            return False
        migrate(self._db, self._eid)
        self.migrating = False
        return True

    def _eid(self, ns: str, key: str) -> int:
        """The id of entity ``key`` of namespace ``ns`` in message rows (made on first
        use; on the journal's thread)."""
        eid = self._eids.get((ns, key))
        if eid is None:
            db = self._db
            assert db is not None
            db.execute("INSERT OR IGNORE INTO entity_ids (ns, key) VALUES (?, ?)", (ns, key))
            (eid,) = db.execute(
                "SELECT id FROM entity_ids WHERE ns = ? AND key = ?", (ns, key)
            ).fetchone()
            self._eids[(ns, key)] = eid
        return eid

    async def aclose(self) -> None:
        """Write what is pending, then close (idempotent)."""
        if self._db is None:
            return
        if self._kick is not None:
            self._kick.cancel()
            self._kick = None
        if self.recovery is not None:
            await self.recovery.aclose()
        await self.commit()
        await self._run(self._db.close)
        self._db = None
        self._executor.shutdown(wait=True)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- what the broker reports (synchronous, cheap) -----------------------------------

    def _changed(self) -> None:
        self._changes += 1
        if self._kick is None and self._flushing is None:
            # Changes no request waits for (expiries, lock ends) reach the disk soon too.
            loop = asyncio.get_running_loop()
            self._kick = loop.call_later(0.05, self._background)

    def namespace(self, ns: Namespace) -> None:
        self._ops.append(("INSERT OR IGNORE INTO namespaces VALUES (?, ?)", (ns.name, ns.tier)))
        self._changed()

    def record(self, store: _Store, rec: _Record) -> None:
        """A message was added, changed or removed in ``store``."""
        entity = store.entity
        if entity.deleted:  # its rows went with it
            return
        row = (entity.ns.name, entity.key, rec.seq)
        self._locks.pop(row, None)  # the row is written whole, or goes
        if rec.state == GONE:
            self._dirty[row] = None
            mid = rec._mid
            if isinstance(mid, int) and mid > self._gone_id:
                self._gone_id = mid
        else:
            where: str | None = None
            if store.session is not None:
                where = "s:" + store.session.id
            elif store.is_dlq:
                where = "d"
            self._dirty[row] = (where, rec)
        self._changed()

    def locked(self, store: _Store, recs: list[_Record]) -> None:
        """``recs`` were locked in ``store`` (or their locks renewed): what changed is
        their lock (state, delivery count, token, end), kept in the row's lock column."""
        entity = store.entity
        if entity.deleted:
            return
        dirty, locks, ns, key = self._dirty, self._locks, entity.ns.name, entity.key
        for rec in recs:
            row = (ns, key, rec.seq)
            if row not in dirty:  # a row to be written whole will hold the lock too
                locks[row] = rec
        self._changed()

    def snapshot(self, ns: Namespace) -> None:
        """Journal everything ``ns`` holds now (it was made before durability began)."""
        self.namespace(ns)
        for entity in sorted(ns._entities.values(), key=lambda e: e.kind == "subscription"):
            self.entity(entity)
            for store in entity.stores():
                for rec in store.records.values():
                    self.record(store, rec)
            for session in entity.sessions.values():
                if session.state is not None:
                    self.session(session)

    def entity(self, entity: _Entity) -> None:
        """An entity was created or updated."""
        self._ops.append(
            (
                "INSERT OR REPLACE INTO entities VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    entity.ns.name,
                    entity.key,
                    entity.kind,
                    entity.path,
                    entity.nfrag,
                    entity.created,
                    encode_props(entity.props),
                ),
            )
        )
        if entity.rules is not None:  # a subscription: its rules, all of them
            self._ops.append(
                (
                    "INSERT OR REPLACE INTO rules VALUES (?, ?, ?)",
                    (entity.ns.name, entity.key, encode_rules(entity.rules.listing())),
                )
            )
        self._changed()

    def entity_gone(self, entity: _Entity) -> None:
        """An entity was deleted (with its messages and sessions)."""
        key = (entity.ns.name, entity.key)
        for table in ("entities", "sequences", "sessions", "rules"):
            column = "key" if table == "entities" else "entity"
            self._ops.append((f"DELETE FROM {table} WHERE ns = ? AND {column} = ?", key))
        self._ops.append(("DELETE FROM msgs WHERE eid = (SELECT id FROM entity_ids "
                          "WHERE ns = ? AND key = ?)", key))
        for row in [row for row in self._dirty if row[:2] == key]:
            del self._dirty[row]
        for row in [row for row in self._locks if row[:2] == key]:
            del self._locks[row]
        self._changed()

    def session(self, session: _Session) -> None:
        """A session's state changed."""
        entity = session.entity
        key = (entity.ns.name, entity.key, session.id)
        if session.state is None:
            self._ops.append(("DELETE FROM sessions WHERE ns = ? AND entity = ? AND sid = ?", key))
        else:
            self._ops.append(
                (
                    "INSERT OR REPLACE INTO sessions (ns, entity, sid, state, state_set) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (*key, session.state, session.state_set),
                )
            )
        self._changed()

    # -- writing -----------------------------------------------------------------------

    async def commit(self) -> None:
        """Return once every change reported before the call is on disk.

        Raises:
            TransientError: The write that carried these changes failed (they stay
                pending and are written by the next attempt).
        """
        target = self._changes
        while self._durable < target:
            flushing = self._flushing
            if flushing is None:
                flushing = self._start()
            try:
                await asyncio.shield(flushing)
            except _WriteFailed as exc:
                if exc.upto >= target:  # our changes were in the write that failed
                    raise
                # an earlier group failed; ours is still pending: write it now

    def _start(self) -> asyncio.Future[None]:
        task = self._flushing = asyncio.ensure_future(self._flush())
        task.add_done_callback(_consume)
        return task

    def _background(self) -> None:
        self._kick = None
        if self._flushing is None and self._durable < self._changes:
            self._start()

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        failed = False
        try:
            upto = self._changes
            dirty, self._dirty = self._dirty, {}
            ops, self._ops = self._ops, []
            locks, self._locks = self._locks, {}
            held = [
                (_lock_of(rec), *row) for row, rec in locks.items() if rec.state == LOCKED
            ]
            shift = FRAGMENT_SHIFT
            prefix_ok = self.prefix == auto_id_prefix()
            deletes, puts = [], []
            high_id, self._gone_id = self._gone_id, 0
            highs: dict[tuple[str, str, int], int] = {}
            for row, item in dirty.items():
                ns, entity, seq = row
                key = (ns, entity, seq >> shift)  # every number used counts, kept or not
                if seq > highs.get(key, 0):
                    highs[key] = seq
                if item is None or item[1].state == GONE:
                    deletes.append(row)
                    continue
                where, rec = item
                mid = rec._mid
                if prefix_ok and mid.__class__ is int and mid > high_id:
                    high_id = mid
                puts.append((ns, entity, seq, rec.body, message_row(rec, prefix_ok, where)))
            if high_id:
                ops.append(("INSERT INTO meta VALUES ('auto_high', ?) ON CONFLICT (name) "
                            "DO UPDATE SET value = max(value, excluded.value)", (high_id,)))
            try:
                await self._run(self._write, ops, deletes, puts, list(highs.items()), held)
            except (sqlite3.Error, OSError) as exc:
                failed = True
                # Nothing of this group is durable: keep it for the next attempt (later
                # changes of the same rows win).
                self._gone_id = max(self._gone_id, high_id)
                self._ops[:0] = ops
                for row, item in dirty.items():
                    self._dirty.setdefault(row, item)
                for row, rec in locks.items():
                    if row not in self._dirty:
                        self._locks.setdefault(row, rec)
                self._retry = min(5.0, self._retry * 2 or 0.05)
                log.error(
                    "could not write to %s (retrying in %.2f s): %s", self.path, self._retry, exc
                )
                raise _WriteFailed(
                    upto, f"the emulator could not write its data to {self.path}: {exc}"
                ) from exc
            self._durable = max(self._durable, upto)
            self._retry = 0.0
            self.writes += 1
        finally:
            self._flushing = None
            if self._durable < self._changes and self._kick is None and self._db is not None:
                if failed:
                    self._kick = loop.call_later(self._retry, self._background)
                else:
                    self._kick = loop.call_soon(self._background)

    def _write(
        self,
        ops: list[tuple[str, tuple[Any, ...]]],
        deletes: list[tuple[str, str, int]],
        puts: list[tuple[str, str, int, bytes, bytes]],
        highs: list[tuple[tuple[str, str, int], int]],
        held: list[tuple[bytes, str, str, int]],
    ) -> None:
        db = self._db
        assert db is not None
        try:
            self._migrate()  # the rows of an older database first: a write may replace them
        except InvalidArgument as exc:  # they cannot be: nothing is written (retried)
            raise sqlite3.DatabaseError(str(exc)) from exc
        eid = self._eid
        db.execute("BEGIN")
        try:
            for sql, args in ops:
                db.execute(sql, args)
            db.executemany("DELETE FROM msgs WHERE eid = ? AND seq = ?",
                           [(eid(ns, key), seq) for ns, key, seq in deletes])
            db.executemany(_PUT, [(eid(ns, key), seq, body, head)
                                  for ns, key, seq, body, head in puts])
            db.executemany("UPDATE msgs SET lock = ? WHERE eid = ? AND seq = ?",
                           [(lock, eid(ns, key), seq) for lock, ns, key, seq in held])
            db.executemany(
                "INSERT INTO sequences VALUES (?, ?, ?, ?) ON CONFLICT (ns, entity, fragment) "
                "DO UPDATE SET high = max(high, excluded.high)",
                [(*key, high) for key, high in highs],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- reading -----------------------------------------------------------------------

    async def load(self) -> list[Namespace]:
        """Rebuild every namespace kept in the database (call before serving): its
        entities, rules, sessions and sequence numbers now, its messages in the
        background (:class:`~._recovery.Recovery`: an operation on an entity waits until
        the messages of that entity, and of every entity it may pass messages to, are
        loaded)."""
        if open_namespace is None:  # pragma: no cover - aiosb.emulator sets it on import
            raise RuntimeError("import aiosb.emulator before loading a journal")
        self.recovery = recovery = Recovery(self, open_namespace)
        return await recovery.start()

    async def read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """``fn(connection)`` on the journal's thread (between its writes)."""
        db = self._db
        assert db is not None
        return await self._run(fn, db)

class _WriteFailed(TransientError):
    """A group write failed; ``upto`` is the change count it would have made durable."""

    def __init__(self, upto: int, message: str) -> None:
        super().__init__(message)
        self.upto = upto


def _consume(task: asyncio.Future[None]) -> None:
    """Retrieve a write's exception (logged already; retried in the background)."""
    if not task.cancelled():
        task.exception()


def _lock_of(rec: _Record) -> bytes:
    """What :meth:`Journal.locked` keeps of a locked record: its state, delivery count,
    lock token and lock's end."""
    return dumps([rec.state, rec.delivery_count, rec.lock_token, rec.locked_until])
