"""Reading messages as Arrow record batches: batch (``spark.read``) here, streaming
(``spark.readStream``) in :mod:`aiosb.spark._stream`.

**Batch reads** consume. Each of ``partitions`` tasks receives (peek-lock) its share of
``max_messages``, a receive ahead of Spark, hands Spark each receive's rows as one
record batch, renews the locks it holds before they end, and completes its messages
once Spark has taken every row of the partition. A task that fails or is closed before
that completes nothing and abandons what it holds, so it is delivered again at once (a
task whose process dies leaves it to come back when the locks end). A job that fails
*after* a task has completed its messages does not bring them back. "Taken" means the
Python worker handed every row over, whatever Spark then does with them: a ``limit``
or a failure later in the same task loses them (at most once), and a retried attempt
of the task is refused rather than read other messages or none (:func:`refuse_retry`).
``mode="peek"`` browses without consuming (one task, nothing locked or completed).

**Streaming reads** are at least once: see :mod:`aiosb.spark._stream`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import pyarrow as pa

from .._blocking import loop_threads
from ..bridge import BlockingReceiver, Bridge
from ._arrow import message_columns, to_batch
from ._locked_chunks import Chunk, Link, Locks, lost_tokens
from ._options import Connection, ReadOptions

log = logging.getLogger("aiosb.spark")

#: Messages a receive asks for.
RECEIVE = 1000


def _receiver(c: Connection, sub_queue: str | None, bridge: Bridge) -> BlockingReceiver:
    return bridge.receiver(
        c.namespace,
        c.entity,
        credential=c.credential,
        connect_options=c.connect_options(),
        sub_queue=sub_queue,
    )


def read_partition(options: ReadOptions, share: int) -> Iterator[pa.RecordBatch]:
    """One batch-read task: receive up to ``share`` messages, yield their rows, then
    complete them (see the module's docstring for exactly when)."""
    bridge = Bridge.shared()
    receiver = _receiver(options.connection, options.sub_queue, bridge)
    if options.mode != "peek":
        yield from _consume(options, share, bridge, receiver)  # it closes the receiver
        return
    with receiver:
        seen = 0
        while seen < share:
            batch = receiver.peek(min(share - seen, RECEIVE))
            if not batch:
                break
            seen += len(batch)
            yield to_batch(*message_columns(batch))


async def _take(locks: Locks, held: list[Chunk], count: int, wait: float) -> Chunk | None:
    """Receive a chunk and hold it, its locks renewed from now on."""
    chunk = await locks.link.receive(count, wait)
    if chunk is not None:
        held.append(chunk)
        locks.start(chunk, lambda: held)
    return chunk


def _consume(
    options: ReadOptions, share: int, bridge: Bridge, receiver: BlockingReceiver
) -> Iterator[pa.RecordBatch]:
    link = Link(receiver._target)
    if link.capacity is not None and share > link.capacity:
        receiver.close()
        raise ValueError(
            f"a batch-read task would hold {share} locked messages, more than this "
            f"transport can keep locked ({link.capacity}); set 'partitions' to at least "
            f"{-(-options.max_messages // link.capacity)} or lower 'max_messages'."
        )
    locks = Locks(link)
    held: list[Chunk] = []
    got = 0
    taken = False
    pending: Future[Chunk | None] | None = bridge.submit(
        _take(locks, held, min(share, RECEIVE), options.max_wait))
    try:
        while pending is not None:
            chunk = bridge.wait(pending)
            pending = None
            if chunk is None:
                break
            got += len(chunk)
            if got < share:  # the next receive is on its way while Spark takes this one
                wait = min(options.max_wait, 0.5)  # after the first, take what is there
                pending = bridge.submit(_take(locks, held, min(share - got, RECEIVE), wait))
            yield chunk.batch
        taken = True  # Spark has every row of this partition: now they may go
    finally:
        end = _End(options.connection.entity, locks, held, pending, taken)
        if threading.get_ident() in loop_threads:
            # Finalised on the loop's own thread (the garbage collector ran there), where
            # nothing may block: the end goes on the loop, the receiver closed after it.
            task = asyncio.get_running_loop().create_task(end.settle(receiver))
            _ending.add(task)
            task.add_done_callback(_ending.discard)
        else:
            try:
                bridge.run(end.settle())
            finally:
                receiver.close()


#: Ends of batch-read tasks finalised on the loop thread, kept until done.
_ending: set[asyncio.Task[None]] = set()


class _End:
    """The end of a batch-read task: completes what it read if Spark took every row,
    else abandons it."""

    def __init__(self, entity: str, locks: Locks, held: list[Chunk],
                 pending: Future[Chunk | None] | None, taken: bool) -> None:
        self.entity, self.locks, self.held = entity, locks, held
        self.pending, self.taken = pending, taken

    async def settle(self, receiver: BlockingReceiver | None = None) -> None:
        """Stop renewing, complete or abandon; close ``receiver`` after, if given."""
        try:
            await self._settle()
        finally:
            if receiver is not None:
                await receiver._target.aclose()
                if receiver._owns is not None:
                    await receiver._owns.aclose()

    async def _settle(self) -> None:
        locks = self.locks
        if self.pending is not None:  # failed or closed early: what is on its way is held
            try:
                await asyncio.wrap_future(self.pending)
            except Exception as exc:
                log.warning("a receive on its way failed as the task ended (%s)", exc)
        await locks.stop()
        tokens = [t for c in self.held for t in c.locked()]
        if not self.taken:
            await locks.abandon(tokens)
            return
        lost = len(lost_tokens(await locks.link.settle_all("complete", tokens)))
        lost += locks.lost
        if lost:
            log.warning(
                "%d messages read from %r outlived their locks before completion; "
                "they will be delivered again.",
                lost,
                self.entity,
            )


def refuse_retry(attempt: int) -> None:
    """A batch read consumes: a task Spark runs again (``attempt`` > 0) cannot read
    what its failed attempt may have completed, and would quietly return other rows
    or none. It fails instead, saying so."""
    if attempt > 0:
        raise RuntimeError(
            f"aiosb: a complete-mode batch read cannot be retried (this is attempt "
            f"{attempt + 1} of its task): the messages the failed attempt read may have "
            "been completed already and cannot be read again. Use mode=peek, or read "
            "with a streaming query, to be able to read again."
        )


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into at most ``parts`` positive shares."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
