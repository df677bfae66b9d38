"""``PairedNamespaceOptions``: the classic SDK's ``SendAvailabilityPairedNamespaceOptions``."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from ..errors import InvalidArgument

__all__ = ["PairedNamespaceOptions"]

_SECOND = _dt.timedelta(seconds=1)
_MINUTE = _dt.timedelta(minutes=1)


def _check(name: str, value: object, low: _dt.timedelta, high: _dt.timedelta) -> None:
    if not isinstance(value, _dt.timedelta):
        raise InvalidArgument(f"{name} must be a timedelta, not {value!r}.")
    if not low <= value <= high:
        raise InvalidArgument(f"{name} is {value}; it must be between {low} and {high}.")


@dataclass(frozen=True, slots=True)
class PairedNamespaceOptions:
    """How a pairing behaves (paired-namespaces.md, "Options and their defaults").

    Args:
        backlog_queue_count: Backlog queues in the secondary namespace (> 0).
        failover_interval: How long an entity may keep failing before its sends move to
            the backlog (0 to 60 minutes; 0 fails over on the first failure).
        ping_primary_interval: How often an unavailable entity is pinged (1 second to
            30 minutes).
        enable_syphon: Run the pumps that move backlog messages home.
        syphon_retry_interval: Wait before retrying a failed move (1 second to 2 minutes).
        ping_timeout: How long one ping may take.
        syphon_receive_wait: How long an idle syphon long-polls each backlog queue
            (15 minutes by default; PN-16).

    Raises:
        InvalidArgument: A value out of its range; the sentence names it and the range.
    """

    backlog_queue_count: int = 10
    failover_interval: _dt.timedelta = _MINUTE
    ping_primary_interval: _dt.timedelta = _MINUTE
    enable_syphon: bool = False
    syphon_retry_interval: _dt.timedelta = _SECOND
    ping_timeout: _dt.timedelta = 2 * _MINUTE
    syphon_receive_wait: _dt.timedelta = 15 * _MINUTE

    def __post_init__(self) -> None:
        count = self.backlog_queue_count
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise InvalidArgument(f"backlog_queue_count is {count!r}; it must be more than 0.")
        _check("failover_interval", self.failover_interval, _dt.timedelta(0), 60 * _MINUTE)
        _check("ping_primary_interval", self.ping_primary_interval, _SECOND, 30 * _MINUTE)
        _check("syphon_retry_interval", self.syphon_retry_interval, _SECOND, 2 * _MINUTE)
        _check("ping_timeout", self.ping_timeout, _SECOND, 30 * _MINUTE)
        _check("syphon_receive_wait", self.syphon_receive_wait, _SECOND, 60 * _MINUTE)
        if not isinstance(self.enable_syphon, bool):
            raise InvalidArgument(
                f"enable_syphon must be True or False, not {self.enable_syphon!r}."
            )
