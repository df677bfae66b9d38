"""The server's application: :class:`EmulatorServer` checks each request's signature
(:class:`aiosb.auth.SasChecker`), reads its body within a time limit, routes it to the
REST data plane, the ``$aiosb`` extensions, management or fault injection, and commits the
durable journal before it answers. Sites served beside it under paths of their own (the
Service Bus Explorer) are made by whoever assembles the server (:class:`MakeSite`): the
HTTP plane knows none of them."""


from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol

from aiohttp import web

from ...auth import DEV_KEY, DEV_KEY_NAME, SasChecker, key_table
from ...emulator import EmulatorNamespace, Journal, exists, namespace
from ...errors import (
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
    MessageSizeExceeded,
    ServiceBusError,
)
from ...wire import status as _status
from . import _extensions, _fault_api, _reset, _rest_plane
from . import _management_api as _manage
from ._hosts import AllowedHosts
from ._metrics import Observer
from ._requests import (
    BODY_SECONDS,
    Route,
    bounded,
    budget_of,
    encoded_slash_first,
    error_response,
    read_body,
    reads_at_root,
    right_needed,
    segments_of,
    split,
)

log = logging.getLogger("aiosb.server")

__all__ = [  # BODY_SECONDS: of ._requests
    "BODY_SECONDS", "MAX_BODY", "EmulatorServer", "Handler", "KeyTable", "MakeSite", "Site",
]

#: A request handler of aiohttp's.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The largest request body: a batch at the premium limit, base64-encoded, with room.
MAX_BODY = 4 * 1024 * 1024

#: The server's keys: ``{name: (secret or secrets, rights)}`` (:func:`aiosb.auth.key_table`).
KeyTable = Mapping[str, tuple[str | tuple[str, ...], frozenset[str]]]


class Site(Protocol):
    """Something served beside the REST plane under paths of its own (the Service Bus
    Explorer at ``/explorer/``)."""

    def add_routes(self, app: web.Application) -> None:
        """Add its routes to ``app`` (before the server's catch-all route)."""


class MakeSite(Protocol):
    """What makes a :class:`Site` from what the server has: its key table, its
    namespaces by name (attached to the server's loop), its durable journal (committed
    before a change is answered), and whether it logs requests
    (:class:`aiosb.server.explorer.Explorer` is one)."""

    def __call__(self, keys: KeyTable,
                 namespace: Callable[[str], Awaitable[EmulatorNamespace]],
                 journal: Journal | None = None, *, log: bool = False) -> Site: ...


class EmulatorServer:
    """The aiohttp application serving every emulator namespace of this process.

    Args:
        key_name: The shared access key name requests must be signed with.
        key: The key (:data:`DEV_KEY` by default).
        sites: Served beside the REST plane, each made with the server's keys,
            namespaces and journal: ``aiosb serve`` serves the Service Bus Explorer so,
            at ``/explorer/`` (paths under ``/explorer`` in these very letters are then
            the explorer's: a namespace called ``explorer``, or an entity at the root
            of the ``root`` namespace, is reached over HTTP by another case,
            ``/Explorer/...``, as names are case-insensitive, or over AMQP).

    Use :func:`aiosb.server.http.serve` to run it; :meth:`app` gives the bare application.
    """

    def __init__(
        self,
        *,
        key_name: str = DEV_KEY_NAME,
        key: str = DEV_KEY,
        journal: Journal | None = None,
        keys: Mapping[str, tuple[str, Iterable[str]]] | None = None,
        log_requests: bool = False,
        metrics: bool = False,
        root: str | None = None,
        routes: Mapping[str, Handler] | None = None,
        also_key: str | None = None,
        sites: Iterable[MakeSite] = (),
        hosts: AllowedHosts | None = None,
        remake: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        table = key_table(key_name, key, keys, also=also_key)
        #: GET handlers by path, before the catch-all (AMQP over WebSockets, from above).
        self._routes = dict(routes or {})
        self._auth = SasChecker(table)
        self.hosts = hosts or AllowedHosts()
        self._journal = journal
        #: What is served beside the REST plane (the Service Bus Explorer), in order.
        self.sites: tuple[Site, ...] = tuple(
            make(table, self._namespace, journal, log=log_requests) for make in sites)
        self._namespaces: dict[str, EmulatorNamespace] = {}
        #: The namespace served at the root (paths name entities, not namespaces), as a
        #: namespace's own host serves it; None: the first segment names the namespace.
        self.root = root
        #: Makes the root namespace's starting entities again after ``$reset`` (what
        #: ``prepare`` made: ``aiosb serve --config``'s).
        self._remake = remake
        #: The ports the HTTP site listens at (:func:`..http.serve` sets them): a request that came
        #: in at another was handed over by the AMQP port, an endpoint of the root
        #: namespace alone, where the whole path is the entity, as on Service Bus.
        self.ports: frozenset[int] = frozenset()
        #: How many client connections are open (the serving code sets it).
        self.open_connections: Callable[[], int] = lambda: 0
        self._observer = None
        if log_requests or metrics:
            self._observer = Observer(log=log_requests, metrics=metrics,
                                      connections=lambda: self.open_connections())

    def app(self) -> web.Application:
        """The aiohttp application (one catch-all route; the server parses paths itself)."""
        observer = self._observer
        told = None if observer is None else functools.partial(observer.request, seconds=0.0)
        # The Host check first, before any route's handler (DNS rebinding, #48).
        app = web.Application(client_max_size=MAX_BODY,
                              middlewares=[self.hosts.middleware(told)])
        if observer is not None and observer.registry is not None:
            app.router.add_get("/metrics", observer.metrics)  # unsigned, as scrapers are
        for path, handler in self._routes.items():
            app.router.add_get(path, handler)
        for site in self.sites:
            site.add_routes(app)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, _app: web.Application) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Detach from every namespace served (they stay in :mod:`aiosb.emulator`)."""
        namespaces, self._namespaces = self._namespaces, {}
        for ns in namespaces.values():
            ns.detach()

    def _split(self, raw_path: str, one: bool = False) -> Route:
        """The route of a request: at the root (the default namespace's) or under the
        namespace its first segment names (:func:`reads_at_root` says which). At an
        endpoint of ``one`` namespace (the root), the whole path is the entity, as on
        Service Bus, but for aiosb's address of that namespace, ``/NAME/...``."""
        root = self.root
        if root is None:
            return split(raw_path)
        if one:
            segments = segments_of(raw_path)
            named = len(segments) > 1 and segments[0].lower() == root.lower()
            return split(raw_path) if named else split(raw_path, root)
        if reads_at_root(segments_of(raw_path), exists, self._root_has,
                         whole=encoded_slash_first(raw_path)):
            return split(raw_path, root)
        return split(raw_path)

    def _one_namespace(self, request: web.Request) -> bool:
        """Whether the request came in at an endpoint of one namespace: a port other
        than the HTTP site's (:attr:`ports`: one for each address it listens on), which
        only the AMQP port hands connections to, and it serves the root namespace alone
        (#47)."""
        if not self.ports or request.transport is None:
            return False
        local = request.transport.get_extra_info("sockname")
        return isinstance(local, tuple) and len(local) > 1 and local[1] not in self.ports

    def _root_has(self, first: str) -> bool:
        return namespace(self.root or "").has_entity_under(first)

    async def _namespace(self, name: str) -> EmulatorNamespace:
        key = name.lower()
        ns = self._namespaces.get(key)
        if ns is None:
            ns = namespace(name)  # validates the name; created on first use
            ns.attach()  # its timers run on this loop
            self._namespaces[key] = ns
        return ns


    # -- dispatch ---------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        observer = self._observer
        if observer is None:
            return await self._handle(request)
        start = time.perf_counter()
        response = await self._handle(request)
        observer.request(request, response.status, time.perf_counter() - start)
        return response

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            route = self._split(request.raw_path, self._one_namespace(request))
            headers = request.headers
            self._auth.check(
                headers.get("Authorization") or headers.get("ServiceBusAuthorization"),
                request.host,
                route.path,
                right_needed(request.method, route.segments),
            )
            if request.can_read_body:
                await read_body(request)  # within BODY_SECONDS; kept for the handlers
            budget = request.headers.get(_status.TIMEOUT_HEADER)
            limit = None if budget is None else budget_of(budget)
            response = await self._route(request, route, limit)
            if self._journal is not None:  # durable mode: on disk before the answer
                await self._journal.commit()
            return response
        except ServiceBusError as exc:
            return error_response(exc)
        except web.HTTPException as exc:  # aiohttp's own refusals (body too large ...)
            detail = f"{exc.reason}: {exc.text or ''}".strip(": ")
            if exc.status == 413:
                return error_response(MessageSizeExceeded(
                    f"the request body is over the server's {MAX_BODY} byte limit ({detail})."
                ))
            return error_response(InvalidArgument(detail))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: say so, never crash the server
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return error_response(ServiceBusError("internal error in the emulator server."))

    async def _route(
        self, request: web.Request, route: Route, limit: float | None
    ) -> web.StreamResponse:
        segs = route.segments
        method = request.method
        if segs and segs[0] == "$faults":
            await self._namespace(route.namespace)  # validates the name; namespaces on first use
            try:
                return await _fault_api.faults(request, route)
            except EntityNotFound as exc:  # a fragment of no entity: as management answers
                return error_response(exc, 404)
        ns = await self._namespace(route.namespace)
        if segs == ("$reset",):
            at_root = self.root is not None and route.namespace.lower() == self.root.lower()
            return await _reset.reset(request, ns, self._remake if at_root else None)
        if not segs:
            raise InvalidArgument(
                f"nothing to do at {route.base or '/'}: address an entity, e.g. "
                f"{route.base}/orders/messages."
            )
        if "$aiosb" in segs:
            at = segs.index("$aiosb")
            if at == 0 or len(segs) != at + 2 or method != "POST":
                raise InvalidArgument(
                    "aiosb extensions are POST /{namespace}/{entity}/$aiosb/{operation}."
                )
            path = "/".join(segs[:at])
            return await _extensions.extension(request, ns, path, segs[-1], limit)
        if segs[-1] == "messages" and len(segs) > 1:
            if method != "POST":
                raise InvalidOperation(f"{method} is not allowed on .../messages; POST sends.")
            return await bounded(limit, _rest_plane.send(request, ns, "/".join(segs[:-1])))
        if segs[-2:] == ("messages", "head") and len(segs) > 2:
            path = "/".join(segs[:-2])
            if method not in ("POST", "DELETE"):
                raise InvalidOperation(
                    f"{method} is not allowed on .../messages/head; POST peek-locks, "
                    "DELETE receives and deletes."
                )
            return await _rest_plane.receive_head(request, ns, route, path, limit)
        if len(segs) > 3 and segs[-3] == "messages":
            path = "/".join(segs[:-3])
            return await bounded(limit, _rest_plane.lock(request, ns, path, segs[-2], segs[-1]))
        try:
            return await bounded(limit, _manage.manage(request, ns, route))
        except EntityNotFound as exc:  # management answers 404 (data operations: 410)
            return error_response(exc, 404)

