"""Operations in flight: the tasks running operations of one owner, so closing it ends them.

Owners are a :class:`~aiosb.Namespace`, a :class:`~aiosb.Receiver` and a pairing
(:class:`~aiosb.pairing.PairedNamespace`). Imports only :mod:`aiosb.errors`: this is
the bottom of the client.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .errors import ClientClosed

__all__ = ["InFlight"]


class InFlight:
    """The tasks running operations of one object (a namespace, receiver or pairing), so
    that closing it ends them all, promptly, with :class:`~aiosb.errors.ClientClosed`.

    An operation registers its task with :meth:`enter` and :meth:`exit`; :meth:`close`
    cancels every registered task; the operation turns that cancellation into
    ``ClientClosed`` with :meth:`closed_error` (a caller's own cancellation stays one).
    """

    __slots__ = ("cancelled", "reason", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[asyncio.Task[Any], int] = {}
        self.cancelled: set[asyncio.Task[Any]] = set()
        self.reason: str | None = None

    def enter(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            tasks = self.tasks
            tasks[task] = tasks.get(task, 0) + 1

    def exit(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            tasks = self.tasks
            left = tasks.pop(task) - 1  # one lookup when the task had one operation
            if left:
                tasks[task] = left

    def close(self, reason: str) -> None:
        """Cancel every operation in flight (except the caller's own)."""
        self.reason = reason
        current = asyncio.current_task()
        for task in list(self.tasks):
            if task is not current and task not in self.cancelled:
                self.cancelled.add(task)
                task.cancel()

    def closed_error(self, task: asyncio.Task[Any] | None) -> ClientClosed | None:
        """After a CancelledError in ``task``: the ClientClosed to raise instead, if the
        cancellation was this object's closing (taken back) and nothing else's."""
        if self.reason is None or task is None:
            return None
        if task in self.cancelled:
            self.cancelled.discard(task)
            task.uncancel()
        if task.cancelling():
            return None  # the caller cancelled too: that cancellation goes on
        return ClientClosed(f"{self.reason} while the operation was in flight; it may or "
                            "may not have taken effect.")
