"""The explorer's tests (issue 37): one ``aiosb serve`` for the package, reached over
HTTP by the tests' own client and by a real headless Chromium, driven with Playwright.

The browser is the distribution's ``chromium`` at :data:`CHROMIUM` (``./dev test``
installs it when it is missing); without it the browser tests fail, saying so, rather
than skip: they are what shows that the page works.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.bridge import Bridge
from aiosb.server.process import ServerProcess

#: The browser the tests drive.
CHROMIUM = os.environ.get("AIOSB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
#: Keys of the test server beyond its own (which has every right).
READER, READER_KEY = "reader", "readerKeyForTheExplorerTestsOnly0000000000="
WRITER, WRITER_KEY = "writer", "writerKeyForTheExplorerTestsOnly0000000000="
#: Where the screenshots the documentation shows are written, by :func:`screenshot`, only
#: when AIOSB_UPDATE_SCREENSHOTS=1 (else a test run would rewrite them every time).
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

def unique(name: str) -> str:
    """A namespace for one test: ``name`` the first time, then ``name2``, ``name3`` ...
    (namespaces are made on first use; the server lives as long as the package)."""
    _used[name] = _used.get(name, 0) + 1
    return name if _used[name] == 1 else f"{name}{_used[name]}"


_used: dict[str, int] = {}


@pytest.fixture(scope="package")
def server() -> Iterator[ServerProcess]:
    """One ``aiosb serve`` (HTTP only) with a Listen key and a Send key besides its own."""
    with ServerProcess(args=["--no-amqp", "--listen-key", f"{READER}={READER_KEY}",
                             "--send-key", f"{WRITER}={WRITER_KEY}"]) as running:
        yield running


@pytest.fixture(scope="package")
def bridge() -> Iterator[Bridge]:
    """A loop thread for the tests' own aiosb client (the tests are synchronous, as
    Playwright's synchronous API is)."""
    with Bridge() as running:
        yield running


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One headless Chromium for the package."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: the explorer's browser tests need it "
            "(./dev test installs it with apt-get when it runs as root; else install the "
            "'chromium' package, or set AIOSB_CHROMIUM to a Chromium executable).",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, server: ServerProcess) -> Iterator[Any]:
    """A fresh browser context and page (no cookie of another test); the test fails if
    the page's script threw."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert not errors, f"the page's script threw: {errors}"


@pytest.fixture
def sign_in(page: Any, server: ServerProcess) -> Callable[..., Any]:
    """Open the explorer and sign in (with the server's own key unless told)."""

    def signing_in(key_name: str = DEV_KEY_NAME, key: str = DEV_KEY) -> Any:
        page.goto(f"{server.url}/explorer/")
        page.fill("#key-name", key_name)
        page.fill("#key", key)
        page.click("#signin-form button[type=submit]")
        page.wait_for_selector("#app:not([hidden])")
        return page

    return signing_in


def screenshot(page: Any, name: str) -> Path:
    """Take a screenshot of the page, ``explorer-{name}.png``, and say where it went.

    It is always taken (the rendering stays exercised), but written to the committed
    pictures the docs show, :data:`IMAGES`, only when the environment variable
    ``AIOSB_UPDATE_SCREENSHOTS`` is ``1``; otherwise to a temporary directory, so an
    ordinary test run leaves ``git status`` clean. To refresh the pictures after a
    change to the page (docs/explorer.md says so too)::

        AIOSB_UPDATE_SCREENSHOTS=1 .venv/bin/python -m pytest tests/browser -q
    """
    global _scratch
    if os.environ.get("AIOSB_UPDATE_SCREENSHOTS") == "1":
        folder = IMAGES
        folder.mkdir(parents=True, exist_ok=True)
    else:
        if _scratch is None:
            _scratch = Path(tempfile.mkdtemp(prefix="aiosb-explorer-screenshots-"))
        folder = _scratch
    path = folder / f"explorer-{name}.png"
    page.screenshot(path=str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no picture at {path}"
    return path


#: Where screenshots go when the committed pictures are not being updated (one
#: temporary directory a run).
_scratch: Path | None = None
