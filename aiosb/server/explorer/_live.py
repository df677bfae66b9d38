"""The explorer's live snapshot (:mod:`._explorer`): every namespace's entities, counts,
settings, messages in and out per second, and faults, read at most once a second and
shared by every open page.

Counts are read as ``GET /metrics`` reads them (the entity table, without fault
checks), so the page keeps showing an entity through its outage.
"""


from __future__ import annotations

import dataclasses
import math
import re
import time
from collections import deque
from typing import Any

from ... import emulator
from ...emulator import EmulatorNamespace
from ...emulator._manage import runtime
from ._operations import plain

#: Points of a chart (one a second).
HISTORY = 60
_COUNT = re.compile(r"count\((\d+)\)")


def _numbered(entity: Any) -> int | None:
    """How many sequence numbers ``entity`` has given out (its messages in, dead-letter
    copies included), or ``None`` if that cannot be read. Each fragment numbers with an
    :func:`itertools.count`, whose ``repr`` is the one view of its next value that does
    not take it: read so, the broker's hot path pays nothing for the chart."""
    total = 0
    for counter in getattr(entity, "seqs", ()):
        found = _COUNT.fullmatch(repr(counter))
        if found is None:
            return None
        total += int(found[1])
    return total


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
            recovery = ns.recovery  # a durable restart's load: what is not in is left out
            for entity in sorted(ns._entities.values(), key=lambda e: e.path.lower()):
                if entity.deleted or (recovery is not None and not recovery.ready(entity)):
                    continue
                key = (ns.name, entity.path)
                seen.add(key)
                entities.append(self._entity(ns, entity, key, now, wall))
            self._topics_add_up(ns.name, entities, wall)
            out.append({
                "name": ns.name, "tier": ns.tier, "entities": entities,
                "faults": faults_of(ns),
            })
        for gone in self._last.keys() - seen:
            self._last.pop(gone, None)
            self._history.pop(gone, None)
        return {"at": wall, "namespaces": out}

    def _entity(self, ns: EmulatorNamespace, entity: Any, key: tuple[str, str], now: float,
                wall: float) -> dict[str, Any]:
        counts = runtime(ns, entity.path)
        held = counts.total_message_count
        numbered = _numbered(entity)
        before = self._last.get(key)
        self._last[key] = (now, numbered, held)
        rate = None
        if before is not None and now > before[0]:
            seconds = now - before[0]
            took = 0 if numbered is None or before[1] is None else numbered - before[1]
            gave = took - (held - before[2])
            rate = (max(0.0, took / seconds), max(0.0, gave / seconds))
            self._history.setdefault(key, deque(maxlen=HISTORY)).append((wall, *rate))
        props = entity.description()
        return {
            "path": entity.path,
            "kind": entity.kind,
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


def faults_of(ns: EmulatorNamespace) -> list[dict[str, Any]]:
    """The namespace's active faults."""
    return [
        {"id": f.id, "entity": f.entity, "kind": f.kind, "operations": sorted(f.operations),
         "seconds": f.seconds, "fragment": f.fragment}
        for f in ns.faults.active
    ]
