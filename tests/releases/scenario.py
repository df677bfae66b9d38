"""One everyday scenario with the official aio SDK (#47), run by the Python of a venv
that holds one release of azure-servicebus (tests/releases/venvs.py), against
``aiosb serve``:

    python scenario.py CONNECTION_STRING CERTIFICATE PREFIX

An admin round trip (ServiceBusAdministrationClient over HTTPS at the AMQP port, the
server's certificate trusted with ``connection_verify``: create, get, list, delete), a
batch sent, peek, peek-lock receive and complete, a message scheduled and cancelled, a
session with state (set and get), a send to a queue that does not exist (the refused
link's detach carries the error). It prints one JSON line, what each step saw; a step
that raised ends the scenario and the line names it and the error. It imports only
the SDK: not aiosb, not pytest.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.metadata
import json
import sys
import traceback
from typing import Any

from azure.servicebus import ServiceBusMessage, TransportType
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.aio.management import ServiceBusAdministrationClient
from azure.servicebus.exceptions import ServiceBusError

RELEASE = importlib.metadata.version("azure-servicebus")
#: seconds: the longest wait for messages that are there.
WAIT = 10


def way_in(connection: str, certificate: str) -> dict[str, Any]:
    """How this release reaches ``aiosb serve`` at the connection string's port (as
    docs/sdks.md says). 7.14 and later read ``UseDevelopmentEmulator``: plain AMQP at
    that port. Earlier releases ignore it and speak AMQP over TLS: 7.13 at 5671 whatever
    the port, 7.12 at that port but, on a loopback whose segments exceed 32 KiB (Linux's
    64 KiB one), failing in the SDK's own socket options (EINVAL on ``TCP_MAXSEG``,
    fixed in 7.15). Both come in as AMQP over WebSockets, which takes a port
    (``custom_endpoint_address``) and leaves the socket to aiohttp."""
    if tuple(int(n) for n in RELEASE.split(".")[:2]) >= (7, 14):
        return {}
    endpoint = connection.split("Endpoint=sb://", 1)[1].split(";", 1)[0].rstrip("/")
    return {"transport_type": TransportType.AmqpOverWebsocket,
            "custom_endpoint_address": f"https://{endpoint}",
            "connection_verify": certificate}


async def scenario(connection: str, certificate: str, prefix: str,
                   report: dict[str, Any]) -> None:
    queue, sessions, spare = f"{prefix}-q", f"{prefix}-sq", f"{prefix}-spare"
    report["step"] = "admin"
    # Before 7.15 the administration client leaves its constructor's connection_verify
    # out of its pipeline: each call is given it (as docs/sdks.md says).
    trust = {"connection_verify": certificate}
    async with ServiceBusAdministrationClient.from_connection_string(connection,
                                                                    **trust) as admin:
        await admin.create_queue(queue, **trust)
        await admin.create_queue(sessions, requires_session=True, **trust)
        await admin.create_queue(spare, max_delivery_count=3, **trust)
        got = await admin.get_queue(spare, **trust)
        names = [q.name async for q in admin.list_queues(**trust)]
        await admin.delete_queue(spare, **trust)
        after = [q.name async for q in admin.list_queues(**trust)]
        report["admin"] = {"got": [got.name, got.max_delivery_count],
                           "listed": spare in names, "deleted": spare not in after}

    async with ServiceBusClient.from_connection_string(
            connection, **way_in(connection, certificate)) as client:
        report["step"] = "send"
        async with client.get_queue_sender(queue) as sender:
            batch = await sender.create_message_batch()
            for i in range(3):
                batch.add_message(ServiceBusMessage(f"m{i}", application_properties={"n": i}))
            await sender.send_messages(batch)
            report["step"] = "schedule"
            later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
            numbers = await sender.schedule_messages(ServiceBusMessage("later"), later)
            await sender.cancel_scheduled_messages(numbers)
            report["scheduled"] = len(numbers)

        async with client.get_queue_receiver(queue) as receiver:
            report["step"] = "peek"
            report["peeked"] = [str(m) for m in await receiver.peek_messages(10)]
            report["step"] = "receive"
            received: list[str] = []
            while len(received) < 3:
                got_now = await receiver.receive_messages(3 - len(received), max_wait_time=WAIT)
                if not got_now:
                    break
                for message in got_now:
                    await receiver.complete_message(message)
                    received.append(f"{message}:{message.application_properties[b'n']}")
            report["received"] = sorted(received)
            report["left"] = len(await receiver.peek_messages(10))

        report["step"] = "session"
        async with client.get_queue_sender(sessions) as sender:
            await sender.send_messages(ServiceBusMessage("in a session", session_id="s1"))
        async with client.get_queue_receiver(sessions, session_id="s1") as receiver:
            session = receiver.session
            await session.set_state(b"state-1")
            state = await session.get_state()
            got_now = await receiver.receive_messages(1, max_wait_time=WAIT)
            for message in got_now:
                await receiver.complete_message(message)
            report["session"] = {"id": session.session_id, "state": state.decode(),
                                 "received": [str(m) for m in got_now]}

        report["step"] = "missing"  # its put-token answered 404: the SDK's error, no crash
        try:
            async with client.get_queue_sender(f"{prefix}-missing") as sender:
                await sender.send_messages(ServiceBusMessage("nowhere"))
        except ServiceBusError as exc:
            report["missing"] = type(exc).__name__
    report["step"] = "done"


def main() -> None:
    connection, certificate, prefix = sys.argv[1:4]
    report: dict[str, Any] = {"release": RELEASE}
    try:
        asyncio.run(asyncio.wait_for(scenario(connection, certificate, prefix, report), 120))
    except BaseException as exc:  # reported, and the test fails on it
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-3000:]
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
