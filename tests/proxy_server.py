"""A real HTTP proxy for the tests: proxy.py (from the package registry) in a process of
its own, on a free port, its access log read back to see what went through it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path


class ProxyServer:
    """``with ProxyServer(tmp_path, auth="user:pw") as proxy:`` listens until the block
    ends; ``proxy.url`` (with the credentials), ``proxy.seen()`` (what went through)."""

    def __init__(self, folder: Path, *, auth: str | None = None, port: int = 0,
                 plugins: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self._folder = folder
        self._auth = auth
        self._port = port
        self._plugins = plugins
        self._env = env
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> ProxyServer:
        port_file, self._log = self._folder / "proxy.port", self._folder / "proxy.log"
        args = [
            sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(self._port),
            "--port-file", str(port_file), "--num-workers", "1", "--num-acceptors", "1",
            "--log-file", str(self._log), "--log-level", "INFO",
        ]
        if self._auth:
            args += ["--basic-auth", self._auth]
        if self._plugins:
            args += ["--plugins", *self._plugins]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL,
                                         env=None if self._env is None else self._env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text())
                with contextlib.suppress(OSError), socket.create_connection(
                        ("127.0.0.1", self.port), timeout=1):
                    return self
            if self._process.poll() is not None:
                raise RuntimeError(f"proxy.py exited: {self._text()[-2000:]}")
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("proxy.py did not start within 30 s")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()

    @property
    def url(self) -> str:
        user = f"{self._auth}@" if self._auth else ""
        return f"http://{user}127.0.0.1:{self.port}"

    @property
    def bare_url(self) -> str:
        """The URL without credentials."""
        return f"http://127.0.0.1:{self.port}"

    def _text(self) -> str:
        try:
            return self._log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def seen(self, wait_for: str | None = None, *, after: int = 0,
             timeout: float = 5.0) -> list[str]:
        """The requests the proxy logged (``CONNECT host:port``, ``GET host:port/path``
        ...; proxy.py logs one when its connection ends), after waiting up to
        ``timeout`` for one past the first ``after`` that contains ``wait_for``."""
        deadline = time.monotonic() + timeout
        while True:
            # "<time> - pid:N [I] server.access_log:N - <client> - CONNECT host:port - ..."
            lines = [line.split(" - ")[3] for line in self._text().splitlines()
                     if "access_log" in line and line.count(" - ") >= 4]
            if wait_for is None or any(wait_for in line for line in lines[after:]) or (
                    time.monotonic() > deadline):
                return lines
            time.sleep(0.05)
