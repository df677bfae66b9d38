"""The partition router: which fragment of a partitioned entity a message, a session or
a sequence number belongs to (partitioned-entities.md, PT-*).

An entity has one fragment, or 16 (2 on premium) when partitioned (PT-4); a
subscription has its topic's. A message with a key (its session id, else its partition
key, else its message id when the entity detects duplicates: PT-6 to PT-8) goes to the
fragment the key hashes to, by a hash that is the same in every process (PT-9); a batch
of keyless messages goes to one round-robin fragment that is up (PT-10). A fragment's
index is the high bits of the sequence numbers it gives out, so a sequence number finds
its fragment again. A receive gathers from every fragment, starting at a rotating one
(PT-12). A transaction on a partitioned entity needs one key for all its messages
(PT-16 to PT-18).

(Each message's key is chosen where its record is built, in
:func:`aiosb.emulator._sending.check`, inline because it runs for every message sent.)

Imports: :mod:`._record` only.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from ..errors import InvalidArgument, InvalidOperation
from ._record import _Record

__all__ = ["FRAGMENT_SHIFT"]

#: A partitioned entity's sequence numbers carry the fragment index in these high bits.
FRAGMENT_SHIFT = 48

_T = TypeVar("_T")


class Partitioned(Protocol):
    """What the router needs of an entity (an :class:`~._entity._Entity`)."""

    @property
    def nfrag(self) -> int:
        """The number of fragments (1 when not partitioned)."""

    @property
    def rr(self) -> Iterator[int]:
        """The round-robin counter of keyless sends."""

    @property
    def dup_window(self) -> float:
        """The duplicate detection window in seconds (0: no duplicate detection)."""


def _hash(key: str) -> int:
    """A hash of a partition key that is the same in every process and run (PT-9)."""
    return zlib.crc32(key.encode("utf-8"))


def home(key: str, nfrag: int) -> int:
    """The fragment a key belongs to, of ``nfrag`` (a session's home: PT-6, PT-9)."""
    return _hash(key) % nfrag if nfrag > 1 else 0


def sequence_numbers(fragment: int) -> Iterator[int]:
    """The sequence numbers fragment ``fragment`` gives out, from the first."""
    return itertools.count((fragment << FRAGMENT_SHIFT) + 1)


def fragment_of(seq: int, nfrag: int) -> int:
    """The fragment whose sequence numbers include ``seq`` (of ``nfrag``)."""
    return min(seq >> FRAGMENT_SHIFT, nfrag - 1)


def route(
    records: Sequence[_Record | None],
    nfrag: int,
    rr: Iterator[int],
    down: Mapping[int, _T] | None,
) -> _T | None:
    """Choose the fragment (``rec.frag``) of each record of a batch sent to an entity of
    ``nfrag`` fragments (PT-6 to PT-10); ``None`` entries (pings) are skipped.

    Returns the fault (a value of ``down``, the fragments that are down) in the way of
    a keyed message, or of every fragment, if there is one; then the batch is not sent.
    """
    keyless = -1
    for rec in records:
        if rec is None:
            continue
        key = rec.key
        if key is not None:  # pinned: its fragment or nothing (PT-9)
            frag = _hash(key) % nfrag
            if down is not None and frag in down:
                return down[frag]
        else:  # one round-robin fragment for the keyless part of a batch (PT-10)
            if keyless < 0:
                if down is None:
                    keyless = next(rr) % nfrag
                else:
                    for _ in range(nfrag):
                        keyless = next(rr) % nfrag
                        if keyless not in down:
                            break
                    else:
                        return next(iter(down.values()))
            frag = keyless
        rec.frag = frag
    return None


def fragment_for(target: Partitioned, rec: _Record) -> int:
    """The fragment of ``target`` that a forwarded or fanned-out message goes to: its
    key's (PT-19), else round robin."""
    n = target.nfrag
    if n == 1:
        return 0
    key = rec.key
    if key is None:
        key = rec.session_id if rec.session_id is not None else rec.partition_key
        if key is None and target.dup_window:
            key = rec.message_id
    return _hash(key) % n if key is not None else next(target.rr) % n


def by_fragment(seqs: Sequence[int], nfrag: int) -> dict[int, list[int]]:
    """Sequence numbers grouped by the fragment their high bits name.

    Raises:
        InvalidArgument: A sequence number that is not a positive integer.
    """
    groups: dict[int, list[int]] = {}
    for seq in seqs:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidArgument(f"sequence number {seq!r} is not a positive integer.")
        groups.setdefault(min(seq >> FRAGMENT_SHIFT, nfrag - 1), []).append(seq)
    return groups


def gather_order(live: list[_T], rr: Iterator[int]) -> list[_T]:
    """The fragments (``live``, those up) a receive gathers from, in order: starting at
    a rotating one, so that any fragment may yield first (PT-12)."""
    start = next(rr) % len(live)
    return live[start:] + live[:start]


def check_transaction(path: str, nfrag: int, records: Sequence[_Record | None]) -> None:
    """PT-16 to PT-18: a transaction on a partitioned entity goes to one fragment, so
    every message needs a partition key, and the same one.

    Raises:
        InvalidOperation: A message without a key, or two keys.
    """
    if nfrag == 1:
        return
    keys = {rec.key for rec in records if rec is not None}
    if None in keys:
        raise InvalidOperation(
            f"{path!r} is partitioned: every message of a transaction needs a "
            "partition key (session_id, partition_key, or a message_id with duplicate "
            "detection), and the same one (PT-16). Nothing was sent."
        )
    if len(keys) > 1:
        sessions = {rec.session_id for rec in records if rec is not None} - {None}
        what = (
            f"{len(sessions)} sessions ({', '.join(sorted(map(repr, sessions)))}); a "
            "partitioned entity takes one session per transaction (PT-17)"
            if len(sessions) > 1
            else f"{len(keys)} partition keys ({', '.join(sorted(map(repr, keys)))}); they "
            "must all be the same (PT-16)"
        )
        raise InvalidOperation(
            f"A transaction on partitioned {path!r} has {what}. Nothing was sent."
        )
