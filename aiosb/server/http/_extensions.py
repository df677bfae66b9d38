"""The ``$aiosb`` extensions of the server (aiosb's own client only): exact, typed
send, schedule, cancel, receive (peek, deferred, batch answers) and settle, in the
encodings of :mod:`aiosb.wire.aiosb_json`."""


from __future__ import annotations

from typing import Any

from aiohttp import web

from ...emulator import EmulatorNamespace
from ...errors import (
    InvalidArgument,
)
from ...message import Message
from ...protocol import (
    MAX_RECEIVE_MESSAGES,
    ReceiveRequest,
    Settlement,
)
from ...wire import aiosb_json as _json
from ...wire import frames as _frames
from ._requests import (
    MAX_WAIT,
    as_seconds,
    bounded,
    object_body,
    str_or_none,
    whole,
)


def _batch_response(data: dict[str, Any], framed: bool) -> web.Response:
    """An answer holding a batch, framed (its bodies raw, :mod:`aiosb.wire.frames`) or
    as JSON (see :func:`aiosb.wire.json_values.dumps`)."""
    if framed:
        body, length = _frames.frame(data)
        return web.Response(
            body=body, content_type=_frames.CONTENT_TYPE,
            headers={_frames.LENGTH_HEADER: str(length)},
        )
    return web.Response(body=_json.dumps(data), content_type="application/json")


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


async def extension(
    request: web.Request, ns: EmulatorNamespace, path: str, op: str,
    limit: float | None,
) -> web.StreamResponse:
    response = await _extension(request, ns, path, op, limit)
    response.headers[_frames.TAKES_FRAMES] = "1"  # framed sends welcome
    return response


async def _extension(
    request: web.Request, ns: EmulatorNamespace, path: str, op: str,
    limit: float | None,
) -> web.StreamResponse:
    body = await request.read()
    frame = request.headers.get(_frames.LENGTH_HEADER)  # a framed batch: its JSON's length
    if op == "send":
        payload = object_body(
            body, {"messages": None, "batch": None, "transaction": False}, frame
        )
        transaction = payload["transaction"]
        if not isinstance(transaction, bool):
            raise InvalidArgument(f"transaction must be true or false, not {transaction!r}.")
        batch = payload["batch"]
        as_columns = (
            None if batch is None or payload["messages"] is not None or transaction
            else _json.decode_batch_columns(batch)
        )
        if as_columns is not None:  # stored as it came, no message object per message (#16)
            await bounded(limit, ns.send_columns(path, *as_columns, checked=True))
        else:
            await bounded(limit, ns.send(path, _messages(payload), transaction=transaction))
        return web.Response(status=201)
    if op == "schedule":
        payload = object_body(body, {"messages": None, "batch": None}, frame)
        messages = _messages(payload)
        if any(m.scheduled_enqueue_time is None for m in messages):
            raise InvalidArgument("every message to schedule needs scheduled_enqueue_time.")
        seqs = await bounded(limit, ns.schedule(path, messages))
        return web.json_response({"sequence_numbers": seqs}, status=201)
    if op == "cancel":
        payload = object_body(body, {"sequence_numbers": None})
        seqs = payload["sequence_numbers"]
        if not isinstance(seqs, list) or not seqs:
            raise InvalidArgument("sequence_numbers must be a non-empty list.")
        await bounded(
            limit, ns.cancel_scheduled(path, [whole("sequence number", s) for s in seqs])
        )
        return web.json_response({})
    if op == "receive":
        receive, batch = _receive_request(body)
        # A receive that waits for ever is bounded by nothing but its client.
        bound = None if receive.max_wait is None else limit
        if batch:
            bodies, columns = await bounded(
                bound, ns.receive_columns(path, receive), receive.max_wait or 0.0
            )
            framed = _frames.asks_for_frames(request.headers.get("Accept", ""))
            return _batch_response(
                {"batch": _json.encode_received_columns(bodies, columns, framed)}, framed
            )
        got = await bounded(bound, ns.receive(path, receive), receive.max_wait or 0.0)
        return web.json_response(
            {"messages": [_json.encode_received(m) for m in got]}
        )
    if op == "settle":
        settlement = _settlement(body)
        until = await bounded(limit, ns.settle(path, settlement))
        return web.json_response({"locked_until": until})
    raise InvalidArgument(
        f"unknown aiosb extension {op[:40]!r}; known: send, schedule, cancel, receive, "
        "settle."
    )


def _receive_request(body: bytes) -> tuple[ReceiveRequest, bool]:
    """The receive asked for, and whether the answer is in the batch encoding."""
    fields = object_body(
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
        seqs = [whole("sequence number", s) for s in seqs]
    wait = fields["max_wait"]
    request = ReceiveRequest(
        mode=fields["mode"],
        max_messages=whole("max_messages", fields["max_messages"], 1, MAX_RECEIVE_MESSAGES),
        max_wait=None if wait is None else as_seconds("max_wait", wait, MAX_WAIT),
        sub_queue=fields["sub_queue"],
        peek=fields["peek"],
        from_sequence_number=whole("from_sequence_number", fields["from_sequence_number"]),
        sequence_numbers=seqs,
    )
    return request, fields["batch"]


def _settlement(body: bytes) -> Settlement:
    fields = object_body(
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
        or set(map(type, tokens)) != {str}
        or not 0 < min(map(len, tokens)) <= max(map(len, tokens)) <= 256
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
        reason=str_or_none("reason", fields["reason"]),
        description=str_or_none("description", fields["description"]),
        properties_to_modify=props,
    )
