"""A module of real-clock tests run by a pytest of its own, beside the rest of the
suite (``runs_in_background``, tests/conftest.py): tests that mostly wait on the wall
clock (locks held past their duration, scheduled times) cost the suite their waits
only once, in parallel with everything else, not in turn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class PytestRun:
    """``pytest`` on ``target`` (a path from the repository's root), in a subprocess
    started when the session has collected the test that waits for it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
             self.target],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()

    def result(self, timeout: float) -> tuple[int, str]:
        """The run's exit code and output, once it has ended (``timeout`` s at most)."""
        if self._proc is None:  # collected, but the session did not start it (-k ...)
            self.start()
        assert self._proc is not None
        out, _ = self._proc.communicate(timeout=timeout)
        return self._proc.returncode, out
