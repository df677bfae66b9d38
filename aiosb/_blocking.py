"""Blocking mirrors of the async API, driven through a :class:`~aiosb.bridge.Bridge`:
:class:`BlockingNamespace`, :class:`BlockingReceiver` and the shared
:class:`BlockingSender`, and the waiting every blocking call shares (timeouts, and the
refusal to wait on a bridge's own loop thread). Imports the client layer; refers to the
bridge only for types."""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from .client import Namespace, Receiver, SendingLink
from .errors import ClientClosed, InvalidArgument, InvalidOperation, OperationTimeout
from .message import Message
from .pairing import PairedSender

if TYPE_CHECKING:
    from .bridge import Bridge

__all__ = ["BlockingNamespace", "BlockingReceiver", "BlockingSender", "Timeout", "wait"]

log = logging.getLogger("aiosb.bridge")
T = TypeVar("T")
Timeout = _dt.timedelta | float | int | None
#: The threads that run a bridge's loop: a blocking wait there would wait for itself.
loop_threads: set[int] = set()


def _seconds(timeout: Timeout) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, _dt.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise InvalidArgument(f"timeout must be seconds or a timedelta, not {timeout!r}.")
    if not seconds >= 0:  # also refuses NaN
        raise InvalidArgument(f"timeout is {timeout!r}; it must be a non-negative duration.")
    return seconds


def _check_not_a_loop_thread() -> None:
    if threading.get_ident() in loop_threads:
        raise InvalidOperation(
            "a blocking Bridge call was made from a bridge's own event loop thread, where "
            "it would wait for itself for ever; await the coroutine instead."
        )


def wait(future: concurrent.futures.Future[T], timeout: Timeout = None) -> T:
    """Wait for a future from :meth:`~aiosb.bridge.Bridge.submit`; cancel it if
    ``timeout`` passes."""
    _check_not_a_loop_thread()
    seconds = _seconds(timeout)
    try:
        return future.result(seconds)
    except concurrent.futures.TimeoutError:
        if future.done() and not future.cancelled():
            return future.result()
        future.cancel()
        raise OperationTimeout(
            f"the operation did not finish within {seconds:g} s and was cancelled."
        ) from None
    except concurrent.futures.CancelledError:
        raise OperationTimeout("the operation was cancelled before it finished.") from None


async def _on_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn`` on the bridge's loop (what needs a running loop to be made)."""
    return fn(*args, **kwargs)


class BlockingSender:
    """A blocking sender that many threads may share (from :meth:`aiosb.bridge.Bridge.sender`).

    ``send`` returns once the broker acknowledged; ``send_soon`` returns a future at
    once, so one thread can keep several batches in flight; ``flush`` waits for every
    send made so far.

    Attributes:
        entity: The queue or topic.
        max_message_size: The largest message or batch, in bytes (for a pairing, the
            smaller of the two namespaces').
    """

    def __init__(
        self, bridge: Bridge, link: SendingLink, max_message_size: int, key: Hashable
    ) -> None:
        self._bridge = bridge
        self._link = link
        self._key = key
        self.entity = link.entity
        self.max_message_size = max_message_size
        self._in_flight: set[concurrent.futures.Future[None]] = set()
        self._failures: list[BaseException] = []
        self._guard = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<BlockingSender {self._link!r} in_flight={len(self._in_flight)}>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    @property
    def paired(self) -> bool:
        """Whether sends go through a pairing (a secondary was given)."""
        return isinstance(self._link, PairedSender)

    def send_soon(self, message: Message | Sequence[Message]) -> concurrent.futures.Future[None]:
        """Start sending one message or a batch; the future completes when it is
        acknowledged (or fails with the same error ``send`` would raise). A failure is
        also raised by the next :meth:`flush`."""
        return self._start(message, self._done_soon)

    def _start(
        self,
        message: Message | Sequence[Message],
        done: Callable[[concurrent.futures.Future[None]], None],
    ) -> concurrent.futures.Future[None]:
        if self._closed:
            raise ClientClosed(f"the blocking sender for {self.entity!r} is closed.")
        future = self._bridge.submit(self._link.send(message))
        with self._guard:
            self._in_flight.add(future)
        future.add_done_callback(done)
        return future

    def _done(self, future: concurrent.futures.Future[None]) -> None:
        with self._guard:
            self._in_flight.discard(future)

    def _done_soon(self, future: concurrent.futures.Future[None]) -> None:
        error = None if future.cancelled() else future.exception()
        with self._guard:
            self._in_flight.discard(future)
            if error is not None and len(self._failures) < 100:
                self._failures.append(error)

    def send(self, message: Message | Sequence[Message], *, timeout: Timeout = None) -> None:
        """Send one message, or a list as one batch; return once it is acknowledged.

        Raises:
            OperationTimeout: ``timeout`` passed (the send was cancelled; it may or may
                not have landed) or the operation timeout ran out.
            ServiceBusError: the other errors of :meth:`aiosb.Sender.send` (from
                :mod:`aiosb.errors`).
        """
        wait(self._start(message, self._done), timeout)  # its error is raised here

    def flush(self, timeout: Timeout = None) -> None:
        """Wait until every send started so far (by any thread) has finished, then raise
        the first error of a :meth:`send_soon` since the last flush, if any.

        Raises:
            OperationTimeout: ``timeout`` passed first.
            Exception: The first error among those sends (the others are logged).
        """
        _check_not_a_loop_thread()
        seconds = _seconds(timeout)
        with self._guard:
            pending = list(self._in_flight)
        if pending:
            _, not_done = concurrent.futures.wait(pending, seconds)
            if not_done:
                raise OperationTimeout(
                    f"{len(not_done)} sends to {self.entity!r} were still in flight after "
                    f"{seconds:g} s."
                )
        with self._guard:
            failures, self._failures = self._failures, []
        for other in failures[1:]:
            log.error("a send to %r failed too: %s", self.entity, other)
        if failures:
            raise failures[0]

    def close(self, timeout: Timeout = None) -> None:
        """Flush, then close the sender (idempotent); the bridge makes a new one if asked."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._bridge._forget(self)
            if not self._bridge.closed:
                self._bridge.run(self._link.aclose())


class _Mirror:
    """Blocking mirrors of an async object's coroutine methods, found by name."""

    _target: Any

    def __init__(self, bridge: Bridge, target: Any) -> None:
        self._bridge = bridge
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name.startswith("_") or not callable(attr):
            return attr
        bridge = self._bridge

        @functools.wraps(attr)
        def blocking(*args: Any, timeout: Timeout = None, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if isinstance(result, Coroutine):
                return bridge.run(result, timeout=timeout)
            return result

        return blocking


class BlockingNamespace(_Mirror):
    """A namespace driven from synchronous code (from :meth:`aiosb.bridge.Bridge.connect`).

    Every coroutine method of :class:`aiosb.Namespace` is here as a blocking method of
    the same name, with an extra ``timeout`` keyword (``create_queue``, ``get_queue``,
    ``runtime_properties``, ...). ``sender`` and ``receiver`` give blocking ones.
    """

    _target: Namespace

    def sender(self, entity: str) -> BlockingSender:
        """A blocking sender for ``entity`` on this namespace; close it when done."""
        link = self._bridge.run(_on_loop(self._target.sender, entity))
        return BlockingSender(
            self._bridge, link, self._target.transport.max_message_size, ("own", id(link))
        )

    def receiver(self, entity: str, **options: Any) -> BlockingReceiver:
        """A blocking receiver (options of :meth:`aiosb.Namespace.receiver`)."""
        receiver = self._bridge.run(_on_loop(self._target.receiver, entity, **options))
        self._bridge.run(receiver.__aenter__())
        return BlockingReceiver(self._bridge, receiver)

    def close(self) -> None:
        """Close the namespace and everything made from it (idempotent)."""
        if not self._bridge.closed:
            self._bridge.run(self._target.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingReceiver(_Mirror):
    """A receiver driven from synchronous code.

    Every coroutine method of :class:`aiosb.Receiver` is here as a blocking method of the
    same name with an extra ``timeout`` keyword: ``receive``, ``complete``, ``abandon``,
    ``dead_letter``, ``defer``, ``renew_lock``, ``peek``, ...
    """

    _target: Receiver

    def __init__(self, bridge: Bridge, receiver: Receiver, owns: Namespace | None = None) -> None:
        super().__init__(bridge, receiver)
        self._owns = owns

    def close(self) -> None:
        """Close the receiver (and the connection it opened, if any); idempotent."""
        if self._bridge.closed:
            return
        self._bridge.run(self._target.aclose())
        if self._owns is not None:
            self._bridge.run(self._owns.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
