"""What both reads hold: locked messages in chunks, as Arrow batches and lock tokens,
renewed before their locks end and settled by token (#39).

A chunk is what one receive brought: a record batch for Spark and, row for row, the
lock tokens the broker gave. Nothing is kept per message but its token: the batch is
built from the receive's columns (:mod:`aiosb.spark._arrow`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._clock import CLOCK
from ..errors import MessageLockLost, ServiceBusError
from ..message import PING_CONTENT_TYPE
from ..protocol import ColumnTransport, SettleAction, Settlement
from ._arrow import message_columns, to_batch

if TYPE_CHECKING:
    from .._receive import Receiver

log = logging.getLogger("aiosb.spark")

#: Locks are settled and renewed this many a request, and this many requests at once.
SETTLE_CHUNK = 500
SETTLE_IN_FLIGHT = 4


class Chunk:
    """Rows received together: ``batch`` for Spark, ``tokens`` row for row (``None``
    where the lock was lost after the rows were admitted), the earliest lock end
    ``until`` (UTC seconds), ``first``, the offset of its first row once a
    streaming read admits it (0 before), and ``owner``, the :class:`Locks` of the link
    that received it (a streaming read receives on more than one; ``None``: not said)."""

    __slots__ = ("batch", "first", "owner", "tokens", "until")

    def __init__(
        self, batch: pa.RecordBatch, tokens: list[str | None], until: float, first: int = 0
    ) -> None:
        self.batch = batch
        self.tokens = tokens
        self.until = until
        self.first = first
        self.owner: Locks | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def locked(self) -> list[str]:
        """The tokens still ours to settle."""
        return [t for t in self.tokens if t is not None]

    def split(self, count: int) -> tuple[Chunk, Chunk]:
        """The first ``count`` rows and the rest, as two chunks."""
        head = Chunk(self.batch.slice(0, count), self.tokens[:count], self.until, self.first)
        rest = Chunk(self.batch.slice(count), self.tokens[count:], self.until,
                     self.first + count if self.first else 0)
        head.owner = rest.owner = self.owner
        return head, rest


class Link:
    """A peek-lock :class:`~aiosb.Receiver`'s batches as chunks, settled by token."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        transport = receiver.namespace.transport
        self.columns = isinstance(transport, ColumnTransport)
        #: Most locked messages the transport can settle at once (AMQP remembers a
        #: bounded number of locks, dropping the oldest); ``None``: no limit.
        self.capacity: int | None = getattr(transport, "lock_capacity", None)

    async def receive(self, count: int, max_wait: float) -> Chunk | None:
        """Up to ``count`` messages, waiting up to ``max_wait`` for the first; ``None``
        when none came. A paired writer's pings are no messages: a receive that brought
        only pings waits on for the rest of ``max_wait``."""
        r = self.receiver
        r._check()
        if self.columns:
            ns = r.namespace
            deadline = asyncio.get_running_loop().time() + max_wait
            wait = max_wait
            while True:
                request = r._request(max_messages=count, max_wait=wait)
                bodies, columns = await ns.execute(
                    ns.transport.receive_columns,  # type: ignore[attr-defined]
                    r._entity_path, request, wait=wait, link=r._inflight,
                )
                if not bodies:
                    break
                bodies, columns = await self._drop_pings(bodies, columns)
                wait = deadline - asyncio.get_running_loop().time()
                if bodies or wait <= 0:  # only pings: wait on, as Receiver.receive does
                    break
        else:
            bodies, columns = message_columns(await r.receive(count, max_wait))
        if not bodies:
            return None
        n = len(bodies)
        tokens = _listed(columns.get("lock_token"), n)
        until = _listed(columns.get("locked_until_timestamp"), n)
        return Chunk(to_batch(bodies, columns), tokens, min(until))

    async def _drop_pings(
        self, bodies: list[bytes], columns: dict[str, Any]
    ) -> tuple[list[bytes], dict[str, Any]]:
        """A paired writer's pings are no one's data (PN-14): complete them, keep the rest."""
        kinds = columns.get("content_type")
        if type(kinds) is not list or PING_CONTENT_TYPE not in kinds:
            if kinds != PING_CONTENT_TYPE:
                return bodies, columns
            kinds = [kinds] * len(bodies)
        tokens = _listed(columns.get("lock_token"), len(bodies))
        pings = [t for t, k in zip(tokens, kinds, strict=True) if k == PING_CONTENT_TYPE]
        try:
            await self.settle("complete", pings)
        except ServiceBusError as exc:  # they come back when their locks end: no data lost
            log.warning("completing %d pings failed (%s)", len(pings), exc)
        keep = [i for i, k in enumerate(kinds) if k != PING_CONTENT_TYPE]
        kept = {name: [col[i] for i in keep] if type(col) is list else col
                for name, col in columns.items()}
        return [bodies[i] for i in keep], kept

    async def settle(self, action: SettleAction, tokens: list[str]) -> list[float] | None:
        r = self.receiver
        r._check()
        ns = r.namespace
        settlement = Settlement(action, tokens, r.sub_queue)
        return await ns.execute(ns.transport.settle, r._entity_path, settlement)

    async def settle_all(self, action: SettleAction, tokens: list[str]) -> dict[str, float]:
        """Settle ``tokens``, :data:`SETTLE_CHUNK` a request, up to
        :data:`SETTLE_IN_FLIGHT` requests at once; return the tokens whose locks were
        lost. A broker settles a request all or nothing: a failed one is settled again
        token by token, and only the lost ones are given up. For ``renew``, the settled
        tokens' new lock ends are returned too, as ``{token: until}`` (lost: ``-1``)."""
        results: dict[str, float] = {}
        gate = asyncio.Semaphore(SETTLE_IN_FLIGHT)

        async def one(part: list[str]) -> None:
            async with gate:
                try:
                    until = await self.settle(action, part)
                except MessageLockLost:
                    for token in part:
                        try:
                            got = await self.settle(action, [token])
                        except MessageLockLost:
                            results[token] = -1.0
                        else:
                            if got:
                                results[token] = got[0]
                    return
                if until:
                    results.update(zip(part, until, strict=True))

        await asyncio.gather(*(one(tokens[i : i + SETTLE_CHUNK])
                               for i in range(0, len(tokens), SETTLE_CHUNK)))
        return results


def _listed(column: Any, n: int) -> list[Any]:
    return column if type(column) is list else [column] * n


def lost_tokens(results: dict[str, float]) -> set[str]:
    return {t for t, until in results.items() if until < 0}


class Locks:
    """Chunks held locked, renewed on the loop before their locks end (a third of the
    lock duration before), until settled or dropped."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.margin: float | None = None
        self.renewer: asyncio.Task[None] | None = None
        self.renewed = 0
        self.lost = 0
        #: Held while a renewal is on its way: a read taking held chunks (a streaming
        #: admission) waits for it, so the locks it found lost are left out first.
        self.gate = asyncio.Lock()
        self._held: Callable[[], Iterable[Chunk]] = list

    def start(self, chunk: Chunk, held: Callable[[], Iterable[Chunk]]) -> None:
        """Begin renewing what ``held()`` gives (every chunk held), if not yet: the
        lock duration is judged from ``chunk``, the first."""
        if self.renewer is None:
            self.margin = max((chunk.until - CLOCK.now()) / 3, 0.05)
            self._held = held
            self.renewer = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        assert self.margin is not None
        while True:
            await asyncio.sleep(self.margin / 4)  # a failed renewal is tried thrice more
            async with self.gate:
                now = CLOCK.now()
                due = [c for c in list(self._held()) if c.until - now <= self.margin]
                try:
                    await self.renew([t for c in due for t in c.locked()])
                except Exception:  # a bug or an unforeseen error must not end renewing
                    log.exception("renewing locks failed; will try again")

    async def renew(self, tokens: list[str]) -> None:
        """Renew ``tokens`` and record the outcome on the chunks held now that hold
        them (a chunk may have been split meanwhile). While renewals fail, a chunk whose
        lock end has passed is taken as lost: the broker delivers it again. The caller
        holds :attr:`gate`."""
        if not tokens:
            return
        try:
            results = await self.link.settle_all("renew", tokens)
        except ServiceBusError as exc:
            log.warning("renewing %d locks failed (%s); will try again", len(tokens), exc)
            now = CLOCK.now()
            for c in list(self._held()):
                if c.until <= now and c.locked():
                    self.dropped(c, set(c.locked()))
            return
        for c in list(self._held()):
            mine = [t for t in c.locked() if t in results]
            if not mine:
                continue
            alive = [results[t] for t in mine if results[t] >= 0]
            self.renewed += len(alive)
            if alive:
                c.until = min(alive)
            if len(alive) < len(mine):
                self.dropped(c, {t for t in mine if results[t] < 0})

    def dropped(self, chunk: Chunk, lost: set[str]) -> None:
        """Lost locks: the broker delivers those messages again, so they are not ours to
        settle; a chunk not yet admitted leaves their rows out too (an admitted one
        keeps its rows, its offsets fixed: at least once)."""
        self.lost += len(lost)
        if chunk.first:
            chunk.tokens = [None if t in lost else t for t in chunk.tokens]
        else:
            keep = [t not in lost for t in chunk.tokens]
            chunk.tokens = [t for t in chunk.tokens if t not in lost]
            chunk.batch = chunk.batch.filter(pa.array(keep))

    async def stop(self) -> None:
        if self.renewer is not None:
            self.renewer.cancel()
            await asyncio.gather(self.renewer, return_exceptions=True)
            self.renewer = None

    async def abandon(self, tokens: list[str]) -> None:
        """Give ``tokens`` back (delivered again at once); lost ones are back already."""
        try:
            await self.link.settle_all("abandon", tokens)
        except ServiceBusError as exc:  # their locks run out instead
            log.warning("abandoning %d messages failed (%s)", len(tokens), exc)
