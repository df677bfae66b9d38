"""The entity health machine, table-driven, with no event loop (style lesson 3)."""

from __future__ import annotations

import pytest

from aiosb.pairing import Action, EntityState, Health, Signal, transition

H, S, F = Health.HEALTHY, Health.SUSPECT, Health.FAILED_OVER
INTERVAL = 60.0

# (health, suspect_since, signal, now) -> (health, suspect_since, actions)
TABLE = [
    # PN-6: a failure starts the timer; success resets it.
    (H, None, Signal.SEND_OK, 0, H, None, ()),
    (H, None, Signal.SEND_FAILED, 10, S, 10, (Action.START_TIMER,)),
    (S, 10, Signal.SEND_OK, 20, H, None, (Action.CANCEL_TIMER,)),
    (S, 10, Signal.SEND_FAILED, 69.9, S, 10, ()),
    (S, 10, Signal.SEND_FAILED, 70, F, None, (Action.CANCEL_TIMER, Action.START_PING)),
    (S, 10, Signal.INTERVAL_ELAPSED, 70, F, None, (Action.CANCEL_TIMER, Action.START_PING)),
    (S, 10, Signal.INTERVAL_ELAPSED, 50, S, 10, ()),
    # PN-10: only a success brings a failed-over entity back, and then at once.
    (F, None, Signal.SEND_FAILED, 100, F, None, ()),
    (F, None, Signal.PING_FAILED, 100, F, None, ()),
    (F, None, Signal.INTERVAL_ELAPSED, 100, F, None, ()),
    (F, None, Signal.PING_OK, 100, H, None, (Action.STOP_PING,)),
    (F, None, Signal.SEND_OK, 100, H, None, (Action.STOP_PING,)),
    # mark_healthy, from every state.
    (H, None, Signal.MARK_HEALTHY, 0, H, None, ()),
    (S, 10, Signal.MARK_HEALTHY, 20, H, None, (Action.CANCEL_TIMER,)),
    (F, None, Signal.MARK_HEALTHY, 20, H, None, (Action.STOP_PING,)),
    # Pings and timers mean nothing to a healthy entity.
    (H, None, Signal.PING_OK, 0, H, None, ()),
    (H, None, Signal.PING_FAILED, 0, H, None, ()),
    (H, None, Signal.INTERVAL_ELAPSED, 0, H, None, ()),
    (S, 10, Signal.PING_OK, 20, S, 10, ()),
    (S, 10, Signal.PING_FAILED, 20, S, 10, ()),
]


@pytest.mark.parametrize(("health", "since", "signal", "now", "new", "new_since", "actions"), TABLE)
def test_transition_table(health, since, signal, now, new, new_since, actions):
    state, done = transition(EntityState(health, since), signal, now, INTERVAL)
    assert state == EntityState(new, new_since)
    assert done == actions


def test_a_zero_interval_fails_over_on_the_first_failure():
    """PN-6: a failover_interval of zero fails over on the first non-transient failure."""
    state, actions = transition(EntityState(), Signal.SEND_FAILED, 5.0, 0.0)
    assert state.health is Health.FAILED_OVER
    assert actions == (Action.START_PING,)


def test_the_table_covers_every_state_and_signal():
    """Every (health, signal) pair has a row above, so a new state or signal cannot go
    untested (this used to check only the types of the outcome)."""
    covered = {(row[0], row[2]) for row in TABLE}
    missing = [(h.value, s.value) for h in Health for s in Signal if (h, s) not in covered]
    assert missing == []
