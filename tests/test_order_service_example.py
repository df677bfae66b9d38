"""The order service of docs/testing-official-sdk.md (#51): its tests, which use only
``azure.servicebus`` and the ``aiosb_server`` fixture, pass as written, run by pytest in
a process of their own (in the background, beside the rest of the suite: the SDK takes
about 20 s for them); and the page shows those very files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "order_service"
PAGE = ROOT / "docs" / "testing-official-sdk.md"
SECONDS = 240


class ExampleRun:
    """``pytest examples/order_service``, started once the session has collected."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        if self._proc is None:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(EXAMPLE)],
                cwd=EXAMPLE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)

    def result(self, timeout: float) -> tuple[int, str]:
        self.start()
        assert self._proc is not None
        out, _ = self._proc.communicate(timeout=timeout)
        return self._proc.returncode, out

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)


RUN = ExampleRun()


@pytest.mark.timeout(SECONDS + 30)
@pytest.mark.runs_in_background(RUN)
def test_the_order_service_example_passes_as_written():
    """Issue #51: every test of examples/order_service passes (a round trip,
    dead-lettering, sessions, a scheduled message, an injected outage)."""
    pytest.importorskip("azure.servicebus")
    code, out = RUN.result(timeout=SECONDS)
    assert code == 0, out[-6000:]
    assert "5 passed" in out, out[-2000:]


#: A fenced block that includes a file whole (pymdownx.snippets), titled with its path.
INCLUDED = re.compile(r'^```(python|ini) title="([^"]+)"\n--8<-- "([^"]+)"\n```$', re.M)


def test_the_page_shows_the_example_files():
    """Issue #51: the page includes the files the test above runs, whole (snippets),
    so what a reader copies is what runs; every other block of the page is a
    ```python block that tests/test_readme.py runs (none hides behind a title)."""
    text = PAGE.read_text()
    included = {(title, path) for _, title, path in INCLUDED.findall(text)}
    files = sorted(str(p.relative_to(ROOT)) for p in EXAMPLE.iterdir() if p.is_file())
    assert sorted(path for _, path in included) == files
    assert all(title == path for title, path in included)
    others = [line for line in re.findall(r"^```\S.*$", INCLUDED.sub("", text), re.M)
              if line not in ("```python", "```ini")]
    assert others == []
