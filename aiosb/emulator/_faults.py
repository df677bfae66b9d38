"""Fault injection for emulator namespaces: outages, timeouts, transient errors, delays."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..errors import EntityUnavailable, InvalidArgument, PartitionUnavailable, TransientError

__all__ = ["OPERATIONS", "Fault", "FaultKind", "Faults"]

FaultKind = Literal["unavailable", "timeout", "transient", "delay"]
#: Operation groups a fault can cover: ``send`` (send, schedule, cancel), ``receive``
#: (receive, peek, settle, renew) and ``manage`` (management and counts).
OPERATIONS = ("send", "receive", "manage")
_KINDS = ("unavailable", "timeout", "transient", "delay")
_ids = itertools.count(1)


@dataclass(eq=False)
class Fault:
    """One injected fault; a handle that heals it, usable as a (async) context manager.

    Attributes:
        id: Unique id (the HTTP fault endpoint returns it).
        entity: The entity path it covers (and everything below it: subscriptions,
            dead-letter queues), or ``None`` for the whole namespace.
        kind: ``unavailable`` raises :class:`~aiosb.errors.EntityUnavailable` (a
            non-transient outage); ``timeout`` makes operations hang until healed, so the
            caller's operation timeout ends them; ``transient`` raises
            :class:`~aiosb.errors.TransientError`; ``delay`` adds ``seconds`` of latency.
        operations: The operation groups it covers.
        seconds: The latency of a ``delay`` fault.
        fragment: For :meth:`Faults.fail_fragment`, the fragment (partition) index that
            is down; the rest of the entity stays available (PT-1, PT-9, PT-10).
    """

    entity: str | None
    kind: FaultKind
    operations: frozenset[str]
    seconds: float = 0.0
    fragment: int | None = None
    id: str = field(default_factory=lambda: str(next(_ids)))
    _owner: Faults | None = field(default=None, repr=False)
    _healed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def active(self) -> bool:
        """Whether the fault is still in force."""
        return not self._healed.is_set()

    def heal(self) -> None:
        """End this fault (idempotent)."""
        if self._owner is not None:
            self._owner._remove(self)

    def covers(self, operation: str, path: str) -> bool:
        """Whether the fault applies to ``operation`` on the (lower-case) ``path``."""
        if operation not in self.operations:
            return False
        entity = self.entity
        return entity is None or path == entity or path.startswith(entity + "/")

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()

    async def __aenter__(self) -> Fault:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.heal()


class Faults:
    """The faults in force on one emulator namespace.

    ``aiosb.emulator.namespace("contoso").faults`` is the entry point of the fault
    injection API; the emulator server exposes the same at ``/{namespace}/$faults``.
    """

    def __init__(
        self,
        namespace: str,
        on_change: Callable[[], None],
        fragment_count: Callable[[str], int] | None = None,
    ) -> None:
        self._namespace = namespace
        self._on_change = on_change
        self._fragment_count = fragment_count
        self.active: list[Fault] = []

    def __repr__(self) -> str:
        return f"<Faults {self._namespace}: {len(self.active)} active>"

    def fail(
        self,
        entity: str | None = None,
        *,
        kind: FaultKind = "unavailable",
        operations: Iterable[str] = OPERATIONS,
    ) -> Fault:
        """Take an entity (or, with ``entity=None``, the whole namespace) down.

        Args:
            entity: Entity path; its subscriptions and dead-letter queue are covered too.
            kind: ``"unavailable"``, ``"timeout"`` or ``"transient"``.
            operations: Any of ``"send"``, ``"receive"``, ``"manage"``.

        Returns:
            The fault, which heals with ``.heal()`` or on leaving ``with``.

        Raises:
            InvalidArgument: An unknown kind or operation.
        """
        if kind not in ("unavailable", "timeout", "transient"):
            raise InvalidArgument(
                f"fault kind is {kind!r}; it must be 'unavailable', 'timeout' or 'transient'."
            )
        return self._add(Fault(self._entity(entity), kind, self._operations(operations)))

    def fail_fragment(
        self,
        entity: str,
        index: int,
        *,
        kind: FaultKind = "unavailable",
        operations: Iterable[str] = OPERATIONS,
    ) -> Fault:
        """Take one fragment (partition) of a partitioned entity down.

        Messages pinned to it by a key fail to send with
        :class:`~aiosb.errors.PartitionUnavailable` and never move (PT-9); keyless sends
        go to the other fragments (PT-10); receives gather from the fragments that are up
        (PT-12); management of the entity fails while it lasts (PT-14). The fragments of
        a topic's subscriptions share their topic's fragment faults.

        Args:
            entity: A partitioned queue or topic.
            index: The fragment, from 0 to the entity's fragment count minus one.
            kind: ``"unavailable"`` (the default), ``"timeout"`` (operations that need the
                fragment hang until healed) or ``"transient"``.
            operations: Any of ``"send"``, ``"receive"``, ``"manage"``.

        Raises:
            InvalidArgument: Not a partitioned entity, an index out of range, or an
                unknown kind or operation.
        """
        if kind not in ("unavailable", "timeout", "transient"):
            raise InvalidArgument(
                f"fault kind is {kind!r}; it must be 'unavailable', 'timeout' or 'transient'."
            )
        key = self._entity(entity)
        if key is None:
            raise InvalidArgument("fail_fragment needs an entity path.")
        count = self._fragment_count(entity) if self._fragment_count else 1
        if count == 1:
            raise InvalidArgument(
                f"{entity!r} is not partitioned: only partitioned entities have fragments "
                "to fail; use fail() for the whole entity."
            )
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise InvalidArgument(
                f"fragment index is {index!r}; {entity!r} has {count} fragments,"
                f" so it must be between 0 and {count - 1}."
            )
        fault = Fault(key, kind, self._operations(operations), fragment=index)
        return self._add(fault)

    def fragment_faults(self, operation: str, path: str) -> dict[int, Fault]:
        """The down fragments of ``path`` for ``operation``, by index."""
        key = path.lower()
        return {
            f.fragment: f
            for f in self.active
            if f.fragment is not None and f.covers(operation, key)
        }

    async def apply(self, fault: Fault, operation: str, path: str) -> None:
        """Raise (or, for a timeout, wait out) a fragment fault that ``operation`` met."""
        if fault.kind == "timeout":
            await fault._healed.wait()
        elif fault.kind == "transient":
            raise TransientError(
                f"A transient error interrupted {operation} on fragment {fault.fragment} of "
                f"{path!r} (injected fault {fault.id}); try again."
            )
        else:
            raise PartitionUnavailable(
                f"Fragment {fault.fragment} of {path!r} in {self._namespace!r} is unavailable "
                f"(injected fault {fault.id}); {operation} needs it and cannot go elsewhere."
            )

    def delay(
        self, entity: str | None, seconds: float, *, operations: Iterable[str] = OPERATIONS
    ) -> Fault:
        """Add ``seconds`` of latency to every covered operation on ``entity``."""
        if not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
            raise InvalidArgument(f"delay is {seconds!r} seconds; it must be between 0 and 3600.")
        return self._add(
            Fault(self._entity(entity), "delay", self._operations(operations), float(seconds))
        )

    def heal(self, entity: str | None = None) -> int:
        """Heal every fault on ``entity`` (all faults when ``None``); return how many."""
        key = self._entity(entity)
        gone = [f for f in self.active if key is None or f.entity == key]
        for fault in gone:
            self._remove(fault)
        return len(gone)

    def get(self, fault_id: str) -> Fault | None:
        """The active fault with this id, if any."""
        return next((f for f in self.active if f.id == fault_id), None)

    async def check(self, operation: str, path: str) -> None:
        """Apply the faults that cover ``operation`` on ``path``; called by the broker."""
        key = path.lower()
        for fault in list(self.active):
            if fault.fragment is not None or not fault.covers(operation, key):
                continue
            if fault.kind == "delay":
                await asyncio.sleep(fault.seconds)
            elif fault.kind == "unavailable":
                where = f"entity {path!r}" if fault.entity else "namespace"
                raise EntityUnavailable(
                    f"The {where} of {self._namespace!r} is unavailable "
                    f"(injected fault {fault.id}); {operation} failed."
                )
            elif fault.kind == "transient":
                raise TransientError(
                    f"A transient error interrupted {operation} on {path!r} "
                    f"(injected fault {fault.id}); try again."
                )
            else:  # timeout: no answer until healed
                await fault._healed.wait()

    def _entity(self, entity: str | None) -> str | None:
        if entity is None:
            return None
        if not isinstance(entity, str) or not entity:
            raise InvalidArgument(f"a fault's entity must be a path or None, not {entity!r}.")
        return entity.lower()

    @staticmethod
    def _operations(operations: Iterable[str]) -> frozenset[str]:
        if isinstance(operations, str):
            operations = (operations,)
        ops = frozenset(operations)
        unknown = sorted(ops - set(OPERATIONS))
        if unknown or not ops:
            raise InvalidArgument(
                f"fault operations {sorted(ops)} are not valid; use any of {', '.join(OPERATIONS)}."
            )
        return ops

    def _add(self, fault: Fault) -> Fault:
        fault._owner = self
        self.active.append(fault)
        self._on_change()
        return fault

    def _remove(self, fault: Fault) -> None:
        if fault in self.active:
            self.active.remove(fault)
        fault._healed.set()
        self._on_change()
