"""The official SDK's own samples (``sdk_samples/``, unmodified) against one long-running
``aiosb serve``, in the background of the test session (issue 33).

The ``AutoLockRenewer`` samples hold messages and a session for 100 s each, then let a
lock lapse on purpose for 80 s: close to five minutes that are nearly all waiting. So
the run starts as soon as the session has collected it (``tests/conftest.py``) and goes
on beside the rest of the suite; ``test_sdk_samples.py``, run last, waits for it and
reads what it found.

The order is the one that found the bug: the scheduling samples (sync, then aio) first,
then both ``AutoLockRenewer`` samples at once (each on queues of its own, since each
receives what it sent), then the scheduling samples again (aio, then sync). A server
whose clock the renewals moved ahead makes the second scheduling run fail: its messages,
scheduled 30 s ahead, are active at once and cannot be cancelled.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import aiosb
from aiosb.emulator.process import ServerProcess

SAMPLES = Path(__file__).parent / "sdk_samples"
NAMESPACE = "sbemulatorns"
#: seconds: the longest one sample may take (the AutoLockRenewer ones take 285 s or so).
SAMPLE_SECONDS = 420


@dataclass
class SampleResult:
    sample: str
    returncode: int
    output: str
    seconds: float


@dataclass
class Outcome:
    results: list[SampleResult] = field(default_factory=list)
    #: How far the server's clock read ahead of the wall clock when the samples ended.
    clock_lead: float | None = None
    error: str | None = None


async def _prepare(url: str) -> None:
    """The queues the samples expect to exist, with Service Bus's defaults."""
    async with aiosb.connect(f"{url}/{NAMESPACE}") as ns:
        for name in ("schedule", "renew-sync", "renew-aio"):
            await ns.create_queue(name)
        for name in ("renew-sync-sessions", "renew-aio-sessions"):
            await ns.create_queue(name, requires_session=True)
        await ns.create_queue("clockprobe")


async def _clock_lead(url: str) -> float:
    async with aiosb.connect(f"{url}/{NAMESPACE}") as ns:
        async with ns.sender("clockprobe") as sender:
            await sender.send(aiosb.Message(b"what time is it"))
            sent = time.time()
        async with ns.receiver("clockprobe", mode="receive_and_delete") as receiver:
            (probe,) = await receiver.receive(max_messages=1, max_wait=10)
    return probe.enqueued_time.timestamp() - sent


class SampleRun:
    """The samples' run: started once, in a thread; :meth:`outcome` waits for it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._outcome = Outcome()
        self._procs: list[subprocess.Popen[str]] = []
        self._stopping = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sdk-samples", daemon=True)
            self._thread.start()

    def outcome(self, timeout: float) -> Outcome:
        self.start()
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the SDK samples had not ended after {timeout:.0f} s more")
        return self._outcome

    def stop(self) -> None:
        """End what still runs (the session is over): the samples, then the server as
        the run's thread leaves it."""
        self._stopping = True
        for proc in list(self._procs):
            if proc.poll() is None:
                proc.kill()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        try:
            with ServerProcess() as server:
                asyncio.run(_prepare(server.url))
                connection = server.amqp_connection_string
                order: list[list[tuple[str, str, str]]] = [
                    [("schedule_messages_and_cancellation.py", "schedule", "")],
                    [("schedule_messages_and_cancellation_async.py", "schedule", "")],
                    [("auto_lock_renew.py", "renew-sync", "renew-sync-sessions"),
                     ("auto_lock_renew_async.py", "renew-aio", "renew-aio-sessions")],
                    [("schedule_messages_and_cancellation_async.py", "schedule", "")],
                    [("schedule_messages_and_cancellation.py", "schedule", "")],
                ]
                for step in order:
                    if self._stopping:
                        return
                    with ThreadPoolExecutor(len(step)) as pool:
                        self._outcome.results += pool.map(
                            lambda s: self._sample(connection, *s), step
                        )
                self._outcome.clock_lead = asyncio.run(_clock_lead(server.url))
        except Exception as exc:  # said by the test that reads the outcome
            self._outcome.error = f"{type(exc).__name__}: {exc}"

    def _sample(self, connection: str, sample: str, queue: str, sessions: str) -> SampleResult:
        env = dict(os.environ, SERVICEBUS_CONNECTION_STR=connection,
                   SERVICEBUS_QUEUE_NAME=queue, SERVICEBUS_SESSION_QUEUE_NAME=sessions)
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(SAMPLES / sample)], env=env, cwd=SAMPLES,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, preexec_fn=_die_with_parent,
        )
        self._procs.append(proc)
        try:
            output, _ = proc.communicate(timeout=SAMPLE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            output += f"\n(killed after {SAMPLE_SECONDS} s)"
        return SampleResult(sample, proc.returncode, output, time.monotonic() - started)


def _die_with_parent() -> None:
    """In the child: end when the thread that started it does (Linux), so that a test
    session killed outright leaves no sample sleeping for minutes."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


RUN = SampleRun()
