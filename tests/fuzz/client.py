"""One client connection through the front door, played step by step (#48): what
:mod:`.front_door` feeds ``aiosb serve`` and :mod:`.doors` draws.

An input is a :class:`Plan`: which port, then steps played in order on one connection
(:class:`Conn`): bytes sent as they are (before TLS, or garbage after a handshake), a
TLS handshake (whole, in pieces, or a ClientHello cut or changed), bytes sent inside TLS,
a close_notify, a wait for the server's answer; then an ending (a half-close, a close, a
reset).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any

from .harness import LIMIT, Finding, check_frames

#: Seconds without a byte from the server after which the client goes on.
QUIET = 0.01


@dataclass(frozen=True)
class Plan:
    """One connection's input: the port (``amqp`` or ``amqps``), the steps, the ending
    (``shut``: half-close and wait for the server to close; ``close``; ``reset``), and
    what the content is (``amqp``, ``http``, ``websocket``, ``bytes``) for the answer's
    check."""

    port: str
    steps: tuple[tuple[Any, ...], ...]
    end: str = "shut"
    content: str = "amqp"


class Conn:
    """One client connection, played step by step with blocking sockets; TLS is done
    by hand (:class:`ssl.SSLObject` over memory buffers) so that its bytes can be cut,
    changed or followed by garbage."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=LIMIT)
        self.context = context
        self.tls: ssl.SSLObject | None = None
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.answer = bytearray()
        #: The stream is no longer what a well-behaved peer would read (a changed hello,
        #: bytes outside TLS): the answer is not checked.
        self.odd = False
        self.closed = False  # the server closed (EOF or reset)
        self._handshaking = False  # what comes is TLS records (for _in, not the answer)

    def play(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind == "raw":
            if self.tls is not None:
                self.odd = True
            self._send(step[1])
        elif kind == "send":
            self._send(self._wrap(step[1]))
        elif kind == "hello":
            self._hello(*step[1:])
        elif kind == "quiet":
            self.read(QUIET)
        elif kind == "headers":  # the answer to an upgrade request, before the frames
            deadline = time.monotonic() + 0.5
            while b"\r\n\r\n" not in self.answer and not self.closed and not self.odd \
                    and time.monotonic() < deadline:
                self.read(QUIET)
        elif kind == "close_notify":
            if self.tls is not None:
                with contextlib.suppress(ssl.SSLError):
                    self.tls.unwrap()
                self._send(self._out.read())
        elif kind == "pause":
            time.sleep(step[1])
        else:
            raise ValueError(f"no step {kind!r}")

    def _wrap(self, data: bytes) -> bytes:
        if self.tls is None or not data:
            return data
        try:
            self.tls.write(data)
        except ssl.SSLError:
            self.odd = True
            return b""
        return self._out.read()

    def _send(self, data: bytes) -> None:
        if not data or self.closed:
            return
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    def _hello(self, cut: int | None, flips: tuple[tuple[int, int], ...], pieces: int) -> None:
        """A TLS handshake: the ClientHello whole (in ``pieces`` writes, the first of one
        byte, as a client that sniffs slowly), or cut at ``cut`` / with bytes changed (then
        the handshake is not completed: the server has what it has)."""
        tls = self.context.wrap_bio(self._in, self._out, server_hostname="localhost")
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = bytearray(self._out.read())
        if cut is not None or flips:
            for at, value in flips:
                hello[at % len(hello)] = value
            self.odd = True
            self._send(bytes(hello[:cut]))
            return
        self._handshaking = True
        step = max(1, len(hello) // pieces)
        chunks = [hello[:1], *(hello[i:i + step] for i in range(1, len(hello), step))]
        for chunk in chunks:
            self._send(bytes(chunk))
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline and not self.closed:
            try:
                tls.do_handshake()
                self._send(self._out.read())
                self.tls = tls
                return
            except ssl.SSLWantReadError:
                self._send(self._out.read())
                self._receive(0.5)
            except ssl.SSLError:  # the server refused it: said in an alert
                self.odd = True
                return
        self.odd = True

    def _receive(self, wait: float) -> bool:
        """Bytes from the server into the TLS buffer or the answer; False when none came
        within ``wait`` or the server closed."""
        if self.closed:
            return False
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            self.closed = True
            return False
        if not data:
            self.closed = True
            return False
        if self._handshaking:
            self._in.write(data)
        else:
            self.answer += data
        return True

    def _decrypt(self) -> None:
        if self.tls is None:
            return
        while True:
            try:
                chunk = self.tls.read(65536)
            except ssl.SSLWantReadError:
                return
            except ssl.SSLZeroReturnError:
                return
            except ssl.SSLError:
                self.odd = True
                self._in.read()
                return
            if not chunk:
                return
            self.answer += chunk

    def read(self, quiet: float) -> None:
        """What the server sends, until it is quiet for ``quiet`` seconds or closes."""
        while self._receive(quiet):
            self._decrypt()
        self._decrypt()

    def end(self, how: str) -> None:
        """End the input. ``shut``: half-close, then the server must close within
        :data:`~.harness.LIMIT`; ``close``: close at once; ``reset``: close with a reset.

        Raises:
            Finding: The server has not closed in time.
        """
        try:
            if how == "shut":
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + LIMIT
                while not self.closed and time.monotonic() < deadline:
                    self.read(min(0.5, max(0.01, deadline - time.monotonic())))
                if not self.closed:
                    raise Finding(f"the connection was still open {LIMIT:g} s after the "
                                  f"client's input ended ({len(self.answer)} bytes answered)")
            elif how == "reset":
                # linger on, for 0 s: close sends a reset, not a FIN
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
        finally:
            self.sock.close()


def check_answer(plan: Plan, conn: Conn) -> None:
    """The answer is in the protocol the first byte chose (when the stream was one a
    well-behaved peer would read, and whole).

    Raises:
        Finding: What is wrong with it.
    """
    if conn.odd or plan.end != "shut" or not conn.answer:
        return
    answer = bytes(conn.answer)
    if plan.content in ("http", "websocket"):
        if not answer.startswith(b"HTTP/"):
            raise Finding(f"an HTTP request was answered with {answer[:40]!r}")
    elif plan.content == "amqp":
        check_frames(answer)
