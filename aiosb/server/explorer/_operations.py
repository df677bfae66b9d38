"""What the explorer (:mod:`aiosb.server.explorer`) does to the broker: peeks rendered
for a person, sends, resubmits, purges, rules and session states (the live snapshot of
every namespace is :mod:`._live`'s; faults are read by the fault API's parser,
:func:`aiosb.server.http._fault_api.inject`).

Everything here takes an :class:`~aiosb.emulator.EmulatorNamespace` and plain values,
calls its public operations only (as the REST plane does: #49), and answers plain
JSON-ready values; the HTTP side (sign-in, rights, cross-site checks) is the package's.
"""


from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from typing import Any

from ...emulator import EmulatorNamespace
from ...entities import AuthorizationRule
from ...errors import InvalidArgument, MessageNotFound
from ...message import Message, ReceivedMessage
from ...protocol import (
    MAX_RECEIVE_MESSAGES,
    ManagementRequest,
    ReceiveRequest,
    SessionRequest,
    Settlement,
)
from ...rules import RuleProperties, SqlRuleAction, SqlRuleFilter, rule_path

#: Sub-queues a peek or a purge names.
SUB_QUEUES = ("active", "scheduled", "deferred", "deadletter")
#: Bodies are shown up to this many characters of text, or bytes as hex.
TEXT_LIMIT, HEX_LIMIT = 64 * 1024, 4 * 1024
#: The most messages a resubmit or purge looks through in one request.
SCAN_LIMIT = 50_000
#: A page of peeked messages stops growing at this many bytes of JSON (the first
#: message is always given): 500 messages of 64 Ki non-ASCII characters each, escaped,
#: were 39 MB (#48).
PEEK_BYTES = 4 * 1024 * 1024


def plain(value: Any) -> Any:
    """A setting or property as JSON shows it (durations in seconds, instants in ISO;
    text past :data:`TEXT_LIMIT` characters cut, with an ellipsis)."""
    if isinstance(value, str):
        return value if len(value) <= TEXT_LIMIT else value[:TEXT_LIMIT] + "…"
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, _dt.timedelta):
        return _duration(value.total_seconds())
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):  # authorization rules: names and rights, never keys
        return [f"{r.key_name} ({', '.join(r.rights)})" if isinstance(r, AuthorizationRule)
                else plain(r) for r in value]
    return str(value)


def _duration(seconds: float) -> str:
    """``90 s``, ``5 min``, ``14 days``; ``never`` for the longest (Service Bus's
    "no limit", ``TimeSpan.MaxValue``)."""
    if seconds >= 10_000 * 86_400:
        return "never"
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


# -- messages -----------------------------------------------------------------------


def body_view(body: bytes, content_type: str | None) -> dict[str, Any]:
    """A body as a person reads it: JSON pretty-printed, text as text, anything else as
    hex; cut past :data:`TEXT_LIMIT` characters (or :data:`HEX_LIMIT` bytes), its size
    said either way. The page shows it as text, never as markup."""
    size = len(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and (text.isprintable() or all(c.isprintable() or c in "\r\n\t"
                                                       for c in text)):
        kind = "text"
        if "json" in (content_type or "").lower() or text.lstrip()[:1] in ("{", "["):
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
                kind = "json"
            except (ValueError, RecursionError):
                pass
        return {"size": size, "kind": kind, "text": text[:TEXT_LIMIT],
                "cut": len(text) > TEXT_LIMIT}
    return {"size": size, "kind": "binary", "text": body[:HEX_LIMIT].hex(" "),
            "cut": size > HEX_LIMIT}


def _instant(epoch: float | None) -> str | None:
    if epoch is None or not math.isfinite(epoch):
        return None
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).isoformat()


def message_view(m: ReceivedMessage) -> dict[str, Any]:
    """A peeked message: its system properties, application properties and body."""
    system = {
        "sequence_number": m.sequence_number,
        "message_id": m.message_id,
        "state": m.state,
        "enqueued_time": _instant(m.enqueued_timestamp),
        "expires_at": _instant(m.expires_timestamp),
        "delivery_count": m.delivery_count,
        "locked_until": _instant(m.locked_until_timestamp),
        "session_id": m.session_id,
        "partition_key": m.partition_key,
        "content_type": m.content_type,
        "correlation_id": m.correlation_id,
        "subject": m.subject,
        "to": m.to,
        "reply_to": m.reply_to,
        "reply_to_session_id": m.reply_to_session_id,
        "time_to_live": plain(m.time_to_live),
        "scheduled_enqueue_time": plain(m.scheduled_enqueue_time),
        "dead_letter_reason": m.dead_letter_reason,
        "dead_letter_error_description": m.dead_letter_error_description,
        "dead_letter_source": m.dead_letter_source,
    }
    return {
        "system": {k: v for k, v in system.items() if v is not None},
        "properties": [
            [name, type(value).__name__, plain(value)]
            for name, value in m.application_properties.items()
        ],
        "body": body_view(m.body, m.content_type),
    }


def _sub(sub: str) -> str | None:
    if sub not in SUB_QUEUES:
        raise InvalidArgument(f"sub-queue is {sub[:40]!r}; use one of {', '.join(SUB_QUEUES)}.")
    return "deadletter" if sub == "deadletter" else None


async def peek(ns: EmulatorNamespace, path: str, sub: str, start: int, count: int,
               budget: int = PEEK_BYTES) -> dict[str, Any]:
    """A page of sub-queue ``sub`` from sequence number ``start``: up to ``count``
    messages, fewer where they would pass ``budget`` bytes of JSON (``"cut"`` is then
    true; the first message is given whatever its size), and where the next page
    starts (``None`` at the end)."""
    found: list[ReceivedMessage] = []
    state = None if sub == "deadletter" else sub
    at, looked = start, 0
    while len(found) < count and looked < SCAN_LIMIT:
        got = await ns.receive(path, ReceiveRequest(
            peek=True, max_messages=min(250, max(count, 50)), max_wait=0,
            sub_queue=_sub(sub), from_sequence_number=at))
        if not got:
            at = -1
            break
        looked += len(got)
        for m in got:
            if state is None or m.state == state:
                found.append(m)
                if len(found) == count:
                    break
        at = (found[-1] if len(found) == count else got[-1]).sequence_number + 1
    views: list[dict[str, Any]] = []
    used = 64  # the answer's own keys ("next", "cut")
    for m in found:
        view = message_view(m)
        used += len(json.dumps(view)) + 2  # as the answer encodes it, with ", "
        if views and used > budget:  # the rest is the next page's
            return {"messages": views, "next": m.sequence_number, "cut": True}
        views.append(view)
    return {"messages": views, "next": None if at < 0 else at, "cut": False}


def _text(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be text, not {value!r:.60}.")
    return value


async def send(ns: EmulatorNamespace, path: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Send (or schedule) one message made from the page's form: ``body`` (text),
    ``content_type``, ``properties`` (a JSON object of strings, numbers and booleans),
    ``session_id``, ``message_id``, ``subject``, ``correlation_id``, ``partition_key``,
    ``time_to_live`` (seconds) and ``scheduled_enqueue_time`` (ISO 8601)."""
    body = fields.get("body", "")
    if not isinstance(body, str):
        raise InvalidArgument("body must be text.")
    props = fields.get("properties") or {}
    if not isinstance(props, dict) or not all(
        isinstance(v, (str, int, float, bool)) for v in props.values()
    ):
        raise InvalidArgument("properties must be a JSON object of strings, numbers and "
                              "booleans.")
    ttl = fields.get("time_to_live")
    if ttl not in (None, ""):
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < 1e9:
            raise InvalidArgument("time_to_live must be a number of seconds above 0.")
        ttl = _dt.timedelta(seconds=ttl)
    else:
        ttl = None
    when = _text(fields, "scheduled_enqueue_time")
    at = None
    if when is not None:
        try:
            at = _dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgument(f"scheduled time {when[:40]!r} is not ISO 8601.") from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=_dt.UTC)
    message = Message(
        body.encode(), content_type=_text(fields, "content_type"),
        session_id=_text(fields, "session_id"), message_id=_text(fields, "message_id"),
        subject=_text(fields, "subject"), correlation_id=_text(fields, "correlation_id"),
        partition_key=_text(fields, "partition_key"), time_to_live=ttl,
        scheduled_enqueue_time=at, application_properties=dict(props),
    )
    if at is not None:
        seqs = await ns.schedule(path, [message])
        return {"scheduled": seqs}
    await ns.send(path, [message])
    return {"sent": 1}


def _copy(m: ReceivedMessage) -> Message:
    """A dead-lettered message as it is sent again: what its sender gave, nothing the
    broker added."""
    kept = {f.name: getattr(m, f.name) for f in dataclasses.fields(Message)
            if f.init and f.name not in ("body", "scheduled_enqueue_time", "_")}
    kept.pop("amqp_extra", None)
    return Message(m.body, **kept)


def resubmit_target(kind: str, description: Any) -> str:
    """Where a dead letter of an entity of ``kind`` goes back to: its queue, or a
    subscription's topic (as their descriptions name them)."""
    return str(description.topic_name if kind == "subscription" else description.name)


async def resubmit(ns: EmulatorNamespace, path: str, seqs: list[int] | None
                   ) -> dict[str, Any]:
    """Send dead-lettered messages of ``path`` (those numbered ``seqs``, or all) to the
    entity again (a subscription's to its topic), completing each copy in the dead-letter
    queue once it is sent. Chosen ones are taken by number (the broker's
    :meth:`~aiosb.emulator.EmulatorNamespace.take`): no other dead letter is locked or
    touched."""
    kind, _ = ns.lookup(path)
    target = resubmit_target(kind, ns.description(path))
    if seqs is not None:
        take = await ns.take(path, seqs, sub_queue="deadletter")
        if take:
            await _send_back(ns, path, target, take)
        missing = set(seqs) - {m.sequence_number for m in take}
        if missing:
            raise MessageNotFound(
                f"resubmitted {len(take)}; no dead letter numbered "
                f"{', '.join(map(str, sorted(missing)[:20]))} was there to take (gone, or "
                "locked by a receiver).")
        return {"resubmitted": len(take), "to": target}
    done = 0
    while done < SCAN_LIMIT:
        got = await ns.receive(path, ReceiveRequest(
            mode="peek_lock", max_messages=100, max_wait=0, sub_queue="deadletter"))
        if not got:
            break
        await _send_back(ns, path, target, got)
        done += len(got)
    return {"resubmitted": done, "to": target}


async def _send_back(ns: EmulatorNamespace, path: str, target: str,
                     got: list[ReceivedMessage]) -> None:
    """Send copies of locked dead letters to ``target`` and complete them; if the send
    fails, give them back as they were."""
    try:
        await ns.send(target, [_copy(m) for m in got])
    except BaseException:
        await _settle(ns, path, "abandon", got)
        raise
    await _settle(ns, path, "complete", got)


async def _settle(ns: EmulatorNamespace, path: str, action: str, got: list[ReceivedMessage]
                  ) -> None:
    tokens = [m.lock_token for m in got if m.lock_token]
    if tokens:
        await ns.settle(path, Settlement(action, tokens, "deadletter"))  # type: ignore[arg-type]


async def purge(ns: EmulatorNamespace, path: str, sub: str) -> dict[str, Any]:
    """Delete every message of sub-queue ``sub`` of ``path`` (a session-enabled entity's
    active messages session by session); answer how many went."""
    sub_queue = _sub(sub)
    gone = 0
    if sub in ("active", "deadletter"):
        if sub == "active" and ns.lookup(path)[1]:  # session-enabled
            return {"purged": await _purge_sessions(ns, path)}
        while gone < SCAN_LIMIT:
            got = await ns.receive(path, ReceiveRequest(
                mode="receive_and_delete", max_messages=MAX_RECEIVE_MESSAGES, max_wait=0,
                sub_queue=sub_queue))
            if not got:
                break
            gone += len(got)
        return {"purged": gone}
    at = 0
    while gone < SCAN_LIMIT:
        page = await peek(ns, path, sub, at, 1000)
        seqs = [m["system"]["sequence_number"] for m in page["messages"]]
        if seqs:
            if sub == "scheduled":
                await ns.cancel_scheduled(path, seqs)
            else:
                await ns.receive(path, ReceiveRequest(
                    mode="receive_and_delete", max_messages=len(seqs), max_wait=0,
                    sequence_numbers=seqs))
            gone += len(seqs)
        if page["next"] is None:
            break
        at = page["next"]
    return {"purged": gone}


async def _purge_sessions(ns: EmulatorNamespace, path: str) -> int:
    gone = 0
    for sid in await ns.manage(ManagementRequest("sessions", None, path)):
        info = await ns.session(path, SessionRequest("accept", sid, max_wait=0,
                                                     mode="receive_and_delete"))
        try:
            while True:
                got = await ns.receive(path, ReceiveRequest(
                    mode="receive_and_delete", max_messages=MAX_RECEIVE_MESSAGES, max_wait=0,
                    session_id=sid, session_lock=info.lock))
                if not got:
                    break
                gone += len(got)
        finally:
            await ns.session(path, SessionRequest("release", sid, info.lock))
    return gone


async def sessions(ns: EmulatorNamespace, path: str) -> list[dict[str, Any]]:
    """The sessions of a session-enabled entity, each with its state and whether a
    receiver holds it (read, never locked: a receiver's lock is not disturbed)."""
    return [
        {"session_id": s.session_id,
         "state": None if s.state is None else body_view(s.state, None),
         "locked": s.locked, "messages": s.message_count}
        for s in await ns.session_statuses(path)
    ]


# -- rules --------------------------------------------------------------------------


def rule_view(rule: RuleProperties) -> dict[str, Any]:
    """A rule: its name, its filter and action as the page shows them."""
    f = rule.filter
    kind = type(f).__name__
    if isinstance(f, SqlRuleFilter):
        shown = f.sql_expression
    elif kind == "TrueRuleFilter":
        shown = "1=1"
    elif kind == "FalseRuleFilter":
        shown = "1=0"
    else:
        shown = ", ".join(
            f"{k} = {plain(v)!r}" for k, v in dataclasses.asdict(f).items() if v is not None
        )
    return {
        "name": rule.name, "filter_kind": kind, "filter": shown,
        "action": None if rule.action is None else rule.action.sql_expression,
    }


def _subscription(path: str) -> tuple[str, str]:
    topic, sep, name = path.rpartition("/subscriptions/")
    if not sep or not topic or not name or "/" in name:
        raise InvalidArgument(f"{path[:80]!r} is not a subscription (topic/subscriptions/name).")
    return topic, name


async def rules(ns: EmulatorNamespace, path: str) -> list[dict[str, Any]]:
    """A subscription's rules."""
    got = await ns.manage(ManagementRequest("list", "rule", rule_path(*_subscription(path))))
    return [rule_view(r) for r in got]


async def add_rule(ns: EmulatorNamespace, path: str, name: str, sql: str,
                   action: str | None) -> dict[str, Any]:
    """Add a rule with a SQL filter (and action); a bad filter raises the server's own
    words (:class:`~aiosb.errors.InvalidArgument`)."""
    rule = RuleProperties(name, SqlRuleFilter(sql),
                          SqlRuleAction(action) if action else None)
    made = await ns.manage(ManagementRequest("create", "rule",
                                             rule_path(*_subscription(path), name), rule))
    return rule_view(made)


async def delete_rule(ns: EmulatorNamespace, path: str, name: str) -> None:
    """Delete a subscription's rule."""
    await ns.manage(ManagementRequest("delete", "rule", rule_path(*_subscription(path), name)))
