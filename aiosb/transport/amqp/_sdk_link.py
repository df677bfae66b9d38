"""One SDK sender or receiver of the AMQP transport (:class:`Link`): opened on first use,
used by one operation at a time, reopened once when the broker closed it. Imports the
errors and the SDK error mapping only."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ...errors import ServiceBusError
from ._error_map import Reached, is_idle_detach

__all__ = ["Link"]

T = TypeVar("T")

#: Links being closed after their operation was given up on (kept until closed).
_closing: set[asyncio.Future[None]] = set()


async def _close_quietly(handler: Any) -> None:
    with contextlib.suppress(Exception):
        await handler.close()


class Link:
    """One SDK sender or receiver: opened on first use, used by one operation at a time.

    Args:
        name: What it is, for error sentences.
        factory: Makes a new SDK handler (no I/O; the SDK opens it on first use).
    """

    def __init__(
        self, name: str, factory: Callable[[], Any], reached: Reached, open_first: bool = False
    ) -> None:
        self.name = name
        self._factory = factory
        self.reached = reached
        #: Open the SDK handler before its first operation: a receiver otherwise opens
        #: inside its first receive, whose short wait (0 s asks for 0.25) the opening
        #: (about half a second) uses up, so that receive never gets a message.
        self._open_first = open_first
        self.handler: Any = None
        self.lock = asyncio.Lock()
        self.reopened = 0

    async def run(self, operation: Callable[[Any], Awaitable[T]], what: str) -> T:
        """Run ``operation(handler)`` alone on this link.

        A link the broker closed is reopened and the operation tried once more; every
        other failure is raised as an :mod:`aiosb.errors` instance.
        """
        async with self.lock:
            for attempt in (1, 2):
                if self.handler is None:
                    self.handler = self._factory()
                handler = self.handler
                try:
                    if self._open_first and getattr(handler, "_running", True) is False:
                        await handler.__aenter__()
                    result = await operation(handler)
                    self.reached.yes = True
                    return result
                except asyncio.CancelledError:
                    # Given up on (aiosb's operation timeout): close the link, so that a
                    # transfer still in flight is dropped by the broker rather than done
                    # after its sender was told it failed.
                    if self.handler is handler:
                        self.handler = None
                    _closing.add(task := asyncio.ensure_future(_close_quietly(handler)))
                    task.add_done_callback(_closing.discard)
                    raise
                except ServiceBusError:
                    raise
                except Exception as exc:
                    if attempt == 1 and is_idle_detach(exc):
                        await self._discard(handler)
                        self.reopened += 1
                        continue
                    raise self.reached.error(exc, f"{what} on {self.name}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _discard(self, handler: Any) -> None:
        if self.handler is handler:
            self.handler = None
        with contextlib.suppress(Exception):
            await handler.close()

    async def aclose(self) -> None:
        """Close the SDK handler, if open."""
        if self.handler is not None:
            await self._discard(self.handler)


