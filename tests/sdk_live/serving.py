"""``aiosb serve`` for one job of ``./dev sdk-tests``: started on free ports with its
log, metrics and keys of one right each; the entities of a pre-provisioned namespace;
and a timeline of its state beside the test running (issue #47)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiosb

ROOT = Path(__file__).parent.parent.parent
NAMESPACE = "sbemulatorns"
#: Keys of one right each, for namespace rules with that right only (the stand-in's ARM).
LIMITED_KEYS = {"Send": ("sbsendonly", "c2VuZG9ubHlzZW5kb25seXNlbmRvbmx5c2VuZG9ubHk="),
                "Listen": ("sblistenonly", "bGlzdGVub25seWxpc3Rlbm9ubHlsaXN0ZW5vbmx5bGk=")}
#: The entities of the pre-provisioned namespace (Azure's test-resources template has
#: them; here the run makes them), by the environment variable that names each.
PROVISIONED = {"SERVICEBUS_QUEUE_NAME": "testqueue",
               "SERVICEBUS_SESSION_QUEUE_NAME": "testsessionqueue",
               "SERVICEBUS_TOPIC_NAME": "testtopic",
               "SERVICEBUS_SUBSCRIPTION_NAME": "testsubscription"}


@dataclass
class Server:
    """``aiosb serve`` on free ports, its output in ``log``."""

    log: Path
    tls: Path
    url: str = ""
    amqp_port: int = 0
    amqps_port: int = 0
    certificate: str = ""
    proc: subprocess.Popen[str] | None = None

    def start(self) -> Server:
        keys = [arg for right, (name, key) in LIMITED_KEYS.items()
                for arg in (f"--{right.lower()}-key", f"{name}={key}")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aiosb.cli", "serve", "--host", "127.0.0.1", "--port", "0",
             "--amqp-port", "0", "--amqps-port", "0", "--tls-dir", str(self.tls), "--metrics",
             *keys], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        out = self.log.open("w")
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            out.write(line)
            if "listening on" in line:
                self.url = line.rsplit(" ", 1)[-1].strip()
            elif line.strip().startswith("Endpoint=sb://"):
                self.amqp_port = int(re.findall(r"localhost:(\d+)", line)[0])
            elif "AMQP over TLS on port " in line:
                self.amqps_port = int(line.split("AMQP over TLS on port ", 1)[1].split(",")[0])
            elif "certificate " in line and "over HTTPS" in line:
                self.certificate = line.rsplit("certificate ", 1)[1].strip()
            elif "aiosb.connect(" in line:
                break
        out.flush()
        if not (self.url and self.amqps_port and self.certificate):
            raise SystemExit(f"aiosb serve did not start as expected: see {self.log}")
        threading.Thread(target=self._copy, args=(out,), daemon=True).start()
        return self

    def _copy(self, out) -> None:  # type: ignore[no-untyped-def]
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            out.write(line)
            out.flush()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


async def provision(url: str) -> None:
    """The entities of the pre-provisioned namespace, made afresh."""
    async with aiosb.connect(f"{url}/{NAMESPACE}") as ns:
        await ns.create_queue(PROVISIONED["SERVICEBUS_QUEUE_NAME"])
        await ns.create_queue(PROVISIONED["SERVICEBUS_SESSION_QUEUE_NAME"], requires_session=True)
        await ns.create_topic(PROVISIONED["SERVICEBUS_TOPIC_NAME"])
        await ns.create_subscription(PROVISIONED["SERVICEBUS_TOPIC_NAME"],
                                     PROVISIONED["SERVICEBUS_SUBSCRIPTION_NAME"])


def _tcp_established(ports: set[int]) -> int:
    """Established TCP connections whose local port is one of ``ports`` (the server's side)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) in ports:
                count += 1
    return count


@dataclass
class Timeline:
    """Every ``every`` seconds, a line of the server's state, beside the test running."""

    server: Server
    path: Path
    results: Path
    every: float = 2.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        with self.path.open("w") as out:
            out.write("time\thttp_connections\ttcp_on_amqp_ports\tserver_fds\tdeferred"
                      "\tlast_test_ended\n")
            while not self._stop.wait(self.every):
                try:
                    metrics = urllib.request.urlopen(f"{self.server.url}/metrics", timeout=5).read()
                except OSError as exc:
                    out.write(f"{time.time():.1f}\t?\t?\t?\t?\t{exc}\n")
                    continue
                text = metrics.decode()
                connections = re.findall(r"^aiosb_server_connections (\S+)", text, re.M)
                deferred = sum(float(v) for v in re.findall(
                    r'^aiosb_entity_messages\{[^}]*state="deferred"[^}]*\} (\S+)', text, re.M))
                tcp = _tcp_established({self.server.amqp_port, self.server.amqps_port})
                fds = _fds(self.server.proc.pid if self.server.proc else 0)
                out.write(f"{time.time():.1f}\t{connections[0] if connections else '?'}\t{tcp}"
                          f"\t{fds}\t{deferred:.0f}\t{_last_id(self.results)}\n")
                out.flush()


def _fds(pid: int) -> int | str:
    """How many files (sockets among them) the server holds open."""
    try:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return "?"


def _last_id(results: Path) -> str:
    try:
        lines = results.read_text().splitlines()
    except OSError:
        return ""
    return json.loads(lines[-1])["id"] if lines else ""
