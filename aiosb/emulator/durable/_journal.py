"""The journal: durable mode's SQLite record of namespaces, entities, messages, sessions.

The broker tells the journal what changed (:meth:`Journal.record` for a message,
:meth:`Journal.entity` and :meth:`Journal.entity_gone` for entities,
:meth:`Journal.session` for session state) synchronously and cheaply: a message is only
marked dirty, however often it changes before the next write. :meth:`Journal.commit`
returns once everything changed before the call is on disk. Commits are grouped: one
SQLite transaction carries the changes of every request that arrived meanwhile. The
loop prepares a group and hands it to the journal's writer, a process of its own
(:mod:`._writer_process`, through the pipe of :mod:`._writer_client`): SQLite's work
takes another core, not the serving thread's GIL, and a group waits in the pipe while
the one before it is written. What a group carries, how it is cut into frames, what
goes back to pending when a frame is not written and when a lock is written are the
journal's policy (:mod:`._group_commit`); the pipe only carries frames and answers.

SQLite runs in WAL mode. By default with ``synchronous=NORMAL``: a committed
transaction is in the WAL file (in the operating system's cache, not yet flushed to the
disk), so it survives the server's process being killed (SIGKILL, R-3) and the database
is never corrupted; a crash of the machine or a power loss may lose the last commits
before a checkpoint. ``Journal(directory, fsync=True)`` (``aiosb serve --fsync``) runs
with ``synchronous=FULL``: each commit is flushed to the disk before it is acknowledged,
so it survives the machine crashing too, at the cost of an fsync a commit. Every
connection to the database is opened by :func:`._database.connect`.

Messages live in a compact table (``msgs``, #39): keyed by an entity's number
(``entity_ids``) and the sequence number, without a rowid, each row its body and a
packed head (:func:`._rows.message_row`); a lock taken since the row was written goes to
the row's ``lock`` column. A broker-assigned MessageId is kept as its number, with the
prefix its process spelled it with in ``meta``; a fresh process takes that prefix on
(:func:`.._record.adopt_auto_ids`), so that such ids stay numbers in memory after a
restart. A database of an older aiosb (table ``messages``) is moved to the compact table
on the journal's thread, in the background of the restart (operations wait for it) or
before the first write (:func:`._schema.migrate`).

At start-up :meth:`Journal.load` rebuilds every namespace as it was
(:class:`~._recovery.Recovery`): entities, rules, sessions and sequence numbers before
the server listens, the messages in the background, an operation waiting for what it
touches. Messages keep their sequence numbers, states, delivery counts and lock tokens
(a lock once held :data:`LOCK_WRITE_AFTER`, or at a clean stop: no request waits for a
lock); a lock that ended while the server was down ends at once (the message comes
back); sequence numbers go on. Session locks, duplicate-detection history and faults are
not kept: they belong to the connections and the test that made them. One journal at a
time has a directory open (:mod:`._directory`).

Imports: :mod:`.._record`, :mod:`.._store`, :mod:`.._entity`, :mod:`.._namespace`,
:mod:`._rows`, :mod:`._recovery`, :mod:`._schema`, :mod:`._database`, :mod:`._directory`,
:mod:`._group_commit`, :mod:`._writer_client`; never the broker (it sees a namespace
through :class:`~.._namespace.Namespace`, and makes one through what
:func:`open_namespaces_with` plugged in).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument, TransientError
from .._entity import _Entity, _Session
from .._namespace import Namespace
from .._record import GONE, _Record, adopt_auto_ids, auto_id_prefix
from .._store import _Store
from ._database import connect
from ._directory import hold, release
from ._group_commit import Batch, Write, YoungLocks
from ._recovery import Recovery
from ._rows import ROW_FORMAT, encode_props, encode_rules
from ._schema import ADDED_COLUMNS as _ADDED_COLUMNS
from ._schema import SCHEMA as _SCHEMA
from ._schema import migrate
from ._writer_client import WriterLink, start_writer

__all__ = ["LOCK_WRITE_AFTER", "Journal", "WriteFailed", "open_namespaces_with"]

log = logging.getLogger("aiosb.emulator")

#: How :meth:`Journal.load` finds the namespace of a name, or makes it with the tier it
#: was kept with (:func:`open_namespaces_with`).
open_namespace: Callable[[str, str], Namespace] | None = None


def open_namespaces_with(opener: Callable[[str, str], Namespace]) -> None:
    """Let :meth:`Journal.load` find or make a namespace with ``opener(name, tier)``.
    :mod:`aiosb.emulator` plugs its registry in when it is imported (which it always is
    before a journal is used): the journal sits below the broker and the registry, and
    may not import them."""
    global open_namespace
    open_namespace = opener

#: Group commits in flight at most: one being written, the next waiting in the pipe.
_DEPTH = 2
#: A lock is written once it has been held this long (#39): most end sooner (their
#: message settled), and a lock that ends before it is written costs no write. After a
#: kill, a lock taken less than this long before it is forgotten: its message is
#: available at once, with the delivery count it had before (a graceful stop writes
#: every lock).
LOCK_WRITE_AFTER = 1.0


class WriteFailed(TransientError):
    """A group write failed; ``upto`` is the change count it would have made durable;
    ``lost``: the writer was lost (it ended, or missed its deadline), not the write
    refused."""

    def __init__(self, upto: int, message: str, lost: bool = False) -> None:
        super().__init__(message)
        self.upto = upto
        self.lost = lost


class Journal:
    """The durable store of one ``aiosb serve --data-dir DIR``.

    Args:
        directory: Where the database lives (``aiosb.sqlite3``); created if missing.
        fsync: Flush each commit to the disk (``synchronous=FULL``): what is
            acknowledged survives the machine crashing. By default (``NORMAL``) it
            survives the process being killed, not an OS crash or power loss.
    """

    def __init__(self, directory: str | Path, fsync: bool = False) -> None:
        # absolute: a writer started after the process changed its directory finds it
        self.path = Path(directory).absolute() / "aiosb.sqlite3"
        self.fsync = fsync
        # The rows to write, by entity (namespace, key), then sequence number: a record
        # (and where it is), or None for a row to go. By entity: a group looks an
        # entity's id up once, and deletes in runs of sequence numbers (#39).
        self._dirty: dict[tuple[str, str], dict[int, tuple[str | None, _Record] | None]] = {}
        self._ops: list[tuple[str, tuple[Any, ...]]] = []
        # Rows only locked (or renewed) since written, by entity, then sequence number:
        # the lock goes to the row's lock column, not the row again (#39).
        self._locks: dict[tuple[str, str], dict[int, _Record]] = {}
        #: Locks not yet due to be written (:data:`LOCK_WRITE_AFTER`).
        self._young = YoungLocks()
        self._young_kick: asyncio.TimerHandle | None = None
        #: Entities deleted, by (namespace, key): the number of the change that deleted
        #: each, until it is written (a group taken back drops its rows of an entity
        #: deleted since it was made: they would be written after the delete).
        self._deleted: dict[tuple[str, str], int] = {}
        self._changes = self._durable = 0
        self._sent = 0  # the changes handed to the writer (in flight or written)
        #: The group commit being cut into frames (:mod:`._group_commit`), if one is.
        self._batch: Batch | None = None
        #: The writer's end of the pipe (None: not started, or it ended).
        self._link: WriterLink[Write] | None = None
        self._spawning: asyncio.Future[WriterLink[Write]] | None = None
        #: The next group is the first after a failure: the writer writes again.
        self._resume = False
        self._closing = False
        self._kick: asyncio.Handle | None = None
        self._retry = 0.0
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "aiosb-journal")
        self._db: sqlite3.Connection | None = None
        self._held: int | None = None  # the directory's lock (:mod:`._directory`)
        self.writes = 0
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
        try:  # on the journal's thread: a cancelled open's _close_db comes after it
            await self._run(self._open)
            await self._writer()
        except BaseException:
            await self._run(self._close_db)
            raise

    def _close_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        release(self._held)
        self._held = None

    def _open(self) -> None:
        self._held = hold(self.path.parent)  # one journal to a directory (it may wait)
        db = connect(self.path, "journal", self.fsync)
        db.executescript(_SCHEMA)
        for table, column, kind in _ADDED_COLUMNS:
            have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        self._db = db
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
        migrate(self._db)
        self.migrating = False
        return True

    async def aclose(self) -> None:
        """Write what is pending, then close (idempotent)."""
        if self._db is None:
            return
        if self._kick is not None:
            self._kick.cancel()
            self._kick = None
        try:
            if self.recovery is not None:
                await self.recovery.aclose()
            self._young_due(every=True)
            await self.commit()
        finally:
            self._closing = True  # nothing starts another writer, nor sends, from now
            for kick in (self._kick, self._young_kick):
                if kick is not None:
                    kick.cancel()
            self._kick = self._young_kick = None
            link, self._link = self._link, None
            if link is not None:
                await link.aclose()
            await self._run(self._close_db)
            self._executor.shutdown(wait=True)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- what the broker reports (synchronous, cheap) -----------------------------------

    def _changed(self) -> None:
        self._changes += 1
        if self._kick is None and not self._in_flight():
            # Changes no request waits for (expiries, lock ends) reach the disk soon too.
            loop = asyncio.get_running_loop()
            self._kick = loop.call_later(0.05, self._background)

    def namespace(self, ns: Namespace) -> None:
        self._ops.append(("INSERT OR IGNORE INTO namespaces VALUES (?, ?)", (ns.name, ns.tier)))
        self._changed()

    def record(self, store: _Store, rec: _Record) -> None:
        """A message was added, changed or removed in ``store``."""
        self.records(store, (rec,))

    def records(self, store: _Store, recs: Iterable[_Record]) -> None:
        """Messages were added, changed or removed in ``store`` (a batch: one call)."""
        entity = store.entity
        if entity.deleted:  # its rows went with it
            return
        key = (entity.ns.name, entity.key)
        dirty = self._dirty.get(key)
        if dirty is None:
            dirty = self._dirty[key] = {}
        locks = self._locks.get(key)
        where: str | None = None
        if store.session is not None:
            where = "s:" + store.session.id
        elif store.is_dlq:
            where = "d"
        gone_id = self._gone_id
        young_at = self._young.at
        for rec in recs:
            seq = rec.seq
            if locks:
                locks.pop(seq, None)  # the row is written whole, or goes
            if young_at:
                young_at.pop((key, seq), None)
            if rec.state == GONE:
                dirty[seq] = None
                mid = rec._mid
                if isinstance(mid, int) and mid > gone_id:
                    gone_id = mid
            else:
                dirty[seq] = (where, rec)
        self._gone_id = gone_id
        self._changed()

    def locked(self, store: _Store, recs: list[_Record]) -> None:
        """``recs`` were locked in ``store`` (or their locks renewed): what changed is
        their lock (state, delivery count, token, end), kept in the row's lock column
        once it has been held :data:`LOCK_WRITE_AFTER` (no request waits for it)."""
        entity = store.entity
        if entity.deleted:
            return
        key = (entity.ns.name, entity.key)
        dirty = self._dirty.get(key) or {}
        locks = self._locks.get(key) or {}
        young, loop = self._young, asyncio.get_running_loop()
        now = loop.time()
        for rec in recs:
            seq = rec.seq
            # a row to be written whole holds the lock too; a lock pending is read
            # from the record when it is written
            if seq not in dirty and seq not in locks:
                young.add(key, seq, rec, now)
        if young.queue and self._young_kick is None:
            self._young_kick = loop.call_at(now + LOCK_WRITE_AFTER, self._young_due)

    def _young_due(self, every: bool = False) -> None:
        """Pass the locks held :data:`LOCK_WRITE_AFTER` (``every``: all of them) to
        the next group, and wake again when the next comes due."""
        if self._young_kick is not None:
            self._young_kick.cancel()
            self._young_kick = None
        young, loop = self._young, asyncio.get_running_loop()
        moved = False
        for key, seq, rec in young.due(
                float("inf") if every else loop.time() - LOCK_WRITE_AFTER):
            self._locks.setdefault(key, {})[seq] = rec
            moved = True
        if young.queue and not self._closing:  # a timer may fire a clock tick early
            self._young_kick = loop.call_at(
                max(young.queue[0][0] + LOCK_WRITE_AFTER, loop.time() + 0.01), self._young_due)
        if moved:
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
        self._ops.append(("INSERT OR REPLACE INTO entities VALUES (?, ?, ?, ?, ?, ?, ?)", (
            entity.ns.name, entity.key, entity.kind, entity.path, entity.nfrag,
            entity.created, encode_props(entity.props))))
        if entity.rules is not None:  # a subscription: its rules, all of them
            self._ops.append(("INSERT OR REPLACE INTO rules VALUES (?, ?, ?)", (
                entity.ns.name, entity.key, encode_rules(entity.rules.listing()))))
        self._changed()

    def entity_gone(self, entity: _Entity) -> None:
        """An entity was deleted (with its messages and sessions)."""
        key = (entity.ns.name, entity.key)
        for table in ("entities", "sequences", "sessions", "rules"):
            column = "key" if table == "entities" else "entity"
            self._ops.append((f"DELETE FROM {table} WHERE ns = ? AND {column} = ?", key))
        self._ops.append(("DELETE FROM msgs WHERE eid = (SELECT id FROM entity_ids "
                          "WHERE ns = ? AND key = ?)", key))
        self._dirty.pop(key, None)
        self._locks.pop(key, None)
        self._young.drop_entity(key)
        self._deleted[key] = self._changes + 1  # this change's number
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

        A writer lost meanwhile (it ended, or missed its deadline:
        :data:`._writer_client.WRITE_DEADLINE`) is replaced and what it had not written is
        written again; a commit waits through one such loss, not two.

        Raises:
            TransientError: The write that carried these changes failed, or a second
                writer was lost (the changes stay pending and are written by the next
                attempt).
        """
        target = self._changes
        lost = False
        while self._durable < target:
            write = self._oldest()
            if self._sent < target and (write is None or self._in_flight() < _DEPTH):
                if self._closing:
                    raise WriteFailed(target, f"the journal of {self.path} is closed")
                try:
                    if self.migrating:  # an older database's rows first: a group may
                        await self.migrate()  # replace them
                        continue
                    link = self._link
                    if link is None or link.closed:
                        link = await self._writer()
                except (WriteFailed, InvalidArgument, sqlite3.Error, OSError) as exc:
                    self._failed_later(str(exc))  # no group went: try again after a pause
                    raise WriteFailed(target, f"the emulator could not write its data to "
                                      f"{self.path}: {exc}") from exc
                write = self._send(link)
            elif write is None:  # taken back meanwhile: ours are pending again
                self._sent = self._durable
                continue
            try:
                await asyncio.shield(write.answer)
            except WriteFailed as exc:
                if exc.lost and not lost:  # the writer was lost, not a write refused:
                    lost = True  # once more, with the writer that replaces it
                    continue
                if exc.lost or exc.upto >= target:  # lost again; or our changes were
                    raise  # in the write that failed
                # an earlier group failed; ours is still pending: write it now

    def _in_flight(self) -> int:
        return len(self._waiting())

    def _oldest(self) -> Write | None:
        return next(iter(self._waiting()), None)

    def _waiting(self) -> list[Write]:  # the groups in flight, oldest first
        return [] if self._link is None else [w for w in self._link.writes
                                              if not w.answer.done()]

    def _background(self) -> None:
        self._kick = None
        if (self._durable < self._changes and not self._in_flight() and self._db is not None
                and not self._closing):
            asyncio.ensure_future(self.commit()).add_done_callback(consume)

    async def _writer(self) -> WriterLink[Write]:
        """The writer's end of the pipe, starting the process if it is not running."""
        spawning = self._spawning
        if spawning is None:
            spawning = self._spawning = asyncio.ensure_future(self._spawn())
            spawning.add_done_callback(self._spawned)
        return await asyncio.shield(spawning)

    def _spawned(self, spawning: asyncio.Future[WriterLink[Write]]) -> None:
        self._spawning = None if self._spawning is spawning else self._spawning
        consume(spawning)

    async def _spawn(self) -> WriterLink[Write]:
        try:
            link = await start_writer(self.path, self.fsync, self._answered, self._ended,
                                      self._held)
        except OSError as exc:
            raise WriteFailed(self._changes, str(exc)) from exc
        if link.closed:  # it died at once
            raise WriteFailed(self._changes, f"the writer of {self.path} ended at its start")
        self._link = link
        return link

    def _ended(self, link: WriterLink[Write], why: str) -> None:
        """The writer is lost (its process ended, or it missed its deadline): nothing
        more will be answered."""
        if self._link is link:
            self._link = None
        writes = [w for w in link.writes if not w.answer.done()]
        if writes:
            self._take_back(why, writes, lost=True)

    def _send(self, link: WriterLink[Write]) -> Write:
        """Hand the writer the next frame of the group commit being sent; when none
        is, every change not yet handed over becomes one (:class:`~._group_commit.Batch`)."""
        batch = self._batch
        if batch is None:
            batch = self._batch = Batch(self._changes, self._dirty, self._locks, self._ops,
                                        self._gone_id)
            self._dirty, self._ops, self._locks, self._gone_id = {}, [], {}, 0
        try:
            write, frame = batch.cut(self._dirty, self._locks,
                                     self.prefix == auto_id_prefix(), link.loop.create_future())
        except BaseException:  # what could not be sent stays pending
            self._unbatch()
            raise
        if write.whole:
            self._batch = None
            self._sent = batch.upto
        resume, self._resume = self._resume, False
        link.send(write, frame, resume)
        return write

    def _unbatch(self) -> None:
        """What is left of the group commit being sent goes back to pending (before
        its frames taken back, which are older)."""
        batch, self._batch = self._batch, None
        if batch is not None:
            self._gone_id = max(self._gone_id, batch.gone_id)
            self._ops[:0] = batch.ops
            batch.back_into(self._dirty, self._locks, self._deleted)

    def _answered(self, link: WriterLink[Write], write: Write, failure: str | None) -> None:
        """The writer's answer to ``write`` (in the order sent): written, or why not."""
        if write.answer.done():  # taken back already, with an earlier one that failed
            return
        if failure is not None:
            self._take_back(failure, [write, *(w for w in link.writes if not w.answer.done())])
            return
        if write.whole:  # the last frame of its group commit: it is all written
            self._durable = max(self._durable, write.upto)
        durable = self._durable
        self._retry = 0.0
        self.writes += 1
        if self._deleted:  # written: no group made before them is in flight
            self._deleted = {k: n for k, n in self._deleted.items() if n > durable}
        write.answer.set_result(None)
        if self._durable < self._changes and self._kick is None and self._db is not None:
            # changes no request waits for (expiries, lock ends) go soon too
            self._kick = write.answer.get_loop().call_later(0.05, self._background)

    def _take_back(self, failure: str, writes: list[Write], lost: bool = False) -> None:
        """The oldest frame in flight was not written: it and every later one
        (``writes``, oldest first: the writer refuses them), and what is left of the
        group commit being sent, go back to pending, later changes of the same rows
        winning, to be written again after a pause (at once by a commit waiting, when
        the writer was ``lost``: a new one is started)."""
        self._unbatch()
        for write in reversed(writes):  # newest first: what is pending now wins, then...
            self._gone_id = max(self._gone_id, write.high_id)
            self._ops[:0] = write.ops
            write.back_into(self._dirty, self._locks, self._deleted)
        self._sent = self._durable
        self._resume = True
        message = f"the emulator could not write its data to {self.path}: {failure}"
        for write in writes:
            # the requests whose changes were in the group that failed hear of it; those
            # of the later groups (refused, never tried) wait for them to be written again
            write.answer.set_exception(WriteFailed(writes[0].upto, message, lost))
            write.answer.add_done_callback(consume)
        self._failed_later(failure)

    def _failed_later(self, failure: str) -> None:
        """A write failed: say so, and try again after a pause (doubled each time)."""
        self._retry = min(5.0, self._retry * 2 or 0.05)
        log.error("could not write to %s (retrying in %.2f s): %s", self.path, self._retry,
                  failure)
        if self._db is not None and not self._closing:
            if self._kick is not None:
                self._kick.cancel()
            self._kick = asyncio.get_running_loop().call_later(self._retry, self._background)

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
        """``fn(connection)`` on the journal's thread and connection (it sees what the
        writer's process has committed)."""
        db = self._db
        assert db is not None
        return await self._run(fn, db)


def consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a write's exception (logged already; retried in the background)."""
    if not task.cancelled():
        task.exception()
