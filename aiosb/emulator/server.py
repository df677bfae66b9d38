"""The emulator server: embedded emulator namespaces served over HTTP (``aiosb serve``).

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

Property values are JSON where JSON has the type, else tagged: ``{"bytes": BASE64}``,
``{"datetime": ISO_8601}``, ``{"timedelta": MICROSECONDS}``, ``{"uuid": TEXT}``,
``{"float": "nan"|"inf"|"-inf"}``. The operations:

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

**Authentication**: every request carries a Service Bus shared access signature
(``Authorization: SharedAccessSignature sr=&sig=&se=&skn=``) signed with the server's
key; the signature is checked with HMAC-SHA256 in constant time, and the expiry and the
resource scope (``sr`` must be the requested path or one of its parents) are checked
too. Without ``--key`` the server uses the well-known development key
:data:`DEV_KEY`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web

from .. import emulator
from ..auth import DEV_KEY, DEV_KEY_NAME, RIGHTS, SasChecker, SasCredential
from ..entities import DEAD_LETTER_SUFFIX, parse_entity_path
from ..errors import (
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
    MessageNotFound,
    MessageSizeExceeded,
    OperationTimeout,
    ServiceBusError,
)
from ..message import Message, ReceivedMessage, property_name_ok
from ..protocol import (
    MAX_RECEIVE_MESSAGES,
    MAX_RECEIVE_WAIT,
    ManagementRequest,
    ReceiveRequest,
    Settlement,
)
from ..transport.memory import MemoryTransport
from ..wire import aiosb_json as _json
from ..wire import atom as _atom
from ..wire import rest as _rest
from ..wire import status as _status
from ._durable import Journal

__all__ = ["DEV_KEY", "DEV_KEY_NAME", "EmulatorServer", "ServedEmulator", "serve"]

log = logging.getLogger("aiosb.server")

#: The largest request body: a batch at the premium limit, base64-encoded, with room.
MAX_BODY = 4 * 1024 * 1024
#: The longest a receive may wait, in seconds.
MAX_WAIT = MAX_RECEIVE_WAIT
#: A connection that sends no complete request for this long is closed (idle keep-alive
#: connections, and headers trickling in).
IDLE_SECONDS = 30.0
#: How long a signed request's body may take to arrive.
BODY_SECONDS = 30.0
#: File descriptors kept free for everything but client connections (the durable
#: store, logs, the listening socket).
_FD_RESERVE = 64
PAGE = 100  # entries of a listing, unless $top asks for others (as Service Bus)
MAX_PAGE = 1000
_DEFAULT_WAIT = 60.0
_MAX_SEGMENT = 512


@dataclass(frozen=True, slots=True)
class _Route:
    namespace: str
    segments: tuple[str, ...]  # decoded, below the namespace
    path: str = field(init=False)  # what a signature's scope covers

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "path", "/" + "/".join((self.namespace, *self.segments)).lower()
        )


@functools.lru_cache(maxsize=1024)  # clients use the same few paths over and over
def _split(raw_path: str) -> _Route:
    """Decode the request path into namespace and segments, refusing path tricks."""
    path = raw_path.split("?", 1)[0]
    if not path.startswith("/"):
        raise InvalidArgument("the request path must start with '/'.")
    parts = path[1:].split("/") if path != "/" else []
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing slash is harmless
    segments = []
    for part in parts:
        try:
            text = urllib.parse.unquote(part, errors="strict")
        except UnicodeDecodeError:
            raise InvalidArgument(f"path segment {part[:60]!r} is not valid UTF-8.") from None
        if text in ("", ".", "..") or len(text) > _MAX_SEGMENT:
            raise InvalidArgument(
                f"path segment {text[:60]!r} is not allowed: entity paths have no empty, "
                f"'.' or '..' segments and no segment over {_MAX_SEGMENT} characters."
            )
        if any(c in text for c in "/\\") or not text.isprintable():
            raise InvalidArgument(
                f"path segment {text[:60]!r} is not allowed: no encoded slashes, "
                "backslashes or control characters."
            )
        segments.append(text)
    if not segments:
        raise InvalidArgument(
            "no namespace in the path: use /{namespace}/{entity}/messages and the like."
        )
    return _Route(segments[0], tuple(segments[1:]))


def _right_needed(method: str, segs: tuple[str, ...]) -> str:
    """The right a request needs: Send to send, Listen to receive and settle, Manage for
    management and fault injection (what the routing in ``_route`` does)."""
    if segs[:1] == ("$faults",):  # routed before anything else, whatever follows
        return "Manage"
    if "$aiosb" in segs and segs[-1] in ("send", "schedule", "cancel"):
        return "Send"
    if "$aiosb" in segs:
        return "Listen"
    if segs and segs[-1] == "messages" and len(segs) > 1:
        return "Send"
    if (segs[-2:] == ("messages", "head") and len(segs) > 2) or (
        len(segs) > 3 and segs[-3] == "messages"
    ):
        return "Listen"
    return "Manage"


def _error_response(exc: ServiceBusError, status: int | None = None) -> web.Response:
    status = status or _status.status_for(exc)
    body = (
        f"<Error><Code>{status}</Code><Detail>{escape(exc.message)}</Detail></Error>"
    ).encode()
    return web.Response(
        status=status,
        body=body,
        content_type="application/xml",
        charset="utf-8",
        headers={
            _status.ERROR_HEADER: type(exc).__name__,
            _status.RETRYABLE_HEADER: "true" if exc.retryable else "false",
        },
    )


#: The longest header line aiohttp's client (and most others) will read.
_MAX_HEADER_LINE = 8_000


def _rest_headers(msg: ReceivedMessage, *, locked: bool) -> dict[str, str]:
    """The headers a REST receive answers with, every one checked writable.

    Raises:
        InvalidArgument: Something of the message cannot be an HTTP header (checked
            before the message is deleted, never after).
    """
    if not locked:
        msg.lock_token = None
        msg.locked_until_timestamp = None
    headers = {
        "BrokerProperties": json.dumps(_rest.received_broker_properties(msg)),
        "Content-Type": msg.content_type or "application/octet-stream",
    }
    for name, value in msg.application_properties.items():
        if name.lower() in _rest.NOT_PROPERTIES:
            continue
        if not property_name_ok(name):
            raise InvalidArgument(
                f"application property {name!r} cannot be an HTTP header name; receive "
                "this message with another protocol."
            )
        try:
            headers[name] = _rest.custom_value(name, value)
        except InvalidArgument:  # a type REST cannot carry: its text, quoted
            headers[name] = json.dumps(str(value))
    if msg.dead_letter_reason is not None:
        headers["DeadLetterReason"] = json.dumps(msg.dead_letter_reason)
    if msg.dead_letter_error_description is not None:
        headers["DeadLetterErrorDescription"] = json.dumps(msg.dead_letter_error_description)
    for name, value in headers.items():
        if len(name) + len(value) > _MAX_HEADER_LINE:
            raise InvalidArgument(
                f"the header {name!r} of this message would be {len(value)} characters, "
                f"over the {_MAX_HEADER_LINE} an HTTP client reads; receive this message "
                "with another protocol."
            )
    content_type = headers["Content-Type"]
    if not content_type.isprintable() or not content_type.isascii():
        raise InvalidArgument(
            f"content type {content_type!r} cannot be an HTTP header; receive this message "
            "with another protocol."
        )
    return headers


def _json_body(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"the body is not valid JSON: {str(exc)[:120]}.") from None


def _object(data: bytes, allowed: dict[str, Any]) -> dict[str, Any]:
    """A JSON object whose keys are all in ``allowed`` (name -> default)."""
    value = _json_body(data)
    if not isinstance(value, dict):
        raise InvalidArgument("the body must be a JSON object.")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise InvalidArgument(
            f"unknown field(s) {', '.join(unknown)[:200]}; known: {', '.join(sorted(allowed))}."
        )
    return {**allowed, **value}


def _batch_response(data: dict[str, Any], status: int = 200) -> web.Response:
    """A JSON answer of the batch encoding's kind (see :func:`aiosb.transport._json.dumps`)."""
    return web.Response(status=status, body=_json.dumps(data), content_type="application/json")


def _int(name: str, value: Any, low: int = 0, high: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{name} is {value!r:.60}; it must be a whole number from "
                              f"{low} to {high}.")
    return value


def _seconds(name: str, value: Any, high: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InvalidArgument(f"{name} is {value[:40]!r}; it must be seconds.") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name} is {value!r:.60}; it must be seconds.")
    if not math.isfinite(value) or not 0 <= value <= high:
        raise InvalidArgument(f"{name} is {value!r}; it must be between 0 and {high:g} seconds.")
    return float(value)


def _page(request: web.Request) -> slice:
    """The page of a listing that ``$skip`` and ``$top`` ask for: as Service Bus, at
    most :data:`PAGE` entries unless ``$top`` says otherwise."""
    skip = _query_int(request, "$skip", 0, 0, 2**31 - 1)
    top = _query_int(request, "$top", PAGE, 1, MAX_PAGE)
    return slice(skip, skip + top)


def _query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    # (at most 12 digits: int() refuses thousands of them with a ValueError, a 500)
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12) or not low <= int(raw) <= high:
        raise InvalidArgument(f"{name} is {raw[:40]!r}; use a whole number from {low} to {high}.")
    return int(raw)


def _str_or_none(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, not {value!r:.60}.")
    return value


def _messages(payload: dict[str, Any]) -> list[Message]:
    """The messages of a send or schedule: ``batch`` (the batch encoding) or
    ``messages`` (one object per message), exactly one of them."""
    items, batch = payload["messages"], payload["batch"]
    if (items is None) == (batch is None):
        raise InvalidArgument("give the messages as either messages or batch (one of them).")
    if batch is not None:
        return _json.decode_batch(batch)
    if not isinstance(items, list) or not items:
        raise InvalidArgument("messages must be a non-empty list.")
    return [_json.decode_message(item) for item in items]


class EmulatorServer:
    """The aiohttp application serving every emulator namespace of this process.

    Args:
        key_name: The shared access key name requests must be signed with.
        key: The key (:data:`DEV_KEY` by default).

    Use :func:`serve` to run it; :meth:`app` gives the bare application.
    """

    def __init__(
        self,
        *,
        key_name: str = DEV_KEY_NAME,
        key: str = DEV_KEY,
        journal: Journal | None = None,
        keys: Mapping[str, tuple[str, Iterable[str]]] | None = None,
    ) -> None:
        SasCredential(key_name, key)  # validates both
        table = {key_name: (key, frozenset(RIGHTS))}
        for name, (secret, rights) in (keys or {}).items():
            SasCredential(name, secret)
            given = set(rights)
            unknown = sorted(given - set(RIGHTS))
            if unknown or not given:
                raise InvalidArgument(
                    f"key {name!r} has rights {sorted(given)}; give some of "
                    f"{', '.join(RIGHTS)}."
                )
            if name in table:
                raise InvalidArgument(f"the key name {name!r} is given twice.")
            table[name] = (secret, frozenset(RIGHTS) if "Manage" in given else frozenset(given))
        self._auth = SasChecker(table)
        self._journal = journal
        self._transports: dict[str, MemoryTransport] = {}
        self._opening: dict[str, asyncio.Future[MemoryTransport]] = {}

    def app(self) -> web.Application:
        """The aiohttp application (one catch-all route; the server parses paths itself)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, _app: web.Application) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Detach from every namespace served (they stay in :mod:`aiosb.emulator`)."""
        transports, self._transports = self._transports, {}
        for transport in transports.values():
            await transport.aclose()

    async def _namespace(self, name: str) -> MemoryTransport:
        key = name.lower()
        transport = self._transports.get(key)
        if transport is None:
            transport = MemoryTransport(name)  # validates the name
            await transport.open()
            self._transports[key] = transport
        return transport

    # -- dispatch ---------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            route = _split(request.raw_path)
            headers = request.headers
            self._auth.check(
                headers.get("Authorization") or headers.get("ServiceBusAuthorization"),
                request.host,
                route.path,
                _right_needed(request.method, route.segments),
            )
            if request.can_read_body:
                try:
                    async with asyncio.timeout(BODY_SECONDS):
                        await request.read()  # kept: handlers read it again at no cost
                except TimeoutError:
                    raise InvalidArgument(
                        f"the request body did not arrive within {BODY_SECONDS:g} s."
                    ) from None
            budget = request.headers.get(_status.TIMEOUT_HEADER)
            limit = None if budget is None else _seconds(_status.TIMEOUT_HEADER, budget, MAX_WAIT)
            response = await self._route(request, route, limit)
            if self._journal is not None:  # durable mode: on disk before the answer
                await self._journal.commit()
            return response
        except ServiceBusError as exc:
            return _error_response(exc)
        except web.HTTPException as exc:  # aiohttp's own refusals (body too large ...)
            detail = f"{exc.reason}: {exc.text or ''}".strip(": ")
            if exc.status == 413:
                return _error_response(MessageSizeExceeded(
                    f"the request body is over the server's {MAX_BODY} byte limit ({detail})."
                ))
            return _error_response(InvalidArgument(detail))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: say so, never crash the server
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return _error_response(ServiceBusError("internal error in the emulator server."))

    async def _route(
        self, request: web.Request, route: _Route, limit: float | None
    ) -> web.StreamResponse:
        segs = route.segments
        method = request.method
        if segs and segs[0] == "$faults":
            return await self._faults(request, route)
        ns = await self._namespace(route.namespace)
        if not segs:
            raise InvalidArgument(
                f"nothing to do at /{route.namespace}: address an entity, e.g. "
                f"/{route.namespace}/orders/messages."
            )
        if "$aiosb" in segs:
            at = segs.index("$aiosb")
            if at == 0 or len(segs) != at + 2 or method != "POST":
                raise InvalidArgument(
                    "aiosb extensions are POST /{namespace}/{entity}/$aiosb/{operation}."
                )
            path = "/".join(segs[:at])
            return await self._extension(request, ns, path, segs[-1], limit)
        if segs[-1] == "messages" and len(segs) > 1:
            if method != "POST":
                raise InvalidOperation(f"{method} is not allowed on .../messages; POST sends.")
            return await self._bounded(limit, self._send(request, ns, "/".join(segs[:-1])))
        if segs[-2:] == ("messages", "head") and len(segs) > 2:
            path = "/".join(segs[:-2])
            if method not in ("POST", "DELETE"):
                raise InvalidOperation(
                    f"{method} is not allowed on .../messages/head; POST peek-locks, "
                    "DELETE receives and deletes."
                )
            return await self._receive_head(request, ns, route, path, limit)
        if len(segs) > 3 and segs[-3] == "messages":
            path = "/".join(segs[:-3])
            return await self._bounded(limit, self._lock(request, ns, path, segs[-2], segs[-1]))
        try:
            return await self._bounded(limit, self._manage(request, ns, route))
        except EntityNotFound as exc:  # management answers 404 (data operations: 410)
            return _error_response(exc, 404)

    @staticmethod
    async def _bounded(limit: float | None, work: Awaitable[web.StreamResponse],
                       wait: float = 0.0) -> web.StreamResponse:
        if limit is None:
            return await work
        # A hair under the client's own deadline, so that the operation is given up
        # here first and a timed-out operation never takes effect later.
        try:
            async with asyncio.timeout(max(0.0, limit + wait - 1e-6)):
                return await work
        except TimeoutError:
            raise OperationTimeout(
                f"the operation did not finish within the client's {limit:g} s."
            ) from None

    # -- the REST data plane -------------------------------------------------------------

    async def _send(self, request: web.Request, ns: MemoryTransport, path: str
                    ) -> web.StreamResponse:
        body = await request.read()
        ctype = request.headers.get("Content-Type", "")
        if ctype.split(";")[0].strip().lower() == _rest.BATCH_CONTENT_TYPE:
            messages = self._batch(body)
        else:
            raw = request.headers.get("BrokerProperties")
            broker = None if raw is None else _json_body(raw.encode("utf-8", "surrogateescape"))
            props = {}
            for name, value in request.headers.items():
                lower = name.lower()
                if lower in _rest.NOT_PROPERTIES or lower.startswith(("x-ms-", "x-aiosb-")):
                    continue
                props[str(name)] = _rest.parse_custom_value(value)
            messages = [_rest.message_from_rest(broker, body, ctype or None, props)]
        await ns.send(path, messages)
        return web.Response(status=201)

    @staticmethod
    def _batch(body: bytes) -> list[Message]:
        items = _json_body(body)
        if not isinstance(items, list) or not items:
            raise InvalidArgument("a batch must be a non-empty JSON array of messages.")
        messages = []
        for item in items:
            if not isinstance(item, dict):
                raise InvalidArgument("each message of a batch must be a JSON object.")
            unknown = sorted(set(item) - {"Body", "BrokerProperties", "UserProperties"})
            if unknown:
                raise InvalidArgument(
                    f"unknown batch message field(s) {', '.join(unknown)[:200]}; known: "
                    "Body, BrokerProperties, UserProperties."
                )
            text = item.get("Body", "")
            if not isinstance(text, str):
                raise InvalidArgument("a batch message's Body must be a string.")
            user = item.get("UserProperties") or {}
            if not isinstance(user, dict) or not all(
                v is None or isinstance(v, (str, int, float, bool)) for v in user.values()
            ):
                raise InvalidArgument(
                    "UserProperties must be an object of strings, numbers and booleans."
                )
            messages.append(
                _rest.message_from_rest(item.get("BrokerProperties"), text.encode(), None, user)
            )
        return messages

    async def _receive_head(
        self, request: web.Request, ns: MemoryTransport, route: _Route, path: str,
        limit: float | None,
    ) -> web.StreamResponse:
        wait = _seconds("timeout", request.query.get("timeout", _DEFAULT_WAIT), MAX_WAIT)
        parsed = parse_entity_path(path)
        lock = request.method == "POST"
        # Receive-and-delete locks first and completes only once the answer is built:
        # a message the server cannot answer with is never deleted.
        receive = ReceiveRequest(
            mode="peek_lock",
            max_messages=1,
            max_wait=wait,
            sub_queue=parsed.sub_queue,
        )
        got = await self._bounded(limit, ns.receive(parsed.path, receive), wait)  # type: ignore[arg-type]
        if not got:
            return web.Response(status=204)
        msg: ReceivedMessage = got[0]  # type: ignore[index]
        token = msg.lock_token
        try:
            headers = _rest_headers(msg, locked=lock)
        except BaseException:
            settle = Settlement("abandon", [token], parsed.sub_queue)  # type: ignore[list-item]
            await ns.settle(parsed.path, settle)
            raise
        if lock:
            base = f"{request.scheme}://{request.host}/{urllib.parse.quote(route.namespace)}"
            where = urllib.parse.quote(path, safe="/$")
            headers["Location"] = f"{base}/{where}/messages/{msg.sequence_number}/{token}"
        else:
            settle = Settlement("complete", [token], parsed.sub_queue)  # type: ignore[list-item]
            await ns.settle(parsed.path, settle)
        return web.Response(status=201 if lock else 200, body=msg.body, headers=headers)

    async def _lock(
        self, request: web.Request, ns: MemoryTransport, path: str, message: str, token: str
    ) -> web.StreamResponse:
        actions = {"DELETE": "complete", "PUT": "abandon", "POST": "renew"}
        action = actions.get(request.method)
        if action is None:
            raise InvalidOperation(
                f"{request.method} is not allowed on a message lock: DELETE completes, "
                "PUT unlocks, POST renews."
            )
        parsed = parse_entity_path(path)
        settlement = Settlement(action, [token], parsed.sub_queue)  # type: ignore[arg-type]
        until = await ns.settle(parsed.path, settlement)
        headers = {}
        if until:
            headers["BrokerProperties"] = json.dumps({"LockedUntilUtc": _rest.http_date(until[0])})
            headers["x-aiosb-locked-until"] = repr(until[0])
        return web.Response(status=200, headers=headers)

    # -- aiosb extensions ------------------------------------------------------------

    async def _extension(
        self, request: web.Request, ns: MemoryTransport, path: str, op: str,
        limit: float | None,
    ) -> web.StreamResponse:
        body = await request.read()
        if op == "send":
            payload = _object(body, {"messages": None, "batch": None, "transaction": False})
            transaction = payload["transaction"]
            if not isinstance(transaction, bool):
                raise InvalidArgument(f"transaction must be true or false, not {transaction!r}.")
            await self._bounded(
                limit, ns.send(path, _messages(payload), transaction=transaction)
            )
            return web.Response(status=201)
        if op == "schedule":
            payload = _object(body, {"messages": None, "batch": None})
            messages = _messages(payload)
            if any(m.scheduled_enqueue_time is None for m in messages):
                raise InvalidArgument("every message to schedule needs scheduled_enqueue_time.")
            seqs = await self._bounded(limit, ns.schedule(path, messages))  # type: ignore[arg-type]
            return web.json_response({"sequence_numbers": seqs}, status=201)
        if op == "cancel":
            payload = _object(body, {"sequence_numbers": None})
            seqs = payload["sequence_numbers"]
            if not isinstance(seqs, list) or not seqs:
                raise InvalidArgument("sequence_numbers must be a non-empty list.")
            await self._bounded(
                limit, ns.cancel_scheduled(path, [_int("sequence number", s) for s in seqs])
            )
            return web.json_response({})
        if op == "receive":
            receive, batch = self._receive_request(body)
            # A receive that waits for ever is bounded by nothing but its client.
            bound = None if receive.max_wait is None else limit
            got = await self._bounded(
                bound, ns.receive(path, receive), receive.max_wait or 0.0  # type: ignore[arg-type]
            )
            if batch:
                return _batch_response({"batch": _json.encode_received_batch(got)})  # type: ignore[arg-type]
            return web.json_response(
                {"messages": [_json.encode_received(m) for m in got]}  # type: ignore[union-attr]
            )
        if op == "settle":
            settlement = self._settlement(body)
            until = await self._bounded(limit, ns.settle(path, settlement))  # type: ignore[arg-type]
            return web.json_response({"locked_until": until})
        raise InvalidArgument(
            f"unknown aiosb extension {op[:40]!r}; known: send, schedule, cancel, receive, "
            "settle."
        )

    @staticmethod
    def _receive_request(body: bytes) -> tuple[ReceiveRequest, bool]:
        """The receive asked for, and whether the answer is in the batch encoding."""
        fields = _object(
            body,
            {
                "mode": "peek_lock",
                "max_messages": 1,
                "max_wait": 0.0,
                "sub_queue": None,
                "peek": False,
                "from_sequence_number": 0,
                "sequence_numbers": None,
                "batch": False,
            },
        )
        if not isinstance(fields["batch"], bool):
            raise InvalidArgument("batch must be true or false.")
        if fields["mode"] not in ("peek_lock", "receive_and_delete"):
            raise InvalidArgument(f"mode is {fields['mode']!r:.40}; use peek_lock or "
                                  "receive_and_delete.")
        if fields["sub_queue"] not in (None, "deadletter"):
            raise InvalidArgument(f"sub_queue is {fields['sub_queue']!r:.40}; use null or "
                                  "'deadletter'.")
        if not isinstance(fields["peek"], bool):
            raise InvalidArgument("peek must be true or false.")
        seqs = fields["sequence_numbers"]
        if seqs is not None:
            if not isinstance(seqs, list) or len(seqs) > 10_000:
                raise InvalidArgument("sequence_numbers must be a list (at most 10,000).")
            seqs = [_int("sequence number", s) for s in seqs]
        wait = fields["max_wait"]
        request = ReceiveRequest(
            mode=fields["mode"],
            max_messages=_int("max_messages", fields["max_messages"], 1, MAX_RECEIVE_MESSAGES),
            max_wait=None if wait is None else _seconds("max_wait", wait, MAX_WAIT),
            sub_queue=fields["sub_queue"],
            peek=fields["peek"],
            from_sequence_number=_int("from_sequence_number", fields["from_sequence_number"]),
            sequence_numbers=seqs,
        )
        return request, fields["batch"]

    @staticmethod
    def _settlement(body: bytes) -> Settlement:
        fields = _object(
            body,
            {
                "action": None,
                "lock_tokens": None,
                "sub_queue": None,
                "reason": None,
                "description": None,
                "properties_to_modify": None,
            },
        )
        action = fields["action"]
        if action not in ("complete", "abandon", "dead_letter", "defer", "renew"):
            raise InvalidArgument(
                f"action is {action!r:.40}; use complete, abandon, dead_letter, defer or renew."
            )
        tokens = fields["lock_tokens"]
        if (
            not isinstance(tokens, list)
            or not tokens
            or len(tokens) > 10_000
            or not all(isinstance(t, str) and 0 < len(t) <= 256 for t in tokens)
        ):
            raise InvalidArgument("lock_tokens must be a non-empty list of lock token strings.")
        if fields["sub_queue"] not in (None, "deadletter"):
            raise InvalidArgument("sub_queue must be null or 'deadletter'.")
        props = fields["properties_to_modify"]
        if props is not None:
            if not isinstance(props, dict):
                raise InvalidArgument("properties_to_modify must be a JSON object.")
            props = {k: _json.decode_value(k, v) for k, v in props.items()}
        return Settlement(
            action,
            tokens,
            fields["sub_queue"],
            reason=_str_or_none("reason", fields["reason"]),
            description=_str_or_none("description", fields["description"]),
            properties_to_modify=props,
        )

    # -- management ----------------------------------------------------------------------

    async def _manage(
        self, request: web.Request, ns: MemoryTransport, route: _Route
    ) -> web.StreamResponse:
        segs = route.segments
        method = request.method
        url = f"{request.scheme}://{request.host}/{route.namespace}"
        if segs[0] == "$Resources":
            if method != "GET" or len(segs) != 2 or segs[1].lower() not in ("queues", "topics"):
                raise InvalidArgument("use GET /{namespace}/$Resources/queues (or topics).")
            kind = segs[1].lower()[:-1]
            page = _page(request)
            items = await ns.manage(ManagementRequest("list", kind))  # type: ignore[arg-type]
            return self._feed(kind, items[page], f"{url}/$Resources/{segs[1]}",
                              segs[1].capitalize(), url)
        path = "/".join(segs)
        if method == "GET" and segs[-1] == "subscriptions" and len(segs) > 1:
            topic = "/".join(segs[:-1])
            page = _page(request)
            items = await ns.manage(ManagementRequest("list", "subscription", topic))
            return self._feed("subscription", items[page], f"{url}/{path}",
                              "Subscriptions", url)
        parsed = parse_entity_path(path)
        if parsed.sub_queue is not None:
            raise InvalidOperation(
                f"{DEAD_LETTER_SUFFIX} is a sub-queue, not an entity: manage {parsed.path!r}."
            )
        if method == "PUT":
            return await self._put(request, ns, parsed, url)
        wanted = request.headers.get("x-aiosb-kind")
        if wanted is not None and wanted not in _atom.KINDS:
            raise InvalidArgument(f"x-aiosb-kind is {wanted[:40]!r}; use queue, topic or "
                                  "subscription.")
        kind = await self._kind_of(ns, parsed, wanted)
        if method == "GET":
            props = await ns.manage(ManagementRequest("get", kind, parsed.path))  # type: ignore[arg-type]
            counts = await ns.manage(ManagementRequest("runtime", None, parsed.path))
            return self._entry(kind, props, counts, f"{url}/{parsed.path}", parsed.path,
                               status=200)
        if method == "DELETE":
            await ns.manage(ManagementRequest("delete", kind, parsed.path))  # type: ignore[arg-type]
            return web.Response(status=200)
        raise InvalidOperation(f"{method} is not allowed on an entity: use PUT, GET or DELETE.")

    @staticmethod
    async def _kind_of(ns: MemoryTransport, parsed: Any, wanted: str | None) -> str:
        if parsed.subscription is not None:
            kind = "subscription"
            if wanted not in (None, kind):
                raise EntityNotFound(f"{parsed.path!r} is not a {wanted}.")
            return kind
        for kind in ("queue", "topic") if wanted is None else (wanted,):
            try:
                await ns.manage(ManagementRequest("get", kind, parsed.path))  # type: ignore[arg-type]
            except EntityNotFound:
                continue
            return kind
        what = wanted or "queue or topic"
        raise EntityNotFound(f"The {what} {parsed.path!r} does not exist in namespace "
                             f"{ns.namespace!r}.")

    async def _put(self, request: web.Request, ns: MemoryTransport, parsed: Any, url: str
                   ) -> web.StreamResponse:
        entry = _atom.parse_entry(await request.read())
        kind = entry.kind
        if (kind == "subscription") != (parsed.subscription is not None):
            raise InvalidArgument(
                f"a {kind} description was PUT at {parsed.path!r}; subscriptions live at "
                "{topic}/subscriptions/{name}, queues and topics anywhere else."
            )
        for readonly in ("created_at_utc", "updated_at_utc", "accessed_at_utc"):
            entry.fields.pop(readonly, None)
        if kind == "subscription":
            props = _atom.build_properties(kind, parsed.subscription, entry.fields,
                                           topic_name=parsed.entity)
        else:
            props = _atom.build_properties(kind, parsed.path, entry.fields)
        update = request.headers.get("If-Match") is not None
        if update and request.headers.get("If-Match", "").strip() != "*":
            raise InvalidArgument("If-Match must be '*' to update an entity.")
        action = "update" if update else "create"
        result = await ns.manage(ManagementRequest(action, kind, parsed.path, props))  # type: ignore[arg-type]
        return self._entry(kind, result, None, f"{url}/{parsed.path}", parsed.path,
                           status=200 if update else 201)

    @staticmethod
    def _entry(kind: str, props: Any, counts: Any, url: str, title: str, *, status: int
               ) -> web.Response:
        return web.Response(
            status=status,
            body=_atom.entry_xml(kind, props, counts, url, title),
            content_type="application/atom+xml",
            charset="utf-8",
        )

    @staticmethod
    def _feed(kind: str, items: list[Any], url: str, title: str, base: str) -> web.Response:
        entries = []
        for props in items:
            path = props.name if kind != "subscription" else (
                f"{props.topic_name}/subscriptions/{props.name}"
            )
            entries.append((kind, props, None, f"{base}/{path}", props.name))
        return web.Response(
            body=_atom.feed_xml(entries, url, title),
            content_type="application/atom+xml",
            charset="utf-8",
        )

    # -- faults --------------------------------------------------------------------------

    async def _faults(self, request: web.Request, route: _Route) -> web.StreamResponse:
        await self._namespace(route.namespace)  # validates the name; namespaces on first use
        faults = emulator.namespace(route.namespace).faults
        segs = route.segments
        method = request.method
        if len(segs) == 1 and method == "GET":
            return web.json_response(
                {
                    "faults": [
                        {
                            "id": f.id,
                            "entity": f.entity,
                            "kind": f.kind,
                            "operations": sorted(f.operations),
                            "seconds": f.seconds,
                        }
                        for f in faults.active
                    ]
                }
            )
        if len(segs) == 1 and method == "DELETE":
            return web.json_response({"healed": faults.heal()})
        if len(segs) == 2 and method == "DELETE":
            fault = faults.get(segs[1])
            if fault is None:
                raise MessageNotFound(f"no active fault with id {segs[1][:40]!r}.")
            fault.heal()
            return web.json_response({"healed": 1})
        if len(segs) != 1 or method != "POST":
            raise InvalidArgument(
                "faults: POST /{ns}/$faults injects, GET lists, DELETE /{ns}/$faults heals "
                "all, DELETE /{ns}/$faults/{id} heals one."
            )
        fields = _object(
            await request.read(),
            {"entity": None, "kind": "unavailable", "operations": None, "seconds": None,
             "fragment": None},
        )
        entity = _str_or_none("entity", fields["entity"])
        operations = fields["operations"]
        if operations is not None and (
            not isinstance(operations, list) or not all(isinstance(o, str) for o in operations)
        ):
            raise InvalidArgument("operations must be a list of 'send', 'receive', 'manage'.")
        ops = emulator.OPERATIONS if operations is None else operations
        if fields["fragment"] is not None:
            fail_fragment = getattr(faults, "fail_fragment", None)
            if fail_fragment is None:
                raise InvalidOperation("this emulator has no fragment faults (fail_fragment).")
            if entity is None:
                raise InvalidArgument("a fragment fault needs its entity.")
            fault = fail_fragment(entity, _int("fragment", fields["fragment"], 0, 1023))
        elif fields["kind"] == "delay":
            seconds = _seconds("seconds", fields["seconds"], 3600)
            fault = faults.delay(entity, seconds, operations=ops)
        else:
            if fields["seconds"] is not None:
                raise InvalidArgument("seconds is only for faults of kind 'delay'.")
            fault = faults.fail(entity, kind=fields["kind"], operations=ops)
        return web.json_response({"id": fault.id}, status=201)


@dataclass(frozen=True, slots=True)
class ServedEmulator:
    """A running server (what :func:`serve` gives).

    Attributes:
        url: The base URL, e.g. ``http://127.0.0.1:5380``; namespace ``contoso`` is at
            ``{url}/contoso``.
        key_name: The key name requests are signed with.
        key: The key.
    """

    url: str
    key_name: str
    key: str

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


def max_connections() -> int:
    """How many client connections the server keeps at once: what the process's file
    descriptor limit allows, less a reserve, and at most 10,000."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            soft = 10_000 + _FD_RESERVE
    except (ImportError, OSError, ValueError):  # no such limit here (Windows)
        soft = 1024
    return max(16, min(10_000, soft - _FD_RESERVE))


class _CappedSite(web.TCPSite):
    """A TCP site that never runs out of file descriptors: at the cap, a new connection
    makes room by closing the oldest connection with no request in progress, so idle
    connections (however many a hostile client opens) never lock signed clients out."""

    async def start(self) -> None:
        await web.BaseSite.start(self)
        handlers = self._runner.server
        assert handlers is not None
        cap = max_connections()

        def connection() -> asyncio.Protocol:
            live = handlers.connections
            if len(live) >= cap:
                for handler in live[: len(live) - cap + 1 + cap // 10]:
                    if not getattr(handler, "_request_in_progress", False):
                        handler.force_close()
            return handlers()

        self._server = await asyncio.get_running_loop().create_server(
            connection,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )


@contextlib.asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    key_name: str = DEV_KEY_NAME,
    key: str = DEV_KEY,
    ready: Callable[[ServedEmulator], None] | None = None,
    data_dir: str | Path | None = None,
    keys: Mapping[str, tuple[str, Iterable[str]]] | None = None,
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
            answer (R-3). Without it, everything is in memory.

    Yields:
        A :class:`ServedEmulator` with the bound URL and the credential.
    """
    journal = None
    if data_dir is not None:
        journal = Journal(data_dir)
        await journal.open()
        try:
            await journal.load()
            emulator.use_journal(journal)
        except BaseException:
            await journal.aclose()
            raise
    server = EmulatorServer(key_name=key_name, key=key, journal=journal, keys=keys)
    # handler_cancellation: a client that hangs up (its own timeout) cancels the
    # operation it asked for, so that a long poll does not lock messages for nobody.
    runner = web.AppRunner(
        server.app(), handler_cancellation=True, access_log=None, keepalive_timeout=IDLE_SECONDS
    )
    await runner.setup()
    try:
        site = _CappedSite(runner, host, port, reuse_address=True)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        bound = sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        served = ServedEmulator(f"http://{shown}:{bound}", key_name, key)
        if ready is not None:
            ready(served)
        yield served
    finally:
        await runner.cleanup()
        if journal is not None:
            emulator.use_journal(None)
            await journal.aclose()
