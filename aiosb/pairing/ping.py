"""The ping actor: one per failed-over entity, it probes the primary until a ping is
delivered (PN-3, PN-10, PN-14, PN-15).

The actor knows nothing of the pairing that owns it. It is given a way to send one
message (with a timeout) and a callback for each outcome; the runtime starts it when an
entity fails over and stops it when the entity is healthy again, and the runtime alone
decides what an outcome means for the entity's health.

Imports the vocabulary (:mod:`aiosb.errors`, :mod:`aiosb.message`) and :mod:`._common`
(the log) only.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..errors import ClientClosed, ServiceBusError
from ..message import PING_CONTENT_TYPE, Message
from ._common import log

__all__ = ["PingActor", "ping_message"]

#: Sends ``message`` to ``entity`` within ``timeout`` seconds: ``send(entity, message, timeout)``.
SendPing = Callable[[str, Message, float], Awaitable[None]]
#: Told each ping's outcome: ``None`` for a delivered ping, else the error.
OnOutcome = Callable[[ServiceBusError | None], None]
#: Starts a task the caller owns: ``spawn(coroutine, name)``.
Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[Any]]


def ping_message() -> Message:
    """A ping (PN-14): empty, its own content type, a 1 s time to live, and a random
    session id so that it reaches session-enabled entities too."""
    return Message(
        b"",
        content_type=PING_CONTENT_TYPE,
        time_to_live=_dt.timedelta(seconds=1),
        session_id=uuid.uuid4().hex,
    )


class PingActor:
    """Pings one entity every ``interval`` seconds until a ping is delivered.

    Each ping's outcome goes to ``on_outcome``: ``None`` when delivered (the actor then
    ends: pings are billable, PN-15), the error when not (the actor pings again an
    interval later; a :class:`~aiosb.errors.ClientClosed` error ends it, since nothing
    can be sent any more). Any other exception of ``send`` is logged and reported as a
    :class:`~aiosb.errors.ServiceBusError`: the actor never dies of a failed ping.

    Args:
        entity: The entity path to ping.
        send: ``send(entity, message, timeout)`` sends one message to the primary.
        on_outcome: Told each ping's outcome. It may call :meth:`stop`.
        interval: Seconds between pings (``ping_primary_interval``); the first ping
            goes an interval after :meth:`start`.
        timeout: Seconds one ping may take (``ping_timeout``).
    """

    def __init__(
        self,
        entity: str,
        send: SendPing,
        on_outcome: OnOutcome,
        *,
        interval: float,
        timeout: float,
    ) -> None:
        self.entity = entity
        self.interval = interval
        self.timeout = timeout
        self._send = send
        self._on_outcome = on_outcome
        self._task: asyncio.Task[Any] | None = None
        self._stopped = False

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running" if self._task else "new"
        return f"<PingActor {self.entity} every {self.interval:g} s {state}>"

    @property
    def running(self) -> bool:
        """Whether the actor was started and has not stopped or ended."""
        return self._task is not None and not self._task.done() and not self._stopped

    def start(self, spawn: Spawn | None = None) -> None:
        """Start pinging, in a task made by ``spawn`` (the owner's; a plain task if
        ``None``)."""
        if self._task is not None or self._stopped:
            raise RuntimeError(f"{self!r} starts once.")
        name = f"ping {self.entity}"
        if spawn is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"aiosb {name}")
        else:
            self._task = spawn(self._run(), name)

    def stop(self) -> None:
        """Stop pinging (idempotent). A ping in flight is cancelled, unless ``stop`` is
        called from the outcome callback, in which case the loop just ends."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _run(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.interval)
            try:
                await self._send(self.entity, ping_message(), self.timeout)
            except Exception as exc:  # an actor never dies of a failed ping
                if not isinstance(exc, ServiceBusError):
                    log.exception("ping of %s failed unexpectedly", self.entity)
                    exc = ServiceBusError(repr(exc))
                self._on_outcome(exc)
                if isinstance(exc, ClientClosed):
                    return
                continue
            self._on_outcome(None)
            return
