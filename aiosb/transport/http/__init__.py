"""The HTTP transport: the Service Bus REST protocol over HTTP/1.1.

Two kinds of URL:

* ``http://HOST:PORT/NAME``: namespace ``NAME`` of an ``aiosb serve`` emulator server.
  The transport uses the server's aiosb extensions (see :mod:`aiosb.server.http`)
  for what the REST protocol lacks, so everything the embedded emulator does works here
  too, except sessions. Without a credential it signs with the server's well-known
  development key.
* ``https://NAME.servicebus.windows.net``: a real namespace, with the documented REST
  protocol only. Send (single and batch), peek-lock and receive-and-delete (one message
  per request), complete, abandon, renew, and management work; peek, defer,
  dead-letter, receive of deferred messages, schedule with sequence numbers, cancel of
  scheduled messages, and application properties of types the protocol cannot carry
  raise :class:`~aiosb.errors.InvalidOperation` saying so. Use the AMQP transport (a
  connection string) for those.

Sessions are not part of the REST protocol: asking for a session raises
:class:`~aiosb.errors.InvalidOperation` on both.

One connection pool per transport (:mod:`aiosb.transport.http._h1`, a lean client: #16)
keeps connections alive (it also keeps a receive from landing on a front end that holds
its locked messages, PT-15). Requests are signed with a shared access signature cached
until five minutes before it expires.
The transport never retries: status codes map to :mod:`aiosb.errors` with the right
``retryable``, and :mod:`aiosb.client` retries what is transient.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, Literal

from yarl import URL

from ..._endpoint import Endpoint, Proxy, Verify
from ...auth import DEV_KEY, DEV_KEY_NAME, SasCredential
from ...entities import DEAD_LETTER_SUFFIX
from ...errors import (
    ClientClosed,
    EntityUnavailable,
    InvalidArgument,
    InvalidOperation,
    MessagingError,
    ServiceBusError,
    TransientError,
)
from ...message import Message, ReceivedMessage
from ...protocol import (
    ReceiveRequest,
    SessionInfo,
    SessionRequest,
    Settlement,
    check_columns,
    received_from_columns,
)
from ...wire import aiosb_json as _json
from ...wire import frames as _frames
from ...wire import rest as _rest
from ...wire import status as _status
from .._tls_failures import tls_failure
from ._atom_management import NO_SESSIONS as _NO_SESSIONS
from ._atom_management import HttpManagement
from ._atom_management import quote as _quote
from ._h1 import ConnectFailed, Pool, ProxyRefused
from ._remote_faults import RemoteFaults

__all__ = ["HttpTransport", "RemoteFaults"]

_JSON = "application/json"
_JSON_HEADERS = {"Content-Type": _JSON}
_ACCEPT_FRAMES = f"{_frames.CONTENT_TYPE}, {_JSON}"


class HttpTransport(HttpManagement):
    """A :class:`~aiosb.transport.Transport` over HTTP to an emulator server or a real
    namespace.

    :func:`aiosb.connect` makes it from the :class:`~aiosb._endpoint.Endpoint` it
    parsed; :meth:`from_url` makes one from a URL.

    Args:
        endpoint: An ``http://HOST:PORT/NAME`` or ``https://NAME.servicebus.windows.net``
            endpoint; its credential signs every request (for ``http://``, by default
            the emulator server's development key).
        operation_timeout: The client's budget for one operation, told to an emulator
            server so that it gives up an operation its client gave up on.
        extensions: Use the emulator server's aiosb extensions (default: for ``http://``).
        max_message_size: The namespace's limit in bytes (256 KB by default).

    Raises:
        InvalidArgument: Not an HTTP endpoint, one without a namespace, or an ``https``
            one without a credential.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        operation_timeout: float = 60.0,
        extensions: bool | None = None,
        max_message_size: int = 256 * 1024,
    ) -> None:
        if not isinstance(endpoint, Endpoint):
            raise InvalidArgument(
                f"HttpTransport takes an Endpoint, not {endpoint!r}: "
                "HttpTransport.from_url(url) makes one from a URL."
            )
        credential = endpoint.credential
        scheme, path = endpoint.scheme, endpoint.path
        url = endpoint.base_url
        if endpoint.kind != "http" or not endpoint.host:
            raise InvalidArgument(f"{url!r} is not an http:// or https:// URL.")
        if scheme == "https" and not path:
            name = endpoint.host.split(".")[0]
            base = f"https://{endpoint.netloc}"
        else:
            name = path
            base = f"{scheme}://{endpoint.netloc}/{_quote(path)}"
        if not name or "/" in name:
            raise InvalidArgument(
                f"{url!r} names no namespace: use http://HOST:PORT/NAME or "
                "https://NAME.servicebus.windows.net."
            )
        if credential is None:
            if scheme == "https":
                raise InvalidArgument(
                    f"{url} needs a credential: credential=('KeyName', 'key') or a SasCredential."
                )
            credential = SasCredential(DEV_KEY_NAME, DEV_KEY)
        elif not isinstance(credential, SasCredential):
            raise InvalidArgument(
                f"the HTTP transport signs with a shared access key: credential=('KeyName', "
                f"'key') or a SasCredential, not {type(credential).__name__}."
            )
        self.namespace = name
        self.url = url
        self.endpoint = endpoint
        self.max_message_size = max_message_size
        self.extensions = scheme == "http" if extensions is None else bool(extensions)
        self._base = base
        self._resource = base.lower()
        self._credential = credential
        self._timeout_header = repr(operation_timeout)
        self._urls: dict[str, URL] = {}
        self._token = ""
        self._token_until = 0.0
        self._pool: Pool | None = None
        self._closed = False
        self._answered = False  # has anything at this address ever answered?
        #: The server said it takes framed batches (raw bodies: :mod:`aiosb.wire.frames`).
        self._frames = False
        self._locations: dict[str, int] = {}  # lock token -> sequence number (REST mode)

    @classmethod
    def from_url(
        cls,
        url: str,
        credential: SasCredential | None = None,
        *,
        connection_verify: Verify = None,
        proxy: str | Proxy | Literal[False] | None = None,
        **options: Any,
    ) -> HttpTransport:
        """The transport to ``url`` (an ``http(s)://`` URL or the connection string
        ``aiosb serve`` prints), parsed once as :func:`aiosb.connect` parses it;
        ``options`` are the constructor's. Raises as the constructor does."""
        endpoint = Endpoint.parse(url, credential, verify=connection_verify, proxy=proxy)
        return cls(endpoint, **options)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._pool else "new"
        mode = "aiosb extensions" if self.extensions else "REST"
        return f"<HttpTransport {self.url} ({mode}) {state}>"

    # -- plumbing ------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the connection pool (done by ``async with aiosb.connect(...)``)."""
        if self._closed:
            raise ClientClosed(f"{self.url} was closed; connect again.")
        if self._pool is None:
            endpoint = self.endpoint
            self._pool = Pool(
                URL(self._base), limit=64, keepalive=60,
                ssl_context=endpoint.ssl_context() if endpoint.tls else None,
                proxy=endpoint.proxy,
            )

    async def aclose(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def faults(self) -> RemoteFaults:
        """Fault injection on the emulator server's namespace (``/{ns}/$faults``)."""
        if not self.extensions:
            raise InvalidOperation(f"{self.url} is not an emulator server: it has no faults.")
        return RemoteFaults(self)

    def _authorization(self) -> str:
        now = time.time()
        if now >= self._token_until:
            lifetime = self._credential.token_lifetime
            self._token = self._credential.token(self._resource, expiry=now + lifetime)
            self._token_until = now + max(lifetime - 300, lifetime / 2)
        return self._token

    async def _request(
        self,
        method: str,
        path: str,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        settling: bool = False,
        no_content_type: bool = False,
    ) -> tuple[int, Any, bytes]:
        pool = self._pool
        if pool is None:
            raise ClientClosed(
                f"the connection to {self.url} is {'closed' if self._closed else 'not open yet'}."
            )
        sent = {"Authorization": self._authorization()}
        if self.extensions:
            sent[_status.TIMEOUT_HEADER] = self._timeout_header
        if headers:
            sent.update(headers)
        if data is not None and not no_content_type and "Content-Type" not in sent:
            sent["Content-Type"] = "application/octet-stream"
        url = self._urls.get(path)
        if url is None:  # parsed once per path
            if len(self._urls) >= 256:
                self._urls.clear()
            url = self._urls[path] = URL(f"{self._base}/{path}" if path else self._base)
        if params:
            url = url.update_query(params)
        try:
            status, reason, answer, body = await pool.request(method, url, sent, data)
        except ConnectFailed as exc:
            if isinstance(exc, ProxyRefused) and exc.status in (403, 407):
                # No retry heals a refusal on principle.
                raise InvalidOperation(f"{exc.os_error}: " + (
                    "it wants credentials; give them in the proxy's URL, "
                    "http://user:password@host:port." if exc.status == 407
                    else "it does not let this address through."
                )) from None
            failed = tls_failure(exc, f"{url.scheme}://{url.authority}",
                                 "is it an http:// address?")
            if failed is not None:  # no certificate or protocol heals by retrying
                raise failed from None
            if not self._answered:
                # Nothing has ever answered at this address: a server not started or a
                # wrong URL, said at once rather than retried for the operation timeout
                # (an outage, for pairing). Once it has answered, a refusal is transient.
                hint = "; start it with `aiosb serve`" if self.extensions else ""
                where = f"{url.scheme}://{url.authority}"
                raise EntityUnavailable(
                    f"nothing is listening at {where}{hint} ({exc.os_error})."
                ) from None
            raise TransientError(
                f"{method} {self.url}/{path} failed on the connection ({exc}); try again."
            ) from exc
        except ValueError as exc:  # a header that would split the request
            raise InvalidArgument(f"{method} {self.url}/{path}: {exc}.") from None
        except OSError as exc:
            raise TransientError(
                f"{method} {self.url}/{path} failed on the connection ({exc or type(exc).__name__})"
                "; try again."
            ) from exc
        self._answered = True
        if status >= 400:
            raise self._error(status, reason, answer, body, settling=settling)
        if status >= 300:  # nothing was done: said, not taken for success
            location = answer.get("Location")
            raise InvalidOperation(
                f"{method} {self.url}/{path} was answered {status} {reason}"
                + (f" (to {location})" if location else "")
                + "; aiosb follows no redirects: connect to the address the server names."
            )
        encoding = answer.get("Content-Encoding", "identity").strip().lower()
        if encoding != "identity":  # asked for none; such a body would be misread
            raise MessagingError(
                f"{method} {self.url}/{path} was answered in {encoding!r} encoding, which "
                "aiosb did not ask for and does not read."
            )
        return status, answer, body

    @staticmethod
    def _error(
        status: int, reason: str, headers: Any, body: bytes, *, settling: bool
    ) -> ServiceBusError:
        text = body.decode("utf-8", "replace")
        start, end = text.find("<Detail>"), text.find("</Detail>")
        if start >= 0 and end > start:
            from xml.sax.saxutils import unescape

            detail = unescape(text[start + len("<Detail>"):end])
        else:
            detail = text.strip()[:500] or reason
        return _status.error_from_status(
            status,
            detail,
            name=headers.get(_status.ERROR_HEADER),
            retryable=headers.get(_status.RETRYABLE_HEADER),
            settling=settling,
        )

    async def _extension(
        self, entity: str, op: str, payload: dict[str, Any], *, finite: bool = False,
        framed: bool = False, frames_back: bool = False,
    ) -> Any:
        """POST ``payload`` to an aiosb extension; ``finite``: every float in it is finite
        (a batch, values :func:`...wire.aiosb_json.encode_value` wrote), so
        :func:`...wire.aiosb_json.dumps` writes
        it; otherwise :mod:`json` does (a bare NaN is its, not orjson's null). ``framed``:
        its batch's bodies are raw bytes, sent after the JSON; ``frames_back``: a framed
        answer is welcome (:mod:`aiosb.wire.frames`)."""
        headers = _JSON_HEADERS
        if framed:
            data, length = _frames.frame(payload)
            headers = {"Content-Type": _frames.CONTENT_TYPE, _frames.LENGTH_HEADER: str(length)}
        elif finite:
            data = _json.dumps(payload)
        else:
            data = json.dumps(payload, separators=(",", ":")).encode()
        if frames_back:
            headers = {**headers, "Accept": _ACCEPT_FRAMES}
        _, answer, body = await self._request(
            "POST", f"{_quote(entity)}/$aiosb/{op}", data=data, headers=headers
        )
        # Said on every answer of a server that takes frames: one replaced at this
        # address by an older one stops the framing at its first answer.
        self._frames = answer.get(_frames.TAKES_FRAMES) == "1"
        length = answer.get(_frames.LENGTH_HEADER)
        if length is not None:
            try:
                return _frames.unframe(body, length)
            except InvalidArgument as exc:
                # Not retried: what the operation took (a receive's messages) is taken.
                raise MessagingError(f"the server's framed answer is bad: {exc}") from None
        return _json.loads(body) if body else None

    async def _post_messages(
        self, entity: str, op: str, messages: Sequence[Message], **fields: Any
    ) -> Any:
        """POST ``messages`` to send or schedule, with ``fields`` (:meth:`_post_batch`)."""
        return await self._post_batch(
            entity, op, len(messages), lambda raw: _json.encode_messages(messages, raw), fields
        )

    async def _post_batch(
        self, entity: str, op: str, count: int, encode: Callable[[bool], dict[str, Any]],
        fields: dict[str, Any],
    ) -> Any:
        """POST ``count`` messages, as ``encode(raw)`` writes them, to send or schedule,
        with ``fields``: a batch framed while the server takes frames. A framed batch
        refused (400: a server from before frames now at this address) goes again once
        as JSON; a refused body stores nothing."""
        framed = self._frames and count > 1
        try:
            return await self._extension(
                entity, op, {**encode(framed), **fields}, finite=True, framed=framed
            )
        except InvalidArgument:
            if not framed:
                raise
            self._frames = False
        return await self._extension(entity, op, {**encode(False), **fields}, finite=True)

    def _lacks(self, what: str) -> InvalidOperation:
        return InvalidOperation(
            f"The Service Bus REST protocol has no {what}, so the HTTP transport cannot do it "
            f"on {self.url}; use the AMQP transport (a connection string) for it."
        )

    # -- data ----------------------------------------------------------------------------

    async def send(
        self, entity: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        """Send one message or a batch; a transaction goes to the emulator server as one
        (PT-16 to PT-18 apply there) and to a real namespace as one atomic batch, since
        the REST protocol has no transactions."""
        if self.extensions:
            if transaction:
                await self._post_messages(entity, "send", messages, transaction=True)
            else:
                await self._post_messages(entity, "send", messages)
            return
        if len(messages) == 1 and messages[0].content_type != _rest.BATCH_CONTENT_TYPE:
            msg = messages[0]
            headers = _rest.custom_headers(msg.application_properties)
            headers["BrokerProperties"] = json.dumps(_rest.rest_broker_properties(msg))
            if msg.content_type:
                headers["Content-Type"] = msg.content_type
            await self._request(
                "POST",
                f"{_quote(entity)}/messages",
                data=msg.body,
                headers=headers,
                no_content_type=not msg.content_type,
            )
            return
        batch = []
        for msg in messages:
            try:
                text = msg.body.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgument(
                    "a REST batch carries bodies as text, and one body is not UTF-8; send "
                    "binary messages one at a time or use the AMQP transport."
                ) from None
            for name, value in msg.application_properties.items():
                _rest.custom_value(name, value, exact=True)  # refuses what REST cannot carry
            batch.append(
                {
                    "Body": text,
                    "BrokerProperties": _rest.rest_broker_properties(msg),
                    "UserProperties": {
                        k: _rest.http_date(v.timestamp()) if isinstance(v, _dt.datetime) else v
                        for k, v in msg.application_properties.items()
                    },
                }
            )
        await self._request(
            "POST",
            f"{_quote(entity)}/messages",
            data=json.dumps(batch).encode(),
            headers={"Content-Type": _rest.BATCH_CONTENT_TYPE},
        )

    async def send_columns(
        self, entity: str, bodies: list[bytes], columns: dict[str, Any]
    ) -> None:
        """Send messages given as columns of their sent fields (``ColumnTransport``: the
        syphon's move, #16), refused as :class:`~aiosb.Message` refuses a field: by the
        server, which stores them as columns; over REST, as the messages they make."""
        check_columns(bodies, columns)
        if not self.extensions:
            await self.send(entity, received_from_columns(bodies, columns))
            return
        await self._post_batch(entity, "send", len(bodies), lambda raw: {
            "batch": _json.encode_batch_columns(bodies, columns, raw)
        }, {})

    async def schedule(self, entity: str, messages: Sequence[Message]) -> list[int]:
        if not self.extensions:
            raise self._lacks(
                "schedule operation that returns sequence numbers (send a message with "
                "scheduled_enqueue_time instead)"
            )
        answer = await self._post_messages(entity, "schedule", messages)
        return list(answer["sequence_numbers"])

    async def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> None:
        if not self.extensions:
            raise self._lacks("cancel of scheduled messages")
        await self._extension(entity, "cancel", {"sequence_numbers": list(sequence_numbers)})

    async def session(self, entity: str, request: SessionRequest) -> SessionInfo:
        raise InvalidOperation(_NO_SESSIONS)

    async def receive(self, entity: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        if request.session_id is not None:
            raise InvalidOperation(_NO_SESSIONS)
        if self.extensions:
            return _json.decode_received_batch(await self._receive_batch(entity, request))
        if request.peek:
            raise self._lacks("peek (browse)")
        if request.sequence_numbers is not None:
            raise self._lacks("receive of deferred messages")
        path = entity + (DEAD_LETTER_SUFFIX if request.sub_queue else "")
        found: list[ReceivedMessage] = []
        wait = request.max_wait
        while len(found) < request.max_messages:
            msg = await self._receive_one(path, request.mode, wait)
            if msg is None:
                if found or wait is not None:
                    break
                continue  # no deadline: poll again
            found.append(msg)
            wait = 0.0  # the rest: only what is there now
        return found

    async def _receive_batch(self, entity: str, request: ReceiveRequest) -> dict[str, Any]:
        """A receive through the extension: the answer's batch (the batch encoding)."""
        answer = await self._extension(
            entity,
            "receive",
            {
                "mode": request.mode,
                "max_messages": request.max_messages,
                "max_wait": request.max_wait,
                "sub_queue": request.sub_queue,
                "peek": request.peek,
                "from_sequence_number": request.from_sequence_number,
                "sequence_numbers": None
                if request.sequence_numbers is None
                else list(request.sequence_numbers),
                "batch": True,
            },
            frames_back=True,
        )
        batch: dict[str, Any] = answer["batch"]
        return batch

    async def receive_columns(
        self, entity: str, request: ReceiveRequest
    ) -> tuple[list[bytes], dict[str, Any]]:
        """What :meth:`receive` gives, as the bodies and, by field name, a list of each
        message's value (``ColumnTransport``: the syphon's move, #16): read from the
        server's batch encoding with no message object per message."""
        if self.extensions and request.session_id is None:
            return _json.decode_received_columns(await self._receive_batch(entity, request))
        return _json.received_columns_of(await self.receive(entity, request))

    async def _receive_one(
        self, path: str, mode: str, wait: float | None
    ) -> ReceivedMessage | None:
        seconds = 60.0 if wait is None else wait
        timeout = repr(seconds) if self._base.startswith("http:") else str(math.ceil(seconds))
        status, headers, body = await self._request(
            "POST" if mode == "peek_lock" else "DELETE",
            f"{_quote(path)}/messages/head",
            params={"timeout": timeout},
        )
        if status == 204:
            return None
        try:
            broker = json.loads(headers.get("BrokerProperties") or "{}")
        except ValueError:
            raise TransientError(
                "the server answered a receive with bad BrokerProperties."
            ) from None
        msg = _rest.received_from_rest(broker, body, headers, path)
        if msg.lock_token is not None:
            if len(self._locations) > 10_000:
                self._locations.clear()
            self._locations[msg.lock_token] = msg.sequence_number
        return msg

    async def settle(self, entity: str, settlement: Settlement) -> list[float] | None:
        if self.extensions:
            props = settlement.properties_to_modify
            answer = await self._extension(
                entity,
                "settle",
                {
                    "action": settlement.action,
                    "lock_tokens": list(settlement.lock_tokens),
                    "sub_queue": settlement.sub_queue,
                    "reason": settlement.reason,
                    "description": settlement.description,
                    "properties_to_modify": None
                    if props is None
                    else {k: _json.encode_value(v) for k, v in props.items()},
                },
                finite=True,  # floats only in the encoded properties (#16: orjson)
            )
            locked: list[float] | None = answer["locked_until"]
            return locked
        methods = {"complete": "DELETE", "abandon": "PUT", "renew": "POST"}
        method = methods.get(settlement.action)
        if method is None:
            raise self._lacks(settlement.action.replace("_", "-"))
        if settlement.properties_to_modify:
            raise self._lacks("way to modify properties when a lock is released")
        path = entity + (DEAD_LETTER_SUFFIX if settlement.sub_queue else "")
        until: list[float] = []
        for token in dict.fromkeys(settlement.lock_tokens):
            seq = self._locations.get(token, 0)
            _, headers, _ = await self._request(
                method,
                f"{_quote(path)}/messages/{seq}/{urllib.parse.quote(token, safe='')}",
                settling=True,
            )
            if settlement.action != "renew":
                self._locations.pop(token, None)
                continue
            exact = headers.get("x-aiosb-locked-until")
            if exact is not None:
                until.append(float(exact))
            else:
                broker = json.loads(headers.get("BrokerProperties") or "{}")
                stamp = broker.get("LockedUntilUtc")
                until.append(
                    _rest.parse_http_date("LockedUntilUtc", stamp).timestamp()
                    if stamp else time.time()
                )
        return until if settlement.action == "renew" else None
