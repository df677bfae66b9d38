"""The Service Bus Explorer of ``aiosb serve``: a web page at ``/explorer/`` on the
server's HTTP(S) port, and the JSON API under ``/explorer/api/`` that it calls.

**Signing in.** The page posts a key name and key (``POST /explorer/api/signin``); the
server checks them against its own key table (the keys that sign its requests, each
with its rights) in constant time and answers with a session cookie: random, ``HttpOnly``
(no script reads it), ``SameSite=Strict`` (no other site's page sends it), ``Path=/explorer``
(no other path of the server sees it), ``Secure`` when served over TLS, ending after
:data:`SESSION_SECONDS` (and on ``POST /explorer/api/signout``). The key never leaves
the server's memory again. Over plain HTTP only a client on the server's machine may
sign in (the key would cross the network readable), and a client address that keeps
giving wrong keys for a key name is slowed; the right key, compared first, signs in at
once (:mod:`._sign_in`). A page that
signed each request with a SAS token it made would need the key in script, and
WebCrypto, which browsers give only to secure contexts (HTTPS or localhost).

**Rights.** The session has the rights of the key it was opened with (``Manage``
includes ``Send`` and ``Listen``): every signed-in key sees the entities and their
counts; peeking and reading session states needs Listen, sending needs Send,
resubmitting dead letters Listen and Send; purging, rules, faults and entities'
settings Manage, as REST asks Manage to read an entity's description or its rules.

**Cross-site requests.** Every API request from another origin is refused (``Origin``
naming any other, a page at an IP address or at another port of this machine included,
or ``Sec-Fetch-Site`` naming another site); every request that changes anything must
carry the session's CSRF token in the ``X-Aiosb-Csrf`` header, which a page of another
site can neither read nor send without a CORS preflight the server never approves (and
the cookie is ``SameSite=Strict`` besides). Signing in needs the ``X-Aiosb-Explorer``
header, for the same reason. A page whose own name was re-pointed at the server (DNS
rebinding) passes those checks, its ``Origin`` and ``Host`` agreeing; the server's
``Host`` check (:mod:`aiosb.server.http._hosts`), before any route, answers it 421.

**Live.** ``GET /explorer/api/events`` is a stream of server-sent events: the
namespaces (entities, counts, size, messages in and out per second, and for a Manage
key settings and faults), once a second, read once for every page open
(:class:`._live.Sampler`); at most :data:`MAX_STREAMS` streams at once.

**Errors and the log.** A body that does not arrive within ``BODY_SECONDS`` (as a REST
request's: :func:`aiosb.server.http._requests.read_body`), is not plain JSON (``NaN``,
nested past Python's limits) or has a number out of range is a 400; anything unforeseen
a JSON 500 with one log line; every answer carries the same security headers. Sign-ins
and every change are logged to the ``aiosb.server.requests`` logger (unless
``--quiet``), never a key.

**Markup.** The page puts what it shows into text nodes (``textContent``), never into
markup; the Content-Security-Policy lets only the page's own script and style run.

**The broker.** What the page does is done through the broker's public operations
(methods of :class:`~aiosb.emulator.EmulatorNamespace`: :mod:`._operations`), as the
REST plane's; a fault is read by the fault API's own parser
(:func:`aiosb.server.http._fault_api.inject`), so the explorer refuses what
``POST /{ns}/$faults`` refuses (#49).
"""


from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from ... import emulator
from ...emulator import EmulatorNamespace, Journal
from ...errors import EntityNotFound, InvalidArgument, ServiceBusError
from ...wire import status as _status
from ..http import _fault_api
from ..http._metrics import access_log
from ..http._requests import read_body
from . import _operations as ops
from . import _sign_in as _explorer_auth
from ._live import Sampler
from ._sign_in import (
    SESSION_SECONDS,
    Crowded,
    Session,
    Sessions,
    Throttle,
    key_matches,
    may_sign_in,
    visible,
)

log = logging.getLogger("aiosb.server")

#: Where the explorer is served.
PREFIX = "/explorer"
#: Event streams open at once (more are refused with 503).
MAX_STREAMS = 100
COOKIE = "aiosb_explorer"
CSRF_HEADER = "X-Aiosb-Csrf"
SIGNIN_HEADER = "X-Aiosb-Explorer"
_STATIC = Path(__file__).with_name("static")
_FILES = {
    "index.html": "text/html",
    "explorer.js": "text/javascript",
    "explorer.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
KeyTable = Mapping[str, tuple[str | tuple[str, ...], frozenset[str]]]


class Refused(Exception):
    """A request the explorer turns away, with its status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class Explorer:
    """The explorer's handlers, over the server's keys and namespaces.

    Args:
        keys: The server's key table (:func:`aiosb.auth.key_table`).
        namespace: The server's namespace by name, attached to its loop.
        journal: The durable journal, committed before a change is answered.
        log: Log sign-ins and changes to ``aiosb.server.requests`` (``--quiet``: not).
    """

    def __init__(self, keys: KeyTable,
                 namespace: Callable[[str], Awaitable[EmulatorNamespace]],
                 journal: Journal | None = None, *, log: bool = False) -> None:
        self._keys = keys
        self._namespace = namespace
        self._journal = journal
        self._log = log
        self._sessions = Sessions()
        self._throttle = Throttle()
        self._streams = 0
        self._sampler = Sampler()
        self._public: tuple[object, dict[str, Any]] = (None, {})
        self._closing = asyncio.Event()

    def add_routes(self, app: web.Application) -> None:
        """Serve the explorer in ``app`` (before its catch-all route)."""
        app.router.add_route("*", PREFIX + "{tail:(/.*)?}", self.handle)
        app.on_shutdown.append(self._shutdown)

    async def _shutdown(self, _app: web.Application) -> None:
        self._closing.set()  # event streams end, so the server stops at once

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Every request under :data:`PREFIX`."""
        tail = request.match_info.get("tail", "")
        start = time.perf_counter()
        said: dict[str, str] = {}  # the key name, and the entity a change is made on
        try:
            if tail == "":
                raise web.HTTPPermanentRedirect(PREFIX + "/")
            if tail.startswith("/api/"):
                response = await self._api(request, tail[len("/api/"):], said)
            else:
                response = self._static(request, tail[1:] or "index.html")
        except Refused as exc:
            response = web.json_response({"error": exc.message}, status=exc.status,
                                         headers=exc.headers)
        except ServiceBusError as exc:
            response = web.json_response(
                {"error": exc.message, "type": type(exc).__name__},
                status=_status.status_for(exc))
        except web.HTTPException as exc:  # a redirect; aiohttp's refusals (body too large)
            if exc.status < 400:
                raise
            response = web.json_response({"error": exc.reason}, status=exc.status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: one line in the log, never a bare 500
            log.error("explorer: unexpected %s serving %s %s: %s", type(exc).__name__,
                      request.method, request.path, str(exc)[:200])
            response = web.json_response({"error": "internal error in the explorer."},
                                         status=500)
        if response.prepared:  # an event stream, ended
            return response
        response.headers["Cache-Control"] = "no-store"
        _secure_headers(response)
        if self._log and request.method not in ("GET", "HEAD"):
            self._log_change(request, response.status, time.perf_counter() - start, said)
        return response

    def _log_change(self, request: web.Request, status: int, seconds: float,
                    said: dict[str, str]) -> None:
        """A sign-in or a change, in the access log: who, from where, on what (never a
        key)."""
        key_name = said.get("key_name", "-")[:60]
        target = said.get("target")
        access_log.info("%s %s %s %d %.1f ms (explorer, key %r%s)", request.remote,
                        request.method, request.path, status, seconds * 1000, key_name,
                        "" if target is None else f", {str(target)[:200]}")

    def _static(self, request: web.Request, name: str) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise Refused(405, f"{request.method} is not allowed here.")
        kind = _FILES.get(name)
        if kind is None:
            raise Refused(404, "no such page.")
        return web.Response(body=(_STATIC / name).read_bytes(), content_type=kind,
                            charset="utf-8" if kind.startswith("text") else None)

    # -- the API ----------------------------------------------------------------------

    async def _api(self, request: web.Request, name: str, said: dict[str, str]
                   ) -> web.StreamResponse:
        _same_origin(request)
        method = request.method
        if name == "signin" and method == "POST":
            return await self._signin(request, said)
        session = self._session(request)
        said["key_name"] = session.key_name
        changes = method not in ("GET", "HEAD")
        if changes and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()
        ):
            raise Refused(403, f"a change needs the {CSRF_HEADER} header of the signed-in "
                               "page; sign in again.")
        if name == "signout" and method == "POST":
            self._sessions.close(request.cookies.get(COOKIE, ""))
            response = web.json_response({"signed_out": True})
            response.del_cookie(COOKIE, path=PREFIX)
            return response
        if name == "me" and method == "GET":
            return web.json_response(_me(session))
        if name == "events" and method == "GET":
            return await self._events(request, session, request.cookies.get(COOKIE, ""))
        route = _ROUTES.get((method, name))
        if route is None:
            raise Refused(404, f"no explorer API {method} {name[:40]!r}.")
        needs, handler = route
        missing = [r for r in needs if r not in session.rights]
        if missing:
            raise Refused(403, f"the key {session.key_name!r} has "
                               f"{', '.join(sorted(session.rights))} rights; this needs "
                               f"{' and '.join(needs)}.")
        args = await _arguments(request)
        if changes:
            said["target"] = f"{str(args.get('ns'))[:60]}/{str(args.get('path', ''))[:120]}"
        ns = await self._entity_namespace(args)
        if ns.recovery is not None:  # a durable restart: what it reads is loaded first (#39)
            path = args.get("path")
            await ns.recovery.wait(ns, path if isinstance(path, str) and path else None)
        answer = await handler(ns, args)
        if changes and self._journal is not None:
            await self._journal.commit()
        return web.json_response(answer)

    async def _signin(self, request: web.Request, said: dict[str, str]) -> web.Response:
        if request.headers.get(SIGNIN_HEADER) != "1":
            raise Refused(403, f"sign in from the explorer's page (it sends {SIGNIN_HEADER}).")
        why_not = may_sign_in(request.secure, request.remote)
        if why_not is not None:
            raise Refused(403, why_not)
        client = str(request.remote)
        fields = await _arguments(request)
        name, key = fields.get("key_name"), fields.get("key")
        if not isinstance(name, str) or not isinstance(key, str) or not name or not key:
            raise Refused(400, "give a key name and a key.")
        said["key_name"] = name
        entry = self._keys.get(name)
        if entry is None:  # no such key: no guess can succeed, none is counted
            await asyncio.sleep(_explorer_auth.PAUSE_SECONDS)  # a guesser waits
            raise Refused(401, "the key name or the key is not one of this server's.")
        # The key is compared first: the right key signs in at once, whatever guesses
        # wait; only a wrong key takes the lane of its address and key name (#48).
        if key_matches(key, entry[0] if isinstance(entry[0], tuple) else (entry[0],)):
            self._throttle.succeeded(client, name)
        else:
            try:
                wait = await self._throttle.wrong(client, name)
            except Crowded as crowd:
                raise Refused(429, f"too many wrong keys for {name[:60]!r} from "
                                   f"{client[:60]} are waiting already: this one is refused "
                                   "at once (the right key signs in).",
                              {"Retry-After": str(crowd.retry_after)}) from None
            if wait <= 0:
                raise Refused(401, "the key name or the key is not one of this server's.")
            raise Refused(429, f"too many wrong keys for {name[:60]!r} from {client[:60]}: "
                               f"each is answered after {_explorer_auth.SLOW_SECONDS:g} s for "
                               f"{math.ceil(wait)} s more (the right key signs in).",
                          {"Retry-After": str(math.ceil(wait))})
        token, session = self._sessions.open(name, entry[1], request.cookies.get(COOKIE, ""))
        response = web.json_response(_me(session))
        response.set_cookie(COOKIE, token, path=PREFIX, max_age=SESSION_SECONDS,
                            httponly=True, samesite="Strict", secure=request.secure)
        return response

    def _session(self, request: web.Request) -> Session:
        session = self._sessions.get(request.cookies.get(COOKIE, ""))
        if session is None:
            raise Refused(401, "sign in first: this needs a key of the server's.")
        return session

    async def _entity_namespace(self, args: dict[str, Any]) -> EmulatorNamespace:
        name = args.get("ns")
        if not isinstance(name, str) or not emulator.exists(name):
            raise EntityNotFound(f"no namespace {str(name)[:60]!r} on this server.")
        return await self._namespace(name)

    def _snapshot(self, rights: frozenset[str]) -> dict[str, Any]:
        """The live snapshot as a session with ``rights`` sees it (worked out once a
        snapshot for every session without Manage)."""
        snapshot = self._sampler.snapshot()
        if "Manage" in rights:
            return snapshot
        if self._public[0] is not snapshot:
            self._public = (snapshot, visible(snapshot, rights))
        return self._public[1]

    async def _events(self, request: web.Request, session: Session, token: str
                      ) -> web.StreamResponse:
        if self._streams >= MAX_STREAMS:
            raise Refused(503, f"{MAX_STREAMS} live pages are open already: close one, or "
                               "try again later.", {"Retry-After": "5"})
        self._streams += 1
        try:
            return await self._stream(request, session, token)
        finally:
            self._streams -= 1

    async def _stream(self, request: web.Request, session: Session, token: str
                      ) -> web.StreamResponse:
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        })
        _secure_headers(response)
        await response.prepare(request)
        first: dict[str, Any] = {"history": self._sampler.history()}
        try:
            while not self._closing.is_set():
                if not self._sessions.is_live(token, session):
                    await response.write(b"event: signedout\ndata: {}\n\n")
                    break
                snapshot = {**self._snapshot(session.rights), **first}
                first = {}
                await response.write(b"data: " + json.dumps(snapshot).encode() + b"\n\n")
                try:
                    await asyncio.wait_for(self._closing.wait(), 1.0)
                except TimeoutError:
                    pass
        except (ConnectionResetError, ConnectionError):
            pass
        except Exception as exc:  # a bug: the stream ends (the page opens another)
            log.error("explorer: unexpected %s in an event stream: %s", type(exc).__name__,
                      str(exc)[:200])
        return response


def _secure_headers(response: web.StreamResponse) -> None:
    response.headers["Content-Security-Policy"] = _POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"


def _me(session: Session) -> dict[str, Any]:
    return {"key_name": session.key_name, "rights": sorted(session.rights),
            "csrf": session.csrf, "expires": session.expires}


def _same_origin(request: web.Request) -> None:
    """Refuse a request that another page made: its ``Origin``, when it has one, is the
    explorer's own exactly (scheme, ``Host``, port). Not "any IP address", which is
    right of ``Host`` alone (:mod:`aiosb.server.http._hosts`): a page at
    ``http://203.0.113.7`` is another machine's, and one at ``http://127.0.0.1:3000``
    another program's (#48)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        raise Refused(403, f"requests from {origin[:80]!r} are refused: the explorer takes "
                           "requests from its own page only.")
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        raise Refused(403, f"a {site} request is refused: the explorer takes requests "
                           "from its own page only.")


async def _arguments(request: web.Request) -> dict[str, Any]:
    """The query's arguments, and a JSON body's fields over them."""
    args: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        data = await read_body(request)  # within BODY_SECONDS, as REST's (#48)
        try:
            body = json.loads(data or b"{}", parse_constant=_no_constant,
                              parse_float=_finite)
        except (ValueError, RecursionError):
            raise InvalidArgument("the body is not plain JSON (an object of strings, "
                                  "finite numbers, booleans, lists and objects, not "
                                  "nested too deep).") from None
        if not isinstance(body, dict):
            raise InvalidArgument("the body must be a JSON object.")
        args.update(body)
    return args


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number.")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large a number.")
    return value


def _path(args: dict[str, Any]) -> str:
    path = args.get("path")
    if not isinstance(path, str) or not path:
        raise InvalidArgument("name the entity (path).")
    return path


def _int(args: dict[str, Any], name: str, default: int, high: int) -> int:
    raw = args.get(name, default)
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument(f"{name} must be a whole number.") from None
    if not 0 <= value <= high:
        raise InvalidArgument(f"{name} must be from 0 to {high}.")
    return value


async def _peek(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    return await ops.peek(ns, _path(args), str(args.get("sub", "active")),
                          _int(args, "from", 0, 2**62), _int(args, "count", 20, 500) or 1)


async def _send(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    return await ops.send(ns, _path(args), args)


async def _resubmit(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    seqs = args.get("sequence_numbers")
    if seqs is not None and (not isinstance(seqs, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seqs)):
        raise InvalidArgument("sequence_numbers must be a list of whole numbers (or null: all).")
    return await ops.resubmit(ns, _path(args), seqs)


async def _purge(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    return await ops.purge(ns, _path(args), str(args.get("sub", "")))


async def _sessions(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    return {"sessions": await ops.sessions(ns, _path(args))}


async def _rules(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    return {"rules": await ops.rules(ns, _path(args))}


async def _add_rule(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    name, sql, action = args.get("name"), args.get("filter"), args.get("action") or None
    if not isinstance(name, str) or not name or not isinstance(sql, str):
        raise InvalidArgument("a rule needs a name and a SQL filter.")
    if action is not None and not isinstance(action, str):
        raise InvalidArgument("a rule's action is SQL text.")
    return await ops.add_rule(ns, _path(args), name, sql, action)


async def _delete_rule(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    name = args.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument("name the rule to delete.")
    await ops.delete_rule(ns, _path(args), name)
    return {"deleted": name}


async def _inject(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    # every field but the namespace is the fault's: the parser refuses one it does not know
    fields = {name: value for name, value in args.items() if name != "ns"}
    return {"id": _fault_api.inject(ns.faults, fields).id}


async def _heal(ns: EmulatorNamespace, args: dict[str, Any]) -> Any:
    fault = args.get("id")
    return {"healed": _fault_api.heal(ns.faults, None if fault in (None, "") else str(fault))}


_Handler = Callable[[EmulatorNamespace, dict[str, Any]], Awaitable[Any]]
#: The data routes: (method, name) -> (the rights needed, the handler).
_ROUTES: dict[tuple[str, str], tuple[tuple[str, ...], _Handler]] = {
    ("GET", "peek"): (("Listen",), _peek),
    ("GET", "sessions"): (("Listen",), _sessions),
    ("POST", "send"): (("Send",), _send),
    ("POST", "resubmit"): (("Listen", "Send"), _resubmit),
    ("POST", "purge"): (("Manage",), _purge),
    ("GET", "rules"): (("Manage",), _rules),
    ("POST", "rules"): (("Manage",), _add_rule),
    ("DELETE", "rules"): (("Manage",), _delete_rule),
    ("POST", "faults"): (("Manage",), _inject),
    ("DELETE", "faults"): (("Manage",), _heal),
}
