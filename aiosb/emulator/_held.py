"""The records a store holds, by sequence number (:class:`Held`).

A dict from sequence number to record costs about 50 bytes a message, and a sorted
index beside it (for peeks from a sequence number) 8 more (#16). A store's numbers come
mostly in runs (one counter per fragment), so :class:`Held` keeps them in pages of 64
consecutive numbers: a page with one record holds the record itself, a page with more
a list of them in sequence order. A full page costs about 10 bytes a message; a page of
one (a session's or a dead-letter queue's numbers, spread among others) about what the
dict cost. Peeks bisect the sorted page numbers, then read pages in order.

Imports: :mod:`._record` only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from operator import attrgetter
from typing import Any

from ._record import _Record

__all__ = ["Held"]

SHIFT = 6  # 64 sequence numbers a page
_seq = attrgetter("seq")


class Held:
    """Records by sequence number (a mapping ``seq -> record``, in sequence order)."""

    __slots__ = ("_keys", "_len", "_pages", "_sorted")

    def __init__(self) -> None:
        self._pages: dict[int, _Record | list[_Record]] = {}
        #: Every page number in use (and some of pages gone since, dropped now and
        #: then), sorted when ``_sorted``.
        self._keys: list[int] = []
        self._sorted = True
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.get(seq) is not None

    def __getitem__(self, seq: int) -> _Record:
        rec = self.get(seq)
        if rec is None:
            raise KeyError(seq)
        return rec

    def __iter__(self) -> Iterator[int]:
        return (rec.seq for rec in self.values())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Held):
            other = dict(other.items())
        return isinstance(other, Mapping) and dict(self.items()) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Held({dict(self.items())!r})"

    def get(self, seq: int) -> _Record | None:
        page = self._pages.get(seq >> SHIFT)
        if page is None:
            return None
        if page.__class__ is list:
            at = bisect_left(page, seq, key=_seq)
            if at < len(page) and page[at].seq == seq:
                return page[at]
            return None
        return page if page.seq == seq else None  # type: ignore[union-attr, return-value]

    def add(self, rec: _Record) -> bool:
        """Hold ``rec`` (in place of one with its number); whether it is a new number."""
        seq = rec.seq
        key = seq >> SHIFT
        pages = self._pages
        page = pages.get(key)
        if page is None:
            pages[key] = rec
            keys = self._keys
            if not keys or key > keys[-1]:
                keys.append(key)
            elif key < keys[-1]:  # sorted again, without numbers repeated, when next read
                keys.append(key)
                self._sorted = False
        elif page.__class__ is not list:
            other: _Record = page  # type: ignore[assignment]
            if other.seq == seq:
                pages[key] = rec
                return False
            pages[key] = [other, rec] if other.seq < seq else [rec, other]
        else:
            recs: list[_Record] = page
            if recs[-1].seq < seq:
                recs.append(rec)
            else:
                at = bisect_left(recs, seq, key=_seq)
                if recs[at].seq == seq:
                    recs[at] = rec
                    return False
                recs.insert(at, rec)
        self._len += 1
        return True

    def add_run(self, recs: list[_Record]) -> None:
        """Hold ``recs``, numbered in increasing order (no number twice: a send numbers
        its batch from one counter); numbered consecutively and above every number held
        (a send's batch for one store), a page at a time, not a record at a time (#16).
        Records numbered otherwise are held one by one, as :meth:`add` holds them."""
        n = len(recs)
        if not n:
            return
        first = recs[0].seq
        pages, keys = self._pages, self._keys
        if recs[-1].seq - first != n - 1 or not self._sorted or (
            keys and first >> SHIFT < keys[-1]
        ):
            for rec in recs:
                self.add(rec)
            return
        at = 0
        while at < n:
            seq = first + at
            key = seq >> SHIFT
            end = min(n, at + ((key + 1) << SHIFT) - seq)
            page = pages.get(key)
            if page is None:
                pages[key] = recs[at] if end - at == 1 else recs[at:end]
                if not keys or key > keys[-1]:  # or equal: listed already
                    keys.append(key)
            elif page.__class__ is list and page[-1].seq < seq:
                page += recs[at:end]
            elif page.__class__ is not list and page.seq < seq:  # type: ignore[union-attr]
                pages[key] = [page, *recs[at:end]]  # type: ignore[list-item]
            else:  # a number held already: replaced, as add does
                for rec in recs[at:end]:
                    self.add(rec)
                at = end
                continue
            self._len += end - at
            at = end

    def pop(self, seq: int, default: Any = None) -> Any:
        """Drop the record numbered ``seq`` and return it (``default`` if none is)."""
        for rec in self.discard((seq,)):
            return rec
        return default

    def discard(self, seqs: Iterable[int]) -> list[_Record]:
        """Drop the records numbered ``seqs`` (those held); return them, in that order.
        One call for a batch: every settled message comes through here (#16). A batch
        is mostly a run of consecutive numbers at the front of its pages (received in
        order): such a run is cut from each page at once, with no step per record."""
        out: list[_Record] = []
        nums = seqs if isinstance(seqs, list) else list(seqs)
        n = len(nums)
        first = nums[0] if n else 0
        if n < 2 or nums != list(range(first, first + n)):
            self._discard_each(nums, out)
        else:
            pages = self._pages
            at = 0
            while at < n:
                seq = first + at
                key = seq >> SHIFT
                end = min(n, at + ((key + 1) << SHIFT) - seq)
                count = end - at
                page = pages.get(key)
                # A sorted page of distinct numbers whose first and count-th records
                # are seq and seq + count - 1 holds exactly the numbers between.
                if (
                    page.__class__ is list
                    and len(page) >= count
                    and page[0].seq == seq
                    and page[count - 1].seq == seq + count - 1
                ):
                    self._cut(key, page, count, out)
                else:
                    self._discard_each(nums[at:end], out)
                at = end
        if len(self._keys) > 2 * len(self._pages) + 64:
            self._keys = sorted(self._pages)
            self._sorted = True
        self._len -= len(out)
        return out

    def _discard_each(self, seqs: Iterable[int], out: list[_Record]) -> None:
        """Drop the records numbered ``seqs`` into ``out``, number by number (a run at
        the front of a page still cut at once)."""
        pages = self._pages
        run: list[_Record] = []  # the page whose front is being cut, and how far
        run_key = -1
        cut = 0
        for seq in seqs:
            key = seq >> SHIFT
            if key == run_key and cut < len(run) and run[cut].seq == seq:
                cut += 1
                continue
            if cut:
                self._cut(run_key, run, cut, out)
                cut = 0
                run_key = -1
            page = pages.get(key)
            if page is None:
                continue
            if page.__class__ is list:
                recs: list[_Record] = page
                if recs[0].seq == seq:
                    run, run_key, cut = recs, key, 1
                    continue
                at = bisect_left(recs, seq, key=_seq)
                if at == len(recs) or recs[at].seq != seq:
                    continue
                out.append(recs.pop(at))
                if len(recs) == 1:
                    pages[key] = recs[0]
            elif page.seq == seq:  # type: ignore[union-attr]
                out.append(page)  # type: ignore[arg-type]
                del pages[key]
        if cut:
            self._cut(run_key, run, cut, out)

    def _cut(self, key: int, page: list[_Record], count: int, out: list[_Record]) -> None:
        """Move the first ``count`` records of list page ``key`` to ``out``."""
        out += page[:count]
        del page[:count]
        if len(page) > 1:
            return
        if page:
            self._pages[key] = page[0]
        else:
            del self._pages[key]

    def from_sequence(self, seq: int) -> Iterator[_Record]:
        """The records from number ``seq`` on, in order: a bisection of the page
        numbers, then only the pages read (pages are looked up as they are reached, so
        records may come and go between items)."""
        if not self._sorted:
            self._keys = sorted(self._pages)
            self._sorted = True
        keys, pages = self._keys, self._pages
        at = bisect_left(keys, seq >> SHIFT)
        while at < len(keys):
            page = pages.get(keys[at])
            at += 1
            if page is None:
                continue
            if page.__class__ is list:
                for rec in page[:]:
                    if rec.seq >= seq:
                        yield rec
            elif page.seq >= seq:  # type: ignore[union-attr]
                yield page  # type: ignore[misc]

    def values(self) -> list[_Record]:
        """Every record held, in sequence order."""
        return list(self.from_sequence(0))

    def items(self) -> list[tuple[int, _Record]]:
        return [(rec.seq, rec) for rec in self.values()]
