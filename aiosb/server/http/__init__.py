"""The HTTP plane of ``aiosb serve``: embedded emulator namespaces served over HTTP.
:func:`serve` runs it alone in the running loop (tests that need only HTTP);
:func:`aiosb.server.serve` assembles the whole server around it (AMQP, the explorer).

Every namespace lives under a path prefix: namespace ``contoso`` is
``http://HOST:PORT/contoso`` and is created on first use. The server speaks the
documented Service Bus REST protocol, so that one client code path talks both to a real
namespace and to this emulator, and many processes share one emulator:

==========================================================  ==============================
``POST   /{ns}/{entity}/messages``                           send one message (body,
                                                             ``BrokerProperties`` header,
                                                             custom properties as headers)
                                                             or a batch (content type
                                                             ``application/vnd.microsoft.
                                                             servicebus.json``): ``201``
``POST   /{ns}/{entity}/messages/head?timeout=S``            peek-lock: ``201`` with the
                                                             message, ``Location`` and
                                                             ``BrokerProperties``; ``204``
                                                             when none came within S s
``DELETE /{ns}/{entity}/messages/head?timeout=S``            receive and delete: ``200``
                                                             or ``204``
``PUT    /{ns}/{entity}/messages/{seq|id}/{lock}``           unlock (abandon): ``200``
``DELETE /{ns}/{entity}/messages/{seq|id}/{lock}``           complete: ``200``
``POST   /{ns}/{entity}/messages/{seq|id}/{lock}``           renew the lock: ``200``
``PUT    /{ns}/{path}`` (Atom entry; ``If-Match: *``          create (``201``) or update
to update)                                                   (``200``) a queue, topic or
                                                             subscription
``GET    /{ns}/{path}``, ``DELETE /{ns}/{path}``              read (with counts) or delete
``GET    /{ns}/$Resources/queues`` (or ``topics``),           list, as Atom feeds, in name
``GET    /{ns}/{topic}/subscriptions``                        order, ``$top`` (default 100)
                                                             from ``$skip`` (default 0)
==========================================================  ==============================

A subscription is ``{topic}/subscriptions/{name}``; a dead-letter queue is the entity
path followed by ``/$DeadLetterQueue``. Status codes are those the REST protocol
documents: ``410`` for an entity that does not exist in data operations, ``404`` for a
lock that is not held (or a missing entity in management), ``409`` for an entity that
exists, ``413`` for a message or batch over the size limit, ``403`` for a full entity,
``401`` for a refused signature, ``400`` for bad input, ``503`` for an unavailable
entity or a busy server, ``500`` for a transient failure. Every error body is
``<Error><Code/><Detail/></Error>`` with a sentence that says what is wrong, and the
``x-aiosb-error`` header names the exact :mod:`aiosb.errors` class (``x-aiosb-retryable``
says whether to try again), so aiosb's client raises what the embedded emulator raises.

**aiosb extensions** (used by aiosb's HTTP transport on ``http://`` URLs only; a real
namespace has none of them). The REST protocol has no peek, defer, dead-letter,
receive of deferred messages, scheduling with sequence numbers, cancel of scheduled
messages, batch receive or batch settlement, and it loses precision (instants to the
second) and property types. These take and answer JSON with every field of
:class:`~aiosb.Message`, exact and typed (the encodings of :mod:`aiosb.wire.aiosb_json`),
in one of two shapes:

* ``"messages"``: a list with one object per message, ``{"body": BASE64, "message_id":
  ..., "time_to_live": MICROSECONDS, "scheduled_enqueue_time": ISO_8601, "properties":
  {...}}``, null fields left out;
* ``"batch"``: the batch encoding, one object of columns (what aiosb's client sends and
  asks for: per-message objects cost most of a batch's time). ``body`` is every body
  joined, in base64, and ``body_sizes`` the length of each, so also the number of
  messages N. Every other field is a column: absent when every message has the
  default (null; for a received message's ``sequence_number``, ``enqueued_timestamp``,
  ``delivery_count``, ``state`` and ``entity_path``: 0, 0.0, 0, ``"active"`` and
  ``""``), one value that every
  message has, or a list of N values (null for none). ``properties`` is a list of N
  objects or nulls. Broker times are UTC epoch seconds. For example, three messages
  with the same subject: ``{"body": "YWJhYmFi", "body_sizes": [2, 2, 2], "subject": "s",
  "properties": [{"i": 0}, {"i": 1}, {"i": 2}]}``.

A batch may travel **framed** instead (:mod:`aiosb.wire.frames`): the body of the
request or answer is the JSON with no ``body`` in its batch, then the bodies, raw, one
after another; its content type is ``application/vnd.aiosb.frame`` and the header
``Aiosb-Json-Length`` gives the JSON's length in bytes. The server takes framed sends and
schedules, says so on every ``$aiosb`` answer (``Aiosb-Takes-Frames: 1``), and frames a
batch receive's answer when the request's ``Accept`` names the frame type; aiosb's
client frames while the answers say so, and sends a framed batch refused with 400 once
more as JSON. Base64 is a third larger than the
bytes and costs more than the rest of a 1 KB message's encoding.

Property values are JSON where JSON has the type, else tagged: ``{"bytes": BASE64}``,
``{"datetime": ISO_8601}``, ``{"timedelta": MICROSECONDS}``, ``{"uuid": TEXT}``,
``{"float": "nan"|"inf"|"-inf"}``; a typed value of :mod:`aiosb.values` (a property of
an AMQP type no plain value names, as an AMQP client sent it) under its AMQP type's name,
``{"long": 1}``, ``{"ubyte": 200}``, ``{"symbol": TEXT}``, ``{"char": TEXT}``,
``{"float32": NUMBER|"nan"|...}``, ``{"decimal128": BASE64}`` ... (#47). An aiosb
client older than these tags refuses such a value with a sentence. The operations:

* ``POST /{ns}/{entity}/$aiosb/send`` ``{"messages": [...], "transaction": false}`` or
  ``{"batch": {...}, ...}`` (``201``; a transaction is held to PT-16 to PT-18);
* ``POST /{ns}/{entity}/$aiosb/schedule`` ``{"messages": [...]}`` or ``{"batch": {...}}``
  (``201``, ``{"sequence_numbers": [...]}``);
* ``POST /{ns}/{entity}/$aiosb/cancel`` ``{"sequence_numbers": [...]}``;
* ``POST /{ns}/{entity}/$aiosb/receive`` with the fields of
  :class:`~aiosb.transport.ReceiveRequest` (``{"messages": [...]}``), and ``"batch":
  true`` for the answer ``{"batch": {...}}``;
* ``POST /{ns}/{entity}/$aiosb/settle`` with the fields of
  :class:`~aiosb.transport.Settlement` (``{"locked_until": [...] | null}``);
* the request header ``x-aiosb-timeout: SECONDS``: the client's budget for the request;
  the server gives the operation up when it runs out (on top of a receive's wait), so
  that an operation its client timed out on has no effect later;
* the header ``x-aiosb-kind: queue|topic|subscription`` on management ``GET`` and
  ``DELETE``: act only if the entity is of that kind;
* ``DeferredMessageCount`` in an entity's ``CountDetails``.

Sessions are not part of the REST protocol, and the server does not offer them.

**Fault injection** (the API of :class:`~aiosb.emulator.Faults`, over HTTP):
``POST /{ns}/$faults`` with JSON ``{"entity": ..., "kind": ..., "operations": [...]}``
(or ``{"entity": ..., "kind": "delay", "seconds": S}``, or ``{"entity": ...,
"fragment": INDEX}`` where the emulator has ``fail_fragment``) answers ``201`` with
``{"id": ...}``; ``GET /{ns}/$faults`` lists the active faults; ``DELETE
/{ns}/$faults`` heals all, ``DELETE /{ns}/$faults/{id}`` heals one.

**Reset** (a test suite sharing one server, the ``aiosb_server`` fixture): ``POST
/{ns}/$reset`` heals the namespace's faults and deletes its queues and topics (their
subscriptions, messages and sessions with them); the root namespace then gets what
``prepare`` made at start (``aiosb serve --config``'s entities) again. It answers
``{"deleted": N}`` and needs the Manage right.

**The Service Bus Explorer** (``aiosb serve``, or ``serve(sites=[Explorer])``): a web page
at ``/explorer/``, signed in to with a key of the server's, that shows every namespace's
entities with live counts and lets a person peek, send, resubmit, purge, manage rules
and inject faults within the key's rights (:mod:`aiosb.server.explorer`).

**Authentication**: every request carries a Service Bus shared access signature
(``Authorization: SharedAccessSignature sr=&sig=&se=&skn=``) signed with the server's
key; the signature is checked with HMAC-SHA256 in constant time, and the expiry and the
resource scope (``sr`` must be the requested path or one of its parents) are checked
too. Without ``--key`` the server uses the well-known development key
"""



from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from ... import emulator
from ...auth import DEV_KEY, DEV_KEY_NAME, SasCredential
from ...emulator import Journal
from ..listener import Listener, Route, carried_idle
from ._app import BODY_SECONDS, MAX_BODY, EmulatorServer, Handler, KeyTable, MakeSite, Site
from ._hosts import AllowedHosts
from ._requests import HTTP_LOG, MAX_WAIT, PAGE, right_needed

_right_needed = right_needed  # the name the tests knew

__all__ = [
    "BODY_SECONDS",
    "DEV_KEY",
    "DEV_KEY_NAME",
    "MAX_BODY",
    "MAX_WAIT",
    "PAGE",
    "REQUEST_FIRST_BYTES",
    "SHUTDOWN_SECONDS",
    "EmulatorServer",
    "Handler",
    "KeyTable",
    "MakeSite",
    "ServedEmulator",
    "Site",
    "serve",
]

#: A connection that sends no complete request for this long is closed (idle keep-alive
#: connections, a connection that never sends one, and headers trickling in): HTTP's
#: open deadline, after the listener's (:mod:`aiosb.server.listener`).
IDLE_SECONDS = 30.0
#: When the server stops, seconds a request in progress is given to end; every
#: connection is closed after that, whatever it waits for (a client that never reads its
#: answer holds the stop no longer).
SHUTDOWN_SECONDS = 2.0
#: How an HTTP connection is recognised on a port other protocols share (the AMQP
#: port, for the management API: :class:`aiosb.server.listener.FirstBytes`): the first
#: letter of a method (GET, PUT, POST, PATCH, DELETE, HEAD, OPTIONS).
REQUEST_FIRST_BYTES = frozenset(b"GPDHO")


@dataclass(frozen=True, slots=True)
class ServedEmulator:
    """A running server (what :func:`serve` gives).

    Attributes:
        url: The base URL, e.g. ``http://127.0.0.1:5380``; namespace ``contoso`` is at
            ``{url}/contoso``.
        key_name: The key name requests are signed with.
        key: The key.
        listener: The listener the HTTP port is on (:mod:`aiosb.server.listener`), whose one
            connection budget other ports of the same server share.
        route: The HTTP server as a route of the listener: another port that takes a
            connection meant for this server (the AMQP port, for clients that speak
            HTTPS there) hands it over (registered with :data:`REQUEST_FIRST_BYTES`).
        journal: The durable journal (``data_dir`` given), which another front end of
            the same broker (AMQP) commits to as well; ``None`` in memory.
    """

    url: str
    key_name: str
    key: str
    listener: Listener = field(repr=False, compare=False)
    route: Route = field(repr=False, compare=False)
    journal: Journal | None = field(default=None, repr=False, compare=False)

    @property
    def credential(self) -> SasCredential:
        """A credential that signs requests to this server."""
        return SasCredential(self.key_name, self.key)

    def namespace_url(self, name: str) -> str:
        """The URL to ``aiosb.connect`` to for namespace ``name``."""
        return f"{self.url}/{name}"

    def connection_string(self, name: str) -> str:
        """A Service Bus style connection string for namespace ``name``."""
        return (
            f"Endpoint={self.url}/{name}/;SharedAccessKeyName={self.key_name};"
            f"SharedAccessKey={self.key}"
        )


def _http_idle(handler: asyncio.BaseProtocol) -> bool:
    """An HTTP connection with no request in progress: the listener may close it to
    make room. A WebSocket is a request in progress for as long as it is open: one that
    carries a protocol is as idle as that protocol says (AMQP over WebSockets: as a raw
    AMQP connection, :func:`aiosb.server.listener.carrying`); and one whose writes stall is
    idle after :data:`aiosb.server.listener.STALLED_SECONDS` (the listener looks)."""
    carried = carried_idle(handler)
    if carried is not None:
        return carried
    return not getattr(handler, "_request_in_progress", False)


@contextlib.asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    key_name: str = DEV_KEY_NAME,
    key: str = DEV_KEY,
    ready: Callable[[ServedEmulator], None] | None = None,
    data_dir: str | Path | None = None,
    fsync: bool = False,
    keys: Mapping[str, tuple[str, Iterable[str]]] | None = None,
    log_requests: bool = False,
    metrics: bool = False,
    ssl_context: ssl.SSLContext | None = None,
    root: str | None = None,
    routes: Mapping[str, Handler] | None = None,
    also_key: str | None = None,
    prepare: Callable[[], Awaitable[None]] | None = None,
    sites: Iterable[MakeSite] = (),
    allow_hosts: Iterable[str] = (),
    listener: Listener | None = None,
    free_if_taken: bool = False,
) -> AsyncIterator[ServedEmulator]:
    """Serve the emulator over HTTP on the running loop, for the ``async with`` block.

    Args:
        host: The interface to listen on.
        port: The port; ``0`` picks a free one.
        key_name: The shared access key name requests must be signed with.
        key: The key (default: the well-known development key :data:`DEV_KEY`).
        ready: Called with the running server once it listens.
        keys: More keys, ``{name: (key, rights)}`` with rights among ``Manage``,
            ``Send``, ``Listen`` (``key_name``/``key`` has all three).
        data_dir: Durable mode: keep every namespace in a SQLite database there, loaded
            at start-up; every acknowledged send and settlement is on disk before its
            answer. Without it, everything is in memory.
        fsync: Durable mode: flush each commit to the disk before answering
            (SQLite ``synchronous=FULL``), so what is acknowledged survives the machine
            crashing; by default it survives the server process being killed (SIGKILL),
            not an operating-system crash or power loss (``synchronous=NORMAL``).
        log_requests: Log a line per request (client, method, path, status, time) to
            the ``aiosb.server.requests`` logger, at INFO.
        metrics: Serve Prometheus metrics at ``GET /metrics`` (needs
            ``prometheus-client``: ``pip install aiosb[metrics]``); a namespace called
            ``metrics`` is then out of reach over HTTP.
        ssl_context: Serve HTTPS with it (the official administration clients insist
            on HTTPS).
        root: Serve this namespace at the root, as a namespace's own host does
            (``/orders`` is its queue ``orders``), instead of naming the namespace in
            each path's first segment (what the official clients need: they address
            entities, not namespaces).
        routes: More GET handlers by path, before the server's own (``aiosb serve``
            serves AMQP over WebSockets at ``/$servicebus/websocket`` so).
        also_key: Another secret ``key_name`` signs with (``aiosb serve
            --microsoft-emulator``: Microsoft's documented development key).
        prepare: Awaited once the namespaces are loaded, before the server listens
            (``aiosb serve --config`` makes the file's entities so); what it raises
            stops the server before it listens. Awaited again after ``POST
            /{root}/$reset`` (the root namespace emptied, for a test suite).
        sites: Served beside the REST plane, each made with the server's keys,
            namespaces and journal (:class:`MakeSite`): ``aiosb serve`` serves the
            Service Bus Explorer, a web page signed in to with a key of the server's, so
            at ``/explorer/`` (``sites=[aiosb.server.explorer.Explorer]``).
        allow_hosts: Names the server answers to besides ``localhost``, IP addresses and
            ``host`` (when it is a name): a request with any other ``Host`` is answered
            421 before anything else, on every route (DNS rebinding; ``aiosb serve
            --allow-host``; :mod:`._hosts`).
        listener: The listener to open the port on (:mod:`aiosb.server.listener`: its
            deadlines, and one connection budget for every port it has); by default one
            of its own, which other ports of the server may share (``listener`` of what
            this yields).
        free_if_taken: If ``port`` is taken by another process, listen on a free one
            instead (a default the user did not choose; the URL says which).

    Yields:
        A :class:`ServedEmulator` with the bound URL and the credential.
    """
    journal = None
    if data_dir is not None:
        journal = Journal(data_dir, fsync=fsync)
        await journal.open()
        try:
            await journal.load()
            emulator.use_journal(journal)
        except BaseException:
            await journal.aclose()
            raise
    if prepare is not None:
        try:
            await prepare()
            if journal is not None:
                await journal.commit()
        except BaseException:
            if journal is not None:
                emulator.use_journal(None)
                await journal.aclose()
            raise
    server = EmulatorServer(key_name=key_name, key=key, journal=journal, keys=keys,
                            log_requests=log_requests, metrics=metrics, root=root,
                            routes=routes, also_key=also_key, sites=sites,
                            hosts=AllowedHosts(host, allow_hosts), remake=prepare)
    # handler_cancellation: a client that hangs up (its own timeout) cancels the
    # operation it asked for, so that a long poll does not lock messages for nobody.
    runner = web.AppRunner(
        server.app(), handler_cancellation=True, access_log=None, logger=HTTP_LOG,
        keepalive_timeout=IDLE_SECONDS, shutdown_timeout=SHUTDOWN_SECONDS,
    )
    await runner.setup()
    server.open_connections = lambda: len(runner.server.connections) if runner.server else 0
    listener = Listener() if listener is None else listener
    handlers = runner.server
    assert handlers is not None
    route = Route(handlers, _http_idle)
    opened = None
    try:
        opened = await listener.open(host, port, lambda _first: route, tls=ssl_context,
                                     free_if_taken=free_if_taken)
        bound = opened.number
        # port 0 on a name of two addresses binds each to a port of its own
        server.ports = opened.numbers
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if ssl_context is not None else "http"
        served = ServedEmulator(f"{scheme}://{shown}:{bound}", key_name, key, listener,
                                route, journal)
        if ready is not None:
            ready(served)
        yield served
    finally:
        if opened is not None:
            await opened.stop_accepting()
        # requests in progress are given SHUTDOWN_SECONDS; then every connection is
        # closed, whatever it waits for (a client that reads nothing holds no stop)
        cleanup = asyncio.ensure_future(runner.cleanup())
        try:
            await asyncio.wait([cleanup], timeout=SHUTDOWN_SECONDS)
        finally:
            if opened is not None:
                await opened.aclose()
            await cleanup
        if journal is not None:
            emulator.use_journal(None)
            await journal.aclose()
