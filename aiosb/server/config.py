"""``ServerConfig``: every flag of ``aiosb serve`` as one value, what the command line
is parsed into and :func:`aiosb.server.serve` assembles the server from.

    config = ServerConfig(port=0, amqp_port=0, amqps_port=0, quiet=True)
    async with aiosb.server.serve(config) as running:
        print(running.url)

A field is the flag of the same name (``amqp=False`` is ``--no-amqp``, ``explorer=False``
``--no-explorer``, ``microsoft`` ``--microsoft-emulator``, ``config`` the file
``--config`` names, read); its default is the flag's. What is wrong is said on
construction (:class:`ValueError`, naming the flag), before anything listens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..auth import DEV_KEY_NAME
from .msconfig import EmulatorConfig

__all__ = [
    "AMQPS_PORT",
    "AMQP_PORT",
    "DEFAULT_NAMESPACE",
    "HTTP_PORT",
    "LOOPS",
    "MICROSOFT_AMQP_PORT",
    "MICROSOFT_HTTP_PORT",
    "Ports",
    "ServerConfig",
    "port_variable",
    "ports",
]

#: ``aiosb serve``'s default ports: HTTP, AMQP, AMQP over TLS (the SDKs' 5671). A port
#: left to its default that is taken (by another ``aiosb serve``, or by a port of this
#: server the user named) gives way to a free port, said in the banner; a port the user
#: named, and with ``--microsoft-emulator`` Microsoft's, is served or an error.
HTTP_PORT, AMQP_PORT, AMQPS_PORT = 5380, 5672, 5671
#: Microsoft's ports, as its emulator listens: AMQP (no TLS) and HTTP.
MICROSOFT_AMQP_PORT, MICROSOFT_HTTP_PORT = 5672, 5300
#: The namespace served when neither ``--namespace`` nor ``--config`` names one.
DEFAULT_NAMESPACE = "sbemulatorns"
#: The event loops ``--loop`` names: ``auto`` is uvloop where it is installed (S-9).
LOOPS = ("auto", "uvloop", "asyncio")


class Ports(NamedTuple):
    """The ports a server listens on (0: a free one), and which of them (``"http"``,
    ``"amqp"``, ``"amqps"``) were left to their defaults, and so give way to free ports
    where they are taken. ``amqp`` is None without AMQP (``--no-amqp``), ``amqps``
    without AMQP over TLS."""

    http: int
    amqp: int | None
    amqps: int | None
    free_if_taken: frozenset[str]


def port_variable(environ: Mapping[str, str], name: str, default: int) -> int:
    """The port ``name`` in ``environ`` gives, else ``default``: how Microsoft's emulator
    is moved (its compose file passes ``EMULATOR_HTTP_PORT`` and ``EMULATOR_AMQP_PORT`` to
    the container), taken by ``--microsoft-emulator`` where no flag gives the port.

    Raises :class:`ValueError`, naming the variable, for a value that is not a port."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or not 0 < int(text) <= 65535:
        raise ValueError(f"{name}={text!r} in the environment is not a port (1-65535); "
                         "unset it, or give the port with a flag")
    return int(text)


def ports(http: int | None, amqp: int | None, amqps: int | None,
          microsoft: bool, environ: Mapping[str, str] | None = None
          ) -> tuple[int, int, int, frozenset[str]]:
    """The HTTP, AMQP and AMQP-over-TLS ports to serve on, from those the user named
    (``None``: not named), and which of them (``"http"``, ``"amqp"``, ``"amqps"``) were
    left to their defaults, and so give way to free ports if taken: what the user named
    never moves, whatever its number. A port named 0 makes every port not named 0 as
    well: a server on free ports takes none of the well-known ones (a second server, a
    test suite beside another). With ``microsoft``, Microsoft's ports, or those its
    environment variables name (``environ``, by default the process's), all as named:
    an application left unchanged would reach whatever else holds them (Microsoft's
    emulator in Docker), so a taken one is an error, not moved."""
    if not microsoft:
        environ = {}
    elif environ is None:
        environ = os.environ
    if http is None and environ.get("EMULATOR_HTTP_PORT", "").strip():
        http = port_variable(environ, "EMULATOR_HTTP_PORT", MICROSOFT_HTTP_PORT)
    if amqp is None and environ.get("EMULATOR_AMQP_PORT", "").strip():
        amqp = port_variable(environ, "EMULATOR_AMQP_PORT", MICROSOFT_AMQP_PORT)
    free = 0 in (http, amqp, amqps)
    soft: set[str] = set()

    def default(which: str, port: int) -> int:
        if free:
            return 0
        if not microsoft:
            soft.add(which)
        return port

    if http is None:
        http = default("http", MICROSOFT_HTTP_PORT if microsoft else HTTP_PORT)
    if amqp is None:
        amqp = default("amqp", MICROSOFT_AMQP_PORT if microsoft else AMQP_PORT)
    if amqps is None:
        amqps = default("amqps", AMQPS_PORT)
    return http, amqp, amqps, frozenset(soft)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Every flag of ``aiosb serve``, as one value (the defaults are the flags').

    Attributes:
        host: The interface to listen on.
        port: The HTTP port (0: a free one). ``None``: the default, 5380 (with
            ``microsoft``, 5300 or ``EMULATOR_HTTP_PORT``); a default port that is taken
            gives way to a free one (not with ``microsoft``), a port given never moves,
            and a port given as 0 makes every port not given free too (:func:`ports`).
        amqp_port: The AMQP 1.0 port, the same way (default 5672, or
            ``EMULATOR_AMQP_PORT`` with ``microsoft``).
        amqps_port: The AMQP-over-TLS port, the same way (default 5671; none with
            ``microsoft`` unless given).
        amqp: Serve AMQP (``False``: ``--no-amqp``, HTTP only).
        key_name: The shared access key name requests are signed with.
        key: Its key; ``None``: the well-known development key (and, with
            ``microsoft``, Microsoft's too).
        keys: More keys, ``{name: (key, rights)}`` (``--send-key``, ``--listen-key``).
        namespace: The default namespace (AMQP's, and HTTP's at the root); ``None``:
            ``config``'s, else :data:`DEFAULT_NAMESPACE` (read back resolved).
        data_dir: Durable mode: keep everything in SQLite there; ``None``: in memory.
        fsync: With ``data_dir``: flush each commit to the disk before answering.
        tls: Serve HTTPS with a self-signed certificate made in ``tls_dir``.
        tls_cert: Serve HTTPS with this certificate (PEM), with ``tls_key``.
        tls_key: The certificate's private key (PEM).
        tls_dir: Where self-signed material is kept (``None``: per user,
            :func:`aiosb.server.tls.default_dir`); without ``tls``, the AMQP port's
            management over HTTPS uses it where ``cryptography`` is installed.
        config: Microsoft's emulator's ``Config.json``, read
            (:func:`aiosb.server.msconfig.load`): made in the namespace at start.
        microsoft: Listen and answer as Microsoft's emulator (``--microsoft-emulator``).
        explorer: Serve the Service Bus Explorer at ``/explorer/``.
        metrics: Serve Prometheus metrics at ``/metrics``.
        quiet: No line per request.
        allow_hosts: Names the HTTP port answers to besides localhost and IP addresses.
        loop: The event loop the command runs on: one of :data:`LOOPS`.
        ports: The ports to listen on (:class:`Ports`), resolved on construction.
    """

    host: str = "127.0.0.1"
    port: int | None = None
    amqp_port: int | None = None
    amqps_port: int | None = None
    amqp: bool = True
    key_name: str = DEV_KEY_NAME
    key: str | None = field(default=None, repr=False)  # secrets stay out of logs
    keys: Mapping[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=dict, hash=False, repr=False)
    namespace: str | None = None
    data_dir: str | Path | None = None
    fsync: bool = False
    tls: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_dir: str | Path | None = None
    config: EmulatorConfig | None = field(default=None, hash=False)
    microsoft: bool = False
    explorer: bool = True
    metrics: bool = False
    quiet: bool = False
    allow_hosts: tuple[str, ...] = ()
    loop: str = "auto"
    ports: Ports = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        for flag, port in (("--port", self.port), ("--amqp-port", self.amqp_port),
                           ("--amqps-port", self.amqps_port)):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{flag} must be between 0 and 65535")
        http, amqp, amqps, soft = ports(self.port, self.amqp_port, self.amqps_port,
                                        self.microsoft)
        # Microsoft's emulator serves no AMQP over TLS: with it, only where asked
        tls = self.amqp and not (self.microsoft and self.amqps_port is None)
        object.__setattr__(self, "ports", Ports(http, amqp if self.amqp else None,
                                                amqps if tls else None, soft))
        if self.config is not None:
            if self.namespace is not None and self.namespace != self.config.namespace:
                raise ValueError(f"--namespace {self.namespace} but "
                                 f"{self.config.source or 'the --config file'} names "
                                 f"{self.config.namespace}: give one")
            object.__setattr__(self, "namespace", self.config.namespace)
        elif self.namespace is None:
            object.__setattr__(self, "namespace", DEFAULT_NAMESPACE)
        if self.fsync and self.data_dir is None:
            raise ValueError("--fsync goes with --data-dir (in memory, nothing is written)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.loop not in LOOPS:
            raise ValueError(f"--loop must be one of {', '.join(LOOPS)}, not {self.loop!r}.")

    @property
    def served_namespace(self) -> str:
        """The default namespace, resolved (:attr:`namespace` is, once constructed)."""
        assert self.namespace is not None
        return self.namespace
