"""The fuzz target: aiosb's AMQP front end (``serve_amqp`` over the in-process emulator)
on an event loop of its own, fed one whole client byte stream per input (#36).

Each input goes in over TCP to the server's port (its listener and first-byte router,
then the connection handler), then the client's side is shut for writing; the harness
reads whatever the server answers until it closes. In-process, so that the campaign's
coverage guidance sees the server's code; :mod:`.front_door` fuzzes ``aiosb serve``
whole, in a process of its own, through every way in (#48). :meth:`Target.run` raises
:class:`Finding` for what counts as a failure:

- an exception that escapes a connection's handling (the front end catches a bug's
  exception, closes with ``amqp:internal-error`` and logs it: any ERROR record of the
  ``aiosb`` loggers is a finding);
- a connection left open: the server has not closed it within :data:`LIMIT` seconds of
  the client's end of input;
- an answer that is not AMQP: every frame the server writes must parse;
- a connection the server still counts once its handler has ended;
- a good client no longer served (:meth:`Target.still_serves`, between runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from pathlib import Path

import aiosb
from aiosb import Message, emulator
from aiosb.auth import SasChecker
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import AMQP_HEADER, SASL_HEADER, DecodeError
from aiosb.server.amqp.front_end import AmqpServer, serve_amqp

NAMESPACE = "fuzzns"
#: Seconds the server has to close a connection after its client's input ended.
LIMIT = 5.0
_HEAD = struct.Struct(">IBBH")


class Finding(AssertionError):
    """What the fuzzer counts as a failure, said."""


class AnySignature(SasChecker):
    """Takes any token: recorded SDK sessions replay past their tokens' expiry."""

    def __init__(self) -> None:
        super().__init__({})

    def check(self, token: str | None, host: str, path: str, needs: str) -> None:
        return None


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def _entities() -> None:
    async with aiosb.connect(f"memory://{NAMESPACE}") as ns:
        for name, kwargs in (("q1", {}), ("sq", {"requires_session": True}),
                             ("dq", {"requires_duplicate_detection": True})):
            if not await ns.queue_exists(name):
                await ns.create_queue(name, **kwargs)
        if not await ns.topic_exists("t1"):
            await ns.create_topic("t1")
            await ns.create_subscription("t1", "s1")


class Target:
    """A running AMQP front end; ``any_signature`` takes every token (the raw corpus)."""

    def __init__(self, *, any_signature: bool = False) -> None:
        self._runner = asyncio.Runner()
        self._errors = _Errors()
        logging.getLogger("aiosb").addHandler(self._errors)
        self._stack = contextlib.AsyncExitStack()
        self.server: AmqpServer = self._runner.run(self._start(any_signature))
        self.runs = 0

    async def _start(self, any_signature: bool) -> AmqpServer:
        await _entities()
        server = await self._stack.enter_async_context(serve_amqp(namespace=NAMESPACE))
        if any_signature:
            server._checker = AnySignature()
        return server

    def close(self) -> None:
        self._runner.run(self._stack.aclose())
        self._runner.close()
        logging.getLogger("aiosb").removeHandler(self._errors)
        emulator.reset()

    def run(self, data: bytes) -> bytes:
        """Feed ``data`` as one client's whole input; what the server answered.

        Raises:
            Finding: As the module says.
        """
        self.runs += 1
        return self._runner.run(self._session(data))

    async def _session(self, data: bytes) -> bytes:
        await self._refill()
        client_reader, client_writer = await asyncio.open_connection("127.0.0.1",
                                                                     self.server.port)
        answer = b""
        try:
            client_writer.write(data)
            try:
                async with asyncio.timeout(LIMIT):
                    with contextlib.suppress(ConnectionError):
                        await client_writer.drain()
                    # Let the server act on all of it (deliveries, dispositions, replies
                    # come from tasks) until it is quiet, then end the input.
                    answer = await _read_quiet(client_reader)
                    with contextlib.suppress(ConnectionError, OSError):
                        client_writer.write_eof()
                    answer += await _read_all(client_reader)
            except TimeoutError:
                raise Finding(
                    f"the connection was still open {LIMIT:g} s after the client's input "
                    f"ended ({len(data)} bytes in, {len(answer)} out)"
                ) from None
        finally:
            client_writer.close()
        # The server closed its end: its handler ends within a few turns of the loop.
        for _ in range(100):
            if not self.server._connections:
                break
            await asyncio.sleep(0.001)
        errors, self._errors.records[:] = list(self._errors.records), []
        if errors:
            record = errors[0]
            detail = ""
            if record.exc_info and record.exc_info[1] is not None:
                detail = f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            raise Finding(f"the server logged an error: {record.getMessage()}{detail}")
        if self.server._connections:
            raise Finding("the server still counts a connection whose handler ended")
        check_frames(answer)
        return answer

    async def _refill(self) -> None:
        """Keep a few messages where receivers look, so that deliveries are fuzzed too."""
        ns = emulator.namespace(NAMESPACE)
        if self.runs % 16 != 1:
            return
        for path in ("q1", "t1"):
            await ns.send(path, [Message(f"m{i}".encode(), application_properties={"i": i})
                                 for i in range(3)])
        await ns.send("sq", [Message(b"s", session_id="s-1")])

    def still_serves(self) -> None:
        """A good client still sends and receives (nothing the fuzzer did broke it)."""
        async def good() -> None:
            url = self.server.connection_string()
            async with aiosb.connect(url, operation_timeout=20) as ns:
                await ns.sender("q1").send(Message(b"good"))
                async with ns.receiver("q1", mode="receive_and_delete") as receiver:
                    got = await receiver.receive(max_messages=200, max_wait=5)
            if b"good" not in [m.body for m in got]:
                raise Finding("a good client was not served after the fuzz run")

        self._runner.run(good())


#: Seconds without a byte from the server after which the client's input ends.
QUIET = 0.01


async def _read_quiet(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionError, TimeoutError):
        while True:
            async with asyncio.timeout(QUIET):
                chunk = await reader.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def check_frames(answer: bytes) -> None:
    """Every byte the server wrote is a protocol header or a whole, parseable frame.

    Raises:
        Finding: A frame that is cut, or that does not parse.
    """
    pos = 0
    end = len(answer)
    while pos < end:
        if answer.startswith((AMQP_HEADER, SASL_HEADER), pos) or answer.startswith(b"AMQP", pos):
            pos += 8
            continue
        if end - pos < 8:
            raise Finding(f"the server wrote {end - pos} bytes that are no frame at {pos}")
        size, offset, _kind, _channel = _HEAD.unpack_from(answer, pos)
        if size < 8 or offset < 2 or pos + size > end:
            raise Finding(f"the server wrote a frame with size {size}, offset {offset} at {pos}")
        body = answer[pos + offset * 4:pos + size]
        if body:
            try:
                p.parse(body)
            except DecodeError as exc:
                raise Finding(f"the server wrote a frame that does not parse at {pos}: {exc}") \
                    from None
        pos += size


def corpus_files() -> list[Path]:
    """The seed corpus: what the official SDKs sent (tests/fuzz/record.py), and every
    input a finding came from (``finding-*.bin``)."""
    return sorted((Path(__file__).parent / "corpus").glob("*.bin"))
