"""The frames of one AMQP connection, in and out: the connection's socket side.

Out, a frame is queued and what one turn of the loop queued goes out in one write (#36:
a settlement's answer and the next delivery were a system call each); it is flushed
before a drain, a close or a protocol header. In, a frame is read whole, a large one in
parts so that each is heard (the idle watch).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from ._links import MAX_FRAME, ProtocolViolation
from .codec import frame

__all__ = ["Framing"]

#: Bytes of a frame read at a time, at most.
_PART = 65536
_HEADER = struct.Struct(">IBBH")


class Framing:
    """A connection's frame reading and writing (the base of its link halves)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    _loop: asyncio.AbstractEventLoop
    #: The loop time of the client's last frame (or part of one).
    _heard: float
    #: Frames queued this turn of the loop (:meth:`send_frame`).
    _out: list[bytes]

    def send_frame(self, channel: int, body: Any, payload: bytes = b"", kind: int = 0) -> None:
        """Queue a frame; what one turn of the loop queues goes out in one write (#36: a
        settlement's answer and the next delivery were a system call each)."""
        if self.writer.is_closing():
            return
        out = self._out
        out.append(frame(channel, body, payload, kind))
        if len(out) == 1:
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write the frames queued so far (before a drain, a close, a header)."""
        out = self._out
        if out:
            self._out = []
            if not self.writer.is_closing():
                self.writer.write(out[0] if len(out) == 1 else b"".join(out))

    async def read_frame(self) -> tuple[int, int, bytes]:
        """The next frame: its type, channel and body (empty for a heartbeat)."""
        size, offset, kind, channel = _HEADER.unpack(await self.reader.readexactly(8))
        if size < 8 or offset < 2 or size > MAX_FRAME:
            raise ProtocolViolation(
                "amqp:connection:framing-error",
                f"a frame of {size} bytes (data offset {offset}); the limit is {MAX_FRAME}.",
            )
        need = size - 8
        if need <= _PART:
            body = await self.reader.readexactly(need)
        else:  # a large frame may come slowly: each part of it is heard (the idle watch)
            parts: list[bytes] = []
            while need:
                part = await self.reader.read(min(need, _PART))
                if not part:
                    raise asyncio.IncompleteReadError(b"".join(parts), size - 8)
                parts.append(part)
                need -= len(part)
                self._heard = self._loop.time()
            body = b"".join(parts)
        self._heard = self._loop.time()
        return kind, channel, body[offset * 4 - 8:]
