"""The client: :func:`connect` and :class:`Namespace`.

The client is the same over every transport. It owns what transports leave out:
operation timeouts, retries of transient errors with backoff, argument checking, ping
filtering (PN-14), and the bookkeeping of senders and receivers. Senders live in
:mod:`aiosb._send`, receivers in :mod:`aiosb._receive`; their names are re-exported
here. Pairing builds on :meth:`Namespace.execute` and :meth:`Namespace.retry_delay`,
and is imported only inside :meth:`Namespace.pair` (it imports this module).

Imports the vocabulary, the transport contract (:mod:`aiosb.protocol`), the client's
own modules (``_send``, ``_receive``, ``_inflight``, ``_duration``) and, when a URL
asks for one, a transport backend.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, Protocol, TypeVar

from ._admin import Management
from ._clock import within
from ._duration import Duration, to_seconds
from ._endpoint import Endpoint
from ._inflight import InFlight
from ._receive import NEXT_AVAILABLE_SESSION, Receiver, ReceiverSession, _NextAvailableSession
from ._send import Sender, SendingLink, Transaction
from .auth import SasCredential
from .entities import (
    parse_entity_path,
)
from .errors import (
    ClientClosed,
    InvalidArgument,
    InvalidOperation,
    OperationTimeout,
    ServiceBusError,
)
from .protocol import (
    MAX_RECEIVE_MESSAGES,
    ManagementRequest,
    Transport,
)

__all__ = [
    "NEXT_AVAILABLE_SESSION",
    "Namespace",
    "Receiver",
    "ReceiverSession",
    "Sender",
    "SendingLink",
    "Transaction",
    "connect",
]

T = TypeVar("T")


class Observer(Protocol):
    """What :func:`aiosb.telemetry.instrument` installs as :data:`observer`: it is
    given each operation :meth:`Namespace.execute` runs (the namespace, the transport
    method, its positional arguments, and the attempts' coroutine) and returns what to
    await in its place."""

    def __call__(
        self,
        namespace: Namespace,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        run: Coroutine[Any, Any, T],
    ) -> Awaitable[T]: ...


#: ``None`` unless telemetry is on (:mod:`aiosb.telemetry`): one check per operation.
observer: Observer | None = None


def connect(
    url: str,
    *,
    credential: SasCredential | tuple[str, str] | None = None,
    operation_timeout: Duration = _dt.timedelta(seconds=60),
    **options: Any,
) -> Namespace:
    """Connect to a namespace; use the result as an async context manager.

    Args:
        url: ``memory://NAME`` (the embedded emulator; two connects to one name in one
            process share it; ``?tier=premium`` picks the tier on first use),
            ``http://HOST:PORT/NAME`` (namespace NAME of an ``aiosb serve`` emulator
            server, over HTTP; everything but sessions),
            ``https://NAME.servicebus.windows.net`` (a real namespace over the Service Bus
            REST protocol, which has no peek, defer, dead-letter, deferred receive,
            scheduling with sequence numbers or sessions: those raise
            :class:`~aiosb.errors.InvalidOperation`), or a real namespace over AMQP (the
            ``amqp`` extra): its connection string
            ``Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...``, or
            ``sb://NAME.servicebus.windows.net`` with ``credential``.
        credential: ``("KeyName", "key")`` or a :class:`~aiosb.SasCredential`, for
            namespaces that check signatures; ``http://`` URLs default to the emulator
            server's well-known development key.
        operation_timeout: Bounds each operation including its retries of transient
            errors; a receive waits its ``max_wait`` on top of it.
        **options: ``retry_backoff`` (first retry delay, default 0.1 s),
            ``retry_backoff_max`` (default 5 s), ``tier`` (memory namespaces),
            ``extensions`` (HTTP: use the emulator server's aiosb extensions; default
            on for ``http://``, off for ``https://``), ``max_message_size`` (HTTP and
            AMQP: the namespace's limit in bytes, 256 KB by default; give a premium
            namespace's), ``connection_verify`` (HTTP and AMQP: the CA file, PEM, that
            the endpoint's certificate is checked against, as the SDK's option of that
            name, e.g. ``aiosb serve``'s self-signed one; or an ``ssl.SSLContext``),
            ``proxy`` (``http://[user:password@]host:port``: HTTP goes through it, TLS in
            a CONNECT tunnel, and AMQP as AMQP over WebSockets; for HTTP, by default the
            environment's ``HTTPS_PROXY``/``HTTP_PROXY`` unless ``NO_PROXY`` names the
            host; ``proxy=False``: none).

    Returns:
        An unopened :class:`Namespace`: ``async with aiosb.connect(url) as ns: ...``.

    Raises:
        InvalidArgument: A URL or option aiosb does not understand.
    """
    if isinstance(credential, tuple):
        if len(credential) != 2 or not all(isinstance(part, str) for part in credential):
            kinds = ", ".join(type(part).__name__ for part in credential)
            raise InvalidArgument(
                f"a credential tuple is (key_name, key), two strings; not ({kinds})."
            )
        credential = SasCredential(*credential)
    elif isinstance(credential, str | bytes):
        raise InvalidArgument(
            "credential is (key_name, key) or a SasCredential (an SDK credential object "
            "for AMQP), not a bare key: which key name signs with it?"
        )
    timeout = to_seconds("operation_timeout", operation_timeout)
    if not timeout:
        raise InvalidArgument("operation_timeout must be positive.")
    backoff = to_seconds("retry_backoff", options.pop("retry_backoff", 0.1))
    backoff_max = to_seconds("retry_backoff_max", options.pop("retry_backoff_max", 5.0))
    transport = _open_transport(url, credential, options, timeout)
    return Namespace(
        transport,
        url=url,
        operation_timeout=timeout,
        retry_backoff=backoff,
        retry_backoff_max=backoff_max,
    )


def _open_transport(
    url: str,
    credential: SasCredential | None,
    options: dict[str, Any],
    operation_timeout: float = 60.0,
) -> Transport:
    # The one place a URL or a connection string is parsed (aiosb._endpoint): the
    # transport, its links and its sentences take the Endpoint from here.
    endpoint = Endpoint.parse(
        url, credential, verify=options.pop("connection_verify", None),
        proxy=options.pop("proxy", None),
    )
    if endpoint.kind == "amqp":
        from .transport.amqp import AmqpTransport

        known = {"max_message_size"}
        _no_unknown(options, known, "the AMQP transport")
        return AmqpTransport(endpoint, **options)
    if endpoint.kind == "memory":
        from .transport.memory import MemoryTransport

        query = dict(endpoint.query)
        tier = options.pop("tier", None) or query.pop("tier", None)
        _no_unknown({**options, **query}, set(), "memory://")
        if endpoint.verify is not None or endpoint.proxy is not None:
            raise InvalidArgument("memory:// namespaces take no certificate and no proxy.")
        return MemoryTransport(endpoint.name, tier=tier)
    from .transport.http import HttpTransport

    _no_unknown(options, {"extensions", "max_message_size"}, f"{endpoint.scheme}://")
    return HttpTransport(endpoint, operation_timeout=operation_timeout, **options)


def _no_unknown(options: dict[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidArgument(f"unknown option(s) for {what}: {', '.join(unknown)}.")


class Namespace(Management):
    """A connection to one namespace: management, senders and receivers.

    Create it with :func:`connect` and use it as an async context manager. Closing it
    closes every sender and receiver made from it.

    Attributes:
        name: The namespace name.
        transport: The backend it talks through.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        url: str = "",
        operation_timeout: float = 60.0,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 5.0,
    ) -> None:
        self.transport = transport
        self.url = url
        self.operation_timeout = operation_timeout
        self._backoff = retry_backoff
        self._backoff_max = retry_backoff_max
        self._state: Literal["new", "open", "closed"] = "new"
        self._closed_because = ""
        self._links: set[Sender | Receiver] = set()
        self._close_callbacks: list[Callable[[Namespace], None]] = []
        self._inflight = InFlight()

    @property
    def name(self) -> str:
        """The namespace name."""
        return self.transport.namespace

    def __repr__(self) -> str:
        return f"<Namespace {self.name} {self._state} via {type(self.transport).__name__}>"

    async def __aenter__(self) -> Namespace:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open the transport (done by ``async with``)."""
        if self._state == "closed":
            raise ClientClosed(f"namespace {self.name!r} was closed; connect again.")
        if self._state == "new":
            opener = getattr(self.transport, "open", None)
            if opener is not None:
                await opener()
            self._state = "open"

    async def aclose(self) -> None:
        """Close every sender and receiver, then the transport (idempotent)."""
        await self._close("closed")

    async def fault(self, reason: str) -> None:
        """Close the namespace because something went wrong; later use says ``reason``.

        Pairing faults a partner left open alone (PN-18).
        """
        await self._close(f"faulted: {reason}")

    @property
    def closed(self) -> bool:
        """Whether the namespace was closed or faulted."""
        return self._state == "closed"

    def on_close(self, callback: Callable[[Namespace], None]) -> None:
        """Call ``callback(namespace)`` when it is closed or faulted."""
        self._close_callbacks.append(callback)

    async def _close(self, because: str) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        self._closed_because = because
        self._inflight.close(f"namespace {self.name!r} was {because}")
        for callback in list(self._close_callbacks):
            callback(self)
        for link in list(self._links):
            await link.aclose()
        await self.transport.aclose()

    def _check_open(self) -> None:
        if self._state != "open":
            state = self._closed_because or "not open"
            raise ClientClosed(
                f"namespace {self.name!r} is {state}; use 'async with aiosb.connect(...)'."
            )

    # -- the seam for layers built on the client ------------------------------------------
    #
    # Pairing (and anything else layered over a namespace) runs its transport operations
    # through these two methods and reads nothing else of the namespace's internals.

    async def execute(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        wait: float | None = 0.0,
        timeout: float | None = None,  # noqa: ASYNC109 - a budget for retries, not a cancel scope
        link: InFlight | None = None,
        **kwargs: Any,
    ) -> T:
        """Run one transport operation, ``fn(*args, **kwargs)``, as the namespace runs
        its own: within the operation timeout (or ``timeout``) plus ``wait``, retrying
        transient errors with backoff (:meth:`retry_delay`); ``wait=None`` means no
        deadline. It is tracked as in flight: closing the namespace (or ``link``'s owner)
        ends it with :class:`~aiosb.errors.ClientClosed`.

        Args:
            fn: A method of :attr:`transport` (``self.transport.send``, ...).
            *args: Its positional arguments.
            wait: Seconds the operation may wait on top of the timeout (a receive's
                ``max_wait``); ``None``: no deadline at all.
            timeout: The budget for the attempts, instead of the operation timeout.
            link: Another owner's in-flight tracker (a receiver's, a pairing's), so that
                closing that owner ends the operation too.
            **kwargs: Its keyword arguments.

        Raises:
            ClientClosed: The namespace (or ``link``'s owner) is or was closed.
            OperationTimeout: No success within the budget.
            ServiceBusError: The operation's own non-transient error.
        """
        self._check_open()
        task = asyncio.current_task()
        # Spelled out for one tracker or two, not looped: this runs for every operation,
        # and a paired send must cost what a plain one does (S-2).
        inflight = self._inflight
        inflight.enter(task)
        if link is not None:
            link.enter(task)
        try:
            if observer is None:
                return await self._attempts(fn, args, kwargs, wait, timeout)
            return await observer(self, fn, args, self._attempts(fn, args, kwargs, wait, timeout))
        except asyncio.CancelledError:
            error = inflight.closed_error(task)
            if error is None and link is not None:
                error = link.closed_error(task)
            if error is not None:
                raise error from None
            raise
        finally:
            inflight.exit(task)
            if link is not None:
                link.exit(task)

    def retry_delay(self, attempt: int) -> float:
        """The delay before retry ``attempt`` (1 for the first), before any jitter:
        ``retry_backoff`` doubled per attempt, capped at ``retry_backoff_max``."""
        return min(self._backoff * 2.0 ** (attempt - 1), self._backoff_max)

    async def _attempts(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        wait: float | None,
        timeout: float | None,  # noqa: ASYNC109 - a budget for retries, not a cancel scope
    ) -> T:
        loop = asyncio.get_running_loop()
        limit = self.operation_timeout if timeout is None else timeout
        deadline = None if wait is None else loop.time() + limit + wait
        attempt = 0
        failed: ServiceBusError | None = None  # the last attempt's retryable error
        while True:
            try:
                # The timer is armed only if the operation waits (#16): on an emulator
                # most never do.
                return await within(deadline, fn(*args, **kwargs))
            except ServiceBusError as exc:
                if not exc.retryable or isinstance(exc, OperationTimeout):
                    raise
                attempt += 1
                failed = exc
                delay = self.retry_delay(attempt) * random.uniform(0.8, 1.2)
                if deadline is not None and loop.time() + delay >= deadline:
                    raise self._gave_up(fn, limit, attempt, exc) from exc
                await asyncio.sleep(delay)
            except TimeoutError:
                if failed is not None:
                    # The time ran out during a retry: the failures before it are the
                    # reason, and a caller classifying the timeout needs them (PT-9).
                    raise self._gave_up(
                        fn, limit, attempt, failed, " and the retry after it got no answer"
                    ) from failed
                raise OperationTimeout(
                    f"{fn.__name__} on namespace {self.name!r} got no answer within {limit:g} s."
                ) from None

    def _gave_up(
        self,
        fn: Callable[..., Any],
        limit: float,
        attempts: int,
        last: ServiceBusError,
        then: str = "",
    ) -> OperationTimeout:
        return OperationTimeout(
            f"{fn.__name__} on namespace {self.name!r} did not succeed within {limit:g} s: "
            f"{attempts} attempts failed, the last with: {last.message}{then}"
        )

    # -- data ------------------------------------------------------------------------

    def sender(self, entity: str) -> Sender:
        """A sender for a queue or topic; use it as an async context manager."""
        self._check_open()
        parsed = parse_entity_path(entity)
        if parsed.subscription is not None or parsed.sub_queue is not None:
            raise InvalidOperation(f"Cannot send to {entity!r}: send to a queue or topic.")
        return Sender(self, entity)

    def receiver(
        self,
        entity: str,
        *,
        mode: Literal["peek_lock", "receive_and_delete"] = "peek_lock",
        session_id: str | _NextAvailableSession | None = None,
        sub_queue: str | None = None,
        prefetch_count: int = 0,
        session_wait: Duration | None = None,
    ) -> Receiver:
        """A receiver for a queue or subscription (``"topic/subscriptions/name"``).

        Args:
            entity: The entity path.
            mode: ``"peek_lock"`` (settle each message) or ``"receive_and_delete"``.
            session_id: On a session-enabled entity, the session to receive from, or
                :data:`NEXT_AVAILABLE_SESSION`. The receiver locks the session when it
                opens (``async with``) or is first used; another receiver cannot take
                it (:class:`~aiosb.errors.SessionCannotBeLocked`) until it is closed or
                its lock expires. ``receiver.session`` renews it and keeps its state.
            sub_queue: ``"deadletter"`` for the dead-letter queue.
            prefetch_count: How many messages ``async for`` asks for at once.
            session_wait: With :data:`NEXT_AVAILABLE_SESSION`, how long to wait for a
                session to become available (default: the operation timeout) before
                :class:`~aiosb.errors.OperationTimeout`.
        """
        self._check_open()
        if mode not in ("peek_lock", "receive_and_delete"):
            raise InvalidArgument(f"mode is {mode!r}; use 'peek_lock' or 'receive_and_delete'.")
        if (
            type(prefetch_count) is not int
            or not 0 <= prefetch_count <= MAX_RECEIVE_MESSAGES
        ):
            raise InvalidArgument(
                f"prefetch_count is {prefetch_count!r}; it must be a whole number from 0 to "
                f"{MAX_RECEIVE_MESSAGES:,} (what one receive may ask for)."
            )
        if session_id is not None and session_id is not NEXT_AVAILABLE_SESSION:
            if not isinstance(session_id, str) or not 0 < len(session_id) <= 128:
                raise InvalidArgument(
                    f"session_id is {session_id!r}; use a string of 1 to 128 characters or "
                    "aiosb.NEXT_AVAILABLE_SESSION."
                )
        parsed = parse_entity_path(entity, sub_queue)
        if session_id is not None and parsed.sub_queue is not None:
            raise InvalidOperation(
                "A dead-letter queue is not session-enabled: receive from it without a session_id."
            )
        wait = to_seconds("session_wait", session_wait, allow_none=True)
        receiver = Receiver(
            self, entity, mode, session_id, parsed.sub_queue, prefetch_count, parsed
        )
        receiver._session_wait = self.operation_timeout if wait is None else wait
        return receiver

    def pair(self, secondary: Namespace, options: Any = None) -> Any:
        """Pair this (primary) namespace with ``secondary`` for send availability.

        Args:
            secondary: Where the backlog queues live.
            options: A :class:`~aiosb.PairedNamespaceOptions` (defaults when ``None``).

        Returns:
            A :class:`~aiosb.pairing.PairedNamespace`; use it as an async context
            manager (``async with primary.pair(secondary, options) as paired``).
        """
        from .pairing import PairedNamespace, PairedNamespaceOptions

        self._check_open()
        if not isinstance(secondary, Namespace):
            raise InvalidArgument(f"pair needs a secondary Namespace, not {secondary!r}.")
        if secondary is self:
            raise InvalidArgument("a namespace cannot be paired with itself.")
        return PairedNamespace(self, secondary, options or PairedNamespaceOptions())

    def _track(self, link: Sender | Receiver) -> None:
        self._links.add(link)

    def _untrack(self, link: Sender | Receiver) -> None:
        self._links.discard(link)

    async def _run_manage(self, request: ManagementRequest) -> Any:
        return await self.execute(self.transport.manage, request)
