"""The frames of one AMQP connection, in and out: the connection's socket side.

Out, a frame is queued and what one turn of the loop queued goes out in one write (#36:
a settlement's answer and the next delivery were a system call each); it is flushed
before a drain, a close or a protocol header. In, what the socket has is read at once and
the frames in it taken one by one (#50); a large frame is read in parts so that each is
heard (the idle watch).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from ._links import MAX_FRAME, ProtocolViolation
from .codec import frame

__all__ = ["Framing"]

#: Bytes of a large frame read at a time, at most.
_PART = 65536
#: Bytes asked of the socket at a time for frames up to :data:`_PART`.
_READ = 65536
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
    #: Bytes read and not yet taken (from :attr:`_at` on).
    _in: bytes = b""
    _at: int = 0

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

    @property
    def buffered(self) -> bool:
        """Whether bytes of a next frame were read already (it came with this one)."""
        return len(self._in) > self._at

    def _take(self, n: int) -> bytes | None:
        """``n`` bytes of what was read, if that many are here."""
        at = self._at
        if len(self._in) - at < n:
            return None
        self._at = at + n
        return self._in[at:at + n]

    async def _more(self, n: int) -> None:
        """Read until at least ``n`` bytes are here: what the socket has, in one read
        (#50: a frame's header and body were two reads, each a turn of the loop; many
        frames that came together are one)."""
        while len(self._in) - self._at < n:
            data = await self.reader.read(max(n, _READ))
            if not data:
                raise asyncio.IncompleteReadError(self._in[self._at:], n)
            self._in = self._in[self._at:] + data if self._at < len(self._in) else data
            self._at = 0
            self._heard = self._loop.time()

    async def read_exactly(self, n: int) -> bytes:
        """The next ``n`` bytes (a protocol header)."""
        got = self._take(n)
        if got is None:
            await self._more(n)
            got = self._take(n)
            assert got is not None
        return got

    async def read_frame(self) -> tuple[int, int, bytes]:
        """The next frame: its type, channel and body (empty for a heartbeat)."""
        if len(self._in) - self._at < 8:
            await self._more(8)
        size, offset, kind, channel = _HEADER.unpack_from(self._in, self._at)
        if size < 8 or offset < 2 or size > MAX_FRAME:
            raise ProtocolViolation(
                "amqp:connection:framing-error",
                f"a frame of {size} bytes (data offset {offset}); the limit is {MAX_FRAME}.",
            )
        if size <= _PART + 8 or len(self._in) - self._at >= size:
            if len(self._in) - self._at < size:
                await self._more(size)
            at = self._at
            self._at = at + size
            body = self._in[at + offset * 4:at + size] if offset * 4 < size else b""
        else:  # a large frame may come slowly: each part of it is heard (the idle watch)
            parts = [self._in[self._at + 8:]]
            need = size - len(self._in) + self._at
            self._in, self._at = b"", 0
            while need:
                part = await self.reader.read(min(need, _PART))
                if not part:
                    raise asyncio.IncompleteReadError(b"".join(parts), size - 8)
                parts.append(part)
                need -= len(part)
                self._heard = self._loop.time()
            body = b"".join(parts)[offset * 4 - 8:]
        self._heard = self._loop.time()
        return kind, channel, body
