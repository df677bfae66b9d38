"""Receiving: :class:`Receiver`, the :class:`ReceiverSession` a session receiver holds,
and :data:`NEXT_AVAILABLE_SESSION`.

Imports the vocabulary (:mod:`aiosb.message`, :mod:`aiosb.errors`,
:mod:`aiosb.entities`), the transport contract (:mod:`aiosb.protocol`) and the client's
small helpers (:mod:`aiosb._inflight`, :mod:`aiosb._duration`); the
:class:`~aiosb.Namespace` a receiver belongs to is referred to for types alone (the client
module imports this one, never the reverse at run time).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ._duration import Duration, to_seconds
from ._inflight import InFlight
from .entities import EntityPath
from .errors import ClientClosed, InvalidArgument, InvalidOperation, ServiceBusError
from .message import PING_CONTENT_TYPE, ReceivedMessage, one_or_many
from .protocol import (
    ReceiveRequest,
    SessionAction,
    SessionInfo,
    SessionRequest,
    SettleAction,
    Settlement,
    check_receive,
)

if TYPE_CHECKING:
    from .client import Namespace

__all__ = ["NEXT_AVAILABLE_SESSION", "Receiver", "ReceiverSession"]


class _NextAvailableSession:
    """The type of :data:`NEXT_AVAILABLE_SESSION`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "aiosb.NEXT_AVAILABLE_SESSION"

    def __reduce__(self) -> str:
        return "NEXT_AVAILABLE_SESSION"


#: Pass as ``session_id`` to receive from whichever session is available next.
NEXT_AVAILABLE_SESSION = _NextAvailableSession()


class ReceiverSession:
    """The session a session receiver holds: its lock and its state.

    Attributes:
        session_id: The session's id.
        locked_until: When the session lock ends unless renewed (UTC).
    """

    def __init__(self, receiver: Receiver, info: SessionInfo) -> None:
        self._receiver = receiver
        self.session_id = info.session_id
        self._lock = info.lock
        self._locked_until = info.locked_until or 0.0

    def __repr__(self) -> str:
        return f"<ReceiverSession {self.session_id!r} until {self.locked_until.isoformat()}>"

    @property
    def locked_until(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self._locked_until, _dt.UTC)

    async def _op(self, action: SessionAction, state: bytes | None = None) -> SessionInfo:
        receiver = self._receiver
        receiver._check()
        ns = receiver.namespace
        request = SessionRequest(action, self.session_id, self._lock, state)
        return await ns.execute(ns.transport.session, receiver._entity_path, request)

    async def renew_lock(self) -> _dt.datetime:
        """Extend the session lock (and the locks of its received messages).

        Raises:
            SessionLockLost: The lock had expired already.
        """
        info = await self._op("renew")
        self._locked_until = info.locked_until or self._locked_until
        return self.locked_until

    async def get_state(self) -> bytes | None:
        """The session's state (``None`` when never set)."""
        return (await self._op("get_state")).state

    async def set_state(self, state: bytes | None) -> None:
        """Store ``state`` with the session (``None`` clears it)."""
        if state is not None and not isinstance(state, bytes | bytearray):
            raise InvalidArgument(f"session state must be bytes or None, not {state!r}.")
        await self._op("set_state", None if state is None else bytes(state))


class Receiver:
    """Receives from one queue, subscription, session or dead-letter queue.

    Use it as an async context manager; ``async for msg in receiver`` receives forever.
    A session receiver locks its session when it opens (or on first use) and releases
    it when it closes; ``receiver.session`` is then the :class:`ReceiverSession`.
    """

    def __init__(
        self,
        namespace: Namespace,
        entity: str,
        mode: Literal["peek_lock", "receive_and_delete"],
        session_id: str | _NextAvailableSession | None,
        sub_queue: str | None,
        prefetch_count: int,
        parsed: EntityPath,
    ) -> None:
        self.namespace = namespace
        self.entity = entity
        self.mode = mode
        self._wants_session = session_id is not None
        self.session_id: str | None = (
            None if isinstance(session_id, _NextAvailableSession) else session_id
        )
        self.session: ReceiverSession | None = None
        self._session_wait = namespace.operation_timeout
        self._accepting = asyncio.Lock()
        self.sub_queue = sub_queue
        self.prefetch_count = prefetch_count
        self._path = str(parsed).lower()
        self._entity_path = parsed.path
        self._last_peeked = 0
        self._closed = False
        self._inflight = InFlight()
        namespace._track(self)

    def __repr__(self) -> str:
        return (
            f"<Receiver {self.namespace.name}/{self._path} {self.mode} "
            f"{'closed' if self._closed else 'open'}>"
        )

    async def __aenter__(self) -> Receiver:
        if self._wants_session:
            await self._accept()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the receiver (idempotent); unsettled locks expire on their own, and a
        session is released for other receivers."""
        if self._closed:
            return
        self._closed = True
        self._inflight.close(f"the receiver for {self.entity!r} was closed")
        self.namespace._untrack(self)
        if self.session is not None:
            await self._release(self.session)

    async def _release(self, session: ReceiverSession) -> None:
        """Give the session up, best effort: an unreleased lock expires by itself."""
        ns = self.namespace
        if ns.closed:
            return
        request = SessionRequest("release", session.session_id, session._lock)
        try:
            async with asyncio.timeout(ns.operation_timeout):
                await ns.transport.session(self._entity_path, request)
        except (ServiceBusError, TimeoutError):
            pass

    def _check(self) -> None:
        if self._closed:
            raise ClientClosed(f"the receiver for {self.entity!r} is closed.")

    async def _accept(self) -> ReceiverSession:
        """Lock this receiver's session (or the next available one), once, however many
        tasks use the receiver first."""
        async with self._accepting:
            if self.session is None:
                self._check()
                ns = self.namespace
                wait = self._session_wait if self.session_id is None else 0.0
                request = SessionRequest("accept", self.session_id, max_wait=wait, mode=self.mode)
                info = await ns.execute(
                    ns.transport.session, self._entity_path, request, wait=wait,
                    link=self._inflight,
                )
                session = ReceiverSession(self, info)
                if self._closed:  # closed while accepting: give it straight back
                    await self._release(session)
                    self._check()
                self.session = session
                self.session_id = info.session_id
            return self.session

    def _request(self, **kw: Any) -> ReceiveRequest:
        session = self.session
        return ReceiveRequest(
            mode=self.mode,
            sub_queue=self.sub_queue,
            session_id=self.session_id,
            session_lock=None if session is None else session._lock,
            **kw,
        )

    async def receive(
        self, max_messages: int = 1, max_wait: Duration | None = None
    ) -> list[ReceivedMessage]:
        """Receive up to ``max_messages``, waiting up to ``max_wait`` for the first.

        Returns as soon as at least one message is available (with those available at
        that moment, up to ``max_messages``), or an empty list when ``max_wait`` runs
        out. ``max_wait=None`` waits until a message arrives.
        """
        self._check()
        wait = to_seconds("max_wait", max_wait, allow_none=True)
        check_receive(max_messages, wait)
        if self._wants_session:
            await self._accept()
        ns = self.namespace
        loop = asyncio.get_running_loop()
        deadline = None if wait is None else loop.time() + wait
        while True:
            request = self._request(max_messages=max_messages, max_wait=wait)
            # Closing the receiver ends a peek-lock receive in flight (what it had
            # locked comes back when the locks end); a receive-and-delete one it lets
            # finish, since the broker may have taken its messages already.
            link = self._inflight if self.mode == "peek_lock" else None
            messages = await ns.execute(
                ns.transport.receive, self._entity_path, request, wait=wait, link=link
            )
            # A loop, not any() over a generator: resuming a generator per message cost
            # more than the rest of this check (#16: every received message comes by).
            for message in messages:
                if message.content_type == PING_CONTENT_TYPE:
                    break
            else:
                return messages
            messages = await self._drop_pings(messages)
            if messages or (deadline is not None and loop.time() >= deadline):
                return messages
            wait = None if deadline is None else max(0.0, deadline - loop.time())

    async def _drop_pings(self, messages: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """A broker that delivers pings breaks PN-14; settle them and hand on the rest."""
        pings = [m for m in messages if m.content_type == PING_CONTENT_TYPE]
        if self.mode == "peek_lock":
            await self._settle("complete", pings)
        return [m for m in messages if m.content_type != PING_CONTENT_TYPE]

    def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ReceivedMessage]:
        while not self._closed:
            for message in await self.receive(max(1, self.prefetch_count), None):
                yield message

    async def receive_deferred(
        self, sequence_numbers: int | Sequence[int]
    ) -> list[ReceivedMessage]:
        """Receive deferred messages by sequence number."""
        self._check()
        seqs = [sequence_numbers] if isinstance(sequence_numbers, int) else list(sequence_numbers)
        if self._wants_session:
            await self._accept()
        ns = self.namespace
        request = self._request(max_messages=max(1, len(seqs)), sequence_numbers=seqs)
        return await ns.execute(
            ns.transport.receive, self._entity_path, request, link=self._inflight
        )

    async def peek(
        self, max_messages: int = 1, *, from_sequence_number: int | None = None
    ) -> list[ReceivedMessage]:
        """Browse up to ``max_messages`` without locking them.

        Starts after the last message this receiver peeked (or at
        ``from_sequence_number``), and asks again until it has ``max_messages`` or
        nothing is left, since a broker may return fewer than asked (PT-13).
        """
        self._check()
        check_receive(max_messages)
        start = self._last_peeked + 1 if from_sequence_number is None else from_sequence_number
        if self._wants_session:
            await self._accept()
        ns = self.namespace
        found: list[ReceivedMessage] = []
        while len(found) < max_messages:
            request = self._request(
                max_messages=max_messages - len(found), peek=True, from_sequence_number=start
            )
            batch = await ns.execute(
                ns.transport.receive, self._entity_path, request, link=self._inflight
            )
            if not batch:
                break
            found.extend(batch)
            start = batch[-1].sequence_number + 1
        if found:
            self._last_peeked = found[-1].sequence_number
        return found

    # -- settlement ------------------------------------------------------------------

    def _tokens(self, messages: list[ReceivedMessage]) -> list[str]:
        if self.mode != "peek_lock":
            raise InvalidOperation(
                "Messages received in receive_and_delete mode are settled already."
            )
        tokens = []
        # A batch comes from one entity: its path is lowered once, not per message (#16).
        seen = None
        for msg in messages:  # each a ReceivedMessage (one_or_many)
            if msg.lock_token is None:
                raise InvalidOperation(
                    f"Message {msg.sequence_number} holds no lock (peeked, or received and "
                    "deleted): there is nothing to settle."
                )
            path = msg.entity_path
            if path != seen:
                if path.lower() != self._path:
                    raise InvalidOperation(
                        f"Message {msg.sequence_number} was received from {path!r}, "
                        f"not {self._path!r}: settle it with the receiver it came from."
                    )
                seen = path
            tokens.append(msg.lock_token)
        return tokens

    async def _settle(
        self, action: SettleAction, messages: ReceivedMessage | Sequence[ReceivedMessage], **kw: Any
    ) -> list[float] | None:
        self._check()
        msgs = one_or_many(messages, ReceivedMessage, "renew_lock" if action == "renew" else action)
        tokens = self._tokens(msgs)
        if not tokens:
            return None
        ns = self.namespace
        settlement = Settlement(action, tokens, self.sub_queue, **kw)
        if self.session is not None:
            settlement.session_id = self.session.session_id
            settlement.session_lock = self.session._lock
        return await ns.execute(ns.transport.settle, self._entity_path, settlement)

    async def complete(self, message: ReceivedMessage | Sequence[ReceivedMessage]) -> None:
        """Complete (delete) locked message(s).

        Raises:
            MessageLockLost: The lock expired or the message was settled already.
        """
        await self._settle("complete", message)

    async def abandon(
        self,
        message: ReceivedMessage | Sequence[ReceivedMessage],
        *,
        properties_to_modify: dict[str, Any] | None = None,
    ) -> None:
        """Give the message (or a list, in one request) back: it is delivered again (or
        dead-lettered once its delivery count reaches ``max_delivery_count``, or expired
        per EX-3)."""
        await self._settle("abandon", message, properties_to_modify=properties_to_modify)

    async def dead_letter(
        self,
        message: ReceivedMessage,
        reason: str | None = None,
        description: str | None = None,
        *,
        properties_to_modify: dict[str, Any] | None = None,
    ) -> None:
        """Move the message to the dead-letter queue with a reason and description."""
        await self._settle(
            "dead_letter",
            message,
            reason=reason,
            description=description,
            properties_to_modify=properties_to_modify,
        )

    async def defer(
        self, message: ReceivedMessage, *, properties_to_modify: dict[str, Any] | None = None
    ) -> None:
        """Set the message aside; fetch it later with :meth:`receive_deferred`."""
        await self._settle("defer", message, properties_to_modify=properties_to_modify)

    async def renew_lock(
        self, message: ReceivedMessage | Sequence[ReceivedMessage]
    ) -> _dt.datetime | list[_dt.datetime]:
        """Extend the lock of a message (or of a list, in one request) by the entity's
        lock duration; return the new expiry (a list for a list)."""
        messages = one_or_many(message, ReceivedMessage, "renew_lock")
        until = await self._settle("renew", messages) or []
        for msg, ts in zip(messages, until, strict=True):
            msg.locked_until_timestamp = ts
        expiries = [_dt.datetime.fromtimestamp(ts, _dt.UTC) for ts in until]
        return expiries[0] if isinstance(message, ReceivedMessage) else expiries
