"""#47: every frame ``aiosb serve`` writes carries each field of its performative, and
each error and delivery state inside it carries its own, nulls where absent. AMQP lets a
sender leave trailing nulls off, but pyamqp before azure-servicebus 7.15 indexes fields
directly (an open's ``frame[9]``, a detach's ``frame[2]``, a transfer's payload after
its eleventh field) and failed on the first frame. Here the frames of a whole
conversation (SASL, $cbs, sends, every settlement, management, sessions, a refused
link, closing) are read off the wire (tests/releases holds the matrix of releases)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusError

from aiosb.server.amqp import _framing
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import Described, decode

#: The delivery states, the termini and the error: each written whole wherever it
#: travels.
_INSIDE = {code: p.WRITTEN_FIELDS[code] for code in (
    p.ERROR, p.RECEIVED, p.ACCEPTED, p.REJECTED, p.RELEASED, p.MODIFIED, p.SOURCE,
    p.TARGET)}


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every frame the server writes, as it goes on the wire."""
    frames: list[bytes] = []
    frame = _framing.frame

    def kept(*args: Any, **kwargs: Any) -> bytes:
        out = frame(*args, **kwargs)
        frames.append(out)
        return out

    monkeypatch.setattr(_framing, "frame", kept)
    return frames


def inside(value: Any) -> list[Described]:
    """Each error and delivery state within ``value``."""
    found: list[Described] = []
    if isinstance(value, Described):
        if value.descriptor in _INSIDE:
            found.append(value)
        found += inside(value.value)
    elif isinstance(value, list):
        for item in value:
            found += inside(item)
    return found


async def conversation(connection: str) -> None:
    """Sends, every settlement, management, a session, a refused link."""
    # retry_total=0: the refused link fails at once, not after the SDK's retries
    async with ServiceBusClient.from_connection_string(connection, retry_total=0) as client:
        async with client.get_queue_sender("q1") as sender:
            await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(5)])
            later = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
            await sender.cancel_scheduled_messages(
                await sender.schedule_messages(ServiceBusMessage("later"), later))
        async with client.get_queue_receiver("q1") as receiver:
            assert len(await receiver.peek_messages(10)) == 5
            got: list[Any] = []
            while len(got) < 4:
                got += await receiver.receive_messages(4 - len(got), max_wait_time=5)
            await receiver.complete_message(got[0])
            await receiver.abandon_message(got[1])
            await receiver.dead_letter_message(got[2], reason="why", error_description="so")
            await receiver.defer_message(got[3])
        async with client.get_queue_receiver(
                "q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            assert await receiver.receive_messages(5, max_wait_time=5)
        async with client.get_queue_sender("sq") as sender:
            await sender.send_messages(ServiceBusMessage("s", session_id="s1"))
        async with client.get_queue_receiver("sq", session_id="s1") as receiver:
            await receiver.session.set_state(b"st")
            assert await receiver.session.get_state() == b"st"
            [message] = await receiver.receive_messages(1, max_wait_time=5)
            await receiver.complete_message(message)
        with pytest.raises(ServiceBusError):
            async with client.get_queue_sender("missing") as sender:
                await sender.send_messages(ServiceBusMessage("x"))


@pytest.mark.timeout(120)
async def test_every_frame_written_carries_every_field(server, written: list[bytes]):
    await conversation(server.connection_string())
    seen: dict[int, int] = {}
    seen_inside: set[Any] = set()
    short: list[str] = []
    for wire in written:
        if len(wire) == 8:
            continue  # a heartbeat
        performative, _end = decode(wire, 4 * wire[4])
        assert isinstance(performative, Described), wire[:40]
        code = int(performative.descriptor)  # type: ignore[call-overload]
        seen[code] = seen.get(code, 0) + 1
        fields = performative.value
        if len(fields) != p.FIELD_COUNT[code]:
            short.append(f"{code:#x} has {len(fields)} of {p.FIELD_COUNT[code]}: {fields}")
        for state in inside(fields):
            seen_inside.add(state.descriptor)
            want = _INSIDE[state.descriptor]  # type: ignore[index]
            if len(state.value) != want:
                short.append(f"in {code:#x}: {state.descriptor:#x} has {len(state.value)} "
                             f"of {want}: {state.value}")
    assert short == []
    # The conversation wrote every kind the SDKs read (the SASL ones too).
    assert set(seen) >= {p.SASL_MECHANISMS, p.SASL_OUTCOME, p.OPEN, p.BEGIN, p.ATTACH,
                         p.FLOW, p.TRANSFER, p.DISPOSITION, p.DETACH, p.END, p.CLOSE}
    assert seen_inside >= {p.ERROR, p.ACCEPTED, p.REJECTED, p.MODIFIED, p.SOURCE, p.TARGET}


async def test_termini_and_outcomes_a_client_sent_short_come_back_whole(server):
    """The answering attach carries the client's own source and target, and a
    disposition echoes the client's outcome: a client that left their trailing nulls
    off (as AMQP lets it, and as Proton and rhea do) gets them back whole, as aiosb
    writes its own (#47)."""
    from aiosb import emulator
    from aiosb.message import Message
    from aiosb.server.amqp.codec import UInt, ULong

    from .conftest import NAMESPACE
    from .test_hostile import Raw

    await emulator.namespace(NAMESPACE).send("q1", [Message(b"x")])
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    raw.send(0, p.performative(
        p.ATTACH, "r", UInt(0), True, None, None, Described(ULong(p.SOURCE), ["q1"]),
        Described(ULong(p.TARGET), ["me"])))
    code, fields = await raw.read()
    assert code == p.ATTACH
    assert len(fields[5].value) == p.WRITTEN_FIELDS[p.SOURCE]
    assert fields[5].value[0] == "q1"
    assert len(fields[6].value) == p.WRITTEN_FIELDS[p.TARGET]
    raw.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(0), UInt(1)))
    while (got := await raw.read())[0] != p.TRANSFER:
        pass
    raw.send(0, p.performative(p.DISPOSITION, True, UInt(got[1][1]), None, False,
                                Described(ULong(p.MODIFIED), [True])))  # short
    while (got := await raw.read())[0] != p.DISPOSITION:
        pass
    state = got[1][4]
    assert state.descriptor == p.MODIFIED
    assert len(state.value) == p.WRITTEN_FIELDS[p.MODIFIED]
    raw.writer.close()
