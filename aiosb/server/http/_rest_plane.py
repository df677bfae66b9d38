"""The documented Service Bus REST data plane of the server: send (one message or a
REST batch), receive the head of an entity (peek-lock or receive-and-delete) and act on a
message lock (complete, unlock, renew). Answers with the encoding of
:mod:`aiosb.wire.rest`."""


from __future__ import annotations

import json
import urllib.parse

from aiohttp import web

from ...emulator import EmulatorNamespace
from ...entities import parse_entity_path
from ...errors import InvalidArgument, InvalidOperation, ServiceBusError
from ...message import Message, ReceivedMessage, property_name_ok
from ...protocol import ReceiveRequest, SettleAction, Settlement
from ...wire import rest as _rest
from ._requests import (
    MAX_WAIT,
    Route,
    as_seconds,
    bounded,
    json_body,
)

_DEFAULT_WAIT = 60.0

_MAX_HEADER_LINE = 8_000


def rest_headers(msg: ReceivedMessage, *, locked: bool) -> dict[str, str]:
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


async def send(request: web.Request, ns: EmulatorNamespace, path: str
                ) -> web.StreamResponse:
    body = await request.read()
    ctype = request.headers.get("Content-Type", "")
    if ctype.split(";")[0].strip().lower() == _rest.BATCH_CONTENT_TYPE:
        messages = _batch(body)
    else:
        raw = request.headers.get("BrokerProperties")
        broker = None if raw is None else json_body(raw.encode("utf-8", "surrogateescape"))
        props = {}
        for name, value in request.headers.items():
            lower = name.lower()
            if lower in _rest.NOT_PROPERTIES or lower.startswith(("x-ms-", "x-aiosb-")):
                continue
            props[str(name)] = _rest.parse_custom_value(value)
        messages = [_rest.message_from_rest(broker, body, ctype or None, props)]
    await ns.send(path, messages)
    return web.Response(status=201)


def _batch(body: bytes) -> list[Message]:
    items = json_body(body)
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


async def receive_head(
    request: web.Request, ns: EmulatorNamespace, route: Route, path: str,
    limit: float | None,
) -> web.StreamResponse:
    wait = as_seconds("timeout", request.query.get("timeout", _DEFAULT_WAIT), MAX_WAIT)
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
    got = await bounded(limit, ns.receive(parsed.path, receive), wait)
    if not got:
        return web.Response(status=204)
    msg: ReceivedMessage = got[0]
    token = msg.lock_token
    if token is None:  # a peek-lock receive always carries one
        raise ServiceBusError("internal error: a locked message came without its lock.")
    try:
        headers = rest_headers(msg, locked=lock)
    except BaseException:
        settle = Settlement("abandon", [token], parsed.sub_queue)
        await ns.settle(parsed.path, settle)
        raise
    if lock:
        base = f"{request.scheme}://{request.host}{route.base}"
        where = urllib.parse.quote(path, safe="/$")
        headers["Location"] = f"{base}/{where}/messages/{msg.sequence_number}/{token}"
    else:
        settle = Settlement("complete", [token], parsed.sub_queue)
        await ns.settle(parsed.path, settle)
    return web.Response(status=201 if lock else 200, body=msg.body, headers=headers)


async def lock(
    request: web.Request, ns: EmulatorNamespace, path: str, message: str, token: str
) -> web.StreamResponse:
    actions: dict[str, SettleAction] = {"DELETE": "complete", "PUT": "abandon", "POST": "renew"}
    action = actions.get(request.method)
    if action is None:
        raise InvalidOperation(
            f"{request.method} is not allowed on a message lock: DELETE completes, "
            "PUT unlocks, POST renews."
        )
    parsed = parse_entity_path(path)
    settlement = Settlement(action, [token], parsed.sub_queue)
    until = await ns.settle(parsed.path, settlement)
    headers = {}
    if until:
        headers["BrokerProperties"] = json.dumps({"LockedUntilUtc": _rest.http_date(until[0])})
        headers["x-aiosb-locked-until"] = repr(until[0])
    return web.Response(status=200, headers=headers)
