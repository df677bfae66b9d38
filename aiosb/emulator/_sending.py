"""Sending: send, schedule and cancel_scheduled on a queue or topic.

A batch is checked whole before anything of it is stored (size, quota, sessions,
transactions: all or none), turned into records, routed to fragments
(:mod:`._partitions`) and handed to the entity (:meth:`~._entity._Entity.deliver`);
a plain queue's records go straight to their fragment's store, the hot path.

Imports: :mod:`._record`, :mod:`._partitions`, :mod:`._entity`, :mod:`._namespace`
(never the broker).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..entities import FRAGMENTS
from ..errors import (
    EntityUnavailable,
    InvalidArgument,
    InvalidOperation,
    MessageSizeExceeded,
    QuotaExceeded,
)
from ..message import PING_CONTENT_TYPE, Message, check_partition_key, properties_size
from ..protocol import check_columns
from . import _record
from ._entity import _Entity
from ._namespace import Namespace
from ._partitions import by_fragment, check_transaction, route
from ._record import (
    _NO_OPT,
    _OPT,
    AT,
    INF,
    SCHEDULED,
    _Record,
    record_of,
    records_from_columns,
)

__all__ = ["cancel_scheduled", "schedule", "send", "send_columns"]

_SESSION_ID, _PARTITION_KEY, _CONTENT_TYPE = (
    _OPT.index(name) for name in ("session_id", "partition_key", "content_type")
)


async def send(
    ns: Namespace, path: str, messages: Sequence[Message], transaction: bool = False
) -> None:
    """Enqueue ``messages`` on a queue or topic as one batch (all or none)."""
    await enqueue(ns, path, records_of(messages), transaction)


async def send_columns(
    ns: Namespace, path: str, bodies: list[bytes], columns: dict[str, Any],
    checked: bool = False,
) -> None:
    """Enqueue messages given as columns (:func:`._record.records_from_columns`) as one
    batch, as :func:`send` enqueues messages, checked as messages are
    (:func:`aiosb.protocol.check_columns`) unless ``checked``."""
    if not checked:
        check_columns(bodies, columns)
    await enqueue(ns, path, records_from_columns(bodies, columns))


async def enqueue(
    ns: Namespace, path: str, made: list[_Record], transaction: bool = False
) -> None:
    """Enqueue the records of a send (made by :func:`records_of` or
    :func:`._record.records_from_columns`) as one batch (all or none)."""
    entity, records, now = await prepare(ns, path, made, transaction)
    # A plain queue's records are stored a fragment's run at a time (#16): numbered
    # here, in order, and handed to their store together.
    runs: dict[int, list[_Record]] = {}
    run_frag = -1
    run: list[_Record] = []
    seqs = None
    for rec in records:
        if rec is None:  # a ping: accepted, never delivered (PN-14)
            continue
        if entity.dup_window and entity.is_duplicate(rec.message_id, now):
            continue
        at = rec._opt[AT]  # rec.scheduled, read inline: this runs per message
        if at is not None and at.timestamp() > now:
            entity.schedule(rec, at.timestamp())
            continue
        rec.enqueued = now
        if entity.plain:  # the common case, inlined: a queue that keeps what it gets
            ttl = rec.ttl if rec.ttl < entity.ttl else entity.ttl
            rec.ttl = ttl
            rec.expires = None if ttl == INF else now + ttl
            if rec.frag != run_frag:
                run_frag = rec.frag
                run = runs.setdefault(run_frag, [])
                seqs = entity.fragments[run_frag].seqs
            rec.seq = next(seqs)  # type: ignore[arg-type]
            run.append(rec)
        else:
            entity.deliver(rec, now, 0)
    for frag, recs in runs.items():
        entity.fragments[frag].add_run(recs, now)


async def schedule(ns: Namespace, path: str, messages: Sequence[Message]) -> list[int]:
    """Schedule messages; return their sequence numbers (EX-5)."""
    for msg in messages:
        if isinstance(msg, Message) and msg.scheduled_enqueue_time is None:
            raise InvalidArgument("schedule needs each message's scheduled_enqueue_time to be set.")
    entity, records, now = await prepare(ns, path, records_of(messages))
    seqs = []
    for rec in records:
        if rec is None:
            continue
        at = rec.scheduled  # set on every message: checked above
        seqs.append(entity.schedule(rec, now if at is None else max(at.timestamp(), now)))
    return seqs


async def cancel_scheduled(ns: Namespace, path: str, sequence_numbers: Sequence[int]) -> None:
    """Cancel scheduled messages (all named ones must be scheduled)."""
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("send", path)
        now = ns.now()
        entity = send_target(ns, path)
        groups = by_fragment(sequence_numbers, entity.nfrag)
        down = ns._down("send", path)
        blocked = next((down[f] for f in groups if down is not None and f in down), None)
        if blocked is None:
            break
        await faults.apply(blocked, "send", path)
    found = [
        (entity.fragments[f], entity.fragments[f].find(seqs, SCHEDULED, "scheduled"))
        for f, seqs in groups.items()
    ]
    entity.touch(now)
    for store, recs in found:
        store.scheduled -= len(recs)
        store.remove(recs)


async def prepare(
    ns: Namespace, path: str, made: list[_Record], transaction: bool = False
) -> tuple[_Entity, list[_Record | None], float]:
    """Check the faults, validate the batch (of records made of its messages) and choose
    each message's fragment; a fragment in the way raises or, for a timeout fault, is
    waited out and the whole preparation done again. Returns the entity (touched), the
    records (``None`` for pings) and the time."""
    faults = ns.faults
    while True:
        if faults.active:
            await faults.check("send", path)
        now = ns.now()
        entity = send_target(ns, path)
        records = check(ns, entity, made, transaction)
        if entity.nfrag == 1:
            break
        blocked = route(records, entity.nfrag, entity.rr, ns._down("send", path))
        if blocked is None:
            break
        await faults.apply(blocked, "send", path)
        for rec in made:  # routed afresh, to whatever entity the path names by then
            rec.frag = 0
    entity.touch(now)
    return entity, records, now


def send_target(ns: Namespace, path: str) -> _Entity:
    """The queue or topic at ``path``, if it takes sends."""
    entity, dlq = ns._resolve(path)
    if entity.kind == "subscription" or dlq:
        raise InvalidOperation(f"Cannot send to {path!r}: send to a queue or topic.")
    status = entity.props.status
    if status in ("Disabled", "SendDisabled"):
        raise EntityUnavailable(f"The entity {path!r} is {status}: it cannot take sends.")
    return entity


def records_of(messages: Sequence[Message]) -> list[_Record]:
    """The records of a batch of messages (each checked to be one)."""
    out = []
    for msg in messages:
        if not isinstance(msg, Message):
            raise InvalidArgument(f"can only send Message objects, not {type(msg).__name__}.")
        out.append(record_of(msg, msg.message_id or _record.auto_ids()))  # its size worked out
    return out


#: Service Bus's limits on a message's header, on every tier: each application property
#: at most 32 KB, and the whole header (the properties and the system properties: ids,
#: subject, ...) at most 64 KB.
MAX_PROPERTY_SIZE = 32 * 1024
MAX_HEADER_SIZE = 64 * 1024


def check_header(rec: _Record) -> None:
    """Refuse a message whose header is over Service Bus's limits (what is refused on
    Azure must be refused here, not pass until production).

    Raises:
        MessageSizeExceeded: A property over 32 KB, or a header over 64 KB.
    """
    header = rec.size - len(rec.body)
    if header > MAX_HEADER_SIZE:
        raise MessageSizeExceeded(
            f"A message's header (its properties and ids) is {header} bytes, over Service "
            f"Bus's {MAX_HEADER_SIZE} byte limit; carry large data in the body."
        )
    for name, value in (rec.props or {}).items():
        one = properties_size({name: value})
        if one > MAX_PROPERTY_SIZE:
            raise MessageSizeExceeded(
                f"The application property {name!r:.60} is {one} bytes, over Service Bus's "
                f"{MAX_PROPERTY_SIZE} byte limit for one property; carry large data in the "
                "body."
            )


def check(
    ns: Namespace, entity: _Entity, made: list[_Record], transaction: bool = False
) -> list[_Record | None]:
    """Validate a whole batch (or transaction) of records: ``None`` for pings, the
    others each with its partition key (PT-6 to PT-8)."""
    limit = ns.max_message_size
    total = 0
    out: list[_Record | None] = []
    requires_session = entity.sessionful or (
        entity.kind == "topic" and any(s.sessionful for s in entity.subscriptions.values())
    )
    by_message_id = entity.dup_window > 0
    for rec in made:
        size = rec.size
        if size > limit:
            raise MessageSizeExceeded(
                f"A message of {size} bytes is over the {limit} byte limit of "
                f"namespace {ns.name!r} ({ns.tier} tier)."
            )
        if size - len(rec.body) > MAX_PROPERTY_SIZE:  # rare: properties of 32 KB or more
            check_header(rec)
        total += size
        # The fields read from ``_opt`` inline: this runs per message.
        opt = rec._opt
        if opt is _NO_OPT:
            key = session_id = None
        else:
            if opt[_CONTENT_TYPE] == PING_CONTENT_TYPE:
                out.append(None)
                continue
            key, session_id = opt[_PARTITION_KEY], opt[_SESSION_ID]
        # The partition key (PT-6 to PT-8), chosen here.
        if session_id is not None:
            if key is not None:
                check_partition_key(session_id, key)  # PT-7 (fields may change after checks)
            key = session_id
        elif requires_session:
            raise InvalidOperation(
                f"{entity.path!r} requires sessions (or has a subscription that does): "
                "set session_id on every message."
            )
        elif key is None and by_message_id:
            key = rec.message_id
        rec.key = key
        out.append(rec)
    if transaction:
        check_transaction(entity.path, entity.nfrag, out)
    elif len(out) > 1 and total > limit:
        raise MessageSizeExceeded(
            f"A batch of {len(out)} messages and {total} bytes is over the {limit} byte "
            f"limit of namespace {ns.name!r}; send fewer messages at once."
        )
    if entity.kind == "queue":
        capacity = entity.props.max_size_in_megabytes * 1024 * 1024
        if entity.props.enable_partitioning and ns.tier == "standard":
            capacity *= FRAGMENTS["standard"]  # PT-4
        held = entity.bytes
        if held + total > capacity:
            raise QuotaExceeded(
                f"{entity.path!r} is full: it holds {held} bytes and may "
                f"hold {capacity}; receive some messages first."
            )
    return out
