"""Reading messages as rows: batch (``spark.read``) and streaming (``spark.readStream``).

**Batch reads** consume. Each of ``partitions`` tasks receives (peek-lock) its share of
``max_messages``, hands its rows to Spark, and completes those messages once Spark has
taken every row of the partition. A task that fails before that completes nothing: the
locks run out and the messages are delivered again. A job that fails *after* a task has
completed its messages does not bring them back. ``mode="peek"`` browses without
consuming (one task, nothing locked or completed).

**Streaming reads** are at least once, and honest about it: the driver receives each
micro-batch's messages (peek-lock), keeps them locked, renewing each lock before it runs
out, and completes them only in ``commit``, after Spark has committed the micro-batch
that holds them. Stopping the query abandons what is not committed, so it is delivered
again at once. A query restarted from its checkpoint replays an uncommitted micro-batch
empty: its messages were never completed and come back when their locks end.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from .._clock import CLOCK
from ..bridge import BlockingReceiver, Bridge
from ..errors import MessageLockLost, ServiceBusError
from ..message import ReceivedMessage
from ._columns import to_row
from ._options import Connection, ReadOptions, StreamReadOptions

log = logging.getLogger("aiosb.spark")

#: Locks are settled and renewed this many at a time.
_SETTLE_CHUNK = 500


def _receiver(c: Connection, sub_queue: str | None, bridge: Bridge) -> BlockingReceiver:
    return bridge.receiver(
        c.namespace,
        c.entity,
        credential=c.credential,
        connect_options=c.connect_options(),
        sub_queue=sub_queue,
    )


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


async def settle_all(
    settle: Callable[[list[ReceivedMessage]], Awaitable[Any]], messages: list[ReceivedMessage]
) -> list[ReceivedMessage]:
    """Settle ``messages`` in chunks; return those whose locks were lost.

    A broker settles a chunk all or nothing: one lost lock fails the chunk, so a failed
    chunk is settled again message by message, and only the lost ones are given up.
    """
    lost: list[ReceivedMessage] = []
    for chunk in _chunks(messages, _SETTLE_CHUNK):
        try:
            await settle(chunk)
        except MessageLockLost:
            for message in chunk:
                try:
                    await settle([message])
                except MessageLockLost:
                    lost.append(message)
    return lost


def read_partition(options: ReadOptions, share: int) -> Iterator[tuple[Any, ...]]:
    """One batch-read task: receive up to ``share`` messages, yield their rows, then
    complete them (see the module's docstring for exactly when)."""
    bridge = Bridge.shared()
    with _receiver(options.connection, options.sub_queue, bridge) as receiver:
        if options.mode == "peek":
            seen = 0
            while seen < share:
                batch = receiver.peek(min(share - seen, 1000))
                if not batch:
                    break
                seen += len(batch)
                for message in batch:
                    yield to_row(message)
            return
        held: list[ReceivedMessage] = []
        wait = options.max_wait
        while len(held) < share:
            got = receiver.receive(max_messages=min(share - len(held), 1000), max_wait=wait)
            if not got:
                break
            held.extend(got)
            wait = min(wait, 0.5)  # after the first, take what is there without waiting long
        for message in held:
            yield to_row(message)
        # Spark has every row of this partition: now they may go.
        lost = len(bridge.run(settle_all(receiver._target.complete, held)))
        if lost:
            log.warning(
                "%d messages read from %r outlived their locks before completion; they "
                "will be delivered again.",
                lost,
                options.connection.entity,
            )


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into at most ``parts`` positive shares."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class Holder:
    """The streaming source's locked messages, on the bridge's loop: admitted in order,
    renewed before their locks run out, completed on commit, abandoned on stop."""

    def __init__(self, receiver: Any, renew_margin: float) -> None:
        self.receiver = receiver  # the async Receiver, used on the loop only
        self.held: dict[int, ReceivedMessage] = {}
        self.renew_margin = renew_margin
        self.renewer: asyncio.Task[None] | None = None
        self.renewed = 0
        self.lost = 0
        self.released = False
        self.admitting: asyncio.Task[Any] | None = None

    async def admit(self, first: int, count: int, max_wait: float) -> list[tuple[int, Any]]:
        """Receive up to ``count`` messages, numbered from ``first``; return their rows.

        Released meanwhile (the query stopped while a receive was on its way), it abandons
        what it received, so that comes back at once, and admits nothing."""
        if self.released:
            return []
        self.admitting = asyncio.current_task()
        got: list[ReceivedMessage] = []
        try:
            wait = max_wait
            while len(got) < count and not self.released:
                batch = await self.receiver.receive(min(count - len(got), 1000), max_wait=wait)
                if not batch:
                    break
                got.extend(batch)
                wait = 0
        finally:
            self.admitting = None
        if self.released:
            await self._abandon(got)
            return []
        rows = []
        for i, message in enumerate(got):
            self.held[first + i] = message
            rows.append((first + i, to_row(message)))
        if self.renewer is None and self.held:
            self.renewer = asyncio.get_running_loop().create_task(self.renew_forever())
        return rows

    async def complete(self, upto: int) -> int:
        """Complete every held message numbered ``upto`` or lower; return how many."""
        done = sorted(i for i in self.held if i <= upto)
        messages = [self.held.pop(i) for i in done]
        lost = await settle_all(self.receiver.complete, messages)
        if lost:
            self.lost += len(lost)
            log.warning(
                "%d committed messages had lost their locks before completion; they will "
                "be delivered again (at least once).",
                len(lost),
            )
        return len(messages) - len(lost)

    async def renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.renew_margin / 2)
            wall = CLOCK.now()
            due = [
                m
                for m in list(self.held.values())
                if m.locked_until_timestamp is not None
                and m.locked_until_timestamp - wall < self.renew_margin
            ]
            try:
                lost = await settle_all(self.receiver.renew_lock, due)
            except ServiceBusError as exc:
                log.warning("renewing %d locks failed (%s); will try again", len(due), exc)
                continue
            self.renewed += len(due) - len(lost)
            if lost:  # delivered again by the broker: stop holding them
                self.lost += len(lost)
                gone = {id(m) for m in lost}
                for index in [i for i, m in self.held.items() if id(m) in gone]:
                    del self.held[index]

    async def release(self) -> None:
        """Abandon everything held (it is delivered again at once), stop renewing.

        A receive on its way is let finish, not cancelled (its answer would be lost with
        its messages locked for nobody): ``admit`` sees the release and abandons it."""
        self.released = True
        admitting = self.admitting
        if admitting is not None and admitting is not asyncio.current_task():
            await asyncio.wait([admitting])
        if self.renewer is not None:
            self.renewer.cancel()
            await asyncio.gather(self.renewer, return_exceptions=True)
            self.renewer = None
        messages = list(self.held.values())
        self.held.clear()
        await self._abandon(messages)

    async def _abandon(self, messages: list[ReceivedMessage]) -> None:
        try:
            await settle_all(self.receiver.abandon, messages)  # lost ones are back already
        except ServiceBusError as exc:  # their locks run out instead
            log.warning("abandoning %d messages failed (%s)", len(messages), exc)


class StreamSource:
    """The driver side of a streaming read (see the module docstring)."""

    def __init__(self, options: StreamReadOptions) -> None:
        self.options = options
        self._bridge: Bridge | None = None
        self._receiver: BlockingReceiver | None = None
        self._holder: Holder | None = None
        self._next = 1  # the number the next admitted message gets
        self._rows: dict[int, Any] = {}

    def _open(self) -> Holder:
        if self._holder is None:
            self._stop_on_sigterm()
            bridge = self._bridge = Bridge.shared()
            self._receiver = _receiver(self.options.connection, self.options.sub_queue, bridge)
            receiver = self._receiver._target
            lock = bridge.run(_lock_duration(receiver))
            self._holder = Holder(receiver, renew_margin=max(lock / 3, 0.1))
        return self._holder

    def _stop_on_sigterm(self) -> None:
        """Spark ends the driver-side reader's process with SIGTERM when a query stops,
        without calling ``stop()``: abandon what is held first, then exit as asked."""
        if threading.current_thread() is not threading.main_thread():
            return
        stopping = False

        def on_sigterm(signum: int, frame: Any) -> None:
            # Spark may signal more than once: ours stays installed until we are done,
            # so a second SIGTERM cannot cut the abandon short.
            nonlocal stopping
            if stopping:
                return
            stopping = True
            try:
                self.stop()
            finally:
                raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_sigterm)

    def latest(self, start: int, limit: int | None) -> int:
        """Admit up to ``limit`` new messages (``None``: as many as the buffer allows)
        after offset ``start``; return the new latest offset."""
        holder = self._open()
        assert self._bridge is not None
        self._next = max(self._next, start + 1)
        room = self.options.max_buffered_messages - len(holder.held)
        count = room if limit is None else min(limit, room)
        if count <= 0:
            return self._next - 1
        rows = self._bridge.run(holder.admit(self._next, count, self.options.max_wait))
        for index, row in rows:
            self._rows[index] = row
        self._next += len(rows)
        return self._next - 1

    def rows(self, start: int, end: int) -> list[list[tuple[Any, ...]]]:
        """The rows of offsets (start, end], in ``partitions`` slices (empty for a range
        this driver never admitted: a replay after restart)."""
        picked = [self._rows[i] for i in range(start + 1, end + 1) if i in self._rows]
        if not picked:
            return []
        size = math.ceil(len(picked) / self.options.partitions)
        return list(_chunks(picked, size))

    def commit(self, end: int) -> int:
        """Complete every message up to ``end``; Spark has committed them."""
        holder = self._open()
        assert self._bridge is not None
        for i in [i for i in self._rows if i <= end]:
            del self._rows[i]
        return self._bridge.run(holder.complete(end))

    def stop(self) -> None:
        """Abandon what is held, close the receiver."""
        if self._holder is None or self._bridge is None:
            return
        bridge, holder, receiver = self._bridge, self._holder, self._receiver
        self._holder = None
        self._rows.clear()
        if bridge.closed:
            return
        bridge.run(holder.release())
        if receiver is not None:
            receiver.close()


async def _lock_duration(receiver: Any) -> float:
    """The entity's lock duration in seconds (a subscription's, for a subscription)."""
    ns = receiver.namespace
    path = receiver.entity
    try:
        if "/subscriptions/" in path.lower():
            topic, _, name = path.partition("/subscriptions/")
            props = await ns.get_subscription(topic, name.split("/")[0])
        else:
            props = await ns.get_queue(path.split("/")[0])
        return float(props.lock_duration.total_seconds())
    except ServiceBusError:
        return 30.0  # the entity may be managed elsewhere: renew well before 60 s
