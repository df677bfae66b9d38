"""Send-availability pairing: keep sending through an outage of the primary namespace.

``primary.pair(secondary, PairedNamespaceOptions(...))`` gives a
:class:`PairedNamespace`; its senders go to the primary while it works and to backlog
queues in the secondary when it does not, and the syphon moves the backlog home.
See paired-namespaces.md (PN-1 to PN-18, G-1 to G-6).
"""

from __future__ import annotations

from .health import Action, EntityState, Health, Signal, transition
from .options import PairedNamespaceOptions
from .runtime import (
    BACKLOG_QUEUE_PROPERTIES,
    PairedNamespace,
    PairedSender,
    PairingEvent,
    PairingStats,
    is_outage,
)

__all__ = [
    "BACKLOG_QUEUE_PROPERTIES",
    "Action",
    "EntityState",
    "Health",
    "PairedNamespace",
    "PairedNamespaceOptions",
    "PairedSender",
    "PairingEvent",
    "PairingStats",
    "Signal",
    "is_outage",
    "transition",
]
