"""The ``memory://NAME`` transport: the embedded emulator in this process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import emulator
from ..errors import ClientClosed
from ..message import Message, ReceivedMessage
from ..protocol import ManagementRequest, ReceiveRequest, SessionInfo, SessionRequest, Settlement

__all__ = ["MemoryTransport"]


class MemoryTransport:
    """A :class:`~aiosb.transport.Transport` over an embedded emulator namespace.

    Args:
        name: The namespace name; created on first use, shared by every connection to
            it in this process.
        tier: The tier to create it with (``standard`` by default).
    """

    def __init__(self, name: str, *, tier: str | None = None) -> None:
        self._ns = emulator.namespace(name, tier=tier)
        self.namespace = self._ns.name
        self.max_message_size = self._ns.max_message_size
        self._open = False
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._open else "new"
        return f"<MemoryTransport memory://{self.namespace} {state}>"

    async def open(self) -> None:
        """Bind to the running loop (the emulator's timers run on it)."""
        if self._closed:
            raise ClientClosed(f"memory://{self.namespace} was closed; connect again.")
        if not self._open:
            self._ns.attach()
            self._open = True

    def _check(self) -> None:
        if not self._open:
            raise ClientClosed(
                f"the connection to memory://{self.namespace} is "
                f"{'closed' if self._closed else 'not open yet'}."
            )

    async def send(
        self, entity: str, messages: Sequence[Message], *, transaction: bool = False
    ) -> None:
        self._check()
        await self._ns.send(entity, messages, transaction=transaction)

    async def send_columns(
        self, entity: str, bodies: list[bytes], columns: dict[str, Any]
    ) -> None:
        """Send messages given as columns (:meth:`EmulatorNamespace.send_columns
        <aiosb.emulator.EmulatorNamespace.send_columns>`): what the syphon moves, with no
        message object per message (#16)."""
        self._check()
        await self._ns.send_columns(entity, bodies, columns)

    async def schedule(self, entity: str, messages: Sequence[Message]) -> list[int]:
        self._check()
        return await self._ns.schedule(entity, messages)

    async def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> None:
        self._check()
        await self._ns.cancel_scheduled(entity, sequence_numbers)

    async def receive(self, entity: str, request: ReceiveRequest) -> list[ReceivedMessage]:
        self._check()
        return await self._ns.receive(entity, request)

    async def receive_columns(
        self, entity: str, request: ReceiveRequest
    ) -> tuple[list[bytes], dict[str, Any]]:
        """What :meth:`receive` gives, as columns (:meth:`EmulatorNamespace.receive_columns
        <aiosb.emulator.EmulatorNamespace.receive_columns>`): the bodies, and by field
        name a list of each message's value or one value they all have. The columns
        share what the broker holds: read them, do not change them."""
        self._check()
        return await self._ns.receive_columns(entity, request)

    async def settle(self, entity: str, settlement: Settlement) -> list[float] | None:
        self._check()
        return await self._ns.settle(entity, settlement)

    async def session(self, entity: str, request: SessionRequest) -> SessionInfo:
        self._check()
        return await self._ns.session(entity, request)

    async def manage(self, request: ManagementRequest) -> Any:
        self._check()
        return await self._ns.manage(request)

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._ns.detach()
        self._closed = True
