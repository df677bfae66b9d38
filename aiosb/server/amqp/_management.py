"""An entity's ``$management`` node: the request/response operations of the official
SDKs (peek, deferred receive, schedule and cancel, lock renewal, settlement by lock
token, session lock and state, session listing, batch delete), each one broker call or
a few.

A request is an AMQP message on the client's sender link to ``<entity>/$management``:
application properties ``operation`` (``com.microsoft:renew-lock``, ...) and an
amqp-value map body. The reply goes out on the client's receiver link of the same
node: ``correlation-id`` = the request's message-id, application properties
``statusCode`` (200, 204 for nothing found, or the error's status),
``statusDescription`` and, on failure, ``errorCondition`` (the AMQP condition the SDK
turns into its own exception), and an amqp-value map body.

Map keys and values as the SDKs write them (``lock-tokens`` are UUIDs, times AMQP
timestamps); see ``tests/amqp_server/test_management.py`` for each request as the SDKs send it, and
:mod:`._rule_descriptions` for the rule descriptions.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ... import errors
from ...errors import InvalidArgument, ServiceBusError
from ...protocol import ManagementRequest, ReceiveMode, ReceiveRequest, SessionRequest, Settlement
from ...rules import rule_path
from . import performatives as p
from ._cbs import Tokens
from ._pump import instant
from ._receiving import delivery_payload
from ._rule_descriptions import describe, rule_of
from .codec import Array, DecodeError, Described, Int, Symbol, ULong, encode
from .messages import APP_PROPERTIES, PROPERTIES, VALUE, sections_of, to_message

if TYPE_CHECKING:
    from ...emulator import EmulatorNamespace, Journal

__all__ = ["BATCH_DELETE_MOST", "Management"]

_VENDOR = "com.microsoft:"
_DISPOSITIONS = {"completed": "complete", "abandoned": "abandon", "defered": "defer",
                 "deferred": "defer", "suspended": "dead_letter"}
#: The HTTP-like status of each error class (the most specific first); 500 otherwise.
_STATUS: tuple[tuple[type[ServiceBusError], int], ...] = (
    (errors.ServerBusy, 503),
    (errors.OperationTimeout, 408),
    (errors.EntityNotFound, 404),
    (errors.EntityAlreadyExists, 409),
    (errors.MessageNotFound, 404),
    (errors.Unauthorized, 401),
    (errors.MessageLockLost, 410),
    (errors.SessionLockLost, 410),
    (errors.SessionCannotBeLocked, 410),
    (errors.InvalidArgument, 400),
    (errors.InvalidOperation, 400),
    (errors.MessageSizeExceeded, 413),
    (errors.QuotaExceeded, 403),
)
#: The .NET DateTime.MaxValue the SDKs send as get-message-sessions' last-updated-time to
#: mean "no time" (list the sessions with messages or state); the codec clamps it to the
#: end of datetime's range.
_NO_TIME = _dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_dt.UTC)
#: The most messages one batch delete takes, by tier (Service Bus's quotas; the .NET
#: SDK's ServiceBusPurgeMessagesOptions says so too).
BATCH_DELETE_MOST = {"basic": 500, "standard": 500, "premium": 4000}
Handler = Callable[["Management", "_Request"], Awaitable["tuple[int, dict[str, Any] | None]"]]


class _Request:
    """One management request: the entity it addresses and its body."""

    def __init__(self, path: str, sub_queue: str | None, body: dict[Any, Any]) -> None:
        self.path = path
        self.sub_queue = sub_queue
        self.body = body

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)

    def tokens(self) -> list[str]:
        found = self.body.get("lock-tokens")
        if not isinstance(found, list) or not found:
            raise InvalidArgument("the request names no lock-tokens.")
        return [str(t) for t in found]

    def numbers(self) -> list[int]:
        found = self.body.get("sequence-numbers")
        if not isinstance(found, list):
            raise InvalidArgument("the request names no sequence-numbers.")
        return [int(n) for n in found]

    def session_id(self) -> str | None:
        sid = self.body.get("session-id")
        return sid if isinstance(sid, str) and sid else None


class Management:
    """The ``$management`` nodes of one connection.

    Args:
        ns: The namespace.
        tokens: The connection's ``$cbs`` tokens (each operation checks its right).
        held: The sessions the connection's receiver links hold (path, id) -> lock.
        journal: Durable mode: commit before answering a change.
    """

    def __init__(self, ns: EmulatorNamespace, tokens: Tokens,
                 held: dict[tuple[str, str], str], journal: Journal | None) -> None:
        self.ns = ns
        self.tokens = tokens
        self.held = held
        self.journal = journal

    async def reply(self, path: str, sub_queue: str | None, payload: bytes) -> bytes:
        """The reply payload to one request on ``path``'s management node."""
        try:
            sections = sections_of(payload)
        except DecodeError as exc:
            return _reply(None, 400, str(exc), "amqp:decode-error")
        message_id = sections.properties[0] if sections.properties else None
        operation = (sections.application_properties or {}).get("operation")
        handler = _HANDLERS.get(str(operation).removeprefix(_VENDOR))
        if handler is None:
            return _reply(message_id, 501, f"the $management node does not do {operation!r}.",
                          "amqp:not-implemented")
        body = sections.value if isinstance(sections.value, dict) else {}
        try:
            status, result = await handler(self, _Request(path, sub_queue, body))
            if self.journal is not None:
                await self.journal.commit()
        except ServiceBusError as exc:
            code = next((s for cls, s in _STATUS if isinstance(exc, cls)), 500)
            # A management reply's error reaches the SDK's exception only as condition,
            # status and description: the exact class rides at the description's end.
            described = f"{p.description(exc, path)} [{p.ERROR_INFO}: {type(exc).__name__}]"
            return _reply(message_id, code, described, p.condition(exc))
        except (DecodeError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                AttributeError) as exc:  # what a malformed body breaks: said, not silent
            return _reply(message_id, 400, f"a malformed {operation} request: "
                          f"{type(exc).__name__}: {str(exc)[:200]}", _VENDOR + "argument-error")
        return _reply(message_id, status, "OK" if status == 200 else "No Content",
                      _NOTHING.get(str(operation).removeprefix(_VENDOR)) if status == 204
                      else None, result)

    def _check(self, request: _Request, needs: str) -> None:
        """The right ``needs`` on the node: a token for the entity covers its
        ``$management`` node; @azure/service-bus puts one for the node itself, and a
        dead-letter receiver for ``{entity}/$DeadLetterQueue``."""
        dlq = "/$DeadLetterQueue" if request.sub_queue == "deadletter" else ""
        self.tokens.check(f"{request.path}{dlq}/$management", needs)

    def _lock(self, request: _Request) -> tuple[str | None, str | None]:
        """The session a request names and this connection's lock on it."""
        sid = request.session_id()
        if sid is None:
            return None, None
        return sid, self.held.get((request.path.lower(), sid))

    # -- operations ------------------------------------------------------------------

    async def _renew_lock(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        until = await self.ns.settle(request.path, Settlement(
            "renew", request.tokens(), request.sub_queue))
        return 200, {"expirations": Array(type(instant(0)), [instant(t) for t in until or []])}

    async def _update_disposition(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        status = request.get("disposition-status")
        action = _DISPOSITIONS.get(str(status))
        if action is None:
            raise InvalidArgument(f"unknown disposition-status {status!r}.")
        sid, lock = self._lock(request)
        props = request.get("properties-to-modify")
        await self.ns.settle(request.path, Settlement(
            action, request.tokens(), request.sub_queue,  # type: ignore[arg-type]
            request.get("deadletter-reason"), request.get("deadletter-description"),
            {str(k): v for k, v in props.items()} if isinstance(props, dict) and props else None,
            sid, lock,
        ))
        return 200, None

    async def _peek(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        sid, lock = self._lock(request)
        found = await self.ns.receive(request.path, ReceiveRequest(
            max_messages=max(1, int(request.get("message-count", 1))), sub_queue=request.sub_queue,
            peek=True, from_sequence_number=int(request.get("from-sequence-number", 0)),
            session_id=sid, session_lock=lock,
        ))
        if not found:
            return 204, None
        return 200, {
            "messages": [{"message": delivery_payload(m, delivered=False)} for m in found]
        }

    async def _receive_deferred(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        sid, lock = self._lock(request)
        mode: ReceiveMode = (
            "receive_and_delete" if request.get("receiver-settle-mode") == 0 else "peek_lock"
        )
        found = await self.ns.receive(request.path, ReceiveRequest(
            mode, max_messages=max(1, len(request.numbers())), sub_queue=request.sub_queue,
            sequence_numbers=request.numbers(), session_id=sid, session_lock=lock,
        ))
        if not found:
            return 204, None
        out = []
        for m in found:
            entry: dict[str, Any] = {"message": delivery_payload(m)}
            if m.lock_token is not None:
                entry["lock-token"] = uuid.UUID(m.lock_token)
            out.append(entry)
        return 200, {"messages": out}

    async def _schedule(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Send")
        entries = request.get("messages")
        if not isinstance(entries, list):
            raise InvalidArgument("schedule-message needs messages.")
        messages = [to_message(sections_of(e["message"])) for e in entries]
        numbers = await self.ns.schedule(request.path, messages)
        return 200, {"sequence-numbers": Array(int, list(numbers))}

    async def _cancel(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Send")
        await self.ns.cancel_scheduled(request.path, request.numbers())
        return 200, None

    async def _renew_session(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        sid, lock = self._session(request)
        info = await self.ns.session(request.path, SessionRequest("renew", sid, lock))
        return 200, {"expiration": instant(info.locked_until or self.ns.now())}

    async def _get_state(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        sid, lock = self._session(request)
        info = await self.ns.session(request.path, SessionRequest("get_state", sid, lock))
        return 200, {"session-state": info.state}

    async def _set_state(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Listen")
        sid, lock = self._session(request)
        state = request.get("session-state")
        if state is not None and not isinstance(state, bytes):
            raise InvalidArgument("session-state must be binary.")
        await self.ns.session(request.path, SessionRequest("set_state", sid, lock, state))
        return 200, None

    async def _sessions(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        """A page of the entity's sessions: ``skip`` and ``top`` over the ids in order; a
        ``last-updated-time`` other than "no time" lists those whose state was set
        after it. The reply's ``skip`` is where the next page starts; 204 when the page
        is empty."""
        self._check(request, "Listen")
        skip, top = int(request.get("skip", 0)), int(request.get("top", 2**31 - 1))
        if skip < 0 or top < 1:
            raise InvalidArgument(f"skip is {skip} and top {top}; skip >= 0 and top >= 1.")
        since = request.get("last-updated-time")
        if since is not None and not isinstance(since, _dt.datetime):
            raise InvalidArgument("last-updated-time must be a timestamp.")
        after = None if since is None or since >= _NO_TIME else since.timestamp()
        ids = await self.ns.manage(ManagementRequest("sessions", None, request.path, after))
        page = ids[skip:skip + top]
        if not page:
            return 204, None
        return 200, {"skip": Int(skip + len(page)), "sessions-ids": Array(str, page)}

    async def _batch_delete(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        """Delete up to ``message-count`` of the oldest messages enqueued before
        ``enqueued-time-utc`` (.NET ``DeleteMessagesAsync``, the JavaScript SDK's
        ``deleteMessages``): at most 500 a request, 4,000 on premium, as Service Bus
        limits it; locked, deferred and scheduled messages stay. 204 with
        ``com.microsoft:message-not-found`` when none went.

        Taken as a receive of the available messages, the ones enqueued before the
        bound completed and the rest released (not counted as delivered)."""
        self._check(request, "Listen")
        count = request.get("message-count")
        most = BATCH_DELETE_MOST.get(self.ns.tier, BATCH_DELETE_MOST["standard"])
        if type(count) is not int or not 1 <= count <= most:
            raise InvalidArgument(
                f"message-count is {count!r}; a batch delete takes from 1 to {most} "
                f"messages on the {self.ns.tier} tier.")
        before = request.get("enqueued-time-utc")
        if before is not None and not isinstance(before, _dt.datetime):
            raise InvalidArgument("enqueued-time-utc must be a timestamp.")
        cutoff = self.ns.now() if before is None else before.timestamp()
        sid, lock = self._lock(request)
        taken = await self.ns.receive(request.path, ReceiveRequest(
            max_messages=count, max_wait=0, sub_queue=request.sub_queue,
            session_id=sid, session_lock=lock))
        gone = [m.lock_token for m in taken
                if m.lock_token is not None and m.enqueued_timestamp < cutoff]
        kept = [m.lock_token for m in taken
                if m.lock_token is not None and m.enqueued_timestamp >= cutoff]
        for action, tokens in (("release", kept), ("complete", gone)):
            if tokens:
                await self.ns.settle(request.path, Settlement(
                    action, tokens, request.sub_queue,  # type: ignore[arg-type]
                    session_id=sid, session_lock=lock))
        if not gone:
            return 204, None
        return 200, {"message-count": Int(len(gone))}

    async def _add_rule(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Manage")
        rule = rule_of(request.get("rule-name"), request.get("rule-description"))
        path = self._rule_path(request, rule.name)
        await self._rule(ManagementRequest("create", "rule", path, rule))
        return 200, None

    async def _remove_rule(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Manage")
        name = request.get("rule-name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument("remove-rule needs the rule-name.")
        await self._rule(ManagementRequest("delete", "rule", self._rule_path(request, name)))
        return 200, None

    async def _enumerate_rules(self, request: _Request) -> tuple[int, dict[str, Any] | None]:
        self._check(request, "Manage")
        skip, top = int(request.get("skip", 0)), int(request.get("top", 2**31 - 1))
        if skip < 0 or top < 1:
            raise InvalidArgument(f"skip is {skip} and top {top}; skip >= 0 and top >= 1.")
        rules = await self._rule(ManagementRequest("list", "rule", self._rule_path(request)))
        page = rules[skip:skip + top]
        if not page:
            return 204, None
        return 200, {"rules": [{"rule-description": describe(r)} for r in page]}

    async def _rule(self, request: ManagementRequest) -> Any:
        """A rule operation; what it does not find is named by the rule's own path (the
        reply would name the subscription, which exists)."""
        try:
            return await self.ns.manage(request)
        except errors.EntityNotFound as exc:
            raise errors.EntityNotFound(p.description(exc, request.path)) from exc

    def _rule_path(self, request: _Request, name: str | None = None) -> str:
        path = request.path.split("/")
        if request.sub_queue is not None or len(path) < 3 or path[-2].lower() != "subscriptions":
            raise errors.InvalidOperation(
                f"{request.path!r} is not a subscription: rules belong to subscriptions."
            )
        return rule_path("/".join(path[:-2]), path[-1], name)

    def _session(self, request: _Request) -> tuple[str, str | None]:
        sid, lock = self._lock(request)
        if sid is None:
            raise InvalidArgument("the request names no session-id.")
        if lock is None:
            raise errors.SessionLockLost(
                f"Session {sid!r} of {request.path!r} is not held by this connection: open "
                "a session receiver for it first."
            )
        return sid, lock


_HANDLERS: dict[str, Handler] = {
    "renew-lock": Management._renew_lock,
    "update-disposition": Management._update_disposition,
    "peek-message": Management._peek,
    "receive-by-sequence-number": Management._receive_deferred,
    "schedule-message": Management._schedule,
    "cancel-scheduled-message": Management._cancel,
    "renew-session-lock": Management._renew_session,
    "get-session-state": Management._get_state,
    "set-session-state": Management._set_state,
    "get-message-sessions": Management._sessions,
    "batch-delete-messages": Management._batch_delete,
    "add-rule": Management._add_rule,
    "remove-rule": Management._remove_rule,
    "enumerate-rules": Management._enumerate_rules,
}
#: The condition of a 204 where the service gives one (azure-servicebus's
#: ``list_sessions_op`` notes it).
_NOTHING = {"get-message-sessions": _VENDOR + "session-not-found",
            "batch-delete-messages": _VENDOR + "message-not-found"}


def _reply(correlation_id: Any, status: int, description: str, condition: str | None,
           body: dict[str, Any] | None = None) -> bytes:
    app: dict[str, Any] = {"statusCode": Int(status), "statusDescription": description}
    if condition is not None:
        app["errorCondition"] = Symbol(condition)
    out = encode(Described(ULong(PROPERTIES), [None, None, None, None, None, correlation_id]))
    out += encode(Described(ULong(APP_PROPERTIES), app))
    return out + encode(Described(ULong(VALUE), body))

