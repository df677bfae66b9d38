"""A durable server's restart (#39): what :meth:`~._journal.Journal.load` rebuilds at
once, what it loads in the background, and how an operation waits for what it needs.

:meth:`Recovery.start` reads the small tables (namespaces, entities, rules, sessions,
sequence numbers) and rebuilds them before the server listens; the messages follow, an
entity at a time, in sequence order, a chunk of rows per read (so a deep store neither
delays listening nor is held twice in memory while it loads), on a read-only connection
and a thread of their own (the journal's stays free for its migration and reads). Until an entity's
messages are all in, every operation on it waits (:meth:`Recovery.wait`, which the
namespace calls first): a send, receive, peek, count, settlement or session operation on
a half-loaded store would answer wrongly. (Reading, creating, deleting or listing
entities needs no message and does not wait; an update waits for every entity.) It
waits too for the entities that may pass messages to it (a topic, a queue forwarding to
it: a scheduled message that came due while the server was down activates as its source
loads), and for what those pass messages to. An entity that someone waits for is loaded
next. An entity is loaded after the
entities it passes messages to (a topic's subscriptions, ``forward_to``, forwarded dead
letters), so that nothing the broker does by itself (an activation, an expiry, a lock's
end) puts a message into an entity whose rows are still on their way. A read that fails
is tried again a few times; an entity whose rows cannot be read (a damaged row, a read
that keeps failing) is refused, with a sentence naming it, and the others load on.

Rows are loaded with the namespace's journal detached (they are on disk already); what
happens to them afterwards is journaled as usual. The rows of an older database (table
``messages``) move to the compact table first, after the server listens (every entity
waits for it: :mod:`._schema`). The loader reads on a connection of its own
(:func:`._database.connect`, use ``"loader"``).

The garbage collector is off while messages load (:class:`Collector`: it would walk
the growing heap again and again while it grows by a million records, a quarter of the
load's time), and what a large load holds is frozen afterwards (its first passes would
walk every record), given back when that server stops.

Imports: :mod:`.._record`, :mod:`.._partitions`, :mod:`.._entity`, :mod:`.._namespace`,
:mod:`._rows`, :mod:`.._store`, :mod:`._database` (never the journal or the broker).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import itertools
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

from ...errors import EntityUnavailable, InvalidArgument, ServiceBusError, TransientError
from ...wire.json_values import loads
from .._entity import _Entity
from .._namespace import Namespace
from .._partitions import FRAGMENT_SHIFT, fragment_of
from .._record import AVAILABLE, DEFERRED, LOCKED, SCHEDULED, _Record, auto_id_prefix
from .._store import _Store
from ._database import connect
from ._rows import (
    decode_props,
    decode_rules,
    record_of_row,
)

__all__ = ["Collector", "Recovery"]

log = logging.getLogger("aiosb.emulator")

#: Rows read at a time while an entity loads.
CHUNK = 2_000
#: How often a read that fails (an I/O error, a busy database) is tried before its
#: entity is given up, and the pause after the first failure (doubled after each).
READ_ATTEMPTS = 6
READ_PAUSE = 0.05
#: From this many messages loaded on, what the process holds once they are is moved out
#: of the garbage collector's sight (:func:`gc.freeze`): a server holding them for good.
FREEZE_AT = 100_000
_KIND_ORDER = {"queue": 0, "topic": 0, "subscription": 1}  # topics before subscriptions


class Collector:
    """The garbage collector, kept off while any recovery of the process loads (the last
    to finish turns it back on, if it was on: two servers may load at once), and what
    they froze (given back to the collector when the server that froze it stops)."""

    loading = 0
    was_enabled = False

    @classmethod
    def hold(cls) -> None:
        """A load begins."""
        if not cls.loading:
            cls.was_enabled = gc.isenabled()
            gc.disable()
        cls.loading += 1

    @classmethod
    def release(cls, freeze: bool) -> bool:
        """One load ended (``freeze``: a large one); whether what it holds was frozen."""
        cls.loading -= 1
        if cls.loading or not cls.was_enabled:
            return False
        if freeze:
            # What became garbage during the load (a request's cycles, the host's) is
            # collected first: frozen, it would never be (#39).
            gc.collect()
            gc.freeze()
        gc.enable()
        return freeze

    @staticmethod
    def thaw() -> None:
        """A server whose load froze stops: what it held may go (and what another
        froze, which is only walked again)."""
        gc.unfreeze()


class _Journal(Protocol):
    """What recovery needs of the journal (:class:`~._journal.Journal`)."""

    path: Any
    prefix: str
    #: An older database, whose rows are still to move to the compact table.
    migrating: bool

    async def migrate(self) -> bool:
        """Move an older database's rows to the compact table; whether there were."""


class Recovery:
    """The restart of one journal: its namespaces rebuilt, their messages loading.

    Args:
        journal: The journal to load from (opened).
        open_namespace: Finds or makes the namespace of a name, with a tier.
    """

    def __init__(self, journal: _Journal, open_namespace: Callable[[str, str], Namespace]) -> None:
        self.journal = journal
        self._open_namespace = open_namespace
        #: Entities whose messages are not all loaded, with the event set when they are.
        self.pending: dict[_Entity, asyncio.Event] = {}
        self._eids: dict[_Entity, int] = {}
        self._homes: dict[_Entity, Namespace] = {}
        #: The order entities load in: those waited for first (the latest asked for
        #: first, each once), then the plan.
        self._wanted: dict[_Entity, None] = {}
        self._plan: list[_Entity] = []
        self._task: asyncio.Task[None] | None = None
        self._reader: sqlite3.Connection | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._namespaces: list[Namespace] = []
        self.loaded = 0
        self._froze = False
        #: What stopped the load (the server stopping): what waits for what was not
        #: loaded is refused, rather than answered from part of a store.
        self.error: BaseException | None = None
        #: Entities whose messages could not be loaded (a row it cannot read, a read
        #: that kept failing), with why: an operation on one, or on an entity it may
        #: pass messages to or take them from, is refused; the others load (#39).
        self.failed: dict[_Entity, BaseException] = {}
        self._closed = False  # the load is over: its reader is not opened again

    # -- at once -------------------------------------------------------------------

    async def start(self) -> list[Namespace]:
        """Rebuild the namespaces, entities, rules, sessions and sequence numbers, and
        start loading the messages; return the namespaces."""
        namespaces, entities, sequences, sessions, rules, eids, maxima = await self._read(
            _read_small
        )
        built: dict[str, Namespace] = {}
        for name, tier in namespaces:
            built[name] = self._open_namespace(name, tier)
        now = next(iter(built.values())).clock.now() if built else 0.0
        for row in sorted(entities, key=lambda r: _KIND_ORDER[r[2]]):
            ns_name, key, kind, path, nfrag, created, props = row
            ns = built[ns_name]
            entity = _Entity(ns, kind, path, decode_props(kind, props), now, nfrag)
            entity.created = created
            if kind == "subscription":
                topic = ns._entities[key.split("/subscriptions/")[0]]
                entity.topic = topic
                topic.subscriptions[entity.key] = entity
            ns._entities[key] = entity
        for ns_name, key, data in rules:  # a subscription kept before rules were: $Default
            owner = built[ns_name]._entities.get(key)
            if owner is not None and owner.rules is not None:
                owner.rules.restore(decode_rules(data))
        for ns_name, key, sid, state, state_set in sessions:
            owner = built[ns_name]._entities.get(key)
            if owner is not None:
                session = owner.session(sid)
                session.state, session.state_set = state, state_set
        self._highs = _number_on(built, [*sequences, *maxima], {})
        for ns_name, key, eid in eids:
            home = built.get(ns_name)
            owner = home._entities.get(key) if home is not None else None
            if home is not None and owner is not None:
                self._eids[owner] = eid
                self._homes[owner] = home
                self.pending[owner] = asyncio.Event()
        if self.journal.migrating:  # an older database: every entity may have rows
            for home in built.values():
                for owner in home._entities.values():
                    self._homes[owner] = home
                    self.pending.setdefault(owner, asyncio.Event())
        seen: set[_Entity] = set()
        for entity in self.pending:
            self._plan += _downstream_first(entity, seen)
        self._plan.reverse()  # taken from the end
        self._namespaces = list(built.values())
        for ns in self._namespaces:
            ns.journal = self.journal  # type: ignore[assignment]  # what was loaded is on disk
            ns.recovery = self
        self._task = asyncio.create_task(self._run())
        return list(self._namespaces)

    # -- waiting -------------------------------------------------------------------

    async def wait(self, ns: Namespace, path: str | None) -> None:
        """Return once the messages of the entity ``path`` names, of every entity that
        may pass messages to it (a due scheduled message on a topic or a forwarding
        queue activates as its source loads: #39), and of every entity those may pass
        messages to, are loaded (``None``: once everything is)."""
        if path is None:
            await self.wait_all()
            return
        try:
            entity, _ = ns._resolve(path)
        except ServiceBusError:  # the operation answers for itself
            return
        chain = _chain(entity)
        need = [e for e in chain if e in self.pending]
        if need:
            wanted = dict.fromkeys(need)  # those asked for now, first, in their order
            wanted.update((e, None) for e in self._wanted if e not in wanted)
            self._wanted = wanted
        for e in need:
            event = self.pending.get(e)
            if event is not None:
                await event.wait()
            if e in self.pending and self.error is not None:
                raise _refusal(e, self.error)
        for e in chain:
            failed = self.failed.get(e)
            if failed is not None:
                raise _refusal(e, failed)

    def ready(self, entity: _Entity) -> bool:
        """Whether an operation on ``entity`` would not wait nor be refused (what reads
        stores without waiting, ``/metrics`` and the explorer's live view, leaves out
        an entity that is not: #39, it was reported empty while it loaded)."""
        return not any(e in self.pending or e in self.failed for e in _chain(entity))

    async def wait_all(self) -> None:
        """Return once every message is loaded (or could not be: an operation on such
        an entity is refused by :meth:`wait`)."""
        while self.pending:
            entity, event = next(iter(self.pending.items()))
            await event.wait()
            if self.error is not None and entity in self.pending:
                raise _refusal(entity, self.error)

    async def aclose(self) -> None:
        """Stop loading (the server stops): what still waits raises rather than answer
        from part of a store."""
        task, self._task = self._task, None
        if task is not None:
            if self.pending and self.error is None:
                self.error = TransientError("the server stopped before it had loaded the "
                                            "messages of this entity.")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._finish()
        await self._close_reader()
        if self._froze:
            self._froze = False
            Collector.thaw()

    async def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """``fn(connection)`` on the loader's own thread and connection (read only,
        with a small page cache: what it reads is read once; the journal's thread stays
        free for its own work meanwhile)."""
        if self._reader is None:
            if self._closed:  # a read ahead, after the load ended: nothing to reopen
                raise TransientError("the durable store's load is over.")
            self._executor = concurrent.futures.ThreadPoolExecutor(1, "aiosb-recovery")
            self._reader = await self._in_thread(connect, self.journal.path, "loader")
        return await self._in_thread(fn, self._reader)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _close_reader(self) -> None:
        self._closed = True
        reader, self._reader = self._reader, None
        executor, self._executor = self._executor, None
        if reader is not None and executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, reader.close)
        if executor is not None:
            executor.shutdown(wait=False)

    def _finish(self) -> None:
        for ns in self._namespaces:
            if ns.recovery is self:
                ns.recovery = None

    # -- in the background ---------------------------------------------------------

    async def _run(self) -> None:
        # The collector would walk the growing heap again and again while it grows by a
        # million records (a quarter of the load's time, #39): it waits for the end.
        Collector.hold()
        try:
            if await self.journal.migrate():  # #39: in the background, not before listening
                await self._moved()
            while self.pending:
                entity = self._next()
                if entity is None:
                    break
                try:
                    await self._load(entity)
                except Exception as exc:  # a row it cannot read, a read that kept failing
                    log.error("%s: loading the messages of %s failed: %s",
                              self.journal.path, entity.path, exc, exc_info=exc)
                    self.failed[entity] = exc  # the others go on loading
                    event = self.pending.pop(entity, None)
                    if event is not None:
                        event.set()
        except Exception as exc:  # an older database whose rows cannot be moved
            log.exception("%s: loading the messages failed", self.journal.path)
            self.error = exc
        finally:
            # What was loaded lives long: out of the collector's sight, or its first
            # passes after the load walk every record (a second at 10^6).
            self._froze = Collector.release(self.loaded >= FREEZE_AT)
            for event in self.pending.values():  # nothing waits for ever
                event.set()
        if self.error is None and not self.failed:
            self._finish()
        await self._close_reader()

    async def _rows(self, reading: asyncio.Future[Any], eid: int | None, after: int) -> Any:
        """The rows ``reading`` reads, read again after a pause if it fails (an I/O
        error, a busy database: #39, once was for good) while the load's snapshot holds."""
        pause, attempt = READ_PAUSE, 1
        while True:
            try:
                return await reading
            except (sqlite3.Error, OSError) as exc:
                reader = self._reader
                if attempt >= READ_ATTEMPTS or reader is None or not reader.in_transaction:
                    raise EntityUnavailable(
                        f"the emulator could not read its data from {self.journal.path}: "
                        f"{exc}; restart the server once it can.") from exc
                log.warning("%s: a read failed (trying again in %.2f s): %s",
                            self.journal.path, pause, exc)
                await asyncio.sleep(pause)
                pause, attempt = pause * 2, attempt + 1
                reading = asyncio.ensure_future(self._read(_chunk(eid, after)))

    async def _moved(self) -> None:
        """An older database's rows moved to the compact table: the load's snapshot
        begins again, with them, their entities' numbers and highest sequence numbers."""
        built = {ns.name: ns for ns in self._namespaces}
        frags = {(e.ns.name, e.key): e.nfrag for e in self.pending}
        eids, maxima = await self._read(lambda db: _moved(db, frags, again=True))
        for ns_name, key, eid in eids:
            owner = built[ns_name]._entities.get(key) if ns_name in built else None
            if owner is not None and owner in self.pending:
                self._eids[owner] = eid
        _number_on(built, maxima, self._highs)

    def _next(self) -> _Entity | None:
        wanted = self._wanted
        while wanted:
            entity = next(iter(wanted))
            del wanted[entity]
            if entity in self.pending:
                return entity
        plan = self._plan
        while plan:
            entity = plan.pop()
            if entity in self.pending:
                return entity
        return next(iter(self.pending), None)

    async def _load(self, entity: _Entity) -> None:
        eid = self._eids.get(entity)  # none: it holds no rows
        prefix: str | None = self.journal.prefix
        after = -1
        locked_at: dict[tuple[int, float], list[Any]] = {}
        reading = asyncio.ensure_future(self._read(_chunk(eid, after)))
        try:
            while True:
                if prefix == auto_id_prefix():
                    prefix = None  # numbers stay numbers: this process spells them so
                rows = await self._rows(reading, eid, after)
                ns = self._homes[entity]
                if entity.deleted or ns._entities.get(entity.key) is not entity:
                    break  # deleted meanwhile: its rows went with it
                if not rows:
                    break
                after = rows[-1][0]
                # The next rows are read (on the loader's thread) while these are put.
                reading = asyncio.ensure_future(self._read(_chunk(eid, after)))
                journal, ns.journal = ns.journal, None  # these rows are on disk already
                try:
                    _put(entity, rows, prefix, locked_at, ns.clock.now())
                finally:
                    ns.journal = journal
                self.loaded += len(rows)
        finally:  # the read ahead of a load that failed: dropped (#39: it reopened a reader)
            if not reading.done():
                reading.cancel()
            elif not reading.cancelled():
                reading.exception()
        for (_, until), (store, *recs) in locked_at.items():
            store.lock_until(until, recs)  # a lock that ended while down ends at once
        event = self.pending.pop(entity, None)
        if event is not None:
            event.set()


def _chunk(eid: int | None, after: int) -> Callable[[sqlite3.Connection], list[Any]]:
    """A read of the next rows of entity ``eid``, numbered above ``after``."""
    def read(db: sqlite3.Connection) -> list[Any]:
        return db.execute(
            "SELECT seq, body, head, lock FROM msgs WHERE eid = ? AND seq > ? "
            "ORDER BY seq LIMIT ?", (eid, after, CHUNK)).fetchall()
    return read


def _put(entity: _Entity, rows: list[Any], prefix: str | None,
         locked_at: dict[tuple[int, float], list[Any]], now: float) -> None:
    """Hold the records of ``rows`` (of ``entity``, in sequence order) in its stores."""
    nfrag = entity.nfrag
    fragments, dlqs = entity.fragments, entity.dlqs
    last_enqueued = last_expires = None
    # Available records come in runs for one store: each run is held at once, a page at
    # a time, as a send's batch is (_Store.add_run).
    run: list[_Record] = []
    run_store: _Store | None = None
    seq = -1
    try:
        for seq, body, head, lock in rows:
            rec, where = record_of_row(seq, body, head, prefix)
            # Equal instants are shared, as a batch's are when it is sent (#39: memory).
            if rec.enqueued == last_enqueued:
                rec.enqueued = last_enqueued
            last_enqueued = rec.enqueued
            if rec.expires is not None:
                if rec.expires == last_expires:
                    rec.expires = last_expires
                last_expires = rec.expires
            if lock is not None:  # locked since the row was written (Journal.locked)
                rec.state, rec.delivery_count, rec.lock_token, rec.locked_until = loads(lock)
            frag = fragment_of(seq, nfrag) if nfrag > 1 else 0
            if where is None:
                store = fragments[frag]
            elif where == "d":
                store = dlqs[frag]
            else:
                store = entity.session(where[2:]).store
            state = rec.state
            if state == AVAILABLE:
                if store is not run_store:
                    if run_store is not None:
                        run_store.add_run(run, now)
                    run, run_store = [], store
                run.append(rec)
                continue
            if run_store is not None:
                run_store.add_run(run, now)
                run, run_store = [], None
            if state == SCHEDULED:
                store.add_scheduled(rec)
                continue
            if state not in (LOCKED, DEFERRED):
                raise ValueError(f"unknown message state {state} in the durable store")
            until = rec.locked_until
            if state == LOCKED and (rec.lock_token is None or until is None):
                raise ValueError("a locked message without its lock in the durable store")
            store.add_held(rec)
            if state == LOCKED and until is not None:
                locked_at.setdefault((id(store), until), [store]).append(rec)
        if run_store is not None:
            run_store.add_run(run, now)
    except InvalidArgument:
        raise
    except Exception as exc:  # a damaged row (#39: it was an internal error, HTTP 500)
        raise InvalidArgument(
            f"message {seq} of {entity.path!r} in the durable store cannot be read "
            f"({type(exc).__name__}: {exc}): its row is damaged.") from exc


def _refusal(entity: _Entity, exc: BaseException) -> ServiceBusError:
    """A fresh error each time (#39: one raised again and again grew its traceback) for
    an operation on ``entity``, whose messages could not be loaded (``exc``)."""
    kind = next((k for k in (InvalidArgument, TransientError) if isinstance(exc, k)),
                EntityUnavailable)  # transient: the server stopped (another may load it)
    error = kind(f"the messages of {entity.path!r} could not be loaded: {exc}")
    error.__cause__ = exc
    return error


def _downstream_first(entity: _Entity, seen: set[_Entity]) -> list[_Entity]:
    """``entity`` and every entity it may pass messages to, not in ``seen``, those it
    passes them to first (added to ``seen``)."""
    out: list[_Entity] = []
    stack: list[tuple[_Entity, bool]] = [(entity, False)]
    while stack:
        current, done = stack.pop()
        if done:
            out.append(current)
            continue
        if current in seen:
            continue
        seen.add(current)
        stack.append((current, True))
        for target in _targets(current):
            if target not in seen:
                stack.append((target, False))
    return out


def _chain(entity: _Entity) -> list[_Entity]:
    """What an operation on ``entity`` waits for: the entities that may pass messages
    to it, near or far, and those they may pass messages to, each after its targets."""
    seen: set[_Entity] = set()
    chain = []
    for source in _upstream(entity):  # what loading a source may put in: first
        chain += _downstream_first(source, seen)
    return chain


def _upstream(entity: _Entity) -> list[_Entity]:
    """``entity`` and every entity that may pass messages to it, near or far."""
    sources: dict[_Entity, list[_Entity]] = {}
    for other in entity.ns._entities.values():
        for target in _targets(other):
            sources.setdefault(target, []).append(other)
    out, seen = [entity], {entity}
    for current in out:  # grows as it is walked
        for source in sources.get(current, ()):
            if source not in seen:
                seen.add(source)
                out.append(source)
    return out


def _targets(entity: _Entity) -> list[_Entity]:
    """The entities ``entity`` may pass messages to."""
    out = list(entity.subscriptions.values())
    for name in ("forward_to", "forward_dead_lettered_messages_to"):
        path = getattr(entity.props, name, None)
        if path:
            target = entity.ns._entities.get(path.lower())
            if target is not None:
                out.append(target)
    return out


def _read_small(db: sqlite3.Connection) -> tuple[list[Any], ...]:
    """The small tables, and the highest sequence number of each fragment's rows.

    The read transaction begun here lasts the whole load (every chunk reads the same
    snapshot, until the reader closes): a row the broker writes meanwhile (a message
    that expired while down, dead-lettered as soon as its chunk is put, numbered above
    every row kept) is in memory already and is not read a second time (#39, R-3)."""
    db.execute("BEGIN")
    entities = db.execute(
        "SELECT ns, key, kind, path, nfrag, created, props FROM entities").fetchall()
    eids, maxima = _moved(db, {(ns, key): nfrag for ns, key, _, _, nfrag, _, _ in entities})
    return (
        db.execute("SELECT name, tier FROM namespaces").fetchall(),
        entities,
        db.execute("SELECT ns, entity, fragment, high FROM sequences").fetchall(),
        db.execute("SELECT ns, entity, sid, state, state_set FROM sessions").fetchall(),
        db.execute("SELECT ns, entity, data FROM rules").fetchall(),
        eids,
        maxima,
    )


def _moved(db: sqlite3.Connection, frags: dict[tuple[str, str], int],
           again: bool = False) -> tuple[list[Any], ...]:
    """The entities' numbers in message rows, and the highest sequence number of each
    fragment's rows (``frags``: the fragments of each entity); ``again``: in a snapshot
    begun now (an older database's rows moved since the load's began)."""
    if again:
        db.execute("COMMIT")
        db.execute("BEGIN")
    eids = db.execute("SELECT ns, key, id FROM entity_ids").fetchall()
    maxima = []
    for ns, key, eid in eids:
        for fragment in range(frags.get((ns, key), 0)):
            low = fragment << FRAGMENT_SHIFT
            (high,) = db.execute(
                "SELECT max(seq) FROM msgs WHERE eid = ? AND seq >= ? AND seq < ?",
                (eid, low, low + (1 << FRAGMENT_SHIFT))).fetchone()
            if high is not None:
                maxima.append((ns, key, fragment, high))
    return eids, maxima


def _number_on(built: dict[str, Namespace], rows: list[Any],
               highs: dict[tuple[str, str, int], int]) -> dict[tuple[str, str, int], int]:
    """Number each fragment's messages on from the highest of ``rows`` (namespace,
    entity, fragment, highest sequence number) and ``highs`` (updated, returned)."""
    for ns_name, key, fragment, high in rows:
        hk = (ns_name, key, fragment)
        highs[hk] = max(highs.get(hk, 0), high)
    for (ns_name, key, fragment), high in highs.items():
        owner = built[ns_name]._entities.get(key) if ns_name in built else None
        if owner is not None and fragment < owner.nfrag:
            owner.seqs[fragment] = itertools.count(high + 1)
            for store in owner.stores():
                if store.fragment == fragment:
                    store.seqs = owner.seqs[fragment]
    return highs
