"""What every handler of the HTTP server shares: the request path decoded into a route,
the right a request needs, error answers, checked input (JSON bodies, numbers, seconds,
pages) and the client's time budget. Imports the vocabulary and aiohttp, nothing of the
server's handlers."""


from __future__ import annotations

import asyncio
import functools
import logging
import math
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from xml.sax.saxutils import escape

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ..._clock import within
from ...emulator import NAMESPACE_NAME
from ...errors import (
    InvalidArgument,
    OperationTimeout,
    ServiceBusError,
)
from ...protocol import (
    MAX_RECEIVE_WAIT,
)
from ...wire import aiosb_json as _aiosb_json
from ...wire import frames as _frames
from ...wire import status as _status

#: The longest a receive may wait, in seconds.
MAX_WAIT = MAX_RECEIVE_WAIT
#: How long a request's body may take to arrive, in seconds (:func:`read_body`: a
#: signed REST request's, the explorer's).
BODY_SECONDS = 30.0
PAGE = 100  # entries of a listing, unless $top asks for others (as Service Bus)
MAX_PAGE = 1000


class _ClientsBytes(logging.Filter):
    """A request the client malformed is the client's error (answered 400), not the
    server's: aiohttp logs one after the first on a connection at ERROR with its
    traceback, so an unauthenticated client could fill the log (found by fuzzing, #48).
    Such a record is told at DEBUG, as aiohttp tells the first, or not at all."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return HTTP_LOG.isEnabledFor(logging.DEBUG)
        return True


#: The logger of the HTTP server's connections (aiohttp's ``logger``): aiohttp's own
#: records, but a client's malformed bytes never above DEBUG (:class:`_ClientsBytes`).
HTTP_LOG = logging.getLogger("aiosb.server.http")
HTTP_LOG.addFilter(_ClientsBytes())
_MAX_SEGMENT = 512


@dataclass(frozen=True, slots=True)
class Route:
    namespace: str
    segments: tuple[str, ...]  # decoded, below the namespace
    #: The namespace is the server's default, served at the root (as a namespace's own
    #: host serves it), not named by the path's first segment.
    root: bool = False
    path: str = field(init=False)  # what a signature's scope covers

    def __post_init__(self) -> None:
        named = self.segments if self.root else (self.namespace, *self.segments)
        object.__setattr__(self, "path", "/" + "/".join(named).lower())

    @property
    def base(self) -> str:
        """The URL path of the namespace: ``""`` at the root, else ``/NAME``."""
        return "" if self.root else "/" + urllib.parse.quote(self.namespace)


@functools.lru_cache(maxsize=1024)  # clients use the same few paths over and over
def segments_of(raw_path: str) -> tuple[str, ...]:
    """The request path's decoded segments, refusing path tricks."""
    path = raw_path.split("?", 1)[0]
    if not path.startswith("/"):
        raise InvalidArgument("the request path must start with '/'.")
    parts = path[1:].split("/") if path != "/" else []
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing slash is harmless
    segments: list[str] = []
    for part in parts:
        try:
            decoded = urllib.parse.unquote(part, errors="strict")
        except UnicodeDecodeError:
            raise InvalidArgument(f"path segment {part[:60]!r} is not valid UTF-8.") from None
        # An encoded slash is a slash: the official administration clients send an
        # entity name with slashes ("app/rules/t") as one percent-encoded segment.
        for text in decoded.split("/") if "/" in decoded else (decoded,):
            if text in ("", ".", "..") or len(text) > _MAX_SEGMENT:
                raise InvalidArgument(
                    f"path segment {text[:60]!r} is not allowed: entity paths have no "
                    f"empty, '.' or '..' segments and no segment over {_MAX_SEGMENT} "
                    "characters."
                )
            if "\\" in text or not text.isprintable():
                raise InvalidArgument(
                    f"path segment {text[:60]!r} is not allowed: no backslashes or control "
                    "characters."
                )
            segments.append(text)
    return tuple(segments)


@functools.lru_cache(maxsize=1024)
def split(raw_path: str, root: str | None = None) -> Route:
    """Decode the request path into namespace and segments: the first segment names the
    namespace, or, given ``root``, the path is that namespace's, read at the root (see
    :func:`reads_at_root` for which reading a server with a default namespace takes)."""
    segments = segments_of(raw_path)
    if root is not None:
        return Route(root, segments, root=True)
    if not segments:
        raise InvalidArgument(
            "no namespace in the path: use /{namespace}/{entity}/messages and the like."
        )
    return Route(segments[0], segments[1:])


def encoded_slash_first(raw_path: str) -> bool:
    """Whether the request path's first segment holds an encoded slash (``/txt%2Fa``):
    an entity path sent whole, as the official administration clients send every entity
    name (a namespace's name has no slash)."""
    first = raw_path.split("?", 1)[0].lstrip("/").split("/", 1)[0]
    return "%2f" in first.lower()


def reads_at_root(
    segments: tuple[str, ...],
    namespace_exists: Callable[[str], bool],
    root_has: Callable[[str], bool],
    *,
    whole: bool = False,
) -> bool:
    """Whether a server with a default namespace reads a path of ``segments`` at the
    root, as the default namespace's, rather than as ``/{namespace}/...``.

    The path is the default namespace's, the whole of it an entity path as on Service
    Bus, when its first segment was sent with an encoded slash (``whole``: the official
    administration clients send ``txt/a`` as ``/txt%2Fa``, #47; see
    :func:`encoded_slash_first`). Otherwise the first segment names a namespace when it
    is one the server has, or when it could be one and is not an entity of the default
    namespace; the path is the default namespace's when it is empty, starts with a ``$``
    name (``$Resources``, ``$namespaceinfo``, ``$faults``), has one segment (``PUT
    /orders``), names an entity of the default namespace first, or starts with what no
    namespace is called. A namespace is named on its first use only when none of these
    holds.
    """
    if whole or not segments or segments[0].startswith("$"):
        return True
    first = segments[0]
    if namespace_exists(first):
        return False
    return len(segments) == 1 or root_has(first) or not NAMESPACE_NAME.fullmatch(first)


def right_needed(method: str, segs: tuple[str, ...]) -> str:
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


def error_response(exc: ServiceBusError, status: int | None = None) -> web.Response:
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


async def read_body(request: web.Request) -> bytes:
    """The request's body, which must arrive within :data:`BODY_SECONDS` (read when
    called: patch it here): a client that stops sending it, stalled or hostile, is
    answered :class:`InvalidArgument` instead of holding its handler and its connection
    for ever. A body in whole already (most) takes no timer. aiohttp keeps what it read:
    handlers read it again at no cost."""
    if request.content.is_eof():
        return await request.read()
    try:
        async with asyncio.timeout(BODY_SECONDS):
            return await request.read()
    except TimeoutError:
        raise InvalidArgument(
            f"the request body did not arrive within {BODY_SECONDS:g} s.") from None


def json_body(data: bytes) -> Any:
    """JSON exactly as :func:`json.loads` reads it, faster
    (:func:`aiosb.wire.json_values.loads`)."""
    try:
        return _aiosb_json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"the body is not valid JSON: {str(exc)[:120]}.") from None


def object_body(
    data: bytes, allowed: dict[str, Any], frame: str | None = None
) -> dict[str, Any]:
    """A JSON object whose keys are all in ``allowed`` (name -> default); ``frame``: the
    body is framed (:mod:`aiosb.wire.frames`), this the JSON's length."""
    value = json_body(data) if frame is None else _frames.unframe(data, frame)
    if not isinstance(value, dict):
        raise InvalidArgument("the body must be a JSON object.")
    unknown = value.keys() - allowed.keys()
    if unknown:
        raise InvalidArgument(
            f"unknown field(s) {', '.join(sorted(unknown))[:200]}; known: "
            f"{', '.join(sorted(allowed))}."
        )
    return {**allowed, **value}


def whole(name: str, value: Any, low: int = 0, high: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{name} is {value!r:.60}; it must be a whole number from "
                              f"{low} to {high}.")
    return value


def as_seconds(name: str, value: Any, high: float) -> float:
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


@functools.lru_cache(maxsize=64)
def budget_of(header: str) -> float:
    """The client's budget (the timeout header) in seconds; remembered, since a client
    sends the same one with every request (#16)."""
    return as_seconds(_status.TIMEOUT_HEADER, header, MAX_WAIT)


def page_of(request: web.Request) -> slice:
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


def str_or_none(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, not {value!r:.60}.")
    return value


T = TypeVar("T")


async def bounded(limit: float | None, work: Awaitable[T], wait: float = 0.0) -> T:
    """Run ``work`` within the client's budget ``limit`` (seconds; ``None``: no bound),
    plus ``wait`` (a receive's own wait): a hair under the client's own deadline, so
    that the operation is given up here first and a timed-out operation never takes
    effect later.

    The work runs at once, up to its first wait (:func:`~aiosb._clock.within`); most
    operations (a send, a settlement) finish without one, and then no timer is armed at
    all (S-3). One that waits goes on under the timer.

    Raises:
        OperationTimeout: The budget ran out.
    """
    if limit is None:
        return await work
    deadline = asyncio.get_running_loop().time() + max(0.0, limit + wait - 1e-6)
    try:
        return await within(deadline, work)
    except TimeoutError:
        raise OperationTimeout(
            f"the operation did not finish within the client's {limit:g} s."
        ) from None
