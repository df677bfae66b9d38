"""The client: :func:`connect`, :class:`Namespace`, :class:`Sender` and :class:`Receiver`.

The client is the same over every transport. It owns what transports leave out:
operation timeouts, retries of transient errors with backoff, argument checking, ping
filtering (PN-14), and the bookkeeping of senders and receivers.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime as _dt
import random
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, Self, TypeVar

from .auth import SasCredential, parse_connection_string
from .entities import (
    QueueProperties,
    RuntimeProperties,
    SubscriptionProperties,
    TopicProperties,
    parse_entity_path,
)
from .errors import (
    ClientClosed,
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
    OperationTimeout,
    ServiceBusError,
)
from .message import PING_CONTENT_TYPE, Message, ReceivedMessage
from .protocol import (
    MAX_RECEIVE_MESSAGES,
    ManagementRequest,
    ReceiveRequest,
    SessionInfo,
    SessionRequest,
    Settlement,
    Transport,
    check_receive,
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
Duration = _dt.timedelta | float | int
_MAX_TRANSACTION_MESSAGES = 100


class _NextAvailableSession:
    """The type of :data:`NEXT_AVAILABLE_SESSION`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "aiosb.NEXT_AVAILABLE_SESSION"

    def __reduce__(self) -> str:
        return "NEXT_AVAILABLE_SESSION"


#: Pass as ``session_id`` to receive from whichever session is available next.
NEXT_AVAILABLE_SESSION = _NextAvailableSession()


class InFlight:
    """The tasks running operations of one object (a namespace, receiver or pairing), so
    that closing it ends them all, promptly, with :class:`~aiosb.errors.ClientClosed`.

    An operation registers its task with :meth:`enter` and :meth:`exit`; :meth:`close`
    cancels every registered task; the operation turns that cancellation into
    ``ClientClosed`` with :meth:`closed_error` (a caller's own cancellation stays one).
    """

    __slots__ = ("cancelled", "reason", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[asyncio.Task[Any], int] = {}
        self.cancelled: set[asyncio.Task[Any]] = set()
        self.reason: str | None = None

    def enter(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            self.tasks[task] = self.tasks.get(task, 0) + 1

    def exit(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            left = self.tasks[task] - 1
            if left:
                self.tasks[task] = left
            else:
                del self.tasks[task]

    def close(self, reason: str) -> None:
        """Cancel every operation in flight (except the caller's own)."""
        self.reason = reason
        current = asyncio.current_task()
        for task in list(self.tasks):
            if task is not current and task not in self.cancelled:
                self.cancelled.add(task)
                task.cancel()

    def closed_error(self, task: asyncio.Task[Any] | None) -> ClientClosed | None:
        """After a CancelledError in ``task``: the ClientClosed to raise instead, if the
        cancellation was this object's closing (taken back) and nothing else's."""
        if self.reason is None or task is None:
            return None
        if task in self.cancelled:
            self.cancelled.discard(task)
            task.uncancel()
        if task.cancelling():
            return None  # the caller cancelled too: that cancellation goes on
        return ClientClosed(f"{self.reason} while the operation was in flight; it may or "
                            "may not have taken effect.")


def _seconds(name: str, value: Duration | None, *, allow_none: bool = False) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise InvalidArgument(f"{name} must be a duration, not None.")
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgument(f"{name} must be a timedelta or seconds, not {value!r}.")
    if not seconds >= 0:  # NaN too
        raise InvalidArgument(f"{name} is {value}; it must not be negative or NaN.")
    return seconds


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
            namespace's).

    Returns:
        An unopened :class:`Namespace`: ``async with aiosb.connect(url) as ns: ...``.

    Raises:
        InvalidArgument: A URL or option aiosb does not understand.
    """
    if isinstance(credential, tuple):
        credential = SasCredential(*credential)
    timeout = _seconds("operation_timeout", operation_timeout)
    if not timeout:
        raise InvalidArgument("operation_timeout must be positive.")
    backoff = _seconds("retry_backoff", options.pop("retry_backoff", 0.1))
    backoff_max = _seconds("retry_backoff_max", options.pop("retry_backoff_max", 5.0))
    transport = _open_transport(url, credential, options, timeout)  # type: ignore[arg-type]
    return Namespace(
        transport,
        url=url,
        operation_timeout=timeout,  # type: ignore[arg-type]
        retry_backoff=backoff,  # type: ignore[arg-type]
        retry_backoff_max=backoff_max,  # type: ignore[arg-type]
    )


def _open_transport(
    url: str,
    credential: SasCredential | None,
    options: dict[str, Any],
    operation_timeout: float = 60.0,
) -> Transport:
    if not isinstance(url, str) or not url:
        raise InvalidArgument(f"connect needs a URL or connection string, not {url!r}.")
    if url.lower().startswith("endpoint="):
        parts = parse_connection_string(url)
        endpoint = parts["Endpoint"]
        if urllib.parse.urlsplit(endpoint).scheme.lower() in ("http", "https"):
            # What `aiosb serve` prints: the emulator server, over HTTP, with its key.
            if credential is None and "SharedAccessKey" in parts:
                credential = SasCredential(
                    parts.get("SharedAccessKeyName", ""), parts["SharedAccessKey"]
                )
            return _open_transport(endpoint.rstrip("/"), credential, options, operation_timeout)
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if url.lower().startswith("endpoint=") or scheme == "sb":
        return _amqp_transport(url, parsed, credential, options)
    if scheme == "memory":
        from .transport.memory import MemoryTransport

        query = dict(urllib.parse.parse_qsl(parsed.query))
        tier = options.pop("tier", None) or query.pop("tier", None)
        unknown = sorted(set(options) | set(query))
        if unknown:
            raise InvalidArgument(f"unknown option(s) for memory://: {', '.join(unknown)}.")
        name = parsed.netloc or parsed.path.strip("/")
        return MemoryTransport(name, tier=tier)
    if scheme in ("http", "https"):
        from .transport.http import HttpTransport

        known = {"extensions", "max_message_size"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidArgument(f"unknown option(s) for {scheme}://: {', '.join(unknown)}.")
        return HttpTransport(url, credential, operation_timeout=operation_timeout, **options)
    raise InvalidArgument(
        f"unsupported URL {url!r}: use memory://NAME, http://HOST:PORT/NAME, "
        "https://NAME.servicebus.windows.net or a connection string."
    )


def _amqp_transport(
    url: str,
    parsed: urllib.parse.SplitResult,
    credential: SasCredential | None,
    options: dict[str, Any],
) -> Transport:
    from .transport.amqp import AmqpTransport

    max_message_size = options.pop("max_message_size", None)
    if options:
        unknown = ", ".join(sorted(options))
        raise InvalidArgument(f"unknown option(s) for the AMQP transport: {unknown}.")
    extra = {} if max_message_size is None else {"max_message_size": max_message_size}
    if parsed.scheme.lower() == "sb":
        if credential is None:
            raise InvalidArgument(
                f"{url} needs a credential: connect(url, credential=(key_name, key)), or "
                "use the namespace's connection string."
            )
        return AmqpTransport(
            fully_qualified_namespace=parsed.netloc, credential=credential, **extra
        )
    return AmqpTransport(url, **extra)


class Namespace:
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
        trackers = (self._inflight,) if link is None else (self._inflight, link)
        for tracker in trackers:
            tracker.enter(task)
        try:
            return await self._attempts(fn, args, kwargs, wait, timeout)
        except asyncio.CancelledError:
            for tracker in trackers:
                error = tracker.closed_error(task)
                if error is not None:
                    raise error from None
            raise
        finally:
            for tracker in trackers:
                tracker.exit(task)

    def retry_delay(self, attempt: int) -> float:
        """The delay before retry ``attempt`` (1 for the first), before any jitter:
        ``retry_backoff`` doubled per attempt, capped at ``retry_backoff_max``."""
        return min(self._backoff * 2 ** (attempt - 1), self._backoff_max)

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
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    return await fn(*args, **kwargs)
            except ServiceBusError as exc:
                if not exc.retryable or isinstance(exc, OperationTimeout):
                    raise
                attempt += 1
                delay = self.retry_delay(attempt) * random.uniform(0.8, 1.2)
                if deadline is not None and loop.time() + delay >= deadline:
                    raise OperationTimeout(
                        f"{fn.__name__} on namespace {self.name!r} did not succeed within "
                        f"{limit:g} s: {attempt} attempts failed, the last "
                        f"with: {exc.message}"
                    ) from exc
                await asyncio.sleep(delay)
            except TimeoutError:
                raise OperationTimeout(
                    f"{fn.__name__} on namespace {self.name!r} got no answer within {limit:g} s."
                ) from None

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
        wait = _seconds("session_wait", session_wait, allow_none=True)
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

    # -- management --------------------------------------------------------------------

    async def _manage(
        self, action: str, kind: str | None, path: str = "", props: Any = None
    ) -> Any:
        request = ManagementRequest(action, kind, path, props)  # type: ignore[arg-type]
        return await self.execute(self.transport.manage, request)

    async def create_queue(self, name: str, **properties: Any) -> QueueProperties:
        """Create a queue; ``properties`` take the SDK's names (``lock_duration``, ...).

        Raises:
            EntityAlreadyExists: A queue or topic with that name exists.
            InvalidArgument: An unknown property or a value out of range.
        """
        return await self._manage("create", "queue", name, QueueProperties.build(name, properties))

    async def get_queue(self, name: str) -> QueueProperties:
        """The queue's description. Raises :class:`EntityNotFound` if there is none."""
        return await self._manage("get", "queue", name)

    async def update_queue(self, queue: str | QueueProperties, **changes: Any) -> QueueProperties:
        """Change a queue's properties (all but partitioning, sessions, duplicate detection)."""
        return await self._update("queue", queue, changes)

    async def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages."""
        await self._manage("delete", "queue", name)

    async def queue_exists(self, name: str) -> bool:
        """Whether the queue exists."""
        return await self._exists("queue", name)

    async def list_queues(self) -> list[QueueProperties]:
        """Every queue's description."""
        return await self._manage("list", "queue")

    async def create_topic(self, name: str, **properties: Any) -> TopicProperties:
        """Create a topic; see :meth:`create_queue`."""
        return await self._manage("create", "topic", name, TopicProperties.build(name, properties))

    async def get_topic(self, name: str) -> TopicProperties:
        """The topic's description."""
        return await self._manage("get", "topic", name)

    async def update_topic(self, topic: str | TopicProperties, **changes: Any) -> TopicProperties:
        """Change a topic's properties."""
        return await self._update("topic", topic, changes)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its subscriptions."""
        await self._manage("delete", "topic", name)

    async def topic_exists(self, name: str) -> bool:
        """Whether the topic exists."""
        return await self._exists("topic", name)

    async def list_topics(self) -> list[TopicProperties]:
        """Every topic's description."""
        return await self._manage("list", "topic")

    async def create_subscription(
        self, topic: str, name: str, **properties: Any
    ) -> SubscriptionProperties:
        """Create a subscription of ``topic``; it takes every message sent to the topic."""
        props = SubscriptionProperties.build(name, {**properties, "topic_name": topic})
        return await self._manage("create", "subscription", f"{topic}/subscriptions/{name}", props)

    async def get_subscription(self, topic: str, name: str) -> SubscriptionProperties:
        """The subscription's description."""
        return await self._manage("get", "subscription", f"{topic}/subscriptions/{name}")

    async def update_subscription(
        self, topic: str, subscription: str | SubscriptionProperties, **changes: Any
    ) -> SubscriptionProperties:
        """Change a subscription's properties."""
        if isinstance(subscription, str):
            current = await self.get_subscription(topic, subscription)
        else:
            current = subscription
        props = self._changed(current, changes)
        path = f"{topic}/subscriptions/{props.name}"
        return await self._manage("update", "subscription", path, props)

    async def delete_subscription(self, topic: str, name: str) -> None:
        """Delete a subscription and its messages."""
        await self._manage("delete", "subscription", f"{topic}/subscriptions/{name}")

    async def subscription_exists(self, topic: str, name: str) -> bool:
        """Whether the subscription exists."""
        return await self._exists("subscription", f"{topic}/subscriptions/{name}")

    async def list_subscriptions(self, topic: str) -> list[SubscriptionProperties]:
        """Every subscription of ``topic``."""
        return await self._manage("list", "subscription", topic)

    async def runtime_properties(self, entity: str) -> RuntimeProperties:
        """Counts of an entity: active, scheduled, dead-lettered, deferred messages."""
        return await self._manage("runtime", None, entity)

    async def _exists(self, kind: str, path: str) -> bool:
        try:
            await self._manage("get", kind, path)
        except EntityNotFound:
            return False
        return True

    @staticmethod
    def _changed(current: Any, changes: dict[str, Any]) -> Any:
        fields = {f.name for f in dataclasses.fields(current)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise InvalidArgument(f"unknown {current.kind} propert(ies): {', '.join(unknown)}.")
        return dataclasses.replace(current, **changes)

    async def _update(self, kind: str, entity: Any, changes: dict[str, Any]) -> Any:
        current = await self._manage("get", kind, entity) if isinstance(entity, str) else entity
        props = self._changed(current, changes)
        return await self._manage("update", kind, props.name, props)


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
        self.sender._transaction.reset(self._token)  # type: ignore[arg-type]
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
        messages = [message] if isinstance(message, Message) else list(message)
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
        messages = [message] if single else list(message)  # type: ignore[list-item]
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

    async def _op(self, action: str, state: bytes | None = None) -> SessionInfo:
        receiver = self._receiver
        receiver._check()
        ns = receiver.namespace
        request = SessionRequest(action, self.session_id, self._lock, state)  # type: ignore[arg-type]
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
        parsed: Any,
    ) -> None:
        self.namespace = namespace
        self.entity = entity
        self.mode = mode
        self._wants_session = session_id is not None
        self.session_id: str | None = (
            None if session_id is NEXT_AVAILABLE_SESSION else session_id  # type: ignore[assignment]
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
        wait = _seconds("max_wait", max_wait, allow_none=True)
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
            if messages and any(m.content_type == PING_CONTENT_TYPE for m in messages):
                messages = await self._drop_pings(messages)
                if not messages and (deadline is None or loop.time() < deadline):
                    wait = None if deadline is None else max(0.0, deadline - loop.time())
                    continue
            return messages

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
        for msg in messages:
            if not isinstance(msg, ReceivedMessage):
                raise InvalidArgument(f"can only settle received messages, not {msg!r}.")
            if msg.lock_token is None:
                raise InvalidOperation(
                    f"Message {msg.sequence_number} holds no lock (peeked, or received and "
                    "deleted): there is nothing to settle."
                )
            if msg.entity_path.lower() != self._path:
                raise InvalidOperation(
                    f"Message {msg.sequence_number} was received from {msg.entity_path!r}, "
                    f"not {self._path!r}: settle it with the receiver it came from."
                )
            tokens.append(msg.lock_token)
        return tokens

    async def _settle(self, action: str, messages: Any, **kw: Any) -> list[float] | None:
        self._check()
        msgs = [messages] if isinstance(messages, ReceivedMessage) else list(messages)
        tokens = self._tokens(msgs)
        if not tokens:
            return None
        ns = self.namespace
        settlement = Settlement(action, tokens, self.sub_queue, **kw)  # type: ignore[arg-type]
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
        messages = [message] if isinstance(message, ReceivedMessage) else list(message)
        until = await self._settle("renew", messages) or []
        for msg, ts in zip(messages, until, strict=True):
            msg.locked_until_timestamp = ts
        expiries = [_dt.datetime.fromtimestamp(ts, _dt.UTC) for ts in until]
        return expiries[0] if isinstance(message, ReceivedMessage) else expiries
