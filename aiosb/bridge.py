"""The thread bridge: synchronous code (Spark executors, scripts, notebooks) drives aiosb.

A :class:`Bridge` runs one event loop (uvloop where installed) on a background thread,
through anyio's blocking portal, and offers blocking mirrors of the async API::

    from aiosb.bridge import Bridge

    bridge = Bridge.shared()                       # one per process, started on first use
    sender = bridge.sender("http://127.0.0.1:5380/contoso", "orders")
    sender.send(aiosb.Message(b"hello"))           # returns once the broker has it
    futures = [sender.send_soon(batch) for batch in batches]   # several batches in flight
    sender.flush()                                 # every send made so far is acknowledged

:meth:`Bridge.shared` is what Spark executors use: a per-process singleton that every task
of a reused Python worker shares, so a worker opens each connection (and each pairing)
once. It notices a fork (the child gets a bridge of its own and never touches its parent's
loop or sockets) and closes at interpreter exit, waiting for sends in flight first.

Blocking calls surface the same :mod:`aiosb.errors` as the async API; a ``timeout`` on a
call cancels the operation and raises :class:`~aiosb.errors.OperationTimeout`. A call
from the bridge's own loop thread is refused with
:class:`~aiosb.errors.InvalidOperation` instead of deadlocking; await the coroutine there.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Coroutine, Hashable
from typing import Any, Self

import anyio.from_thread

from ._blocking import (
    BlockingNamespace,
    BlockingReceiver,
    BlockingSender,
    T,
    Timeout,
    _check_not_a_loop_thread,
    _on_loop,
    _seconds,
    loop_threads,
    wait,
)
from .auth import SasCredential
from .client import Namespace, SendingLink, connect
from .errors import ClientClosed, InvalidArgument, InvalidOperation
from .pairing import PairedNamespace, PairedNamespaceOptions

__all__ = ["BlockingNamespace", "BlockingReceiver", "BlockingSender", "Bridge"]

log = logging.getLogger("aiosb.bridge")
#: How long closing at interpreter exit waits for sends in flight.
EXIT_FLUSH_SECONDS = 30.0

_registry_lock = threading.RLock()
_bridges: weakref.WeakSet[Bridge] = weakref.WeakSet()
_shared: Bridge | None = None


def _backend_options(loop: str) -> dict[str, Any]:
    if loop not in ("auto", "uvloop", "asyncio"):
        raise InvalidArgument(f"loop must be 'auto', 'uvloop' or 'asyncio', not {loop!r}.")
    if loop == "asyncio":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if loop == "auto":
            return {}
        raise InvalidArgument(
            "loop='uvloop' needs the uvloop package; it is not installed."
        ) from None
    return {"use_uvloop": True}


async def _await(coro: Coroutine[Any, Any, T]) -> T:
    return await coro




class Bridge:
    """One event loop on a background thread, and blocking mirrors of the async API.

    Start it with ``with Bridge() as bridge:`` (or :meth:`start`), or take the
    per-process :meth:`shared` one. Every method may be called from any thread but the
    bridge's own loop thread.

    Args:
        loop: ``"auto"`` (uvloop where installed), ``"uvloop"`` or ``"asyncio"``.
    """

    def __init__(self, *, loop: str = "auto") -> None:
        self._backend_options = _backend_options(loop)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._stack: contextlib.ExitStack | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._loop_thread: int | None = None
        self._state = "new"
        self._connections: dict[Hashable, Any] = {}
        self._senders: dict[Hashable, BlockingSender] = {}
        self._opening: dict[Hashable, threading.Lock] = {}

    def __repr__(self) -> str:
        loop = "uvloop" if self._backend_options else "asyncio"
        return f"<Bridge {self._state} {loop} pid={self._pid} senders={len(self._senders)}>"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lifetime ----------------------------------------------------------------------

    @classmethod
    def shared(cls) -> Bridge:
        """The per-process bridge, started on first use and closed at interpreter exit.

        A forked child gets a new one: it never uses its parent's loop or sockets.
        """
        global _shared
        bridge = _shared
        if bridge is not None and bridge._pid == os.getpid() and bridge._state != "closed":
            return bridge
        with _registry_lock:
            if _shared is None or _shared._pid != os.getpid() or _shared._state == "closed":
                _shared = cls().start()
            return _shared

    def start(self) -> Self:
        """Start the loop thread (idempotent); every other method starts it too."""
        self._check_process()
        with self._lock:
            if self._state == "open":
                return self
            if self._state == "closed":
                raise ClientClosed("this Bridge was closed; make a new one.")
            stack = contextlib.ExitStack()
            portal = stack.enter_context(
                anyio.from_thread.start_blocking_portal(
                    "asyncio", self._backend_options, name="aiosb-bridge"
                )
            )
            self._loop_thread = portal.call(threading.get_ident)
            loop_threads.add(self._loop_thread)
            self._stack, self._portal, self._state = stack, portal, "open"
        with _registry_lock:
            _bridges.add(self)
        return self

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._state == "closed"

    def close(self, timeout: Timeout = None) -> None:
        """Wait for sends in flight, close every sender, pairing and connection, stop the
        loop thread (idempotent).

        Args:
            timeout: How long to wait for sends in flight; ``None`` waits for them all
                (each is bounded by its operation timeout).
        """
        if self._pid != os.getpid():  # a forked child's copy: the loop is not ours
            self._state = "closed"
            return
        self._check_thread()
        with self._lock:
            if self._state != "open":
                self._state = "closed"
                return
            senders = list(self._senders.values())
            connections = list(self._connections.values())
            self._senders.clear()
            self._connections.clear()
            try:
                for sender in senders:
                    with contextlib.suppress(Exception):
                        sender.flush(timeout)
                for sender in senders:
                    with contextlib.suppress(Exception):
                        self.run(sender._link.aclose(), timeout=10)
                for connection in connections:
                    with contextlib.suppress(Exception):
                        self.run(connection.aclose(), timeout=30)
            finally:
                self._state = "closed"
                stack, self._stack, self._portal = self._stack, None, None
                if stack is not None:
                    stack.close()
                loop_threads.discard(self._loop_thread or 0)

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            raise InvalidOperation(
                f"this Bridge belongs to process {self._pid}, not to this one (a fork of "
                "it); use Bridge.shared() or a new Bridge in this process."
            )

    def _check_thread(self) -> None:
        _check_not_a_loop_thread()


    def _portal_for_call(self) -> anyio.from_thread.BlockingPortal:
        self._check_process()
        self._check_thread()
        portal = self._portal
        if portal is None:
            if self._state == "closed":
                raise ClientClosed("this Bridge is closed; make a new one.")
            self.start()
            portal = self._portal
            assert portal is not None
        return portal

    # -- running coroutines --------------------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the bridge's loop and return a future of its result.

        Cancelling the future cancels the coroutine.
        """
        try:
            portal = self._portal_for_call()
            return portal.start_task_soon(_await, coro)
        except BaseException:
            coro.close()
            raise

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: Timeout = None) -> T:
        """Run ``coro`` to completion on the bridge's loop and return its result.

        Args:
            coro: The coroutine.
            timeout: Cancel it and raise after this long; ``None`` waits for it.

        Raises:
            OperationTimeout: ``timeout`` passed first (the coroutine was cancelled).
            InvalidOperation: Called from the bridge's own loop thread.
            Exception: Whatever ``coro`` raises.
        """
        try:
            seconds = _seconds(timeout)
        except InvalidArgument:
            coro.close()
            raise
        return self.wait(self.submit(coro), seconds)

    @staticmethod
    def wait(future: concurrent.futures.Future[T], timeout: Timeout = None) -> T:
        """Wait for a future from :meth:`submit`; cancel it if ``timeout`` passes."""
        return wait(future, timeout)

    # -- blocking clients ----------------------------------------------------------------

    def connect(
        self,
        url: str,
        *,
        credential: SasCredential | tuple[str, str] | None = None,
        **options: Any,
    ) -> BlockingNamespace:
        """Open a namespace (as :func:`aiosb.connect`) and return its blocking mirror.

        The caller owns it: close it (``with bridge.connect(url) as ns:``).
        """
        ns = connect(url, credential=credential, **options)
        self.run(ns.open())
        return BlockingNamespace(self, ns)

    def sender(
        self,
        url: str,
        entity: str,
        *,
        credential: SasCredential | tuple[str, str] | None = None,
        secondary: str | None = None,
        secondary_credential: SasCredential | tuple[str, str] | None = None,
        options: PairedNamespaceOptions | None = None,
        **connect_options: Any,
    ) -> BlockingSender:
        """The shared blocking sender for ``entity``: one per bridge and arguments.

        Many threads may use it at once. The connection (and, with ``secondary``, the
        pairing) is opened once per (url, credential, secondary, options) and kept until
        the bridge closes, so every Spark task of a worker reuses it.

        Args:
            url: The primary namespace, as for :func:`aiosb.connect`.
            entity: The queue or topic.
            credential: The primary's credential.
            secondary: Pair with this namespace (its backlog queues take sends while the
                primary's entity is down).
            secondary_credential: The secondary's credential (default: ``credential``).
            options: The pairing's :class:`~aiosb.PairedNamespaceOptions`.
            **connect_options: Passed to :func:`aiosb.connect` for both namespaces
                (``operation_timeout``, ``max_message_size``, ...).
        """
        credential = _credential(credential)
        secondary_credential = _credential(secondary_credential) or credential
        if secondary is None and options is not None:
            raise InvalidArgument("options (the pairing's) need a secondary namespace.")
        if options is not None and not isinstance(options, PairedNamespaceOptions):
            raise InvalidArgument(f"options must be PairedNamespaceOptions, not {options!r}.")
        conn_key = (
            url,
            credential,
            secondary,
            secondary_credential if secondary else None,
            options,
            tuple(sorted(connect_options.items())),
        )
        key = (conn_key, entity)
        sender = self._senders.get(key)
        if sender is not None and not sender.closed:
            return sender
        # One opening at a time per connection, never the whole bridge: a secondary that
        # takes long to answer must not hold up threads sending elsewhere.
        with self._lock:
            opening = self._opening.setdefault(conn_key, threading.Lock())
        with opening:
            sender = self._senders.get(key)
            if sender is not None and not sender.closed:
                return sender
            connection = self._connections.get(conn_key)
            if connection is None or connection.closed:
                connection = self.run(
                    _open_connection(
                        url, credential, secondary, secondary_credential, options, connect_options
                    )
                )
            link = self.run(_on_loop(connection.sender, entity))
            with self._lock:
                if self._state != "open":
                    raise ClientClosed("this Bridge was closed while the sender was opening.")
                self._connections[conn_key] = connection
                sender = BlockingSender(self, link, connection.max_message_size, key)
                self._senders[key] = sender
            return sender

    def receiver(
        self,
        url: str,
        entity: str,
        *,
        credential: SasCredential | tuple[str, str] | None = None,
        connect_options: dict[str, Any] | None = None,
        **receiver_options: Any,
    ) -> BlockingReceiver:
        """A blocking receiver on a connection of its own; the caller closes it.

        ``receiver_options`` are those of :meth:`aiosb.Namespace.receiver` (``mode``,
        ``sub_queue``, ``session_id``, ...).
        """
        ns = connect(url, credential=credential, **(connect_options or {}))
        self.run(ns.open())
        try:
            receiver = self.run(_on_loop(ns.receiver, entity, **receiver_options))
            self.run(receiver.__aenter__())
        except BaseException:
            self.run(ns.aclose())
            raise
        return BlockingReceiver(self, receiver, owns=ns)

    def _forget(self, sender: BlockingSender) -> None:
        with self._lock:
            if self._senders.get(sender._key) is sender:
                del self._senders[sender._key]


def _credential(credential: SasCredential | tuple[str, str] | None) -> SasCredential | None:
    if isinstance(credential, tuple):
        return SasCredential(*credential)
    return credential


class _Connection:
    """One cached connection: a namespace, or a pairing with both of its namespaces."""

    def __init__(self, primary: Namespace, secondary: Namespace | None, paired: Any) -> None:
        self.primary = primary
        self.secondary = secondary
        self.paired: PairedNamespace | None = paired
        self.max_message_size: int = primary.transport.max_message_size
        if secondary is not None:
            self.max_message_size = min(
                self.max_message_size, secondary.transport.max_message_size
            )

    @property
    def closed(self) -> bool:
        return self.primary.closed or (self.secondary is not None and self.secondary.closed)

    def sender(self, entity: str) -> SendingLink:
        if self.paired is not None:
            return self.paired.sender(entity)
        return self.primary.sender(entity)

    async def aclose(self) -> None:
        if self.paired is not None:
            await self.paired.aclose()
        if self.secondary is not None:
            await self.secondary.aclose()
        await self.primary.aclose()


async def _open_connection(
    url: str,
    credential: SasCredential | None,
    secondary: str | None,
    secondary_credential: SasCredential | None,
    options: PairedNamespaceOptions | None,
    connect_options: dict[str, Any],
) -> _Connection:
    primary = connect(url, credential=credential, **connect_options)
    await primary.open()
    if secondary is None:
        return _Connection(primary, None, None)
    other = connect(secondary, credential=secondary_credential, **connect_options)
    try:
        await other.open()
        paired = primary.pair(other, options or PairedNamespaceOptions())
        await paired.open()
    except BaseException:
        await other.aclose()
        await primary.aclose()
        raise
    return _Connection(primary, other, paired)


def _after_fork_in_child() -> None:
    global _shared, _registry_lock
    _shared = None
    loop_threads.clear()  # the parent's loop threads do not exist here
    _registry_lock = threading.RLock()  # another thread may have held it at the fork


def _close_at_exit() -> None:
    pid = os.getpid()
    for bridge in list(_bridges):
        if bridge._pid == pid and not bridge.closed:
            try:
                bridge.close(EXIT_FLUSH_SECONDS)
            except Exception:  # exit goes on; say what was lost
                log.exception("closing %r at exit failed", bridge)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)
