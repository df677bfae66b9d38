"""A pytest plugin with ready fixtures: ``aiosb_emulator`` (the embedded emulator, for
aiosb's own client) and ``aiosb_server`` (an ``aiosb serve`` for code written on the
official ``azure-servicebus`` SDK).

It is registered on install (entry point ``pytest11``), so a project that installs
aiosb can just ask for the fixtures::

    async def test_orders(aiosb_emulator):
        async with aiosb.connect("memory://test") as ns:
            ...
        aiosb_emulator.namespace("test").faults.fail("orders")

    def test_orders_with_the_sdk(aiosb_server):
        with ServiceBusClient.from_connection_string(aiosb_server.connection_string) as c:
            ...
        with aiosb_server.faults.fail("orders"):
            ...

``aiosb_server`` starts one ``aiosb serve`` per test session (per set of options) in a
child process, on free ports, and gives each test the namespace empty (#51). Its
options, through pytest's means: the ini options ``aiosb_server_durable``,
``aiosb_server_config`` and ``aiosb_server_loop``, or, for one test or module, the
marker ``@pytest.mark.aiosb_server(durable=True, config="Config.json", loop="asyncio")``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Self

import pytest

from . import emulator
from .auth import DEV_KEY, DEV_KEY_NAME, SasCredential
from .errors import ServiceBusError
from .server.process import ServerProcess

__all__ = ["AiosbServer", "RemoteFault", "ServerFaults", "aiosb_emulator", "aiosb_server"]

#: The marker that sets a test's server options (``durable``, ``config``, ``loop``).
MARKER = "aiosb_server"
#: The ini options that set them for the whole suite.
INI_DURABLE = "aiosb_server_durable"
INI_CONFIG = "aiosb_server_config"
INI_LOOP = "aiosb_server_loop"
#: The title of the report section that holds the server's log of a failed test.
LOG_SECTION = "aiosb serve log"
_OPTIONS = ("durable", "config", "loop")
_LOOPS = ("auto", "uvloop", "asyncio")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI_DURABLE, "aiosb_server: serve durably (--data-dir in a temporary "
                  "folder of the session)", type="bool", default=False)
    parser.addini(INI_CONFIG, "aiosb_server: a Config.json (Microsoft's emulator's schema) "
                  "whose entities each test starts with; relative to the ini file",
                  default="")
    parser.addini(INI_LOOP, "aiosb_server: the server's event loop (auto, uvloop, asyncio)",
                  default="auto")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(durable=False, config=None, loop='auto'): the aiosb_server "
        "this test gets (config: a Config.json, relative to the test's file)")


@pytest.fixture
def aiosb_emulator() -> Iterator[ModuleType]:
    """The :mod:`aiosb.emulator` module, with every namespace forgotten before and after."""
    emulator.reset()
    try:
        yield emulator
    finally:
        emulator.reset()


# -- aiosb_server ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    durable: bool = False
    config: str | None = None  # an absolute path
    loop: str = "auto"


class _Servers:
    """The session's servers, one per set of options, started on first use."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self._tmp = tmp
        self._running: dict[_Options, AiosbServer] = {}

    def get(self, options: _Options) -> AiosbServer:
        """The server with ``options`` (one handle for every test: its HTTP connection
        to the server is kept between tests)."""
        handle = self._running.get(options)
        if handle is None:
            args = ["--tls-dir", str(self._tmp.mktemp("aiosb-tls")), "--loop", options.loop,
                    "--no-explorer"]
            if options.durable:
                args += ["--data-dir", str(self._tmp.mktemp("aiosb-data"))]
            if options.config is not None:
                args += ["--config", options.config]
            # not quiet: a line per HTTP request, for a failed test's report
            server = ServerProcess(args=args, quiet=False).start()
            if not server.certificate:
                server.stop()
                raise ServiceBusError(
                    "aiosb serve has no certificate for the administration clients' HTTPS: "
                    "pip install 'aiosb[tls]' (cryptography)")
            handle = self._running[options] = AiosbServer(server)
        return handle

    def stop(self) -> None:
        for handle in self._running.values():
            handle._http.close()
            handle.process.stop()
        self._running.clear()


@pytest.fixture(scope="session")
def _aiosb_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Servers]:
    servers = _Servers(tmp_path_factory)
    try:
        yield servers
    finally:
        servers.stop()


class _Http:
    """Blocking, signed requests to a server's HTTP port: a test calls them from sync
    and async code alike (the server is another process; a call takes a millisecond)."""

    def __init__(self, url: str, namespace: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self._host, self._port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self._base = f"/{namespace}"
        self._credential = SasCredential(DEV_KEY_NAME, DEV_KEY)
        self._resource = f"{url}{self._base}"
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # one request at a time on the kept connection

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        with self._lock:
            return self._call(method, path, payload)

    def _call(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Authorization": self._credential.token(self._resource)}
        if body is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more
            conn = self._conn or http.client.HTTPConnection(self._host, self._port, timeout=30)
            self._conn = conn
            try:
                conn.request(method, f"{self._base}/{path}", body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._conn = None
                if attempt == 2:
                    raise
                continue
            if answer.status >= 400:
                raise ServiceBusError(f"aiosb serve answered {method} {path} with "
                                      f"{answer.status}: {data.decode(errors='replace')}")
            return json.loads(data) if data else None
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@dataclass
class RemoteFault:
    """A fault injected on the server: healed by :meth:`heal`, or on leaving ``with``."""

    id: str
    _faults: ServerFaults = field(repr=False)

    def heal(self) -> None:
        """End this fault (idempotent)."""
        with contextlib.suppress(ServiceBusError):  # healed already (a reset, heal())
            self._faults.heal(self.id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()


class ServerFaults:
    """The fault API of :class:`aiosb.emulator.Faults`, on the server's namespace over
    its HTTP port (``/{namespace}/$faults``): the same methods and arguments, blocking,
    usable from sync and async tests. What each kind does to the official SDK: an
    ``unavailable`` entity fails its operations (the SDK raises
    ``ServiceBusError``), ``timeout`` holds them until healed, ``transient`` fails
    them as retryable."""

    def __init__(self, http: _Http) -> None:
        self._http = http

    def _inject(self, payload: dict[str, Any]) -> RemoteFault:
        return RemoteFault(str(self._http.call("POST", "$faults", payload)["id"]), self)

    def fail(self, entity: str | None = None, *, kind: str = "unavailable",
             operations: Sequence[str] = emulator.OPERATIONS) -> RemoteFault:
        """Take ``entity`` (its subscriptions and dead-letter queue too), or with
        ``None`` the whole namespace, down (:meth:`aiosb.emulator.Faults.fail`)."""
        return self._inject({"entity": entity, "kind": kind, "operations": list(operations)})

    def fail_fragment(self, entity: str, index: int, *, kind: str = "unavailable",
                      operations: Sequence[str] = emulator.OPERATIONS) -> RemoteFault:
        """Take fragment ``index`` of a partitioned entity down
        (:meth:`aiosb.emulator.Faults.fail_fragment`)."""
        return self._inject({"entity": entity, "fragment": index, "kind": kind,
                             "operations": list(operations)})

    def delay(self, entity: str | None, seconds: float, *,
              operations: Sequence[str] = emulator.OPERATIONS) -> RemoteFault:
        """Add ``seconds`` of latency to ``entity``'s operations."""
        return self._inject({"entity": entity, "kind": "delay", "seconds": seconds,
                             "operations": list(operations)})

    def heal(self, fault_id: str | None = None) -> int:
        """Heal one fault by id, or every fault of the namespace; how many were healed."""
        path = "$faults" if fault_id is None else f"$faults/{urllib.parse.quote(fault_id)}"
        return int(self._http.call("DELETE", path)["healed"])

    def active(self) -> list[dict[str, Any]]:
        """The faults in force, as the server lists them."""
        faults: list[dict[str, Any]] = self._http.call("GET", "$faults")["faults"]
        return faults


class AiosbServer:
    """What the ``aiosb_server`` fixture gives a test: the session's ``aiosb serve``
    (in a child process, on free ports), its namespace emptied for this test (the same
    object for every test of the session that has the same options).

    Attributes:
        connection_string: What the official clients take, ``ServiceBusClient`` and
            ``ServiceBusAdministrationClient`` (sync and aio), ``from_connection_string``:
            plain AMQP (``UseDevelopmentEmulator=true``), and management over HTTPS at
            the same port, whose certificate the administration clients made for this
            server's endpoint trust for the test, on every supported release
            (``connection_verify`` set on each request).
        namespace: The namespace's name (Microsoft's emulator's, unless a Config.json
            names another).
        certificate: The certificate (PEM) the AMQP port presents over TLS.
        url: The HTTP port's base URL; aiosb's own client reaches the namespace at
            ``f"{url}/{namespace}"``.
        faults: Fault injection on the namespace (:class:`ServerFaults`).
        process: The :class:`~aiosb.server.process.ServerProcess` (shared by the session).
    """

    def __init__(self, process: ServerProcess, namespace: str | None = None) -> None:
        self.process = process
        self.connection_string = process.amqp_connection_string
        self.namespace = namespace or _namespace_of(process.banner)
        self.certificate = process.certificate
        self.url = process.url
        self._http = _Http(process.url, self.namespace)
        self.faults = ServerFaults(self._http)

    @property
    def endpoint(self) -> str:
        """``localhost:PORT``: the namespace the official clients are given."""
        return self.connection_string.split("sb://", 1)[1].split(";", 1)[0].rstrip("/")

    def reset(self) -> int:
        """Empty the namespace (faults healed, every queue and topic deleted), then make
        the Config.json's entities again; the fixture does it before each test. Returns
        how many queues and topics were deleted."""
        return int(self._http.call("POST", "$reset")["deleted"])

    def __repr__(self) -> str:
        return f"<AiosbServer {self.endpoint} namespace {self.namespace}>"


def _namespace_of(banner: str) -> str:
    for line in banner.splitlines():
        if "AMQP 1.0 (the official SDKs) on port" in line:
            return line.rsplit("namespace ", 1)[1].rstrip(": \n")
    raise ServiceBusError(f"aiosb serve's banner names no AMQP namespace: {banner[-500:]}")


def _options(request: pytest.FixtureRequest) -> _Options:
    """The server a test asks for: its marker's options, else the ini options."""
    config = request.config
    durable = bool(config.getini(INI_DURABLE))
    loop = str(config.getini(INI_LOOP) or "auto")
    file = str(config.getini(INI_CONFIG) or "") or None
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        unknown = set(marker.kwargs) - set(_OPTIONS)
        if marker.args or unknown:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes {', '.join(_OPTIONS)} by "
                                    f"name; not {sorted(unknown) or marker.args}")
        durable = bool(marker.kwargs.get("durable", durable))
        loop = str(marker.kwargs.get("loop", loop))
        if "config" in marker.kwargs:
            file = marker.kwargs["config"]
            base = request.path.parent
    if loop not in _LOOPS:
        raise pytest.UsageError(f"aiosb_server's loop must be one of {', '.join(_LOOPS)}, "
                                f"not {loop!r}")
    path = None if file is None else str((base / Path(file)).resolve())
    return _Options(durable, path, loop)


_LOG_AT = pytest.StashKey[tuple[ServerProcess, int]]()


def _trusted(server: AiosbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The official administration clients (sync and aio) made for this server's
    endpoint trust its certificate, for the test. Nothing machine-wide changes, and
    other endpoints are untouched.

    The certificate reaches each request as its ``connection_verify``, set by a policy
    in the slot azure-core gives per-request transport options: the client's
    ``proxy_policy`` (a configuration keyword of every azure-core client), an
    azure-core ``ProxyPolicy`` made from the client's own keywords that also sets the
    certificate. A constructor's ``connection_verify`` or ``transport`` would not do:
    before 7.15 the administration client builds its transport without its
    constructor's keywords, so both were ignored (#51); its configuration, policies
    included, has taken them in every release. What the test gives wins: a
    ``connection_verify``, ``transport`` or ``proxy_policy`` of its own to the
    constructor leaves the client as the test made it, and ``connection_verify`` given
    to a call is that call's."""
    try:
        from azure.core.pipeline import PipelineRequest
        from azure.core.pipeline.policies import ProxyPolicy
        from azure.servicebus.aio.management import (
            ServiceBusAdministrationClient as AsyncAdministrationClient,
        )
        from azure.servicebus.management import ServiceBusAdministrationClient
    except ImportError:  # aiosb's own client only: nothing to trust
        return

    class TrustingProxyPolicy(ProxyPolicy):
        """azure-core's ``ProxyPolicy`` (proxies as the client's keywords set them),
        which also has each request verify the server by its certificate."""

        def on_request(self, request: PipelineRequest[Any]) -> None:
            super().on_request(request)
            request.context.options.setdefault("connection_verify", server.certificate)

    ours = {server.endpoint.lower(), server.endpoint.lower().replace("localhost", "127.0.0.1")}
    own = {"connection_verify", "transport", "proxy_policy"}
    for cls in (ServiceBusAdministrationClient, AsyncAdministrationClient):
        original = cls.__init__

        def trusting(self: Any, fully_qualified_namespace: str, *args: Any,
                     _original: Any = original, **kwargs: Any) -> None:
            if fully_qualified_namespace.lower().rstrip("/") in ours and not own & kwargs.keys():
                kwargs["proxy_policy"] = TrustingProxyPolicy(**kwargs)
            _original(self, fully_qualified_namespace, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", trusting)


@pytest.fixture
def aiosb_server(request: pytest.FixtureRequest, _aiosb_servers: _Servers,
                 monkeypatch: pytest.MonkeyPatch) -> AiosbServer:
    """An ``aiosb serve`` for code on the official SDK: one per session (per set of
    options), its namespace empty at the start of each test (:class:`AiosbServer`)."""
    server = _aiosb_servers.get(_options(request))
    server.reset()
    request.node.stash[_LOG_AT] = (server.process, server.process.printed)
    _trusted(server, monkeypatch)
    return server


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that had ``aiosb_server`` carries the server's log of that test
    (its section ``aiosb serve log``)."""
    report = yield
    at = item.stash.get(_LOG_AT, None)
    if at is not None and report.failed:
        process, printed = at
        time.sleep(0.05)  # what the server printed as the test failed reaches the pipe
        report.sections.append((LOG_SECTION, process.output_since(printed)
                                or "(nothing printed during the test)"))
    return report
