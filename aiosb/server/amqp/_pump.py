"""Receiver links of a connection (a mixin of :class:`~.connection.Connection`): the pump
that delivers the broker's messages while the client gives credit, the dispositions that
settle them, and session receivers.

A session receiver attaches with the ``com.microsoft:session-filter`` source filter: a
session id, or null for the next available session. The server accepts the session from
the broker before it answers the attach (in a task of its own, so that waiting for the
next session holds up no other link), echoes the session id in the filter and gives
the lock's expiry as ``com.microsoft:locked-until-utc`` (.NET ticks). A session that
cannot be locked, or none available within the link's ``com.microsoft:timeout``, is
answered with an attach and a detach carrying the error. The lock is released when the
link detaches or the connection ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as _dt
import logging
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any

from ...errors import InvalidOperation, ServiceBusError
from ...message import ReceivedMessage
from ...protocol import ReceiveRequest, SessionRequest, Settlement
from . import performatives as p
from ._eager import run_eagerly
from ._framing import Framing
from ._links import LONG_POLL, Link, ProtocolViolation, Session, after, since
from ._receiving import delivery_payload, delivery_tag, settlement_of
from .codec import Described, Symbol, UInt

if TYPE_CHECKING:
    from ...emulator import EmulatorNamespace, Journal

__all__ = ["SESSION_FILTER", "ReceiverLinks", "ticks"]

_log = logging.getLogger("aiosb.server.amqp")

SESSION_FILTER = Symbol("com.microsoft:session-filter")
LOCKED_UNTIL = Symbol("com.microsoft:locked-until-utc")
TIMEOUT = Symbol("com.microsoft:timeout")
#: .NET ticks (100 ns) from 0001-01-01 to the Unix epoch.
_EPOCH_TICKS = 621355968000000000
#: An accepted outcome, as a disposition echoes it.
_ACCEPTED = p.performative(p.ACCEPTED)
#: How long a next-available session receiver waits without a com.microsoft:timeout (s).
SESSION_WAIT = 60.0
#: Bytes of a transfer frame that are not payload, at most: the frame header and the
#: performative (a delivery tag of up to 32 bytes).
_FRAME_HEAD = 8 + 96


def ticks(seconds: float) -> int:
    """A UTC epoch time in .NET ticks, as ``com.microsoft:locked-until-utc`` says it."""
    return _EPOCH_TICKS + round(seconds * 10_000_000)


class ReceiverLinks(Framing):
    """The receiver-link half of a connection."""

    ns: EmulatorNamespace
    journal: Journal | None
    #: The sessions this connection holds: (entity path, lower case; session id) -> lock.
    held: dict[tuple[str, str], str]
    #: The largest frame the client takes (its OPEN's max-frame-size).
    remote_max_frame: int
    _releases: set[asyncio.Task[None]]
    #: Settlements waiting for the turn of the loop to go to the broker together
    #: (:meth:`_settle_later`): by entity, action, sub-queue and session.
    _later: dict[Any, _Waiting]
    _settling: asyncio.Task[None] | None

    if TYPE_CHECKING:
        def _fail(self, exc: ProtocolViolation) -> None:
            ...

        def _flow(self, session: Session, link: Link | None = None,
                  drain: bool = False) -> None:
            ...

        def _attach_reply(self, session: Session, link: Link, fields: list[Any],
                          refusal: ServiceBusError | None, source: Any = None,
                          properties: dict[Any, Any] | None = None) -> None:
            ...

    def _session_mismatch(self, link: Link, filters: dict[Any, Any]
                          ) -> ServiceBusError | None:
        """Why a receiver link may not attach to its entity's sessions, or ``None``: one
        without a session filter on an entity that requires sessions, or one with it on
        an entity that does not. Service Bus refuses both attaches (amqp:not-allowed),
        not the first receive after them."""
        if link.kind != "entity" or link.receiving or link.sub_queue is not None:
            return None
        try:
            kind, sessionful = self.ns.lookup(link.path)
        except ServiceBusError:
            return None  # _refusal said why
        if kind == "topic":
            return None  # the receives say why
        if sessionful and SESSION_FILTER not in filters:
            return InvalidOperation(
                f"It is not possible for an entity that requires sessions to create a "
                f"non-sessionful message receiver: {link.path!r} requires sessions; "
                "receive with a session receiver.")
        if not sessionful and SESSION_FILTER in filters:
            return InvalidOperation(  # the broker's words for it (emulator/_sessions.py)
                f"{link.path!r} is not session-enabled: create it with "
                "requires_session=True, or receive without a session_id.")
        return None

    def _pump(self, session: Session, link: Link) -> None:
        """Send the replies ``link`` (a ``$cbs`` or ``$management`` reply link) has queued
        while the client's credit and window last.

        Once the client has given the link credit and used it up, each reply it asked
        for is sent on the request that asked (as if it stood for the reply's credit):
        the Python SDK gives its reply links 10,000 credit once and never more, and
        Service Bus keeps answering it; held, its 10,001st request on one link waited
        for ever (#47). A client that never gave the link credit, or whose last flow
        gave it none (to stop the link, AMQP 2.6.7), has its replies held, up to
        :data:`~._links.MOST_REPLIES`.
        """
        outbox = link.outbox
        link.given = link.given or link.credit > 0
        while outbox and (link.credit > 0 or link.given) \
                and session.remote_incoming_window >= self._frames_of(len(outbox[0])):
            link.credit = max(link.credit, 1)
            self._transfer(session, link, outbox.popleft(), link.delivery_count.to_bytes(4, "big"))

    def _frames_of(self, size: int) -> int:
        """The transfer frames a delivery of ``size`` bytes takes (its payload split to fit
        the client's max-frame-size): each counts against the session window."""
        return 1 + max(0, size - 1) // (self.remote_max_frame - _FRAME_HEAD)

    def _transfer(self, session: Session, link: Link, payload: bytes, tag: bytes,
                  settled: bool = True) -> int:
        """One delivery, split into frames no larger than the client takes; its
        delivery-id. Every frame is a transfer of the session (2.5.6: next-outgoing-id
        and the client's window count frames); delivery-ids count deliveries."""
        delivery_id = session.next_delivery_id
        session.next_delivery_id = after(delivery_id)
        frames = self._frames_of(len(payload))
        session.next_outgoing_id = after(session.next_outgoing_id, frames)
        session.remote_incoming_window -= frames
        link.delivery_count = after(link.delivery_count)
        link.credit -= 1
        handle, send = link.our_handle, self.send_frame
        room = self.remote_max_frame - _FRAME_HEAD
        last = (frames - 1) * room
        for start in range(0, last, room):
            send(session.channel, p.transfer(handle, delivery_id, tag, settled, more=True),
                 payload[start:start + room])
        send(session.channel, p.transfer(handle, delivery_id, tag, settled), payload[last:])
        return delivery_id

    async def _open_session(self, session: Session, link: Link, fields: list[Any],
                            session_id: str | None) -> None:
        """Accept the session a receiver link asks for, answer its attach, then pump."""
        wait = SESSION_WAIT
        props = fields[13] if isinstance(fields[13], dict) else {}
        if isinstance(props.get(TIMEOUT), int):
            wait = props[TIMEOUT] / 1000
        source = fields[5]
        try:
            info = await self.ns.session(link.path, SessionRequest(
                "accept", session_id, max_wait=wait, mode=link.mode))
        except ServiceBusError as exc:
            session.links.pop(link.handle, None)
            self._attach_reply(session, link, fields, exc, source=source)
            return
        link.session_id, link.session_lock = info.session_id, info.lock
        assert info.lock is not None
        self.held[(link.path.lower(), info.session_id)] = info.lock
        ours = p.performative(p.SOURCE, *(source.value if isinstance(source, Described)
                                            else [link.address]))
        terminus = ours.value
        filters = dict(terminus[7]) if isinstance(terminus[7], dict) else {}
        filters[SESSION_FILTER] = info.session_id
        terminus[7] = filters
        until = info.locked_until if info.locked_until is not None else self.ns.now()
        self._attach_reply(session, link, fields, None, source=ours,
                           properties={LOCKED_UNTIL: ticks(until)})
        await self._pump_receive(session, link)

    async def _release(self, link: Link) -> None:
        """Give back the session a receiver link held."""
        if link.session_id is None or link.session_lock is None:
            return
        key = (link.path.lower(), link.session_id)
        if self.held.get(key) == link.session_lock:
            del self.held[key]
        try:
            await self.ns.session(link.path, SessionRequest(
                "release", link.session_id, link.session_lock))
        except ServiceBusError:
            pass  # gone with its entity, or lost already: nothing to give back

    async def _pump_receive(self, session: Session, link: Link) -> None:
        """Deliver the broker's messages on ``link`` while the client gives credit.

        A receive waits up to :data:`LONG_POLL` for messages; a flow that drains, or
        takes back credit the wait counts on, cuts it short (:meth:`_recheck`: the
        JavaScript client gives its drain 200 ms, then closes the link). Peek-locked
        messages the client has no credit or window left for, or that a detach keeps
        from it, are released (AMQP's released: not counted as a delivery).
        """
        while True:
            await link.wake.wait()
            if link.credit <= 0 or session.remote_incoming_window <= 0:
                link.wake.clear()
                if link.drain:
                    self._drained(session, link)
                continue
            link.asked = min(link.credit, session.remote_incoming_window, 1000)
            request = ReceiveRequest(
                link.mode, max_messages=link.asked, max_wait=0 if link.drain else LONG_POLL,
                sub_queue=link.sub_queue, session_id=link.session_id,
                session_lock=link.session_lock,
            )
            link.poll = poll = asyncio.ensure_future(self.ns.receive(link.path, request))
            try:
                messages = await poll
                if messages and self.journal is not None:
                    await self.journal.commit()
            except asyncio.CancelledError:
                if poll.done() and not poll.cancelled() and poll.exception() is None:
                    self._give_back(link, poll.result())  # taken, and never to be sent
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                continue  # a flow cut the wait short: ask again, as it says
            except ServiceBusError as exc:
                _log.info("AMQP: ended a receiver on %s: %s", link.path, exc)
                session.links.pop(link.handle, None)
                self.send_frame(session.channel, p.performative(
                    p.DETACH, UInt(link.our_handle), True,
                    p.error_of(exc, link.path),
                ))
                return
            finally:
                link.poll = None
            settled = link.mode == "receive_and_delete"
            for n, message in enumerate(messages):
                payload = delivery_payload(message)
                if not settled and (link.credit <= 0 or session.remote_incoming_window
                                    < self._frames_of(len(payload))):
                    self._give_back(link, messages[n:])  # credit taken back meanwhile
                    break
                delivery_id = self._transfer(session, link, payload, delivery_tag(message),
                                             settled)
                if not settled and message.lock_token is not None:
                    session.unsettled[delivery_id] = (link, message.lock_token)
            if link.drain:
                self._drained(session, link)
            self.flush()
            await self.writer.drain()

    @staticmethod
    def _forget(session: Session, link: Link) -> None:
        """Forget the deliveries of ``link`` (detached) the client had not settled: by
        AMQP they end with their link (2.6.1), so a disposition sent for one after the
        detach settles nothing. The messages stay locked until their locks end or a
        settlement by lock token ($management), which the SDKs fall back to."""
        if link.kind != "entity" or link.receiving:
            return
        gone = [d for d, (owner, _token) in session.unsettled.items() if owner is link]
        for delivery_id in gone:
            del session.unsettled[delivery_id]

    def _recheck(self, link: Link) -> None:
        """After the client's flow on ``link``: a receive waiting on credit the client
        took back, or that a drain wants answered now, is cut short."""
        if link.poll is not None and (link.drain or link.credit < link.asked):
            link.poll.cancel()

    def _drained(self, session: Session, link: Link) -> None:
        """Answer a drain: the credit left is used up (2.6.7), said in a flow."""
        link.delivery_count = after(link.delivery_count, max(0, link.credit))
        link.credit = 0
        link.drain = False
        self._flow(session, link, drain=True)

    def _give_back(self, link: Link, messages: list[ReceivedMessage]) -> None:
        """Release the peek-locked ``messages`` the client will not be sent."""
        tokens = [m.lock_token for m in messages if m.lock_token is not None]
        if tokens:
            settlement = Settlement("release", tokens, link.sub_queue)
            settlement.session_id, settlement.session_lock = link.session_id, link.session_lock
            self._background(self.ns.settle(link.path, settlement))

    def _background(self, work: Awaitable[Any]) -> None:
        """Run ``work`` on its own, beyond the link (or connection) that asked for it;
        a broker error then has no one to tell (the messages' locks run out instead)."""
        async def quietly() -> None:
            with contextlib.suppress(ServiceBusError):
                await work
        task = asyncio.get_running_loop().create_task(quietly())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def _settle_later(self, path: str, settlement: Settlement, session: Session,
                      delivery_id: int, echo: Any) -> None:
        """Settle at the turn of the loop, with the others alike, and answer then
        (``echo``: the outcome to answer with, ``None`` if the client settled already).

        #36: the SDKs settle each message with a disposition of its own, and a settlement
        of a hundred costs the broker what one of one does. What waits is settled before
        the connection acts on any other frame (:meth:`_settled`).
        """
        later = self._later
        if not later:
            self._loop.call_soon(self._settle_now)
        alike = settlement.properties_to_modify is None and settlement.reason is None \
            and settlement.description is None
        key: Any = (path, settlement.action, settlement.sub_queue, settlement.session_id,
                    settlement.session_lock) if alike else object()
        waiting = later.get(key)
        if waiting is None:
            later[key] = waiting = _Waiting(path, settlement)
        else:
            waiting.tokens += settlement.lock_tokens
        waiting.answers.append((session, delivery_id, echo))

    def _settle_now(self) -> None:
        """Start settling what waits, unless a settling under way will take it next."""
        if self._later and (self._settling is None or self._settling.done()):
            # At once, in a task of its own only if it waits (#50: a task per
            # completion cost more than the completion)
            self._settling = task = run_eagerly(self._settle_waiting())
            if task is not None:
                self._releases.add(task)
                task.add_done_callback(self._releases.discard)

    async def _settle_waiting(self) -> None:
        """Settle what waits, a settlement per kind; then, once the journal has it,
        answer each disposition that asked, in ranges where the outcomes agree."""
        try:
            while self._later:
                waiting, self._later = self._later, {}
                answers: dict[int, tuple[Session, list[tuple[int, Any]]]] = {}
                for group in waiting.values():
                    failed = await self._settle_group(group)
                    for session, delivery_id, echo in group.answers:
                        if echo is not None:
                            outcome = failed.get(delivery_id, echo)
                            answers.setdefault(session.channel, (session, []))[1].append(
                                (delivery_id, outcome))
                if self.journal is not None:
                    await self.journal.commit()
                for session, replies in answers.values():
                    self._answer_dispositions(session, replies)
        except Exception as exc:  # a bug's blast ends this connection, said, not silent
            _log.exception("AMQP settlement failed unexpectedly")
            self._fail(ProtocolViolation(
                "amqp:internal-error", f"{type(exc).__name__}: {str(exc)[:200]}"))

    async def _settle_group(self, group: _Waiting) -> dict[int, Any]:
        """Settle ``group`` at the broker; the rejections to answer with, by delivery-id,
        for what failed (one lost lock must not keep the rest of a group unsettled)."""
        settlement, path = group.settlement, group.path
        try:
            await self.ns.settle(path, settlement)
            return {}
        except ServiceBusError as exc:
            if len(group.answers) == 1:
                return {group.answers[0][1]: p.rejected_with(exc, path)}
        failed = {}
        for token, (_session, delivery_id, _echo) in zip(
                settlement.lock_tokens, group.answers, strict=True):
            one = dataclasses.replace(settlement, lock_tokens=[token])
            try:
                await self.ns.settle(path, one)
            except ServiceBusError as exc:
                failed[delivery_id] = p.rejected_with(exc, path)
        return failed

    def _answer_dispositions(self, session: Session, replies: list[tuple[int, Any]]) -> None:
        """Dispositions for ``replies`` (delivery-id, outcome): a range for each run of
        consecutive ids with one outcome."""
        base = replies[0][0]
        replies.sort(key=lambda reply: since(reply[0], base))
        first, outcome = replies[0]
        last = first
        for delivery_id, then in replies[1:]:
            if then == outcome and delivery_id == after(last):
                last = delivery_id
                continue
            self._disposition(session, first, last, outcome)
            first = last = delivery_id
            outcome = then
        self._disposition(session, first, last, outcome)

    def _disposition(self, session: Session, first: int, last: int, outcome: Any) -> None:
        if outcome == _ACCEPTED:  # a completion, the most (#50: written directly)
            self.send_frame(session.channel, p.accepted(
                first, None if last == first else last, role=False))
            return
        self.send_frame(session.channel, p.performative(
            p.DISPOSITION, False, UInt(first), None if last == first else UInt(last), True,
            outcome))

    async def _settled(self) -> None:
        """Return once what the client settled is settled at the broker."""
        while self._later or (self._settling is not None and not self._settling.done()):
            self._settle_now()
            if self._settling is not None:
                await asyncio.shield(self._settling)

    async def _on_disposition(self, session: Session, fields: list[Any]) -> None:
        """Settle what a receiver's disposition says (:meth:`_settle_later`), and echo
        the outcome unless the client settled already."""
        if not fields[0]:
            return  # a sender's disposition: only the $cbs replies, sent settled
        first = int(fields[1])
        last = int(fields[2]) if fields[2] is not None else first
        unsettled = session.unsettled
        # The deliveries outstanding in the range, which may wrap past 2**32 - 1 (ids are
        # sequence numbers): never more work than they are, however wide a range a
        # client names.
        width = since(last, first) + 1
        if width <= 0:
            return  # last before first: a range of nothing (RFC 1982), not of everything
        ids: Iterable[int] = (
            [after(first, i) for i in range(width)] if width <= len(unsettled)
            else sorted((d for d in unsettled if 0 <= since(d, first) < width),
                        key=lambda d: since(d, first))
        )
        for delivery_id in ids:
            entry = unsettled.pop(delivery_id, None)
            if entry is None:
                continue
            link, token = entry
            settlement, outcome = settlement_of(fields[4], token, link.sub_queue)
            if settlement is None:
                if not fields[3]:  # no outcome yet (received): it stays outstanding
                    session.unsettled[delivery_id] = entry
                    continue
                # Settled by the client with no outcome: released (2.6.12 leaves the
                # default to us), not locked for a client that has forgotten it.
                settlement = Settlement("release", [token], link.sub_queue)
            settlement.session_id, settlement.session_lock = link.session_id, link.session_lock
            self._settle_later(link.path, settlement, session, delivery_id,
                               None if fields[3] else outcome)


class _Waiting:
    """Settlements alike waiting to go to the broker as one (:meth:`ReceiverLinks.
    _settle_later`), and the deliveries to answer for."""

    __slots__ = ("answers", "path", "settlement", "tokens")

    def __init__(self, path: str, settlement: Settlement) -> None:
        self.path = path
        #: The lock tokens, which the settlement settles (one list).
        # (The settlement is this disposition's own: its list of tokens grows here.)
        self.tokens = settlement.lock_tokens = list(settlement.lock_tokens)
        self.settlement = settlement
        #: (session, delivery-id, outcome to answer with or None), in token order.
        self.answers: list[tuple[Session, int, Any]] = []


def instant(seconds: float) -> _dt.datetime:
    """A UTC epoch time as an aware datetime (an AMQP timestamp)."""
    return _dt.datetime.fromtimestamp(seconds, _dt.UTC)
