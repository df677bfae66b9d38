"""The paired send (PN-2, PN-6, PN-9 to PN-13, G-1) and the backlog rotation that every
sender of a pairing shares.

A :class:`PairedSender` takes one :class:`~.runtime.Hub` from its pairing and nothing
else: the namespaces, the shared entity health, the rotation and counters, and the
callbacks through which it reports a failure or a success. It never reads the
:class:`~.runtime.PairedNamespace`'s internals.

Imports :mod:`aiosb._send` (for :class:`~aiosb._send.SendingLink`), the vocabulary,
:mod:`._common`, :mod:`.health` and :mod:`.rewrite`; the runtime for types only (the
runtime imports this module); never the emulator.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .._clock import CLOCK
from .._send import SendingLink
from ..errors import (
    BacklogUnavailable,
    ClientClosed,
    EntityNotFound,
    MessageSizeExceeded,
    OperationTimeout,
    ServiceBusError,
)
from ..message import Message
from ._common import _wait_for, is_outage
from .health import Health
from .rewrite import to_backlog

if TYPE_CHECKING:
    from .runtime import PairedNamespace

__all__ = ["PairedSender"]


class _Rotation:
    """The backlog queues in use, shared by every sender of a pairing (PN-6, PN-13).

    A queue whose send failed leaves the rotation for every sender, and may rejoin
    ``rejoin_after`` seconds later; a send that succeeds on it brings it back at once.
    """

    def __init__(self, paths: list[str], rejoin_after: float) -> None:
        self.paths = paths
        self.removed: dict[str, float] = {}  # path -> when it may rejoin
        self.rejoin_after = rejoin_after

    def active(self, now: float) -> list[str]:
        """The queues in rotation at ``now`` (those whose time out has passed rejoin)."""
        for path, when in list(self.removed.items()):
            if when <= now:
                del self.removed[path]
        return [p for p in self.paths if p not in self.removed]

    def usable(self, path: str) -> bool:
        """Whether ``path`` is in rotation (as of the last :meth:`active` or :meth:`pick`)."""
        return path not in self.removed

    def pick(self, now: float, exclude: set[str]) -> str | None:
        """A random queue in rotation, else (last resort) a removed one, not in ``exclude``."""
        choices = [p for p in self.active(now) if p not in exclude]
        if not choices:
            choices = [p for p in self.removed if p not in exclude]
        return random.choice(choices) if choices else None

    def fail(self, path: str, now: float) -> bool:
        """Take ``path`` out; return whether it was in."""
        was_in = path not in self.removed
        self.removed[path] = now + self.rejoin_after
        return was_in

    def restore(self, path: str) -> bool:
        """Bring ``path`` back; return whether it was out."""
        return self.removed.pop(path, None) is not None


class PairedSender(SendingLink):
    """A sender that goes to the primary while it works and to the backlog when it
    does not (PN-9, PN-10, G-1). Safe under many concurrent ``send`` calls.

    While the entity is healthy a send is exactly a plain send (S-2), and closing the
    pairing lets it finish as one. A send that fails with a non-transient error or a
    timeout starts the failover timer; until failover engages it waits with backoff and
    tries again, then goes to the backlog; closing the pairing ends that with
    :class:`~aiosb.errors.ClientClosed`. It raises
    :class:`~aiosb.errors.BacklogUnavailable` only when the primary and every backlog
    queue are down; a batch goes to one place as one batch.
    """

    def __init__(self, paired: PairedNamespace, entity: str) -> None:
        super().__init__(entity)
        self.paired = paired
        hub = self._hub = paired._hub  # all a sender takes from its pairing
        self._primary = hub.primary
        self._inflight = hub.inflight
        self._counters = hub.counters
        self._entry = hub.entry(entity)
        self._backlog = hub.rotation.pick(CLOCK.now(), set())  # PN-13: random, per sender
        hub.senders.add(self)

    def __repr__(self) -> str:
        return (
            f"<PairedSender {self.entity} {self._entry.state.health.value} backlog={self._backlog}>"
        )

    async def aclose(self) -> None:
        """Close the sender (idempotent)."""
        self._closed = True
        self._hub.senders.discard(self)

    async def _send_now(self, messages: list[Message], transaction: bool = False) -> None:
        entry = self._entry
        if entry.healthy:
            # While the entity is healthy nothing changes (S-2): a plain send, as deep as
            # Sender's, tracked by the primary namespace alone. Closing the pairing does
            # not end it; it cannot fail over once the pairing is closed.
            try:
                await self._send_primary(messages, transaction)
            except ServiceBusError as exc:
                if not is_outage(exc):
                    raise
                if self._inflight.reason is not None:
                    landed = (
                        "it may or may not have landed" if isinstance(exc, OperationTimeout)
                        else "it was not sent"
                    )
                    raise ClientClosed(
                        f"the send to {self.entity!r} failed ({exc.message}) after the "
                        f"pairing was closed, so it did not fail over; {landed}."
                    ) from exc
                self._hub.failed(entry, exc)
            else:
                self._counters.primary_sends += 1
                return
            await self._send_slowly(messages, 1, transaction)
        else:
            await self._send_slowly(messages, 0, transaction)

    async def _send_slowly(self, messages: list[Message], attempt: int, transaction: bool) -> None:
        """The degraded path, which closing the pairing ends with ClientClosed."""
        inflight = self._inflight
        task = asyncio.current_task()
        inflight.enter(task)
        try:
            await self._send_degraded(messages, attempt, transaction)
        except asyncio.CancelledError:
            error = inflight.closed_error(task)
            if error is not None:
                raise error from None
            raise
        finally:
            inflight.exit(task)

    def _send_primary(
        self, messages: list[Message], transaction: bool
    ) -> Coroutine[Any, Any, None]:
        """The one primary send of both paths: exactly what a plain Sender does (the
        degraded path's whole task is tracked by the pairing: :meth:`_send_slowly`)."""
        primary = self._primary
        if transaction:
            return primary.execute(primary.transport.send, self.entity, messages, transaction=True)
        return primary.execute(primary.transport.send, self.entity, messages)

    async def _send_degraded(
        self, messages: list[Message], attempt: int, transaction: bool = False
    ) -> None:
        """The slow path: retry the primary with backoff until failover engages (G-1)."""
        hub, entry = self._hub, self._entry
        while True:
            if attempt and entry.state.health is not Health.FAILED_OVER:
                delay = self._primary.retry_delay(attempt)
                await _wait_for(entry.changed.wait(), delay)
            if entry.state.health is Health.FAILED_OVER:
                try:
                    await self._send_backlog(messages)
                    return
                except BacklogUnavailable as exc:
                    # G-1: it raises only when the primary is down as well. The primary
                    # may be back before a ping has said so: it is tried once more.
                    if await self._primary_once(messages, transaction) is None:
                        return
                    raise exc from None
            attempt += 1
            outage = await self._primary_once(messages, transaction)
            if outage is None:
                return
            hub.failed(entry, outage)

    async def _primary_once(
        self, messages: list[Message], transaction: bool
    ) -> ServiceBusError | None:
        """One primary send of the degraded path: ``None`` once it is sent (and counted,
        the entity marked as working), else the outage that refused it. Any other error
        is the caller's to fix, raised as it is."""
        try:
            await self._send_primary(messages, transaction)
        except ServiceBusError as exc:
            if not is_outage(exc):
                raise
            return exc
        self._hub.succeeded(self._entry)
        self._counters.primary_sends += 1
        return None

    async def _send_backlog(self, messages: list[Message]) -> None:
        """Send the rewritten batch to this sender's backlog queue, rotating on failure."""
        hub = self._hub
        secondary = hub.secondary
        rotation = hub.rotation
        now = CLOCK.now()
        most = hub.primary.transport.max_message_size
        size = sum(m.size for m in messages)
        if size > most:
            # What the primary refuses never moves there: refused now, as the primary
            # itself would, not acknowledged and dead-lettered by the syphon (G-1).
            what = "A message" if len(messages) == 1 else f"A batch of {len(messages)} messages"
            raise MessageSizeExceeded(
                f"{what} of {size} bytes for {self.entity!r} is over the primary's "
                f"{most} byte limit, so it could never move there from the backlog; "
                "it was not sent."
            )
        limit = secondary.transport.max_message_size
        copies = [to_backlog(m, self.entity, now, limit) for m in messages]
        total = sum(c.size for c in copies) if len(copies) > 1 else 0
        if total > limit:
            raise MessageSizeExceeded(
                f"A batch of {len(copies)} messages for {self.entity!r} is "
                f"{total} bytes once rewritten for the backlog, over "
                f"the {limit} byte limit (PN-12); send smaller batches."
            )
        tried: set[str] = set()
        last: ServiceBusError | None = None
        while True:
            path = self._backlog
            if path is None or path in tried or not rotation.usable(path):
                path = self._backlog = rotation.pick(CLOCK.now(), tried)
            if path is None:
                raise BacklogUnavailable(
                    f"{self.entity!r} is unavailable in {hub.primary.name!r} and all "
                    f"{len(rotation.paths)} backlog queues in {secondary.name!r} failed"
                    + (f" (last: {last.message})" if last else "")
                    + "; the message was not sent."
                ) from last
            try:
                try:
                    await secondary.execute(secondary.transport.send, path, copies)
                except EntityNotFound:  # not created at open (the secondary was down)
                    await hub.ensure_backlog_queue(path)
                    await secondary.execute(secondary.transport.send, path, copies)
            except ServiceBusError as exc:
                if isinstance(exc, (MessageSizeExceeded, ClientClosed)):
                    raise
                last = exc
                tried.add(path)
                if rotation.fail(path, CLOCK.now()):
                    self._counters.backlog_queues_removed += 1
                    hub.emit("backlog_queue_removed", path, exc.message)
                continue
            if rotation.restore(path):
                hub.emit("backlog_queue_restored", path, "a send succeeded")
            self._counters.backlog_sends += 1
            self._counters.backlog_messages += len(copies)
            return
