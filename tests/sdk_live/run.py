"""Microsoft's own live tests for ``azure-servicebus`` against ``aiosb serve``:
``./dev sdk-tests [RELEASE] [--timeout S] [-- PYTEST ARGS]`` (issue #47).

1. Fetches the release's source distribution from PyPI (default: the newest 7.x) into
   ``.sdk-tests/dist/`` and unpacks its ``tests/``, which are never modified.
2. Makes a virtualenv of its own (``.sdk-tests/RELEASE/venv``, kept between runs) with
   that release and what its tests import. ``devtools_testutils`` (Azure's repository,
   not on PyPI) is the stand-in beside this file, ``standin/``, on ``PYTHONPATH``.
3. Starts ``aiosb serve`` on free ports, with its log (``server.log``) and metrics, keys of
   one right each for the tests that ask for a listen-only or send-only namespace rule,
   and the entities a pre-provisioned namespace has (``SERVICEBUS_QUEUE_NAME``, ...).
4. Runs the tests, one at a time, each with a timeout: every test file of ``tests/``
   but the synchronous ``test_queues.py`` (its aio twin runs whole; ``--with-sync-queues``
   runs it too) and ``unittests/`` (the SDK against mocks), the management tests last
   (they empty the namespace first).
5. Prints passed / failed / skipped and each failure with its error's first line, and
   writes, in ``.sdk-tests/RELEASE/``: ``report.txt`` (one sorted line per test that did
   not pass: diff two runs' reports), ``failures.txt`` (each failure whole),
   ``pytest.log``, ``server.log`` and ``timeline.tsv`` (every 2 s: the server's client
   connections, TCP connections on its AMQP ports, deferred messages, the test running).

Run it with the project's Python (it starts ``aiosb serve`` from this checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiosb
from aiosb.auth import DEV_KEY, DEV_KEY_NAME

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".sdk-tests"
STANDIN = HERE / "standin"
NAMESPACE = "sbemulatorns"
#: What the tests import besides the SDK (the stand-in covers devtools_testutils).
REQUIREMENTS = ["pytest", "pytest-asyncio", "pytest-timeout", "azure-mgmt-servicebus",
                # from 25 on, ResourceManagementClient is no longer in azure.mgmt.resource,
                # where the SDK's preparers import it from
                "azure-mgmt-resource<25", "aiohttp", "websocket-client", "certifi",
                "opentelemetry-sdk", "azure-core-tracing-opentelemetry"]
#: Keys of one right each, for namespace rules with that right only (the stand-in's ARM).
LIMITED_KEYS = {"Send": ("sbsendonly", "c2VuZG9ubHlzZW5kb25seXNlbmRvbmx5c2VuZG9ubHk="),
                "Listen": ("sblistenonly", "bGlzdGVub25seWxpc3Rlbm9ubHlsaXN0ZW5vbmx5bGk=")}
#: The entities of the pre-provisioned namespace (Azure's test-resources template has
#: them; here the run makes them), by the environment variable that names each.
PROVISIONED = {"SERVICEBUS_QUEUE_NAME": "testqueue",
               "SERVICEBUS_SESSION_QUEUE_NAME": "testsessionqueue",
               "SERVICEBUS_TOPIC_NAME": "testtopic",
               "SERVICEBUS_SUBSCRIPTION_NAME": "testsubscription"}


def _pip(python: str, *args: str) -> None:
    done = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"pip {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def fetch(release: str | None) -> tuple[str, Path]:
    """The release's source distribution, downloaded once (the newest 7.x when ``None``:
    pip is asked which that is)."""
    dist = CACHE / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    if release is not None:
        found = sorted(dist.glob(f"azure_servicebus-{release}.tar.gz"))
        if found:
            return release, found[0]
    spec = f"azure-servicebus=={release}" if release else "azure-servicebus>=7,<8"
    out = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "download",
                          spec, "--no-binary", ":all:", "--no-deps", "-d", str(dist)],
                         check=True, capture_output=True, text=True).stdout
    names = re.findall(r"azure_servicebus-([0-9][^\s/]*?)\.tar\.gz", out)
    if not names:
        raise SystemExit(f"pip download named no azure-servicebus sdist:\n{out}")
    return names[-1], dist / f"azure_servicebus-{names[-1]}.tar.gz"


def unpack(release: str, sdist: Path) -> Path:
    """The sdist, unpacked once into ``.sdk-tests/RELEASE/src``; its ``tests/`` as shipped."""
    src = CACHE / release / "src"
    if not (src / "tests").is_dir():
        src.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            top = f"azure_servicebus-{release}/"
            members = [m for m in tar.getmembers() if m.name.startswith(top)]
            for member in members:
                member.name = member.name[len(top):]
            tar.extractall(src, members=[m for m in members if m.name], filter="data")
    return src


def venv(release: str, sdist: Path) -> str:
    """The release's own virtualenv, made once: the SDK from the sdist, and the tools."""
    where = CACHE / release / "venv"
    python = str(where / "bin" / "python")
    stamp = where / ".installed"
    if not stamp.exists():
        print(f"sdk-tests: making {where} (azure-servicebus {release} and its tests' tools)")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(where)], check=True)
        _pip(python, "install", str(sdist), *REQUIREMENTS)
        stamp.write_text(" ".join([release, *REQUIREMENTS]) + "\n")
    return python


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
            out.write("time\tclient_connections\ttcp_on_amqp_ports\tdeferred\tlast_test_ended\n")
            while not self._stop.wait(self.every):
                try:
                    metrics = urllib.request.urlopen(f"{self.server.url}/metrics", timeout=5).read()
                except OSError as exc:
                    out.write(f"{time.time():.1f}\t?\t?\t?\t{exc}\n")
                    continue
                text = metrics.decode()
                connections = re.findall(r"^aiosb_server_connections (\S+)", text, re.M)
                deferred = sum(float(v) for v in re.findall(
                    r'^aiosb_entity_messages\{[^}]*state="deferred"[^}]*\} (\S+)', text, re.M))
                tcp = _tcp_established({self.server.amqp_port, self.server.amqps_port})
                out.write(f"{time.time():.1f}\t{connections[0] if connections else '?'}\t{tcp}"
                          f"\t{deferred:.0f}\t{_last_id(self.results)}\n")
                out.flush()


def _last_id(results: Path) -> str:
    try:
        lines = results.read_text().splitlines()
    except OSError:
        return ""
    return json.loads(lines[-1])["id"] if lines else ""


def test_paths(src: Path, with_sync_queues: bool) -> list[str]:
    """Every test file but the sync ``test_queues.py`` (unless asked) and the unit tests
    (``unittests/``: the SDK against mocks, no server), the management tests last."""
    tests = src / "tests"
    files = sorted(p.relative_to(src).as_posix() for p in tests.rglob("test_*.py")
                   if not {"perf_tests", "unittests"} & set(p.parts))
    if not with_sync_queues:
        files.remove("tests/test_queues.py")
    return ([f for f in files if "/mgmt_tests/" not in f]
            + [f for f in files if "/mgmt_tests/" in f])


def run_tests(python: str, src: Path, server: Server, out: Path, args: argparse.Namespace
              ) -> int:
    """pytest in the release's venv, against ``server``; its output in ``pytest.log``."""
    bundle = out / "bundle.pem"
    certifi = subprocess.run([python, "-c", "import certifi; print(certifi.where())"],
                             check=True, capture_output=True, text=True).stdout.strip()
    bundle.write_text(Path(certifi).read_text() + Path(server.certificate).read_text())
    env = {
        "PATH": f"{Path(python).parent}:/usr/bin:/bin", "HOME": str(Path.home()),
        "PYTHONPATH": str(STANDIN), "AIOSB_PORT_MAP": f"5671={server.amqps_port},"
                                                      f"443={server.amqps_port}",
        "AIOSB_TRUSTED_BUNDLE": str(bundle), "SSL_CERT_FILE": str(bundle),
        "REQUESTS_CA_BUNDLE": str(bundle), "AIOSB_SDK_TESTS_HOST": "localhost",
        "AIOSB_SDK_TESTS_RESULTS": str(out / "results.jsonl"),
        "AIOSB_SDK_TESTS_KEYS": ",".join(f"{right}={name}:{key}"
                                         for right, (name, key) in LIMITED_KEYS.items()),
        # The namespace's host has no suffix: the port map stands for DNS (sitecustomize).
        "SERVICEBUS_ENDPOINT_SUFFIX": "", "AZURE_TEST_RUN_LIVE": "true",
        "SERVICEBUS_CONNECTION_STR": f"Endpoint=sb://localhost/;SharedAccessKeyName="
                                     f"{DEV_KEY_NAME};SharedAccessKey={DEV_KEY}",
        "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": "localhost",
        "SERVICEBUS_SAS_POLICY": DEV_KEY_NAME, "SERVICEBUS_SAS_KEY": DEV_KEY,
        "SERVICEBUS_SESSION_QUEUE_SAS_POLICY": DEV_KEY_NAME,
        "SERVICEBUS_SESSION_QUEUE_SAS_KEY": DEV_KEY, "SERVICEBUS_SESSION_ID": "session-1",
        **PROVISIONED,
    }
    chosen = [a for a in args.pytest_args if a.startswith("tests/")]
    command = [python, "-m", "pytest", "-c", str(STANDIN / "pytest.ini"), "--rootdir", str(src),
               "-p", "devtools_testutils.plugin", "-p",
               "no:cacheprovider", f"--timeout={args.timeout}", "-rN", "-q",
               *(chosen or test_paths(src, args.with_sync_queues)),
               *(a for a in args.pytest_args if a not in chosen)]
    with (out / "pytest.log").open("w") as log:
        return subprocess.run(command, cwd=src, env=env, stdout=log,
                              stderr=subprocess.STDOUT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev sdk-tests", description=__doc__.split("\n\n")[0])
    parser.add_argument("release", nargs="?", help="azure-servicebus release (default: the "
                        "newest 7.x on PyPI)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test (300)")
    parser.add_argument("--with-sync-queues", action="store_true",
                        help="run the synchronous test_queues.py too (about as long again)")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments "
                        "(-k EXPR; test files or ids, tests/..., to run only those)")
    args = parser.parse_args(argv)
    release, sdist = fetch(args.release)
    src = unpack(release, sdist)
    python = venv(release, sdist)
    out = CACHE / release
    results = out / "results.jsonl"
    results.unlink(missing_ok=True)
    server = Server(out / "server.log", CACHE / "tls").start()
    timeline = Timeline(server, out / "timeline.tsv", results)
    started = time.time()
    try:
        asyncio.run(provision(server.url))
        timeline.start()
        print(f"sdk-tests: azure-servicebus {release}'s tests against aiosb serve "
              f"(AMQP over TLS on {server.amqps_port}); the log in {out}/")
        run_tests(python, src, server, out, args)
    finally:
        timeline.stop()
        server.stop()
    from .report import summarize

    return summarize(release, out, time.time() - started)


if __name__ == "__main__":
    sys.exit(main())
