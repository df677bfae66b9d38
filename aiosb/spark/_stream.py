"""Streaming reads (``spark.readStream``): the driver's side.

**At least once, and honest about it.** The driver receives messages (peek-lock) and
keeps them locked, renewing each lock before it runs out, and completes them only in
``commit``, after Spark has committed the micro-batch that holds them.

**A receive ahead (#39).** While Spark runs one micro-batch the driver already receives
the next one's messages in the background, so that the next ``latestOffset`` finds them
waiting. Those are held like the rest: locked and renewed, numbered (given offsets) only
when ``latestOffset`` admits them into a micro-batch, so a message is in at most one
micro-batch, and never completed before Spark commits that one. A message whose lock is
lost before it is admitted is left out (the broker delivers it again).

**Stopping** abandons everything held, admitted or received ahead, so it is delivered
again at once; a receive on its way is let finish and what it brings abandoned too. A
query restarted from its checkpoint replays an uncommitted micro-batch empty: its
messages were never completed and come back when their locks end (or at once, when the
stopped query abandoned them).

The rows travel as Arrow record batches (:mod:`aiosb.spark._arrow`), built once on the
driver as each receive comes in; a partition carries each column that every row shares
once (:class:`~aiosb.spark._arrow.Packed`), and the executor spreads it back over the
rows before handing Spark the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from .._clock import CLOCK
from ..bridge import BlockingReceiver, Bridge
from ..errors import OperationTimeout
from ._arrow import arrow_schema
from ._locked_chunks import Chunk, Link, Locks, lost_tokens
from ._options import StreamReadOptions
from ._read import RECEIVE, _receiver

#: Receivers (each on a connection of its own) a streaming read receives on at once.
RECEIVERS = 2
#: The longest :meth:`StreamSource.stop` waits for the server (completing what Spark
#: committed, abandoning the rest). Past it, what is still locked comes back when its
#: lock ends: the process Spark stops does not linger, retrying a server that is gone.
STOP_SECONDS = 15.0

log = logging.getLogger("aiosb.spark")


class Holder:
    """The streaming source's locked messages, on the bridge's loop: received ahead
    (on every link at once), admitted in order, renewed before their locks run out,
    completed on commit, abandoned on stop.

    Each chunk is renewed and settled through the link that received it (its
    ``owner``): AMQP settles on the receiving link only."""

    def __init__(self, link: Link, *more: Link) -> None:
        self.link = link  # the first: the transport's lock capacity is judged by it
        self.locks = Locks(link)
        self.links = [(link, self.locks), *((other, Locks(other)) for other in more)]
        self.ready: list[Chunk] = []  # received ahead, not admitted yet
        self.held: list[Chunk] = []  # admitted (numbered), in order
        self.released = False
        self.fetching: asyncio.Future[Any] | None = None
        self.want = self.room = 0  # the last admission's count and room

    def _all(self) -> list[Chunk]:
        return [*self.held, *self.ready]

    def _owned(self, locks: Locks) -> Callable[[], list[Chunk]]:
        return lambda: [c for c in self._all() if c.owner is locks]

    def count(self) -> int:
        return sum(map(len, self.held)) + sum(map(len, self.ready))

    async def _fetch(self, want: int, max_wait: float) -> None:
        """Receive on every link at once until ``want`` messages are ready (or one
        link finds none there now); raise the first error once every link is done."""
        asking = 0  # messages asked for by receives on their way

        async def pull(link: Link, locks: Locks) -> None:
            nonlocal asking
            wait = max_wait
            while not self.released:
                ask = min(want - sum(map(len, self.ready)) - asking, RECEIVE)
                if ask <= 0:
                    return
                asking += ask
                try:
                    chunk = await link.receive(ask, wait)
                finally:
                    asking -= ask
                if chunk is None:
                    return
                chunk.owner = locks
                if self.released:  # stopped meanwhile: give it straight back
                    await locks.abandon(chunk.locked())
                    return
                self.ready.append(chunk)
                locks.start(chunk, self._owned(locks))
                wait = 0

        pulls = self.links if want > RECEIVE else self.links[:1]
        done = await asyncio.gather(*(pull(*pair) for pair in pulls), return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome

    def _receive_ahead(self, want: int, max_wait: float) -> None:
        self.fetching = asyncio.ensure_future(self._fetch(want, max_wait))

    async def _received(self) -> None:
        """Wait for the receive on its way, if any (its error, if any, is raised here)."""
        fetching = self.fetching
        if fetching is not None:
            await asyncio.wait([fetching])
            if self.fetching is fetching:
                self.fetching = None
            fetching.result()

    async def admit(self, first: int, count: int, room: int, max_wait: float) -> int:
        """Admit up to ``count`` messages, numbered from ``first``; return how many. Then
        start receiving ahead, up to ``count`` more while fewer than ``room`` are held.

        Released meanwhile (the query stopped while a receive was on its way), it
        abandons what it received, so that comes back at once, and admits nothing."""
        if self.released:
            return 0
        await self._received()
        if not self.released and sum(map(len, self.ready)) < count:
            self._receive_ahead(count, 0 if self.ready else max_wait)
            await self._received()
        if self.released:
            return 0
        admitted = 0
        async with contextlib.AsyncExitStack() as gates:
            for _, locks in self.links:  # no renewal on its way: what it lost is left out
                await gates.enter_async_context(locks.gate)
            # Locks ended while renewals failed: renew them first; lost ones leave
            # ``ready`` (the broker delivers those messages again, maybe to us).
            now = CLOCK.now()
            for _, locks in self.links:
                await locks.renew([t for c in self.ready if c.owner is locks
                                   and c.until <= now for t in c.locked()])
            self.ready = [c for c in self.ready if len(c)]
            while self.ready and admitted < count:
                chunk = self.ready.pop(0)
                if admitted + len(chunk) > count:
                    chunk, rest = chunk.split(count - admitted)
                    self.ready.insert(0, rest)
                chunk.first = first + admitted
                admitted += len(chunk)
                self.held.append(chunk)
        self.want, self.room = count, room
        self._ahead()
        return admitted

    def _ahead(self) -> None:
        """Receive ahead, up to a micro-batch's worth more while fewer than the room are
        held, unless a receive is on its way (or failed: ``admit`` raises its error)."""
        fetching = self.fetching
        if self.released or (fetching is not None and (
                not fetching.done() or fetching.cancelled() or fetching.exception())):
            return
        ahead = min(self.want, self.room - self.count())
        if ahead > 0:
            self._receive_ahead(ahead, 0)

    def batches(self, start: int, end: int) -> list[pa.RecordBatch]:
        """The rows of offsets (start, end] this source admitted, in order.

        Called off the loop while a commit's completion may take chunks off ``held``
        on it: it reads a copy (a list is copied whole under the GIL)."""
        out = []
        for chunk in list(self.held):
            lo = max(start + 1, chunk.first)
            hi = min(end, chunk.first + len(chunk.batch) - 1)
            if lo <= hi:
                out.append(chunk.batch.slice(lo - chunk.first, hi - lo + 1))
        return out

    def _by_link(self, chunks: list[Chunk]) -> list[tuple[Locks, list[str]]]:
        """The chunks' tokens, by the link (its locks) that received them."""
        return [(locks, [t for c in chunks if (c.owner or self.locks) is locks
                         for t in c.locked()]) for _, locks in self.links]

    async def complete(self, upto: int) -> int:
        """Complete every admitted message numbered ``upto`` or lower; return how many."""
        done: list[Chunk] = []
        while self.held and self.held[0].first <= upto:
            chunk = self.held.pop(0)
            if chunk.first + len(chunk) - 1 > upto:
                chunk, rest = chunk.split(upto - chunk.first + 1)
                self.held.insert(0, rest)
            done.append(chunk)
        # Their room is free now: the next micro-batch's receive need not wait for
        # latestOffset (Spark plans the next micro-batch before it commits the last).
        self._ahead()
        parts = self._by_link(done)
        settled = await asyncio.gather(*(locks.link.settle_all("complete", tokens)
                                         for locks, tokens in parts if tokens))
        lost = sum(len(lost_tokens(results)) for results in settled)
        if lost:
            self.locks.lost += lost
            log.warning(
                "%d committed messages had lost their locks before completion; they will "
                "be delivered again (at least once).",
                lost,
            )
        return sum(len(tokens) for _, tokens in parts) - lost

    async def release(self) -> None:
        """Abandon everything held (it is delivered again at once), stop renewing.

        A receive on its way is let finish, not cancelled (its answer would be lost with
        its messages locked for nobody): ``_fetch`` sees the release and abandons it."""
        self.released = True
        fetching = self.fetching
        if fetching is not None and fetching is not asyncio.current_task():
            await asyncio.wait([fetching])
            if not fetching.cancelled() and (exc := fetching.exception()) is not None:
                log.warning("the receive ahead had failed (%s)", exc)
        for _, locks in self.links:
            await locks.stop()
        chunks, self.held, self.ready = self._all(), [], []
        await asyncio.gather(*(locks.abandon(tokens)
                               for locks, tokens in self._by_link(chunks) if tokens))


class StreamSource:
    """The driver side of a streaming read (see the module docstring)."""

    def __init__(self, options: StreamReadOptions) -> None:
        self.options = options
        self._bridge: Bridge | None = None
        self._receivers: list[BlockingReceiver] = []
        self._holder: Holder | None = None
        self._next = 1  # the number the next admitted message gets
        self._clamped = False  # told that the transport holds fewer than max_buffered
        self._completing: list[Future[int]] = []  # commits' completions on their way

    def _open(self) -> Holder:
        if self._holder is None:
            self._stop_on_sigterm()
            bridge = self._bridge = Bridge.shared()
            c, sub_queue = self.options.connection, self.options.sub_queue
            self._receivers = [_receiver(c, sub_queue, bridge) for _ in range(RECEIVERS)]
            self._holder = Holder(*(Link(r._target) for r in self._receivers))
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
        admitted = sum(map(len, holder.held))
        room = self.options.max_buffered_messages
        capacity = holder.link.capacity
        if capacity is not None and room > capacity:
            if not self._clamped:
                log.warning(
                    "'max_buffered_messages' (%d) is more than this transport can keep "
                    "locked (%d): the source holds at most %d.", room, capacity, capacity)
                self._clamped = True
            room = capacity
        # Spark plans the next micro-batch before it commits the last (whose messages
        # are held until then): one takes at most half the room, or the next would find
        # none and Spark would wait forever for it, the last never committed.
        count = min(room - admitted, max(1, room // 2))
        if limit is not None:
            count = min(limit, count)
        if count <= 0:
            return self._next - 1
        got = self._bridge.run(holder.admit(self._next, count, room, self.options.max_wait))
        self._next += got
        return self._next - 1

    def batches(self, start: int, end: int) -> list[list[pa.RecordBatch]]:
        """The rows of offsets (start, end], in ``partitions`` parts of one record batch
        each (none for a range this driver never admitted: a replay after restart)."""
        holder = self._holder
        picked = [] if holder is None else holder.batches(start, end)
        rows = sum(b.num_rows for b in picked)
        if not rows:
            return []
        table = pa.Table.from_batches(picked, schema=arrow_schema())
        size = math.ceil(rows / self.options.partitions)
        # One copy per part: a slice would carry its whole chunk's buffers when pickled.
        return [
            table.slice(i, size).combine_chunks().to_batches()
            for i in range(0, rows, size)
        ]

    def commit(self, end: int, wait: bool = True) -> int:
        """Complete every message up to ``end``; Spark has committed them. Return how
        many were completed, or with ``wait=False`` start completing them and return 0:
        the next micro-batch need not wait for it (they stay locked, renewed, until
        completed; ``stop`` lets it finish). An earlier completion's error is raised."""
        holder = self._open()
        assert self._bridge is not None
        self._collect(block=False)
        if wait:
            return self._bridge.run(holder.complete(end))
        self._completing.append(self._bridge.submit(holder.complete(end)))
        return 0

    def _collect(self, block: bool, timeout: float | None = None) -> None:
        """Forget finished completions, raising the first one's error (waiting for every
        one on its way if ``block``, for ``timeout`` seconds in all)."""
        completing, self._completing = self._completing, []
        deadline = None if timeout is None else time.monotonic() + timeout
        for i, future in enumerate(completing):
            if not block and not future.done():
                self._completing.append(future)
                continue
            try:
                Bridge.wait(future, None if deadline is None
                            else max(0.0, deadline - time.monotonic()))
            except BaseException:
                self._completing.extend(f for f in completing[i + 1:] if not f.done())
                raise

    def stop(self) -> None:
        """Let completions on their way finish, abandon what is held, close the
        receivers."""
        if self._holder is None or self._bridge is None:
            return
        bridge, holder, receivers = self._bridge, self._holder, self._receivers
        self._holder, self._receivers = None, []
        if bridge.closed:
            return
        deadline = time.monotonic() + STOP_SECONDS
        try:
            self._collect(block=True, timeout=STOP_SECONDS)
        except Exception as exc:  # not completed: their messages come back, at least once
            log.warning("completing a committed micro-batch failed (%s)", exc)
        finally:
            try:
                bridge.run(holder.release(), timeout=max(0.0, deadline - time.monotonic()))
            except OperationTimeout:
                log.warning(
                    "the server did not answer within %.0f s of stopping: the %d messages "
                    "still held stay locked until their locks end, then are delivered "
                    "again", STOP_SECONDS, holder.count())
            for receiver in receivers:
                receiver.close()
