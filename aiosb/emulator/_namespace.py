"""The namespace as the parts of the emulator see it: :class:`Namespace`, a protocol.

The operations (:mod:`._sending`, :mod:`._delivery`, :mod:`._sessions`,
:mod:`._manage`) and the journal (:mod:`.durable`) work on a namespace through this
protocol; :class:`~._broker.EmulatorNamespace` implements it. So none of them imports
the broker, and the broker imports them all.

Imports: :mod:`._entity`, :mod:`._faults`, :mod:`aiosb._clock` (never the broker).
"""

from __future__ import annotations

from typing import Protocol

from .._clock import LoopClock
from ._entity import EntityHost, EntityJournal, _Entity
from ._faults import Fault, Faults

__all__ = ["Loading", "Namespace"]


class Loading(Protocol):
    """A durable namespace's messages loading after a restart (:mod:`.durable._recovery`)."""

    async def wait(self, ns: Namespace, path: str | None) -> None:
        """Return once what an operation on ``path`` touches is loaded (``None``:
        everything)."""

    def ready(self, entity: _Entity) -> bool:
        """Whether an operation on ``entity`` would neither wait nor be refused."""


class Namespace(EntityHost, Protocol):
    """What the operations and the journal need of a namespace."""

    journal: EntityJournal | None
    """The durable journal, if the namespace is kept on disk (the registry sets it)."""

    recovery: Loading | None
    """Durable mode, after a restart: the messages still loading (``None`` once all are)."""

    @property
    def max_message_size(self) -> int:
        """The largest message and batch, in bytes."""

    @property
    def faults(self) -> Faults:
        """The faults injected into the namespace."""

    @property
    def clock(self) -> LoopClock:
        """The clock the namespace keeps time by."""

    def now(self) -> float:
        """UTC seconds now, after running everything that is due."""

    def _resolve(self, path: str, sub_queue: str | None = None) -> tuple[_Entity, bool]:
        """The entity for ``path`` and whether its dead-letter queue is meant."""

    def _receivable(self, path: str, sub_queue: str | None, operation: str) -> tuple[_Entity, bool]:
        """The entity to receive or settle on, and whether its dead-letter queue is meant."""

    def _down(self, operation: str, path: str) -> dict[int, Fault] | None:
        """The fragments of ``path`` that are down for ``operation`` (``None``: none)."""
