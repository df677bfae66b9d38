"""A virtual environment for each release of the official Python SDK (#47): made on
first use, with ``python -m venv`` and pip from PyPI, and kept between runs in
``.venv-sdk/<release>/`` (git-ignored), keyed by the release so that a second run reuses
it.

A venv is taken as made only once its marker file is written, the last step, after its
Python has imported the SDK and named the release asked for: a run cut short leaves no
marker, and the next run makes that venv afresh. A lock file per release keeps two test
runs from making one venv at once.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["HOME", "PACKAGES", "newest", "python_of"]

ROOT = Path(__file__).resolve().parents[2]
#: Where the venvs live: beside the repository's own .venv, git-ignored.
HOME = ROOT / ".venv-sdk"
#: What each venv holds besides the SDK: the aio administration client's HTTP transport.
PACKAGES = ("aiohttp",)
_MARKER = ".aiosb-ready"
#: seconds: making one venv (pip from PyPI, on a slow day).
INSTALL_SECONDS = 600
_RELEASE = re.compile(r"\d+(\.\d+)*")


def python_of(release: str) -> Path:
    """The Python of the venv holding azure-servicebus ``release``, made if need be.

    Raises:
        RuntimeError: The venv could not be made (pip's output says why).
    """
    if not _RELEASE.fullmatch(release):
        raise ValueError(f"not a release: {release!r}")
    home = HOME / release
    python = home / "bin" / "python"
    HOME.mkdir(exist_ok=True)
    with open(HOME / f"{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / _MARKER).is_file() and python.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)  # half made: made again, whole
        _run([sys.executable, "-m", "venv", str(home)])
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"azure-servicebus=={release}", *PACKAGES])
        found = _run([str(python), "-c", "import importlib.metadata as m, azure.servicebus.aio;"
                      "print(m.version('azure-servicebus'))"]).strip()
        if found != release:
            raise RuntimeError(f"{home} holds azure-servicebus {found}, not {release}")
        (home / _MARKER).write_text(json.dumps({"azure-servicebus": release}) + "\n")
        return python


def newest(requirement: str) -> str:
    """The release pip installs for ``requirement`` (``azure-servicebus<8``): one look-up
    on the index, nothing installed.

    Raises:
        RuntimeError: pip could not resolve it (no index, say).
    """
    report = json.loads(_run([
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--dry-run", "--ignore-installed", "--no-deps", "--report", "-", requirement]))
    return str(report["install"][0]["metadata"]["version"])


def _run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_SECONDS,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout
