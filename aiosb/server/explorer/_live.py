"""The explorer's live snapshot (:mod:`aiosb.server.explorer`): every namespace's
entities, counts, settings, messages in and out per second, and faults, read at most
once a second and shared by every open page.

Entities are read as ``GET /metrics`` reads them
(:meth:`~aiosb.emulator.EmulatorNamespace.entity_statuses`: no fault check), so the
page keeps showing an entity through its outage.
"""


from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from typing import Any

from ... import emulator
from ...emulator import EntityStatus
from ..http._fault_api import view
from ._operations import plain

#: Points of a chart (one a second).
HISTORY = 60


class Sampler:
    """The namespaces as the page shows them, read at most once a second and shared by
    every open page, with each entity's messages in and out per second over the last
    :data:`HISTORY` seconds.

    In is the sequence numbers an entity gave out (sends, schedules, dead-letter
    copies); out is in less the change of what it holds (a message completed, received,
    expired, or moved to the dead-letter queue). A topic's are its subscriptions'.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int | None, int]] = {}
        self._history: dict[tuple[str, str], deque[tuple[float, float, float]]] = {}
        self._snapshot: dict[str, Any] | None = None
        self._at = -math.inf

    def snapshot(self) -> dict[str, Any]:
        """The namespaces now (or as read less than a second ago)."""
        now = time.monotonic()
        if self._snapshot is None or now - self._at >= 0.95:
            self._snapshot, self._at = self._read(now), now
        return self._snapshot

    def history(self) -> dict[str, list[tuple[float, float, float]]]:
        """Every entity's chart so far, ``{"NS/PATH": [(epoch, in, out), ...]}``."""
        return {f"{ns}/{path}": list(points) for (ns, path), points in self._history.items()}

    def _read(self, now: float) -> dict[str, Any]:
        wall = time.time()
        seen: set[tuple[str, str]] = set()
        out = []
        for ns in sorted(emulator.namespaces(), key=lambda n: n.name.lower()):
            entities = []
            for status in ns.entity_statuses():  # after a durable restart, what is loaded
                key = (ns.name, status.path)
                seen.add(key)
                entities.append(self._entity(status, key, now, wall))
            self._topics_add_up(ns.name, entities, wall)
            out.append({
                "name": ns.name, "tier": ns.tier, "entities": entities,
                "faults": [view(f) for f in ns.faults.active],
            })
        for gone in self._last.keys() - seen:
            self._last.pop(gone, None)
            self._history.pop(gone, None)
        return {"at": wall, "namespaces": out}

    def _entity(self, status: EntityStatus, key: tuple[str, str], now: float,
                wall: float) -> dict[str, Any]:
        counts = status.counts
        held = counts.total_message_count
        numbered = status.numbered
        before = self._last.get(key)
        self._last[key] = (now, numbered, held)
        rate = None
        if before is not None and now > before[0]:
            seconds = now - before[0]
            took = 0 if numbered is None or before[1] is None else numbered - before[1]
            gave = took - (held - before[2])
            rate = (max(0.0, took / seconds), max(0.0, gave / seconds))
            self._history.setdefault(key, deque(maxlen=HISTORY)).append((wall, *rate))
        props = status.description
        return {
            "path": status.path,
            "kind": status.kind,
            "topic": getattr(props, "topic_name", None),
            "counts": {
                "active": counts.active_message_count,
                "scheduled": counts.scheduled_message_count,
                "deferred": counts.deferred_message_count,
                "dead_letter": counts.dead_letter_message_count,
                "transfer": counts.transfer_message_count,
                "transfer_dead_letter": counts.transfer_dead_letter_message_count,
                "total": counts.total_message_count,
            },
            "size": counts.size_in_bytes,
            "subscriptions": counts.subscription_count,
            "fragments": [counts.available_fragments, counts.fragment_count],
            "sessions": bool(getattr(props, "requires_session", False)),
            "settings": {
                f.name: plain(getattr(props, f.name))
                for f in dataclasses.fields(props)
                if f.name not in ("name", "topic_name")
            },
            "rate": rate,
        }

    def _topics_add_up(self, ns: str, entities: list[dict[str, Any]], wall: float) -> None:
        by_topic: dict[str, list[float]] = {}
        for item in entities:
            if item["kind"] == "subscription" and item["rate"] is not None:
                sums = by_topic.setdefault(item["topic"].lower(), [0.0, 0.0])
                sums[0] += item["rate"][0]
                sums[1] += item["rate"][1]
        for item in entities:
            if item["kind"] == "topic":
                got = by_topic.get(item["path"].lower())
                if got is not None:
                    item["rate"] = (got[0], got[1])
                    points = self._history.setdefault((ns, item["path"]), deque(maxlen=HISTORY))
                    points.append((wall, got[0], got[1]))
