"""A receiver drops pings a broker delivers (PN-14): the emulator never delivers them, a
real namespace does. A transport over the emulator puts pings in front of the answers
here, so the receiver's own branch runs: mixed answers lose their pings, an answer of
pings alone is asked again until the receive's deadline, and then is empty."""

from __future__ import annotations

import pytest

from aiosb import Message
from aiosb.client import Namespace
from aiosb.message import PING_CONTENT_TYPE, ReceivedMessage
from aiosb.protocol import ReceiveRequest
from aiosb.transport.memory import MemoryTransport

pytestmark = pytest.mark.looptime


def _ping() -> ReceivedMessage:
    return ReceivedMessage(b"", content_type=PING_CONTENT_TYPE)


class PingingTransport(MemoryTransport):
    """Answers the i-th receive with ``pings[i]`` pings: before what the queue gives
    (``alone`` false), or instead of it (``alone`` true, the queue left as it is)."""

    def __init__(self, name: str, pings: list[int], alone: bool = False) -> None:
        super().__init__(name)
        self.pings = pings
        self.alone = alone
        self.waits: list[float | None] = []

    async def receive(self, entity: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        self.waits.append(request.max_wait)
        count = self.pings.pop(0) if self.pings else 0
        got = [] if count and self.alone else await super().receive(entity, request)
        return [_ping() for _ in range(count)] + got


async def test_pings_among_messages_are_dropped_and_the_rest_handed_on():
    transport = PingingTransport("pings-mixed", [2])
    async with Namespace(transport) as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send([Message(b"a"), Message(b"b")])
        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            got = await receiver.receive(max_messages=10, max_wait=0)
    assert [m.body for m in got] == [b"a", b"b"] and transport.waits == [0]


@pytest.mark.parametrize("wait", [5, None])
async def test_an_answer_of_pings_alone_is_asked_again_within_the_deadline(wait):
    transport = PingingTransport(f"pings-again-{wait}", [3, 1], alone=True)
    async with Namespace(transport) as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x"))
        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            got = await receiver.receive(max_messages=1, max_wait=wait)
    assert [m.body for m in got] == [b"x"] and transport.waits == [wait] * 3


async def test_pings_alone_after_the_deadline_give_an_empty_answer():
    transport = PingingTransport("pings-late", [2], alone=True)
    async with Namespace(transport) as ns:
        await ns.create_queue("q")
        async with ns.sender("q") as sender:
            await sender.send(Message(b"x"))
        async with ns.receiver("q", mode="receive_and_delete") as receiver:
            got = await receiver.receive(max_messages=1, max_wait=0)
    assert got == [] and transport.waits == [0]
