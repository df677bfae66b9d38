"""The AMQP front end against a hostile or broken peer (an adversarial probe found each
case): sizes a peer declares cost no more than the bytes it sent, a handle or channel
used twice is refused rather than leaving the old link running, heartbeats are bounded,
and a field of the wrong type closes the connection with an AMQP error, not a
traceback. After each, a good client is still served."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

import aiosb
from aiosb import emulator
from aiosb.message import Message
from aiosb.protocol import ReceiveRequest
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp._decoding import decode
from aiosb.server.amqp.codec import (
    AMQP_HEADER,
    SASL_HEADER,
    DecodeError,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    frame,
)

from .conftest import NAMESPACE, drain

_HEADER = struct.Struct(">IBBH")


class Raw:
    """An AMQP client written by hand, frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.payload = b""

    @classmethod
    async def to(cls, server: Any) -> Raw:
        return cls(*await asyncio.open_connection("127.0.0.1", server.port))

    def send(self, channel: int, body: Any, payload: bytes = b"", kind: int = 0) -> None:
        self.writer.write(frame(channel, body, payload, kind))

    async def read(self) -> tuple[str, Any]:
        """The next frame as (performative code, fields), ("empty", None) for a
        heartbeat, ("header", bytes), or ("eof", None)."""
        try:
            head = await self.reader.readexactly(8)
            if head.startswith(b"AMQP"):
                return "header", head
            size, offset, _kind, _channel = _HEADER.unpack(head)
            body = (await self.reader.readexactly(size - 8))[offset * 4 - 8:]
        except (asyncio.IncompleteReadError, ConnectionError):
            return "eof", None
        if not body:
            return "empty", None
        code, fields, end = p.parse(body)
        self.payload = body[end:]  # what follows the performative (a transfer's message)
        return code, fields

    async def closed_with(self) -> str | None:
        """Read to the end: the condition of the CLOSE the server sent, if any."""
        condition = None
        async with asyncio.timeout(10):
            while True:
                code, fields = await self.read()
                if code == "eof":
                    return condition
                if code == p.CLOSE and fields:
                    condition = str(fields[0].value[0])

    async def sasl_outcome(self) -> int | None:
        """Read to the end: the code of the sasl-outcome the server sent, if any."""
        outcome = None
        async with asyncio.timeout(10):
            while True:
                code, fields = await self.read()
                if code == "eof":
                    return outcome
                if code == p.SASL_OUTCOME:
                    outcome = int(fields[0])

    async def sasl(self) -> None:
        self.writer.write(SASL_HEADER)
        assert (await self.read())[0] == "header"
        await self.read()  # the mechanisms
        self.send(0, p.performative(p.SASL_INIT, Symbol("ANONYMOUS"), b"", "localhost"), kind=1)
        await self.read()  # the outcome

    async def open(self, idle: int | None = None) -> None:
        await self.sasl()
        self.writer.write(AMQP_HEADER)
        assert (await self.read())[0] == "header"
        self.send(0, p.performative(p.OPEN, "raw", "localhost", None, None,
                                    None if idle is None else UInt(idle)))
        assert (await self.read())[0] == p.OPEN

    async def begin(self, channel: int = 0) -> None:
        self.send(channel, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000)))
        assert (await self.read())[0] == p.BEGIN

    async def put_token(self, port: int, path: str, next_incoming: int = 0) -> None:
        """Authorize ``path`` as the SDKs do: a token put on $cbs (handles 100, 101);
        ``next_incoming``: the transfer id the client expects next from the server."""
        from aiosb.auth import DEV_KEY, DEV_KEY_NAME, SasCredential
        from aiosb.server.amqp.codec import encode

        audience = f"sb://localhost:{port}/{path}"
        for handle, receiving in ((100, False), (101, True)):
            self.send(0, p.performative(
                p.ATTACH, f"cbs{handle}", UInt(handle), receiving, None, None,
                Described(ULong(0x28), ["$cbs"]), Described(ULong(0x29), ["$cbs"]),
                None, None, None if receiving else UInt(0),
            ))
        self.send(0, p.performative(p.FLOW, UInt(next_incoming), UInt(5000), UInt(0),
                                    UInt(5000), UInt(101), UInt(0), UInt(10)))
        request = (
            encode(Described(ULong(0x73), ["put"]))
            + encode(Described(ULong(0x74), {
                "operation": "put-token", "type": "servicebus.windows.net:sastoken",
                "name": audience}))
            + encode(Described(ULong(0x77), SasCredential(DEV_KEY_NAME, DEV_KEY).token(audience)))
        )
        self.send(0, p.performative(p.TRANSFER, UInt(100), UInt(0), b"t", UInt(0), True),
                  request)
        async with asyncio.timeout(10):
            while (await self.read())[0] != p.TRANSFER:  # the reply
                pass

    def attach_receiver(self, handle: Any, address: str, mode: int = 1) -> None:
        """A receiver on ``address``, receive-and-delete (``mode`` 1) or peek-lock (0)
        (no token: the refusal, or the link, follows)."""
        self.send(0, p.performative(
            p.ATTACH, f"r{handle}", handle, True, UByte(mode), None,
            Described(ULong(0x28), [address]), Described(ULong(0x29), [address]),
        ))


async def good_client_is_served(server: Any) -> None:
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        async with client.get_queue_sender("q1") as sender:
            await sender.send_messages(ServiceBusMessage(b"still served"))
        async with client.get_queue_receiver("q1", receive_mode="receiveanddelete") as receiver:
            got = await receiver.receive_messages(max_message_count=5, max_wait_time=5)
    assert [b"".join(m.body) for m in got] == [b"still served"]


# -- the codec --------------------------------------------------------------------------


@pytest.mark.parametrize("data", [
    b"\xf0" + struct.pack(">II", 5, 2**32 - 1) + b"\x40",  # 4 billion nulls in 13 bytes
    b"\xf0" + struct.pack(">II", 5, 2**32 - 1) + b"\x43",  # as many uint 0s
    b"\xf0" + struct.pack(">II", 6, 2**20) + b"\x50\x01",  # a million ubytes in one byte
    b"\xd0" + struct.pack(">II", 8, 2**31) + b"\x40",  # a list of two billion
    b"\xc1\x03\x02\x45\x40",  # a map whose key is a list
    b"\x00\x53\x10" * 5000 + b"\x40",  # described values nested five thousand deep
])
def test_a_declared_size_or_shape_the_bytes_do_not_bear_is_a_decode_error(data):
    with pytest.raises(DecodeError):
        decode(data)


def test_an_array_of_as_many_nulls_as_are_plausible_still_decodes():
    values, _ = decode(b"\xe0\x02\x03\x40")
    assert values == [None, None, None]


# -- the connection ---------------------------------------------------------------------


async def test_an_array_count_in_sasl_init_is_refused_at_once(server):
    """Before any login: 21 bytes declaring an array of 2**32 - 1 nulls stalled the
    whole server for tens of seconds and then ran it out of memory."""
    raw = await Raw.to(server)
    raw.writer.write(SASL_HEADER)
    await raw.read()
    await raw.read()
    body = bytes.fromhex("005341") + b"\xf0" + struct.pack(">II", 5, 2**32 - 1) + b"\x40"
    raw.writer.write(_HEADER.pack(8 + len(body), 2, 1, 0) + body)
    assert await raw.sasl_outcome() == 3  # sys-perm, and the socket closed
    await good_client_is_served(server)


@pytest.mark.parametrize("case", ["an open", "a sasl-init as an AMQP frame", "a huge frame"])
async def test_what_is_not_a_sasl_init_fails_the_sasl_layer_with_its_outcome(server, case):
    """In the SASL layer the client reads SASL frames: a wrong frame there was answered
    with an AMQP close, which a SASL client does not expect; it gets a sasl-outcome of
    sys-perm (AMQP 5.3.3.6), and the socket is closed."""
    raw = await Raw.to(server)
    raw.writer.write(SASL_HEADER)
    assert (await raw.read())[0] == "header"
    assert (await raw.read())[0] == p.SASL_MECHANISMS
    if case == "an open":
        raw.send(0, p.performative(p.OPEN, "raw", "localhost"))
    elif case == "a huge frame":
        raw.writer.write(_HEADER.pack(2**31, 2, 1, 0))
    else:
        raw.send(0, p.performative(p.SASL_INIT, Symbol("ANONYMOUS"), b"", "localhost"))
    assert await raw.sasl_outcome() == 3
    await good_client_is_served(server)


@pytest.mark.parametrize("again", ["handle", "channel"])
async def test_a_handle_or_channel_used_twice_is_refused_and_no_link_outlives_it(
    server, again
):
    """Attached twice on one handle (or begun twice on one channel), the old
    receive-and-delete link went on after the connection ended, taking (and losing)
    what others sent."""
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    raw.attach_receiver(UInt(0), "q1")
    assert (await raw.read())[0] == p.ATTACH
    raw.send(0, p.performative(p.FLOW, UInt(0), UInt(5000), UInt(0), UInt(5000),
                                UInt(0), UInt(0), UInt(50)))
    await asyncio.sleep(0.2)
    if again == "handle":
        raw.attach_receiver(UInt(0), "q1")
        want = "amqp:session:handle-in-use"
    else:
        raw.send(0, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000)))
        want = "amqp:not-allowed"
    condition = None
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != "eof":
            if got[0] == p.CLOSE:
                condition = str(got[1][0].value[0])
    assert condition == want
    await asyncio.sleep(0.2)
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(b"for someone")])
    await asyncio.sleep(0.5)
    kept = await ns.receive("q1", ReceiveRequest(mode="receive_and_delete", max_wait=0))
    assert [m.body for m in kept] == [b"for someone"]


async def test_heartbeats_are_bounded_and_a_second_open_is_refused(server):
    """An idle timeout of 1 ms had the server write a heartbeat every half millisecond
    (a thousand OPENs, a thousand such writers); it beats at most once a second now."""
    raw = await Raw.to(server)
    await raw.open(idle=1)
    beats = 0
    try:
        async with asyncio.timeout(0.5):
            while (await raw.read())[0] == "empty":
                beats += 1
    except TimeoutError:
        pass
    assert beats <= 1
    raw.send(0, p.performative(p.OPEN, "raw", "localhost"))
    assert await raw.closed_with() == "amqp:not-allowed"
    await good_client_is_served(server)


@pytest.mark.parametrize("case,want", [
    ("attach handle 'zero'", "amqp:invalid-field"),
    ("begin before open", "amqp:not-allowed"),
    ("idle timeout a double", "amqp:invalid-field"),
    ("channel 9999", "amqp:connection:framing-error"),
])
async def test_a_field_of_the_wrong_kind_closes_with_an_amqp_error(server, case, want):
    raw = await Raw.to(server)
    if case == "begin before open":
        await raw.sasl()
        raw.writer.write(AMQP_HEADER)
        await raw.read()
        raw.send(0, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000)))
    elif case == "idle timeout a double":
        await raw.sasl()
        raw.writer.write(AMQP_HEADER)
        await raw.read()
        raw.send(0, p.performative(p.OPEN, "raw", "localhost", None, None, 1e-9))
    else:
        await raw.open()
        if case == "channel 9999":
            raw.send(9999, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000)))
        else:
            await raw.begin()
            raw.attach_receiver("zero", "q1")
    assert await raw.closed_with() == want
    await good_client_is_served(server)


async def test_a_disposition_over_a_vast_range_looks_only_at_what_is_outstanding(server):
    """first=0, last=2**32-1: the server walked ten thousand ids a frame, so a megabyte
    of such frames held the loop for seconds. It walks the deliveries outstanding."""
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    (connection,) = server._connections
    session = connection.sessions[0]
    looked: list[int] = []

    class Counting(dict):
        def pop(self, key, default=None):
            looked.append(key)
            return super().pop(key, default)

    session.unsettled = Counting()
    for _ in range(3):
        raw.send(0, p.performative(
            p.DISPOSITION, True, UInt(0), UInt(2**32 - 1), True,
            Described(ULong(0x24), []),
        ))
    raw.send(0, p.performative(p.END))
    assert (await raw.read())[0] == p.END
    assert looked == []


async def test_transfers_beyond_the_credit_given_close_the_connection(server):
    """A sender that ignores its credit would queue transfers without end behind a hung
    send (300,000 in the probe, 340 MB); beyond the credit it is refused."""
    from aiosb.server.amqp.connection import CREDIT

    raw = await _sender(server)
    with emulator.namespace(NAMESPACE).faults.fail("q1", kind="timeout", operations=["send"]):
        payload = bytes.fromhex("005375a003") + b"abc"  # a data section (vbin8)
        for delivery in range(CREDIT + 5):
            raw.send(0, p.performative(
                p.TRANSFER, UInt(0), UInt(delivery), b"%d" % delivery, UInt(0), False,
            ), payload)
        assert await raw.closed_with() == "amqp:link:transfer-limit-exceeded"
    await good_client_is_served(server)


async def test_a_client_that_never_opens_is_let_go(server, monkeypatch):
    """The AMQP open's deadline (#48: the protocol's own phase, after the listener's),
    patched where it is read: the listener no longer keeps a copy of it."""
    from aiosb.server.amqp import connection

    monkeypatch.setattr(connection, "HANDSHAKE_SECONDS", 0.2)
    raw = await Raw.to(server)
    raw.writer.write(SASL_HEADER)  # and nothing more
    async with asyncio.timeout(5):
        while (await raw.read())[0] != "eof":
            pass
    await good_client_is_served(server)


# -- sequence numbers wrap --------------------------------------------------------------


async def test_a_client_whose_transfer_ids_and_delivery_count_wrap_past_2_32_is_served(
    server
):
    """Transfer ids and delivery counts are 32-bit sequence numbers (AMQP 2.8.9) that a
    client may start anywhere: counted on past 2**32 - 1, the server's next flow could
    not be encoded, and the connection closed with invalid-field."""
    raw = await Raw.to(server)
    await raw.open()
    first = 2**32 - 3
    raw.send(0, p.performative(p.BEGIN, None, UInt(first), UInt(5000), UInt(5000)))
    assert (await raw.read())[0] == p.BEGIN
    await raw.put_token(server.port, "q1")
    raw.send(0, p.performative(
        p.ATTACH, "s0", UInt(0), False, None, None,
        Described(ULong(0x28), ["q1"]), Described(ULong(0x29), ["q1"]), None, None,
        UInt(2**32 - 2),
    ))
    code, attached = await raw.read()
    assert code == p.ATTACH
    count = 600  # past half the credit: the server's link flow follows
    payload = bytes.fromhex("005375a003") + b"abc"
    for n in range(count):
        raw.send(0, p.performative(
            p.TRANSFER, UInt(0), UInt((first + 1 + n) % 2**32), b"%d" % n, UInt(0), False,
        ), payload)
    accepted, flows = 0, []
    async with asyncio.timeout(10):
        while accepted < count:
            code, fields = await raw.read()
            assert code not in ("eof", p.CLOSE), fields
            if code == p.DISPOSITION:
                assert fields[4].descriptor == ULong(0x24)  # accepted
                accepted += 1 + (fields[2] - fields[1] if fields[2] is not None else 0)
            elif code == p.FLOW and fields[4] == attached[1]:  # our handle of the link
                flows.append(fields)
    assert flows[0][5] == 2**32 - 2  # the attach's credit, at the client's count
    assert len(flows) > 1
    for flow in flows[1:]:  # ids and count went on past 2**32 - 1, round to 0
        assert 0 < flow[0] <= count and 0 < flow[5] <= count, flow
    assert len(await drain("q1")) == count
    await good_client_is_served(server)


async def test_deliveries_and_a_disposition_range_that_wrap_past_2_32(server):
    """The server's own transfer ids wrap too: deliveries numbered 2**32 - 1, 0, 1 ...
    are sent, and a disposition from 2**32 - 1 to 3 settles every one of them."""
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(b"m%d" % n) for n in range(5)])
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    (connection,) = server._connections
    session = connection.sessions[0]  # transfer-ids and delivery-ids, just short of 2**32
    session.next_outgoing_id = session.next_delivery_id = 2**32 - 2  # the $cbs reply's
    await raw.put_token(server.port, "q1", next_incoming=2**32 - 2)
    raw.attach_receiver(UInt(0), "q1", mode=0)
    assert (await raw.read())[0] == p.ATTACH
    raw.send(0, p.performative(p.FLOW, UInt(2**32 - 1), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(0), UInt(5)))
    ids = []
    async with asyncio.timeout(10):
        while len(ids) < 5:
            code, fields = await raw.read()
            assert code not in ("eof", p.CLOSE), fields
            if code == p.TRANSFER:
                ids.append(fields[1])
    assert ids == [2**32 - 1, 0, 1, 2, 3]
    raw.send(0, p.performative(p.DISPOSITION, True, UInt(2**32 - 1), UInt(3), False,
                                Described(ULong(0x24), [])))
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.DISPOSITION:
            assert got[0] not in ("eof", p.CLOSE), got
    assert got[1][1:3] == [2**32 - 1, 3]
    assert await drain("q1", peek=True) == []  # completed, every one


# -- replies the client takes none of ---------------------------------------------------


@pytest.mark.parametrize("node", ["$cbs", "q1/$management"])
async def test_requests_whose_replies_are_never_taken_close_the_connection(server, node):
    """Asking on $cbs or $management while giving the reply link no credit queued every
    reply (51 MB from 12 MB of requests in the probe); past MOST_REPLIES waiting, the
    connection is closed with resource-limit-exceeded, and the request refused is not
    done (a schedule-message here: no message is scheduled with no reply to say so)."""
    import datetime as dt

    from aiosb.server.amqp._links import MOST_REPLIES
    from aiosb.server.amqp.codec import encode

    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    if node != "$cbs":
        await raw.put_token(server.port, "q1")
    for handle, receiving in ((0, False), (1, True)):  # and no flow for the reply link
        raw.send(0, p.performative(
            p.ATTACH, f"n{handle}", UInt(handle), receiving, None, None,
            Described(ULong(0x28), [node]), Described(ULong(0x29), [node]),
            None, None, None if receiving else UInt(0),
        ))
    request = bytes.fromhex("00537740")  # an amqp-value of null: answered with an error
    if node != "$cbs":
        at = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
        message = (encode(Described(ULong(0x72), {Symbol("x-opt-scheduled-enqueue-time"): at}))
                   + encode(Described(ULong(0x75), b"later")))
        request = (
            encode(Described(ULong(0x73), ["id", None, None, None, "me"]))
            + encode(Described(ULong(0x74), {"operation": "com.microsoft:schedule-message"}))
            + encode(Described(ULong(0x77), {"messages": [{"message": message}]}))
        )
    sent = served = 0
    condition = None
    async with asyncio.timeout(20):
        while True:  # within the credit: at most 100 requests not yet served
            while sent <= MOST_REPLIES and sent - served < 100:
                raw.send(0, p.performative(
                    p.TRANSFER, UInt(0), UInt(sent), b"%d" % sent, UInt(0), False,
                ), request)
                sent += 1
            code, fields = await raw.read()
            if code == p.DISPOSITION:
                served += 1 + (fields[2] - fields[1] if fields[2] is not None else 0)
            elif code == p.CLOSE:
                condition = str(fields[0].value[0])
            elif code == "eof":
                break
    assert condition == "amqp:resource-limit-exceeded"
    assert served == MOST_REPLIES  # each reply it could hold was answered
    if node != "$cbs":
        from aiosb.protocol import ManagementRequest

        counts = await emulator.namespace(NAMESPACE).manage(
            ManagementRequest("runtime", None, "q1"))
        assert counts.scheduled_message_count == MOST_REPLIES
    await good_client_is_served(server)


# -- the idle timeout -------------------------------------------------------------------


@pytest.mark.looptime
async def test_a_connection_silent_past_the_idle_timeout_it_was_told_is_closed(server):
    """Our OPEN says Service Bus's idle-time-out (120 s): a client that sends a frame
    (a heartbeat will do) within it keeps its connection for as long as it likes; one
    silent for 120 s is closed (AMQP 2.4.5) as Service Bus closes it (connection:forced,
    which the SDKs meet by reconnecting), so a peer that vanished without a word holds no
    connection and no link."""
    from aiosb.server.amqp._links import IDLE_SECONDS

    loop = asyncio.get_running_loop()
    raw = await Raw.to(server)
    await raw.sasl()
    raw.writer.write(AMQP_HEADER)
    assert (await raw.read())[0] == "header"
    raw.send(0, p.performative(p.OPEN, "raw", "localhost"))
    code, fields = await raw.read()
    assert code == p.OPEN and fields[4] == IDLE_SECONDS * 1000
    for _ in range(6):  # ten minutes of heartbeats at just under the timeout
        await asyncio.sleep(IDLE_SECONDS - 5)
        raw.writer.write(_HEADER.pack(8, 2, 0, 0))
    await raw.begin()  # still open: the BEGIN is answered
    silent_from = loop.time()
    condition = None
    async with asyncio.timeout(IDLE_SECONDS * 2):
        while (got := await raw.read())[0] != "eof":
            if got[0] == p.CLOSE:
                condition = str(got[1][0].value[0])
    assert condition == "amqp:connection:forced"
    assert IDLE_SECONDS <= loop.time() - silent_from <= IDLE_SECONDS + 2
    assert not server._connections


# -- deliveries over more than one frame ------------------------------------------------


@pytest.mark.parametrize("mode", ["receiveanddelete", "peeklock"])
async def test_the_sdk_receives_on_after_a_message_over_one_frame(mode):
    """A 1 MB message (premium) goes out in two frames. AMQP counts transfer-ids by the
    frame (2.5.6), as the SDK does; the server counted deliveries, so the SDK's next
    flow was ahead of it and the session's window read as -4 billion: nothing more was
    ever sent on it (the SDK received the big message, then nothing)."""
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    from aiosb.server.amqp.front_end import serve_amqp

    async with aiosb.connect("memory://bigframes?tier=premium") as ns:
        await ns.create_queue("big")
        async with serve_amqp(namespace="bigframes") as server:
            async with ServiceBusClient.from_connection_string(server.connection_string()) as c:
                async with c.get_queue_sender("big") as sender:
                    await sender.send_messages(ServiceBusMessage(b"x" * 1_048_430))
                    await sender.send_messages([ServiceBusMessage(b"small 1"),
                                                ServiceBusMessage(b"small 2")])
                async with c.get_queue_receiver("big", receive_mode=mode) as receiver:
                    got = []
                    for _ in range(6):
                        batch = await receiver.receive_messages(max_message_count=1,
                                                                max_wait_time=2)
                        for message in batch:
                            if mode == "peeklock":
                                await receiver.complete_message(message)
                            got.append(len(b"".join(message.body)))
                        if len(got) == 3:
                            break
        assert sorted(got) == [7, 7, 1_048_430]  # (peek-lock: one may be released, then again)
        assert (await ns.runtime_properties("big")).total_message_count == 0


async def test_a_client_with_small_frames_gets_every_frame_counted(server):
    """A client of 4 KB frames: a 10 KB message takes three transfer frames, which its
    flow counts; the next delivery follows at once, with the next delivery-id."""
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(b"b" * 10_000), Message(b"small")])
    raw = await Raw.to(server)
    await raw.sasl()
    raw.writer.write(AMQP_HEADER)
    assert (await raw.read())[0] == "header"
    raw.send(0, p.performative(p.OPEN, "raw", "localhost", UInt(4096)))
    assert (await raw.read())[0] == p.OPEN
    await raw.begin()
    await raw.put_token(server.port, "q1")  # its reply: transfer-id 0
    raw.attach_receiver(UInt(0), "q1")
    assert (await raw.read())[0] == p.ATTACH
    frames: list[Any] = []

    async def take(count: int) -> None:
        async with asyncio.timeout(10):
            while len(frames) < count:
                code, fields = await raw.read()
                assert code not in ("eof", p.CLOSE), fields
                if code == p.TRANSFER:
                    frames.append(fields)

    raw.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(0), UInt(1)))
    await take(3)
    assert [bool(f[5]) for f in frames] == [True, True, False]  # more, more, last
    assert {f[1] for f in frames} == {1}  # one delivery: the $cbs reply was 0
    # The client saw transfers 0 to 3: it expects transfer-id 4 next, and gives credit.
    raw.send(0, p.performative(p.FLOW, UInt(4), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(1), UInt(1)))
    await take(4)
    assert frames[3][1] == 2  # the next delivery-id, after 1
    assert await drain("q1", peek=True) == []


async def test_a_disposition_range_that_ends_before_it_begins_settles_nothing(server):
    ns = emulator.namespace(NAMESPACE)
    await ns.send("q1", [Message(b"m%d" % n) for n in range(5)])
    raw = await _receiver(server, 0, credit=5)
    ids = []
    async with asyncio.timeout(10):
        while len(ids) < 5:
            code, fields = await raw.read()
            if code == p.TRANSFER:
                ids.append(fields[1])
    raw.send(0, p.performative(p.DISPOSITION, True, UInt(3), UInt(2), False,
                                Described(ULong(0x24), [])))
    raw.send(0, p.performative(p.DISPOSITION, True, UInt(ids[0]), None, False,
                                Described(ULong(0x24), [])))  # then one that is real
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.DISPOSITION:
            pass
    assert got[1][1] == ids[0]  # the first answered is the real one's
    assert len(await drain("q1", peek=True)) == 4  # only it was completed


# -- deliveries the client sends over more than one frame -------------------------------


def _transfer(raw: Raw, did: int, payload: bytes, more: bool = False,
              aborted: bool | None = None) -> None:
    raw.send(0, p.performative(p.TRANSFER, UInt(0), UInt(did), b"t%d" % did, UInt(0), False,
                               more, None, None, None, aborted), payload)


def _data(body: bytes) -> bytes:
    from aiosb.server.amqp.codec import encode

    return encode(Described(ULong(0x75), body))


async def _receiver(server: Any, mode: int, credit: int) -> Raw:
    """A receiver on q1, peek-lock (``mode`` 0) or receive-and-delete (1), given
    ``credit`` (the client expects transfer-id 1 next: its token's reply was 0)."""
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    raw.attach_receiver(UInt(0), "q1", mode=mode)
    assert (await raw.read())[0] == p.ATTACH
    raw.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(0), UInt(credit)))
    return raw


async def _sender(server: Any) -> Raw:
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    raw.send(0, p.performative(
        p.ATTACH, "s0", UInt(0), False, None, None,
        Described(ULong(0x28), ["q1"]), Described(ULong(0x29), ["q1"]), None, None, UInt(0),
    ))
    assert (await raw.read())[0] == p.ATTACH
    return raw


async def test_an_abort_wins_over_more_and_nothing_of_the_delivery_is_kept(server):
    """An abort sent with more=true (AMQP 2.7.5: abort takes precedence) was ignored:
    the aborted bytes were glued to the next delivery, stored as one corrupt message
    under the aborted delivery's id, and the next delivery was never settled."""
    raw = await _sender(server)
    _transfer(raw, 1, _data(b"ABORTED-PART"), more=True)
    _transfer(raw, 1, b"", more=True, aborted=True)
    _transfer(raw, 2, _data(b"GOOD"))
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.DISPOSITION:
            assert got[0] not in ("eof", p.CLOSE), got
    assert got[1][1] == 2  # settled under its own id
    assert [m.body for m in await drain("q1")] == [b"GOOD"]


async def test_a_delivery_begun_before_the_last_one_ended_closes_the_connection(server):
    """Delivery 5 begun while delivery 4 still had more to come was glued onto it and
    stored as one message (b"FOURFIVE"); it is a protocol error, and nothing is kept."""
    raw = await _sender(server)
    _transfer(raw, 4, _data(b"FOUR"), more=True)
    _transfer(raw, 5, _data(b"FIVE"))
    assert await raw.closed_with() == "amqp:invalid-field"
    assert await drain("q1") == []


@pytest.mark.looptime
async def test_a_silent_client_that_reads_nothing_is_let_go_with_its_links(server):
    """Closed for silence with bytes still unsent (the client read nothing of the
    25 MB its credit asked for), the connection went on: closing waits to write them,
    so the frame reader never ended and the link's pump, the connection and what it
    held stayed. Now the reader ends at once and the socket goes within CLOSE_SECONDS."""
    from aiosb.server.amqp._links import IDLE_SECONDS
    from aiosb.server.amqp.connection import CLOSE_SECONDS

    ns = emulator.namespace(NAMESPACE)
    for _ in range(125):
        await ns.send("q1", [Message(b"x" * 200_000)])
    raw = await _receiver(server, 0, credit=1000)  # peek-lock: what it took comes back
    (connection,) = server._connections
    await asyncio.sleep(IDLE_SECONDS + CLOSE_SECONDS + 2)  # and it reads nothing
    assert not server._connections
    assert all(link.pump is None or link.pump.done()
               for session in connection.sessions.values() for link in session.links.values())
    raw.writer.close()  # (held to here: the client is silent, not gone)


@pytest.mark.looptime
async def test_a_large_frame_that_comes_slowly_is_heard_all_along(server):
    """A 200 KB frame sent over five minutes, a part a minute: the client is not
    silent, though no frame is whole for longer than the idle timeout."""
    from aiosb.server.amqp._links import IDLE_SECONDS

    raw = await _sender(server)
    data = frame(0, p.performative(p.TRANSFER, UInt(0), UInt(0), b"t", UInt(0), False),
                 _data(b"x" * 200_000))
    step = len(data) // 5 + 1
    for start in range(0, len(data), step):
        raw.writer.write(data[start:start + step])
        await raw.writer.drain()
        await asyncio.sleep(IDLE_SECONDS / 2)
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.DISPOSITION:
            assert got[0] not in ("eof", p.CLOSE), got
    assert [len(m.body) for m in await drain("q1")] == [200_000]


@pytest.mark.parametrize("ending", ["detach", "end", "close"])
async def test_what_a_client_sent_settled_is_kept_when_it_goes(server, ending):
    """Sent pre-settled (the client counts each delivered as it sends it), then a
    detach, end or close: the link's worker was cancelled with most of them still
    queued (15 of 200 stored). Frames come in order: every one is stored now."""
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    raw.send(0, p.performative(
        p.ATTACH, "s0", UInt(0), False, UByte(1), None,
        Described(ULong(0x28), ["q1"]), Described(ULong(0x29), ["q1"]), None, None, UInt(0),
    ))
    assert (await raw.read())[0] == p.ATTACH
    for n in range(200):
        raw.send(0, p.performative(p.TRANSFER, UInt(0), UInt(n), b"%d" % n, UInt(0), True),
                 _data(b"m%d" % n))
    raw.send(0, p.performative({"detach": p.DETACH, "end": p.END, "close": p.CLOSE}[ending],
                               *([UInt(0), True] if ending == "detach" else [])))
    async with asyncio.timeout(10):
        while (await raw.read())[0] not in ("eof", p.DETACH, p.END, p.CLOSE):
            pass
    await asyncio.sleep(0.2)
    assert [m.body for m in await drain("q1")] == [b"m%d" % n for n in range(200)]


# -- flows while a receive waits --------------------------------------------------------


async def _waiting_receiver(server: Any, mode: int) -> Raw:
    """A receiver on q1 (empty) given credit 5: the server's receive waits for messages."""
    raw = await _receiver(server, mode, credit=5)
    await asyncio.sleep(0.3)
    return raw


async def test_a_drain_is_answered_at_once_though_a_receive_waits(server):
    """The drain was answered only when the server's receive ended (up to 30 s)."""
    raw = await _waiting_receiver(server, mode=0)
    raw.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(0), UInt(5), None, True))
    async with asyncio.timeout(2):
        while (got := await raw.read())[0] != p.FLOW:
            pass
    assert got[1][6] == 0 and got[1][5] == 5 and got[1][8]  # credit used up, drain said


@pytest.mark.parametrize("mode", [0, 1])
async def test_credit_taken_back_while_a_receive_waits_is_respected(server, mode):
    """Credit set to 0 during the wait was not seen: the messages that came were taken
    from the broker and sent all the same, which a client holding to its credit throws
    away (in receive-and-delete, lost). Now nothing is taken or sent."""
    raw = await _waiting_receiver(server, mode)
    raw.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(1), UInt(5000),
                                UInt(0), UInt(0), UInt(0)))
    await asyncio.sleep(0.2)
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"one"), Message(b"two")])
    transfers = 0
    try:
        async with asyncio.timeout(1):
            while True:
                if (await raw.read())[0] == p.TRANSFER:
                    transfers += 1
    except TimeoutError:
        pass
    assert transfers == 0
    assert [m.body for m in await drain("q1")] == [b"one", b"two"]  # neither taken


# -- $management requests that break what reads them ------------------------------------


async def test_a_management_request_that_breaks_its_reader_is_answered_400(server):
    """A schedule-message whose scheduled time is an integer too large for a date (or
    an entry with no message) raised past the reply: no answer ever came, and the SDK
    waited out its whole timeout."""
    from aiosb.server.amqp.codec import encode
    from aiosb.server.amqp.messages import sections_of

    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    node = "q1/$management"
    raw.send(0, p.performative(p.ATTACH, "ms", UInt(10), False, UByte(0), UByte(0),
             Described(ULong(0x28), ["me"]), Described(ULong(0x29), [node]), None, None,
             UInt(0)))
    raw.send(0, p.performative(p.ATTACH, "mr", UInt(11), True, UByte(0), UByte(0),
             Described(ULong(0x28), [node]), Described(ULong(0x29), ["me"])))
    raw.send(0, p.performative(p.FLOW, UInt(1), UInt(5000), UInt(1), UInt(5000),
                                UInt(11), UInt(0), UInt(10)))
    notes = {Symbol("x-opt-scheduled-enqueue-time"): -2**62}
    message = (encode(Described(ULong(0x72), notes)) + encode(Described(ULong(0x73), ["m"]))
               + encode(Described(ULong(0x75), b"sched")))
    statuses = []
    for n, body in enumerate(({"messages": [{"message": message}]}, {"messages": [{}]})):
        raw.send(0, p.performative(p.TRANSFER, UInt(10), UInt(n), b"r%d" % n, UInt(0), False),
                 encode(Described(ULong(0x73), [f"id{n}", None, None, None, "me"]))
                 + encode(Described(ULong(0x74), {"operation": "com.microsoft:schedule-message"}))
                 + encode(Described(ULong(0x77), body)))
        async with asyncio.timeout(5):
            while True:
                code, fields = await raw.read()
                assert code not in ("eof", p.CLOSE), fields
                if code == p.TRANSFER:
                    break
        statuses.append(sections_of(raw.payload).application_properties["statusCode"])
    assert statuses == [400, 400]


async def test_a_delivery_the_client_settles_with_no_outcome_is_released(server):
    """Settled with no state, the delivery was kept outstanding and its message locked
    until the lock ran out, for a client that had forgotten it; it is released now, as
    if never delivered."""
    await emulator.namespace(NAMESPACE).send("q1", [Message(b"m")])
    raw = await _receiver(server, 0, credit=1)
    async with asyncio.timeout(10):
        while (got := await raw.read())[0] != p.TRANSFER:
            pass
    raw.send(0, p.performative(p.DISPOSITION, True, UInt(got[1][1]), None, True, None))
    await asyncio.sleep(0.3)
    [seen] = await drain("q1", peek=True)
    assert seen.delivery_count == 0  # not counted
    assert [m.body for m in await drain("q1")] == [b"m"]  # and not locked: taken at once


async def test_a_bug_met_serving_a_frame_closes_that_connection_with_internal_error(
    server, monkeypatch
):
    """An unexpected exception ends its own connection with amqp:internal-error (and
    the server's log), not a traceback the client never hears of; others are served."""
    from aiosb.server.amqp import connection

    def broken(self: Any, channel: int, fields: list[Any]) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(connection.Connection, "_on_begin", broken)
    raw = await Raw.to(server)
    await raw.open()
    raw.send(0, p.performative(p.BEGIN, None, UInt(0), UInt(5000), UInt(5000)))
    assert await raw.closed_with() == "amqp:internal-error"
    assert not server._connections
    monkeypatch.undo()
    await good_client_is_served(server)
