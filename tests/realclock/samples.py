"""The official Python SDK's published samples (``sdk_samples/``: the ``samples/`` of the
``azure-servicebus`` 7.11.4 sdist, unmodified) against ``aiosb serve``, in the
background of the test session (issues 33 and 34).

The ``AutoLockRenewer`` samples hold messages and a session for 100 s each, then let a
lock lapse on purpose for 80 s: close to five minutes that are nearly all waiting. So
the run starts as soon as the session has collected it (``tests/conftest.py``) and goes
on beside the rest of the suite; ``test_sdk_samples.py``, run last, waits for it and
reads what it found.

Two servers, one after the other:

1. With AMQP over TLS (the SDK speaks TLS to a namespace given by name and credential,
   on port 5671 and there only: ``trust/sitecustomize.py`` forwards the sample's
   localhost:5671 to the server's port, so 5671 may be taken): the samples that
   authenticate so. Seconds long, first.
2. One long-running server for the rest, in the order that found issue 33: the
   scheduling samples (sync, then aio); then both ``AutoLockRenewer`` samples beside
   every other sample; then the scheduling samples again (aio, then sync). A server
   whose clock the renewals moved ahead fails the second scheduling run: its messages,
   scheduled 30 s ahead, are active at once and cannot be cancelled.

Each sample has entities of its own (a sample receives what it sent). The samples that
receive forever by design run to a deadline, and what they printed is checked. The
environment trusts the server's self-signed certificate as a machine would: the CA
bundle variables for the administration clients (``REQUESTS_CA_BUNDLE``,
``SSL_CERT_FILE``), and certifi's bundle (which the SDK's AMQP over TLS reads, and no
variable changes) extended with it, by ``trust/sitecustomize.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ports import port_free
from proxy_server import ProxyServer

import aiosb
from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.server.process import ServerProcess

from .conftest import server_clock_lead

SAMPLES = Path(__file__).parent / "sdk_samples"
TRUST = Path(__file__).parent / "trust"
NAMESPACE = "sbemulatorns"
#: seconds: the longest one sample may take (the AutoLockRenewer ones take 285 s or so).
SAMPLE_SECONDS = 420
#: seconds: how long a sample that receives forever by design is let run.
DEADLINE_SECONDS = 20

#: Samples not run, and why (docs/sdks.md says so too).
NOT_RUN = {
    "client_identity_authentication": "needs Azure AD (DefaultAzureCredential)",
    "sample_code_servicebus": "needs Azure AD (azure.identity) in parts",
    "connection_to_custom_endpoint_address": "holds placeholders to fill in "
    "('<custom_endpoint_hostname>')",
}
#: Sample files not run (one form of a sample), and why (docs/sdks.md says so too).
NOT_RUN_FILES = {
    "async_samples/proxy_async.py": "the aio SDK hands aiohttp the proxy as host:port with "
    "no scheme, which aiohttp refuses ('Handler failed: 127.0.0.1:8899'), against Azure as "
    "here (aiosb's AMQP transport gives the SDK the proxy with its scheme)",
}
#: The sample that sends through a proxy: its own address (127.0.0.1:8899, admin /
#: 123456), where the run starts proxy.py; the SDK aims AMQP over WebSockets at port 80
#: (it drops the connection string's port), which the proxy sends on to the server's
#: AMQP port (proxy_port_map.py), as a gateway before a namespace would.
PROXIED = "proxy"
PROXY_PORT = 8899
PROXY_AUTH = "admin:123456"
#: Samples that authenticate with a namespace name and a credential: AMQP over TLS, 5671.
BY_NAME = ("authenticate_using_azure_named_key_credential",
           "authenticate_using_azure_sas_credential")
#: Samples that receive forever by design: run to a deadline.
FOREVER = ("receive_iterator_queue", "failure_and_recovery")
SCHEDULING = "schedule_messages_and_cancellation"
RENEWAL = "auto_lock_renew"


def stem(sample: str) -> str:
    """``sync_samples/send_queue.py`` and ``async_samples/send_queue_async.py``:
    ``send_queue``."""
    return Path(sample).stem.removesuffix("_async")


def sample_files() -> list[str]:
    return sorted(f"{folder}/{path.name}" for folder in ("sync_samples", "async_samples")
                  for path in (SAMPLES / folder).glob("*.py"))


def runnable_files() -> list[str]:
    """The samples run: all but what NOT_RUN and NOT_RUN_FILES name."""
    return [f for f in sample_files() if stem(f) not in NOT_RUN and f not in NOT_RUN_FILES]


@dataclass
class SampleResult:
    sample: str
    returncode: int | None  # None: ended at its deadline, as it is made to run forever
    output: str
    seconds: float
    #: What the test sent a sample that only receives, before it ran.
    sent: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    results: list[SampleResult] = field(default_factory=list)
    #: How far the server's clock read ahead of the wall clock when the samples ended.
    clock_lead: float | None = None
    #: Why the proxy sample did not run (port 8899 taken), if it did not.
    proxy_skipped: str | None = None
    #: What the proxy saw of the proxy sample.
    proxied: list[str] = field(default_factory=list)
    error: str | None = None


_numbers = itertools.count(1)


async def _entities(url: str, sample: str) -> dict[str, str]:
    """The entities one sample uses, made afresh; its environment names them."""
    n = next(_numbers)
    queue, sessions, topic, sub = f"q{n}", f"sq{n}", f"t{n}", f"s{n}"
    async with aiosb.connect(f"{url}/{NAMESPACE}") as ns:
        await ns.create_queue(queue)
        await ns.create_queue(sessions, requires_session=True)
        await ns.create_topic(topic)
        await ns.create_subscription(topic, sub)
    return {"SERVICEBUS_QUEUE_NAME": queue, "SERVICEBUS_SESSION_QUEUE_NAME": sessions,
            "SERVICEBUS_TOPIC_NAME": topic, "SERVICEBUS_SUBSCRIPTION_NAME": sub}


async def _send(url: str, queue: str, bodies: list[str]) -> None:
    async with aiosb.connect(f"{url}/{NAMESPACE}") as ns, ns.sender(queue) as sender:
        await sender.send([aiosb.Message(body.encode()) for body in bodies])




class SampleRun:
    """The samples' run: started once, in a thread; :meth:`outcome` waits for it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._outcome = Outcome()
        self._procs: list[subprocess.Popen[str]] = []
        self._stopping = False
        self._tls = Path(os.environ.get("TMPDIR", "/tmp")) / f"aiosb-samples-{os.getpid()}"

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
            files = runnable_files()
            by_name = [f for f in files if stem(f) in BY_NAME]
            with ServerProcess(args=["--tls-dir", str(self._tls)]) as server:
                self._batch(server, by_name, workers=4)
            proxied = [f for f in files if stem(f) == PROXIED]
            rest = [f for f in files if f not in by_name and f not in proxied]
            scheduling = [f"sync_samples/{SCHEDULING}.py", f"async_samples/{SCHEDULING}_async.py"]
            renewal = [f for f in rest if stem(f) == RENEWAL]
            others = [f for f in rest if f not in scheduling and f not in renewal]
            with ServerProcess(args=["--tls-dir", str(self._tls)]) as server:
                self._through_a_proxy(server, proxied)
                self._batch(server, scheduling, workers=1)
                with ThreadPoolExecutor(2) as long_ones:
                    renewing = long_ones.map(lambda f: self._sample(server, f), renewal)
                    self._batch(server, others, workers=3)
                    self._outcome.results += list(renewing)
                self._batch(server, scheduling[::-1], workers=1)
                self._outcome.clock_lead = asyncio.run(server_clock_lead(server))
        except Exception as exc:  # said by the test that reads the outcome
            self._outcome.error = f"{type(exc).__name__}: {exc}"

    def _through_a_proxy(self, server: ServerProcess, files: list[str]) -> None:
        if not port_free(PROXY_PORT):
            self._outcome.proxy_skipped = f"port {PROXY_PORT} is taken on this machine"
            return
        amqp_port = server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0]
        env = dict(os.environ, AIOSB_PROXY_PORT_MAP=f"80={amqp_port}", PYTHONPATH=os.pathsep.join(
            filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])))
        with ProxyServer(self._tls, auth=PROXY_AUTH, port=PROXY_PORT,
                         plugins=("proxy_port_map.PortMap",), env=env) as proxy:
            self._batch(server, files, workers=2)
            self._outcome.proxied = proxy.seen(f"localhost:{amqp_port}")

    def _batch(self, server: ServerProcess, files: list[str], workers: int) -> None:
        with ThreadPoolExecutor(workers) as pool:
            self._outcome.results += pool.map(lambda f: self._sample(server, f), files)

    def _sample(self, server: ServerProcess, sample: str) -> SampleResult:
        if self._stopping:
            return SampleResult(sample, -1, "(not run: the session ended)", 0.0)
        names = asyncio.run(_entities(server.url, sample))
        sent: list[str] = []
        if stem(sample) == "receive_iterator_queue":  # it only receives: give it some
            sent = [f"{stem(sample)} {i}" for i in range(5)]
            asyncio.run(_send(server.url, names["SERVICEBUS_QUEUE_NAME"], sent))
        bundle = self._tls / "bundle.pem"
        if not bundle.exists():
            import certifi

            bundle.write_text(Path(certifi.where()).read_text()
                              + Path(server.certificate).read_text())
        env = dict(os.environ, **names,
                   SERVICEBUS_CONNECTION_STR=server.amqp_connection_string,
                   SERVICEBUS_FULLY_QUALIFIED_NAMESPACE="localhost",
                   SERVICEBUS_SAS_POLICY=DEV_KEY_NAME, SERVICEBUS_SAS_KEY=DEV_KEY,
                   SERVICEBUS_SESSION_ID="session-1",
                   REQUESTS_CA_BUNDLE=str(bundle), SSL_CERT_FILE=str(bundle),
                   AIOSB_TRUSTED_BUNDLE=str(bundle),
                   AIOSB_AMQPS_PORT=str(urllib.parse.urlsplit(
                       server.amqps_connection_string.split(";", 1)[0].split("=", 1)[1]).port),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(TRUST),
                                                            os.environ.get("PYTHONPATH")])))
        limit = DEADLINE_SECONDS if stem(sample) in FOREVER else SAMPLE_SECONDS
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(SAMPLES / sample)], env=env, cwd=SAMPLES / Path(sample).parent,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, preexec_fn=_die_with_parent,
        )
        self._procs.append(proc)
        code: int | None
        try:
            output, _ = proc.communicate(timeout=limit)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            code = None if stem(sample) in FOREVER else proc.returncode
            output += f"\n(ended after {limit} s)"
        return SampleResult(sample, code, output, time.monotonic() - started, sent)


def _die_with_parent() -> None:
    """In the child: end when the thread that started it does (Linux), so that a test
    session killed outright leaves no sample sleeping for minutes."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


RUN = SampleRun()
