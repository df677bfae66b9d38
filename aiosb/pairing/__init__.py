"""Send-availability pairing: keep sending through an outage of the primary namespace.

``primary.pair(secondary, PairedNamespaceOptions(...))`` gives a
:class:`PairedNamespace`; its senders go to the primary while it works and to backlog
queues in the secondary when it does not, and the syphon moves the backlog home.
See paired-namespaces.md (PN-1 to PN-18, G-1 to G-6).

The package: :mod:`.health` (the pure failover state machine), :mod:`.options`,
:mod:`.rewrite` (the backlog copy and its restore), :mod:`._common` (events, counters,
helpers shared by the actors), :mod:`.sender` (the paired send and the backlog
rotation), :mod:`.ping` (the ping actor), :mod:`.syphon` (the pumps that move the
backlog home) and :mod:`.runtime` (:class:`PairedNamespace`, which owns them all). It
builds on :mod:`aiosb.client` and never imports the emulator.
"""

from __future__ import annotations

from ._common import BACKLOG_QUEUE_PROPERTIES, PairingEvent, PairingStats, is_outage
from .health import Action, EntityState, Health, Signal, transition
from .options import PairedNamespaceOptions
from .runtime import PairedNamespace
from .sender import PairedSender

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
