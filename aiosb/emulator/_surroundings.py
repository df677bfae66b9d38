"""What a store knows of its surroundings: the namespace (:class:`StoreHost`), its entity
(:class:`StoreOwner`), its session (:class:`StoreSession`), the journal
(:class:`Recorder`) and the timer's targets (:class:`Due`): small protocols, so that
:mod:`._store` never imports the entity or the broker.

Imports: :mod:`._record` only (a store is typed ``Any`` here: :mod:`._store` imports
this module).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ._record import _Ids, _Record

__all__ = ["Due", "Recorder", "StoreHost", "StoreOwner", "StoreSession"]


class Due(Protocol):
    """Something with deadlines on the namespace's timer."""

    def on_due(self, now: float) -> None:
        """Run what is due at ``now``."""


class Recorder(Protocol):
    """The durable journal, as a store reports to it (:class:`~.durable.Journal`)."""

    def record(self, store: Any, rec: _Record) -> None:
        """``rec`` was added, changed or removed in ``store`` (a :class:`~._store._Store`)."""

    def records(self, store: Any, recs: Iterable[_Record]) -> None:
        """``recs`` were added, changed or removed in ``store``: :meth:`record` for a
        batch, in one call."""

    def locked(self, store: Any, recs: list[_Record]) -> None:
        """``recs`` were locked in ``store``, or their locks renewed: nothing else of
        them changed."""


class StoreHost(Protocol):
    """What a store needs of its namespace."""

    @property
    def name(self) -> str:
        """The namespace name."""

    @property
    def journal(self) -> Recorder | None:
        """The durable journal, if the namespace is kept on disk."""

    @property
    def _ids(self) -> _Ids:
        """Makes new lock tokens (one per call, or a batch's with ``many``)."""

    def _register(self, when: float, target: Due) -> None:
        """Call ``target.on_due`` once ``when`` has come."""


class StoreSession(Protocol):
    """What a store needs of the session it belongs to."""

    @property
    def id(self) -> str:
        """The session id."""

    def expire(self, now: float) -> None:
        """A message of the session is past its expiry: the session expires (EX-12)."""


class StoreOwner(Protocol):
    """What a store needs of its entity (an :class:`~._entity._Entity`)."""

    @property
    def ns(self) -> StoreHost:
        """The namespace."""

    @property
    def path(self) -> str:
        """The entity path."""

    @property
    def key(self) -> str:
        """The entity path in lower case."""

    @property
    def deleted(self) -> bool:
        """Whether the entity was deleted."""

    @property
    def props(self) -> Any:
        """The entity description (max_delivery_count, dead-lettering on expiry)."""

    @property
    def seqs(self) -> list[Iterator[int]]:
        """The sequence number counter of each fragment."""

    @property
    def session_waiters(self) -> list[asyncio.Future[None]]:
        """Receivers waiting for the next available session."""

    bytes: int
    """The bytes held over every store of the entity."""

    def deliver(self, rec: _Record, now: float, hops: int, keep_seq: bool = False) -> None:
        """Take ``rec`` in: forward it, fan it out, or store it."""

    def dead_letter(
        self,
        fragment: int,
        rec: _Record,
        reason: str | None,
        description: str | None,
        now: float,
    ) -> None:
        """Dead-letter ``rec`` (already removed from a store of ``fragment``)."""
