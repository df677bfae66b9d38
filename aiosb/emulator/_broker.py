"""The embedded broker: :class:`EmulatorNamespace`, one emulated namespace.

The namespace is a façade: its methods are the Transport protocol's (send, schedule,
cancel_scheduled, receive, settle, session, manage; :mod:`aiosb.protocol`), each handed
to the module of its concern. What lives where:

* :mod:`._record`: one message as the broker holds it, record states, ids, time helpers.
* :mod:`._partitions`: the partition router: fragments of a message, a session, a
  sequence number; batches, transactions and receives across fragments (PT-*).
* :mod:`._store`: the messages of one fragment or session: sequence order, locks, and
  the timeline of lock ends, expiries and activations (EX-*).
* :mod:`._entity`: a queue, topic or subscription (fragments, forwarding, fan-out,
  dead-lettering, idle timer, duplicate window) and its sessions.
* :mod:`._sending`, :mod:`._delivery`, :mod:`._sessions`, :mod:`._manage`: the
  operations.
* :mod:`._namespace`: the protocol by which the operations and the journal see a
  namespace; :mod:`.durable`: the journal (durable mode).

The namespace itself keeps the entity table, resolves paths, and keeps time: one
timeline of the stores, sessions and entities with something due, and one
``loop.call_at`` timer for its earliest entry while a connection is open. Each
operation also runs what is due before it acts, so results are exact whether or not the
timer has fired yet.

All state changes are synchronous; only fault injection and long-poll receives await.
Concurrent calls are therefore safe without locks.

Time is UTC epoch seconds read from the event loop clock (:class:`~aiosb._clock.LoopClock`).

Imports: the emulator modules it hands work to, :mod:`._faults` and :mod:`aiosb.protocol`
(the contract it implements); never :mod:`.durable` (the registry in
:mod:`aiosb.emulator` hands it a journal), a transport, the client or a server.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Sequence
from heapq import heappop, heappush
from typing import Any

from .._clock import CLOCK, TIMER_RESOLUTION
from ..entities import TIERS, parse_entity_path
from ..errors import EntityNotFound, EntityUnavailable, InvalidArgument, InvalidOperation
from ..message import Message, ReceivedMessage
from ..protocol import (
    ManagementRequest,
    ReceiveMode,
    ReceiveRequest,
    SessionInfo,
    SessionRequest,
    Settlement,
)
from . import _delivery, _manage, _sending, _sessions
from ._entity import EntityJournal, _Entity
from ._faults import Fault, Faults
from ._manage import EntityStatus
from ._namespace import Loading
from ._record import INF, _Ids
from ._sessions import SessionStatus
from ._store import _wake
from ._surroundings import Due

__all__ = ["EmulatorNamespace"]

#: The management actions that wait, after a durable restart, for messages to load.
_WAITING = frozenset({"runtime", "sessions", "update"})
NAMESPACE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,49}")


def check_namespace_name(name: Any) -> str:
    """``name`` if the emulator takes it as a namespace name: 1 to 50 letters, digits and
    hyphens, starting with a letter (``aiosb serve --config`` checks a file's with it).

    Raises:
        InvalidArgument: Any other name; a long one is shown cut short.
    """
    if isinstance(name, str) and len(name) > 50:
        raise InvalidArgument(f"namespace name {name[:40]!r}... is {len(name)} characters; "
                              "the limit is 50.")
    if not isinstance(name, str) or not NAMESPACE_NAME.fullmatch(name):
        raise InvalidArgument(
            f"namespace name {name!r:.80} is not valid: use 1 to 50 letters, digits and "
            "hyphens, starting with a letter."
        )
    return name


class EmulatorNamespace:
    """One emulated Service Bus namespace.

    Get one with :func:`aiosb.emulator.namespace`; connect to it with
    ``aiosb.connect("memory://NAME")``. Two connections to the same name in one process
    share it.

    Attributes:
        name: The namespace name.
        tier: ``"standard"`` (default), ``"premium"`` or ``"basic"``.
        faults: The fault injection API (:class:`~aiosb.emulator.Faults`).
        max_message_size: The largest message and batch, in bytes (256 KB on standard).
    """

    def __init__(self, name: str, tier: str = "standard") -> None:
        check_namespace_name(name)
        if tier not in TIERS:
            raise InvalidArgument(f"tier is {tier!r}; it must be one of {', '.join(TIERS)}.")
        self.name = name
        self.tier = tier
        self.max_message_size = 1024 * 1024 if tier == "premium" else 256 * 1024
        self.clock = CLOCK
        self.faults = Faults(name, self._wake_all, self._fragment_count)
        self._ids = _Ids()
        self._entities: dict[str, _Entity] = {}
        self._paths: dict[tuple[str, str | None], tuple[str, bool]] = {}
        self._timeline: list[tuple[float, int, Due]] = []
        self._order = itertools.count()
        self._next_due = INF
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users = 0
        self._handle: asyncio.TimerHandle | None = None
        self._handle_when = INF
        self.journal: EntityJournal | None = None  # durable mode (aiosb serve --data-dir)
        #: Durable mode, after a restart: the messages still loading (#39). Every
        #: operation waits, first, for what it touches (:mod:`.durable._recovery`).
        self.recovery: Loading | None = None

    def __repr__(self) -> str:
        return (
            f"<EmulatorNamespace {self.name} tier={self.tier} entities={len(self._entities)} "
            f"connections={self._users}>"
        )

    # -- the Transport protocol -------------------------------------------------------

    async def send(
        self, path: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        """Enqueue ``messages`` on a queue or topic as one batch (all or none).

        With ``transaction``, they are one transaction's sends (PT-16 to PT-18).
        """
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        await _sending.send(self, path, messages, transaction)

    async def send_columns(
        self, path: str, bodies: list[bytes], columns: dict[str, Any], *, checked: bool = False
    ) -> None:
        """Enqueue messages given as columns rather than a message object each, as
        :meth:`send` does (the syphon's move, #16): ``columns`` holds, by field name of
        :class:`~aiosb.Message`, a list of each message's value, or one value they all
        have; a field left out is ``None``. They are checked as a
        :class:`~aiosb.Message` checks its fields (:func:`aiosb.protocol.check_columns`)
        unless ``checked`` says that was done (the server's decoder does it)."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        await _sending.send_columns(self, path, bodies, columns, checked)

    async def schedule(self, path: str, messages: Sequence[Message]) -> list[int]:
        """Schedule messages; return their sequence numbers (EX-5)."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _sending.schedule(self, path, messages)

    async def cancel_scheduled(self, path: str, sequence_numbers: Sequence[int]) -> None:
        """Cancel scheduled messages (all named ones must be scheduled)."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        await _sending.cancel_scheduled(self, path, sequence_numbers)

    async def receive(self, path: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        """Receive, peek, or fetch deferred messages; long-polls up to ``max_wait``.

        A partitioned entity's receive gathers from every fragment that is up (PT-12); a
        peek answers from one fragment and up to the response size limit, so it may
        return fewer than asked (PT-13).
        """
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _delivery.receive(self, path, request)

    async def receive_columns(
        self, path: str, request: ReceiveRequest
    ) -> tuple[list[bytes], dict[str, Any]]:
        """What :meth:`receive` gives, as columns rather than a message object each (the
        server's batch answer, :func:`aiosb.wire.aiosb_json.encode_received_columns`:
        #16): the bodies, and by field name of :class:`~aiosb.ReceivedMessage` a list of
        each message's value, or one value they all have; a field left out has its
        default."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _delivery.receive_columns(self, path, request)

    async def settle(self, path: str, settlement: Settlement) -> list[float] | None:
        """Complete, abandon, dead-letter, defer or renew locked messages."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _delivery.settle(self, path, settlement)

    async def session(self, path: str, request: SessionRequest) -> SessionInfo:
        """Accept, renew or release a session, or read or write its state."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _sessions.session(self, path, request)

    async def manage(self, request: ManagementRequest) -> Any:
        """Create, get, update, delete or list entities, read their counts, or list the
        sessions of one."""
        if self.recovery is not None and request.action in _WAITING:
            # Counts need the messages; an update may add a route, which may pass a
            # message to any entity: it waits for all. A description, a creation, a
            # deletion or a listing needs no message.
            everything = request.action == "update"
            await self.recovery.wait(self, None if everything else request.path)
        if request.action == "sessions":
            return await _sessions.listing(self, request.path, request.properties)
        return await _manage.manage(self, request)

    # -- what tools read and do (the explorer, /metrics) ------------------------------

    async def take(
        self,
        path: str,
        sequence_numbers: Sequence[int],
        *,
        sub_queue: str | None = None,
        mode: ReceiveMode = "peek_lock",
    ) -> list[ReceivedMessage]:
        """Receive the messages of ``path`` (or of its ``sub_queue``: ``"deadletter"``)
        numbered ``sequence_numbers`` that are there and not locked, deferred or not,
        and no other: a number with no such message is passed over (compare what comes
        back with what was asked). Faults, fragments, locks and deletion are as
        :meth:`receive` has them.

        A client's receive by sequence numbers takes deferred messages only, as Service
        Bus's does; this is for a tool that chose messages from a peek (the explorer
        resubmitting chosen dead letters).
        """
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _delivery.take(self, path, sequence_numbers, sub_queue, mode)

    def entity_statuses(self) -> list[EntityStatus]:
        """Every entity's kind, description and counts now, in path order, read in
        passing: no fault applies, nothing waits, nothing is touched or counted (for a
        metrics scrape, a live page). An entity a durable restart is still loading is
        left out rather than shown empty."""
        return _manage.statuses(self)

    async def session_statuses(self, path: str) -> list[SessionStatus]:
        """The sessions of a session-enabled queue or subscription (those the
        ``sessions`` management action lists), each with its state, whether a receiver
        holds its lock, and how many messages it holds; read without locking any."""
        if self.recovery is not None:
            await self.recovery.wait(self, path)
        return await _sessions.statuses(self, path)

    def description(self, path: str) -> Any:
        """The description of the entity ``path`` names (as a management ``get`` gives
        it), read as :meth:`lookup` reads: no fault applies and nothing is counted.

        Raises:
            EntityNotFound: No entity has that path.
        """
        entity, _ = self._resolve(path)
        return entity.description()

    # -- lifetime and time ----------------------------------------------------------

    def attach(self) -> None:
        """A connection opens: bind to the running loop and arm the timer."""
        loop = asyncio.get_running_loop()
        current = self._loop
        if self._users and current is not None and current is not loop and not current.is_closed():
            raise InvalidOperation(
                f"memory://{self.name} is open in another event loop; an embedded emulator "
                "namespace serves one loop at a time (serve it with 'aiosb serve' to share "
                "it across loops and processes)."
            )
        if current is not loop:
            self._users = 0
            self._cancel_timer()
        self._loop = loop
        self._users += 1
        self._rearm()

    def detach(self) -> None:
        """A connection closes: the last one stops the timer."""
        self._users = max(0, self._users - 1)
        if not self._users:
            self._cancel_timer()
            self._loop = None

    def detach_all(self) -> None:
        """Forget every connection (the namespace is being reset)."""
        self._users = 0
        self._cancel_timer()
        self._loop = None
        self._wake_all()

    def _cancel_timer(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._handle_when = INF

    def now(self) -> float:
        """UTC seconds now, after running everything that is due."""
        now = self.clock.now()
        if now >= self._next_due:
            self._run_due(now)
        return now

    def _register(self, when: float, target: Due) -> None:
        """Call ``target.on_due`` once ``when`` has come."""
        heappush(self._timeline, (when, next(self._order), target))
        if when < self._next_due:
            self._next_due = when
            self._rearm()

    def _run_due(self, now: float) -> None:
        timeline = self._timeline
        while timeline and timeline[0][0] <= now:
            target = heappop(timeline)[2]
            target.on_due(now)
        self._next_due = timeline[0][0] if timeline else INF
        self._rearm()

    def _rearm(self) -> None:
        loop = self._loop
        when = self._next_due
        if loop is None or when == INF or when >= self._handle_when:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._arm(loop, when)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float, least: float = 0.0) -> None:
        """Set the timer for ``when`` (UTC), and no sooner than ``least`` seconds on."""
        self._handle_when = when
        at = self.clock.loop_time(when)
        if least:
            at = max(at, loop.time() + least)
        self._handle = loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        when = self._handle_when
        self._handle = None
        self._handle_when = INF
        now = self.clock.now()
        if now < when:
            # Fired early (uvloop rounds a timer's delay to whole milliseconds, and runs
            # one under half of one at once; a float rounds): nothing runs before its
            # time, and nothing moves the clock to it (issue 33). Armed again no sooner
            # than a millisecond on, not for the same instant, which on uvloop would
            # come round again and again until its millisecond ticked over.
            if self._loop is not None and when < INF:
                self._arm(self._loop, when, TIMER_RESOLUTION)
            return
        self._run_due(now)

    # -- faults ----------------------------------------------------------------------

    def _wake_all(self) -> None:
        for entity in list(self._entities.values()):
            for store in entity.stores():
                store.wake()
            _wake(entity.session_waiters)

    def _fragment_count(self, path: str) -> int:
        entity, dlq = self._resolve(path)
        if entity.kind == "subscription" or dlq:
            raise InvalidArgument(
                f"fail_fragment takes a queue or topic; {path!r} shares the fragments (and "
                "fragment faults) of its topic or queue."
            )
        return entity.nfrag

    def _down(self, operation: str, path: str) -> dict[int, Fault] | None:
        """The fragments of ``path`` that are down for ``operation`` (``None``: none)."""
        if not self.faults.active:
            return None
        return self.faults.fragment_faults(operation, path) or None

    # -- lookup --------------------------------------------------------------------

    def has_entity_under(self, first: str) -> bool:
        """Whether an entity's path starts with the segment ``first`` (``orders`` for
        ``orders`` or ``orders/eu``; case-insensitive)."""
        key = first.lower()
        if key in self._entities:
            return True
        below = key + "/"
        return any(path.startswith(below) for path in self._entities)

    def lookup(self, path: str) -> tuple[str, bool]:
        """The kind (``queue``, ``topic``, ``subscription``) of the entity ``path`` names
        and whether it requires sessions, read without a management operation: no fault
        applies and nothing is counted (an AMQP attach and a ``$cbs`` put-token ask it).

        Raises:
            EntityNotFound: No entity has that path.
        """
        entity, _ = self._resolve(path)
        return entity.kind, entity.sessionful

    def _resolve(self, path: str, sub_queue: str | None = None) -> tuple[_Entity, bool]:
        """The entity for ``path`` and whether its dead-letter queue is meant."""
        cached = self._paths.get((path, sub_queue))
        if cached is None:
            parsed = parse_entity_path(path, sub_queue)
            cached = (parsed.path.lower(), parsed.sub_queue is not None)
            if len(self._paths) > 10_000:
                self._paths.clear()
            self._paths[(path, sub_queue)] = cached
        entity = self._entities.get(cached[0])
        if entity is None:
            raise EntityNotFound(  # the service's sentence, which SDKs recognise
                f"The messaging entity {path!r} could not be found in namespace {self.name!r}."
            )
        return entity, cached[1]

    def _receivable(self, path: str, sub_queue: str | None, operation: str) -> tuple[_Entity, bool]:
        """The entity to receive or settle on, and whether its dead-letter queue is meant."""
        entity, dlq = self._resolve(path, sub_queue)
        if entity.kind == "topic":
            raise InvalidOperation(
                f"Cannot {operation} from topic {path!r}: receive from one of its "
                "subscriptions ('{topic}/subscriptions/{name}')."
            )
        status = entity.props.status
        if status in ("Disabled", "ReceiveDisabled"):
            raise EntityUnavailable(f"The entity {path!r} is {status}: it cannot {operation}.")
        return entity, dlq
