"""Issue 18, item 3: random messages, every field, through every transport and receive
mode: equal field by field after the trip, or refused at send with InvalidArgument
(InvalidOperation where a protocol says it cannot carry something), nothing sent."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message_strategies import ids, text, value

import aiosb
from aiosb import Message, emulator, errors
from aiosb.server.http import serve

names = st.text(max_size=8) | st.from_regex(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,8}", fullmatch=True)
message_kw = st.fixed_dictionaries(
    {},
    optional={
        "message_id": ids,
        "session_id": st.none(),  # sessions have tests of their own (and no REST)
        "partition_key": ids,
        "content_type": st.none() | text,
        "correlation_id": st.none() | text,
        "subject": st.none() | text,
        "reply_to": st.none() | text,
        "reply_to_session_id": st.none() | text,
        "to": st.none() | text,
        # Not positive (refused) or long enough to outlive the trip.
        "time_to_live": st.none()
        | st.timedeltas(min_value=timedelta(days=-1), max_value=timedelta(0))
        | st.timedeltas(min_value=timedelta(hours=1), max_value=timedelta(days=99)),
        "application_properties": st.dictionaries(names, value, max_size=3),
    },
)
body = st.binary(max_size=40) | st.text(max_size=20)

SENT = [f.name for f in dataclasses.fields(Message)]


def _same(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def _fields(msg: Message) -> dict[str, object]:
    out = {name: getattr(msg, name) for name in SENT}
    out["application_properties"] = {
        k: _same(v) for k, v in msg.application_properties.items()
    }
    return out


async def _trip(
    ns: aiosb.Namespace, mode: str, kw: dict, data: bytes | str, count: int = 1
) -> None:
    """Send ``count`` such messages at once (one, or a batch: each has an encoding of
    its own, and a batch is stored as columns on aiosb serve, #16)."""
    try:
        sent = [Message(data, **kw) for _ in range(count)]
    except (errors.InvalidArgument, errors.InvalidOperation):
        return  # refused before anything could be sent
    queue = f"q-{uuid.uuid4().hex[:8]}"
    await ns.create_queue(queue)
    try:
        await ns.sender(queue).send(sent)
    except (errors.InvalidArgument, errors.InvalidOperation) as exc:
        assert (await ns.runtime_properties(queue)).active_message_count == 0, exc
        return
    async with ns.receiver(queue, mode=mode) as receiver:
        got = await receiver.receive(max_messages=5, max_wait=5)
    await ns.delete_queue(queue)
    assert len(got) == count, f"sent {count}, then received {len(got)}"
    for one, back in zip(sent, got, strict=True):
        expected = _fields(one)
        actual = _fields(back)
        if expected["time_to_live"] is None:  # the entity's default is what comes back
            actual["time_to_live"] = None
        if expected["message_id"] is None:  # the sender gives every message an id
            assert actual["message_id"]
            actual["message_id"] = None
        assert actual == expected


BACKENDS = ["memory", "http", "rest"]


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("mode", ["peek_lock", "receive_and_delete"])
@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kw=message_kw, data=body)
def test_every_field_survives_or_the_send_is_refused(backend, mode, count, kw, data):
    async def main() -> None:
        emulator.reset()
        if backend == "memory":
            async with aiosb.connect("memory://trip") as ns:
                await _trip(ns, mode, kw, data, count)
            return
        async with serve() as server:
            extensions = backend == "http"
            async with aiosb.connect(server.namespace_url("trip"), extensions=extensions) as ns:
                await _trip(ns, mode, kw, data, count)

    asyncio.run(main())
