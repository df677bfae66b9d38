"""A message store alone (aiosb.emulator._store): no namespace, no entity, no clock.

The store sees its surroundings through small protocols; the fakes below are all it
needs, and time is passed in explicitly, so every deadline is exact.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aiosb import Message
from aiosb.emulator._partitions import sequence_numbers
from aiosb.emulator._record import (
    AVAILABLE,
    LOCKED,
    MAX_DELIVERY_EXCEEDED,
    SCHEDULED,
    TTL_EXPIRED,
    _Ids,
    _Record,
    received_messages,
    record_of,
)
from aiosb.emulator._store import _Store
from aiosb.message import ReceivedMessage

LOCK = 30.0


class Host:
    """The namespace, as a store sees it: a timer, lock-token ids, no journal."""

    name = "ns"
    journal = None

    def __init__(self) -> None:
        self._ids = _Ids()
        self.registered: list[tuple[float, Any]] = []

    def _register(self, when: float, target: Any) -> None:
        self.registered.append((when, target))


class Owner:
    """The entity, as a store sees it; it records what the store hands back to it."""

    def __init__(self, max_delivery_count: int = 10, dead_lettering: bool = True) -> None:
        self.ns = Host()
        self.path = self.key = "q"
        self.deleted = False
        self.props = SimpleNamespace(
            max_delivery_count=max_delivery_count,
            dead_lettering_on_message_expiration=dead_lettering,
        )
        self.seqs = [sequence_numbers(0)]
        self.session_waiters: list[Any] = []
        self.bytes = 0
        self.delivered: list[_Record] = []
        self.dead: list[tuple[str, str | None]] = []

    def deliver(self, rec: _Record, now: float, hops: int, keep_seq: bool = False) -> None:
        self.delivered.append(rec)

    def dead_letter(
        self, fragment: int, rec: _Record, reason: str | None, description: str | None, now: float
    ) -> None:
        self.dead.append((rec.message_id, reason))


def make_store(**owner: Any) -> tuple[_Store, Owner]:
    entity = Owner(**owner)
    return _Store(entity.ns, entity, is_dlq=False), entity


def put(store: _Store, name: str, now: float = 0.0, expires: float | None = None) -> _Record:
    rec = record_of(Message(name.encode()), name, 10)
    rec.seq = next(store.seqs)
    rec.enqueued = now
    rec.expires = expires
    store.add(rec, now)
    return rec


def take(store: _Store, count: int, lock: float | None, now: float) -> list[ReceivedMessage]:
    """What a receive of ``count`` hands out (a store hands out records, read at once)."""
    return received_messages(store.take(count, lock, now), store.path)


def take_deferred(
    store: _Store, seqs: list[int], lock: float | None, now: float
) -> list[ReceivedMessage]:
    return received_messages(store.take_deferred(seqs, lock, now), store.path)


def names(received: list[ReceivedMessage]) -> list[str | None]:
    return [m.message_id for m in received]


def locked(store: _Store, got: ReceivedMessage) -> _Record:
    """The record ``got`` (handed out with a lock) stands for."""
    assert got.lock_token is not None
    return store.locked[got.lock_token]


def test_take_hands_out_in_sequence_order_and_locks_what_it_hands_out() -> None:
    store, entity = make_store()
    for name in "abc":
        put(store, name)
    assert entity.bytes == 30 and store.size == 30
    got = take(store, 2, LOCK, now=100.0)
    assert names(got) == ["a", "b"]
    assert all(m.locked_until_timestamp == 100.0 + LOCK for m in got)
    assert [m.delivery_count for m in got] == [1, 1]
    assert len({m.lock_token for m in got}) == 2
    assert set(store.locked) == {m.lock_token for m in got}
    assert names(take(store, 10, LOCK, now=100.0)) == ["c"]  # a and b stay locked
    assert take(store, 10, LOCK, now=100.0) == []


def test_an_abandoned_message_comes_back_before_later_ones() -> None:
    """Returned messages (a heap) and new ones (a deque) merge in sequence order."""
    store, _ = make_store()
    for name in "abc":
        put(store, name)
    a, b = take(store, 2, LOCK, now=0.0)
    store.unlock(locked(store, b), now=1.0)
    store.unlock(locked(store, a), now=1.0)
    got = take(store, 10, LOCK, now=1.0)
    assert names(got) == ["a", "b", "c"]
    assert [m.delivery_count for m in got] == [2, 2, 1]


def test_receive_and_delete_removes_what_it_hands_out() -> None:
    store, entity = make_store()
    put(store, "a")
    (got,) = take(store, 1, None, now=0.0)
    assert got.lock_token is None and got.delivery_count == 1
    assert store.records == {} and entity.bytes == 0 and store.size == 0


def test_a_lock_ends_at_its_instant_and_the_message_is_available_again() -> None:
    store, entity = make_store()
    put(store, "a")
    take(store, 1, LOCK, now=0.0)
    assert (LOCK, store) in entity.ns.registered  # the namespace timer is asked for it
    store.on_due(LOCK - 0.001)
    assert take(store, 1, LOCK, now=LOCK - 0.001) == []
    store.on_due(LOCK)
    assert store.locked == {}
    (again,) = take(store, 1, LOCK, now=LOCK)
    assert again.delivery_count == 2


def test_a_renewed_lock_outlives_its_first_end() -> None:
    """The first lock's timeline entry is skipped once the lock was renewed (lazy
    deletion), and the renewed end unlocks."""
    store, _ = make_store()
    put(store, "a")
    (got,) = take(store, 1, LOCK, now=0.0)
    rec = locked(store, got)
    store.renew(2 * LOCK, [rec])
    store.on_due(LOCK)
    assert rec.state == LOCKED
    store.on_due(2 * LOCK)
    assert rec.state == AVAILABLE and store.locked == {}


def test_expiries_run_in_order_of_their_instants_not_of_sequence_numbers() -> None:
    """EX-2, EX-10: each message expires at its own instant; dead-lettered on expiry."""
    store, entity = make_store()
    put(store, "late", expires=20.0)
    put(store, "early", expires=5.0)
    put(store, "middle", expires=10.0)
    put(store, "never")
    store.on_due(4.999)
    assert entity.dead == []
    store.on_due(5.0)
    assert entity.dead == [("early", TTL_EXPIRED)]
    store.on_due(25.0)
    assert entity.dead == [("early", TTL_EXPIRED), ("middle", TTL_EXPIRED), ("late", TTL_EXPIRED)]
    assert [r.message_id for r in store.records.values()] == ["never"]
    assert store.due == float("inf")


def test_an_expired_message_is_never_handed_out_even_before_the_timer_runs() -> None:
    """EX-2: a receive at or past the expiry instant skips (and expires) the message."""
    store, entity = make_store(dead_lettering=False)
    put(store, "a", expires=5.0)
    put(store, "b")
    assert names(take(store, 10, LOCK, now=5.0)) == ["b"]
    assert entity.dead == [] and "a" not in {r.message_id for r in store.records.values()}


def test_messages_gone_from_the_front_of_the_line_are_passed_over_and_the_rest_taken() -> None:
    """A take hands out the front of the line at once when nothing is due (#16); records
    expired off the line by the timer (still in it, no longer available) send it the
    long way, which passes over them: every live message is handed out, in order."""
    store, _ = make_store(dead_lettering=False)
    for name in "abc":
        put(store, name, expires=5.0)
    for name in "defg":
        put(store, name)
    assert AVAILABLE == 0  # the quick take tests a batch's states with any()
    store.on_due(5.0)  # a, b, c expire: gone, though the line still holds them
    assert store.due == float("inf") and len(store.ready) == 7
    assert names(take(store, 5, LOCK, now=6.0)) == ["d", "e", "f", "g"]
    assert take(store, 10, LOCK, now=6.0) == [] and len(store.records) == 4
    put(store, "h")  # the line holds h alone now
    assert names(take(store, 10, LOCK, now=6.0)) == ["h"]


def test_a_locked_message_expires_when_its_lock_ends_not_before() -> None:
    """EX-3, EX-11: expiry does not touch a locked message; when the lock ends the
    message, past its expiry, is dead-lettered for expiry."""
    store, entity = make_store()
    rec = put(store, "a", expires=10.0)
    take(store, 1, LOCK, now=0.0)
    store.on_due(10.0)
    assert rec.state == LOCKED and entity.dead == []
    store.on_due(LOCK)
    assert entity.dead == [("a", TTL_EXPIRED)]
    assert store.records == {}


def test_the_last_allowed_delivery_dead_letters_on_abandon() -> None:
    store, entity = make_store(max_delivery_count=2)
    put(store, "a")
    for _ in range(2):
        (got,) = take(store, 1, LOCK, now=0.0)
        store.unlock(locked(store, got), now=0.0)
    assert entity.dead == [("a", MAX_DELIVERY_EXCEEDED)]
    assert store.records == {} and entity.bytes == 0


def test_a_scheduled_message_is_handed_to_its_entity_at_its_enqueue_time() -> None:
    """EX-5: held (counted as scheduled, not available) until its instant."""
    store, entity = make_store()
    rec = record_of(Message(b"s"), "s", 10)
    rec.seq = next(store.seqs)
    rec.enqueued = 50.0
    store.add_scheduled(rec)
    assert rec.state == SCHEDULED and store.counts() == (0, 0, 1)
    assert take(store, 1, LOCK, now=49.0) == []
    store.on_due(49.999)
    assert entity.delivered == []
    store.on_due(50.0)
    assert entity.delivered == [rec] and store.counts() == (0, 0, 0)
    assert store.records == {}


def test_deferred_messages_are_taken_by_sequence_number_only() -> None:
    store, _ = make_store()
    rec = put(store, "a")
    put(store, "b")
    (got, _b) = take(store, 2, LOCK, now=0.0)
    store.defer(locked(store, got), now=0.0)
    assert store.counts() == (1, 1, 0)
    assert take(store, 10, LOCK, now=0.0) == []
    (again,) = take_deferred(store, [rec.seq], LOCK, now=0.0)
    assert again.message_id == "a" and again.state == "deferred"


@pytest.mark.parametrize("state", ["missing", "not deferred"])
def test_taking_a_deferred_message_that_is_not_deferred_is_message_not_found(state: str) -> None:
    from aiosb.errors import MessageNotFound

    store, _ = make_store()
    rec = put(store, "a")
    seq = rec.seq + 1 if state == "missing" else rec.seq
    with pytest.raises(MessageNotFound):
        take_deferred(store, [seq], LOCK, now=0.0)


def test_lock_tokens_made_for_a_batch_are_unique_guids_from_the_same_counter():
    """#16: a receive makes its batch's lock tokens at once, in blocks; they are
    GUID-shaped and no token is made twice, one at a time or in batches of any size
    (one larger than a block included)."""
    import re
    import uuid

    from aiosb.emulator._record import _Ids

    ids = _Ids()
    first = ids()
    batch = ids.many(3)
    big = ids.many(5000)
    after = ids()
    tokens = [first, *batch, *big, after]
    assert len(set(tokens)) == len(tokens) == 5005
    assert all(re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", t) for t in tokens)
    numbers = [uuid.UUID(t).int & (2**48 - 1) for t in batch]
    assert numbers == [numbers[0], numbers[0] + 1, numbers[0] + 2]
    assert ids.many(0) == []
