"""The partition router alone (aiosb.emulator._partitions): which fragment a message,
a session or a sequence number belongs to (partitioned-entities.md, PT-*)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiosb import Message
from aiosb.emulator._partitions import (
    FRAGMENT_SHIFT,
    by_fragment,
    check_transaction,
    fragment_for,
    fragment_of,
    gather_order,
    home,
    route,
    sequence_numbers,
)
from aiosb.emulator._record import _Record, record_of
from aiosb.errors import InvalidArgument, InvalidOperation

N = 16
keys = st.text(min_size=1, max_size=128)


def record(
    key: str | None = None,
    *,
    session_id: str | None = None,
    partition_key: str | None = None,
    message_id: str = "m",
) -> _Record:
    msg = Message(b"x", session_id=session_id, partition_key=partition_key)
    rec = record_of(msg, message_id, 1)
    rec.key = key
    return rec


def entity(nfrag: int = N, dup_window: float = 0.0, start: int = 0) -> SimpleNamespace:
    return SimpleNamespace(nfrag=nfrag, rr=itertools.count(start), dup_window=dup_window)


def test_the_key_hash_is_the_same_in_every_process() -> None:
    """PT-9: a stable hash (crc32), not Python's per-process salted hash(): a message
    keyed so lands in the same fragment after a restart or in another process."""
    assert [home("order-42", 16), home("cart", 16), home("a", 16)] == [14, 7, 3]
    assert [home("order-42", 2), home("cart", 2)] == [0, 1]  # premium: 2 fragments


@given(keys, st.integers(1, 32))
def test_a_key_always_goes_to_its_home_fragment(key: str, nfrag: int) -> None:
    """PT-6, PT-9: routing a keyed message and placing the session of that id agree, so
    a session's messages are where its store is; every batch, every time."""
    batches = [[record(key), None, record(key)] for _ in range(3)]
    for batch in batches:
        assert route(batch, nfrag, itertools.count(), None) is None
    assert {rec.frag for batch in batches for rec in batch if rec is not None} == {home(key, nfrag)}
    assert 0 <= home(key, nfrag) < nfrag


def test_the_keyless_part_of_a_batch_goes_to_one_fragment_and_batches_rotate() -> None:
    """PT-10: round robin per batch (one fragment for a batch's keyless messages)."""
    rr = itertools.count()
    chosen = []
    for _ in range(N):
        batch = [record(), record(), record("k"), record()]
        assert route(batch, N, rr, None) is None
        keyless = {batch[i].frag for i in (0, 1, 3)}
        assert len(keyless) == 1
        assert batch[2].frag == home("k", N)
        chosen.append(keyless.pop())
    assert sorted(chosen) == list(range(N))  # every fragment takes its turn


def test_keyless_messages_go_round_a_fragment_that_is_down() -> None:
    """PT-10: a keyless batch goes to the next fragment that is up."""
    down = {0: "f0", 1: "f1"}
    batch = [record()]
    assert route(batch, N, itertools.count(0), down) is None
    assert batch[0].frag == 2


def test_a_keyed_message_waits_for_its_fragment() -> None:
    """PT-9: a keyed message is pinned: its fragment down means the batch fails with
    that fragment's fault, and nothing of the batch is re-routed."""
    frag = home("k", N)
    batch = [record(), record("k")]
    assert route(batch, N, itertools.count(), {frag: "fault"}) == "fault"


def test_every_fragment_down_is_the_fault_of_one_of_them() -> None:
    batch = [record()]
    assert route(batch, 4, itertools.count(), {f: f"f{f}" for f in range(4)}) in {
        "f0",
        "f1",
        "f2",
        "f3",
    }


@given(st.integers(0, N - 1), st.integers(0, 1000))
def test_a_sequence_number_names_its_fragment(fragment: int, skip: int) -> None:
    numbers = sequence_numbers(fragment)
    seq = next(itertools.islice(numbers, skip, None))
    assert seq >> FRAGMENT_SHIFT == fragment
    assert fragment_of(seq, N) == fragment
    assert by_fragment([seq, seq], N) == {fragment: [seq, seq]}


def test_grouping_sequence_numbers_by_fragment() -> None:
    first = [next(sequence_numbers(f)) for f in range(3)]
    assert by_fragment([first[2], first[0], first[2] + 1], 3) == {
        2: [first[2], first[2] + 1],
        0: [first[0]],
    }
    assert by_fragment([first[2]], 1) == {0: [first[2]]}  # beyond the last: the last


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "1"])
def test_a_sequence_number_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        by_fragment([bad], N)


def test_forwarding_keeps_the_key() -> None:
    """PT-19: a message forwarded or fanned out to a partitioned entity keeps its key;
    a keyless one gets the target's round robin, or its message id when the target
    detects duplicates (PT-8)."""
    target = entity()
    assert fragment_for(target, record("k")) == home("k", N)
    assert fragment_for(target, record(session_id="s")) == home("s", N)
    assert fragment_for(entity(dup_window=60.0), record(message_id="m1")) == home("m1", N)
    rr_target = entity(start=5)
    assert [fragment_for(rr_target, record()) for _ in range(3)] == [5, 6, 7]
    assert fragment_for(entity(nfrag=1), record("k")) == 0


def test_a_receive_starts_at_a_rotating_fragment() -> None:
    """PT-12: any fragment may yield first; all are asked, each once."""
    live = ["f0", "f1", "f2"]
    rr = itertools.count()
    orders = [gather_order(live, rr) for _ in range(3)]
    assert orders == [["f0", "f1", "f2"], ["f1", "f2", "f0"], ["f2", "f0", "f1"]]


def test_a_transaction_on_a_partitioned_entity_needs_one_key() -> None:
    """PT-16, PT-17: every message needs a key, the same one; a plain entity takes any."""
    check_transaction("q", N, [record("a"), None, record("a")])
    check_transaction("q", 1, [record(), record("a"), record("b")])
    for keyless in ([record(), record()], [record("a"), record()]):
        with pytest.raises(InvalidOperation, match="needs a partition key"):
            check_transaction("q", N, keyless)
    with pytest.raises(InvalidOperation, match="must all be the same"):
        check_transaction("q", N, [record("a"), record("b")])
    sessions = [record("s1", session_id="s1"), record("s2", session_id="s2")]
    with pytest.raises(InvalidOperation, match="PT-17"):
        check_transaction("q", N, sessions)
