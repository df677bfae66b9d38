"""Sending: :class:`SendingLink` (what every sender shares: lifetime, batches,
transactions), the plain :class:`Sender` and its :class:`Transaction`.

Imports the vocabulary (:mod:`aiosb.message`, :mod:`aiosb.errors`) only; the
:class:`~aiosb.Namespace` a sender belongs to is referred to for types alone (the client
module imports this one, never the reverse at run time). The paired sender
(:mod:`aiosb.pairing.sender`) is a :class:`SendingLink` too.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as _dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from .errors import ClientClosed, InvalidArgument, InvalidOperation
from .message import Message, one_or_many

if TYPE_CHECKING:
    from .client import Namespace

__all__ = ["SendingLink", "Sender", "Transaction"]

_MAX_TRANSACTION_MESSAGES = 100


class Transaction:
    """Sends buffered inside ``async with sender.transaction()``, committed at its end."""

    def __init__(self, sender: SendingLink) -> None:
        self.sender = sender
        self.messages: list[Message] = []
        self._token: contextvars.Token[Transaction | None] | None = None

    async def __aenter__(self) -> Transaction:
        if self.sender._transaction.get() is not None:
            raise InvalidOperation("A transaction is already open on this sender in this task.")
        self._token = self.sender._transaction.set(self)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        token = self._token
        if token is None:  # ContextVar.reset(None) raised TypeError too, with less to say
            raise TypeError("the transaction was not entered: 'async with sender.transaction()'")
        self.sender._transaction.reset(token)
        if exc_type is None and self.messages:
            await self.sender._send_now(self.messages, transaction=True)

    def add(self, messages: list[Message]) -> None:
        if len(self.messages) + len(messages) > _MAX_TRANSACTION_MESSAGES:
            raise InvalidOperation(
                f"A transaction holds at most {_MAX_TRANSACTION_MESSAGES} messages; this one "
                f"would hold {len(self.messages) + len(messages)}."
            )
        self.messages.extend(messages)


class SendingLink:
    """What every sender shares: its lifetime, batches, and transactions.

    ``send`` takes one message or a list (one batch, all or none); inside
    ``async with sender.transaction()`` messages are held and sent at the commit.
    Subclasses say where a batch goes (``_send_now``).
    """

    def __init__(self, entity: str) -> None:
        self.entity = entity
        self._closed = False
        self._transaction: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
            f"aiosb-tx-{id(self)}", default=None
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the sender (idempotent)."""
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise ClientClosed(f"the sender for {self.entity!r} is closed.")

    async def send(self, message: Message | Sequence[Message]) -> None:
        """Send one message, or a list as one batch (all of it or none).

        Inside ``async with sender.transaction()`` the messages are held and sent with
        the transaction's commit.

        Raises:
            MessageSizeExceeded: A message or the batch is over the size limit.
            OperationTimeout: No success within the operation timeout.
        """
        self._check()
        messages = one_or_many(message, Message, "send")
        if not messages:
            return
        tx = self._transaction.get()
        if tx is not None:
            tx.add(messages)
            return
        await self._send_now(messages)

    async def _send_now(self, messages: list[Message], transaction: bool = False) -> None:
        raise NotImplementedError

    def transaction(self) -> Transaction:
        """An async context manager: sends inside it commit together, or not at all."""
        self._check()
        return Transaction(self)


class Sender(SendingLink):
    """Sends to one queue or topic. Safe under many concurrent ``send`` calls.

    Use it as an async context manager (``async with ns.sender("orders") as s``).
    """

    def __init__(self, namespace: Namespace, entity: str) -> None:
        super().__init__(entity)
        self.namespace = namespace
        namespace._track(self)

    def __repr__(self) -> str:
        return (
            f"<Sender {self.namespace.name}/{self.entity} {'closed' if self._closed else 'open'}>"
        )

    async def aclose(self) -> None:
        """Close the sender (idempotent)."""
        self._closed = True
        self.namespace._untrack(self)

    async def _send_now(self, messages: list[Message], transaction: bool = False) -> None:
        ns = self.namespace
        if transaction:
            await ns.execute(ns.transport.send, self.entity, messages, transaction=True)
        else:
            await ns.execute(ns.transport.send, self.entity, messages)

    async def schedule(
        self, message: Message | Sequence[Message], at: _dt.datetime
    ) -> int | list[int]:
        """Schedule message(s) for ``at``; return the sequence number(s) to cancel with.

        The enqueue time is ``at``, so a message's expiry is ``at + time_to_live`` (EX-5).
        """
        self._check()
        if not isinstance(at, _dt.datetime) or at.tzinfo is None:
            raise InvalidArgument(f"schedule needs a timezone-aware datetime, not {at!r}.")
        single = isinstance(message, Message)
        messages = one_or_many(message, Message, "schedule")
        stamped = [dataclasses.replace(m, scheduled_enqueue_time=at) for m in messages]
        ns = self.namespace
        seqs = await ns.execute(ns.transport.schedule, self.entity, stamped)
        return seqs[0] if single else seqs

    async def cancel_scheduled(self, sequence_number: int | Sequence[int]) -> None:
        """Cancel scheduled message(s) by sequence number."""
        self._check()
        seqs = [sequence_number] if isinstance(sequence_number, int) else list(sequence_number)
        ns = self.namespace
        await ns.execute(ns.transport.cancel_scheduled, self.entity, seqs)
