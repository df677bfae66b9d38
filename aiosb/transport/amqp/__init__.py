"""The AMQP transport: a real namespace through the official ``azure-servicebus`` aio SDK.

``aiosb.connect("Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...")`` (or
``sb://NAME.servicebus.windows.net`` with a credential) selects it. It keeps what the
SDK gets wrong out of aiosb's way (architecture.md, "Known pitfalls"):

- Links are opened once and reused: one SDK sender per entity, one SDK receiver per
  (entity, sub-queue, mode, session), cached until the transport closes.
- One operation at a time per SDK link (an :class:`asyncio.Lock` each): the SDK's async
  sender and receiver are not safe under concurrent use, aiosb's are. Long receive
  waits are cut into slices of :data:`RECEIVE_SLICE` seconds so that settlements on the
  same link get their turn between slices.
- A link or connection the broker closed (idleness, a service move) is closed and
  opened again, and the operation tried once more: the one retry a transport makes,
  since that is not a failure of the broker. It is never reported as an outage.
- The SDK's own retries are off (``retry_total=0``): :meth:`aiosb.Namespace.execute`
  retries transient errors, and the failover detector sees every non-transient one.
- SDK exceptions become :mod:`aiosb.errors` by class and AMQP condition
  (:func:`~aiosb.transport.amqp._error_map.map_error`).

The SDK settles a message only through the receiver that received it, with the SDK
message object; the transport keeps a bounded map from lock token to both.

Sessions: accepting one opens an SDK session receiver of its own, known by a lock id
the transport makes up; renewing, state and settlement go through it, and releasing
closes it. The SDK has no transactions: ``send(transaction=True)`` sends one batch,
which Service Bus enqueues atomically, and the broker applies its partition rules.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as _dt
import functools
import ssl
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..._endpoint import Endpoint, Proxy, Verify
from ...auth import SasCredential
from ...entities import parse_entity_path
from ...errors import (
    ClientClosed,
    InvalidArgument,
    MessageLockLost,
    ServiceBusError,
    SessionLockLost,
)
from ...message import Message, ReceivedMessage
from ...protocol import ManagementRequest, ReceiveRequest, SessionInfo, SessionRequest, Settlement
from ._convert import (
    message_from_sdk,
    message_to_sdk,
    sdk,
)
from ._error_map import Reached
from ._namespace_name import namespace_name
from ._sdk_admin import AdminOperations
from ._sdk_link import Link
from ._settle import settle_operation

__all__ = ["RECEIVE_SLICE", "AmqpTransport"]

T = TypeVar("T")

#: Longest single SDK receive call (seconds); longer waits are made of several.
RECEIVE_SLICE = 1.0
#: The wait of a receive with ``max_wait=0`` (the SDK needs a positive one).
NO_WAIT = 0.25
#: Most lock tokens remembered at once; the oldest are forgotten first.
MAX_TRACKED_LOCKS = 10_000
#: How long after its lock expired a token is still remembered (clock skew).
LOCK_GRACE = _dt.timedelta(minutes=1)
#: Standard tier's message size; premium namespaces pass ``max_message_size``.
DEFAULT_MAX_MESSAGE_SIZE = 256 * 1024

_MODES = {"peek_lock": "peeklock", "receive_and_delete": "receiveanddelete"}
class AmqpTransport(AdminOperations):
    """A :class:`~aiosb.transport.Transport` over the ``azure-servicebus`` aio SDK.

    Its namespace is NAME at ``NAME.servicebus.windows.net``, and host and port at any
    other host: ``localhost_5672`` (:func:`~._namespace_name.namespace_name`).

    :func:`aiosb.connect` makes it from the :class:`~aiosb._endpoint.Endpoint` it
    parsed; :meth:`from_url` makes one from a connection string or an ``sb://`` URL.

    Args:
        endpoint: An AMQP endpoint: a connection string's
            (``Endpoint=sb://NAME.servicebus.windows.net/;SharedAccessKeyName=...;
            SharedAccessKey=...``), or ``sb://NAME.servicebus.windows.net`` with a
            credential: a :class:`~aiosb.SasCredential` or any credential the SDK takes
            (``AzureNamedKeyCredential``, ``AzureSasCredential``, an async token
            credential). Its certificate to trust is for AMQP over TLS and the
            administration client's HTTPS (``aiosb serve`` answers that at its AMQP port
            with a self-signed certificate); with a proxy the SDK speaks AMQP over
            WebSockets.
        max_message_size: The namespace's message size limit in bytes (256 KB on
            standard; give premium's).
        client_factory: Makes the ``ServiceBusClient`` from keyword arguments (tests).
        admin_factory: Makes the ``ServiceBusAdministrationClient`` likewise (tests).

    Raises:
        InvalidOperation: ``azure-servicebus`` is not installed.
        InvalidArgument: Not an AMQP endpoint, or one with neither a connection string
            nor a credential.
    """

    #: Most locked messages one connection can hold and still settle (a client reading
    #: more must receive them on more connections).
    lock_capacity = MAX_TRACKED_LOCKS

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        client_factory: Callable[..., Any] | None = None,
        admin_factory: Callable[..., Any] | None = None,
    ) -> None:
        sdk()  # fail at connect(), with the install hint, when the extra is missing
        if not isinstance(endpoint, Endpoint):
            raise InvalidArgument(
                f"AmqpTransport takes an Endpoint, not {endpoint!r}: "
                "AmqpTransport.from_url(connection_string) makes one from a connection "
                "string or an sb:// URL."
            )
        if endpoint.kind != "amqp":
            raise InvalidArgument(
                "the AMQP transport needs a connection string, or a namespace and a credential."
            )
        if endpoint.connection_string is None and endpoint.credential is None:
            raise InvalidArgument(
                f"sb://{endpoint.netloc} needs a credential: connect(url, credential="
                "(key_name, key)), or use the namespace's connection string."
            )
        self.endpoint = endpoint
        # A connection string's host as the SDK reads it (lower-cased); a namespace as
        # given. The name: namespace_name's (a Service Bus NAME stays what it was).
        by_string = endpoint.connection_string is not None
        self.host = endpoint.host.lower() if by_string else endpoint.netloc
        self.namespace = namespace_name(
            endpoint.host.lower() if by_string else endpoint.host, endpoint.port,
            emulator=endpoint.emulator,
        )
        if not isinstance(max_message_size, int) or max_message_size < 1:
            raise InvalidArgument(f"max_message_size is {max_message_size!r}; it must be positive.")
        self.max_message_size = max_message_size
        self._reached = Reached(endpoint.netloc)
        self._connection_string = endpoint.connection_string
        self._credential = endpoint.credential
        self._client_factory = client_factory
        self._admin_factory = admin_factory
        self._client: Any = None
        self._admin: Any = None
        self._links: dict[tuple[Any, ...], Link] = {}
        self._sessions: dict[str, Link] = {}
        #: Lock token -> (the link that received it, the SDK message, its entity path).
        self._locks: collections.OrderedDict[str, tuple[Link, Any, str]] = (
            collections.OrderedDict()
        )
        self._open = False
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        credential: Any = None,
        *,
        connection_verify: Verify = None,
        proxy: str | Proxy | None = None,
        **options: Any,
    ) -> AmqpTransport:
        """The transport to ``url``: a connection string, or ``sb://NAME.servicebus.
        windows.net`` with ``credential``, parsed once as :func:`aiosb.connect` parses
        it (no proxy unless one is given); ``options`` are the constructor's.

        Raises:
            InvalidArgument: A connection string or URL that names no AMQP namespace.
        """
        endpoint = Endpoint.parse(url, credential, verify=connection_verify, proxy=proxy or False)
        return cls(endpoint, **options)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._open else "new"
        return f"<AmqpTransport sb://{self.host} {state}>"

    # -- lifetime --------------------------------------------------------------------

    async def open(self) -> None:
        """Create the SDK clients (no network I/O until the first operation)."""
        if self._closed:
            raise ClientClosed(f"sb://{self.host} was closed; connect again.")
        if self._open:
            return
        try:
            self._client = self._make_client()
            self._admin = self._make_admin()
        except (ValueError, TypeError) as exc:  # the SDK's word on a connection string
            raise InvalidArgument(f"the Service Bus SDK cannot use it: {exc}") from exc
        self._open = True

    def _client_kwargs(self) -> dict[str, Any]:
        # No SDK retries: aiosb's client retries transient errors, and the failover
        # detector must see a non-transient failure the moment it happens.
        kwargs: dict[str, Any] = {"retry_total": 0}
        given = self.endpoint
        if isinstance(given.verify, ssl.SSLContext):
            kwargs["ssl_context"] = given.verify
        elif given.verify is not None:
            kwargs["connection_verify"] = given.verify
        if given.proxy is not None:  # the SDK then speaks AMQP over WebSockets
            kwargs["http_proxy"] = given.proxy.for_sdk()
            if given.port is not None:  # WebSockets go to 443 unless told otherwise
                scheme = "https" if given.tls else "http"
                kwargs["custom_endpoint_address"] = f"{scheme}://{given.netloc}"
        return kwargs

    def _admin_kwargs(self) -> dict[str, Any]:
        """The administration client's: HTTPS through azure-core, which takes a CA file,
        an aiohttp session for a context of one's own, and proxies by URL."""
        kwargs: dict[str, Any] = {"retry_total": 0}
        given = self.endpoint
        if isinstance(given.verify, ssl.SSLContext):
            import aiohttp
            from azure.core.pipeline.transport import AioHttpTransport

            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=given.verify))
            kwargs["transport"] = AioHttpTransport(session=session, session_owner=True)
        elif given.verify is not None:
            kwargs["connection_verify"] = given.verify
        if given.proxy is not None:
            proxy = given.proxy
            user = "" if proxy.username is None else (
                f"{urllib.parse.quote(proxy.username, safe='')}:"
                f"{urllib.parse.quote(proxy.password or '', safe='')}@"
            )
            url = f"http://{user}{proxy.address}"
            kwargs["proxies"] = {"http": url, "https": url}
        return kwargs

    def _make_client(self) -> Any:
        kwargs = self._client_kwargs()
        if self._client_factory is not None:
            return self._client_factory(
                connection_string=self._connection_string,
                fully_qualified_namespace=self.host,
                credential=self._sdk_credential(),
                **kwargs,
            )
        client_cls = sdk().aio.ServiceBusClient
        if self._connection_string is not None:
            return client_cls.from_connection_string(self._connection_string, **kwargs)
        return client_cls(self.host, self._sdk_credential(), **kwargs)

    def _make_admin(self) -> Any:
        kwargs = self._admin_kwargs()
        if self._admin_factory is not None:
            return self._admin_factory(
                connection_string=self._connection_string,
                fully_qualified_namespace=self.host,
                credential=self._sdk_credential(),
                **kwargs,
            )
        admin_cls = sdk().aio.management.ServiceBusAdministrationClient
        if self._connection_string is not None:
            return admin_cls.from_connection_string(self._connection_string, **kwargs)
        return admin_cls(self.host, self._sdk_credential(), **kwargs)

    def _sdk_credential(self) -> Any:
        credential = self._credential
        if isinstance(credential, SasCredential):
            from azure.core.credentials import AzureNamedKeyCredential

            return AzureNamedKeyCredential(credential.key_name, credential.key)
        return credential

    def _check(self) -> None:
        if not self._open:
            raise ClientClosed(
                f"the connection to sb://{self.host} is "
                f"{'closed' if self._closed else 'not open yet'}."
            )

    async def aclose(self) -> None:
        """Close every link and both SDK clients (idempotent)."""
        self._closed = True
        if not self._open:
            return
        self._open = False
        links = [*self._links.values(), *self._sessions.values()]
        self._links, self._sessions = {}, {}
        self._locks.clear()
        for link in links:
            await link.aclose()
        for client in (self._client, self._admin):
            with contextlib.suppress(Exception):
                await client.close()

    # -- links -----------------------------------------------------------------------

    def _sender(self, entity: str) -> Link:
        key = ("send", entity.lower())
        link = self._links.get(key)
        if link is None:
            client = self._client
            link = Link(
                f"{self.namespace}/{entity}", lambda: client.get_queue_sender(entity), self._reached
            )
            self._links[key] = link
        return link

    def _receiver(self, entity: str, request: ReceiveRequest) -> Link:
        if request.session_lock is not None:
            link = self._sessions.get(request.session_lock)
            if link is None:
                raise SessionLockLost(
                    f"Session {request.session_id!r} of {entity!r} is not held by this "
                    "connection: it was released, or accepted by another connection."
                )
            return link
        path = parse_entity_path(entity, request.sub_queue)
        mode = self._mode(request.mode)
        key = ("receive", path.path.lower(), path.sub_queue, mode, request.session_id)
        link = self._links.get(key)
        if link is None:
            options: dict[str, Any] = {"receive_mode": mode}
            if path.sub_queue:
                options["sub_queue"] = "deadletter"
            if request.session_id is not None:
                options["session_id"] = request.session_id
            link = self._links[key] = self._new_receiver(path, options)
        return link

    @staticmethod
    def _mode(mode: str) -> str:
        sdk_mode = _MODES.get(mode)
        if sdk_mode is None:
            raise InvalidArgument(f"mode is {mode!r}; use 'peek_lock' or 'receive_and_delete'.")
        return sdk_mode

    def _new_receiver(self, path: Any, options: dict[str, Any]) -> Link:
        client = self._client
        if path.subscription is None:

            def factory() -> Any:
                return client.get_queue_receiver(path.entity, **options)
        else:

            def factory() -> Any:
                return client.get_subscription_receiver(path.entity, path.subscription, **options)

        return Link(f"{self.namespace}/{path}", factory, self._reached,
                     open_first="session_id" not in options)

    # -- sessions --------------------------------------------------------------------

    async def session(self, entity: str, request: SessionRequest) -> SessionInfo:
        self._check()
        action = request.action
        if action == "accept":
            path = parse_entity_path(entity)
            options: dict[str, Any] = {"receive_mode": self._mode(request.mode)}
            if request.session_id is None:
                options["session_id"] = sdk().NEXT_AVAILABLE_SESSION
                if request.max_wait:
                    options["max_wait_time"] = request.max_wait
            else:
                options["session_id"] = request.session_id
            link = self._new_receiver(path, options)

            async def accept(receiver: Any) -> Any:
                await receiver.__aenter__()  # the SDK locks the session when it opens
                return receiver.session

            session = await link.run(accept, "accept session")
            lock = uuid.uuid4().hex
            self._sessions[lock] = link
            until = session.locked_until_utc
            return SessionInfo(session.session_id, lock, until and until.timestamp())
        if action == "release":
            released = self._sessions.pop(request.lock, None) if request.lock else None
            if released is not None:
                await released.aclose()
            return SessionInfo(request.session_id or "")
        link = self._receiver(
            entity, ReceiveRequest(session_id=request.session_id, session_lock=request.lock)
        )
        sid = request.session_id or ""
        if action == "renew":
            until = await link.run(lambda r: r.session.renew_lock(), "renew session lock")
            return SessionInfo(sid, request.lock, until.timestamp())
        if action == "get_state":
            state = await link.run(lambda r: r.session.get_state(), "get session state")
            return SessionInfo(sid, request.lock, state=None if state is None else bytes(state))
        if action == "set_state":
            await link.run(lambda r: r.session.set_state(request.state), "set session state")
            return SessionInfo(sid, request.lock, state=request.state)
        raise InvalidArgument(f"unknown session action {action!r}.")

    # -- data ------------------------------------------------------------------------

    async def send(
        self, entity: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        self._check()
        batch = [message_to_sdk(m) for m in messages]
        await self._sender(entity).run(lambda sender: sender.send_messages(batch), "send")

    async def schedule(self, entity: str, messages: Sequence[Message]) -> list[int]:
        self._check()
        groups: dict[Any, list[int]] = {}
        for index, message in enumerate(messages):
            if message.scheduled_enqueue_time is None:
                raise InvalidArgument("schedule needs messages with scheduled_enqueue_time set.")
            groups.setdefault(message.scheduled_enqueue_time, []).append(index)
        link = self._sender(entity)
        sequences: list[int] = [0] * len(messages)
        for at, indices in groups.items():
            batch = [message_to_sdk(messages[i]) for i in indices]

            async def schedule(sender: Any, batch: list[Any] = batch, at: Any = at) -> Any:
                return await sender.schedule_messages(batch, at)

            for index, sequence in zip(indices, await link.run(schedule, "schedule"), strict=True):
                sequences[index] = sequence
        return sequences

    async def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> None:
        self._check()
        seqs = list(sequence_numbers)
        await self._sender(entity).run(
            lambda sender: sender.cancel_scheduled_messages(seqs), "cancel_scheduled"
        )

    async def receive(self, entity: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        self._check()
        link = self._receiver(entity, request)
        path = str(parse_entity_path(entity, request.sub_queue))
        count = max(1, request.max_messages)
        if request.peek:
            start = max(1, request.from_sequence_number)
            got = await link.run(
                lambda r: r.peek_messages(max_message_count=count, sequence_number=start), "peek"
            )
            return [message_from_sdk(m, path, locked=False, delivered=False) for m in got]
        if request.sequence_numbers is not None:
            seqs = list(request.sequence_numbers)
            got = await link.run(
                lambda r: r.receive_deferred_messages(sequence_numbers=seqs), "receive_deferred"
            )
            return self._received(link, got, path, request.mode)
        loop = asyncio.get_running_loop()
        deadline = None if request.max_wait is None else loop.time() + request.max_wait
        while True:
            left = RECEIVE_SLICE if deadline is None else deadline - loop.time()
            wait = min(RECEIVE_SLICE, max(NO_WAIT, left))
            receive = functools.partial(_receive_some, count=count, wait=wait)
            got = await link.run(receive, "receive")
            if got or (deadline is not None and loop.time() + 1e-3 >= deadline):
                return self._received(link, got, path, request.mode)

    def _received(self, link: Link, got: list[Any], path: str, mode: str) -> list[ReceivedMessage]:
        locked = mode == "peek_lock"
        out = []
        for sdk_message in got:
            message = message_from_sdk(sdk_message, path, locked=locked)
            if locked and message.lock_token:
                self._remember(message.lock_token, link, sdk_message, path)
            out.append(message)
        return out

    def _remember(self, token: str, link: Link, sdk_message: Any, path: str) -> None:
        self._locks[token] = (link, sdk_message, path.lower())
        self._locks.move_to_end(token)
        while len(self._locks) > MAX_TRACKED_LOCKS:
            self._locks.popitem(last=False)
        # Forget the oldest locks once they expired (renewed ones moved to the end).
        now = _dt.datetime.now(_dt.UTC) - LOCK_GRACE
        while self._locks:
            oldest = next(iter(self._locks.values()))[1]
            until = oldest.locked_until_utc
            if until is None or until >= now:
                break
            self._locks.popitem(last=False)

    async def settle(self, entity: str, settlement: Settlement) -> list[float] | None:
        self._check()
        action = settlement.action
        path = str(parse_entity_path(entity, settlement.sub_queue)).lower()
        # A token given twice settles once, as the broker counts it (the second would
        # find the lock gone).
        # The settlements of one link run in one turn of it: between them, a long
        # receive on the same link (a syphon's poll) would otherwise take a slice of up
        # to RECEIVE_SLICE each, and a batch of 200 would outlast any operation timeout.
        by_link: dict[Link, list[tuple[str, Any]]] = {}
        for token in dict.fromkeys(settlement.lock_tokens):
            entry = self._locks.get(token)
            if entry is not None and entry[2] != path:
                # Another entity's lock: the broker of ``entity`` does not hold it.
                entry = None
            if entry is None:
                raise MessageLockLost(
                    f"The lock {token} is not held by this connection to {self.namespace!r}: "
                    "it expired, the message was settled, or another connection received it."
                )
            link, sdk_message, _ = entry
            by_link.setdefault(link, []).append((token, sdk_message))
        renewed: dict[str, float] = {}
        for link, items in by_link.items():
            done: list[str] = []

            async def each(receiver: Any, items: list[tuple[str, Any]] = items,
                           done: list[str] = done) -> list[Any]:
                results = []
                for token, sdk_message in items:
                    settle = settle_operation(action, sdk_message, settlement)
                    results.append(await settle(receiver))
                    done.append(token)
                return results

            try:
                results = await link.run(each, action)
            except BaseException as exc:
                if isinstance(exc, MessageLockLost) and len(done) < len(items):
                    self._locks.pop(items[len(done)][0], None)  # the one that failed
                self._forget(action, done)
                raise
            if action == "renew":
                for (token, _), result in zip(items, results, strict=True):
                    renewed[token] = result.timestamp()
                    self._locks.move_to_end(token)
            else:
                self._forget(action, done)
        if action == "renew":
            return [renewed[token] for token in settlement.lock_tokens]
        return None

    def _forget(self, action: str, tokens: list[str]) -> None:
        """The locks ``tokens`` were settled (a renewal keeps them)."""
        if action != "renew":
            for token in tokens:
                self._locks.pop(token, None)

    # -- management ------------------------------------------------------------------

    async def manage(self, request: ManagementRequest) -> Any:
        self._check()
        what = f"{request.action} {request.kind or 'entity'} {request.path!r}"
        try:
            result = await self._manage(request)
        except ServiceBusError:
            raise
        except Exception as exc:
            raise self._reached.error(exc, what) from exc
        self._reached.yes = True
        return result


async def _receive_some(receiver: Any, *, count: int, wait: float) -> list[Any]:
    """One receive on an SDK receiver: up to ``count`` messages within ``wait`` s."""
    got: list[Any] = await receiver.receive_messages(max_message_count=count, max_wait_time=wait)
    return got
