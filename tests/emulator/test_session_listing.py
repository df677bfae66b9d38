"""The broker's session listing (ManagementRequest "sessions", what get-message-sessions
serves): through the memory transport, so the protocol carries it as every backend must."""

from __future__ import annotations

import pytest

import aiosb
from aiosb import emulator, errors
from aiosb.message import Message
from aiosb.protocol import ManagementRequest, SessionRequest

pytestmark = pytest.mark.timeout(30)


async def test_sessions_with_messages_or_state_and_those_whose_state_changed_since():
    async with aiosb.connect("memory://listing") as ns:
        await ns.create_queue("sq", requires_session=True)
        await ns.create_queue("plain")
        transport = ns.transport

        async def listed(after: float | None = None) -> list[str]:
            return await transport.manage(ManagementRequest("sessions", None, "sq", after))

        assert await listed() == []
        await transport.send("sq", [Message(b"x", session_id=s) for s in ("b", "a")])
        held = await transport.session("sq", SessionRequest("accept", "c", max_wait=0))
        assert await listed() == ["a", "b"]  # c is locked but holds nothing
        before = emulator.namespace("listing").now()
        await transport.session("sq", SessionRequest("set_state", "c", held.lock, b"s"))
        assert await listed() == ["a", "b", "c"]
        assert await listed(before - 1) == ["c"]  # only the state counts, not messages
        assert await listed(before + 3600) == []
        with pytest.raises(errors.InvalidOperation, match="not session-enabled"):
            await transport.manage(ManagementRequest("sessions", None, "plain"))
        with pytest.raises(errors.InvalidArgument):
            await transport.manage(ManagementRequest("sessions", None, "sq", "yesterday"))
