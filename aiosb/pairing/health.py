"""Entity health: the failover state machine of one entity of a pairing.

The machine is a documented :class:`Health` enum and a pure, synchronous
:func:`transition` from (state, signal, now) to (new state, actions). The async runtime
only performs the actions; a table-driven test exercises the machine with no loop.

::

    HEALTHY --send failed--> SUSPECT --failover_interval passed with no success--> FAILED_OVER
       ^                        |                                                       |
       +------send ok-----------+                                                       |
       +--------------------------ping ok / send ok / mark healthy----------------------+

With ``failover_interval == 0`` the first failure goes straight to FAILED_OVER (PN-6).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Action", "EntityState", "Health", "Signal", "transition"]


class Health(enum.Enum):
    """Where an entity's sends go."""

    HEALTHY = "healthy"
    """Sends go to the primary; nothing else happens (S-2)."""
    SUSPECT = "suspect"
    """A send failed with a non-transient error or a timeout; the failover timer runs,
    and sends keep trying the primary (with backoff) until it passes."""
    FAILED_OVER = "failed_over"
    """Sends go to the backlog queues; a ping actor probes the primary (PN-10)."""


class Signal(enum.Enum):
    """Everything that can change an entity's health (PN-6, PN-10)."""

    SEND_OK = "send_ok"
    SEND_FAILED = "send_failed"  # non-transient error or timeout (never busy/unauthorized)
    INTERVAL_ELAPSED = "interval_elapsed"
    PING_OK = "ping_ok"
    PING_FAILED = "ping_failed"
    MARK_HEALTHY = "mark_healthy"


class Action(enum.Enum):
    """What the runtime does after a transition."""

    START_TIMER = "start_timer"  # fire INTERVAL_ELAPSED at suspect_since + interval
    CANCEL_TIMER = "cancel_timer"
    START_PING = "start_ping"
    STOP_PING = "stop_ping"


@dataclass(frozen=True, slots=True)
class EntityState:
    """An entity's health, and since when it has been failing (SUSPECT)."""

    health: Health = Health.HEALTHY
    suspect_since: float | None = None


HEALTHY = EntityState()


def transition(
    state: EntityState, signal: Signal, now: float, failover_interval: float
) -> tuple[EntityState, tuple[Action, ...]]:
    """The next state and the actions to perform; pure, no I/O.

    Args:
        state: The current state.
        signal: What happened.
        now: When (seconds, any consistent clock).
        failover_interval: Seconds of failure before failover engages.
    """
    health = state.health
    if signal is Signal.MARK_HEALTHY:
        if health is Health.SUSPECT:
            return HEALTHY, (Action.CANCEL_TIMER,)
        if health is Health.FAILED_OVER:
            return HEALTHY, (Action.STOP_PING,)
        return state, ()
    if health is Health.HEALTHY:
        if signal is Signal.SEND_FAILED:
            if failover_interval <= 0:
                return EntityState(Health.FAILED_OVER), (Action.START_PING,)
            return EntityState(Health.SUSPECT, now), (Action.START_TIMER,)
        return state, ()
    if health is Health.SUSPECT:
        if signal is Signal.SEND_OK:
            return HEALTHY, (Action.CANCEL_TIMER,)
        if signal in (Signal.SEND_FAILED, Signal.INTERVAL_ELAPSED):
            since = state.suspect_since  # set whenever health is SUSPECT
            if since is not None and now - since >= failover_interval:
                return EntityState(Health.FAILED_OVER), (Action.CANCEL_TIMER, Action.START_PING)
        return state, ()
    # FAILED_OVER: only a success brings it back.
    if signal in (Signal.PING_OK, Signal.SEND_OK):
        return HEALTHY, (Action.STOP_PING,)
    return state, ()
