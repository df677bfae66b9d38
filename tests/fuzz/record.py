"""Record what the official Python SDK sends, byte for byte, as the fuzz corpus (#36).

    .venv/bin/python -m tests.fuzz.record        # rewrites tests/fuzz/corpus/sdk-*.bin

A recording TCP relay stands between the SDK (sync and aio) and ``serve_amqp``; each
connection's client-to-server bytes become one file. The SDK's sessions cover the SASL
exchange, ``$cbs`` put-token, senders (single messages and batches), peek-lock and
receive-and-delete receivers with every settlement, sessions, and the ``$management``
operations (peek, renew, schedule, cancel, deferred receive, session state). The tokens
in them expire; the campaign's raw target takes any signature so that they replay."""

from __future__ import annotations

import asyncio
import datetime as _dt
from pathlib import Path

import aiosb
from aiosb.server.amqp.front_end import serve_amqp

CORPUS = Path(__file__).parent / "corpus"
NAMESPACE = "fuzzns"


async def _relay(target_port: int, captured: list[bytearray]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        sent = bytearray()
        captured.append(sent)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       keep: bytearray | None) -> None:
            try:
                while data := await src.read(65536):
                    if keep is not None:
                        keep += data
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, sent), pipe(up_reader, writer, None))

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _sdk_sessions(connection: str) -> None:
    from azure.servicebus import (
        ServiceBusClient,
        ServiceBusMessage,
        ServiceBusReceiveMode,
        ServiceBusSubQueue,
    )

    at = _dt.datetime.now(_dt.UTC) + _dt.timedelta(minutes=5)
    with ServiceBusClient.from_connection_string(connection) as client:
        with client.get_queue_sender("q1") as sender:
            sender.send_messages(ServiceBusMessage("one", subject="s", message_id="m1",
                                                   application_properties={"k": 1}))
            sender.send_messages([ServiceBusMessage(f"b{i}") for i in range(3)])
            (seq,) = sender.schedule_messages(ServiceBusMessage("later"), at)
            sender.cancel_scheduled_messages(seq)
        with client.get_queue_receiver("q1", max_wait_time=2) as receiver:
            receiver.peek_messages(5)
            got = receiver.receive_messages(max_message_count=4, max_wait_time=2)
            actions = [receiver.complete_message, receiver.abandon_message,
                       receiver.defer_message, receiver.dead_letter_message]
            deferred = []
            for message, act in zip(got, actions, strict=False):
                receiver.renew_message_lock(message)
                if act == receiver.defer_message:
                    deferred.append(message.sequence_number)
                act(message)
            if deferred:
                for message in receiver.receive_deferred_messages(deferred):
                    receiver.complete_message(message)
        with client.get_queue_receiver("q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                       max_wait_time=1) as receiver:
            receiver.receive_messages(max_message_count=10, max_wait_time=1)
        with client.get_queue_receiver("q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                       max_wait_time=1) as receiver:
            for message in receiver.receive_messages(max_message_count=5, max_wait_time=1):
                receiver.complete_message(message)
        with client.get_topic_sender("t1") as sender:
            sender.send_messages(ServiceBusMessage("to the topic"))
        with client.get_subscription_receiver("t1", "s1", max_wait_time=1) as receiver:
            for message in receiver.receive_messages(max_wait_time=1):
                receiver.complete_message(message)
        with client.get_queue_sender("sq") as sender:
            sender.send_messages(ServiceBusMessage("in a session", session_id="s-1"))
        with client.get_queue_receiver("sq", session_id="s-1", max_wait_time=1) as receiver:
            session = receiver.session
            session.set_state(b"state")
            session.get_state()
            session.renew_lock()
            for message in receiver.receive_messages(max_wait_time=1):
                receiver.complete_message(message)


async def main() -> None:
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        await ns.create_queue("q1")
        await ns.create_queue("sq", requires_session=True)
        await ns.create_topic("t1")
        await ns.create_subscription("t1", "s1")
    captured: list[bytearray] = []
    async with serve_amqp(namespace=NAMESPACE) as server:
        relay = await _relay(server.port, captured)
        port = relay.sockets[0].getsockname()[1]
        connection = server.connection_string().replace(f":{server.port};", f":{port};")
        await asyncio.to_thread(_sdk_sessions, connection)
        relay.close()
    for old in CORPUS.glob("sdk-*.bin"):
        old.unlink()
    for i, data in enumerate(d for d in captured if d):
        (CORPUS / f"sdk-{i:02d}.bin").write_bytes(bytes(data))
    print(f"recorded {len([d for d in captured if d])} SDK connections in {CORPUS}")


if __name__ == "__main__":
    asyncio.run(main())
