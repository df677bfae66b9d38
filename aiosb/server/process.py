"""``aiosb serve`` in a child process: for examples, benchmarks and tests that need a
server other processes (Spark executors) can reach.

    with ServerProcess() as server:          # a free port on 127.0.0.1
        aiosb.connect(f"{server.url}/contoso")
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import sys
import threading
from typing import IO, Self

from ..errors import ServiceBusError

__all__ = ["KEPT_LINES", "ServerProcess"]

#: How many of the lines a server printed after its banner :attr:`ServerProcess.output`
#: keeps.
KEPT_LINES = 20_000


class ServerProcess:
    """Run ``aiosb serve`` on a free port until :meth:`stop` (or the ``with`` block ends).

    Args:
        host: The interface to listen on.
        args: More ``aiosb serve`` arguments (``["--data-dir", path]``, ...).

    Attributes:
        url: ``http://HOST:PORT``; namespace NAME is ``f"{url}/NAME"``.
        pid: The server's process id.
    """

    def __init__(
        self, host: str = "127.0.0.1", args: list[str] | None = None, *, quiet: bool = True
    ) -> None:
        # --stop-when-stdin-closes: the server ends with this process, even killed (a
        # CI job's timeout): the pipe to its standard input closes with it
        self._cmd = [sys.executable, "-m", "aiosb.cli", "serve", "--host", host, "--port", "0",
                     "--amqp-port", "0", "--amqps-port", "0", "--stop-when-stdin-closes"]
        if quiet:  # no line per request: benchmarks and tests want the server's CPU
            self._cmd.append("--quiet")
        self._cmd += args or []
        self._proc: subprocess.Popen[str] | None = None
        self.url = ""
        #: The connection string the official SDKs take (AMQP), from the banner.
        self.amqp_connection_string = ""
        #: The connection string for AMQP over TLS (no ``UseDevelopmentEmulator``), from
        #: the banner; "" if it serves none.
        self.amqps_connection_string = ""
        #: The certificate the AMQP port presents to clients that speak HTTPS there
        #: (management), from the banner; "" if it serves none.
        self.certificate = ""
        #: What the server printed on start-up, up to the banner's last line.
        self.banner = ""
        #: What it printed after the banner (a line per request unless ``quiet``), the
        #: last :data:`KEPT_LINES` lines, and how many lines that was in all.
        self.output: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self.printed = 0
        self.pid = 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the server and wait until it listens."""
        proc = self._proc = subprocess.Popen(
            self._cmd,
            stdin=subprocess.PIPE,  # kept open, never written: closed when this process ends
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "listening on" in line:
                self.url = line.rsplit(" ", 1)[-1].strip()
            elif line.strip().startswith("Endpoint=sb://"):
                self.amqp_connection_string = line.strip()
            elif "AMQP over TLS on port " in line:
                self.amqps_connection_string = "Endpoint=" + line.split("Endpoint=", 1)[1].strip()
            elif "over HTTPS at the same port, certificate " in line:
                self.certificate = line.rsplit("certificate ", 1)[1].strip()
            elif "python" in line and "aiosb.connect(" in line:  # the banner's last line
                break
        if not self.url:
            proc.wait(10)
            raise ServiceBusError(f"aiosb serve did not start: {''.join(seen)[-2000:]}")
        self.banner = "".join(seen)
        self.pid = proc.pid
        # Keep reading what it prints, so a full pipe never blocks the server.
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()
        return self

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self.output.append(line)
            self.printed += 1

    def output_since(self, printed: int) -> str:
        """What the server printed after its first ``printed`` lines (as far as
        :attr:`output` keeps them): a test's share of the log, ``printed`` read when
        it began."""
        kept = list(self.output)
        return "".join(kept[max(0, len(kept) - (self.printed - printed)):])

    def kill(self) -> None:
        """End the server at once (SIGKILL), as a crash would: nothing is flushed."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        _close_stdin(proc)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            _close_stdin(proc)
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        _close_stdin(proc)


def _close_stdin(proc: subprocess.Popen[str] | None) -> None:
    if proc is not None and proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
