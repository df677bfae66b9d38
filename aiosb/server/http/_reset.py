"""``POST /{namespace}/$reset``: a namespace back to how the server started it, for a
test suite that shares one server (the ``aiosb_server`` fixture, #51): every fault
healed, every queue and topic deleted (their subscriptions, messages, sessions and
scheduled messages with them), then, for the namespace the server serves at the root,
what it made at start made again (``aiosb serve --config``'s entities)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from ...emulator import EmulatorNamespace
from ...errors import InvalidOperation
from ...protocol import ManagementRequest

__all__ = ["reset"]


async def reset(request: web.Request, ns: EmulatorNamespace,
                remake: Callable[[], Awaitable[None]] | None) -> web.StreamResponse:
    """Empty ``ns`` (a ``POST``); ``remake``, when given, makes its starting entities
    again. Answers ``{"deleted": N}``, the queues and topics deleted. Deletions go
    through the broker's management, so a durable server's journal keeps them."""
    if request.method != "POST":
        raise InvalidOperation("reset: POST /{ns}/$reset empties the namespace.")
    ns.faults.heal()
    deleted = 0
    for status in ns.entity_statuses():
        if status.kind == "queue":
            await ns.manage(ManagementRequest("delete", "queue", status.path))
        elif status.kind == "topic":  # its subscriptions go with it
            await ns.manage(ManagementRequest("delete", "topic", status.path))
        else:
            continue
        deleted += 1
    if remake is not None:
        await remake()
    return web.json_response({"deleted": deleted})
