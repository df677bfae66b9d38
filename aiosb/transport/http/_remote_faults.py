"""Fault injection on an emulator server's namespace over HTTP: the twin of
:class:`aiosb.emulator.Faults` that :attr:`aiosb.transport.http.HttpTransport.faults`
gives."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import HttpTransport

__all__ = ["RemoteFaults"]

_JSON = "application/json"


class RemoteFaults:
    """Fault injection on an emulator server's namespace, over ``/{ns}/$faults``.

    The HTTP twin of :class:`aiosb.emulator.Faults`; methods are coroutines, and a
    fault is known by its id. Get one with ``namespace.transport.faults``.
    """

    def __init__(self, transport: HttpTransport) -> None:
        self._transport = transport

    async def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": _JSON} if payload is not None else None
        _, _, body = await self._transport._request(method, path, data=data, headers=headers)
        return json.loads(body) if body else None

    async def fail(
        self,
        entity: str | None = None,
        *,
        kind: str = "unavailable",
        operations: Sequence[str] = ("send", "receive", "manage"),
    ) -> str:
        """Inject a fault (see :meth:`aiosb.emulator.Faults.fail`); return its id."""
        payload = {"entity": entity, "kind": kind, "operations": list(operations)}
        return str((await self._call("POST", "$faults", payload))["id"])

    async def delay(
        self,
        entity: str | None,
        seconds: float,
        *,
        operations: Sequence[str] = ("send", "receive", "manage"),
    ) -> str:
        """Add latency to ``entity``'s operations; return the fault's id."""
        payload = {"entity": entity, "kind": "delay", "seconds": seconds,
                   "operations": list(operations)}
        return str((await self._call("POST", "$faults", payload))["id"])

    async def fail_fragment(self, entity: str, index: int) -> str:
        """Take one fragment of a partitioned entity down; return the fault's id."""
        answer = await self._call("POST", "$faults", {"entity": entity, "fragment": index})
        return str(answer["id"])

    async def heal(self, fault_id: str | None = None) -> int:
        """Heal one fault by id, or every fault of the namespace; return how many."""
        path = "$faults" if fault_id is None else f"$faults/{urllib.parse.quote(fault_id)}"
        return int((await self._call("DELETE", path))["healed"])

    async def active(self) -> list[dict[str, Any]]:
        """The faults in force, as the server lists them."""
        faults: list[dict[str, Any]] = (await self._call("GET", "$faults"))["faults"]
        return faults

