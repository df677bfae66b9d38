"""The backlog rotation alone (paired-namespaces.md PN-6 step 4, PN-13): the one set of
backlog queues that every sender of a pairing picks from."""

from __future__ import annotations

import random

from aiosb.pairing.sender import _Rotation

PATHS = [f"contoso/x-servicebus-transfer/{i}" for i in range(4)]
REJOIN = 60.0


def rotation() -> _Rotation:
    return _Rotation(list(PATHS), REJOIN)


def test_pn13_each_pick_is_random_over_the_queues_in_rotation(monkeypatch):
    """PN-13: senders that do not know each other spread over every backlog queue."""
    monkeypatch.setattr(random, "choice", random.Random(13).choice)
    r = rotation()
    picks = [r.pick(0.0, set()) for _ in range(400)]
    assert set(picks) == set(PATHS)
    assert min(picks.count(p) for p in PATHS) > 60  # about 100 each


def test_pn6_step4_a_failed_queue_leaves_the_rotation_until_it_may_rejoin():
    """PN-6 step 4: a queue that failed is not picked by anyone until ``rejoin_after``
    has passed; its removal is counted once however many senders see it fail."""
    r = rotation()
    bad = PATHS[1]
    assert r.fail(bad, 100.0) is True
    assert r.fail(bad, 101.0) is False  # a second sender saw it too: one removal
    assert not r.usable(bad)
    assert bad not in r.active(150.0)
    assert bad not in {r.pick(150.0, set()) for _ in range(200)}
    assert bad in r.active(101.0 + REJOIN)  # may rejoin
    assert r.usable(bad)


def test_a_send_that_succeeds_brings_a_queue_back_at_once():
    r = rotation()
    r.fail(PATHS[0], 0.0)
    assert r.restore(PATHS[0]) is True
    assert r.restore(PATHS[0]) is False  # it was in: nothing to announce
    assert r.active(1.0) == PATHS


def test_pick_leaves_out_the_queues_a_send_tried_and_falls_back_on_removed_ones():
    """A send tries each queue once; when every queue in rotation failed it tries the
    removed ones as a last resort, and gives up (None) when it has tried them all."""
    r = rotation()
    for path in PATHS[:3]:
        r.fail(path, 0.0)
    assert r.pick(1.0, set()) == PATHS[3]
    assert r.pick(1.0, {PATHS[3]}) in PATHS[:3]  # last resort
    assert r.pick(1.0, set(PATHS)) is None
