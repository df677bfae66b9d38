"""One AMQP connection: the SASL layer (:mod:`._sasl`), then the
open/begin/attach/transfer/detach/end/close state machine, run as a task of the server's
event loop.

Frames are handled one at a time, in order: a transfer to an entity awaits the broker's
``send`` before the next frame is read, so a client's messages reach the broker in the
order it sent them, and TCP backpressure stands in for everything else.

Flow control:

- Session: we advertise an incoming window of :data:`WINDOW` transfers and renew it with
  a session flow when half is used; we send only while the client's window lasts.
- Links the client sends on: :data:`CREDIT` link credit, topped up when half is used.
- Links we send on (the ``$cbs`` and ``$management`` replies): we send while the
  client's credit lasts and queue the rest until its next flow.

Receiver links, dispositions and session receivers are :mod:`._pump`'s; the ``$cbs``
node is :mod:`._cbs`'s, the ``$management`` nodes :mod:`._management`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from typing import Any

from ...auth import SasChecker
from ...emulator import EmulatorNamespace, Journal
from ...errors import (
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
    ServiceBusError,
    Unauthorized,
)
from ...protocol import check_columns
from . import performatives as p
from ._batch_columns import read_columns
from ._cbs import Tokens, entity_of, put_token_reply
from ._eager import run_eagerly
from ._links import (
    CHANNEL_MAX,
    CREDIT,
    HANDLE_MAX,
    IDLE_SECONDS,
    LONG_POLL,
    MAX_FRAME,
    WINDOW,
    Link,
    ProtocolViolation,
    Session,
    after,
    beat,
    check_channel,
    check_handle,
    heartbeat_interval,
    hold_reply,
    reply_link,
    room_for_reply,
    since,
    watch_idle,
)
from ._management import Management
from ._pump import SESSION_FILTER, ReceiverLinks
from ._sasl import sasl
from .codec import (
    AMQP_HEADER,
    SASL_HEADER,
    DecodeError,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
)
from .messages import messages_of, reply_payload, sections_of

__all__ = ["CREDIT", "LONG_POLL", "MAX_FRAME", "WINDOW", "Connection", "ProtocolViolation"]

log = logging.getLogger("aiosb.server.amqp")
#: Seconds a client has from connecting to its OPEN (the header, SASL, the OPEN).
HANDSHAKE_SECONDS = 30.0
#: Seconds a closing connection's last bytes are given to reach the client.
CLOSE_SECONDS = 5.0

_MANAGEMENT = "/$management"

_ACCEPTED = p.performative(p.ACCEPTED)


class Connection(ReceiverLinks):
    """Serves one client connection on ``ns``.

    Args:
        ns: The namespace every link of the connection addresses.
        checker: Checks the tokens put on ``$cbs`` and a key given with SASL PLAIN.
        reader: The socket's reader.
        writer: The socket's writer.
    """

    def __init__(self, ns: EmulatorNamespace, checker: SasChecker,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 journal: Journal | None = None) -> None:
        self.ns = ns
        #: Durable mode: what the broker changed is on disk before the client hears of it.
        self.journal = journal
        self.tokens = Tokens(checker)
        self.reader = reader
        self.writer = writer
        self.sessions: dict[int, Session] = {}
        self.hostname: str | None = None
        self.remote_max_frame = 512
        self._tending: list[asyncio.Task[None]] = []  # heartbeats, the idle watch
        self._loop = asyncio.get_running_loop()
        self._heard = 0.0  # the loop time of the client's last frame
        self._opened = False
        self._closed = False
        self.held: dict[tuple[str, str], str] = {}
        self._releases: set[asyncio.Task[None]] = set()
        self._later: dict[Any, Any] = {}  # settlements waiting: _settle_later
        self._settling: asyncio.Task[None] | None = None
        self._out: list[bytes] = []  # frames queued this turn of the loop (send_frame)
        self.management = Management(ns, self.tokens, self.held, journal)

    # -- the socket ---------------------------------------------------------------------

    async def serve(self) -> None:
        """Run the connection until the client closes it or breaks the protocol."""
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_SECONDS):  # a silent socket is let go
                    opened = await self._negotiate() and await self._opening()
            except TimeoutError:
                log.info("an AMQP client did not open within %g s", HANDSHAKE_SECONDS)
                return
            if opened:
                await self._frames()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client went, or broke its own TLS (bytes outside it): nothing to say
        except ProtocolViolation as exc:
            self._fail(exc)
        except Exception as exc:  # a bug's blast ends this connection, said, not silent
            log.exception("AMQP connection failed unexpectedly")
            self._fail(ProtocolViolation(
                "amqp:internal-error", f"{type(exc).__name__}: {str(exc)[:200]}"))
        finally:
            for task in self._tending:
                task.cancel()
            self._settle_now()  # what the client settled goes to the broker regardless
            for session in self.sessions.values():
                for link in session.links.values():
                    self._unlink(session, link)
            self.flush()
            self.writer.close()
            with contextlib.suppress(Exception):  # a client that reads nothing more: let go
                async with asyncio.timeout(CLOSE_SECONDS):
                    await self.writer.wait_closed()
            self.writer.transport.abort()

    def _fail(self, exc: ProtocolViolation) -> None:
        """Close the connection, saying why; its frame reader meets the end at once
        (closing waits for what is left to write, which a vanished client never reads)."""
        log.info("AMQP: closed a connection: %s: %s", exc.condition, exc.description)
        self.send_frame(0, p.performative(p.CLOSE, p.amqp_error(exc.condition, exc.description)))
        self._closed = True
        self.flush()
        self.writer.close()
        self.reader.feed_eof()

    async def _negotiate(self) -> bool:
        """The protocol header and, if asked for, SASL (:mod:`._sasl`). False: the client
        gave up or failed."""
        header = await self.read_exactly(8)
        if header == SASL_HEADER:
            signed_in = await sasl(self, self.tokens)
            if signed_in is None:
                return False
            self.hostname = signed_in.hostname
            header = await self.read_exactly(8)
        if header != AMQP_HEADER:
            self.writer.write(AMQP_HEADER)
            return False
        self.writer.write(AMQP_HEADER)
        return True

    async def _opening(self) -> bool:
        """Read frames until the client's OPEN (answered); False if it closed first."""
        while not self._opened and not self._closed:
            if not await self._frame():
                return False
        return True

    async def _frames(self) -> None:
        while await self._frame():
            pass

    async def _frame(self) -> bool:
        """Read and act on one frame; False once the connection is closed."""
        if self._closed:
            return False
        kind, channel, body = await self.read_frame()
        if not body:
            return True  # a heartbeat
        if kind != 0:
            raise ProtocolViolation("amqp:connection:framing-error", "a SASL frame after SASL.")
        try:
            code, fields, end = p.parse(body)
        except DecodeError as exc:
            raise ProtocolViolation("amqp:decode-error", str(exc)) from None
        if not self._opened and code != p.OPEN:
            raise ProtocolViolation("amqp:not-allowed", "the first frame must be an open.")
        if code != p.DISPOSITION and (self._later or (self._settling is not None
                                      and not self._settling.done())):
            await self._settled()  # what the client settled is, before anything else
        try:
            await self._dispatch(channel, code, fields, body, end)
        except (TypeError, ValueError, IndexError, struct.error, OverflowError) as exc:
            # A field of the wrong type or out of range (an attach's handle "zero").
            raise ProtocolViolation(
                "amqp:invalid-field", f"a {code:#x} frame: {str(exc)[:200]}"
            ) from None
        if self.writer.transport.get_write_buffer_size() > 65536:
            self.flush()
            await self.writer.drain()
        return not self._closed

    # -- performatives ------------------------------------------------------------------

    async def _dispatch(self, channel: int, code: int, fields: list[Any], body: bytes,
                        end: int) -> None:
        if code == p.TRANSFER:
            session = self._session(channel)
            await self._on_transfer(session, fields, body, end)
        elif code == p.FLOW:
            self._on_flow(self._session(channel), fields)
        elif code == p.DISPOSITION:
            await self._on_disposition(self._session(channel), fields)
        elif code == p.ATTACH:
            await self._on_attach(self._session(channel), fields)
        elif code == p.DETACH:
            self._on_detach(self._session(channel), fields)
        elif code == p.BEGIN:
            self._on_begin(channel, fields)
        elif code == p.END:
            ending = self._session(channel)
            for link in ending.links.values():
                self._unlink(ending, link)
            self.sessions.pop(channel, None)
            self.send_frame(channel, p.performative(p.END))
        elif code == p.OPEN:
            self._on_open(fields)
        elif code == p.CLOSE:
            self.send_frame(0, p.performative(p.CLOSE))
            self._closed = True
        else:
            raise ProtocolViolation("amqp:not-allowed", f"unexpected performative {code:#x}.")

    def _session(self, channel: int) -> Session:
        session = self.sessions.get(channel)
        if session is None:
            raise ProtocolViolation("amqp:not-allowed", f"no session on channel {channel}.")
        return session

    def _on_open(self, fields: list[Any]) -> None:
        if self._opened:
            raise ProtocolViolation("amqp:not-allowed", "the connection is open already.")
        self._opened = True
        self.hostname = fields[1] if isinstance(fields[1], str) else self.hostname
        self.remote_max_frame = max(512, min(int(fields[2] or MAX_FRAME), MAX_FRAME))
        every = heartbeat_interval(fields[4])
        if every is not None:
            self._tending.append(asyncio.create_task(beat(self.writer, every)))
        self._tending.append(asyncio.create_task(watch_idle(lambda: self._heard, self._fail)))
        self.send_frame(0, p.performative(
            p.OPEN, "aiosb", self.hostname, UInt(MAX_FRAME), UShort(CHANNEL_MAX),
            UInt(int(IDLE_SECONDS * 1000)),
        ))

    def _on_begin(self, channel: int, fields: list[Any]) -> None:
        check_channel(channel, self.sessions)
        session = Session(channel, next_incoming_id=int(fields[1] or 0),
                          remote_incoming_window=int(fields[2] or 0))
        self.sessions[channel] = session
        self.send_frame(channel, p.performative(
            p.BEGIN, UShort(channel), UInt(0), UInt(WINDOW), UInt(WINDOW), UInt(HANDLE_MAX),
        ))

    async def _on_attach(self, session: Session, fields: list[Any]) -> None:
        name, handle, role = fields[0], check_handle(fields[1], session), bool(fields[2])
        receiving = not role  # role False: the client is the sender
        terminus = fields[6] if receiving else fields[5]
        where = p.address(terminus) or ""
        link = Link(name, handle, next(session.handles), receiving, where, "entity")
        if where.strip("/") == "$cbs":
            link.kind = "cbs"
        else:
            link.path, link.sub_queue = entity_of(where)
            if link.path.lower().endswith(_MANAGEMENT):
                link.kind = "management"
                link.path, link.sub_queue = entity_of(link.path[: -len(_MANAGEMENT)])
        session.links[handle] = link
        source_fields = fields[5].value if isinstance(fields[5], Described) else []
        filters = source_fields[7] if len(source_fields) > 7 else None
        filters = filters if isinstance(filters, dict) else {}
        refusal = await self._refusal(link) or self._session_mismatch(link, filters)
        if refusal is None and not receiving and link.kind == "entity":
            link.mode = "receive_and_delete" if fields[3] == 1 else "peek_lock"
            if SESSION_FILTER in filters:
                sid = filters[SESSION_FILTER]
                link.pump = asyncio.create_task(self._open_session(
                    session, link, fields, sid if isinstance(sid, str) else None))
                return
            link.pump = asyncio.create_task(self._pump_receive(session, link))
        if refusal is not None:
            del session.links[handle]
        self._attach_reply(session, link, fields, refusal)

    def _attach_reply(self, session: Session, link: Link, fields: list[Any],
                      refusal: ServiceBusError | None, source: Any = None,
                      properties: dict[Any, Any] | None = None) -> None:
        """Answer ``link``'s attach; with ``refusal``, detach it at once with the error.

        The answer carries our role, the opposite of the client's (AMQP 2.6.3: receiver,
        true, on a link the client sends on): Qpid Proton matches it by name and role,
        and took one with its own role for a new link of ours (#47).

        A refused attach carries no terminus of ours (AMQP 2.6.3: no source when we are
        the sender), as Service Bus sends it: the SDK then raises the detach's error from
        its open, not from the first operation after it.
        """
        receiving = link.receiving
        if receiving and link.kind == "entity":
            properties = {Symbol("com.microsoft:max-message-batch-size"):
                          ULong(self.ns.max_message_size)}
        source = p.whole(fields[5] if source is None else source)
        target = p.whole(fields[6])
        if refusal is not None:  # the spec's refusal (2.6.3): no terminus of ours
            if receiving:
                target = None
            else:
                source = None
        self.send_frame(session.channel, p.performative(
            p.ATTACH, link.name, UInt(link.our_handle), receiving, UByte(fields[3] or 0),
            UByte(0 if receiving else fields[4] or 0), source, target, None, None,
            None if receiving else UInt(0),
            ULong(self.ns.max_message_size), None, None, properties,
        ))
        if refusal is not None:
            log.info("AMQP: refused a link to %s: %s", link.path or link.address, refusal)
            self.send_frame(session.channel, p.performative(
                p.DETACH, UInt(link.our_handle), True,
                p.error_of(refusal, link.path or link.address),
            ))
            return
        if receiving:
            link.delivery_count = int(fields[9] or 0)
            link.credit = CREDIT
            self._flow(session, link)

    async def _refusal(self, link: Link) -> ServiceBusError | None:
        """Why ``link`` may not attach, or ``None``."""
        if link.kind == "cbs":
            return None
        if not link.path:
            return InvalidArgument(f"the link address {link.address!r} names no entity.")
        if link.kind == "entity" and link.receiving and link.sub_queue is not None:
            return InvalidOperation(
                f"{link.address!r} is a dead-letter queue: messages cannot be sent to it; "
                "dead-letter a received message instead."
            )
        try:
            if link.kind == "management":  # each operation checks the right it needs
                if not self.tokens.any_right(link.address):
                    self.tokens.check(link.address, "Listen")  # raises, saying why
            else:
                self.tokens.check(link.address, "Send" if link.receiving else "Listen")
            self.ns.lookup(link.path)
            if self.ns.faults.active:  # what the link will do meets its faults first
                await self.ns.faults.check("manage" if link.kind == "management" else
                                           "send" if link.receiving else "receive", link.path)
        except (Unauthorized, EntityNotFound) as exc:
            return exc
        except ServiceBusError:
            pass  # an injected fault: the transfers will meet it
        return None

    def _on_detach(self, session: Session, fields: list[Any]) -> None:
        link = session.links.pop(int(fields[0]), None)
        if link is not None:
            self._unlink(session, link)
            self.send_frame(session.channel, p.performative(
                p.DETACH, UInt(link.our_handle), bool(fields[1]),
            ))

    def _unlink(self, session: Session, link: Link) -> None:
        """End what ``link`` does. What the client sent settled is served still (it counts
        it delivered); what had no disposition yet is dropped, even the transfer being
        served (PN-6: the client takes it for failed, and sends it again or elsewhere)."""
        kept = [t for t in link.inbox if t[3]] if link.kind == "entity" else []
        self._forget(session, link)
        link.inbox.clear()
        link.inbox.extend(kept)
        if link.pump is not None and not (link.receiving and link.serving_settled):
            link.pump.cancel()
            if kept:
                link.pump = asyncio.get_running_loop().create_task(self._work(session, link))
        if link.session_lock is not None:
            self._background(self._release(link))

    def _flow(self, session: Session, link: Link | None = None, drain: bool = False) -> None:
        """A flow frame: the session's window and, with ``link``, its credit."""
        self.send_frame(session.channel, p.performative(
            p.FLOW, UInt(session.next_incoming_id), UInt(session.incoming_window),
            UInt(session.next_outgoing_id), UInt(WINDOW),
            None if link is None else UInt(link.our_handle),
            None if link is None else UInt(link.delivery_count),
            None if link is None else UInt(link.credit), None, drain or None,
        ))

    def _on_flow(self, session: Session, fields: list[Any]) -> None:
        # Its window, less the frames we sent that it had not seen yet (ids wrap: since).
        next_incoming = fields[0] if fields[0] is not None else session.next_outgoing_id
        session.remote_incoming_window = int(fields[1] or 0) \
            - max(0, since(session.next_outgoing_id, int(next_incoming)))
        if fields[4] is None:
            for each in session.links.values():
                each.wake.set()
            return
        link = session.links.get(int(fields[4]))
        if link is None:
            return
        if not link.receiving and fields[6] is not None:
            count = int(fields[5]) if fields[5] is not None else link.delivery_count
            link.credit = int(fields[6]) - max(0, since(link.delivery_count, count))
            link.drain = bool(fields[8])
            link.given = False  # a reply link's credit is what this flow says (_pump)
            link.wake.set()
            self._recheck(link)
            self._pump(session, link)
        elif fields[9]:  # echo
            self._flow(session, link)

    # -- transfers ----------------------------------------------------------------------

    async def _on_transfer(self, session: Session, fields: list[Any], body: bytes,
                           end: int) -> None:
        session.next_incoming_id = after(session.next_incoming_id)
        session.incoming_window -= 1
        if session.incoming_window < WINDOW // 2:
            session.incoming_window = WINDOW
            self._flow(session)
        link = session.links.get(int(fields[0]))
        if link is None or not link.receiving:
            raise ProtocolViolation("amqp:session:unattached-handle",
                                   f"a transfer on handle {fields[0]}, which is not attached.")
        if fields[9]:  # aborted (whatever "more" says): nothing of it is kept (2.7.5)
            link.partial = None
            return
        if link.partial is None and not fields[5]:  # a delivery in one frame, the most
            payload, delivery_id = body[end:], fields[1]
            fmt, settled = int(fields[3] or 0), bool(fields[4])
            over = len(payload) > 2 * self.ns.max_message_size + 65536
            if over:  # refused, as one over several frames is
                payload = b""
        else:
            if link.partial is None:
                link.partial = bytearray()
                link.partial_id = fields[1]
                link.partial_format = int(fields[3] or 0)
                link.partial_settled = bool(fields[4])
                link.partial_over = False
            elif fields[1] is not None and fields[1] != link.partial_id:
                raise ProtocolViolation("amqp:invalid-field", f"delivery {fields[1]} began "
                                        f"before delivery {link.partial_id} ended.")
            if not link.partial_over:
                link.partial += memoryview(body)[end:]
                if len(link.partial) > 2 * self.ns.max_message_size + 65536:
                    link.partial_over = True  # keep reading its frames, then refuse it
                    link.partial = bytearray()
            if fields[5]:  # more frames follow
                return
            payload, delivery_id = bytes(link.partial), link.partial_id
            fmt, settled, over = link.partial_format, link.partial_settled, link.partial_over
            link.partial = None
        link.delivery_count = after(link.delivery_count)
        link.credit -= 1
        if link.credit < 0:  # what it was not given room for would queue without end
            raise ProtocolViolation(
                "amqp:link:transfer-limit-exceeded",
                f"a transfer on handle {link.handle} beyond the credit it was given.",
            )
        if link.kind == "cbs":
            self._settle(session, link, delivery_id, settled, await self._on_cbs(session, payload))
            return
        link.inbox.append((payload, delivery_id, fmt, settled, over))
        if link.pump is None or link.pump.done():
            if link.kind == "entity" and not self.buffered:
                # Alone in its read (one at a time): served now, a task only if it waits
                # (#50); come together, one task serves all (cheaper than a coroutine each)
                link.pump = run_eagerly(self._work(session, link))
            else:
                link.pump = asyncio.get_running_loop().create_task(self._work(session, link))

    async def _work(self, session: Session, link: Link) -> None:
        """Serve ``link``'s transfers in order, away from the frame reader: an operation
        that hangs (an injected timeout) holds up its own link only, and a detach cancels
        what the link has not settled yet, as a client hanging up cancels its HTTP
        request (:meth:`_unlink`). The link's credit is given back as transfers are
        served, so a client cannot queue more than ``CREDIT`` of them."""
        inbox = link.inbox
        while inbox:
            payload, delivery_id, fmt, settled, over = inbox.popleft()
            link.serving_settled = settled
            try:
                if over:  # a management request too: refused, as its reply could not say
                    outcome = p.rejected("amqp:link:message-size-exceeded",
                                         f"the message is over {self.ns.max_message_size} bytes.")
                elif link.kind == "management":
                    room_for_reply(reply_link(session, link))  # else refused before done
                    reply = await self.management.reply(link.path, link.sub_queue, payload)
                    self._answer(session, link, reply)
                    outcome = _ACCEPTED
                else:
                    outcome = await self._deliver(link, payload, fmt)
            except asyncio.CancelledError:
                raise
            except ProtocolViolation as exc:  # replies the client takes none of
                self._fail(exc)
                return
            except Exception:  # a bug: say so, answer, keep serving
                log.exception("unexpected error serving a transfer on %s", link.address)
                outcome = p.rejected("amqp:internal-error", "internal error in the emulator.")
            self._settle(session, link, delivery_id, settled, outcome)

    def _settle(self, session: Session, link: Link, delivery_id: int | None, settled: bool,
                outcome: Described) -> None:
        """Settle a served transfer with ``outcome`` and give back the link's credit."""
        if not settled and delivery_id is not None:
            self.send_frame(session.channel, p.accepted(delivery_id) if outcome is _ACCEPTED
                       else p.performative(p.DISPOSITION, True, UInt(delivery_id), None,
                                           True, outcome))
        waiting = len(link.inbox)
        if link.credit < CREDIT // 2 and waiting < CREDIT // 2 \
                and session.links.get(link.handle) is link:
            link.credit = CREDIT - waiting  # what is queued counts against the credit
            self._flow(session, link)

    async def _deliver(self, link: Link, payload: bytes, fmt: int) -> Described:
        """Hand the messages of one transfer to the broker; the outcome to settle with."""
        try:
            self.tokens.check(link.address, "Send")  # the token may have expired since attach
            read = read_columns(payload, fmt)
            if read is not None:  # a batch of the common shape, as HTTP sends it (#36)
                bodies, columns, alike = read
                if alike:  # each passes if the first does: the first is checked
                    check_columns(bodies[:1], {name: value[:1] if value.__class__ is list
                                               else value for name, value in columns.items()})
                else:
                    check_columns(bodies, columns)
                await self.ns.send_columns(link.path, bodies, columns, checked=True)
            else:
                await self.ns.send(link.path, messages_of(payload, fmt))
            if self.journal is not None:
                await self.journal.commit()
        except DecodeError as exc:
            return p.rejected("amqp:decode-error", str(exc))
        except ServiceBusError as exc:
            log.info("AMQP: refused a send to %s: %s", link.path, exc)
            return p.rejected_with(exc, link.path)
        return _ACCEPTED

    async def _on_cbs(self, session: Session, payload: bytes) -> Described:
        try:
            request = sections_of(payload)
        except DecodeError as exc:
            return p.rejected("amqp:decode-error", str(exc))
        status, description = put_token_reply(
            request.application_properties or {}, request.value, self.tokens, self.hostname,
            self.ns)
        message_id = request.properties[0] if request.properties else None
        reply = reply_payload(message_id, {"status-code": status,
                                           "status-description": description})
        for link in session.links.values():
            if link.kind == "cbs" and not link.receiving:
                hold_reply(link, reply)
                self._pump(session, link)
                break
        return _ACCEPTED

    def _answer(self, session: Session, request_link: Link, reply: bytes) -> None:
        """Send a management reply on the client's receiver link of the same node."""
        link = reply_link(session, request_link)
        if link is not None:
            hold_reply(link, reply)
            self._pump(session, link)

