"""Microsoft's own live tests for ``azure-servicebus`` against ``aiosb serve``:
``./dev sdk-tests [RELEASE] [--timeout S] [-- PYTEST ARGS]`` (issue #47).

1. Fetches the release's source distribution from PyPI (default: the newest 7.x) into
   ``.sdk-tests/dist/`` and unpacks its ``tests/``, which are never modified.
2. Makes a virtualenv of its own (``.sdk-tests/RELEASE/venv``, kept between runs) with
   that release and what its tests import. ``devtools_testutils`` (Azure's repository,
   not on PyPI) is the stand-in beside this file, ``standin/``, on ``PYTHONPATH``.
3. Runs every test file of ``tests/`` but the synchronous ``test_queues.py`` (its aio
   twin runs whole; ``--with-sync-queues`` runs it too) and ``unittests/`` (the SDK
   against mocks), in ``--jobs`` groups at once (3: the management tests, which empty
   their namespace first, in one; the rest spread by size). Each group has an
   ``aiosb serve`` of its own on free ports (:mod:`.serving`: its log, metrics, keys of
   one right each, a pre-provisioned namespace's entities) and one pytest, running its
   tests one at a time, each with a timeout.
4. Prints passed / failed / skipped and each failure with its error's first line, and
   writes, in ``.sdk-tests/RELEASE/``: ``report.txt`` (one sorted line per test that did
   not pass: diff two runs' reports) and ``failures.txt`` (each failure whole); and in
   ``job*/`` each group's ``pytest.log``, ``server.log`` and ``timeline.tsv`` (every 2 s:
   the server's HTTP connections, the TCP connections on its AMQP ports (AMQP, and
   management over HTTPS there), the files it holds open, its deferred messages, and the
   last test ended).

Run it with the project's Python (it starts ``aiosb serve`` from this checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiosb.auth import DEV_KEY, DEV_KEY_NAME

from .serving import LIMITED_KEYS, PROVISIONED, Server, Timeline, provision

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".sdk-tests"
STANDIN = HERE / "standin"
#: What the tests import besides the SDK (the stand-in covers devtools_testutils).
REQUIREMENTS = ["pytest", "pytest-asyncio", "pytest-timeout", "azure-mgmt-servicebus",
                # from 25 on, ResourceManagementClient is no longer in azure.mgmt.resource,
                # where the SDK's preparers import it from
                "azure-mgmt-resource<25", "aiohttp", "websocket-client", "certifi",
                "opentelemetry-sdk", "azure-core-tracing-opentelemetry"]


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


def test_files(src: Path, with_sync_queues: bool) -> list[str]:
    """Every test file but the sync ``test_queues.py`` (unless asked) and the unit tests
    (``unittests/``: the SDK against mocks, no server)."""
    files = sorted(p.relative_to(src).as_posix() for p in (src / "tests").rglob("test_*.py")
                   if not {"perf_tests", "unittests"} & set(p.parts))
    if not with_sync_queues:
        files.remove("tests/test_queues.py")
    return files


def plan(src: Path, files: list[str], jobs: int) -> list[list[str]]:
    """The files in ``jobs`` groups, each for a server of its own: the management tests
    in one (they empty their namespace first, which would take the others' entities), the
    rest spread by size (the tests mostly wait: ``max_wait_time``, lock expiries)."""
    def size(test: str) -> int:  # a file, or a test id in it
        return (src / test.split("::", 1)[0]).stat().st_size

    mgmt = [f for f in files if "/mgmt_tests/" in f]
    rest = sorted((f for f in files if f not in mgmt), key=lambda f: -size(f))
    groups: list[list[str]] = [[] for _ in range(max(1, jobs - 1 if mgmt else jobs))]
    sizes = [0] * len(groups)
    for f in rest:
        smallest = sizes.index(min(sizes))
        groups[smallest].append(f)
        sizes[smallest] += size(f)
    if mgmt and jobs > 1:
        groups.append(mgmt)
    elif mgmt:
        groups[0] += mgmt  # one server: the management tests last
    # in each group, the order given (the files' order, or the ids' as the user gave them)
    return [sorted(g, key=lambda f: ("/mgmt_tests/" in f, files.index(f))) for g in groups if g]


def run_job(python: str, src: Path, out: Path, files: list[str], args: argparse.Namespace
            ) -> None:
    """One server, and pytest in the release's venv against it, on ``files``."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    results.unlink(missing_ok=True)
    server = Server(out / "server.log", CACHE / "tls").start()
    timeline = Timeline(server, out / "timeline.tsv", results)
    try:
        asyncio.run(provision(server.url))
        timeline.start()
        bundle = out / "bundle.pem"
        certifi = subprocess.run([python, "-c", "import certifi; print(certifi.where())"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        bundle.write_text(Path(certifi).read_text() + Path(server.certificate).read_text())
        command = [python, "-m", "pytest", "-c", str(STANDIN / "pytest.ini"), "--rootdir",
                   str(src), "-p", "devtools_testutils.plugin", "-p", "no:cacheprovider",
                   f"--timeout={args.timeout}", "-rN", "-q", *files,
                   *(a for a in args.pytest_args if not a.startswith("tests/"))]
        with (out / "pytest.log").open("w") as log:
            subprocess.run(command, cwd=src, env=environment(server, bundle, results),
                           stdout=log, stderr=subprocess.STDOUT)
    finally:
        timeline.stop()
        server.stop()


def environment(server: Server, bundle: Path, results: Path) -> dict[str, str]:
    """What the tests and the stand-in read: the namespace, its keys and entities, the
    port map and the trust (``standin/sitecustomize.py``)."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(Path.home()),
        "PYTHONPATH": str(STANDIN), "AIOSB_PORT_MAP": f"5671={server.amqps_port},"
                                                      f"443={server.amqps_port}",
        "AIOSB_TRUSTED_BUNDLE": str(bundle), "SSL_CERT_FILE": str(bundle),
        "REQUESTS_CA_BUNDLE": str(bundle), "AIOSB_SDK_TESTS_HOST": "localhost",
        "AIOSB_SDK_TESTS_RESULTS": str(results),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev sdk-tests", description=__doc__.split("\n\n")[0])
    parser.add_argument("release", nargs="?", help="azure-servicebus release (default: the "
                        "newest 7.x on PyPI)")
    parser.add_argument("--timeout", type=int, default=420, help="seconds per test (420: "
                        "the longest test waits 305 s by design)")
    parser.add_argument("--jobs", type=int, default=3, help="servers, each with its own "
                        "pytest on a share of the files, at once (3; 1: one after another)")
    parser.add_argument("--with-sync-queues", action="store_true",
                        help="run the synchronous test_queues.py too (about as long again)")
    parser.add_argument("--out", type=Path, help="where the logs and reports go (default: "
                        ".sdk-tests/RELEASE/)")
    parser.epilog = ("After --, more pytest arguments: -k EXPR, or test files or ids "
                     "(tests/...) to run only those.")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.pytest_args = argv[split + 1:]
    release, sdist = fetch(args.release)
    src = unpack(release, sdist)
    python = venv(release, sdist)
    out = (args.out or CACHE / release).resolve()
    chosen = [a for a in args.pytest_args if a.startswith("tests/")]
    groups = plan(src, chosen or test_files(src, args.with_sync_queues), args.jobs)
    jobs = [out / f"job{k}" for k in range(len(groups))]
    for old in out.glob("job*"):
        shutil.rmtree(old)
    print(f"sdk-tests: azure-servicebus {release}'s tests against aiosb serve, "
          f"{len(groups)} server(s) at once; logs in {out}/job*/")
    started = time.time()
    with ThreadPoolExecutor(len(groups)) as pool:
        list(pool.map(lambda job: run_job(python, src, *job, args), zip(jobs, groups,
                                                                         strict=True)))
    from .report import summarize

    return summarize(release, out, jobs, time.time() - started)


if __name__ == "__main__":
    sys.exit(main())
