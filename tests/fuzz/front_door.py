"""The fuzz target through the front door (#48): ``aiosb serve`` in a process of its own,
on free ports, reached only as a client reaches it: over TCP to its AMQP port and its
AMQPS port, so that every input meets the listener's first-byte router, TLS (on the
AMQPS port, and sniffed on the AMQP port, with the server's own certificate), the HTTP
hand-off and AMQP over WebSockets (``/$servicebus/websocket``), as well as raw AMQP.

An input is a :class:`~.client.Plan`, played on one connection by
:class:`~.client.Conn`. :meth:`Served.run` raises :class:`~.harness.Finding` for

- an ERROR the server logged (any logger: aiosb's, asyncio's for a task's exception,
  aiohttp's), or the server process gone;
- a connection left open: after a half-close, the server has not closed within
  :data:`~.harness.LIMIT` seconds;
- an answer in the wrong protocol: AMQP that does not parse (raw or inside TLS), an
  HTTP answer that is no HTTP response.

And on the same server, after a run (:meth:`Served.check_after`): the official
``azure-servicebus`` client (aio) still sends and receives, over AMQP, over AMQPS and
over WebSockets (TLS sniffed on the AMQP port); the server's open descriptors and its
asyncio tasks come back to within :data:`FD_MARGIN` and :data:`TASK_MARGIN` of their
counts before the run; its resident memory stays within :data:`RSS_BOUND` of what it
was after warm-up. Descriptors and memory are read from ``/proc`` (Linux); the server
counts its tasks when sent SIGUSR1 (this module, run as the server, sets that up).

    python -m tests.fuzz.front_door serve ARGS...   # aiosb serve, its log tagged on stderr
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import QUIET, Conn, Plan, check_answer
from .harness import NAMESPACE, Finding

ROOT = Path(__file__).parent.parent.parent
#: What the server's log handler (this module run as a program) writes before a record.
TAG = "aiosb-fuzz-log "
#: Descriptors the server may hold above its count before the run, once settled.
FD_MARGIN = 4
#: asyncio tasks the server may run above its count before the run, once settled.
TASK_MARGIN = 4
#: Bytes of resident memory the server may have grown by since warm-up.
RSS_BOUND = 24 * 2**20
#: Seconds an input waits for the server to let its connection go (no finding if not).
FENCE = 0.25
#: Seconds the server has to give descriptors back once the clients closed.
SETTLE = 5.0
#: The queues the good client sends to and receives from, one for each way in (no fuzz
#: input names them).
GOOD = ("good-amqp", "good-amqps", "good-websocket")


def reached(plan: Plan, conn: Conn) -> str:
    """Where an input went and what answered there: ``"AMQP in TLS on the amqps port"``,
    ``"WebSocket (101) in the clear on the amqp port"``, ..., or ``"no answer"``."""
    answer = bytes(conn.answer[:16])
    if answer.startswith(b"AMQP"):
        what = "AMQP"
    elif answer.startswith(b"HTTP/") and answer[9:12] == b"101":
        what = "WebSocket (101)"
    elif answer.startswith(b"HTTP/"):
        what = "HTTP"
    else:
        return "no answer" if not answer else "another answer"
    return f"{what} {'in TLS' if conn.tls is not None else 'in the clear'} on the {plan.port} port"


def _tagged_logging() -> None:
    """Every record of WARNING and above, of any logger, on stderr as one tagged line.

    A client's malformed request, first on its connection or not, is no ERROR: the
    server tells it at DEBUG (``aiosb.server.http._requests.HTTP_LOG``), so one logged
    at ERROR is a finding like any other (#48)."""

    class Tagged(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            level = record.levelname
            exc = record.exc_info[1] if record.exc_info else None
            if exc is not None:
                text += f": {type(exc).__name__}: {exc}\n"
                text += logging.Formatter().formatException(record.exc_info)  # type: ignore[arg-type]
            sys.stderr.write(TAG + json.dumps([level, record.name, text]) + "\n")
            sys.stderr.flush()

    logging.getLogger().addHandler(Tagged(logging.WARNING))


def _count_tasks(_signum: int, _frame: Any) -> None:
    """On SIGUSR1: the server's asyncio tasks, counted, on stderr as a tagged line."""
    import asyncio

    try:
        count = len(asyncio.all_tasks(asyncio.get_running_loop()))
    except RuntimeError:  # no loop running yet, or any more
        count = -1
    sys.stderr.write(TAG + json.dumps(["TASKS", "", str(count)]) + "\n")
    sys.stderr.flush()


def _serve(argv: list[str]) -> int:
    """``aiosb serve`` itself (its command line, its assembly), its log tagged, and its
    tasks counted on SIGUSR1."""
    import signal

    _tagged_logging()
    signal.signal(signal.SIGUSR1, _count_tasks)
    from aiosb import cli

    return cli.main(["serve", *argv])


@dataclass
class Served:
    """``aiosb serve`` on free ports in a process of its own, fed :class:`Plan` s."""

    tls_dir: Path
    url: str = ""
    amqp: str = ""
    amqps: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    certificate: str = ""
    proc: subprocess.Popen[str] | None = None
    logged: list[tuple[str, str, str]] = field(default_factory=list)
    runs: int = 0
    #: How many inputs reached each way in, and what answered there (:func:`reached`;
    #: those that ended in a half-close, whose answers were read to the end).
    reached: Counter[str] = field(default_factory=Counter)
    _seen: int = 0
    _tasks: list[int] = field(default_factory=list)
    _context: ssl.SSLContext | None = None

    @classmethod
    @contextlib.contextmanager
    def start(cls) -> Iterator[Served]:
        with tempfile.TemporaryDirectory(prefix="aiosb-fuzz-") as tmp:
            served = cls(Path(tmp) / "tls")
            try:
                served._start()
                yield served
            finally:
                served.stop()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.front_door", "serve", "--host", "127.0.0.1",
             "--port", "0", "--amqp-port", "0", "--amqps-port", "0", "--tls-dir",
             str(self.tls_dir), "--namespace", NAMESPACE, "--quiet", "--no-explorer"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(target=self._log, args=(self.proc.stderr,), daemon=True).start()
        banner = []
        for line in self.proc.stdout:
            banner.append(line)
            if "listening on" in line and not self.url:
                self.url = line.rsplit(" ", 1)[-1].strip()
            for found in re.findall(r"Endpoint=sb://localhost:\d+;\S+", line):
                if "UseDevelopmentEmulator=true" in found:
                    self.amqp = found
                else:
                    self.amqps = found
            if self.url and self.amqp and self.amqps:
                break
        if not (self.url and self.amqp and self.amqps):
            raise RuntimeError("aiosb serve did not say its ports:\n" + "".join(banner)
                               + "\n".join(text for _, _, text in self.logged))
        threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True).start()
        for name, endpoint in (("amqp", self.amqp), ("amqps", self.amqps)):
            self.ports[name] = int(endpoint.split(";")[0].rsplit(":", 1)[1])
        self.certificate = next(str(p) for p in sorted(self.tls_dir.iterdir())
                                if b"BEGIN CERTIFICATE" in p.read_bytes())
        self._context = ssl.create_default_context(cafile=self.certificate)
        self._context.check_hostname = True

    def _log(self, stream: Any) -> None:
        for line in stream:
            if line.startswith(TAG):
                level, name, text = json.loads(line[len(TAG):])
                if level == "TASKS":
                    self._tasks.append(int(text))
                else:
                    self.logged.append((level, name, text))
            elif line.strip():
                self.logged.append(("STDERR", "", line.rstrip()))

    @staticmethod
    def _drain(stream: Any) -> None:
        for _line in stream:
            pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # -- one input ----------------------------------------------------------------------

    def run(self, plan: Plan) -> bytes:
        """Play ``plan`` on one connection; what the server answered (inside TLS, if any).

        Raises:
            Finding: As the module says.
        """
        self.runs += 1
        assert self._context is not None
        self.alive()
        held = self.descriptors()
        conn = Conn(self.ports[plan.port], self._context)
        try:
            for step in plan.steps:
                conn.play(step)
            if not plan.steps or plan.steps[-1][0] != "quiet":
                conn.read(QUIET)
        finally:
            conn.end(plan.end)
            self._fence(held)
        self.alive()
        self.errors()
        check_answer(plan, conn)
        if plan.end == "shut":  # read to the end: what answered does not depend on time
            self.reached[reached(plan, conn)] += 1
        return bytes(conn.answer)

    def _fence(self, held: int) -> None:
        """Wait (briefly) for the server to let the connection go, so that what it logs
        about it is counted against this input and not the next."""
        deadline = time.monotonic() + FENCE
        with contextlib.suppress(OSError):
            while self.descriptors() > held and time.monotonic() < deadline:
                time.sleep(0.002)
        time.sleep(0.002)  # the log reader's turn

    def alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise Finding(f"the server exited ({self.proc.returncode}): "
                          + "\n".join(text for _, _, text in self.logged[-5:]))

    def errors(self) -> None:
        """Raise for an ERROR the server logged since the last look."""
        new, self._seen = self.logged[self._seen:], len(self.logged)
        for level, name, text in new:
            if level in ("ERROR", "CRITICAL") or (level == "STDERR" and "Traceback" in text):
                raise Finding(f"the server logged an error ({name}): {text}")

    # -- what it holds --------------------------------------------------------------------

    def descriptors(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc/PID/status")

    def tasks(self) -> int:
        """The server's asyncio tasks (it counts them on SIGUSR1)."""
        assert self.proc is not None
        asked = len(self._tasks)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while len(self._tasks) == asked:
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not count its tasks on SIGUSR1")
            time.sleep(0.005)
        return self._tasks[-1]

    def settled_tasks(self, at_most: int) -> int:
        """The server's tasks once they are ``at_most`` or :data:`SETTLE` passed."""
        deadline = time.monotonic() + SETTLE
        count = self.tasks()
        while count > at_most and time.monotonic() < deadline:
            time.sleep(0.1)
            count = self.tasks()
        return count

    def settled_descriptors(self, at_most: int) -> int:
        """The server's descriptors once they are ``at_most`` or :data:`SETTLE` passed."""
        deadline = time.monotonic() + SETTLE
        count = self.descriptors()
        while count > at_most and time.monotonic() < deadline:
            time.sleep(0.1)
            count = self.descriptors()
        return count

    def footprint(self) -> tuple[int, int, int]:
        """Descriptors and tasks (settled: the fewest within a short wait), and resident
        bytes."""
        fds, tasks = self.descriptors(), self.tasks()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
            fds, tasks = min(fds, self.descriptors()), min(tasks, self.tasks())
        return fds, tasks, self.rss()

    def check_after(self, before: tuple[int, int, int]) -> None:
        """On this same server, after a run: the official client is served over AMQP and
        AMQPS; descriptors and memory came back.

        Raises:
            Finding: What did not.
        """
        self.alive()
        self.still_serves()
        fds, tasks, rss = before
        now = self.settled_descriptors(fds + FD_MARGIN)
        if now > fds + FD_MARGIN:
            raise Finding(f"the server holds {now} descriptors {SETTLE:g} s after the fuzz "
                          f"run's clients closed, {fds} before it (margin {FD_MARGIN}): "
                          + ", ".join(self._fd_kinds()))
        now = self.settled_tasks(tasks + TASK_MARGIN)
        if now > tasks + TASK_MARGIN:
            raise Finding(f"the server runs {now} asyncio tasks {SETTLE:g} s after the fuzz "
                          f"run's clients closed, {tasks} before it (margin {TASK_MARGIN})")
        grown = self.rss() - rss
        if grown > RSS_BOUND:
            raise Finding(f"the server's resident memory grew by {grown / 2**20:.1f} MiB "
                          f"over the run (bound {RSS_BOUND / 2**20:.0f} MiB)")
        self.errors()

    def _fd_kinds(self) -> list[str]:
        assert self.proc is not None
        kinds: dict[str, int] = {}
        base = f"/proc/{self.proc.pid}/fd"
        for name in os.listdir(base):
            with contextlib.suppress(OSError):
                target = os.readlink(f"{base}/{name}")
                kind = target.split(":", 1)[0] if ":" in target else "file"
                kinds[kind] = kinds.get(kind, 0) + 1
        return [f"{n} {k}" for k, n in sorted(kinds.items())]

    def still_serves(self) -> None:
        """The official ``azure-servicebus`` (aio) sends and receives, over AMQP (the
        development connection string) and over AMQPS (the server's certificate)."""
        import asyncio

        async def one(queue: str, connection: str, **kwargs: Any) -> None:
            from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
            from azure.servicebus.aio import ServiceBusClient

            body = f"good-{uuid.uuid4()}"
            async with ServiceBusClient.from_connection_string(connection, **kwargs) as client:
                async with client.get_queue_sender(queue) as sender:
                    await sender.send_messages(ServiceBusMessage(body))
                async with client.get_queue_receiver(
                        queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
                    got = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            if [str(m) for m in got] != [body]:
                raise Finding(f"a good client was not served after the fuzz run: it sent "
                              f"{body} and received {[str(m) for m in got]}")

        async def every_way() -> None:
            from azure.servicebus import TransportType

            # The SDK speaks TLS at 5671 whatever the port it is given: the AMQPS port is
            # its custom endpoint; AMQP over WebSockets goes to the AMQP port (TLS sniffed).
            async with asyncio.timeout(60):
                await asyncio.gather(
                    one(GOOD[0], self.amqp),
                    one(GOOD[1], self.amqps, connection_verify=self.certificate,
                        custom_endpoint_address=f"sb://localhost:{self.ports['amqps']}"),
                    one(GOOD[2], self.amqps, connection_verify=self.certificate,
                        transport_type=TransportType.AmqpOverWebsocket,
                        custom_endpoint_address=f"https://localhost:{self.ports['amqp']}"))

        try:
            asyncio.run(every_way())
        except Finding:
            raise
        except Exception as exc:
            raise Finding(f"a good client was not served after the fuzz run: "
                          f"{type(exc).__name__}: {exc}") from exc

    async def entities(self) -> None:
        """The namespace's queues, topic and subscription, over HTTP, and a few messages
        where receivers look (so that deliveries are fuzzed too)."""
        import aiosb
        from aiosb import Message

        async with aiosb.connect(f"{self.url}/{NAMESPACE}") as ns:
            made: list[tuple[str, dict[str, Any]]] = [(good, {}) for good in GOOD]
            made += [("q1", {}), ("sq", {"requires_session": True}),
                     ("dq", {"requires_duplicate_detection": True})]
            for name, kwargs in made:
                if not await ns.queue_exists(name):
                    await ns.create_queue(name, **kwargs)
            if not await ns.topic_exists("t1"):
                await ns.create_topic("t1")
                await ns.create_subscription("t1", "s1")
            for path in ("q1", "t1"):
                await ns.sender(path).send([Message(f"m{i}".encode()) for i in range(3)])
            await ns.sender("sq").send([Message(b"s", session_id="s-1")])


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        sys.exit("usage: python -m tests.fuzz.front_door serve ARGS...")
    sys.exit(_serve(sys.argv[2:]))
