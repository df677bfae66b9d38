"""The journal's write policy: what a group commit writes, the frames it reaches the
writer in, what goes back to pending when one is not written, and when a lock is
written (#39, #48).

A group commit carries every change reported since the one before it: a :class:`Batch`
takes them over (``upto``: the number of the last of them) and cuts them into frames
of at most :data:`MOST_ROWS` rows and :data:`MOST_BYTES` bytes. Each frame is built
and pickled on the serving loop when the one before it is in the writer's pipe, so
that a burst is neither one huge frame nor one long pause of the loop; each is a
transaction of its own and is answered on its own (:class:`Write`). Only the last
frame of a batch makes its changes durable (``whole``). The order of the frames is
what a batch cut short (the server killed between two of them) may leave on disk
without losing what was acknowledged before: the statements (namespaces, entities,
sessions ...) first, then the rows put and the locks, the rows deleted last (a message
moved from one entity to another is in its new place before its old row goes). A row
that changed again after its batch was taken (it is pending again) is left to the next
batch, which writes it as it is then. A frame that is not written (refused, or its
writer lost) goes back among the pending changes (:meth:`Write.back_into`), what is
pending of a row since winning.

A lock is not written as it is taken (#39): most end sooner (their message settled), and
a lock that ends before it is written costs no write. :class:`YoungLocks` keeps each
until it has been held :data:`~._journal.LOCK_WRITE_AFTER`; then it joins the next
group commit, to the row's lock column.

Imports: :mod:`.._record`, :mod:`._rows`, :mod:`.._partitions` (the frames are
:mod:`._writer_process`'s to read; :mod:`._writer_client` carries them).
"""

from __future__ import annotations

import asyncio
import collections
import io
import itertools
import pickle
from collections.abc import Iterator
from typing import Any

import orjson

from .._partitions import FRAGMENT_SHIFT
from .._record import GONE, LOCKED, _Record
from ._rows import message_row

__all__ = ["MOST_BYTES", "MOST_ROWS", "Batch", "Write", "YoungLocks", "frame_of"]

#: The most rows (messages put or deleted, locks, statements) one frame carries. A
#: frame costs the loop about 1 µs a row put to build and pickle: about a millisecond
#: at most, between two of which requests are served. S-4 streaming's groups are about
#: 140 rows (70 messages put, as many deleted): far below it, never cut.
MOST_ROWS = 1024
#: The most bytes (bodies and heads of the rows put, statements' arguments) one frame
#: carries, but for a single row bigger than that, which goes alone: the size of the
#: writer's pipe (:func:`._writer_client._widen`).
MOST_BYTES = 1 << 20

_Dirty = dict[tuple[str, str], dict[int, Any]]
_Locks = dict[tuple[str, str], dict[int, Any]]


class Write:
    """A frame handed to the writer: what it carries (taken back if it is not
    written), the change its batch goes up to, whether it is its batch's last frame,
    and the writer's answer."""

    __slots__ = ("answer", "dirty", "high_id", "locks", "ops", "upto", "whole")

    def __init__(self, upto: int, dirty: Any, locks: Any, ops: Any, high_id: int,
                 answer: asyncio.Future[None], whole: bool = True) -> None:
        self.upto, self.dirty, self.locks, self.ops = upto, dirty, locks, ops
        self.high_id, self.answer, self.whole = high_id, answer, whole

    def back_into(self, dirty: _Dirty, locks: _Locks, deleted: dict[tuple[str, str], int]
                  ) -> None:
        """Put this frame's rows and locks back among the pending ones (``dirty``,
        ``locks``: what is pending of a row wins), but for the entities deleted since
        its batch was taken (``deleted``: the number of the change that deleted each),
        whose rows would be written after their delete and stay."""
        _back_into(self.upto, self.dirty, self.locks, dirty, locks, deleted)


def _back_into(upto: int, rows_of: _Dirty, locks_of: _Locks, dirty: _Dirty, locks: _Locks,
               deleted: dict[tuple[str, str], int]) -> None:
    for key, rows in rows_of.items():
        if deleted.get(key, 0) > upto:
            continue
        now = dirty.setdefault(key, {})
        for seq, item in rows.items():
            now.setdefault(seq, item)
    for key, recs in locks_of.items():
        if deleted.get(key, 0) > upto:
            continue
        written = dirty.get(key) or {}
        now_locks = locks.setdefault(key, {})
        for seq, rec in recs.items():
            if seq not in written:
                now_locks.setdefault(seq, rec)


class Batch:
    """The changes of one group commit (up to change ``upto``) still to be cut into
    frames: statements, rows to put, locks, rows to delete (found among the rows, kept
    for the end), and the highest broker-assigned id number of a message gone unwritten."""

    def __init__(self, upto: int, dirty: _Dirty, locks: _Locks,
                 ops: list[tuple[str, tuple[Any, ...]]], gone_id: int) -> None:
        self.upto, self.dirty, self.locks, self.gone_id = upto, dirty, locks, gone_id
        self.ops = collections.deque(ops)
        self.deletes: dict[tuple[str, str], list[int]] = {}

    @property
    def done(self) -> bool:
        return not (self.ops or self.dirty or self.locks or self.deletes)

    def back_into(self, dirty: _Dirty, locks: _Locks, deleted: dict[tuple[str, str], int]
                  ) -> None:
        """Put what is left of the batch back among the pending changes (as
        :meth:`Write.back_into`; its statements and ``gone_id`` are the caller's)."""
        rows = {key: dict(rows) for key, rows in self.dirty.items()}
        for key, seqs in self.deletes.items():
            rows.setdefault(key, {}).update(dict.fromkeys(seqs))
        _back_into(self.upto, rows, self.locks, dirty, locks, deleted)
        self.dirty, self.locks, self.deletes = {}, {}, {}

    def cut(self, pending: _Dirty, pending_locks: _Locks, prefix_ok: bool,
            answer: asyncio.Future[None]) -> tuple[Write, bytes]:
        """The next frame (:data:`MOST_ROWS`, :data:`MOST_BYTES`; at least one row) and
        its :class:`Write`, taken out of the batch; rows ``pending`` or
        ``pending_locks`` hold again are passed over (the next batch writes them). A
        broker-assigned MessageId is counted where ``prefix_ok``: the ids are spelled
        with the database's prefix."""
        taken: _Dirty = {}
        taken_locks: _Locks = {}
        ops: list[tuple[str, tuple[Any, ...]]] = []
        try:
            return self._cut(pending, pending_locks, prefix_ok, answer, taken, taken_locks,
                             ops)
        except BaseException:  # nothing taken is lost: it goes back into the batch
            self.ops.extendleft(reversed(ops))
            _back_into(self.upto, taken, taken_locks, self.dirty, self.locks, {})
            raise

    def _cut(self, pending: _Dirty, pending_locks: _Locks, prefix_ok: bool,
             answer: asyncio.Future[None], taken: _Dirty, taken_locks: _Locks,
             ops: list[tuple[str, tuple[Any, ...]]]) -> tuple[Write, bytes]:
        most_rows, most_bytes = MOST_ROWS, MOST_BYTES
        count, size = 1, 0  # a row kept for the highest id number (below)
        while self.ops and count < most_rows and size < most_bytes:
            op = self.ops.popleft()
            ops.append(op)
            count += 1
            size += _size_of(op)
        shift = FRAGMENT_SHIFT
        high_id = self.gone_id
        entities: dict[tuple[str, str], tuple[list[int], list[Any], list[Any]]] = {}
        highs: list[tuple[str, str, int, int]] = []
        # the rows put, in the order they came (an entity's in rising sequence numbers:
        # SQLite fills its pages so), deletes put aside for the end
        while self.dirty and count < most_rows and size < most_bytes:
            key = next(iter(self.dirty))
            rows = self.dirty[key]
            again = pending.get(key)
            puts: list[tuple[int, bytes, bytes]] = []
            later = self.deletes.setdefault(key, [])
            stop = None  # the first row left for the next frame (None: none is)
            for seq, item in rows.items():
                if item is None or item[1].state == GONE:
                    later.append(seq)
                    continue
                if again and seq in again:  # changed again: the next batch writes it
                    continue
                where, rec = item
                body = rec.body
                if count >= most_rows or (size and size + len(body) > most_bytes):
                    stop, size = seq, most_bytes  # full
                    break
                mid = rec._mid
                if prefix_ok and isinstance(mid, int) and mid > high_id:
                    high_id = mid
                head = message_row(rec, prefix_ok, where)
                puts.append((seq, body, head))
                count += 1
                size += len(body) + len(head)
            if stop is None:  # every row of the entity is taken (or put aside)
                del self.dirty[key]
                mine = rows
            else:
                mine = {seq: rows.pop(seq) for seq in
                        list(itertools.takewhile(stop.__ne__, rows))}
            if not later:
                del self.deletes[key]
            if puts:
                taken[key] = mine  # (with the rows put aside: taken back, they merge)
                entities[key] = ([], puts, [])
                highs += [(*key, frag, high) for frag, high in _highs(mine, shift)]
        # the locks taken since their rows were written
        while self.locks and count < most_rows and size < most_bytes:
            key = next(iter(self.locks))
            recs = self.locks[key]
            again, again_locks = pending.get(key) or {}, pending_locks.get(key) or {}
            held: list[tuple[bytes, int]] = []
            mine = taken_locks.setdefault(key, {})
            while recs and count < most_rows and size < most_bytes:
                seq, rec = recs.popitem()
                if rec.state != LOCKED or seq in again or seq in again_locks:
                    continue
                mine[seq] = rec
                lock = _lock_of(rec)
                held.append((lock, seq))
                count += 1
                size += len(lock)
            if not recs:
                del self.locks[key]
            if mine:
                entities.setdefault(key, ([], [], []))[2].extend(held)
            else:
                del taken_locks[key]
        # the rows deleted, once every row is put
        while not self.dirty and self.deletes and count < most_rows and size < most_bytes:
            key = next(iter(self.deletes))
            seqs = self.deletes.pop(key)
            room = most_rows - count
            if len(seqs) > room:
                self.deletes[key] = seqs[room:]
                seqs = seqs[:room]
            count += len(seqs)
            gone = dict.fromkeys(seqs)
            taken.setdefault(key, {}).update(gone)
            entities.setdefault(key, ([], [], []))[0].extend(seqs)
            # every number used counts, kept or not
            highs += [(*key, frag, high) for frag, high in _highs(gone, shift)]
        if high_id:
            ops.append(("INSERT INTO meta VALUES ('auto_high', ?) ON CONFLICT (name) "
                        "DO UPDATE SET value = max(value, excluded.value)", (high_id,)))
        self.gone_id = 0  # in this frame
        groups = [(ns, entity, deletes, puts, held)
                  for (ns, entity), (deletes, puts, held) in entities.items()]
        write = Write(self.upto, taken, taken_locks, ops, high_id, answer, self.done)
        return write, frame_of(ops, groups, highs)


def _size_of(op: tuple[str, tuple[Any, ...]]) -> int:
    sql, args = op
    return len(sql) + sum(len(arg) for arg in args if isinstance(arg, (str, bytes)))


def _lock_of(rec: _Record) -> bytes:
    """What the lock column keeps of a locked record: its state, delivery count, lock
    token and lock's end (JSON: ints, a token of hex digits and dashes, a finite float,
    which orjson writes as :func:`~aiosb.wire.json_values.dumps` does, faster)."""
    return orjson.dumps([rec.state, rec.delivery_count, rec.lock_token, rec.locked_until])


def _highs(rows: dict[int, Any], shift: int) -> Iterator[tuple[int, int]]:
    """(fragment, the highest sequence number of it) of the sequence numbers ``rows``
    holds (``shift``: :data:`.._partitions.FRAGMENT_SHIFT`); mostly one fragment."""
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


class _Plain(pickle.Pickler):
    """Pickles a value of a subclass of str, bytes, int or float (a name given as a
    ``StrEnum``, say) as the plain value: the writer imports no class of the caller's
    (and its unpickler admits only these four: :data:`._writer_process.ALLOWED`)."""

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
    """A frame's body for the writer (:mod:`._writer_process`), without its head (the
    pipe adds it: :meth:`._writer_client.WriterLink.send`)."""
    out = io.BytesIO()
    _Plain(out, pickle.HIGHEST_PROTOCOL).dump((ops, groups, highs))
    return out.getvalue()


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
