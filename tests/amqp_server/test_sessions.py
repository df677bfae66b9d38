"""Session receivers of the official SDK against serve_amqp: a named session and the next
available one, in order, the lock's expiry, state, renewal, a session another receiver
holds, and the lock given back when the receiver closes (#15)."""

from __future__ import annotations

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from aiosb import emulator

from .conftest import NAMESPACE, drain


async def send(client: ServiceBusClient, *pairs: tuple[str, bytes]) -> None:
    async with client.get_queue_sender("sq") as sender:
        await sender.send_messages([ServiceBusMessage(body, session_id=sid)
                                    for sid, body in pairs])


async def test_a_named_session_in_order_with_state_and_renewal(server):
    ns = emulator.namespace(NAMESPACE)
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        await send(client, ("a", b"1"), ("b", b"x"), ("a", b"2"), ("a", b"3"))
        async with client.get_queue_receiver("sq", session_id="a") as receiver:
            session = receiver.session
            assert session.session_id == "a"
            assert session.locked_until_utc.timestamp() > ns.now() + 50
            got = await receiver.receive_messages(max_message_count=10, max_wait_time=5)
            assert [b"".join(m.body) for m in got] == [b"1", b"2", b"3"]
            assert {m.session_id for m in got} == {"a"}
            for message in got:
                await receiver.complete_message(message)
            assert await session.get_state() is None
            await session.set_state(b"state!")
            assert await session.get_state() == b"state!"
            until = await session.renew_lock()
            assert until.timestamp() > ns.now() + 50
        # closed: the lock is given back, so the session can be accepted again at once
        async with client.get_queue_receiver("sq", session_id="a") as again:
            assert await again.session.get_state() == b"state!"
    [left] = await drain("sq", peek=True)
    assert (left.session_id, left.body) == ("b", b"x")
